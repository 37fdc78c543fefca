"""llama.cpp's tests/test-grammar-integration.cpp, as a data table (tests/data/grammar_integration_cases.json).

Match cases (the C++ ``test_grammar`` / ``test_schema`` calls): the grammar is built as
``llama_grammar_init_impl(nullptr, grammar, "root", ...)`` does, i.e.
``Rules.parse(grammar, root=root)`` then ``Grammar(rules, vocab=None)``, and each passing
string must match and each failing string must not, where "match" is the C++ helper
``match_string`` reproduced below:

* ``parse_tokens`` splits the bytes into token markers (0xFF + 4-byte big-endian id, the
  C++ ``token()`` helper) and UTF-8 code points, decoded with llama.cpp's
  ``unicode_cpt_from_utf8`` rules (no overlong / surrogate checks) and re-encoded with
  ``unicode_cpt_to_utf8``; an undecodable byte becomes U+FFFD and is skipped;
* a marker is fed as ``accept_token(id, b"<[id]>")``, a code point as
  ``accept_token(0, its UTF-8 bytes)``; a ``GrammarError`` (C++: ``std::runtime_error``) or
  an empty stack set means no match;
* at the end the string matches iff some stack is empty (``Grammar.complete``).

The C++ resets the stacks of one grammar between strings; here each string gets a fresh
``Grammar`` from the same ``Rules``.

``test_schema`` cases: the data file carries the grammar that the pinned llama.cpp's converter
produced for each schema (``json_schema_to_grammar(json::parse(schema), true)``), so that this
table tests the grammar engine alone (bankml's converter is compared with llama.cpp's in
tests/schema/test_schema_oracle.py). Every case has its grammar; none is skipped.

Build cases (``test_failure_*`` and ``test_custom_root_symbol_check``): see the ``check``
field and ``test_build_case`` below.

The cases come from llama.cpp's tests (MIT License, Copyright (c) 2023-2026 The ggml
authors); see tests/data/README.md.
"""

import json
from pathlib import Path

import pytest

from bankml import Grammar, GrammarError, Rules

DATA = Path(__file__).parent.parent / "data" / "grammar_integration_cases.json"


def _load():
    if not DATA.is_file():
        raise FileNotFoundError(
            f"test data missing: {DATA} (transcribed from llama.cpp's test-grammar-integration.cpp)"
        )
    with DATA.open(encoding="utf-8") as f:
        return json.load(f)


_DOC = _load()
MATCH_CASES = _DOC["match_cases"]
BUILD_CASES = _DOC["build_cases"]
assert len(MATCH_CASES) == 47, "the C++ test has 14 test_grammar + 33 test_schema calls"
assert len(BUILD_CASES) == 9


# --- the C++ helpers -------------------------------------------------------------------


def encode_test_string(s):
    """A data-file string (str, or list of str / {"token": id} parts) -> the C++ std::string bytes."""
    if isinstance(s, str):
        return s.encode("utf-8")
    out = bytearray()
    for part in s:
        if isinstance(part, str):
            out += part.encode("utf-8")
        else:
            # token(): 0xff, then the id's 4 bytes, big-endian
            out += b"\xff" + (part["token"] & 0xFFFFFFFF).to_bytes(4, "big")
    return bytes(out)


class _InvalidUtf8(Exception):
    """std::invalid_argument thrown by unicode_cpt_from_utf8 / unicode_cpt_to_utf8."""


