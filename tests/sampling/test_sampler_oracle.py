# Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.
"""Sampling compared draw by draw with the pinned llama.cpp (libllama of llama-cpp-python 0.3.36).

For each random parameter set the test builds libllama's own chain the way common_sampler_init
does (logit bias, the samplers in the given order with their empty-sampler rules, then dist, or
temp + mirostat), runs common_sampler_sample's control flow with grammar_first=false in Python
(draw, check only the drawn token against llama.cpp's grammar sampler, on a rejection reset the
candidates, apply the grammar and draw again from the same generators), and accepts each token into
both. bankml's Sampler must draw the same token id every time.

Most draws run on random candidate sets of a few thousand tokens (so there are many of them); a
share runs on the real Qwen2 vocabulary size, 151,936, with the real vocabulary (DRY's sequence
breakers, the JSON grammar).
"""

import ctypes
import math
import os
import zlib

import llama_cpp as ll
import numpy as np
import pytest

from bankml import Grammar, Rules
from bankml.engine.vocab import ATTR_CONTROL, ATTR_UNKNOWN
from bankml.integrations.adapters import hf_tokenizer, llama_cpp_tokenizer
from bankml.sampling._sampler import Sampler
from bankml.sampling.params import DEFAULT_SAMPLERS, SamplerParams

from ..oracle import libllama
from ..oracle_support import DATA, ORACLE_STATS, load_pair, vocab_path

pytestmark = pytest.mark.oracle

SMALL_SETS = int(os.environ.get("BANKML_SAMPLER_SMALL_SETS", "60"))
SMALL_DRAWS = int(os.environ.get("BANKML_SAMPLER_SMALL_DRAWS", "1700"))
FULL_SETS = int(os.environ.get("BANKML_SAMPLER_FULL_SETS", "12"))
FULL_DRAWS = int(os.environ.get("BANKML_SAMPLER_FULL_DRAWS", "40"))
GRAMMAR_SETS = int(os.environ.get("BANKML_SAMPLER_GRAMMAR_SETS", "8"))
GRAMMAR_STEPS = int(os.environ.get("BANKML_SAMPLER_GRAMMAR_STEPS", "80"))
DRY_SETS = int(os.environ.get("BANKML_SAMPLER_DRY_SETS", "4"))
INFILL_SETS = int(os.environ.get("BANKML_SAMPLER_INFILL_SETS", "4"))

TOKEN_DATA = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")], align=True)
assert TOKEN_DATA.itemsize == ctypes.sizeof(ll.llama_token_data)
ALL_SAMPLERS = DEFAULT_SAMPLERS.split(";")


# --- libllama's side ---------------------------------------------------------------


