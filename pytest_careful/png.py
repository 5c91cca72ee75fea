"""A grouped bar chart of BFCL accuracy against safe accuracy, as PNG bytes.

Stdlib only (zlib, struct) so that a scorecard can carry a picture without
pulling in matplotlib or Pillow. The chart is drawn into an RGB pixel buffer
with a built-in 5x7 bitmap font and written with filter type 0 on every
scanline, which keeps the encoder tiny and the output byte-for-byte
deterministic for a given input (and zlib build).

All functions here are pure: no I/O, no global state.
"""

from __future__ import annotations

import math
import struct
import zlib

__all__ = ["BFCL_COLOUR", "PLOT_TOP", "SAFE_COLOUR", "bar_chart_png"]

Colour = tuple[int, int, int]
Bar = tuple[str, float, float]

BFCL_COLOUR: Colour = (66, 114, 196)
SAFE_COLOUR: Colour = (237, 125, 49)
_WHITE: Colour = (255, 255, 255)
_TEXT: Colour = (33, 33, 33)
_AXIS: Colour = (80, 80, 80)
_GRID: Colour = (222, 222, 222)

# Text is drawn at 2x: a 5x7 glyph becomes 10x14 and advances 12 px.
_SCALE = 2
_GLYPH_W, _GLYPH_H = 5, 7
_ADVANCE = (_GLYPH_W + 1) * _SCALE
_TEXT_H = _GLYPH_H * _SCALE
_LINE_H = _TEXT_H + 4

# Layout, in pixels. PLOT_TOP is public so that tests can tell bars (below
# it) from legend swatches (above it), which share the bar colours.
PLOT_TOP = 84
_PLOT_H = 280
_LEFT = 70  # room for "100%" right-aligned against the y axis
_RIGHT = 24
_BAR_W = 56  # wide enough that "100.0" above a bar clears its neighbour's label
_BAR_GAP = 4
_GROUP_GAP = 40
_GROUP_W = 2 * _BAR_W + _BAR_GAP + _GROUP_GAP
_MIN_WIDTH = 640
_TITLE_Y = 12
_LEGEND_Y = 42

# 5x7 glyphs, one 5-bit row each, top row first (bit 4 is the leftmost pixel).
# Lower case is drawn as upper case; anything else unknown is drawn as "?".
_FONT: dict[str, tuple[int, ...]] = {
    "A": (0x0E, 0x11, 0x11, 0x11, 0x1F, 0x11, 0x11),
    "B": (0x1E, 0x11, 0x11, 0x1E, 0x11, 0x11, 0x1E),
    "C": (0x0E, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0E),
    "D": (0x1C, 0x12, 0x11, 0x11, 0x11, 0x12, 0x1C),
    "E": (0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x1F),
    "F": (0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x10),
    "G": (0x0E, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0F),
    "H": (0x11, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11),
    "I": (0x0E, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E),
    "J": (0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0C),
    "K": (0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11),
    "L": (0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1F),
    "M": (0x11, 0x1B, 0x15, 0x15, 0x11, 0x11, 0x11),
    "N": (0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11),
    "O": (0x0E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E),
    "P": (0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10, 0x10),
    "Q": (0x0E, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0D),
    "R": (0x1E, 0x11, 0x11, 0x1E, 0x14, 0x12, 0x11),
    "S": (0x0F, 0x10, 0x10, 0x0E, 0x01, 0x01, 0x1E),
    "T": (0x1F, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04),
    "U": (0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E),
    "V": (0x11, 0x11, 0x11, 0x11, 0x11, 0x0A, 0x04),
    "W": (0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0A),
    "X": (0x11, 0x11, 0x0A, 0x04, 0x0A, 0x11, 0x11),
    "Y": (0x11, 0x11, 0x11, 0x0A, 0x04, 0x04, 0x04),
    "Z": (0x1F, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1F),
    "0": (0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E),
    "1": (0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E),
    "2": (0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F),
    "3": (0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E),
    "4": (0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02),
    "5": (0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E),
    "6": (0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E),
    "7": (0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08),
    "8": (0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E),
    "9": (0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C),
    ".": (0x00, 0x00, 0x00, 0x00, 0x00, 0x0C, 0x0C),
    ",": (0x00, 0x00, 0x00, 0x00, 0x0C, 0x04, 0x08),
    "_": (0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x1F),
    "-": (0x00, 0x00, 0x00, 0x1F, 0x00, 0x00, 0x00),
    "%": (0x18, 0x19, 0x02, 0x04, 0x08, 0x13, 0x03),
    "/": (0x00, 0x01, 0x02, 0x04, 0x08, 0x10, 0x00),
    "(": (0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02),
    ")": (0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08),
    "+": (0x00, 0x04, 0x04, 0x1F, 0x04, 0x04, 0x00),
    ":": (0x00, 0x0C, 0x0C, 0x00, 0x0C, 0x0C, 0x00),
    "=": (0x00, 0x00, 0x1F, 0x00, 0x1F, 0x00, 0x00),
    "?": (0x0E, 0x11, 0x01, 0x02, 0x04, 0x00, 0x04),
    " ": (0x00,) * 7,
}


