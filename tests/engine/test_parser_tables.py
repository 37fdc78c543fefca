"""llama.cpp's tests/test-grammar-parser.cpp, as a data table (tests/data/grammar_parser_cases.json).

The C++ test runs ``llama_grammar_parser::parse`` alone (no root or left-recursion
checks), which is ``Rules.parse(text, root=None)`` here, and compares:

* ``verify_failure``: the parse fails (the C++ parser leaves ``rules`` empty; bankml raises
  ``GrammarError``);
* ``verify_parsing``: ``symbol_ids`` walked in ``std::map`` order (names sorted bytewise)
  equals the expected (name, id) list, and the rules, element by element, equal the
  expected elements (type and value).

The C++ walks the flattened actual rules and indexes into the expected list, so a parse
that produced a strict prefix of the expected elements would slip through there; here the
rules must be equal, rule by rule.

The cases come from llama.cpp's tests (MIT License, Copyright (c) 2023-2026 The ggml
authors); see tests/data/README.md.
"""

import json
from pathlib import Path

import pytest

from bankml import GrammarError, Rules

DATA = Path(__file__).parent.parent / "data" / "grammar_parser_cases.json"


def _load():
    if not DATA.is_file():
        raise FileNotFoundError(f"test data missing: {DATA} (transcribed from llama.cpp's test-grammar-parser.cpp)")
    with DATA.open(encoding="utf-8") as f:
        return json.load(f)


_DOC = _load()
TYPES = _DOC["element_types"]
CASES = _DOC["cases"]
OK_CASES = [c for c in CASES if c["expect"] == "ok"]
ERROR_CASES = [c for c in CASES if c["expect"] == "error"]
assert len(OK_CASES) + len(ERROR_CASES) == len(CASES) == 23, "the C++ test has 17 verify_parsing + 6 verify_failure"


def _ids(cases):
    return [c["id"] for c in cases]


def _actual_rules(rules):
    return [[(int(t), int(v)) for t, v in rule] for rule in rules.rules]


def _expected_rules(case):
    return [[(TYPES[t], v) for t, v in rule] for rule in case["rules"]]


@pytest.mark.parametrize("case", OK_CASES, ids=_ids(OK_CASES))
def test_verify_parsing(case):
    rules = Rules.parse(case["grammar"], root=None)

    # symbol_ids, in std::map<std::string, uint32_t> iteration order (bytewise name order)
    actual_syms = sorted(rules.symbol_ids.items(), key=lambda kv: kv[0].encode("utf-8"))
    expected_syms = list(case["symbol_ids"].items())
    assert len(actual_syms) == len(expected_syms)
    assert actual_syms == expected_syms

    assert _actual_rules(rules) == _expected_rules(case)


@pytest.mark.parametrize("case", ERROR_CASES, ids=_ids(ERROR_CASES))
def test_verify_failure(case):
    with pytest.raises(GrammarError):
        Rules.parse(case["grammar"], root=None)