class OracleChain:
    """common_sampler_init's chain in libllama, plus common_sampler_sample's redraw loop."""

    def __init__(self, params, n_vocab, vocab_handle=None, grammar=None):
        self.n_vocab = n_vocab
        self.grammar = grammar
        chain = ll.llama_sampler_chain_init(ll.llama_sampler_chain_default_params())
        self.chain = chain
        add = lambda smpl: ll.llama_sampler_chain_add(chain, smpl)  # noqa: E731
        if params.logit_bias:
            biases = (ll.llama_logit_bias * len(params.logit_bias))(
                *[ll.llama_logit_bias(token, bias) for token, bias in params.logit_bias]
            )
            add(ll.llama_sampler_init_logit_bias(n_vocab, len(params.logit_bias), biases))
        if params.mirostat == 0:
            for name in params.samplers:
                if name == "adaptive_p":
                    continue  # common_sampler_init adds it last, in dist's place
                if name == "penalties":
                    add(
                        ll.llama_sampler_init_penalties(
                            n_vocab,
                            params.repeat_last_n,
                            params.repeat_penalty,
                            params.frequency_penalty,
                            params.presence_penalty,
                        )
                    )
                elif name == "dry":
                    breakers = [b.encode("utf-8") for b in params.dry_sequence_breakers]
                    c_breakers = (ctypes.c_char_p * len(breakers))(*breakers)
                    if vocab_handle is None:
                        assert params.dry_multiplier == 0, "DRY needs the real vocabulary"
                    add(
                        ll.llama_sampler_init_dry(
                            vocab_handle,
                            params.dry_multiplier,
                            params.dry_base,
                            params.dry_allowed_length,
                            params.dry_penalty_last_n,
                            c_breakers,
                            len(breakers),
                        )
                    )
                elif name == "top_k":
                    add(ll.llama_sampler_init_top_k(params.top_k))
                elif name == "top_p":
                    add(ll.llama_sampler_init_top_p(params.top_p, params.min_keep))
                elif name == "top_n_sigma":
                    add(ll.llama_sampler_init_top_n_sigma(params.top_n_sigma))
                elif name == "min_p":
                    add(ll.llama_sampler_init_min_p(params.min_p, params.min_keep))
                elif name == "xtc":
                    add(
                        ll.llama_sampler_init_xtc(
                            params.xtc_probability, params.xtc_threshold, params.min_keep, params.seed
                        )
                    )
                elif name == "typ_p":
                    add(ll.llama_sampler_init_typical(params.typical_p, params.min_keep))
                elif name == "temperature":
                    add(
                        ll.llama_sampler_init_temp_ext(
                            params.temperature, params.dynatemp_range, params.dynatemp_exponent
                        )
                    )
                elif name == "infill":
                    assert vocab_handle is not None, "infill needs the real vocabulary"
                    add(ll.llama_sampler_init_infill(vocab_handle))
                else:  # pragma: no cover
                    raise AssertionError(name)
            if "adaptive_p" in params.samplers:
                add(ll.llama_sampler_init_adaptive_p(params.adaptive_target, params.adaptive_decay, params.seed))
            else:
                add(ll.llama_sampler_init_dist(params.seed))
        else:
            add(ll.llama_sampler_init_temp(params.temperature))
            if params.mirostat == 1:
                add(ll.llama_sampler_init_mirostat(n_vocab, params.seed, params.mirostat_tau, params.mirostat_eta, 100))
            else:
                add(ll.llama_sampler_init_mirostat_v2(params.seed, params.mirostat_tau, params.mirostat_eta))
        self.data = np.zeros(n_vocab, dtype=TOKEN_DATA)
        self.ids = np.arange(n_vocab, dtype=np.int32)
        self.redraws = 0

    def close(self):
        if self.chain:
            ll.llama_sampler_free(self.chain)
        self.chain = None

    def _set_logits(self, logits):
        data = self.data
        data["id"] = self.ids
        data["logit"] = logits
        data["p"] = 0.0
        return ll.llama_token_data_array(
            data=data.ctypes.data_as(ll.llama_token_data_p), size=data.size, selected=-1, sorted=False
        )

    def sample(self, logits):
        cur_p = self._set_logits(logits)
        ll.llama_sampler_apply(self.chain, ctypes.byref(cur_p))
        token = cur_p.data[cur_p.selected].id
        if self.grammar is None:
            return token
        single = ll.llama_token_data(token, 1.0, 0.0)
        single_array = ll.llama_token_data_array(data=ctypes.pointer(single), size=1, selected=-1, sorted=False)
        ll.llama_sampler_apply(self.grammar._handle(), ctypes.byref(single_array))
        if single.logit != -math.inf:
            return token
        self.redraws += 1
        cur_p = self._set_logits(logits)
        ll.llama_sampler_apply(self.grammar._handle(), ctypes.byref(cur_p))
        ll.llama_sampler_apply(self.chain, ctypes.byref(cur_p))
        assert cur_p.selected != -1
        return cur_p.data[cur_p.selected].id

    def accept(self, token):
        if self.grammar is not None:
            self.grammar.accept_unchecked(token)
        ll.llama_sampler_accept(self.chain, token)


class SizedVocab:
    """A stand-in vocabulary of n tokens for chains that never look at pieces."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


class TokenizingVocab:
    """bankml's vocabulary plus libllama's tokenizer, for DRY's sequence breakers."""

    def __init__(self, vocab, oracle_vocab):
        self.vocab = vocab
        self.oracle_vocab = oracle_vocab

    def __len__(self):
        return len(self.vocab)

    def piece(self, token_id):
        return self.vocab.piece(token_id)

    def tokenize(self, text, add_special, parse_special):
        return self.oracle_vocab.tokenize(text, add_special=add_special, parse_special=parse_special)


# --- random parameter sets -------------------------------------------------------------


