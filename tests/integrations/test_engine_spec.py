"""bankml.integrations.spec: the constraints the engine adapters compile (no engine needed)."""

import json

import numpy as np
import pytest

from bankml import Grammar, GrammarError, Rules, Vocab, json_schema_to_grammar
from bankml.integrations.spec import (
    JSON_SCHEMA_MODE_ENV,
    Compiler,
    SpecError,
    grammar_text,
    regex_to_grammar,
    resolve_json_schema_mode,
)


def byte_vocab():
    return Vocab([bytes([c]) for c in range(32, 127)] + [b"</s>"], eog_ids=[95])


def matches(gbnf, text):
    vocab = byte_vocab()
    g = Grammar(Rules.parse(gbnf, "root", vocab), vocab)
    try:
        g.accept_bytes(text.encode())
    except GrammarError:
        return False
    return g.complete


@pytest.mark.parametrize(
    "pattern,yes,no",
    [
        ("[0-9]{2,3}", ["12", "123"], ["1", "1234", "ab"]),
        ("^[0-9]{2,3}$", ["12", "123"], ["1", "1234"]),
        ("(cat|dog)s?", ["cat", "dogs"], ["cats!", "bird"]),
        ('a"b', ['a"b'], ["ab"]),
        ("[a-z]+-[0-9]*", ["ab-", "x-12"], ["-1", "AB-1"]),
    ],
)
def test_regex_matches_whole_strings(pattern, yes, no):
    gbnf = regex_to_grammar(pattern)
    for text in yes:
        assert matches(gbnf, text), (pattern, text)
    for text in no:
        assert not matches(gbnf, text), (pattern, text)


def test_regex_refusals_are_spec_errors():
    with pytest.raises(SpecError, match="not supported"):
        regex_to_grammar("a(?=b)")
    with pytest.raises(SpecError, match="invalid regex"):
        regex_to_grammar("(ab")
    with pytest.raises(SpecError, match="must be a string"):
        regex_to_grammar(3)


def test_grammar_text_kinds(monkeypatch):
    monkeypatch.delenv(JSON_SCHEMA_MODE_ENV, raising=False)
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    assert grammar_text("json", schema) == json_schema_to_grammar(schema, mode="strict")[0]  # the default
    assert grammar_text("json", schema, "llama.cpp") == json_schema_to_grammar(schema)[0]
    for mode in (None, "strict", "llama.cpp"):  # JSON mode is llama-server's in either
        assert grammar_text("json_object", None, mode) == json_schema_to_grammar({"type": "object"})[0]
    assert grammar_text("ebnf", b'root ::= "x"') == 'root ::= "x"'
    with pytest.raises(SpecError, match="JSON schema conversion failed"):
        grammar_text("json", {"type": "integer", "minimum": "x"})
    with pytest.raises(SpecError, match="JSON schema conversion failed"):
        grammar_text("json", {"type": "integer", "minimum": "x"}, "llama.cpp")
    with pytest.raises(SpecError, match="unknown constraint kind"):
        grammar_text("lark", "start: x")
    with pytest.raises(SpecError, match="must be text"):
        grammar_text("grammar", 3)


def test_compiler_caches_per_constraint_and_clones_matchers():
    vocab = byte_vocab()
    compiler = Compiler(vocab, max_entries=2)
    a = compiler.matcher("json", {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}})
    b = compiler.matcher("json", {"properties": {"b": {"type": "string"}, "a": {"type": "integer"}}, "type": "object"})
    assert compiler.compiled == 1 and a is not b and a.context is b.context  # same constraint: one context
    a.accept_bytes(b"{")
    width = (len(vocab) + 31) // 32
    ra, rb = np.zeros(width, np.int32), np.zeros(width, np.int32)
    a.fill_next_token_bitmask(ra)
    b.fill_next_token_bitmask(rb)
    assert not np.array_equal(ra, rb)  # independent states
    compiler.matcher("grammar", 'root ::= "x"')
    compiler.matcher("ebnf", 'root ::= "x"')  # ebnf is grammar
    assert compiler.compiled == 2
    compiler.matcher("regex", "[0-9]+")  # evicts the schema (LRU of 2)
    compiler.matcher("json", {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}})
    assert compiler.compiled == 4
    with pytest.raises(SpecError, match="invalid GBNF"):
        compiler.matcher("grammar", "root ::= (")


