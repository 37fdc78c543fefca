"""bankml.chat.content: llama-server's content rule for JSON mode (common/chat-auto-parser-generator.cpp's parser
on common/peg-parser.cpp's lenient engine), checked on every prefix of the pinned llama-server's recorded
answers (tests/data/llama-server-jsonmode.json) and on hand-made cases derived from that code."""

import json
import pathlib
import random

import pytest

from bankml.chat.constraint import Constraint, from_openai
from bankml.chat.content import ContentError, ContentStream, content, json_content, json_message, parse_message

DATA = pathlib.Path(__file__).parent.parent / "data" / "llama-server-jsonmode.json"
RECORDED = json.loads(DATA.read_text(encoding="utf-8"))
TEMPLATE = {"smollm2-chatml": "chatml", "qwen3": "qwen3"}
CASES = sorted(RECORDED)
JSON_CASES = [k for k in CASES if not k.endswith("/grammar")]
GBNF = Constraint("gbnf", None, 'root ::= "a"')


def _case(key):
    case = RECORDED[key]
    return case["content"], from_openai(case["request"]), TEMPLATE[key.split("/")[0]]


# --- the recorded answers -------------------------------------------------------------------------------


@pytest.mark.parametrize("key", CASES)
def test_recorded_content(key):
    text, constraint, template = _case(key)
    assert content(text, False, constraint, template) == text
    assert content(text, True, constraint, template) == text
    assert json_message(text, template, constraint=constraint) == {"role": "assistant", "content": text}


@pytest.mark.parametrize("key", JSON_CASES)
@pytest.mark.parametrize("wrap", [("", ""), ("```json\n", "\n```"), ("```json", "```"), ("\n\n", "\n"), (" ", "")])
def test_every_prefix_of_recorded_answers(key, wrap):
    text, constraint, template = _case(key)
    if RECORDED[key]["finish_reason"] == "length":
        wrap = (wrap[0], "")  # the answer was cut inside a string: anything after it would be in the string
    raw = wrap[0] + text + wrap[1]
    previous = ""
    for i in range(len(raw) + 1):
        got = json_content(raw[:i], template, partial=True)
        assert text.startswith(got), (raw[:i], got)
        assert got.startswith(previous)
        # the content is the answer so far, less whitespace and fence before it and less an escape cut short
        consumed = raw[:i][len(wrap[0]) :] if i > len(wrap[0]) else ""
        expected = consumed[: len(text)]
        if expected.endswith("\\") and not expected.endswith("\\\\"):
            expected = expected[:-1]
        assert got == expected, (raw[:i], got, expected)
        previous = got
    assert json_content(raw, template) == text


@pytest.mark.parametrize("key", CASES)
@pytest.mark.parametrize("size", [1, 2, 3, 7])
def test_stream_adds_up_to_the_recorded_content(key, size):
    text, constraint, template = _case(key)
    stream = ContentStream(constraint, template)
    deltas = [stream.push(text[i : i + size]) for i in range(0, len(text), size)]
    deltas.append(stream.finish())
    assert "".join(deltas) == stream.content == text


def test_recorded_cut_answer_keeps_the_open_string():
    text, _, _ = _case("smollm2-chatml/json_object")
    assert RECORDED["smollm2-chatml/json_object"]["finish_reason"] == "length"
    assert text.endswith('"name": "F')
    assert json_content(text) == text


# --- hand-made cases --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw,expected",
    [
        ('{"a": "x\\', '{"a": "x'),  # an escape cut mid-way is not content
        ('{"a": "x\\u12', '{"a": "x'),
        ('{"a": "x\\u1234', '{"a": "x\\u1234'),
        ('{"a": "x\\n', '{"a": "x\\n'),
        ("12", "12"),  # a number at the end is kept
        ("-", "-"),
        ("[1, 2.", "[1, 2."),
        ("1e", "1e"),
        ("tru", "tru"),
        ("nul", "nul"),
        ('"just a string"', '"just a string"'),  # any JSON value, whatever the schema
        ('```json\n{"a":1}\n``', '{"a":1}'),
        ('```json {"a": 1} ```', '{"a": 1}'),
        ('  \n {"a": 1}  \n', '{"a": 1}'),
        ('\t{"a":\n 1}', '{"a":\n 1}'),
        ('{"é": "ü"}', '{"é": "ü"}'),
    ],
)
def test_json_content(raw, expected):
    assert json_content(raw, partial=True) == expected
    assert json_content(raw) == expected
    assert content(raw) == expected
    assert content(raw, streamed=True) == expected