def random_params(rng, n_vocab, *, dry=False, mirostat=True, adaptive=True):
    kw = {"seed": int(rng.integers(0, 2**32 - 1))}
    r = rng.random()
    kw["temperature"] = 0.0 if r < 0.12 else (1.0 if r < 0.2 else float(rng.uniform(0.2, 2.5)))
    if rng.random() < 0.3:
        kw["dynatemp_range"] = float(rng.uniform(0.05, 1.5))
        kw["dynatemp_exponent"] = float(rng.uniform(0.3, 2.5))
    kw["top_k"] = int(rng.choice([0, 1, 3, 40, 40, 200, 1500]))
    kw["top_p"] = 1.0 if rng.random() < 0.3 else float(rng.uniform(0.3, 0.99))
    kw["min_p"] = 0.0 if rng.random() < 0.3 else float(rng.uniform(0.001, 0.3))
    if rng.random() < 0.35:
        kw["typical_p"] = float(rng.uniform(0.2, 0.98))
    if rng.random() < 0.35:
        kw["top_n_sigma"] = float(rng.uniform(0.3, 3.0))
    if rng.random() < 0.35:
        kw["xtc_probability"] = float(rng.uniform(0.2, 1.0))
        kw["xtc_threshold"] = float(rng.uniform(0.01, 0.55))
    if rng.random() < 0.5:
        kw["repeat_last_n"] = int(rng.choice([0, 4, 16, 64]))
        kw["repeat_penalty"] = float(rng.choice([1.0, rng.uniform(0.8, 1.6)]))
        kw["frequency_penalty"] = float(rng.choice([0.0, rng.uniform(-0.5, 1.0)]))
        kw["presence_penalty"] = float(rng.choice([0.0, rng.uniform(-0.5, 1.5)]))
    kw["min_keep"] = int(rng.choice([0, 0, 1, 3, 20]))
    if rng.random() < 0.3:
        kw["samplers"] = ";".join(rng.permutation(ALL_SAMPLERS))
    if adaptive and rng.random() < 0.25:
        # adaptive-p replaces dist; a negative target only draws from the distribution
        names = list(kw.get("samplers", DEFAULT_SAMPLERS).split(";"))
        names.insert(int(rng.integers(0, len(names) + 1)), "adaptive_p")
        kw["samplers"] = ";".join(names)
        kw["adaptive_target"] = float(rng.choice([-1.0, rng.uniform(0.0, 1.0), rng.uniform(0.0, 1.0)]))
        kw["adaptive_decay"] = float(rng.choice([0.0, 0.5, 0.9, 0.99]))
    if rng.random() < 0.25:
        n = int(rng.integers(1, 6))
        kw["logit_bias"] = [
            [int(t), False if rng.random() < 0.2 else float(rng.uniform(-5, 5))] for t in rng.integers(0, n_vocab, n)
        ]
    if dry:
        kw["dry_multiplier"] = float(rng.uniform(0.2, 2.0))
        kw["dry_base"] = float(rng.uniform(1.0, 3.0))
        kw["dry_allowed_length"] = int(rng.integers(0, 4))
        kw["dry_penalty_last_n"] = int(rng.choice([16, 64]))
        if dry == "multi":
            # multi-character breakers: heads whose pieces end inside a breaker get tokenized tails
            kw["dry_sequence_breakers"] = ["\n\n", "::", "assistant", "*", '"key"', "x" * 45]
    if mirostat and rng.random() < 0.2:
        kw["mirostat"] = int(rng.choice([1, 2]))
        kw["mirostat_tau"] = float(rng.uniform(1.0, 8.0))
        kw["mirostat_eta"] = float(rng.uniform(0.02, 0.5))
    return SamplerParams(**kw)


def random_logits(rng, n, style):
    if style == "ties":
        # coarse logits: many exact ties, so sort order and tie-breaking must match
        return np.round(rng.standard_normal(n) * 2, 1).astype(np.float32)
    if style == "peaked":
        # a few strong tokens, so histories repeat (penalties, DRY) and top-p cuts early
        logits = rng.standard_normal(n).astype(np.float32)
        hot = rng.integers(0, min(n, 64), 12)
        logits[hot] += rng.uniform(4, 9, hot.size).astype(np.float32)
        return logits
    scale = float(rng.uniform(0.5, 6.0))
    return (rng.standard_normal(n) * scale).astype(np.float32)


class LogitsPool:
    """Real-vocabulary-size logits without generating 151,936 normals per draw: a few arrays per style,
    drawn afresh with a random rotation and scale (ties stay ties, peaks stay peaked)."""

    def __init__(self, rng, n, style, size=8):
        self.arrays = [random_logits(rng, n, style) for _ in range(size)]
        self.style = style

    def draw(self, rng):
        base = self.arrays[int(rng.integers(len(self.arrays)))]
        # few distinct rotations, so strong tokens recur and penalties / DRY have histories to act on
        rolled = np.roll(base, int(rng.integers(0, 4)) * 17)
        if self.style == "plain":
            rolled *= np.float32(rng.uniform(0.5, 2.0))
        return rolled


def run_pair(params, sampler, oracle, rng, n, draws, style, new_set=True, pool=None):
    for draw in range(draws):
        logits = pool.draw(rng) if pool is not None else random_logits(rng, n, style)
        expected = oracle.sample(logits)
        got = sampler.sample(logits)
        assert got == expected, f"draw {draw}: bankml {got}, libllama {expected}, {params!r}"
        oracle.accept(expected)
        sampler.accept(got)
    ORACLE_STATS["sampler draws compared"] += draws
    ORACLE_STATS["sampler parameter sets compared"] += int(new_set)
    if "adaptive_p" in params.samplers and params.mirostat == 0:
        ORACLE_STATS["sampler draws compared with adaptive-p"] += draws
        ORACLE_STATS["sampler parameter sets with adaptive-p"] += int(new_set)


# --- tests ---------------------------------------------------------------------------------


@pytest.mark.parametrize("set_index", range(SMALL_SETS))
def test_random_chains_on_candidate_sets(set_index):
    rng = np.random.default_rng(1000 + set_index)
    n = int(rng.choice([64, 500, 1024, 1025, 3000]))
    style = ["plain", "ties", "peaked"][set_index % 3]
    params = random_params(rng, n)
    sampler = Sampler(params, SizedVocab(n))
    oracle = OracleChain(params, n)
    try:
        run_pair(params, sampler, oracle, rng, n, SMALL_DRAWS, style)
    finally:
        oracle.close()


@pytest.fixture(scope="module")
def qwen2():
    return load_pair("qwen2")


