"""Time of one draw of the sampling chain on 151,936 logits (the Qwen2 vocabulary size), bankml and libllama side by side.

Groups are ``sampler-<config>-qwen2``. bankml: ``Sampler.sample(logits)`` (copies the logits into its
candidate array, runs the chain, draws). libllama: the candidate array filled from the same logits with
NumPy (ids, logits, p = 0: what common_sampler's set_logits does in C++) and one ``llama_sampler_apply``
of the chain common_sampler_init builds for the same parameters. Neither accepts the token, so every
round samples the same state (only the generators move). ``sampler-json-grammar-redraw-qwen2`` adds
json.gbnf at its start, where the first draw is rejected: one check, one whole-vocabulary mask and a
second draw per round, as common_sampler_sample does.

Run: ``python -m pytest bench/test_sampler_bench.py --benchmark-only``.
"""

import ctypes
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import llama_cpp as ll  # noqa: E402
from sampler_configs import CONFIGS, N_VOCAB  # noqa: E402

from bankml.sampling._sampler import Sampler
from bankml.sampling.params import SamplerParams  # noqa: E402
from tests.sampling.test_sampler_oracle import OracleChain, SizedVocab  # noqa: E402


@pytest.fixture(scope="module")
def logits():
    return (np.random.default_rng(0).standard_normal(N_VOCAB) * 3).astype(np.float32)


@pytest.mark.parametrize("engine", ["bankml", "libllama"])
@pytest.mark.parametrize("config", list(CONFIGS))
def test_sample(benchmark, logits, engine, config):
    params = SamplerParams(seed=1234, **CONFIGS[config])
    benchmark.group = f"sampler-{config}-qwen2"
    benchmark.extra_info.update(engine=engine, n_vocab=N_VOCAB)
    if engine == "bankml":
        sampler = Sampler(params, SizedVocab(N_VOCAB))
        token = benchmark(sampler.sample, logits)
    else:
        oracle = OracleChain(params, N_VOCAB)

        def draw():
            cur_p = oracle._set_logits(logits)
            ll.llama_sampler_apply(oracle.chain, ctypes.byref(cur_p))
            return cur_p.data[cur_p.selected].id

        try:
            token = benchmark(draw)
        finally:
            oracle.close()
    assert 0 <= token < N_VOCAB


@pytest.fixture(scope="module")
def qwen2_json():
    from bankml import Rules
    from tests.oracle import libllama
    from tests.oracle_support import DATA, load_pair

    vocab, oracle_vocab = load_pair("qwen2")
    text = (DATA / "grammars" / "json.gbnf").read_text(encoding="utf-8")
    return vocab, oracle_vocab, text, Rules.parse(text, vocab=vocab), libllama


@pytest.mark.parametrize("engine", ["bankml", "libllama"])
def test_sample_with_grammar_redraw(benchmark, logits, qwen2_json, engine):
    """llama-server's defaults with json.gbnf at its start: the first draw is rejected, so every round
    checks one token, masks the whole vocabulary and draws again (bankml's grammar answers the mask of a
    state it has seen from its cache; llama.cpp has no cache)."""
    from bankml import Grammar

    vocab, oracle_vocab, text, rules, libllama = qwen2_json
    params = SamplerParams(seed=1234)
    benchmark.group = "sampler-json-grammar-redraw-qwen2"
    benchmark.extra_info.update(engine=engine, n_vocab=N_VOCAB)
    if engine == "bankml":
        sampler = Sampler(params, vocab, Grammar(rules, vocab))
        token = benchmark(sampler.sample, logits)
        assert sampler.n_redraws > 0
    else:
        grammar = libllama.OracleGrammar(oracle_vocab, text)
        oracle = OracleChain(params, N_VOCAB, grammar=grammar)
        try:
            token = benchmark(oracle.sample, logits)
            assert oracle.redraws > 0
        finally:
            oracle.close()
            grammar.close()
    assert vocab.piece(token).lstrip().startswith(b"{")
