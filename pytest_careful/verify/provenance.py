"""Where a model could have learned a literal of a trajectory, as the model sees it.

A trajectory (the reference, or a model's calls) is replayed with a snapshot before every
call. For a literal of one of its calls, a source is one of:

* ``user``: the user's turns so far, verbatim or in a normal form (:mod:`.normal_forms`);
* ``result``: an earlier call's result in the same conversation, as the handler shows it;
* ``state``: a public attribute, before the call, that a read function offered in that
  turn shows (``declarations/reads.yaml``);
* ``doc``: the function's documentation (an enum, a default, its words);
* ``read``: the result of a read offered in that turn, called on the state before the call
  with arguments that have sources themselves (a bounded search: ``READ_CALLS``);
* ``derived``: arithmetic on two numbers the user or an earlier result gives.

The first four are looked up for every literal (:meth:`Trajectory.sources`); the last two,
which execute calls or combine numbers, only where the others find nothing
(:meth:`Trajectory.derivations`).
"""

from __future__ import annotations

import bisect
import functools
import heapq
import itertools
import json
import math
import pickle
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from ..common.text import shorten_call
from ..data.dataset import Conversation, FunctionDoc
from ..effects import declarations as _declarations
from ..evaluation.replay import CallRecord, Replay
from ..execution import limits
from ..execution.executor import Simulators
from ..execution.interpreter import ERROR_PREFIX
from ..execution.snapshot import ClassState, normalise
from .normal_forms import Text, contains_words, find_in_text, parse_number, same_number, unquote

USER, RESULT, STATE, DOC, READ, DERIVED = "user", "result", "state", "doc", "read", "derived"
#: The kinds of source, in the order they are looked up.
KINDS = (USER, RESULT, STATE, DOC, READ, DERIVED)

#: At most this many read calls are tried for one literal (the ``read`` search's bound).
READ_CALLS = 300
#: At most this many calls of one read function.
READ_CALLS_PER_FUNCTION = 60
#: Candidate values per parameter in the ``read`` search.
CANDIDATES_PER_PARAMETER = 40
#: Numbers combined pairwise in the ``derived`` search (the first ones found).
DERIVED_NUMBERS = 60
#: Numbers of the results and the state combined with a given one (a long context's state holds thousands).
SEEN_NUMBERS = 2_000
#: Numbers taken from each earlier result for it (a long context's history holds thousands).
NUMBERS_PER_RESULT = 12

_FILE_NAME = re.compile(r"([\w.-]+)\.([A-Za-z0-9]{1,5})")
_ROUNDING = re.compile(r"\b(round|rounded|rounding|nearest)\b", re.IGNORECASE)

#: Path names every file system gives (the file system's own convention, in no doc).
CONVENTIONS = {"..": "the parent folder, in every file system", ".": "the current folder, in every file system"}

_ENUM = re.compile(r"\[Enum\]:\s*(.+?)(?:\.\s|$)")
#: A quoted span: an opening quote not after a letter, a closing one not before a letter (so that
#: the apostrophes of "they're" and "I'll" neither open nor close one).
_QUOTED = re.compile(r"(?<![\w])'((?:[^'\n]|'(?=\w)){1,300}?)'(?!\w)|\"([^\"\n]{1,300})\"|`([^`\n]{1,300})`")
_PLACEHOLDER = re.compile(r"\{[^{}]+\}|<[^<>]+>|\[[^\[\]]+\]|\b[A-Za-z]+(?:_[A-Za-z]+)+\b|\bX{2,}\b")
_CAPITALISED = re.compile(r"\b[A-Z][\w'-]*(?:\s+[A-Z][\w'-]*){0,2}\b")