@pytest.mark.parametrize("raw", ["", " ", "\n\n", "`", "``", "```", "```js", "```json", "```json\n  "])
def test_nothing_parsed_yet(raw):
    assert json_content(raw, partial=True) == ""
    assert json_content(raw) == ""
    # non-streamed: llama-server answers with the raw text; streamed: nothing was sent
    assert content(raw) == raw
    assert json_message(raw) == {"role": "assistant", "content": raw}
    assert content(raw, streamed=True) == ""


@pytest.mark.parametrize("raw", ["Hello", '{"a": 1} and more', '{"a" 1}', "```yaml", '{"a": "\x80"}'.encode("latin-1")])
def test_refused_answers(raw):
    with pytest.raises(ContentError) as info:
        json_content(raw)
    assert str(info.value) == "The model produced output that does not match the expected peg-native format"
    assert json_content(raw, partial=True) == ""  # a partial parse that fails yields an empty message


def test_incomplete_utf8_in_a_string_is_not_content_yet():
    raw = '{"a": "é'.encode("utf-8")[:-1]
    assert json_content(raw, partial=True) == '{"a": "'


def test_stream_deltas():
    stream = ContentStream()
    pieces = ["```json\n", '{"a": "x', "\\", "n", '", "b": 1', "2", "}", "\n``", "`"]
    deltas = [stream.push(p) for p in pieces]
    assert deltas == ["", '{"a": "x', "", "\\n", '", "b": 1', "2", "}", "", ""]
    assert stream.finish() == ""
    assert stream.content == '{"a": "x\\n", "b": 12}'
    assert stream.raw == "".join(pieces).encode("utf-8")


def test_stream_ignores_refused_partials():
    stream = ContentStream()
    assert stream.push('{"a": 1}') == '{"a": 1}'
    assert stream.push(" oops") == ""
    with pytest.raises(ContentError):
        stream.finish()
    assert stream.content == '{"a": 1}'


def test_qwen3_thinking_block():
    raw = '<think>\nhmm\n</think>\n\n```json\n{"a": 1}\n```'
    assert parse_message(raw, template="qwen3", thinking=True) == ('{"a": 1}', "hmm\n")
    assert json_message(raw, "qwen3", thinking=True) == {
        "role": "assistant",
        "content": '{"a": 1}',
        "reasoning_content": "hmm\n",
    }
    # with thinking off, the empty block is in the generation prompt and its whitespace-only reasoning dropped
    assert parse_message('{"a": 1}', template="qwen3") == ('{"a": 1}', "")
    # an open reasoning block: no content yet, but a message (its reasoning)
    assert parse_message("<think>\nstill", template="qwen3", thinking=True, partial=True) == ("", "still")


def test_chatml_refuses_a_think_block():
    with pytest.raises(ContentError):
        json_content("<think>x</think>{}")


# --- not JSON mode: the content is the answer --------------------------------------------------------


@pytest.mark.parametrize("template", ["chatml", "qwen3"])
def test_pure_content(template):
    raw = "  Hello {not json\n"
    assert content(raw, False, GBNF, template) == raw
    assert content(raw, True, GBNF, template) == raw
    assert content(raw, False, Constraint(), template) == raw
    # a UTF-8 sequence cut at the end is held back; invalid bytes become U+FFFD
    assert content("ab".encode() + "é".encode()[:1], False, GBNF, template) == "ab"
    assert content(b"a\xffb", False, GBNF, template) == "a\ufffdb"
    stream = ContentStream(GBNF, template)
    assert [stream.push(p) for p in ["He", "llo"]] == ["He", "llo"]


def test_bare_json_schema_uses_pure_content():
    c = from_openai({"messages": [], "json_schema": True})
    assert not c.is_json
    assert content(" {} ", False, c) == " {} "


# --- the incremental stream scanner agrees with reparsing -------------------------------------------------


