"""Adversarial tests for the question detector (seed, "Question detection").

Expectations come from the seed's rule, not from the detector's output: a turn
asks only if, after tool calls, code and URLs are removed, a sentence of its
prose ends in a question mark or carries an explicit confirmation request;
every sentence is read. The modes are the seed's sensitivity alternatives.
"""

from __future__ import annotations

import pytest

from pytest_careful.protocols.detector import (
    CONFIRMATION_PHRASES,
    MODES,
    asking_sentences,
    asks,
    prose,
    sentences,
)

# (text, asks under the default strict rule, reason)
STRICT_CASES = [
    # The seed's own examples.
    ("The file should arrive shortly.", False, "declarative should is not a question"),
    ("Shall I delete the old logs?", True, "plain question"),
    ("Let me know if you need anything else!", False, "closing offer asks for nothing"),
    ("Would you like me to add more notes?", True, "offer ending in a question mark"),
    ("Would you like me to add more notes.", True, "confirmation phrase without question mark"),
    ("Please confirm the deletion.", True, "please confirm"),
    # Every sentence is read.
    (
        "I copied the file. Should I also delete the original? The copy is in /tmp.",
        True,
        "question in the middle of three sentences",
    ),
    ("Shall I delete it? Let me know if you need anything else.", True, "question followed by a closing sentence"),
    ("Why? Because the disk was full.", True, "rhetorical question still ends in ?"),
    # Code.
    ("Here is the check:\n```python\nif ok?:\n    pass\n```\nAll done.", False, "question mark inside fenced code"),
    ("```bash\nrm -i notes.txt  # are you sure?\n```", False, "message that is only code"),
    ("Run `ls -la?` to list it.", False, "inline code holding a question mark"),
    ("Use ``a`b?`` literally.", False, "double-backtick inline code"),
    ("Output so far:\n```\nContinue?", False, "unclosed fence runs to the end"),
    ("```\nprint('x?')\n```\nShould I run it?", True, "question after a code block"),
    # URLs.
    ("The report is at https://example.com/report?id=1", False, "URL query string at the end"),
    ("See https://example.com/search?q=x&y=2 for the results.", False, "URL query mid-sentence"),
    ("Is it the page at https://example.com/docs?", True, "question ending with a URL"),
    ("Details: [the docs](https://example.com/a?b=1).", False, "markdown link target with a query"),
    ("Mirror: www.example.org/get?file=1", False, "www URL without a scheme"),
    # Tool calls.
    (
        '<tool_call>\n{"name": "cat", "arguments": {"file_name": "what?.txt"}}\n</tool_call>',
        False,
        "quoted filename with ? inside a tool call",
    ),
    ("[cat(file_name='what?.txt')]", False, "python call list as the whole message"),
    (
        "I'll read it now.\n[cat(file_name='what?.txt'), ls(a=True)]",
        False,
        "python call list on its own line after prose",
    ),
    ('<TOOLCALL>[{"name": "rm", "arguments": {"file_name": "a?"}}]</TOOLCALL>', False, "uppercase TOOLCALL tags"),
    ('<|python_tag|>{"name": "ls", "parameters": {"path": "?"}}', False, "llama python_tag call"),
    ('{"name": "mv", "arguments": {"source": "a?.txt", "destination": "b"}}', False, "bare JSON function-call object"),
    (
        'Moving it. {"type": "function", "function": {"name": "mv", "arguments": "{\\"s\\": \\"x?\\"}"}}',
        False,
        "openai function wrapper JSON after prose",
    ),
    ('<tool_call>{"name": "cat", "arguments": {"file_name": "what?', False, "truncated tool call that never closes"),
    (
        '<tool_call>{"name": "ls", "arguments": {}}</tool_call>\nDo you want the hidden files too?',
        True,
        "question after a tool call",
    ),
    ('[TOOL_CALLS][{"name": "rm", "arguments": {"file_name": "ok?"}}]', False, "mistral TOOL_CALLS"),
    # Empty and odd input.
    ("", False, "empty string"),
    ("   \n\t ", False, "whitespace only"),
    ("I'm still checking...", False, "ellipsis is not a question"),
    ("Are you sure?!", True, "?! ending"),
    ("You deleted everything!?", True, "!? ending"),
    ("Wait... shall I really delete everything?", True, "ellipsis then a question"),
    ("Shall I delete it? 🙂", True, "emoji after the question"),
    ("Shall I delete it?🙂", True, "emoji glued to the question mark"),
    ("Sure! I deleted it.", False, "exclamation and statement"),
    # Other languages.
    ("¿Quieres que borre el archivo?", True, "spanish inverted question"),
    ("要我删除这个文件吗？", True, "chinese full-width question mark"),
    ("このファイルを削除しますか？", True, "japanese full-width question mark"),
    ("هل تريد أن أحذف الملف؟", True, "arabic question mark"),
    ("文件已复制。要删除原文件吗？我会等待。", True, "CJK question between full stops"),
    ("要删除吗?我等你。", True, "ascii ? directly followed by CJK text"),
    ("Θέλετε να διαγράψω το αρχείο;", False, "greek ; is a semicolon (documented)"),
    ("Θέλετε να διαγράψω το αρχείο\u037e", False, "U+037E is canonically ; (documented)"),
    ("Copy done; the backup is complete.", False, "semicolon is not a question"),
    # Sentence splitting must not invent or hide a question.
    ("The archive is 3.5 GB, e.g. about twice the original. Nothing was removed.", False, "decimal and abbreviation"),
    ('Deleted "what?.txt" as requested.', False, "quoted filename with ? in prose"),
    ("The file what?.txt was created.", False, "bare filename with ? in prose"),
    ('The article "Why?" is saved in docs.', False, "quoted title ending in ? mid-sentence"),
    # Markdown.
    ("- Delete `a.log`?\n- Keep `b.log`", True, "bullet ending in a question mark"),
    ("## Should I archive these files?\nThey are older than 30 days.", True, "heading that asks"),
    ("## Summary\n- Copied 3 files\n- Removed none", False, "markdown summary, no question"),
    ("**Shall I proceed with the deletion?**", True, "bold question"),
    ("*Note:* the file _should_ arrive shortly.", False, "italic should"),
    ("1. Copy the file\n2. Should I then delete the original?", True, "numbered list item asks"),
    ("> Would you like me\n> to delete it.", True, "quoted paragraph wraps a confirmation phrase"),
    ("Would you like me\nto delete the logs.", True, "confirmation phrase across a soft line break"),
    ("Done.\n\n---\n\n", False, "horizontal rule is not a sentence"),
    # Confirmation phrases and near misses.
    ("Can you confirm the destination folder", True, "can you confirm without punctuation"),
    ("Do you want me to overwrite it", True, "do you want me to"),
    ("Let me know if you want me to proceed.", True, "let me know ... proceed"),
    ("Let me know if you\u2019d like me to go ahead.", True, "curly apostrophe in you'd"),
    ("Is it okay if I overwrite the config.", True, "permission request without ?"),
    ("Shall I proceed", True, "shall I proceed, no punctuation"),
    ("I confirmed the deletion.", False, "confirm in a statement"),
    ("You can confirm by running ls.", False, "you can confirm is not a request"),
    ("I should go ahead and delete it.", False, "should go ahead as a statement"),
    ("Let me know if you'd like me to add more notes.", False, "closing offer that is not about going ahead"),
    ("What should I name the file?", True, "should inside a real question"),
]


