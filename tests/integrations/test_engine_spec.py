"""bankml.integrations.spec: the constraints the engine adapters compile (no engine needed)."""

import numpy as np
import pytest

from bankml import Grammar, GrammarError, Rules, Vocab, json_schema_to_grammar
from bankml.integrations.spec import Compiler, SpecError, grammar_text, regex_to_grammar


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


def test_grammar_text_kinds():
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    assert grammar_text("json", schema) == json_schema_to_grammar(schema)[0]
    assert grammar_text("json_object", None) == json_schema_to_grammar({"type": "object"})[0]
    assert grammar_text("ebnf", b'root ::= "x"') == 'root ::= "x"'
    with pytest.raises(SpecError, match="JSON schema conversion failed"):
        grammar_text("json", {"type": "integer", "minimum": "x"})
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
