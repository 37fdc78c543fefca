"""bankml.chat.constraint's chat grammars and bankml.chat.content's content rule compared with the pinned llama.cpp, live.

tests/oracle/build_chat.py compiles a small program against libllama-common.so of llama-cpp-python 0.3.36 that
runs llama.cpp's own chat template path (common_chat_templates_apply: the grammar and generation prompt) and
chat parser (common_chat_parse) for the two templates bankml knows. Every schema and every raw answer below
goes through it and through bankml; the results must be identical (grammar bytes, prompt, content, reasoning
content, or the same exception message).
"""

import json
import pathlib
import random

import pytest

from bankml import SchemaError
from bankml.chat.constraint import chat_grammar
from bankml.chat.content import ContentError, parse_message

from ..oracle import build_chat
from ..oracle.build_converter import OracleUnavailable
from ..oracle_support import ORACLE_STATS

pytestmark = pytest.mark.oracle

DATA = pathlib.Path(__file__).parent.parent / "data"
RECORDED = json.loads((DATA / "llama-server-jsonmode.json").read_text(encoding="utf-8"))
CONFIGS = [("chatml", False), ("qwen3", False), ("qwen3", True)]


@pytest.fixture(scope="module")
def oracle():
    try:
        exe = build_chat.build()
        paths = build_chat.templates()
    except OracleUnavailable as e:
        pytest.fail(f"the pinned llama.cpp chat oracle could not be built (the test extra installs what it needs): {e}")
    return lambda requests: build_chat.run([(paths[t], *rest) for t, *rest in requests], exe)


def _schemas():
    cases = json.loads((DATA / "json_schema_to_grammar_cases.json").read_text(encoding="utf-8"))["cases"]
    texts = [c["schema"] if isinstance(c["schema"], str) else json.dumps(c["schema"]) for c in cases]
    texts += [
        # rule names the chat grammar uses too: llama.cpp's order of adding rules decides the renaming
        '{"$defs": {"json-value": {"type": "string"}}, "$ref": "#/$defs/json-value"}',
        '{"$defs": {"root": {"type": "string"}, "space": {"type": "integer"}}, "type": "object", '
        '"properties": {"a": {"$ref": "#/$defs/root"}, "b": {"$ref": "#/$defs/space"}}}',
        '{"$defs": {"response-format": {"type": "string"}}, "$ref": "#/$defs/response-format"}',
        '{"$defs": {"until-13": {"type": "string"}}, "$ref": "#/$defs/until-13"}',
        '{"$defs": {"json-string": {"type": "integer"}, "json-object": {"const": 1}}, "type": "array", '
        '"items": {"anyOf": [{"$ref": "#/$defs/json-string"}, {"$ref": "#/$defs/json-object"}]}}',
        # refusals: reader, integer range, converter
        '{"type": "object", "properties": {"x": {"type": "nope"}}}',
        '{"type": "integer", "maximum": -9223372036854775808}',
        '{"type": "string", "pattern": "^(a$"}',
        '{"type": "object"}',
        '{"type": "string"}',
        '{"const": 2.0}',
        '{"enum": [1.5, "a", null, true]}',
    ]
    out = []
    for text in texts:
        try:
            value = json.loads(text)
        except ValueError:
            continue
        if isinstance(value, dict) and value:  # llama-server builds a chat grammar only for these
            out.append(text)
    return out


def test_oracle_reproduces_the_recorded_server(oracle):
    requests = []
    for key, case in sorted(RECORDED.items()):
        rf = case["request"].get("response_format")
        schema = (
            ""
            if rf is None
            else json.dumps(rf["json_schema"]["schema"])
            if rf["type"] == "json_schema"
            else '{"type": "object"}'
        )
        requests.append(("chatml" if key.startswith("smollm2") else "qwen3", schema, False, False, [case["content"]]))
    for (key, case), res in zip(sorted(RECORDED.items()), oracle(requests)):
        assert res["prompt"] == case["generation_prompt"]
        if not key.endswith("/grammar"):
            assert res["grammar"] == case["grammar"]
        assert res["parses"][0]["content"] == case["content"]