class _Canvas:
    """An RGB pixel buffer; drawing outside it is silently clipped."""

    def __init__(self, width: int, height: int) -> None:
        self.width = width
        self.height = height
        self.pixels = bytearray(bytes(_WHITE) * (width * height))

    def rect(self, x0: int, y0: int, x1: int, y1: int, colour: Colour) -> None:
        """Fill the half-open rectangle [x0, x1) x [y0, y1)."""
        x0, x1 = max(x0, 0), min(x1, self.width)
        if x1 <= x0:
            return
        row = bytes(colour) * (x1 - x0)
        for y in range(max(y0, 0), min(y1, self.height)):
            start = (y * self.width + x0) * 3
            self.pixels[start:start + len(row)] = row

    def text(self, x: int, y: int, text: str, colour: Colour) -> None:
        """Draw ``text`` with its top-left corner at (x, y)."""
        for i, char in enumerate(text):
            self._glyph(x + i * _ADVANCE, y, _glyph_rows(char), colour)

    def _glyph(self, x: int, y: int, rows: tuple[int, ...], colour: Colour) -> None:
        for r, bits in enumerate(rows):
            for c in range(_GLYPH_W):
                if bits & (1 << (_GLYPH_W - 1 - c)):
                    px, py = x + c * _SCALE, y + r * _SCALE
                    self.rect(px, py, px + _SCALE, py + _SCALE, colour)


def _glyph_rows(char: str) -> tuple[int, ...]:
    return _FONT.get(char.upper(), _FONT["?"])


def _text_width(text: str) -> int:
    # The last glyph needs no trailing spacing column.
    return max(len(text) * _ADVANCE - _SCALE, 0)


def _clamp(value: float) -> float:
    # NaN compares false with everything, so min/max alone would let it through.
    if isinstance(value, float) and math.isnan(value):
        return 0.0
    return min(max(float(value), 0.0), 1.0)


def _wrap(label: str, max_chars: int) -> list[str]:
    """Split a label into lines of at most ``max_chars``, preferring to break
    after "_", "-", "/" or a space so BFCL category names stay legible."""
    lines: list[str] = []
    rest = label
    while len(rest) > max_chars:
        cut = max(rest.rfind(sep, 0, max_chars) for sep in "_-/ ") + 1
        if cut <= 0:
            cut = max_chars
        lines.append(rest[:cut].rstrip())
        rest = rest[cut:].lstrip()
    return lines + [rest] if rest or not lines else lines


def _percent(value: float) -> str:
    return f"{value * 100:.1f}"


def _bar_top(value: float) -> int:
    """Row of the top pixel of a bar (the x axis sits at PLOT_TOP + _PLOT_H)."""
    return PLOT_TOP + _PLOT_H - round(value * _PLOT_H)


