"""llama.cpp's tests/test-llama-grammar.cpp, as a data table (tests/data/llama_grammar_cases.json).

The C++ test hand-builds a rule set (the expression grammar, with ``+`` expanded the old
way), builds a grammar from it with ``llama_grammar_init_impl(nullptr, rules, n, root)``,
checks the initial stacks (which is what ``llama_grammar_advance_stack`` produces from the
root's alternates), then runs ``llama_grammar_reject_candidates_for_stack`` on each initial
stack with 23 one-code-point candidates (U+0025..U+003B).

Through bankml's public API:

* the hand-built tables come from GBNF text that the parser turns into exactly them
  (checked first, against the C++ tables; GBNF names cannot contain ``_``, so the text
  writes ``root-1`` for the C++ ``root_1`` and so on);
* the initial stacks are ``Grammar(rules).stacks`` (elements bottom to top, same stack
  order as llama.cpp);
* per-stack rejection is not public, so what is checked is its consequence for the whole
  grammar: a candidate code point is accepted (``accept_token(0, piece)`` leaves a stack)
  iff at least one initial stack does not reject it, per the C++ table.

The data come from llama.cpp's tests (MIT License, Copyright (c) 2023-2026 The ggml
authors); see tests/data/README.md.
"""

import json
from pathlib import Path

import pytest

from bankml import Grammar, GrammarError, Rules

DATA = Path(__file__).parent.parent / "data" / "llama_grammar_cases.json"


def _load():
    if not DATA.is_file():
        raise FileNotFoundError(f"test data missing: {DATA} (transcribed from llama.cpp's test-llama-grammar.cpp)")
    with DATA.open(encoding="utf-8") as f:
        return json.load(f)


DOC = _load()
TYPES = DOC["element_types"]
FIRST_CP = DOC["candidates"]["first_code_point"]
N_CANDIDATES = DOC["candidates"]["count"]


def _elements(seq):
    return [(TYPES[t], v) for t, v in seq]


def _rules():
    return Rules.parse(DOC["grammar"], root=DOC["root"], vocab=None)


def test_gbnf_reproduces_hand_built_tables():
    for root in (None, DOC["root"]):
        rules = Rules.parse(DOC["grammar"], root=root, vocab=None)
        # GBNF names cannot contain '_': the text spells root_1 as root-1, and so on
        assert {name.replace("-", "_"): i for name, i in rules.symbol_ids.items()} == DOC["symbol_ids"]
        actual = [[(int(t), int(v)) for t, v in rule] for rule in rules.rules]
        assert actual == [_elements(rule) for rule in DOC["rules"]]


def test_initial_stacks():
    grammar = Grammar(_rules(), vocab=None)
    actual = [[(int(t), int(v)) for t, v in stack] for stack in grammar.stacks]
    expected = [_elements(stack) for stack in DOC["expected_stacks"]]
    assert actual == expected


def test_reject_table_matches_stack_count():
    assert len(DOC["expected_rejects"]) == len(DOC["expected_stacks"]) == 8


def _accepted_by_some_stack():
    """Candidate indices that at least one stack does not reject (per the C++ table)."""
    accepted = set()
    for rejects in DOC["expected_rejects"]:
        # the C++ compares only as many entries as there are actual rejects: candidates 0..N-1
        rejected = {idx for idx, cp in rejects if idx < N_CANDIDATES}
        for idx, cp in rejects:
            if idx < N_CANDIDATES:
                assert cp == FIRST_CP + idx
        accepted |= set(range(N_CANDIDATES)) - rejected
    return accepted


ACCEPTED = _accepted_by_some_stack()


@pytest.mark.parametrize("index", range(N_CANDIDATES), ids=lambda i: f"U+{FIRST_CP + i:04X}")
def test_candidate_accepted_iff_some_stack_does_not_reject(index):
    grammar = Grammar(_rules(), vocab=None)
    piece = chr(FIRST_CP + index).encode("utf-8")
    try:
        grammar.accept_token(0, piece)
        accepted = bool(grammar.stacks)
    except GrammarError:
        accepted = False
    assert accepted is (index in ACCEPTED)


def test_accepted_set_is_open_paren_and_digits():
    # A readable restatement of the table: stacks 0 and 4 wait for '(', stacks 1, 2, 5, 6
    # for [0-9], stacks 3 and 7 for [a-z] (outside the candidate range).
    assert {FIRST_CP + i for i in ACCEPTED} == {ord("(")} | set(range(ord("0"), ord("9") + 1))