def _cpt_from_utf8(data, offset):
    """llama.cpp's unicode_cpt_from_utf8: returns (code point, new offset) or raises _InvalidUtf8.

    Like the C++, no check for overlong forms, surrogates or values past U+10FFFF.
    """
    n = len(data)
    b0 = data[offset]
    if not b0 & 0x80:
        return b0, offset + 1
    if not b0 & 0x40:
        raise _InvalidUtf8
    if not b0 & 0x20:
        if offset + 1 >= n or (data[offset + 1] & 0xC0) != 0x80:
            raise _InvalidUtf8
        return ((b0 & 0x1F) << 6) | (data[offset + 1] & 0x3F), offset + 2
    if not b0 & 0x10:
        if offset + 2 >= n or (data[offset + 1] & 0xC0) != 0x80 or (data[offset + 2] & 0xC0) != 0x80:
            raise _InvalidUtf8
        return ((b0 & 0x0F) << 12) | ((data[offset + 1] & 0x3F) << 6) | (data[offset + 2] & 0x3F), offset + 3
    if not b0 & 0x08:
        if (
            offset + 3 >= n
            or (data[offset + 1] & 0xC0) != 0x80
            or (data[offset + 2] & 0xC0) != 0x80
            or (data[offset + 3] & 0xC0) != 0x80
        ):
            raise _InvalidUtf8
        cpt = (
            ((b0 & 0x07) << 18)
            | ((data[offset + 1] & 0x3F) << 12)
            | ((data[offset + 2] & 0x3F) << 6)
            | (data[offset + 3] & 0x3F)
        )
        return cpt, offset + 4
    raise _InvalidUtf8


def _cpt_to_utf8(cpt):
    """llama.cpp's unicode_cpt_to_utf8 (encodes surrogates too; raises past U+10FFFF)."""
    if cpt <= 0x7F:
        return bytes([cpt])
    if cpt <= 0x7FF:
        return bytes([0xC0 | ((cpt >> 6) & 0x1F), 0x80 | (cpt & 0x3F)])
    if cpt <= 0xFFFF:
        return bytes([0xE0 | ((cpt >> 12) & 0x0F), 0x80 | ((cpt >> 6) & 0x3F), 0x80 | (cpt & 0x3F)])
    if cpt <= 0x10FFFF:
        return bytes(
            [0xF0 | ((cpt >> 18) & 0x07), 0x80 | ((cpt >> 12) & 0x3F), 0x80 | ((cpt >> 6) & 0x3F), 0x80 | (cpt & 0x3F)]
        )
    raise _InvalidUtf8


def parse_tokens(data):
    """The C++ parse_tokens(): bytes -> [(token id, piece bytes)]."""
    result = []
    offset = 0
    while offset < len(data):
        if data[offset] == 0xFF:
            if offset + 5 > len(data):
                # std::runtime_error, which the C++ does not catch: the test itself would abort
                raise RuntimeError("not enough bytes for token id")
            val = int.from_bytes(data[offset + 1 : offset + 5], "big")
            token = val - (1 << 32) if val >= (1 << 31) else val  # static_cast<llama_token>(uint32_t)
            result.append((token, b"<[%d]>" % val))
            offset += 5
            continue
        try:
            cpt, offset = _cpt_from_utf8(data, offset)
            piece = _cpt_to_utf8(cpt)
        except _InvalidUtf8:
            # like the C++: one byte further on (after whatever the decoder already consumed)
            offset += 1
            piece = _cpt_to_utf8(0xFFFD)
        result.append((0, piece))
    return result


def match_string(data, grammar):
    """The C++ match_string() on a grammar in its initial state."""
    for token, piece in parse_tokens(data):
        try:
            grammar.accept_token(token, piece)
        except GrammarError:
            # normally this shouldn't get hit because of llama_grammar_apply
            return False
        if not grammar.stacks:
            # no stacks means that the grammar failed to match at this point
            return False
    return grammar.complete


# --- self-checks of the helpers (no bankml needed) -------------------------------------


def test_helper_token_encoding():
    data = encode_test_string(["ab", {"token": 258}, "é"])
    assert data == b"ab\xff\x00\x00\x01\x02\xc3\xa9"
    assert parse_tokens(data) == [(0, b"a"), (0, b"b"), (258, b"<[258]>"), (0, b"\xc3\xa9")]


