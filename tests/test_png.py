"""The PNG bar chart: a valid file, bars of the right relative height, stable bytes.

The PNG is decoded here with zlib + struct alone; the renderer writes filter
type 0 on every scanline, so the decoder refuses any other filter.
"""

from __future__ import annotations

import struct
import zlib

import pytest

from pytest_careful.png import BFCL_COLOUR, PLOT_TOP, SAFE_COLOUR, bar_chart_png

SIGNATURE = b"\x89PNG\r\n\x1a\n"
Pixels = list[list[tuple[int, int, int]]]


def chunks(png: bytes) -> list[tuple[bytes, bytes]]:
    """(type, data) of each chunk, checking every CRC on the way."""
    assert png[:8] == SIGNATURE
    out, pos = [], 8
    while pos < len(png):
        (length,) = struct.unpack(">I", png[pos:pos + 4])
        kind = png[pos + 4:pos + 8]
        data = png[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", png[pos + 8 + length:pos + 12 + length])
        assert crc == zlib.crc32(kind + data) & 0xFFFFFFFF, kind
        out.append((kind, data))
        pos += 12 + length
    assert pos == len(png)
    return out


def decode(png: bytes) -> Pixels:
    """Rows of (r, g, b) pixels of an 8-bit RGB, filter-0, non-interlaced PNG."""
    parts = chunks(png)
    assert parts[0][0] == b"IHDR" and parts[-1] == (b"IEND", b"")
    width, height, depth, colour_type, comp, filt, interlace = struct.unpack(
        ">IIBBBBB", parts[0][1])
    assert (depth, colour_type, comp, filt, interlace) == (8, 2, 0, 0, 0)
    raw = zlib.decompress(b"".join(d for k, d in parts if k == b"IDAT"))
    stride = 1 + 3 * width
    assert len(raw) == stride * height
    rows = []
    for y in range(height):
        line = raw[y * stride:(y + 1) * stride]
        assert line[0] == 0, f"row {y} uses filter {line[0]}"
        rows.append([tuple(line[1 + 3 * x:4 + 3 * x]) for x in range(width)])
    return rows


def bar_heights(pixels: Pixels, colour: tuple[int, int, int]) -> list[int]:
    """Height of each bar of ``colour``, left to right, from runs of columns that
    hold that colour below PLOT_TOP (the legend swatches sit above it)."""
    counts = [
        sum(1 for row in pixels[PLOT_TOP:] if row[x] == colour)
        for x in range(len(pixels[0]))
    ]
    heights, current = [], 0
    for count in counts + [0]:
        if count:
            current = max(current, count)
        elif current:
            heights.append(current)
            current = 0
    return heights


def colour_below_plot_top(pixels: Pixels, colour: tuple[int, int, int]) -> int:
    return sum(row.count(colour) for row in pixels[PLOT_TOP:])


SAMPLE = [
    ("multi_turn_base", 0.725, 0.61),
    ("multi_turn_miss_func", 0.5, 0.312),
    ("multi_turn_long_context", 1.0, 0.88),
]


def test_signature_ihdr_and_crcs() -> None:
    png = bar_chart_png(SAMPLE)
    assert png.startswith(SIGNATURE)
    kinds = [k for k, _ in chunks(png)]
    assert kinds[0] == b"IHDR" and kinds[-1] == b"IEND" and b"IDAT" in kinds
    width, height = struct.unpack(">II", chunks(png)[0][1][:8])
    pixels = decode(png)
    assert (len(pixels[0]), len(pixels)) == (width, height)
    assert 640 <= width <= 2000 and 300 <= height <= 600


def test_background_is_white() -> None:
    pixels = decode(bar_chart_png(SAMPLE))
    assert pixels[0][0] == pixels[-1][-1] == (255, 255, 255)


def test_higher_value_draws_a_taller_bar() -> None:
    pixels = decode(bar_chart_png([("a", 0.8, 0.3), ("b", 0.2, 0.9)]))
    bfcl = bar_heights(pixels, BFCL_COLOUR)
    safe = bar_heights(pixels, SAFE_COLOUR)
    assert len(bfcl) == len(safe) == 2
    assert bfcl[0] > safe[0] and bfcl[1] < safe[1]
    assert bfcl[0] > bfcl[1] and safe[1] > safe[0]
    # Heights are proportional to the values.
    assert bfcl[0] / safe[0] == pytest.approx(0.8 / 0.3, rel=0.02)
    assert safe[1] / bfcl[1] == pytest.approx(0.9 / 0.2, rel=0.02)


def test_zero_draws_no_bar() -> None:
    pixels = decode(bar_chart_png([("a", 0.5, 0.0)]))
    assert colour_below_plot_top(pixels, SAFE_COLOUR) == 0
    assert colour_below_plot_top(pixels, BFCL_COLOUR) > 0
    # The legend still shows both colours.
    assert any(SAFE_COLOUR in row for row in pixels[:PLOT_TOP])


def test_output_is_deterministic() -> None:
    assert bar_chart_png(SAMPLE) == bar_chart_png(list(SAMPLE))
    assert bar_chart_png(SAMPLE) != bar_chart_png(SAMPLE, title="other")


def test_empty_input_renders_axes_and_title_only() -> None:
    pixels = decode(bar_chart_png([]))
    assert len(pixels[0]) == 640
    assert colour_below_plot_top(pixels, BFCL_COLOUR) == 0
    assert colour_below_plot_top(pixels, SAFE_COLOUR) == 0
    white = (255, 255, 255)
    assert any(p != white for row in pixels[:PLOT_TOP // 2] for p in row)  # title
    assert any(p != white for row in pixels[PLOT_TOP:] for p in row)  # axes


def test_values_are_clamped() -> None:
    assert bar_chart_png([("a", 1.7, -0.5)]) == bar_chart_png([("a", 1.0, 0.0)])
    assert bar_chart_png([("a", float("nan"), float("inf"))]) == bar_chart_png(
        [("a", 0.0, 1.0)])


def test_width_grows_with_categories() -> None:
    few = decode(bar_chart_png(SAMPLE[:1]))
    many = decode(bar_chart_png([(f"c{i}", 0.5, 0.5) for i in range(12)]))
    assert len(many[0]) > len(few[0])
    assert len(bar_heights(many, BFCL_COLOUR)) == 12