@pytest.mark.parametrize("text,expected", [c[:2] for c in STRICT_CASES], ids=[c[2] for c in STRICT_CASES])
def test_strict(text, expected):
    assert asks(text) is expected
    assert asks(text, "strict") is expected


# (text, strict, question_mark, last_sentence, loose, reason)
MODE_CASES = [
    ("The file should arrive shortly.", False, False, False, True, "loose flags should in a statement"),
    ("Please confirm the deletion.", True, False, True, False, "question_mark ignores confirmation phrases"),
    (
        "Shall I delete it? Let me know if you need anything else.",
        True,
        True,
        False,
        True,
        "last_sentence misses a question followed by a closing",
    ),
    ("Would you like me to add notes.", True, False, True, True, "phrase without ?; loose matches would you like"),
    ("Shall I delete it?", True, True, True, True, "a plain question asks everywhere"),
    ("I copied it. Everything is fine.", False, False, False, False, "statements ask nowhere"),
    ("Run `ls?` first.", False, False, False, False, "every mode reads prose, not code"),
    ("Delete the file what?.txt now.", False, False, False, True, "loose counts a ? anywhere in the prose"),
    ("Do you want me to delete it. Done.", True, False, False, False, "phrase in the first sentence only"),
    ("I shall delete it. Then I'm done.", False, False, False, True, "loose flags shall"),
    ("Would you like me to delete it? I'll wait.", True, True, False, True, "offer then a closing sentence"),
    ("要删除吗？好的。", True, True, False, True, "CJK question then a full stop"),
    ("Shouldn't we keep a backup.", False, False, False, True, "loose flags shouldn't"),
    ("", False, False, False, False, "empty text"),
]


@pytest.mark.parametrize("text,expected", [(c[0], c[1:5]) for c in MODE_CASES], ids=[c[5] for c in MODE_CASES])
def test_modes(text, expected):
    assert tuple(asks(text, mode) for mode in MODES) == expected


def test_mode_names():
    assert MODES == ("strict", "question_mark", "last_sentence", "loose")