@pytest.mark.parametrize("set_index", range(FULL_SETS))
def test_random_chains_on_the_real_vocabulary(qwen2, set_index):
    vocab, oracle_vocab = qwen2
    rng = np.random.default_rng(2000 + set_index)
    n = len(vocab)
    assert n == 151936
    dry = set_index % 3 == 0
    params = random_params(rng, n, dry="multi" if set_index % 6 == 0 else dry)
    sampler = Sampler(params, TokenizingVocab(vocab, oracle_vocab))
    oracle = OracleChain(params, n, vocab_handle=oracle_vocab.handle)
    draws = 2 * FULL_DRAWS if dry else FULL_DRAWS  # DRY needs a history to find repeats in
    style = "peaked" if dry else ["plain", "ties", "peaked"][set_index % 3]
    try:
        run_pair(params, sampler, oracle, rng, n, draws, style, pool=LogitsPool(rng, n, style))
    finally:
        oracle.close()
    ORACLE_STATS["sampler draws compared on 151,936 logits"] += draws
    if dry:
        ORACLE_STATS["sampler draws compared with DRY"] += draws


# DRY's sequence breakers on bankml's own Vocab: llama-server's defaults need no tokenizer; multi-character
# breakers need the tokenizer hook (Vocab.with_tokenizer), libllama's own or a Hugging Face tokenizer
MULTI_BREAKERS = ["\n\n", "::", "assistant", "*", '"key"', "x" * 45, " the", "});", "\n```\n"]
NON_ASCII_BREAKERS = ["\u2014", "\u00e9t\u00e9", "\u4f60\u597d", "\U0001f600!"]


def run_dry_sets(vocab_for_sampler, oracle_vocab, n, seed_base, breakers, sets):
    for set_index in range(sets):
        rng = np.random.default_rng(seed_base + set_index)
        params = random_params(rng, n, dry=True)
        if breakers is not None:
            params = params.replace(dry_sequence_breakers=breakers)
        sampler = Sampler(params, vocab_for_sampler)
        oracle = OracleChain(params, n, vocab_handle=oracle_vocab.handle)
        draws = 2 * FULL_DRAWS
        try:
            run_pair(params, sampler, oracle, rng, n, draws, "peaked", pool=LogitsPool(rng, n, "peaked"))
        finally:
            oracle.close()
        ORACLE_STATS["sampler draws compared on real vocabularies"] += draws
        ORACLE_STATS["sampler draws compared with DRY"] += draws


def test_dry_default_breakers_on_a_plain_vocab(qwen2):
    vocab, oracle_vocab = qwen2
    assert not vocab.has_tokenizer
    run_dry_sets(vocab, oracle_vocab, len(vocab), 4000, None, DRY_SETS)
    run_dry_sets(vocab, oracle_vocab, len(vocab), 4100, ["\n", ";", "#", ".", "<", " "], 1)
    ORACLE_STATS["sampler DRY sets on a Vocab without a tokenizer"] += DRY_SETS + 1


def test_dry_multi_character_breakers_with_the_llama_cpp_hook(qwen2):
    vocab, oracle_vocab = qwen2
    hooked = vocab.with_tokenizer(llama_cpp_tokenizer(vocab_path("qwen2")))
    run_dry_sets(hooked, oracle_vocab, len(vocab), 4200, MULTI_BREAKERS, DRY_SETS)
    run_dry_sets(hooked, oracle_vocab, len(vocab), 4300, NON_ASCII_BREAKERS + ["<|im_end|>", "a<|im_end|>"], 2)
    run_dry_sets(hooked, oracle_vocab, len(vocab), 4350, None, 1)  # llama-server's defaults, hook unused
    ORACLE_STATS["sampler DRY sets with llama_cpp_tokenizer"] += DRY_SETS + 3


@pytest.fixture(scope="module")
def smollm2_hf():
    import torch  # noqa: F401  (transformers' GGUF reader needs it; the test extra installs it)

    from ..engines_support import smollm2_hf_tokenizer

    tokenizer = smollm2_hf_tokenizer()
    vocab, oracle_vocab = load_pair("smollm2")
    return vocab, oracle_vocab, tokenizer


def test_dry_multi_character_breakers_with_the_hf_hook(smollm2_hf):
    vocab, oracle_vocab, tokenizer = smollm2_hf
    hooked = vocab.with_tokenizer(hf_tokenizer(tokenizer))
    # the hook is exact on these tails: each tokenizes as libllama does
    hook = hf_tokenizer(tokenizer)
    for breaker in MULTI_BREAKERS:
        raw = breaker.encode()
        for i in range(1, min(len(raw), 40)):
            assert hook(raw[i:40], False, False) == oracle_vocab.tokenize(raw[i:40], False, False), raw[i:]
    run_dry_sets(hooked, oracle_vocab, len(vocab), 4400, MULTI_BREAKERS, DRY_SETS)
    run_dry_sets(hooked, oracle_vocab, len(vocab), 4450, None, 1)  # llama-server's defaults, hook unused
    ORACLE_STATS["sampler DRY sets with hf_tokenizer"] += DRY_SETS + 1


def test_the_hf_hook_refuses_what_it_cannot_tokenize_as_llama_cpp(smollm2_hf):
    _, _, tokenizer = smollm2_hf
    hook = hf_tokenizer(tokenizer)
    with pytest.raises(ValueError, match="not valid UTF-8"):
        hook("\u2014".encode()[1:], False, False)
    with pytest.raises(ValueError, match="special token"):
        hook(b"x<|im_end|>", False, False)