# -- the engines' JSON schema mode: strict by default, llama.cpp's on request

# where the two modes differ: llama.cpp's converter ignores `minimum` on a number, strict mode enforces it
BOUNDED = {"type": "object", "properties": {"x": {"type": "number", "minimum": 5}}, "required": ["x"]}


def test_json_schema_mode_default_env_and_argument(monkeypatch):
    monkeypatch.delenv(JSON_SCHEMA_MODE_ENV, raising=False)
    assert resolve_json_schema_mode() == "strict"
    assert resolve_json_schema_mode("llama.cpp") == "llama.cpp"
    monkeypatch.setenv(JSON_SCHEMA_MODE_ENV, "llama.cpp")
    assert resolve_json_schema_mode() == "llama.cpp"
    assert resolve_json_schema_mode("strict") == "strict"  # an explicit argument wins
    assert grammar_text("json", BOUNDED) == json_schema_to_grammar(BOUNDED)[0]
    monkeypatch.setenv(JSON_SCHEMA_MODE_ENV, "loose")
    with pytest.raises(SpecError, match="BANKML_JSON_SCHEMA_MODE"):
        grammar_text("json", BOUNDED)
    with pytest.raises(SpecError, match="unknown JSON schema mode"):
        Compiler(byte_vocab())


def test_strict_default_enforces_what_llama_cpp_mode_lets_through(monkeypatch):
    monkeypatch.delenv(JSON_SCHEMA_MODE_ENV, raising=False)
    strict = grammar_text("json", BOUNDED)
    loose = grammar_text("json", BOUNDED, "llama.cpp")
    assert matches(loose, '{"x": 1}')  # below the minimum: llama.cpp's grammar allows it
    # the canonical style by default (no whitespace: the language to generate in); exact on request
    assert not matches(strict, '{"x":1}') and not matches(strict, '{"x":4.99}')
    assert matches(strict, '{"x":5}') and matches(strict, '{"x":7.25}') and not matches(strict, '{"x": 5}')
    exact = grammar_text("json", BOUNDED, None, "exact")
    assert matches(exact, '{"x": 5}') and matches(exact, '{ "x" : 7.25 }') and not matches(exact, '{"x": 4.99}')
    assert Compiler(byte_vocab(), strict_style="exact").rules("json", BOUNDED) is not None
    with pytest.raises(ValueError, match="strict_style must be 'canonical' or 'exact', not 'loose'"):
        Compiler(byte_vocab(), strict_style="loose")
    # the compiler uses the mode it was built with: its cached matchers differ
    vocab = byte_vocab()
    strict_matcher = Compiler(vocab).matcher("json", BOUNDED)
    loose_matcher = Compiler(vocab, json_schema_mode="llama.cpp").matcher("json", BOUNDED)
    assert Compiler(vocab).json_schema_mode == "strict"
    loose_matcher.accept_bytes(b'{"x": 1}')
    assert loose_matcher.complete
    with pytest.raises(GrammarError):
        strict_matcher.accept_bytes(b'{"x": 1}')
    monkeypatch.setenv(JSON_SCHEMA_MODE_ENV, "llama.cpp")
    assert Compiler(vocab).json_schema_mode == "llama.cpp"


def test_strict_refusal_names_keyword_and_pointer(monkeypatch):
    monkeypatch.delenv(JSON_SCHEMA_MODE_ENV, raising=False)
    schema = {"type": "object", "properties": {"tags": {"type": "array", "uniqueItems": True}}}
    with pytest.raises(SpecError, match=r"keyword uniqueItems at #/properties/tags/uniqueItems"):
        grammar_text("json", schema)
    with pytest.raises(SpecError, match="uniqueItems"):
        Compiler(byte_vocab()).matcher("json", json.dumps(schema))
    # llama.cpp mode converts it (ignoring uniqueItems)
    assert "root ::=" in grammar_text("json", schema, "llama.cpp")