@dataclass(frozen=True)
class LiteralSource:
    """One place a literal could have been learned.

    Attributes:
        kind: one of ``KINDS``.
        where: the place, for a reader (``turn 1``, ``turn 0, call 2: cat(...)``, ``TravelAPI.credit_card_list``).
        form: the normal form it matched under (``FORMS``), or how else (``value``, ``enum``, ...).
        call: for a ``result``, the index (among the trajectory's calls) of the call whose result shows it.
    """

    kind: str
    where: str
    form: str
    call: int | None = None

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"kind": self.kind, "where": self.where, "form": self.form}
        if self.call is not None:
            out["call"] = self.call
        return out


@dataclass(frozen=True)
class Place:
    """One call of a trajectory: its turn, its place among the turn's calls, its index among all calls."""

    turn: int
    within: int
    index: int


def parameter_names(doc: FunctionDoc | None) -> list[str]:
    """A function's parameters in the order its doc lists them (positional arguments bind so)."""
    return list(doc["parameters"].get("properties", {})) if doc else []


class Trajectory:
    """A replayed trajectory of one conversation, and what a model saw before each of its calls.

    Args:
        conversation: the conversation.
        replay: its replay, with snapshots (``evaluation.replay``), one record per call.
        reads: per read function, the attributes its results show (``declarations.reads()``).
    """

    def __init__(
        self, conversation: Conversation, replay: Replay, reads: Mapping[str, tuple[str, ...]] | None = None
    ) -> None:
        self.conversation = conversation
        self.calls: list[CallRecord] = replay.calls
        self.reads = _declarations.reads() if reads is None else reads
        self.user = [[Text(m["content"]) for m in messages] for messages in conversation.questions]
        self._results = [_Shown(c.result) for c in self.calls]
        self._within = [sum(1 for e in self.calls[:i] if e.turn == c.turn) for i, c in enumerate(self.calls)]
        self._offered = _offered_by_turn(conversation)
        self._state_leaves: dict[tuple[int, str], tuple[set[str], set[float], list[str]]] = {}
        self._kept: list[ClassState] = []  # id() keys stay valid while the states they name are alive
        self._running: tuple[int, Simulators] | None = None
        self._reads: dict[int, list[tuple[str, _Shown]]] = {}
        self._read_cache: dict[tuple[str, int], _Shown | None] = {}

    # -- what the model has at a call --------------------------------------------------

    def place(self, index: int) -> Place:
        return Place(self.calls[index].turn, self._within[index], index)

    def within(self, index: int) -> int:
        """Call ``index``'s place among the calls of its turn (0: the turn's first)."""
        return self._within[index]

    def offered(self, turn: int) -> Mapping[str, FunctionDoc]:
        """The functions offered in ``turn`` (miss_func holds some back until a later turn)."""
        return self._offered[min(turn, len(self._offered) - 1)]

    def result_strings(self, index: int) -> list[str]:
        """The strings call ``index``'s result shows: its JSON's strings, or its text."""
        shown = self._results[index]
        return shown.strings or [shown.text.raw]

    def result_holds(self, index: int, value: object) -> bool:
        """Call ``index``'s result shows ``value`` (in a normal form)."""
        return self._results[index].holds(value) is not None

    def result_values(self, index: int, kind: str) -> list[object]:
        """The numbers (``kind`` number) or strings call ``index``'s result shows."""
        shown = self._results[index]
        values: list[object] = list(shown.numbers) if kind == "number" else list(shown.strings)
        return values

    def user_texts(self, upto: int) -> list[tuple[int, Text]]:
        return [(turn, text) for turn in range(min(upto + 1, len(self.user))) for text in self.user[turn]]

    # -- the sources looked up for every literal ---------------------------------------

    def sources(
        self, index: int, value: object, parameter: str | None = None, state: bool = True
    ) -> list[LiteralSource]:
        """Every ``user``, ``result``, ``state`` and ``doc`` source of ``value``, a literal of call ``index``
        (``state=False``: what the trajectory shows only, no value a read could have shown)."""
        place = self.place(index)
        found = list(self._user(place.turn, value))
        found += self._earlier_results(index, value)
        if state:
            found += self._state(index, value)
        found += self._doc(place.turn, self.calls[index].name, parameter, value)
        if value in CONVENTIONS and _owners(self.conversation).get(self.calls[index].name) == "GorillaFileSystem":
            found.append(LiteralSource(DOC, CONVENTIONS[value], "convention"))  # type: ignore[index]
        if not found and isinstance(value, str):
            found += self._template(index, value) or self._renamed(index, value)
        return found

    def _user(self, turn: int, value: object) -> Iterator[LiteralSource]:
        for written_in, text in self.user_texts(turn):
            form = find_in_text(value, text)
            if form is not None:
                yield LiteralSource(USER, f"turn {written_in}", form)
                return

    def later_user(self, turn: int, value: object) -> tuple[int, str] | None:
        """The first later turn whose user message holds ``value``, and the form (a value given too late)."""
        for later in range(turn + 1, len(self.user)):
            for text in self.user[later]:
                form = find_in_text(value, text)
                if form is not None:
                    return later, form
        return None

    def _earlier_results(self, index: int, value: object) -> list[LiteralSource]:
        found = []
        for earlier in range(index):
            form = self._results[earlier].holds(value)
            if form is not None:
                call = self.calls[earlier]
                where = f"turn {call.turn}, call {self._within[earlier]}: {shorten_call(call.call, 120)}"
                found.append(LiteralSource(RESULT, where, form, earlier))
        return found

    def _state(self, index: int, value: object) -> list[LiteralSource]:
        before = self.calls[index].before
        if before is None or isinstance(value, bool):
            return []
        found = []
        for class_name, attributes in self.visible(self.calls[index].turn).items():
            state = before.classes.get(class_name)
            if state is None:
                continue
            for attribute in attributes:
                strings, numbers, texts = self._leaves_of(state, class_name, attribute)
                if _held(value, strings, numbers, texts):
                    found.append(LiteralSource(STATE, f"{class_name}.{attribute}", "value"))
        return found

    def visible(self, turn: int) -> dict[str, list[str]]:
        """Per class, the public attributes that the reads offered in ``turn`` show."""
        shown: dict[str, set[str]] = {}
        owners = _owners(self.conversation)
        for name in self.offered(turn):
            owner = owners.get(name)
            if owner is not None and name in self.reads:
                shown.setdefault(owner, set()).update(self.reads[name])
        return {c: sorted(a) for c, a in shown.items()}

    def _leaves_of(self, state: ClassState, class_name: str, attribute: str) -> tuple[set[str], set[float], list[str]]:
        key = (id(state), attribute)
        if key not in self._state_leaves:
            value = state.public_values.get(attribute)
            self._state_leaves[key] = _split_leaves(normalise(value))
            self._kept.append(state)
        return self._state_leaves[key]

    def _doc(self, turn: int, function: str, parameter: str | None, value: object) -> list[LiteralSource]:
        doc = self.offered(turn).get(function)
        if doc is None or parameter is None:
            return []
        spec = doc["parameters"].get("properties", {}).get(parameter)
        if not isinstance(spec, dict):
            return []
        where = f"{function}.{parameter}"
        if value in _enum_of(spec):
            return [LiteralSource(DOC, where, "enum")]
        if "default" in spec and spec["default"] == value and type(spec["default"]) is type(value):
            return [LiteralSource(DOC, where, "default")]
        described = Text(f"{spec.get('description', '')} {doc.get('description', '')}")
        form = find_in_text(value, described)
        return [LiteralSource(DOC, where, f"description ({form})")] if form is not None else []

    def _template(self, index: int, value: str) -> list[LiteralSource]:
        """A quoted template of the user's whose placeholders, filled with sourced values, give ``value``:
        marked ones (``{price}``, ``<name>``, ``total_score``, ``XXX``), or any one word of it."""
        turn = self.calls[index].turn
        wanted = " ".join(unquote(value).split())
        for written_in, text in self.user_texts(turn):
            for template in quoted_spans(text.raw):
                for pattern, word in _template_patterns(template):
                    match = pattern.fullmatch(wanted)
                    if not match or (word is not None and _reworded(word, match.group(1))):
                        continue
                    if all(self._filled(index, part) for part in match.groups()):
                        return [LiteralSource(USER, f"turn {written_in}", "template")]
        return []

    def _renamed(self, index: int, value: str) -> list[LiteralSource]:
        """A file name an earlier result or the state shows, its extension changed to one the user names."""
        match = _FILE_NAME.fullmatch(value)
        if match is None:
            return []
        stem, extension = match.groups()
        turn = self.calls[index].turn
        if not any(contains_words(text.lower, extension.lower()) for _, text in self.user_texts(turn)):
            return []
        shown = [s for e in range(index) for s in self._results[e].strings]
        before = self.calls[index].before
        for class_name, attributes in self.visible(turn).items():
            state = before.classes.get(class_name) if before is not None else None
            for attribute in attributes if state is not None else ():
                shown += self._leaves_of(state, class_name, attribute)[0]  # type: ignore[arg-type]
        for name in shown:
            other = _FILE_NAME.fullmatch(name.rsplit("/", 1)[-1])
            if other is not None and other.group(1) == stem and other.group(2) != extension:
                return [LiteralSource(USER, f"{name}, as .{extension}", "extension")]
        return []

    def _filled(self, index: int, part: str) -> bool:
        """A template's placeholder is filled with a value that has a source (a read's or arithmetic's too)."""
        number = parse_number(part)
        candidates: list[object] = [part] if number is None else [part, number]
        return any(
            self._earlier_results(index, c)
            or self._state(index, c)
            or list(self._user(self.calls[index].turn, c))
            or self.derivations(index, c)
            for c in candidates
        )

    # -- the searches made only where nothing else is found ----------------------------

    def derivations(self, index: int, value: object) -> list[LiteralSource]:
        """A ``derived`` or ``read`` source of ``value``: arithmetic, then a bounded read search."""
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            derived = self._arithmetic(index, float(value))
            if derived is not None:
                return [derived]
        found = self._read_search(index, value)
        return [found] if found is not None else []

    def _given_numbers(self, index: int) -> list[float]:
        """The numbers the user and the called function's doc give before call ``index``, the latest turn's first."""
        record = self.calls[index]
        numbers: list[float] = []
        for _, text in reversed(self.user_texts(record.turn)):
            numbers += text.numbers
        doc = self.offered(record.turn).get(record.name)
        if doc is not None:
            numbers += Text(json.dumps(doc)).numbers
        return list(dict.fromkeys(numbers))[:DERIVED_NUMBERS]

    def _seen_numbers(self, index: int) -> list[float]:
        """The numbers the results and the visible state show before call ``index``, the latest results first."""
        record = self.calls[index]
        numbers: list[float] = []
        for earlier in reversed(range(index)):
            numbers += self._results[earlier].numbers[:NUMBERS_PER_RESULT]
        if record.before is not None:
            for class_name, attributes in self.visible(record.turn).items():
                state = record.before.classes.get(class_name)
                if state is None:
                    continue
                for attribute in attributes:
                    numbers += sorted(self._leaves_of(state, class_name, attribute)[1])
        return list(dict.fromkeys(numbers))[:SEEN_NUMBERS]

    def _numbers_before(self, index: int) -> list[float]:
        """Candidate numbers for a read's parameters: the given ones, then the latest results'."""
        seen = [n for e in reversed(range(index)) for n in self._results[e].numbers[:NUMBERS_PER_RESULT]]
        return list(dict.fromkeys(self._given_numbers(index) + seen))[:DERIVED_NUMBERS]

    def _arithmetic(self, index: int, value: float) -> LiteralSource | None:
        """One operation on a number the user, the doc or a result gives, and another given or seen,
        neither of them 0, 1 or -1.

        For each given number and operation, the other operand the literal needs is solved for and
        looked up among the sorted candidates, within the rounding the literal allows: linear in
        the numbers, not quadratic.
        """
        given = self._numbers_before(index)  # the user's, the doc's, the latest results'
        others = sorted(set(given + self._seen_numbers(index)))
        rounds = _ROUNDING.search(" ".join(t.raw for _, t in self.user_texts(self.calls[index].turn))) is not None
        slack = _slack(value, rounds)
        for a in (n for n in given if abs(n) > 1):
            for symbol, solve, apply in _SOLVED:
                for b in _near(others, solve(a, value - slack), solve(a, value + slack)):
                    result = apply(a, b)
                    # An operand of 0 or 1 derives anything from a neighbour (5 - 1 is the 4 a user's 5
                    # contradicts): such a step is no derivation.
                    if b != a and abs(b) > 1 and result is not None and _gives(result, value, rounds):
                        first, second = (a, b) if symbol[0] == "a" else (b, a)
                        return LiteralSource(
                            DERIVED, f"{_shown_number(first)} {symbol[1:]} {_shown_number(second)}", "arithmetic"
                        )
        return None

    def _read_search(self, index: int, value: object) -> LiteralSource | None:
        for call, shown in self._reads_at(index):
            form = shown.holds(value)
            if form is not None:
                return LiteralSource(READ, shorten_call(call, 160), form)
        return None

    def _reads_at(self, index: int) -> list[tuple[str, _Shown]]:
        """The results of the reads a model could make before call ``index`` (``READ_CALLS`` at most).

        Computed once per call, for all its literals; a read whose class's state is the one an
        earlier call saw gives the same result, and is not run again. Reads run on one copy of
        the instances: a read changes no public state.
        """
        if index in self._reads:
            return self._reads[index]
        before = self.calls[index].before
        found: list[tuple[str, _Shown]] = []
        sim: Simulators | None = None
        owners = _owners(self.conversation)
        for call, owner in itertools.islice(self._read_calls_offered(index, owners), READ_CALLS):
            state = before.classes.get(owner) if before is not None else None
            key = (call, id(state))
            if key not in self._read_cache:
                if sim is None:
                    sim = Simulators.around(pickle.loads(self.instances_before(index)))
                result = sim.execute(call).result
                self._read_cache[key] = None if result.startswith(ERROR_PREFIX) else _Shown(result)
                if state is not None:
                    self._kept.append(state)
            shown = self._read_cache[key]
            if shown is not None:
                found.append((call, shown))
        self._reads[index] = found
        return found

    def _read_calls_offered(self, index: int, owners: Mapping[str, str]) -> Iterator[tuple[str, str]]:
        """(call, its class) for the reads offered at call ``index``, the fewest combinations first."""
        plans = []
        for name, doc in self.offered(self.calls[index].turn).items():
            if name not in self.reads or name not in owners:
                continue
            properties = doc["parameters"].get("properties", {})
            required = [p for p in doc["parameters"].get("required", []) if p in properties]
            pools = [self._candidates(index, properties[p]) for p in required]
            if all(pools):
                plans.append((math.prod(len(pool) for pool in pools), name, required, pools, owners[name]))
        # Round by round, the next likeliest call of every read: a read with many combinations
        # (a currency pair and an amount) is reached as soon as one with few.
        streams = [
            ((name, required, owner), _best_first(pools, READ_CALLS_PER_FUNCTION))
            for _, name, required, pools, owner in sorted(plans, key=lambda plan: (plan[0], plan[1]))
        ]
        while streams:
            alive = []
            for (name, required, owner), stream in streams:
                values = next(stream, None)
                if values is None:
                    continue
                alive.append(((name, required, owner), stream))
                arguments = ", ".join(f"{p}={v!r}" for p, v in zip(required, values))
                yield f"{name}({arguments})", owner
            streams = alive

    def _candidates(self, index: int, spec: Mapping[str, object]) -> list[object]:
        """Values a model could pass for one parameter, the likeliest first: its enum (the values the
        conversation names first), else the numbers or strings the user and the results give."""
        kind = spec.get("type")
        enum = _enum_of(spec)
        if enum:
            named = [v for v in enum if isinstance(v, str) and self._named_before(index, v)]
            return (named + [v for v in enum if v not in named])[:CANDIDATES_PER_PARAMETER]
        if kind in ("integer", "float", "number"):
            numbers = self._numbers_before(index)
            typed: list[object] = [
                int(n) if kind == "integer" else n for n in numbers if kind != "integer" or n == int(n)
            ]
            return list(dict.fromkeys(typed))[:CANDIDATES_PER_PARAMETER]
        if kind == "string":
            return list(self._strings_before(index)[:CANDIDATES_PER_PARAMETER])
        return []

    def _named_before(self, index: int, value: str) -> bool:
        """The user or an earlier result names ``value`` (a currency, a city) before call ``index``."""
        lowered = value.lower()
        if any(contains_words(text.lower, lowered) for _, text in self.user_texts(self.calls[index].turn)):
            return True
        return any(contains_words(self._results[e].text.lower, lowered) for e in range(index))

    def _strings_before(self, index: int) -> list[str]:
        strings: list[str] = []
        for _, text in reversed(self.user_texts(self.calls[index].turn)):
            strings += quoted_spans(text.raw)
            strings += _CAPITALISED.findall(text.raw)
        for earlier in range(index):
            strings += [s for s in self._results[earlier].strings if len(s) <= 60]
        return list(dict.fromkeys(s for s in strings if s))

    def instances_before(self, index: int) -> bytes:
        """The instances as they were before call ``index``, pickled (a copy per read tried)."""
        if self._running is None or self._running[0] > index:
            conversation = self.conversation
            self._running = (
                0,
                Simulators(conversation.involved_classes, conversation.initial_config, conversation.long_context),
            )
        done, sim = self._running
        for call in self.calls[done:index]:
            sim.execute(call.call)
        self._running = (index, sim)
        return pickle.dumps(sim.instances, pickle.HIGHEST_PROTOCOL)