@pytest.fixture(scope="module")
def json_rules(qwen2):
    vocab, _ = qwen2
    text = (DATA / "grammars" / "json.gbnf").read_text(encoding="utf-8")
    return text, Rules.parse(text, vocab=vocab)


@pytest.fixture(scope="module")
def structure_boost(qwen2):
    """+4 on the tokens holding JSON punctuation, so strings close and objects end: more rejected draws."""
    vocab, _ = qwen2
    boost = np.zeros(len(vocab), dtype=np.float32)
    for token_id in range(len(vocab)):
        piece = vocab.piece(token_id)
        if any(c in piece for c in b'"{}[],:'):
            boost[token_id] = 4.0
    return boost


@pytest.mark.parametrize("set_index", range(GRAMMAR_SETS))
def test_grammar_redraws_on_the_real_vocabulary(qwen2, json_rules, structure_boost, set_index):
    vocab, oracle_vocab = qwen2
    text, rules = json_rules
    rng = np.random.default_rng(3000 + set_index)
    n = len(vocab)
    params = random_params(rng, n, dry=set_index % 3 == 2)
    oracle_grammar = libllama.OracleGrammar(oracle_vocab, text)
    sampler = Sampler(params, TokenizingVocab(vocab, oracle_vocab), Grammar(rules, vocab))
    oracle = OracleChain(params, n, vocab_handle=oracle_vocab.handle, grammar=oracle_grammar)
    draws = 0
    try:
        for step in range(GRAMMAR_STEPS):
            logits = random_logits(rng, n, "plain")
            if set_index % 2:
                logits += structure_boost
            expected = oracle.sample(logits)
            got = sampler.sample(logits)
            assert got == expected, f"step {step}: bankml {got}, libllama {expected}, {params!r}"
            draws += 1
            if vocab.is_eog(expected):
                break
            oracle.accept(expected)
            sampler.accept(got)
    finally:
        oracle.close()
        oracle_grammar.close()
    assert sampler.n_redraws == oracle.redraws
    ORACLE_STATS["sampler draws compared"] += draws
    ORACLE_STATS["sampler draws compared on 151,936 logits"] += draws
    ORACLE_STATS["sampler draws compared with the JSON grammar"] += draws
    ORACLE_STATS["sampler grammar redraws compared"] += oracle.redraws
    if params.dry_multiplier != 0:
        ORACLE_STATS["sampler draws compared with DRY"] += draws
    ORACLE_STATS["sampler parameter sets compared"] += 1


@pytest.mark.parametrize("extra", [{}, {"samplers": "penalties;xtc;adaptive_p", "adaptive_target": 0.25}])
def test_clone_continues_like_libllama_clone(extra):
    rng = np.random.default_rng(7)
    n = 2000
    params = SamplerParams(
        seed=1234, xtc_probability=0.5, xtc_threshold=0.05, repeat_last_n=16, repeat_penalty=1.3, top_k=0, **extra
    )
    sampler = Sampler(params, SizedVocab(n))
    oracle = OracleChain(params, n)
    try:
        run_pair(params, sampler, oracle, rng, n, 50, "peaked")
        cloned = sampler.clone()
        oracle_clone = OracleChain.__new__(OracleChain)
        oracle_clone.__dict__.update(oracle.__dict__)
        oracle_clone.chain = ll.llama_sampler_clone(oracle.chain)
        oracle_clone.data = np.zeros(n, dtype=TOKEN_DATA)
        try:
            state = rng.bit_generator.state
            run_pair(params, cloned, oracle_clone, rng, n, 50, "peaked", new_set=False)
            rng.bit_generator.state = state
            run_pair(params, sampler, oracle, rng, n, 50, "peaked", new_set=False)
        finally:
            oracle_clone.close()
        ll.llama_sampler_reset(oracle.chain)
        sampler.reset()
        run_pair(params, sampler, oracle, rng, n, 50, "peaked", new_set=False)
    finally:
        oracle.close()


def test_mirostat_on_the_real_vocabulary_size(qwen2):
    vocab, oracle_vocab = qwen2
    n = len(vocab)
    rng = np.random.default_rng(11)
    for mirostat in (1, 2):
        params = SamplerParams(
            seed=int(rng.integers(0, 2**31)), mirostat=mirostat, mirostat_tau=4.0, mirostat_eta=0.2, temperature=0.9
        )
        sampler = Sampler(params, SizedVocab(n))
        oracle = OracleChain(params, n)
        try:
            run_pair(params, sampler, oracle, rng, n, 20, "plain")
        finally:
            oracle.close()
        ORACLE_STATS["sampler draws compared on 151,936 logits"] += 20


