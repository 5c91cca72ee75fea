"""Where a conversation's model output comes from: the references, or a logged run."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from . import dataset
from .decoding import Decoder, UnknownModel, decoder, passthrough_decoder, resolve_model
from .options import REFERENCE_MODEL, CarefulOptions
from .results import InputProblem, LoggedEntry, find_result_files, read_result_file


@dataclass
class Source:
    """Model output per (condition, conversation id), and how to decode it."""

    model: str
    decoder_key: str
    entries: dict[tuple[str, str], LoggedEntry | None] = field(default_factory=dict)
    problems: list[InputProblem] = field(default_factory=list)
    files: dict[tuple[str, str], Path] = field(default_factory=dict)

    @property
    def is_reference(self) -> bool:
        return self.model == REFERENCE_MODEL

    def decoder(self) -> Decoder:
        return passthrough_decoder() if self.is_reference else decoder(self.decoder_key)

    def result(self, condition: str, conversation: dataset.Conversation) -> tuple[Any, LoggedEntry | None]:
        if self.is_reference:
            return [[list(t)] if t else [] for t in conversation.ground_truth], None
        entry = self.entries.get((condition, conversation.id))
        if entry is None:
            raise LookupError(self.problem_for(condition, conversation.id))
        return entry.result, entry

    def problem_for(self, condition: str, conversation_id: str) -> str:
        located = [str(p) for p in self.problems if p.conversation == conversation_id]
        if located:
            return "; ".join(located)
        category = dataset.category_of(conversation_id)
        path = self.files.get((condition, category))
        return f"{path}: no entry for {conversation_id}" if path else f"no result file for {category}"


def open_source(options: CarefulOptions) -> Source:
    """The run to score, validated; user mistakes raise ``pytest.UsageError``."""
    if options.live:
        from .live.source import open_live

        return open_live(options)
    if options.results is None:
        return Source(REFERENCE_MODEL, "passthrough")
    key = options.decoder or options.model
    try:
        key = resolve_model(key)
    except UnknownModel as exc:
        flag = "--careful-decoder" if options.decoder else "--careful-model"
        raise pytest.UsageError(f"{flag}: {exc}") from None
    # Without --careful-model, the run is named after its folder (BFCL names
    # result folders after the model).
    source = Source(options.model or options.results.resolve().name, key)
    for condition in options.protocols:
        directory = options.results if len(options.protocols) == 1 else options.results / condition
        directory = _model_folder(directory, options.model)
        _read_condition(source, condition, directory, options.categories)
    return source


def _model_folder(directory: Path, model: str) -> Path:
    """A live run's ``<output>/<protocol>`` holds one folder per model: pick the model's."""
    if model:
        for name in (model.replace("/", "_").replace(":", "_"), _registry_dir(model)):
            if name and (directory / name).is_dir():
                return directory / name
    return directory


def _registry_dir(model: str) -> str:
    try:
        return resolve_model(model).replace("/", "_")
    except UnknownModel:
        return ""


def _read_condition(source: Source, condition: str, directory: Path, categories: tuple[str, ...]) -> None:
    if not directory.is_dir():
        raise pytest.UsageError(f"--careful-results: no folder {directory} for condition {condition!r} "
                                "(with several protocols, the run of each lies in DIR/<protocol>/)")
    files, problems = find_result_files(directory)
    source.problems.extend(problems)
    missing = [c for c in categories if c not in files]
    if missing:
        raise pytest.UsageError(
            f"--careful-results: {directory} has no result file for {', '.join(missing)} "
            f"(expected BFCL_v4_<category>_result.json); choose categories with --careful-category")
    for category in categories:
        source.files[(condition, category)] = files[category]
        entries, problems = read_result_file(files[category], category)
        source.problems.extend(problems)
        for entry in entries:
            source.entries[(condition, entry.id)] = entry