class _Shown:
    """A call's result as the model sees it: its text, and its JSON's leaves."""

    def __init__(self, result: str) -> None:
        self.text = Text(result)
        limits.scanned(result)  # parsed, its leaves joined: work in proportion to its length
        try:
            parsed: object = json.loads(result)
        except ValueError:
            parsed = result
        strings, numbers, _ = _split_leaves(parsed)
        strings |= set(_joined_lists(parsed))
        self.strings = sorted(strings)
        self.string_set = strings
        self.numbers = sorted(numbers)
        # The JSON's strings as one text, escapes read: a long context's result holds thousands.
        decoded = "\n".join(s for s in self.strings if s != result)
        self.texts = [Text(decoded)] if decoded else []

    def holds(self, value: object) -> str | None:
        if isinstance(value, bool):
            return None
        if isinstance(value, str) and value in self.string_set:
            return "value"
        if isinstance(value, (int, float)) and any(same_number(value, n) for n in self.numbers):
            return "value"
        form = find_in_text(value, self.text)
        if form is not None:
            return form
        for text in self.texts:  # a JSON string's text, its escapes read
            form = find_in_text(value, text)
            if form is not None:
                return form
        return None


def _joined_lists(value: object) -> Iterator[str]:
    """A result's lists of strings joined by a comma and a space, as a model writes a list out."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            if item and len(item) <= 50 and all(isinstance(x, str) for x in item):
                yield ", ".join(item)
            stack.extend(x for x in item if isinstance(x, (dict, list)))


def _split_leaves(value: object, limit: int = 50_000) -> tuple[set[str], set[float], list[str]]:
    """A value's string leaves and keys, its numbers, and its longer strings (texts a read shows whole).

    Each container is opened once (a file tree's shared folders are reached by many paths: 2**n
    after n copies), at most ``limit`` items are looked at, and the walk ticks the conversation's
    budget (``limits.tick``), as every walk over state does.
    """
    strings: set[str] = set()
    numbers: set[float] = set()
    stack = [value]
    opened: set[int] = set()
    seen = 0
    while stack and seen < limit:
        item = stack.pop()
        seen += 1
        limits.tick()
        if isinstance(item, (dict, list, tuple, set, frozenset)):
            if id(item) in opened:
                continue
            opened.add(id(item))
        if isinstance(item, dict):
            stack.extend(item.values())
            stack.extend(k for k in item.keys() if isinstance(k, (str, int, float)))
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack.extend(item)
        elif isinstance(item, str):
            strings.add(item)
        elif isinstance(item, (int, float)) and not isinstance(item, bool):
            numbers.add(float(item))
    texts = [s for s in strings if " " in s.strip()]
    return strings, numbers, texts


def _held(value: object, strings: set[str], numbers: set[float], texts: list[str]) -> bool:
    if isinstance(value, str):
        return value in strings or (len(value) >= 3 and any(contains_words(t, value) for t in texts))
    if isinstance(value, (int, float)):
        return any(same_number(value, n) for n in numbers)
    return False


def _enum_of(spec: Mapping[str, object]) -> list[object]:
    enum = spec.get("enum")
    if isinstance(enum, list):
        return enum
    match = _ENUM.search(str(spec.get("description", "")))
    return [v.strip() for v in match.group(1).split(",")] if match else []


def quoted_spans(text: str) -> list[str]:
    """The quoted parts of a text (single, double or back quotes), escapes read."""
    return [next(g for g in m.groups() if g is not None) for m in _QUOTED.finditer(unquote(text))]


def _template_patterns(template: str) -> Iterator[tuple[re.Pattern[str], str | None]]:
    """A quoted span as patterns: its marked placeholders (``total_score``, ``{name}``, ``<x>``,
    ``XXX``) each a group; then each one of its words a group (``'number.pdf'``, ``'... is xxx km.'``),
    with the word (a fill must not be the word itself written otherwise)."""
    spaced = " ".join(template.split())
    marked = list(_PLACEHOLDER.finditer(spaced))
    if marked:
        yield _pattern(spaced, [(m.start(), m.end()) for m in marked]), None
    for word in re.finditer(r"\d+(?:[.,]\d+)*|\w+", spaced):
        yield _pattern(spaced, [(word.start(), word.end())]), word.group()


def _reworded(word: str, fill: str) -> bool:
    """``fill`` is ``word`` itself, or ``word`` in another normal form (``10000`` as ``10000.00``): a
    text the user dictated, changed, not a placeholder filled."""
    return fill == word or find_in_text(parse_number(fill) or fill, Text(word)) is not None


def _pattern(text: str, holes: Sequence[tuple[int, int]]) -> re.Pattern[str]:
    pieces: list[str] = []
    done = 0
    for start, end in holes:
        pieces += [re.escape(text[done:start]), r"(.+?)"]
        done = end
    pieces.append(re.escape(text[done:]))
    return re.compile("".join(pieces), re.IGNORECASE)


def _best_first(pools: Sequence[Sequence[object]], limit: int) -> Iterator[tuple[object, ...]]:
    """Combinations of one value per pool, in order of the sum of their ranks (each pool's
    likeliest first), at most ``limit``: a bounded search tries the likely ones."""
    start = (0,) * len(pools)
    frontier = [(0, start)]
    seen = {start}
    for _ in range(limit):
        if not frontier:
            return
        _, ranks = heapq.heappop(frontier)
        yield tuple(pool[rank] for pool, rank in zip(pools, ranks))
        for axis in range(len(pools)):
            following = ranks[:axis] + (ranks[axis] + 1,) + ranks[axis + 1 :]
            if following[axis] < len(pools[axis]) and following not in seen:
                seen.add(following)
                heapq.heappush(frontier, (sum(following), following))


def _safe(fn: Callable[[float, float], float]) -> Callable[[float, float], float | None]:
    def solved(a: float, v: float) -> float | None:
        try:
            return fn(a, v)
        except ZeroDivisionError:
            return None

    return solved


#: Per operation: how it is written ("a" or "b" first), the other operand that gives a value, and the operation.
_SOLVED: tuple[tuple[str, Callable[[float, float], float | None], Callable[[float, float], float | None]], ...] = (
    ("a+", _safe(lambda a, v: v - a), _safe(lambda a, b: a + b)),
    ("a-", _safe(lambda a, v: a - v), _safe(lambda a, b: a - b)),
    ("b-", _safe(lambda a, v: v + a), _safe(lambda a, b: b - a)),
    ("a*", _safe(lambda a, v: v / a), _safe(lambda a, b: a * b)),
    ("a/", _safe(lambda a, v: a / v), _safe(lambda a, b: a / b)),
    ("b/", _safe(lambda a, v: v * a), _safe(lambda a, b: b / a)),
    ("a% of", _safe(lambda a, v: 100 * v / a), _safe(lambda a, b: a * b / 100)),
)


def _slack(value: float, rounding_asked: bool) -> float:
    """How far an operation's result may be from the literal and still give it (its rounding)."""
    if rounding_asked and float(value).is_integer() and value:
        digits = str(int(abs(value)))
        return 0.5 * 10 ** (len(digits) - len(digits.rstrip("0")))
    return max(0.005, abs(value) * 1e-9)