EDGE_CASES = {
    "greedy-before-typical": dict(temperature=0.0, typical_p=0.5, samplers="temperature;typ_p;top_p", top_p=0.5),
    "greedy-before-everything": dict(
        temperature=0.0,
        top_n_sigma=1.0,
        xtc_probability=1.0,
        xtc_threshold=0.0,
        typical_p=0.9,
        top_k=0,
        samplers="temperature;top_n_sigma;xtc;typ_p;min_p",
    ),
    "bans-before-typical": dict(
        logit_bias=[[i, False] for i in range(0, 2000, 3)],
        typical_p=0.7,
        top_k=0,
        samplers="typ_p;top_p;min_p;temperature",
    ),
    "min-keep-beats-min-p": dict(min_p=0.9, min_keep=25, top_k=0, top_p=1.0),
    "min-keep-beats-top-p": dict(top_p=0.01, min_keep=300, top_k=0),
    "flat-top-p-full-sort": dict(top_p=0.999, top_k=0, min_p=0.0, temperature=3.0),
    "xtc-always": dict(xtc_probability=1.0, xtc_threshold=0.01, top_k=0, min_p=0.0, top_p=1.0, temperature=0.5),
    "xtc-min-keep": dict(xtc_probability=1.0, xtc_threshold=0.001, min_keep=1990, top_k=0, min_p=0.0, top_p=1.0),
    "top-n-sigma-first": dict(top_n_sigma=0.5, samplers="top_n_sigma;temperature", temperature=0.3),
    "dynatemp-zero-floor": dict(temperature=0.2, dynatemp_range=0.5, dynatemp_exponent=0.5, top_k=0),
    "dynatemp-only": dict(temperature=1.0, dynatemp_range=1.0, top_k=0, top_p=1.0, min_p=0.0),
    "heavy-penalties": dict(
        repeat_last_n=8, repeat_penalty=3.0, frequency_penalty=2.0, presence_penalty=2.0, temperature=0.0
    ),
    "top-k-1": dict(top_k=1, temperature=2.0),
    "top-k-129": dict(top_k=129, top_p=1.0, min_p=0.0),
    "mirostat-greedy": dict(mirostat=1, temperature=0.0),
    "mirostat-v2-cold": dict(mirostat=2, temperature=0.1, mirostat_tau=0.5, mirostat_eta=1.0),
    "mirostat-hot": dict(mirostat=1, temperature=5.0, mirostat_tau=10.0, mirostat_eta=0.5),
    "everything-disabled": dict(top_k=0, top_p=1.0, min_p=0.0, temperature=1.0),
    "adaptive-p": dict(samplers="top_k;adaptive_p;min_p;temperature", adaptive_target=0.3, top_k=0),
    "adaptive-p-negative-target": dict(samplers="adaptive_p;top_k;temperature", adaptive_target=-0.5),
    "adaptive-p-long-memory": dict(samplers="min_p;adaptive_p", adaptive_target=0.1, adaptive_decay=0.99, min_p=0.01),
    "adaptive-p-no-memory": dict(samplers="a", adaptive_target=1.0, adaptive_decay=0.0),
    "adaptive-p-target-zero": dict(samplers="top_p;adaptive_p", adaptive_target=0.0, top_p=0.9),
    "adaptive-p-after-greedy": dict(samplers="temperature;adaptive_p", temperature=0.0, adaptive_target=0.5),
    "adaptive-p-after-bans": dict(
        logit_bias=[[i, False] for i in range(0, 2000, 2)],
        samplers="adaptive_p",
        adaptive_target=0.2,
        adaptive_decay=0.5,
    ),
    "long-history": dict(repeat_last_n=100_000, repeat_penalty=1.4, frequency_penalty=0.2, top_k=0, temperature=0.7),
}


@pytest.mark.parametrize("case", list(EDGE_CASES))
def test_edge_parameter_sets(case):
    rng = np.random.default_rng(zlib.crc32(case.encode()))
    n = 2000
    params = SamplerParams(seed=int(rng.integers(0, 2**32 - 1)), **EDGE_CASES[case])
    sampler = Sampler(params, SizedVocab(n))
    oracle = OracleChain(params, n)
    try:
        for style in ("plain", "ties", "peaked"):
            run_pair(params, sampler, oracle, rng, n, 200, style, new_set=style == "plain")
    finally:
        oracle.close()


# --- infill (llama_sampler_init_infill), reachable through llama-server's `samplers` ----------------------------

NO_TEXT_ATTRS = ATTR_CONTROL | ATTR_UNKNOWN  # token_to_piece(special=false) renders these empty


class InfillLogits:
    """Logits that make the infill sampler work on real vocabularies: families of tokens whose pieces are
    prefixes of one another boosted together (so candidates merge), end-of-generation tokens boosted now and
    then (so the EOG branch and the EOG-only fallback run), control tokens (empty pieces with special=false)."""

    def __init__(self, rng, vocab):
        by_piece = {}
        for t, piece in enumerate(vocab.pieces):
            by_piece.setdefault(piece, t)
        self.families = []
        attrs = vocab.token_attrs
        for t in rng.permutation(len(vocab))[:6000]:
            piece = vocab.piece(int(t))
            if len(piece) < 3 or attrs[t] & NO_TEXT_ATTRS:
                continue
            fam = [by_piece[piece[:k]] for k in range(1, len(piece) + 1) if piece[:k] in by_piece]
            if len(fam) >= 3:
                self.families.append(np.array(fam))
        assert len(self.families) > 100
        self.eog = np.array(vocab.eog_ids)
        self.control = np.flatnonzero((attrs & NO_TEXT_ATTRS) != 0)[:50]
        assert self.control.size
        self.n = len(vocab)

    def draw(self, rng):
        logits = rng.standard_normal(self.n).astype(np.float32)
        for _ in range(int(rng.integers(1, 4))):
            fam = self.families[int(rng.integers(len(self.families)))]
            logits[fam] += rng.uniform(3.0, 9.0, fam.size).astype(np.float32)
        if rng.random() < 0.4:
            eog = rng.choice(self.eog, int(rng.integers(1, 3)))
            logits[eog] += np.float32(rng.uniform(2.0, 12.0))
        if rng.random() < 0.3:
            logits[rng.choice(self.control, 3)] += np.float32(rng.uniform(3.0, 9.0))
        return logits