def test_helper_invalid_utf8_like_cpp():
    rep = "\ufffd".encode("utf-8")
    # stray continuation byte, truncated 2-byte sequence, 0xF8 lead byte
    assert parse_tokens(b"\x80a") == [(0, rep), (0, b"a")]
    assert parse_tokens(b"\xc3") == [(0, rep)]
    assert parse_tokens(b"\xf8a") == [(0, rep), (0, b"a")]
    # overlong NUL decodes to U+0000 (no overlong check in unicode_cpt_from_utf8)
    assert parse_tokens(b"\xc0\x80") == [(0, b"\x00")]
    # a 4-byte form past U+10FFFF: decoded (offset += 4), then unicode_cpt_to_utf8 throws: offset += 1 more
    assert parse_tokens(b"\xf4\x90\x80\x80xy") == [(0, rep), (0, b"y")]


# --- match cases -----------------------------------------------------------------------


def _string_params():
    params = []
    for case in MATCH_CASES:
        for expect, key in ((True, "passing"), (False, "failing")):
            for i, s in enumerate(case[key]):
                params.append(pytest.param(case, s, expect, id=f"{case['id']}-{key}-{i}"))
    return params


_RULES_CACHE = {}


def _rules_for(case):
    key = case["id"]
    if key not in _RULES_CACHE:
        _RULES_CACHE[key] = Rules.parse(case["grammar"], root=case["root"], vocab=None)
    return _RULES_CACHE[key]


@pytest.mark.parametrize("case", MATCH_CASES, ids=[c["id"] for c in MATCH_CASES])
def test_match_case_builds(case):
    # every case has its grammar: the schema cases' were produced by the pinned converter (the table's note)
    assert case["grammar"] is not None, case["id"]
    rules = Rules.parse(case["grammar"], root=case["root"], vocab=None)
    grammar = Grammar(rules, vocab=None)
    assert grammar.stacks, "a built grammar has initial stacks"


@pytest.mark.parametrize("case,string,expect", _string_params())
def test_match_string(case, string, expect):
    rules = _rules_for(case)
    grammar = Grammar(rules, vocab=None)
    assert match_string(encode_test_string(string), grammar) is expect


# --- build cases -----------------------------------------------------------------------


@pytest.mark.parametrize("case", BUILD_CASES, ids=[c["id"] for c in BUILD_CASES])
def test_build_case(case):
    check = case["check"]
    if check == "parse_ok_symbol_absent":
        # test_failure_missing_root: the parser alone succeeds, and there is no "root" symbol
        rules = Rules.parse(case["grammar"], root=None)
        assert rules.rules
        assert case["symbol"] not in rules.symbol_ids
    elif check == "parse_fails":
        # test_failure_missing_reference: the parser alone fails (undefined rule)
        with pytest.raises(GrammarError):
            Rules.parse(case["grammar"], root=None)
    elif check == "build_fails":
        # test_failure_left_recursion / _missing_root_symbol / custom root "root":
        # llama_grammar_init_impl returns nullptr
        with pytest.raises(GrammarError):
            rules = Rules.parse(case["grammar"], root=case["root"], vocab=None)
            Grammar(rules, vocab=None)
    elif check == "build_ok":
        rules = Rules.parse(case["grammar"], root=case["root"], vocab=None)
        Grammar(rules, vocab=None)
    else:  # pragma: no cover - a data file error
        raise AssertionError(f"unknown check {check!r}")


# Not asserted by the C++ test, but what llama_grammar_init_impl does with these grammars:
# the parser alone accepts them, and the failure comes from the root / left-recursion checks.
@pytest.mark.parametrize("case", [c for c in BUILD_CASES if c["check"] == "build_fails"], ids=lambda c: c["id"])
def test_build_failure_is_not_a_parse_failure(case):
    Rules.parse(case["grammar"], root=None)


def test_missing_root_fails_full_build():
    # Not asserted by the C++ test: llama_grammar_init_impl refuses a grammar without its root symbol.
    (case,) = [c for c in BUILD_CASES if c["id"] == "missing-root"]
    with pytest.raises(GrammarError):
        Rules.parse(case["grammar"], root="root")
