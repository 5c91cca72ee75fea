"""The 800 multi-turn conversations, read from the installed bfcl-eval package.

Mirrors ``bfcl_eval.utils.load_dataset_entry`` + ``load_ground_truth_entry`` for
the multi-turn categories (function docs per involved class, holdout docs of
miss_func moved to ``missed_function``) without importing ``bfcl_eval.utils``,
whose import writes under ``BFCL_PROJECT_ROOT``. ``tests/data/test_dataset.py``
compares the two on every conversation.

(No ``from __future__ import annotations`` here: see ``common.json_types``.)
"""

import copy
import functools
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from ..common import bfcl as _bfcl
from ..common.bfcl import CATEGORIES
from ..common.json_types import NotRequired, TypedDict


class Message(TypedDict):
    """A message of a turn's question, as BFCL's dataset writes it and a model is sent it."""

    role: str
    content: str


class ParameterSchema(TypedDict):
    """A function's parameters, as BFCL's docs write them: a JSON schema of ``type`` ``dict``."""

    type: str
    properties: dict[str, dict[str, object]]  # name -> its schema: type, description; default, enum, items
    required: list[str]


class FunctionDoc(TypedDict):
    """A function's doc, as BFCL's dataset writes it and a model is sent it.

    BFCL's docs also carry ``response`` (the result's schema, absent from one), which nothing
    here reads; a doc is passed on whole.
    """

    name: str
    description: str
    parameters: ParameterSchema


class PromptEntry(TypedDict):
    """A test entry as bfcl-eval's ``load_dataset_entry`` returns it, for BFCL's inference loop."""

    id: str
    question: list[list[Message]]
    initial_config: dict[str, object]
    path: list[str]
    involved_classes: list[str]
    function: list[FunctionDoc]
    missed_function: NotRequired[dict[str, list[FunctionDoc]]]  # miss_func: the turn (a string) -> docs it reveals
    excluded_function: NotRequired[list[str]]


@dataclass(frozen=True, eq=False)  # identity hash: conversations are loaded once
class Conversation:
    """One multi-turn test entry with its ground truth.

    Attributes:
        id: BFCL id, e.g. ``multi_turn_base_17``.
        category: e.g. ``multi_turn_base``.
        questions: user messages per turn (a turn may hold none in miss_func).
        initial_config: per-class scenario, as in the dataset (never mutated).
        involved_classes: simulator classes, in dataset order.
        functions: docs visible from the first turn.
        missed_function: miss_func holdout docs, by the turn they return at.
        excluded_function: names the dataset lists as excluded (18 conversations
            per category; bfcl-eval 2026.3.23 itself never reads the field).
        ground_truth: reference calls per turn, as BFCL call strings.
    """

    id: str
    category: str
    questions: list[list[Message]]
    initial_config: Mapping[str, object]  # class name -> its scenario (JSON)
    involved_classes: tuple[str, ...]
    functions: list[FunctionDoc]
    missed_function: dict[int, list[FunctionDoc]]
    excluded_function: tuple[str, ...] | None  # None where the dataset has no such key
    ground_truth: list[list[str]]
    path: tuple[str, ...] = field(default=())

    @property
    def index(self) -> int:
        return int(self.id.rsplit("_", 1)[1])

    @property
    def long_context(self) -> bool:
        # BFCL: ``"long_context" in test_category or "composite" in test_category``
        test_category = self.id.rsplit("_", 1)[0]
        return "long_context" in test_category or "composite" in test_category

    @property
    def n_turns(self) -> int:
        return len(self.ground_truth)

    def all_functions(self) -> list[FunctionDoc]:
        """Docs of every function, the holdouts included."""
        docs = list(self.functions)
        for turn in sorted(self.missed_function):
            docs.extend(self.missed_function[turn])
        return docs

    def prompt_entry(self) -> PromptEntry:
        """The entry as bfcl-eval's ``load_dataset_entry`` returns it (a fresh copy)."""
        entry: dict[str, object] = {  # in bfcl-eval's order: the file's keys, then the docs
            "id": self.id,
            "question": copy.deepcopy(self.questions),
            "initial_config": copy.deepcopy(dict(self.initial_config)),
            "path": list(self.path),
            "involved_classes": list(self.involved_classes),
        }
        if self.category == "multi_turn_miss_func":
            entry["missed_function"] = {str(k): copy.deepcopy(v) for k, v in self.missed_function.items()}
        if self.excluded_function is not None:
            entry["excluded_function"] = list(self.excluded_function)
        entry["function"] = copy.deepcopy(self.functions)
        return cast(PromptEntry, entry)


class UnknownConversation(KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


def _read_jsonl(path: Path) -> list[Any]:
    """The JSON values of a file of bfcl-eval's data, one a line (its shapes: ``_build``, ``FunctionDoc``)."""
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


@functools.cache
def func_docs(class_name: str) -> tuple[FunctionDoc, ...]:
    return tuple(_read_jsonl(_bfcl.func_doc_file(class_name)))


def _build(entry: Mapping[str, Any], answer: Mapping[str, Any], category: str) -> Conversation:
    """A conversation of a line of the dataset and its line of answers (JSON, as bfcl-eval ships them)."""
    # The docs are shared between conversations and must not be mutated;
    # prompt_entry() hands out deep copies.
    functions: list[FunctionDoc] = []
    for class_name in entry["involved_classes"]:
        functions.extend(func_docs(class_name))
    missed: dict[int, list[FunctionDoc]] = {}
    # Same order and first-match removal as populate_test_cases_with_predefined_functions.
    for turn, names in entry.get("missed_function", {}).items():
        missed[int(turn)] = []
        for name in names:
            for i, doc in enumerate(functions):
                if doc["name"] == name:
                    missed[int(turn)].append(doc)
                    functions.pop(i)
                    break
    return Conversation(
        id=entry["id"],
        category=category,
        questions=entry["question"],
        initial_config=entry["initial_config"],
        involved_classes=tuple(entry["involved_classes"]),
        functions=functions,
        missed_function=missed,
        excluded_function=(tuple(entry["excluded_function"]) if "excluded_function" in entry else None),
        ground_truth=answer["ground_truth"],
        path=tuple(entry.get("path", ())),
    )


@functools.cache
def load_category(category: str) -> tuple[Conversation, ...]:
    """All conversations of one multi-turn category, in dataset order."""
    if category not in CATEGORIES:
        raise ValueError(f"unknown category {category!r}; expected one of {', '.join(CATEGORIES)}")
    data = _bfcl.data_dir()
    entries = _read_jsonl(data / f"BFCL_v4_{category}.json")
    answers = _read_jsonl(data / "possible_answer" / f"BFCL_v4_{category}.json")
    if len(entries) != len(answers):
        raise RuntimeError(f"bfcl-eval data for {category}: prompts and answers differ in length")
    return tuple(_build(e, a, category) for e, a in zip(entries, answers))


def load(categories: Iterable[str] = CATEGORIES) -> list[Conversation]:
    return [conv for category in categories for conv in load_category(category)]


@functools.cache
def _by_id() -> dict[str, Conversation]:
    return {conv.id: conv for conv in load()}


def category_of(conversation_id: str) -> str:
    return conversation_id.rsplit("_", 1)[0]


def get(conversation_id: str) -> Conversation:
    """The conversation with this BFCL id."""
    try:
        return _by_id()[conversation_id]
    except KeyError:
        raise UnknownConversation(
            f"unknown conversation id {conversation_id!r} (expected e.g. multi_turn_base_0 .. multi_turn_base_199)"
        ) from None