def infill_params(rng, n, *, top_k=None):
    """A random chain with infill after top-k (llama.cpp's infill compares every pair of candidates, so the
    oracle keeps the candidate count small; top-k above 256 runs bankml's sorted merge)."""
    params = random_params(rng, n, dry=bool(rng.random() < 0.3), mirostat=False)
    names = [x for x in params.samplers if x != "top_k"]
    pos = int(rng.integers(0, len(names) + 1))
    after = int(rng.integers(pos, len(names) + 1))
    names = names[:pos] + ["top_k"] + names[pos:after] + ["infill"] + names[after:]
    k = top_k if top_k is not None else int(rng.choice([1, 3, 12, 40, 100, 256, 257, 600]))
    return params.replace(samplers=names, top_k=k)


def run_infill_sets(vocab, oracle_vocab, seed_base, sets, draws):
    n = len(vocab)
    for set_index in range(sets):
        rng = np.random.default_rng(seed_base + set_index)
        # every third set above 256 candidates: bankml's sorted merge instead of the pair loop
        params = infill_params(rng, n, top_k=int(rng.choice([257, 300, 400, 600])) if set_index % 3 == 2 else None)
        logits_source = InfillLogits(rng, vocab)
        sampler = Sampler(params, vocab)
        oracle = OracleChain(params, n, vocab_handle=oracle_vocab.handle)
        try:
            for draw in range(draws):
                logits = logits_source.draw(rng)
                expected = oracle.sample(logits)
                got = sampler.sample(logits)
                assert got == expected, f"draw {draw}: bankml {got}, libllama {expected}, {params!r}"
                ORACLE_STATS["sampler infill draws of an end-of-generation token"] += int(vocab.is_eog(got))
                oracle.accept(expected)
                sampler.accept(got)
        finally:
            oracle.close()
        ORACLE_STATS["sampler draws compared"] += draws
        ORACLE_STATS["sampler parameter sets compared"] += 1
        ORACLE_STATS["sampler draws compared with infill"] += draws
        ORACLE_STATS["sampler parameter sets with infill"] += 1
        if params.top_k > 256:
            ORACLE_STATS["sampler infill draws on more than 256 candidates"] += draws


def test_infill_on_the_qwen2_vocabulary(qwen2):
    vocab, oracle_vocab = qwen2
    assert Sampler(infill_params(np.random.default_rng(0), len(vocab)), vocab).chain_names.count("infill") == 1
    run_infill_sets(vocab, oracle_vocab, 5000, INFILL_SETS, 2 * FULL_DRAWS)