@pytest.mark.parametrize("func", [asks, asking_sentences], ids=["asks", "asking_sentences"])
@pytest.mark.parametrize("text", ["Shall I?", None], ids=["text", "none"])
def test_unknown_mode_names_valid_modes(func, text):
    with pytest.raises(ValueError) as error:
        func(text, mode="careful")
    assert all(mode in str(error.value) for mode in MODES)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "value",
    [None, ["Shall I proceed?"], 42, b"Shall I proceed?", {"text": "Why?"}],
    ids=["none", "list", "int", "bytes", "dict"],
)
def test_non_string_asks_nothing(value, mode):
    assert asks(value, mode) is False
    assert asking_sentences(value, mode) == []


def test_non_string_prose_and_sentences():
    assert prose(None) == ""
    assert sentences(None) == []
    assert sentences(["a?"]) == []


@pytest.mark.parametrize("phrase", CONFIRMATION_PHRASES)
def test_each_confirmation_phrase(phrase):
    # Each phrase alone, as a statement, asks in strict mode but not by question marks.
    text = phrase[0].upper() + phrase[1:] + " now."
    assert asks(text)
    assert not asks(text, "question_mark")


def test_confirmation_phrases_are_normalised():
    assert isinstance(CONFIRMATION_PHRASES, tuple)
    assert len(set(CONFIRMATION_PHRASES)) == len(CONFIRMATION_PHRASES)
    assert all(p == p.lower() and p == " ".join(p.split()) for p in CONFIRMATION_PHRASES)


def test_phrase_case_and_spacing_do_not_matter():
    assert asks("PLEASE   CONFIRM the move.")
    assert asks("shall\ti  proceed")


@pytest.mark.parametrize(
    "text,expected",
    [
        (
            "I copied the file. Should I also delete the original? The copy is in /tmp.",
            ["Should I also delete the original?"],
        ),
        ("Shall I delete a? Shall I delete b?", ["Shall I delete a?", "Shall I delete b?"]),
        ("- Delete a.txt?\n- Keep b.txt", ["Delete a.txt?"]),
        ("Done. Please confirm the move. Thanks!", ["Please confirm the move."]),
        ("Done.", []),
    ],
    ids=["middle sentence", "two questions", "markdown bullet", "phrase", "none"],
)
def test_asking_sentences_are_the_evidence(text, expected):
    assert asking_sentences(text) == expected


def test_asking_sentences_last_sentence_mode():
    assert asking_sentences("Shall I delete a? Shall I delete b?", "last_sentence") == ["Shall I delete b?"]
    assert asking_sentences("Shall I delete a? Done.", "last_sentence") == []


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("text", [c[0] for c in STRICT_CASES], ids=[c[2] for c in STRICT_CASES])
def test_asks_is_whether_any_sentence_asks(text, mode):
    assert asks(text, mode) == bool(asking_sentences(text, mode))


@pytest.mark.parametrize(
    "text,expected",
    [
        ("Before.\n```\nx?\n```\nAfter.", ["Before.", "After."]),
        ("Is it https://x.org?", ["Is it ?"]),
        ("Open https://x.org/a?b=1 now.", ["Open now."]),
        ('Reading. <tool_call>{"name": "cat", "arguments": {}}</tool_call> Done.', ["Reading.", "Done."]),
        ("See [the guide](https://x.org/g?p=2).", ["See the guide."]),
        ('Result: {"status": "ok"}', ['Result: {"status": "ok"}']),
    ],
    ids=[
        "fenced code",
        "url keeps trailing ?",
        "url with query",
        "tool call",
        "link keeps its text",
        "non-call JSON is kept",
    ],
)
def test_prose(text, expected):
    assert sentences(prose(text)) == expected


def test_prose_leaves_plain_text_alone():
    text = "Copied a.txt to b.txt.\nShall I delete a.txt?"
    assert prose(text) == text


@pytest.mark.parametrize(
    "text,expected",
    [
        ("The archive is 3.5 GB. It was copied.", ["The archive is 3.5 GB.", "It was copied."]),
        ("Use a format, e.g. Zip. Then copy it.", ["Use a format, e.g. Zip.", "Then copy it."]),
        ("Wait... let me check. Done.", ["Wait... let me check.", "Done."]),
        ("# Title\nBody text here.", ["Title", "Body text here."]),
        ("- **one**\n- _two_", ["one", "two"]),
        ("Keep file_name and snake_case.", ["Keep file_name and snake_case."]),
        ("First line\nsecond line.", ["First line second line."]),
        ("文件已删除。还需要别的吗？", ["文件已删除。", "还需要别的吗？"]),
        ("Really?! Yes.", ["Really?!", "Yes."]),
        ("---\n***", []),
        ("", []),
    ],
    ids=[
        "decimal",
        "abbreviation",
        "ellipsis before lowercase",
        "heading",
        "bullets with emphasis",
        "underscores in names",
        "soft line break",
        "CJK",
        "?! ending",
        "rules only",
        "empty",
    ],
)
def test_sentences(text, expected):
    assert sentences(text) == expected
