"""Decoding: registry names, and BFCL's decoders with eval shadowed."""

from __future__ import annotations

import pytest

from pytest_careful.execution import decoding


def test_registry_read_from_source_equals_the_imported_mapping():
    from pytest_careful.common import bfcl as _bfcl

    registry = _bfcl.model_registry()
    assert decoding.registry_keys() == tuple(registry)
    parsed = decoding.registry_source()
    for key, config in registry.items():
        entry = parsed[key]
        if entry is None:
            continue  # resolved through the imported registry
        assert (entry.model_name, entry.is_fc_model) == (config.model_name, config.is_fc_model), key
        assert (entry.handler_module, entry.handler_class) == (
            config.model_handler.__module__,
            config.model_handler.__name__,
        ), key
    assert sum(e is not None for e in parsed.values()) >= 0.9 * len(registry)


@pytest.mark.parametrize(
    "typed, key",
    [
        ("Qwen3-8B", "Qwen/Qwen3-8B"),
        ("Qwen/Qwen3-8B", "Qwen/Qwen3-8B"),
        ("Salesforce_Llama-xLAM-2-8b-fc-r", "Salesforce/Llama-xLAM-2-8b-fc-r"),
        ("claude-haiku-4-5-20251001-FC", "claude-haiku-4-5-20251001-FC"),
    ],
)
def test_short_names_resolve(typed, key):
    assert decoding.resolve_model(typed) == key


def test_unknown_names_list_close_matches():
    with pytest.raises(decoding.UnknownModel, match="close matches: .*qwen3-8b"):
        decoding.resolve_model("qwen3-8")


def test_literal_only_eval_keeps_literals_and_refuses_the_rest():
    assert decoding.literal_only_eval("{'a': [1, -2.5, (3,)], 'b': None}") == {"a": [1, -2.5, (3,)], "b": None}
    assert decoding.literal_only_eval("2 * 3 + 1") == 7
    for text in ("__import__('os')", "open('x')", "(lambda: 1)()", "a.b", "[x for x in y]"):
        with pytest.raises(ValueError):
            decoding.literal_only_eval(text)


def test_prompting_decoder_matches_stock_on_safe_text_and_refuses_code():
    qwen = decoding.decoder("Qwen/Qwen3-8B")
    assert qwen.decode_step("[cd(folder='docs'), mkdir(dir_name='a b')]") == [
        "cd(folder='docs')",
        "mkdir(dir_name='a b')",
    ]
    assert qwen.decode_step("[add(a=1 + 2, b=-3)]") == ["add(a=3, b=-3)"]  # BFCL folds + via eval
    with pytest.raises(Exception):
        qwen.decode_step("[add(a=__import__('os').getpid() + 1)]")
