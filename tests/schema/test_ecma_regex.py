"""ECMA-262 patterns (strict mode's default ``regex_dialect``) against ``regress`` (an ECMA-262 engine, ``u``
flag; Annex B's reading where the ``u`` flag alone rejects the syntax): the language strict mode builds for a
pattern (``lang.ecma.to_python`` then ``Lang.regex``) holds exactly the strings regress finds a match in, on
hand-picked and mutated strings. Python's dialect (``regex_dialect="python"``) stays ``re.search``'s."""

from __future__ import annotations

import json
import random

import pytest
import regress

from bankml import Grammar, Rules, Vocab, json_schema_to_grammar
from bankml.errors import GrammarError, SchemaError
from bankml.schema.strict.lang import Lang, LangError
from bankml.schema.strict.lang.ecma import to_python

from ..oracle_support import ORACLE_STATS
from .test_strict_lang import mutations

TINY = Vocab([b"x"], [])
PATTERNS = [
    r"^\d+$",
    r"\D",
    r"^\w+$",
    r"\W",
    r"^\s*$",
    r"\S",
    r"^a.c$",
    r"^[^]$",
    r"^[]?$",
    r"\bfoo\b",
    r"\Bo",
    r"^[\d\-]+$",
    r"^[^\s\d]+$",
    r"^[\W\d]$",
    r"^\cJ$",
    r"^\u{1F600}+$",
    r"^\ud83d\ude00$",
    r"^\x41\u0042\0$",
    r"^(?<year>\d{4})-\d\d$",
    r"^(?:ab|cd)*$",
    r"^[a-z]{2,3}$",
    r"^a{2,}b{0}c{1}$",
    r"^[[a-z]*$",
    r"^[[a-z]*]*$",
    r"a{",
    r"a}b",
    r"^\:\-\_\@$",
    r"x{,2}",
    r"\/\.\*",
    r"end$",
    r"^[\b]$",
    r"^\t\n\v\f\r$",
]
STRINGS = [
    "",
    "123",
    "12\n",
    "১২",
    "é",
    "abc",
    "a\nc",
    "a\rc",
    "a\u2028c",
    "a\u2029c",
    "a\u0085c",
    "\ufeff",
    " \t\u00a0\u3000",
    "\x1c",
    "foo bar",
    "food",
    "\n",
    "😀😀",
    "AB\x00",
    "2024-12",
    "abcd",
    "/.*",
    "the end",
    "the end\n",
    "\b",
    "\t\n\x0b\x0c\r",
    "x",
]


def _regress(pattern):
    """The ``u`` flag's regex, or Annex B's reading where the ``u`` flag alone rejects the syntax (a lone bracket,
    an identity escape of punctuation), as strict mode reads it."""
    try:
        return regress.Regex(pattern, "u")
    except Exception:
        return regress.Regex(pattern)


# the edits test_strict_lang makes, over characters where ECMA-262 and Python's re differ (line terminators, BOM,
# non-ASCII digits and letters, astral)
ECMA_ALPHABET = list("a1 _\n\r\u2028é১\ufeff\x0b-😀")


@pytest.mark.parametrize("pattern", PATTERNS)
def test_pattern_is_regress(pattern):
    lang = Lang.regex(to_python(pattern))
    rx = _regress(pattern)
    rnd = random.Random(pattern)
    for s in STRINGS + [m for s in STRINGS for m in mutations(s, rnd, ECMA_ALPHABET)]:
        assert lang.matches(s) == (rx.find(s) is not None), (pattern, s)
        ORACLE_STATS["ECMA-262 pattern verdicts equal to regress's"] += 1


def _accepts(gbnf, value):
    g = Grammar(Rules.parse(gbnf), TINY)
    try:
        g.accept_bytes(json.dumps(value).encode())
    except GrammarError:
        return False
    return bool(g.complete)


def test_the_dialects():
    schema = {"type": "string", "pattern": r"^\d+$"}
    ecma, _ = json_schema_to_grammar(schema, mode="strict", strict_style="exact")
    python, _ = json_schema_to_grammar(schema, mode="strict", regex_dialect="python", strict_style="exact")
    assert _accepts(ecma, "12") and not _accepts(ecma, "১২") and not _accepts(ecma, "12\n")
    assert _accepts(python, "12") and _accepts(python, "১২") and _accepts(python, "12\n")
    with pytest.raises(ValueError, match="regex_dialect"):
        json_schema_to_grammar(schema, mode="strict", regex_dialect="perl")
    with pytest.raises(ValueError, match="mode='strict'"):
        json_schema_to_grammar(schema, regex_dialect="python")


@pytest.mark.parametrize(
    "schema,keyword,pointer",
    [
        ({"pattern": r"\a"}, "pattern", "#/pattern"),
        ({"pattern": r"(?i)a"}, "pattern", "#/pattern"),
        ({"pattern": r"(?P<x>a)"}, "pattern", "#/pattern"),
        ({"pattern": r"\p{L}"}, "pattern", "#/pattern"),
        ({"pattern": r"\Z"}, "pattern", "#/pattern"),
        ({"pattern": "("}, "pattern", "#/pattern"),
        (
            {"properties": {"a": {"patternProperties": {r"\z": {}}}}},
            "patternProperties",
            "#/properties/a/patternProperties/\\z",
        ),
        ({"items": {"not": {"pattern": r"[a"}}}, "pattern", "#/items/not/pattern"),
    ],
)
def test_refusals_name_the_users_pattern(schema, keyword, pointer):
    with pytest.raises(SchemaError) as e:
        json_schema_to_grammar(schema, mode="strict")
    assert (e.value.keyword, e.value.pointer) == (keyword, pointer), str(e.value)
    # Python's dialect reads some of them
    if schema.get("pattern") in (r"(?i)a", r"(?P<x>a)", r"\Z"):
        json_schema_to_grammar(schema, mode="strict", regex_dialect="python")


def test_the_callers_schema_is_not_changed():
    schema = {"properties": {"a": {"pattern": r"^\d$"}}, "patternProperties": {r"^\w$": {"pattern": "x$"}}}
    before = json.dumps(schema)
    json_schema_to_grammar(schema, mode="strict")
    assert json.dumps(schema) == before


def test_to_python_refuses_with_lang_error():
    with pytest.raises(LangError):
        to_python(r"\k<x>")


def test_shared_objects_are_read_once_and_rewritten_everywhere():
    digit = {"type": "string", "pattern": r"^\d$"}
    # the object reached through a sibling before its parent: children are rewritten before their parents
    schema = {"anyOf": [{"allOf": [digit]}, {"properties": {"a": digit}, "type": "object"}]}
    gbnf, _ = json_schema_to_grammar(schema, mode="strict", strict_style="exact")
    assert _accepts(gbnf, "1") and not _accepts(gbnf, "১")
    assert _accepts(gbnf, {"a": "1"}) and not _accepts(gbnf, {"a": "১"})
    shared = {"type": "string", "pattern": r"^\w$"}
    for _ in range(40):  # 2^40 paths through shared sub-objects
        shared = {"anyOf": [shared, shared]}
    gbnf, _ = json_schema_to_grammar(shared, mode="strict", strict_style="exact")
    assert _accepts(gbnf, "a") and not _accepts(gbnf, "é")
