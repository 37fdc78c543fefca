"""The reasoning budget (bankml.sampling._sampler.ReasoningBudget) against the pinned llama.cpp's own
(common_reasoning_budget_init in libllama-common, driven by tests/oracle/build_reasoning_budget.py), step by
step on a thinking template's tokens: Qwen3's ``<think>`` / ``</think>`` tags tokenized on the Qwen2
vocabulary (several tokens each, so the Aho-Corasick matching of multi-token tags is exercised), random
reasoning text with tokens that split UTF-8 characters, budgets from 0 up, forcing, reset and clone. Every
state, forced token and end match must be identical."""

import os

import numpy as np
import pytest

from bankml.integrations.adapters import llama_cpp_tokenizer
from bankml.sampling._sampler import Sampler
from bankml.sampling.params import SamplerParams
from bankml.sampling.reasoning_budget import ReasoningBudget, _utf8_is_complete

from ..oracle_support import ORACLE_STATS, load_bankml_vocab, vocab_path

pytestmark = pytest.mark.oracle

WALKS = int(os.environ.get("BANKML_REASONING_WALKS", "40"))
STEPS = int(os.environ.get("BANKML_REASONING_STEPS", "120"))


@pytest.fixture(scope="module")
def setup():
    from ..oracle.build_converter import OracleUnavailable
    from ..oracle.build_reasoning_budget import OracleReasoningBudget

    try:
        oracle = OracleReasoningBudget(vocab_path("qwen2"))
    except OracleUnavailable as e:  # an oracle test fails, never skips, when its oracle cannot be built
        pytest.fail(f"the reasoning-budget oracle (the pinned llama.cpp) could not be built: {e}")
    vocab = load_bankml_vocab("qwen2")
    tokenize = llama_cpp_tokenizer(vocab_path("qwen2"))
    tags = {
        "start": tokenize(b"<think>", False, True),
        "ends": [tokenize(b"</think>", False, True), tokenize(b"\n</think>", False, True)],
        "message": tokenize(b"\nOkay, I have thought enough.\n", False, True),
    }
    assert len(tags["start"]) > 1 and len(tags["ends"][0]) > 1
    split = [t for t in range(len(vocab)) if not _utf8_is_complete(vocab.piece(t))]
    text = tokenize("Let me think about this: 2 + 2 = 4. 你好，世界 — ok.\n".encode(), False, True)
    yield vocab, oracle, tags, split, text
    oracle.close()


def python_state(budget):
    forced = budget.forced_token
    return budget.state, forced, budget.end_match


def test_utf8_completeness_matches_llama_cpp():
    # common_utf8_is_complete's table
    assert _utf8_is_complete(b"") and _utf8_is_complete(b"a") and _utf8_is_complete("é".encode())
    assert not _utf8_is_complete("é".encode()[:1]) and not _utf8_is_complete("你".encode()[:2])
    assert _utf8_is_complete("你".encode()) and not _utf8_is_complete(b"\x80\x80\x80\x80")
    assert not _utf8_is_complete("😀".encode()[:3]) and _utf8_is_complete("😀".encode())