def test_infill_on_the_llama3_vocabulary():
    vocab, oracle_vocab = load_pair("llama3")
    run_infill_sets(vocab, oracle_vocab, 5100, max(1, INFILL_SETS // 2), 2 * FULL_DRAWS)


@pytest.mark.parametrize("case", ["greedy-first", "bans", "eog-only", "one-candidate"])
def test_infill_edge_cases(qwen2, case):
    vocab, oracle_vocab = qwen2
    n = len(vocab)
    rng = np.random.default_rng(zlib.crc32(case.encode()))
    if case == "greedy-first":
        # one live candidate among all 151,936 (llama.cpp's pair loop is then linear): bankml's sorted merge
        params = SamplerParams(seed=3, temperature=0.0, samplers="temperature;infill;top_p", top_p=0.9)
    elif case == "bans":
        params = SamplerParams(
            seed=4, top_k=300, samplers="top_k;infill;min_p", logit_bias=[[t, False] for t in range(0, 2000, 7)]
        )
    elif case == "eog-only":
        params = SamplerParams(seed=5, top_k=20, samplers="top_k;infill;temperature", temperature=1.3)
    else:
        params = SamplerParams(seed=6, top_k=1, samplers="top_k;infill")
    source = InfillLogits(rng, vocab)
    sampler = Sampler(params, vocab)
    oracle = OracleChain(params, n, vocab_handle=oracle_vocab.handle)
    try:
        for draw in range(60):
            logits = source.draw(rng)
            if case == "eog-only" and draw % 2:
                logits[source.eog] += 15.0
            if case == "bans":
                logits[:2000] += 3.0
            expected = oracle.sample(logits)
            got = sampler.sample(logits)
            assert got == expected, f"{case} draw {draw}: bankml {got}, libllama {expected}"
            oracle.accept(expected)
            sampler.accept(got)
    finally:
        oracle.close()
    ORACLE_STATS["sampler draws compared"] += 60
    ORACLE_STATS["sampler draws compared with infill"] += 60
    ORACLE_STATS["sampler parameter sets with infill"] += 1
    ORACLE_STATS["sampler parameter sets compared"] += 1


# --- the reasoning budget in the draw (common_sampler_sample applies it before the grammar and the chain) -------

BUDGET_SETS = int(os.environ.get("BANKML_SAMPLER_BUDGET_SETS", "8"))
BUDGET_STEPS = int(os.environ.get("BANKML_SAMPLER_BUDGET_STEPS", "60"))


@pytest.fixture(scope="module")
def budget_oracle(qwen2):
    from ..oracle.build_converter import OracleUnavailable
    from ..oracle.build_reasoning_budget import OracleReasoningBudget

    try:
        oracle = OracleReasoningBudget(vocab_path("qwen2"))
    except OracleUnavailable as e:  # an oracle test fails, never skips, when its oracle cannot be built
        pytest.fail(f"the reasoning-budget oracle (the pinned llama.cpp) could not be built: {e}")
    vocab, _ = qwen2
    tokenize = llama_cpp_tokenizer(vocab_path("qwen2"))
    tags = {
        "start": tokenize(b"<think>", False, True),
        "end": tokenize(b"</think>", False, True),
        "message": tokenize(b"\nOkay, I have thought enough.\n", False, True),
        "text": [
            t
            for t in set(tokenize("Let me think: 2 + 2 = 4, so the answer is four. 你好 — ok.\n".encode(), False, True))
        ],
    }
    yield tags, oracle
    oracle.close()


@pytest.mark.parametrize("set_index", range(BUDGET_SETS))
def test_reasoning_budget_draws_match_libllama(qwen2, budget_oracle, set_index):
    """A Sampler with a ReasoningBudget against libllama's chain with the pinned common_reasoning_budget sampler
    applied first (the forced token alone above -inf), accepting every drawn token into both: the same draws."""
    from bankml.sampling.reasoning_budget import ReasoningBudget

    vocab, oracle_vocab = qwen2
    tags, oracle_budget = budget_oracle
    n = len(vocab)
    rng = np.random.default_rng(6000 + set_index)
    params = random_params(rng, n, dry=set_index % 2 == 0)
    budget_tokens = int(rng.choice([0, 1, 4, 12, 30, 2**31 - 1]))
    forced = (tags["message"] if rng.random() < 0.7 else []) + list(tags["end"])
    state = oracle_budget.init(budget_tokens, "idle", [tags["start"]], [tags["end"]], forced)
    budget = ReasoningBudget(vocab, [tags["start"]], [tags["end"]], forced, budget_tokens)
    sampler = Sampler(params, vocab, reasoning_budget=budget)
    oracle = OracleChain(params, n, vocab_handle=oracle_vocab.handle)
    # the generation prompt opens the block: prefill reaches the budget (and the grammar), not the histories
    sampler.prefill(tags["start"])
    for token in tags["start"]:
        state = oracle_budget.accept(token)
    assert (budget.state, budget.forced_token, budget.end_match) == state
    text = np.array(tags["text"])
    script = []
    pool = LogitsPool(rng, n, "plain")
    forced_draws = 0
    try:
        for step in range(BUDGET_STEPS):
            if not script and rng.random() < 0.08:
                # the model closes the block itself, or opens a new one
                script = list(tags["end"] if rng.random() < 0.5 else tags["start"])
            logits = pool.draw(rng)
            logits[text] += np.float32(rng.uniform(4.0, 12.0))
            if script:
                logits[script.pop(0)] += 40.0
            oracle_logits = logits
            if state[1] is not None:
                oracle_logits = np.full(n, -np.inf, dtype=np.float32)
                oracle_logits[state[1]] = logits[state[1]]
                forced_draws += 1
            expected = oracle.sample(oracle_logits)
            got = sampler.sample(logits)
            assert got == expected, f"step {step}: bankml {got}, libllama {expected}, {params!r}, {state}"
            oracle.accept(expected)
            state = oracle_budget.accept(expected)
            sampler.accept(got)
            assert (budget.state, budget.forced_token, budget.end_match) == state, f"step {step}"
            ORACLE_STATS[f"sampler reasoning-budget draws in state {state[0]}"] += 1
    finally:
        oracle.close()
    ORACLE_STATS["sampler draws compared"] += BUDGET_STEPS
    ORACLE_STATS["sampler draws compared on 151,936 logits"] += BUDGET_STEPS
    ORACLE_STATS["sampler draws compared with the reasoning budget"] += BUDGET_STEPS
    ORACLE_STATS["sampler reasoning-budget draws forced"] += forced_draws
    ORACLE_STATS["sampler parameter sets with the reasoning budget"] += 1
    ORACLE_STATS["sampler parameter sets compared"] += 1
    if params.dry_multiplier != 0:
        ORACLE_STATS["sampler draws compared with DRY"] += BUDGET_STEPS
