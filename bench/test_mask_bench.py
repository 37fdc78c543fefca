"""Whole-vocabulary mask time at representative positions of a JSON walk, every engine in one group.

Groups are ``mask-<grammar>-<vocabulary>-<position>`` (for example ``mask-json-qwen2-in-string``),
so pytest-benchmark shows bankml, libllama, XGrammar and llguidance side by side, measured in one
run on one machine. Each round fills a whole-vocabulary mask of a fresh clone of the state
(cloned outside the timing). bankml's clones share their context's mask cache (as every matcher of
one grammar and vocabulary does), so its rows are the warm figure, a state seen before; the cold
figure, a state's first mask in a fresh context, is in ``bench/summary.py --repeats 1``. The engines:
bankml ``Grammar.fill_next_token_bitmask``; libllama one ``llama_sampler_apply`` over all tokens
(``OracleGrammar.allowed_mask`` with its per-state cache cleared); XGrammar
``GrammarMatcher.fill_next_token_bitmask``; llguidance ``llguidance.numpy.fill_next_token_bitmask``.
XGrammar and llguidance are skipped when they are not installed.
"""

import os
import time

import pytest
import walks

# the time each benchmark aims to spend measuring (5 to 1000 rounds)
SECONDS_PER_BENCHMARK = float(os.environ.get("BANKML_BENCH_SECONDS", "1.0"))

ENGINES = ("bankml", "libllama", "xgrammar", "llguidance")


def _rounds_for(eng, matcher, out):
    """Rounds that spend about SECONDS_PER_BENCHMARK: libllama takes ~20 ms a mask, llguidance µs."""
    fresh = eng.clone(matcher)
    eng.fill(fresh, out)  # warm up the shared tables (a first touch of the vocabulary's pages)
    fresh = eng.clone(matcher)
    started = time.perf_counter()
    eng.fill(fresh, out)
    once = max(time.perf_counter() - started, 1e-6)
    return max(5, min(int(SECONDS_PER_BENCHMARK / once), 1000))


@pytest.mark.parametrize("engine_name", ENGINES)
def test_mask(benchmark, mask_state, engine_name, grammar_name, vocab_name, position):
    eng, matcher, out = mask_state(engine_name)
    benchmark.group = f"mask-{grammar_name}-{vocab_name}-{position}"

    def fresh_state():
        # Each round masks a new clone of the state, outside the timing (bankml's clones share the
        # grammar's context and its mask cache: its rows are warm; see the module docstring).
        return (eng.clone(matcher), out), {}

    benchmark.pedantic(eng.fill, setup=fresh_state, rounds=_rounds_for(eng, matcher, out), iterations=1)
    eng.fill(matcher, out)
    allowed = eng.allowed_ids(matcher, out)
    count, digest = walks.ids_hash(allowed)
    benchmark.extra_info.update(
        engine=engine_name,
        version=walks.engine_version(engine_name),
        n_vocab=eng.n_vocab,
        allowed=count,
        mask_hash=f"{digest:016x}",
    )
    assert 0 < len(allowed) <= eng.n_vocab