@pytest.mark.parametrize("walk", range(WALKS))
def test_reasoning_budget_walks_match_llama_cpp(setup, walk):
    vocab, oracle, tags, split, text = setup
    rng = np.random.default_rng(9000 + walk)
    budget_tokens = int(rng.choice([0, 1, 2, 5, 12, 40, 2**31 - 1]))
    initial = str(rng.choice(["idle", "idle", "idle", "counting", "done", "forcing"]))
    ends = tags["ends"][: int(rng.integers(1, 3))]
    forced = (tags["message"] if rng.random() < 0.7 else []) + list(ends[0])
    starts = [tags["start"]]
    expected = oracle.init(budget_tokens, initial, starts, ends, forced)
    mine = ReasoningBudget(vocab, starts, ends, forced, budget_tokens, initial_state=initial)
    assert python_state(mine) == expected
    steps = 0
    for step in range(STEPS):
        r = rng.random()
        if r < 0.02:
            expected, got = oracle.reset(), (mine.reset(), python_state(mine))[1]
        elif r < 0.05:
            expected, got = oracle.clone(), python_state(mine := mine.clone())
        elif r < 0.08:
            expected, got = oracle.force(), (mine.force(), python_state(mine))[1]
        else:
            forced_now = mine.forced_token
            if forced_now is not None and rng.random() < 0.9:
                token = forced_now  # what the sampler draws while forcing
            else:
                k = rng.random()
                if k < 0.15:
                    seq = tags["start"]
                elif k < 0.3:
                    seq = ends[int(rng.integers(len(ends)))]
                elif k < 0.38:
                    seq = tags["start"][:1] + ends[0][:1]  # tag prefixes that do not complete
                elif k < 0.55:
                    seq = [int(rng.choice(split))]  # splits a UTF-8 character
                elif k < 0.8:
                    i = int(rng.integers(len(text)))
                    seq = text[i : i + int(rng.integers(1, 6))]
                else:
                    seq = [int(rng.integers(len(vocab)))]
                for token in seq[:-1]:
                    assert python_state((mine.accept(token), mine)[1]) == oracle.accept(token)
                    steps += 1
                token = seq[-1]
            expected, got = oracle.accept(token), (mine.accept(token), python_state(mine))[1]
        assert got == expected, f"walk {walk} step {step}: bankml {got}, llama.cpp {expected}"
        ORACLE_STATS[f"reasoning budget steps ending {expected[0]}"] += 1
        steps += 1
    ORACLE_STATS["reasoning budget steps compared"] += steps
    ORACLE_STATS["reasoning budget walks compared"] += 1


def test_the_sampler_draws_the_forced_tokens(setup):
    vocab, _, tags, _, text = setup
    forced = tags["message"] + tags["ends"][0]
    budget = ReasoningBudget(vocab, [tags["start"]], tags["ends"], forced, 3)
    sampler = Sampler(SamplerParams(seed=5, temperature=1.5, top_k=0), vocab, reasoning_budget=budget)
    sampler.prefill(tags["start"])  # the generation prompt opened the block
    assert budget.state == "counting"
    rng = np.random.default_rng(1)
    ascii_text = [t for t in set(text) if vocab.piece(t).isascii() and b"<" not in vocab.piece(t)]
    drawn = []
    for _ in range(3 + len(forced) + 2):
        logits = rng.standard_normal(len(vocab)).astype(np.float32)
        logits[ascii_text] += 30  # ordinary reasoning text, never a tag
        token = sampler.sample(logits)
        sampler.accept(token)
        drawn.append(token)
    assert drawn[3 : 3 + len(forced)] == forced
    assert budget.state == "done" and budget.end_match == tuple(tags["ends"][0])
    clone = sampler.clone()
    assert clone.reasoning_budget is not budget and clone.reasoning_budget.state == "done"


def test_a_lazy_grammar_waits_out_the_reasoning_block(setup):
    """common_sampler_accept's grammar_should_apply: beside a reasoning budget, a lazy grammar sees no token of a
    reasoning block (a trigger written while thinking starts nothing), then the end sequence that closed it,
    then the answer, where the trigger starts the constrained part; without the budget the same trigger inside
    the block starts it at once."""
    from bankml import Grammar, Rules

    vocab, _, tags, _, _ = setup
    tokenize = llama_cpp_tokenizer(vocab_path("qwen2"))
    rules = Rules.parse('root ::= "CALL(" [a-z]+ ")"', vocab=vocab)

    def sampler(with_budget):
        grammar = Grammar(rules, vocab, trigger_patterns=["CALL\\("], lazy=True)
        budget = (
            ReasoningBudget(vocab, [tags["start"]], tags["ends"][:1], tags["ends"][0], 2**31 - 1)
            if with_budget
            else None
        )
        return Sampler(SamplerParams(seed=1), vocab, grammar, reasoning_budget=budget), grammar

    thinking = tags["start"] + tokenize(b" maybe CALL(x", False, True)
    s, grammar = sampler(True)
    for t in thinking:
        s.accept(t)
    assert grammar.awaiting_trigger and s.reasoning_budget.state == "counting"
    for t in tags["ends"][0] + tokenize(b" ok CALL(abc)", False, True):
        s.accept(t)
    assert not grammar.awaiting_trigger and grammar.complete
    s, grammar = sampler(False)
    for t in thinking:
        s.accept(t)
    assert not grammar.awaiting_trigger