def _draw_grid(canvas: _Canvas, plot_right: int) -> None:
    for percent in (0, 25, 50, 75, 100):
        y = _bar_top(percent / 100)
        canvas.rect(_LEFT, y, plot_right, y + 1, _GRID)
        label = f"{percent}%"
        canvas.text(_LEFT - 8 - _text_width(label), y - _TEXT_H // 2, label, _TEXT)


def _draw_axes(canvas: _Canvas, plot_right: int) -> None:
    axis_y = PLOT_TOP + _PLOT_H
    canvas.rect(_LEFT, PLOT_TOP, _LEFT + 1, axis_y + 1, _AXIS)
    canvas.rect(_LEFT, axis_y, plot_right, axis_y + 1, _AXIS)


def _draw_bar(canvas: _Canvas, x: int, value: float, colour: Colour) -> None:
    top, axis_y = _bar_top(value), PLOT_TOP + _PLOT_H
    # A zero bar has top == axis_y and so fills nothing above the axis.
    canvas.rect(x, top, x + _BAR_W, axis_y, colour)
    label = _percent(value)
    label_x = x + (_BAR_W - _text_width(label)) // 2
    canvas.text(label_x, top - 4 - _TEXT_H, label, _TEXT)


def _draw_group(canvas: _Canvas, x: int, bar: Bar, lines: list[str]) -> None:
    _, bfcl, safe = bar
    _draw_bar(canvas, x, _clamp(bfcl), BFCL_COLOUR)
    _draw_bar(canvas, x + _BAR_W + _BAR_GAP, _clamp(safe), SAFE_COLOUR)
    centre = x + _BAR_W + _BAR_GAP // 2
    for i, line in enumerate(lines):
        y = PLOT_TOP + _PLOT_H + 10 + i * _LINE_H
        canvas.text(centre - _text_width(line) // 2, y, line, _TEXT)


def _draw_legend(canvas: _Canvas, right: int) -> None:
    x = right
    # Laid out right to left so the legend hugs the right edge of the plot.
    for name, colour in (("safe", SAFE_COLOUR), ("BFCL", BFCL_COLOUR)):
        x -= _text_width(name)
        canvas.text(x, _LEGEND_Y, name, _TEXT)
        x -= 6 + _TEXT_H
        canvas.rect(x, _LEGEND_Y, x + _TEXT_H, _LEGEND_Y + _TEXT_H, colour)
        x -= 20


def _draw_title(canvas: _Canvas, title: str) -> None:
    x = (canvas.width - _text_width(title)) // 2
    canvas.text(x, _TITLE_Y, title, _TEXT)


def _encode(canvas: _Canvas) -> bytes:
    """PNG bytes for the canvas: 8-bit RGB, filter type 0 on every row."""
    stride = canvas.width * 3
    raw = b"".join(
        b"\x00" + bytes(canvas.pixels[y * stride:(y + 1) * stride])
        for y in range(canvas.height)
    )
    ihdr = struct.pack(">IIBBBBB", canvas.width, canvas.height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", ihdr)
        + _chunk(b"IDAT", zlib.compress(raw, 9))
        + _chunk(b"IEND", b"")
    )


def _chunk(kind: bytes, data: bytes) -> bytes:
    crc = zlib.crc32(kind + data) & 0xFFFFFFFF
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)


def bar_chart_png(
    bars: list[tuple[str, float, float]],
    title: str = "BFCL vs success under effect safety",
) -> bytes:
    """Render a grouped bar chart: per category, BFCL accuracy beside safe accuracy.

    Each entry of ``bars`` is ``(label, bfcl_accuracy, safe_accuracy)`` with
    accuracies in [0, 1]; values outside are clamped (NaN counts as 0). An
    empty list yields the axes, gridlines, legend and title only.
    """
    label_lines = [_wrap(label, _GROUP_W // _ADVANCE) for label, _, _ in bars]
    rows = max((len(lines) for lines in label_lines), default=1)
    width = max(
        _MIN_WIDTH, _LEFT + len(bars) * _GROUP_W + _RIGHT, _text_width(title) + 32)
    plot_w = width - _LEFT - _RIGHT
    height = PLOT_TOP + _PLOT_H + 10 + rows * _LINE_H + 8
    canvas = _Canvas(width, height)
    plot_right = _LEFT + plot_w
    _draw_title(canvas, title)
    _draw_legend(canvas, plot_right)
    _draw_grid(canvas, plot_right)
    # Groups are centred in the plot when there are fewer than fill it.
    x = _LEFT + (plot_w - len(bars) * _GROUP_W) // 2 + _GROUP_GAP // 2
    for bar, lines in zip(bars, label_lines):
        _draw_group(canvas, x, bar, lines)
        x += _GROUP_W
    _draw_axes(canvas, plot_right)
    return _encode(canvas)