def _near(sorted_numbers: Sequence[float], low: float | None, high: float | None) -> list[float]:
    """The numbers between two bounds (either order; None: none)."""
    if low is None or high is None:
        return []
    low, high = min(low, high), max(low, high)
    return list(sorted_numbers[bisect.bisect_left(sorted_numbers, low) : bisect.bisect_right(sorted_numbers, high)])


def _gives(result: float, value: float, rounding_asked: bool) -> bool:
    """An arithmetic result gives the literal: equal to its decimals, or (where the user asks for
    rounding) rounded to the literal's tens, hundreds or thousands."""
    if same_number(value, result) or round(result, 2) == round(value, 2):
        return True
    if not rounding_asked or not float(value).is_integer() or value == 0:
        return False
    zeros = len(str(int(abs(value)))) - len(str(int(abs(value))).rstrip("0"))
    return any(round(result, -k) == value for k in range(1, zeros + 1))


def _shown_number(value: float) -> str:
    return str(int(value)) if value == int(value) else str(value)


@functools.lru_cache(maxsize=1024)
def _offered_by_turn(conversation: Conversation) -> tuple[dict[str, FunctionDoc], ...]:
    offered: dict[str, FunctionDoc] = {doc["name"]: doc for doc in conversation.functions}
    by_turn = []
    for turn in range(max(conversation.n_turns, 1)):
        for doc in conversation.missed_function.get(turn, []):
            offered[doc["name"]] = doc
        by_turn.append(dict(offered))
    return tuple(by_turn)


@functools.lru_cache(maxsize=1024)
def _owners(conversation: Conversation) -> dict[str, str]:
    """Function name -> the class that serves it in this conversation (later classes win, as in BFCL)."""
    decl = _declarations.load()
    owners = {}
    for class_name in conversation.involved_classes:
        for name, declaration in decl.functions.items():
            if declaration.class_name == class_name:
                owners[name] = class_name
    return owners


def offered_in(conversation: Conversation, turn: int) -> Mapping[str, FunctionDoc]:
    """The functions offered in ``turn`` (by name), the held-out ones from the turn they arrive."""
    by_turn = _offered_by_turn(conversation)
    return by_turn[max(0, min(turn, len(by_turn) - 1))]


def first_offered(conversation: Conversation, function: str) -> int | None:
    """The first turn in which ``function`` is offered; None where it never is."""
    for turn, offered in enumerate(_offered_by_turn(conversation)):
        if function in offered:
            return turn
    return None