def _random_answers(seed, count):
    rng = random.Random(seed)
    atoms = [
        "{",
        "}",
        "[",
        "]",
        '"',
        "\\",
        "u",
        "0",
        "1",
        "9",
        ".",
        "e",
        "E",
        "-",
        "+",
        ",",
        ":",
        " ",
        "\n",
        "\t",
        "a",
        "true",
        "false",
        "null",
        "```",
        "```json",
        "<think>",
        "</think>",
        "\\u00e9",
        "é",
        "\x01",
        "\r",
        "`",
        "json",
        "\\n",
        "\x0b",
        "fals",
        "nu",
        "€",
        "😀",
    ]
    out = []
    for _ in range(count):
        if rng.random() < 0.4:
            text = "".join(rng.choice(atoms) for _ in range(rng.randint(0, 25)))
        else:
            value = rng.choice(
                [
                    {
                        "a": [1, 2.5, {"b": "x\\y\u00e9😀"}],
                        "c": None,
                        "d": True,
                        "e": -0.5e3,
                        "f": [],
                        "g": {},
                        "h": 0,
                        "i": 1e-7,
                    },
                    1,
                    -2.5e10,
                    "str",
                    True,
                    None,
                    [1, [2, []]],
                ]
            )
            text = json.dumps(value, indent=rng.choice([None, 2]), ensure_ascii=rng.random() < 0.5)
            text = (
                rng.choice(["", " ", "```json\n", "\n", "```json", "<think>\nx\n</think>\n\n", "``"])
                + text
                + rng.choice(["", "\n```", " ", "```", "\n``` ", " x", "\n"])
            )
            if rng.random() < 0.3:
                i = rng.randint(0, len(text))
                text = text[:i] + rng.choice(atoms) + text[i:]
        data = text.encode("utf-8")
        if rng.random() < 0.15:
            data = data[: rng.randint(0, len(data))]  # may cut a UTF-8 sequence
        if rng.random() < 0.05:
            i = rng.randint(0, len(data))
            data = data[:i] + bytes([rng.choice([0x80, 0xFF, 0xC3, 0xE2])]) + data[i:]
        cuts = sorted(rng.sample(range(len(data) + 1), min(len(data) + 1, rng.randint(0, 12))))
        pieces = [data[a:b] for a, b in zip([0] + cuts, cuts + [len(data)])]
        if rng.random() < 0.3:
            pieces = [data[j : j + 1] for j in range(len(data))]
        out.append(pieces)
    return out


def _run_stream(stream, pieces):
    trace = []
    for piece in pieces:
        try:
            trace.append(("delta", stream.push(piece)))
        except ContentError as e:
            return trace + [("error", str(e))]
    try:
        trace.append(("final", stream.finish()))
    except ContentError as e:
        trace.append(("final error", str(e)))
    return trace + [("content", stream.content)]


@pytest.mark.parametrize("template,thinking", [("chatml", False), ("qwen3", False), ("qwen3", True)])
def test_incremental_stream_equals_reparsing(template, thinking):
    for pieces in _random_answers({"chatml": 1, "qwen3": 2}[template] + 10 * thinking, 600):
        fast = _run_stream(ContentStream(True, template, thinking), pieces)
        slow = _run_stream(ContentStream(True, template, thinking, incremental=False), pieces)
        assert fast == slow, pieces


def test_incremental_stream_is_linear(monkeypatch):
    """Once the JSON value has begun, pieces are scanned, not the whole answer parsed again: the full parses are
    counted (a few at the start, none after), not timed. Without the scanner there is one per piece."""
    from bankml.chat import content as content_module

    parses = []
    whole = content_module._peg_parse
    monkeypatch.setattr(content_module, "_peg_parse", lambda *a: parses.append(1) or whole(*a))
    text = json.dumps({"items": [{"name": "x" * 20, "v": i, "f": 1.5} for i in range(400)]}, indent=2)
    pieces = [text[i : i + 4] for i in range(0, len(text), 4)]
    stream = ContentStream()
    for piece in pieces:
        stream.push(piece)
    stream.finish()
    assert stream.content == text
    assert len(parses) <= 3, len(parses)
    parses.clear()
    stream = ContentStream(incremental=False)
    for piece in pieces[:50]:
        stream.push(piece)
    assert len(parses) == 50
