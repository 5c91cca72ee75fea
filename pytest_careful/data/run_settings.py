"""How a logged run was made, and which protocol it may be rescored under.

A live run records its settings in ``careful_settings.json`` beside its
``multi_turn/`` folder (the result files stay exactly BFCL's), the protocol as
``condition``. A folder without one is a plain ``bfcl generate`` run: BFCL's
standard protocol. Rescoring a run under another protocol than it was made
under writes a scorecard of one protocol's output under the other's name (a
standard run rescored as ``confirm`` gives a "confirm" scorecard identical to
the standard one), so it is refused.

A confirm run may be rescored with a stricter ``--careful-user-script`` than it
was made under: its answers are then re-examined under that script (seed, § 7),
and the scorecard still says which script the run was made under.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..common.bfcl import GROUP_DIR

SETTINGS_FILE = "careful_settings.json"
PLAIN_BFCL = "standard"  # what a run without a settings file was made under
#: The bfcl-eval registry key whose handler made (and decodes) the run, recorded by live runs.
DECODER_KEY = "decoder"
#: How deep under --careful-results settings files are looked for (<protocol>/<model>/careful_settings.json).
_SEARCH_DEPTH = 3


class SettingsError(ValueError):
    """A settings file that cannot be read, or that names no protocol."""


#: The fields ``RunSettings`` knows, with the JSON types each must have to be read as given.
_FIELDS: dict[str, tuple[type, ...]] = {
    "decoder": (str,),
    "boundary": (str,),
    "detector": (str,),
    "user_script": (str,),
    "temperature": (int, float),
    "max_output_tokens": (int,),
}


def _is(value: object, types: tuple[type, ...]) -> bool:
    return isinstance(value, types) and not isinstance(value, bool)  # JSON's true is no number


@dataclass(frozen=True)
class RunSettings:
    """``careful_settings.json``: how a live run made its entries, typed.

    ``to_json``/``from_json`` are the one place the file is written and read. A field the run did
    not record is None and left out of the file; a key this version does not know, or a known one
    holding another JSON type than its own (a hostile or hand-edited file), is kept in ``other``
    as it was read, so that the file round-trips and a comparison with it (``live.filing.ResultFolders.claim``)
    still sees it.

    Attributes:
        condition: the protocol the run was made under (``standard``, ``hints``, ``confirm``).
        decoder: the bfcl-eval registry key whose handler made and decodes the run.
        boundary: the destructive boundary (protocols that show it: hints, confirm).
        detector, user_script: the confirm protocol's question detector and scripted user's script.
        temperature: what each request carried; None where none is sent (Claude).
        max_output_tokens: the output limit each request carried, where the backend sets one.
    """

    condition: str
    decoder: str | None = None
    boundary: str | None = None
    detector: str | None = None
    user_script: str | None = None
    temperature: float | None = None
    max_output_tokens: int | None = None
    other: Mapping[str, object] = field(default_factory=dict)  # the file's other keys, as read

    def to_json(self) -> dict[str, object]:
        """The file's object: the recorded fields (None ones left out) and ``other`` as read."""
        out: dict[str, object] = dict(self.other)
        out["condition"] = self.condition
        for name in _FIELDS:
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out

    @classmethod
    def from_json(cls, parsed: object, where: Path | str = SETTINGS_FILE) -> RunSettings:
        """The settings of a parsed file; SettingsError when it names no protocol."""
        condition = parsed.get("condition") if isinstance(parsed, dict) else None
        if not isinstance(parsed, dict) or not isinstance(condition, str):
            raise SettingsError(f"{where} does not say which protocol the run was made under (no string 'condition')")
        known = {name for name, types in _FIELDS.items() if _is(parsed.get(name), types)}
        text = {
            name: parsed[name] if name in known else None for name in ("decoder", "boundary", "detector", "user_script")
        }
        return cls(
            condition=condition,
            decoder=text["decoder"],
            boundary=text["boundary"],
            detector=text["detector"],
            user_script=text["user_script"],
            temperature=parsed["temperature"] if "temperature" in known else None,
            max_output_tokens=parsed["max_output_tokens"] if "max_output_tokens" in known else None,
            other={k: v for k, v in parsed.items() if k != "condition" and k not in known},
        )

    @classmethod
    def read(cls, path: Path) -> RunSettings:
        """A settings file; SettingsError naming it for anything that is not one."""
        try:
            parsed = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:  # planted: any bytes
            raise SettingsError(f"cannot read {path}: {type(exc).__name__}: {str(exc)[:200]}") from None
        return cls.from_json(parsed, path)

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_json(), indent=1, sort_keys=True) + "\n", encoding="utf-8")


def settings_path(result_file: Path) -> Path | None:
    """The settings file of the run ``result_file`` belongs to, if it has one."""
    folder = result_file.parent
    candidates = [folder / SETTINGS_FILE]
    if folder.name == GROUP_DIR:  # <model>/multi_turn/BFCL_v4_..._result.json
        candidates.insert(0, folder.parent / SETTINGS_FILE)
    return next((p for p in candidates if p.is_file()), None)


def made_under(path: Path) -> str:
    """The protocol a settings file records (its ``condition``)."""
    return RunSettings.read(path).condition


def recorded(result_files: Iterable[Path]) -> RunSettings | None:
    """The settings a run recorded (the first settings file of its result files); None without one."""
    paths = sorted({p for p in map(settings_path, result_files) if p is not None})
    for path in paths:
        try:
            return RunSettings.read(path)
        except SettingsError:
            continue  # protocol_problem has said why already
    return None


def recorded_decoder(folder: Path) -> str | None:
    """The decoder the plugin's own runs under ``folder`` recorded, when they all name the same one.

    Rescoring a folder a live run wrote then needs no ``--careful-decoder``; a plain
    ``bfcl generate`` folder (no settings file) or one whose runs disagree gives None.
    """
    found: set[str | None] = set()
    for depth in range(_SEARCH_DEPTH + 1):
        for path in folder.glob("/".join(["*"] * depth + [SETTINGS_FILE])):
            if not path.is_file():  # a FIFO or device named so is never opened (it could block)
                return None
            try:
                settings = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, ValueError, RecursionError):
                return None
            key = settings.get(DECODER_KEY) if isinstance(settings, dict) else None
            found.add(key if isinstance(key, str) and key.isprintable() else None)
    return found.pop() if len(found) == 1 else None


def shown(value: str) -> str:
    """A value read from a settings file, for a message: as it is when plain, else escaped and
    cut (the file may hold terminal escapes, lone surrogates or 100,000 characters)."""
    if value.isprintable() and len(value) <= 80:
        return value
    return ascii(value[:80]) + (f" ... ({len(value)} characters)" if len(value) > 80 else "")
