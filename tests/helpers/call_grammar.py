"""A grammar of decoded call strings, for comparing the executor with bfcl-eval's.

:func:`generate` draws call strings (deterministically, from a seed) over one
conversation's real methods: names as written and their look-alikes
(full-width, other NFKC-equivalent letters, ligatures, Unicode confusables,
combining marks), parenthesised names, whitespace, comments and line
continuations between name and ``(``, instance-prefixed calls; arguments from
literals, arithmetic, ``%``-formatting, comparisons, ``and``/``or``/``not``,
conditional expressions, subscripts, nested method calls and containers;
whole strings wrapped in expressions, padded with blanks, commented, and
malformed ones (truncated, unbalanced, duplicate keywords, ``await``,
``yield``, statements). A few strings reach outside the simulators
(builtins, bfcl's own names, attribute chains, dunders); the oracle never
sees those (``call_oracle.unsafe_reason``), pytest-careful must refuse them.

Stdlib only; no value is computed here, only text.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

FULL_WIDTH = {c: chr(ord(c) + 0xFEE0) for c in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_0123456789"}
#: Letters whose NFKC form is an ASCII letter (so Python reads them as that letter).
NFKC_LETTERS = {
    "s": ["ſ", "ˢ", "ₛ"],
    "i": ["ⅰ", "ᵢ", "ⁱ"],
    "n": ["ⁿ", "ₙ"],
    "k": ["ₖ"],
    "K": ["K"],
    "h": ["ʰ", "ₕ"],
    "t": ["ᵗ", "ₜ"],
    "e": ["ₑ", "ᵉ"],
    "a": ["ª", "ₐ"],
    "o": ["º", "ₒ"],
}
LIGATURES = {"fi": "ﬁ", "fl": "ﬂ", "ff": "ﬀ", "st": "ﬅ"}
#: Look-alikes that NFKC keeps apart (another name altogether).
CONFUSABLES = {"a": "а", "e": "е", "o": "о", "p": "р", "c": "с", "x": "х", "i": "і", "y": "у"}
UNDEFINED = ("foo", "true", "false", "null", "none", "undefined", "document", "x", "temp", "Ls")

STRINGS = [
    "'document'",
    "'temp'",
    "'report.txt'",
    "'final_report.pdf'",
    "'a'",
    "''",
    "'x y'",
    '"it\'s"',
    "'ls() then pwd()'",
    "'ｌｓ'",
    "'é'",
    "'NYC'",
    "'USD'",
    "'AAPL'",
    "'user1'",
    "'#tag'",
    "'%s'",
    "'123'",
    "'\\n'",
    "'café'",
]
INTS = ["0", "1", "2", "3", "5", "10", "42", "100", "-1", "-7", "2500", "0x1f", "1_000", "True", "False"]
FLOATS = ["0.0", "1.5", "-2.25", "3.14159", "1e3", "2.5e-3", "100.0", "0.1"]


@dataclass
class Catalog:
    """What the generator knows of one conversation."""

    conversation: str
    #: method -> [(parameter, kind, required)]; kind: str, int, float, bool, list, dict, any
    methods: dict[str, list[tuple[str, str, bool]]]
    instance_names: list[str]
    setup: list[str] = field(default_factory=list)  # reference calls of its first turn

    @property
    def no_argument_methods(self) -> list[str]:
        return sorted(m for m, params in self.methods.items() if not any(req for _, _, req in params))


class _Draw:
    def __init__(self, rng: random.Random, catalog: Catalog) -> None:
        self.rng, self.cat = rng, catalog
        self.method_names = sorted(catalog.methods)

    def pick(self, options: list) -> object:  # type: ignore[type-arg]
        return options[self.rng.randrange(len(options))]

    def weighted(self, table: list[tuple[int, Callable[[], str]]]) -> str:
        total = sum(w for w, _ in table)
        roll = self.rng.randrange(total)
        for weight, make in table:
            if roll < weight:
                return make()
            roll -= weight
        raise AssertionError

    # --- names ------------------------------------------------------------- #

    def name(self, method: str) -> str:
        """``method`` as written before ``(``: mostly as is, else a variant."""
        r = self.rng

        def one_char(table: dict[str, str | list[str]]) -> str:
            spots = [i for i, c in enumerate(method) if c in table]
            if not spots:
                return method
            i = self.pick(spots)
            sub = table[method[i]]
            return method[:i] + (self.pick(sub) if isinstance(sub, list) else sub) + method[i + 1 :]

        def ligature() -> str:
            for pair, lig in LIGATURES.items():
                if pair in method:
                    return method.replace(pair, lig, 1)
            return one_char(NFKC_LETTERS)

        instance = self.pick(self.cat.instance_names)
        return self.weighted(
            [
                (40, lambda: method),
                (4, lambda: "".join(FULL_WIDTH.get(c, c) for c in method)),
                (3, lambda: FULL_WIDTH[method[0]] + method[1:]),
                (3, lambda: one_char(FULL_WIDTH)),
                (3, lambda: one_char(NFKC_LETTERS)),
                (2, ligature),
                (
                    2,
                    lambda: "".join(
                        chr(0x1D41A + ord(c) - 97) if c.islower() and r.random() < 0.3 else c for c in method
                    ),
                ),
                (3, lambda: one_char(CONFUSABLES)),
                (2, lambda: method + "\u0301"),
                (1, lambda: method[0] + "\u0301" + method[1:]),
                (2, lambda: method.capitalize()),
                (4, lambda: f"({method})"),
                (1, lambda: f"(({method}))"),
                (1, lambda: f"({FULL_WIDTH[method[0]]}{method[1:]})"),
                (3, lambda: f"{method} "),
                (2, lambda: f"{method}\t"),
                (3, lambda: f"{method}\\\n"),
                (1, lambda: f"{method} \\\n "),
                (3, lambda: f"{instance}.{method}"),
                (1, lambda: f"{instance}.{FULL_WIDTH[method[0]]}{method[1:]}"),
                (1, lambda: "".join(FULL_WIDTH.get(c, c) for c in instance) + f".{method}"),
                (1, lambda: f"{instance} . {method}"),
            ]
        )

    # --- values ------------------------------------------------------------ #

    def value(self, kind: str, depth: int = 0) -> str:
        deep = depth >= 2
        rows: list[tuple[int, Callable[[], str]]] = [(30, lambda: self.literal(kind))]
        if not deep:
            rows += [
                (10, lambda: self.operation(kind, depth)),
                (
                    5,
                    lambda: (
                        f"{self.value(kind, depth + 1)} if {self.condition(depth + 1)} else "
                        f"{self.value(kind, depth + 1)}"
                    ),
                ),
                (4, lambda: f"{self.value('any', depth + 1)} {self.pick(['or', 'and'])} {self.value(kind, depth + 1)}"),
                (3, lambda: self.condition(depth + 1)),
                (3, lambda: self.nested_call(depth + 1)),
                (2, lambda: f"({self.value(kind, depth + 1)})"),
                (2, lambda: self.subscript(depth + 1)),
                (1, lambda: self.pick(list(UNDEFINED))),
            ]
        return self.weighted(rows)

    def literal(self, kind: str) -> str:
        if kind == "any":
            kind = self.pick(["str", "int", "float", "bool", "list", "dict", "none", "tuple", "set"])
        if kind == "str":
            return self.pick(STRINGS)
        if kind == "int":
            return self.pick(INTS)
        if kind == "float":
            return self.pick(FLOATS + INTS[:6])
        if kind == "bool":
            return self.pick(["True", "False", "1", "0", "None"])
        if kind == "none":
            return "None"
        if kind == "list":
            n = self.rng.randrange(4)
            return "[" + ", ".join(self.literal(self.pick(["str", "int"])) for _ in range(n)) + "]"
        if kind == "tuple":
            items = [self.literal(self.pick(["str", "int", "float"])) for _ in range(self.rng.randrange(4))]
            return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
        if kind == "set":  # ints only: a set of strings prints in hash order, which differs per process
            return "{" + ", ".join(self.pick(INTS[:10]) for _ in range(1 + self.rng.randrange(3))) + "}"
        if kind == "dict":
            n = self.rng.randrange(3)
            return "{" + ", ".join(f"{self.pick(STRINGS)}: {self.literal('any')}" for _ in range(n)) + "}"
        return self.literal("any")

    def operation(self, kind: str, depth: int) -> str:
        lit = self.literal
        if kind == "str":
            return self.weighted(
                [
                    (4, lambda: f"{lit('str')} + {lit('str')}"),
                    (2, lambda: f"{lit('str')} * {self.pick(['0', '2', '3', '-1', 'True'])}"),
                    (4, lambda: f"'%s_%d' % ({lit('str')}, {lit('int')})"),
                    (3, lambda: f"'%s.txt' % {lit('str')}"),
                    (
                        2,
                        lambda: (
                            f"'%5s|%-4s|%05.1f|%x|%r' % ({lit('str')}, {lit('str')}, {lit('float')}, 255, {lit('str')})"
                        ),
                    ),
                    (1, lambda: f"'%(a)s-%(b)s' % {{'a': {lit('str')}, 'b': {lit('int')}}}"),
                    (1, lambda: f"'%d' % {lit('str')}"),
                    (1, lambda: f"'%s %s' % {lit('str')}"),
                    (1, lambda: f"'%c' % {self.pick(['65', '0x110000', '-1'])}"),
                    (1, lambda: "b'%s' % b'x'"),
                    (2, lambda: f"{lit('str')}[{self.pick(['0', '1:', '::-1', '-1', ':2', '5'])}]"),
                    (1, lambda: f"{lit('str')} + {lit('int')}"),
                ]
            )
        if kind in ("int", "float", "any"):
            ops = ["+", "-", "*", "/", "//", "%", "**", "<<", ">>", "&", "|", "^", "@"]
            return self.weighted(
                [
                    (6, lambda: f"{lit(kind)} {self.pick(ops)} {self.pick(INTS[:8] + FLOATS[:3])}"),
                    (2, lambda: f"{self.pick(['-', '+', '~', '- -', '-+-', 'not '])}{lit('int')}"),
                    (1, lambda: f"({lit('int')} + {lit('int')}) * {lit('int')} - {lit('float')}"),
                    (1, lambda: f"{lit('int')} / 0"),
                    (1, lambda: f"{lit('int')} % 0"),
                    (1, lambda: f"2 ** {self.pick(['10', '-2', '0.5', '16'])}"),
                    (1, lambda: "(-8) ** 0.5"),
                    (1, lambda: f"{lit('int')} + 1j"),
                ]
            )
        if kind == "bool":
            return self.condition(depth)
        if kind in ("list", "tuple"):
            return self.weighted(
                [
                    (3, lambda: f"{lit('list')} + {lit('list')}"),
                    (2, lambda: f"{lit('list')} * {self.pick(['2', '0', '3'])}"),
                    (1, lambda: f"{lit('list')}[1:]"),
                    (1, lambda: f"{lit('list')} + {lit('tuple')}"),
                ]
            )
        if kind == "dict":
            return self.weighted(
                [
                    (2, lambda: f"{lit('dict')} | {lit('dict')}"),
                    (1, lambda: f"{{'k': {self.value('any', depth + 1)}}}"),
                    (1, lambda: f"{{[]: 1, 'k': {self.nested_call(depth + 1)}}}"),
                ]
            )
        return lit(kind)

    def condition(self, depth: int) -> str:
        lit = self.literal
        cmp = ["==", "!=", "<", "<=", ">", ">=", "in", "not in"]
        return self.weighted(
            [
                (5, lambda: f"{lit('int')} {self.pick(cmp[:6])} {lit('float')}"),
                (3, lambda: f"{lit('str')} {self.pick(cmp)} {lit('str')}"),
                (2, lambda: f"{lit('int')} < {lit('int')} < {lit('int')}"),
                (2, lambda: f"{lit('any')} is {self.pick(['None', 'True', 'False'])}"),
                (1, lambda: f"{lit('any')} is not None"),
                (2, lambda: f"not {lit('any')}"),
                (2, lambda: f"{lit('any')} {self.pick(['and', 'or'])} {lit('any')}"),
                (1, lambda: f"{lit('int')} < {lit('str')}"),
                (1, lambda: f"{lit('list')} == {lit('list')}"),
                (1, lambda: f"{lit('int')} in {lit('list')}"),
                (1, lambda: f"{lit('str')} in {lit('int')}"),
                (2, lambda: f"{self.nested_call(depth + 1)} {self.pick(['==', '!='])} {lit('any')}"),
                (1, lambda: f"{self.nested_call(depth + 1)} is None"),
            ]
        )

    def subscript(self, depth: int) -> str:
        index = self.pick(
            ["0", "-1", "1:", "'result'", "'error'", "'current_directory_content'", "'status'", "'k'", "1.5", "10"]
        )
        base = self.weighted(
            [
                (2, lambda: self.nested_call(depth + 1)),
                (1, lambda: self.literal("list")),
                (1, lambda: self.literal("dict")),
            ]
        )
        return f"{base}[{index}]"

    def nested_call(self, depth: int) -> str:
        candidates = self.cat.no_argument_methods or self.method_names
        return self.call(str(self.pick(candidates)), depth + 1)

    # --- calls ------------------------------------------------------------- #

    def call(self, method: str | None = None, depth: int = 0) -> str:
        method = method or str(self.pick(self.method_names))
        params = self.cat.methods.get(method, [])
        parts: list[str] = []
        positional = self.rng.random() < 0.2
        for i, (param, kind, required) in enumerate(params):
            if not required and self.rng.random() < 0.5:
                positional = False
                continue
            text = self.value(kind, depth)
            parts.append(text if positional and i == len(parts) else f"{param}={text}")
        roll = self.rng.random()
        if roll < 0.04 and parts:
            parts.append(parts[0] if "=" in parts[0] else f"{params[0][0]}=1")  # repeated keyword
        elif roll < 0.08:
            parts.append(f"{self.pick(['extra', 'foo', 'a'])}={self.literal('any')}")
        elif roll < 0.10:
            parts.append(self.literal("any"))
        sep = self.pick([", ", ",", " , ", ",\n "])
        return f"{self.name(method) if depth == 0 or self.rng.random() < 0.3 else method}({sep.join(parts)})"

    def top(self) -> str:
        """One whole call string."""
        c = self.call
        return self.weighted(
            [
                (40, lambda: c()),
                (4, lambda: f"{c()} or {c()}"),
                (4, lambda: f"{c()} and {c()}"),
                (2, lambda: f"not {c()}"),
                (3, lambda: f"{c()} if {self.condition(1)} else {c()}"),
                (3, lambda: f"[{c()}, {c()}]"),
                (2, lambda: f"({c()}, {c()})"),
                (1, lambda: f"{{'first': {c()}, 'second': {c()}}}"),
                (2, lambda: f"{c()} == {c()}"),
                (2, lambda: f"{c()} is None"),
                (2, lambda: f"'%s' % ({c()},)"),
                (2, lambda: f"{c()}[{self.pick(['0', chr(39) + 'error' + chr(39), '1:', chr(39) + 'k' + chr(39)])}]"),
                (1, lambda: f"{c()}()"),
                (4, lambda: self.value(self.pick(["str", "int", "float", "bool", "list", "dict"]))),
                (3, lambda: self.literal("any")),
                (2, lambda: self.pick(list(UNDEFINED)) + "()"),
                (1, lambda: f"{self.literal('int')}({c()})"),
                (1, lambda: self.big_display()),
                (1, lambda: f"{self.literal('int')} > {self.literal('int')} < {c()}"),
            ]
        )

    def big_display(self) -> str:
        """A dict or set display long enough that CPython builds it in parts (which calls ran?)."""
        n = self.rng.randrange(14, 40)
        bad = self.rng.randrange(n)
        if self.rng.random() < 0.5:
            items = [f"{'[]' if i == bad else i}: {self.call() if self.rng.random() < 0.2 else i}" for i in range(n)]
            return "{" + ", ".join(items) + "}"
        items = ["[]" if i == bad else (self.call() if self.rng.random() < 0.2 else str(i)) for i in range(n)]
        return "{" + ", ".join(items) + "}"

    def decorate(self, text: str) -> str:
        return self.weighted(
            [
                (60, lambda: text),
                (6, lambda: " " + text),
                (4, lambda: "\t" + text),
                (2, lambda: " \t  " + text),
                (4, lambda: text + " "),
                (2, lambda: text + "\n"),
                (2, lambda: "\n" + text),
                (3, lambda: text + "  # a comment, ls()"),
                (2, lambda: f"({text})"),
                (1, lambda: f"(\n{text}\n)"),
                (1, lambda: f"\\\n{text}"),
                (1, lambda: "\f" + text),
            ]
        )

    def malformed(self) -> str:
        text = self.call()
        return self.weighted(
            [
                (4, lambda: text[: self.rng.randrange(1, max(2, len(text)))]),
                (2, lambda: text + ")"),
                (2, lambda: text + "("),
                (1, lambda: text.replace("=", "==", 1)),
                (1, lambda: text.replace("(", "(a=", 1).replace("a=)", "a=)", 1)),
                (1, lambda: text[:-1] + ",,)"),
                (1, lambda: text + "; " + self.call()),
                (1, lambda: f"{text}\n{self.call()}"),
                (1, lambda: f"await {text}"),
                (1, lambda: f"(yield {text})"),
                (1, lambda: f"x = {text}"),
                (1, lambda: ""),
                (1, lambda: "   "),
                (1, lambda: text.replace("'", "", 1)),
                (1, lambda: text + "\x00"),
                (1, lambda: "  " + text[:-1]),
                (1, lambda: text.replace("(", " (", 1).replace(" (", "\n(", 1)),
                (1, lambda: "ls(a=1 b=2)"),
                (1, lambda: text + " if"),
                (1, lambda: "lambda: " + text),
            ]
        )

    def outside(self) -> str:
        """A string that reaches outside the simulators: refused here, never sent to the oracle."""
        c = self.call
        return str(
            self.pick(
                [
                    "print(1)",
                    "len([1, 2])",
                    f"print({c()})",
                    "ｐｒｉｎｔ('x')",
                    "ｌｅｎ([])",
                    f"{c()}.keys()",
                    "json.dumps({})",
                    "model_name",
                    f"[{c()}, func_call]",
                    "__import__('os')",
                    "exit()",
                    " exit()",
                    "quit()",
                    f"{c()}.__class__",
                    "(lambda: 1)()",
                    "[x for x in [1]]",
                    f"{self.pick(self.cat.instance_names)}",
                    "globals()",
                    "vars()",
                    "re.compile('a')",
                    "involved_instances",
                    "e",
                    "copy.copy([])",
                    "str(1)",
                    f"{self.pick(self.cat.instance_names)}._load_scenario({{}})",
                    "Ellipsis",
                    "__name__",
                    f"type({c()})",
                    "open('x')",
                    "dir()",
                ]
            )
        )


def generate(catalogs: list[Catalog], count: int, seed: int) -> list[dict[str, object]]:
    """``count`` cases: ``{"conversation", "calls", "kind"}``, the same for the same seed.

    Each case is run on fresh instances: a prefix of the conversation's first
    reference turn (so the state is not always the initial one), then one to
    three generated strings.
    """
    rng = random.Random(seed)
    cases: list[dict[str, object]] = []
    for index in range(count):
        catalog = catalogs[index % len(catalogs)]
        draw = _Draw(rng, catalog)
        kind = draw.weighted([(80, lambda: "call"), (12, lambda: "malformed"), (8, lambda: "outside")])
        calls = list(catalog.setup[: rng.randrange(len(catalog.setup) + 1)]) if rng.random() < 0.5 else []
        for _ in range(1 if rng.random() < 0.7 else rng.randrange(2, 4)):
            if kind == "call":
                calls.append(draw.decorate(draw.top()))
            elif kind == "malformed":
                calls.append(draw.malformed())
            else:
                calls.append(draw.outside())
        cases.append({"conversation": catalog.conversation, "calls": calls, "kind": kind})
    return cases