def test_chat_grammars_match_llama_cpp(oracle):
    schemas = _schemas()
    requests = [(t, s, thinking, False, []) for t, thinking in CONFIGS for s in schemas]
    results = oracle(requests)
    same = 0
    for (template, schema, thinking, _, _), res in zip(requests, results):
        try:
            mine = ("ok",) + chat_grammar(json.loads(schema), template, thinking)
        except SchemaError as e:
            mine = ("error", str(e))
        theirs = ("ok", res["grammar"], res["prompt"]) if res["ok"] else ("error", res["error"])
        assert mine == theirs, (template, thinking, schema)
        same += 1
    ORACLE_STATS["chat grammars identical to llama.cpp's (schemas x template configs)"] = same


def _raw_answers():
    recorded = [case["content"] for case in RECORDED.values()]
    hand = [
        '{"a": "x\\u12',
        '{"a": "x\\u1234"}',
        '[1, 2.5e-3, -0, true, false, null, "s\\"q"]',
        '"str"',
        "12",
        "-",
        "1e+",
        '```json\n{"a":1}\n```',
        '```json {"a": 1} ```',
        '  \n {"a": 1}  \n',
        "Hello",
        '{"a": 1} and more',
        '{"a" 1}',
        "```yaml",
        "```",
        "",
        " ",
        '{"é": "ü\\ud83d\\ude00"}',
        '{"k": "a\tb\x01"}',
        '\x0b\x0c{"a":\r\n1}\x0b',
        '{"a": [{"b": {}}, []]}',
        "{ }",
        "[ ]",
        '{"a":1,}',
        "01",
        "1.",
        ".5",
        '{"a": 1}\n```\n',
        "nullx",
        "true ",
        "<think>x</think>{}",
        '<think>\nhmm\n</think>\n\n```json\n{"a": 1}\n```',
        "<think>\nstill",
        "</think>{}",
        "\n<think>a</think>\n\n{}",
        '<think>\n\n</think>\n\n"x"',
    ]
    raws = []
    for text in recorded + hand:
        raws += [text, "```json\n" + text + "\n```", "\n\n" + text + " \n"]
    prefixes = sorted({r[:i] for r in raws for i in range(len(r) + 1)})
    rng = random.Random(20261129)
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
    ]
    fuzz = ["".join(rng.choice(atoms) for _ in range(rng.randint(0, 14))) for _ in range(2000)]
    for _ in range(500):
        value = {"a": [1, 2.5, {"b": "x\\y\u00e9"}], "c": None, "d": True, "e": -0.5e3}
        text = json.dumps(value, indent=rng.choice([None, 2]), ensure_ascii=rng.random() < 0.5)
        text = rng.choice(["", " ", "```json\n", "\n"]) + text + rng.choice(["", "\n```", " "])
        fuzz.append(text[: rng.randint(0, len(text))])
    as_bytes = [b'{"a": "\xc3', b'{"a": "\x80"}', b"ab\xe2\x82", b"a\xffb", b'{"a": "\xe2\x82\xac"}', b"\xff{}"]
    return prefixes + fuzz + as_bytes


def test_content_matches_llama_cpp(oracle):
    raws = _raw_answers()
    same = 0
    for template, thinking in CONFIGS:
        for json_mode in (True, False):
            for partial in (True, False):
                schema = '{"type": "object"}' if json_mode else ""
                res = oracle([(template, schema, thinking, partial, raws)])[0]
                for raw, parse in zip(raws, res["parses"]):
                    try:
                        mine = ("ok",) + parse_message(raw, json_mode, template, thinking, partial)
                    except ContentError as e:
                        mine = ("error", str(e))
                    theirs = ("ok", parse["content"], parse["reasoning"]) if parse["ok"] else ("error", parse["error"])
                    assert mine == theirs, (template, thinking, json_mode, partial, raw)
                    same += 1
    ORACLE_STATS["chat parses identical to llama.cpp's common_chat_parse (answers x 12 configs)"] = same
