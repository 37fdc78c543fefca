"""Unit tests of bankml's sampling chain on small hand-made vocabularies: the generator against the
C++ standard's values, parameter validation, and the sampler's state (clone, reset, accept, prefill)."""

import math

import numpy as np
import pytest

from bankml import Grammar, Vocab
from bankml.sampling._sampler import Rng, Sampler, SamplingError
from bankml.sampling.params import DEFAULT_SAMPLERS, LLAMA_DEFAULT_SEED, SamplerParams


class SizedVocab:
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


# --- the generator -----------------------------------------------------------------


def test_mt19937_10000th_output_for_the_default_seed():
    # [rand.predef]: the 10000th consecutive invocation of a default-constructed mt19937 gives 4123659995
    rng = Rng(5489)
    rng.discard(9999)
    assert rng.next_u32() == 4123659995


def test_mt19937_first_outputs():
    rng = Rng(5489)
    assert [rng.next_u32() for _ in range(3)] == [3499211612, 581869302, 3890346734]


def test_uniform_double_uses_two_outputs_low_word_first():
    # generate_canonical<double, 53> with a 32-bit engine: (x0 + x1 * 2^32) / 2^64
    expected = (3499211612 + 581869302 * 2.0**32) / 2.0**64
    rng = Rng(5489)
    assert rng.uniform() == expected
    assert rng.next_u32() == 3890346734


def test_uniform_float_uses_one_output():
    rng = Rng(5489)
    assert rng.uniform_float() == np.float32(np.float32(3499211612) / np.float32(2.0**32))
    assert rng.next_u32() == 581869302


def test_discrete_distribution_draws_two_outputs():
    rng = Rng(42)
    other = rng.clone()
    draws = [rng.discrete([0.1, 0.2, 0.7]) for _ in range(200)]
    assert set(draws) <= {0, 1, 2}
    assert draws.count(2) > draws.count(0)
    other.discard(400)
    assert rng.next_u32() == other.next_u32()
    with pytest.raises(ValueError):
        rng.discrete([])


def test_clone_is_independent():
    rng = Rng(7)
    rng.discard(5)
    copy = rng.clone()
    assert [rng.next_u32() for _ in range(10)] == [copy.next_u32() for _ in range(10)]
    rng.next_u32()
    assert rng.next_u32() != copy.next_u32()


def test_default_seed_is_random():
    seeds = {Rng(LLAMA_DEFAULT_SEED).seed for _ in range(4)} | {Rng(-1).seed}
    assert len(seeds) > 1
    assert Rng(12).seed == 12


@pytest.mark.parametrize("seed", [-2, 2**32, 1.5, True, "1"])
def test_invalid_seed(seed):
    with pytest.raises(ValueError, match="seed"):
        Rng(seed)


# --- parameters --------------------------------------------------------------------------


def test_defaults_are_llama_servers():
    p = SamplerParams()
    assert p.seed == LLAMA_DEFAULT_SEED
    assert p.temperature == np.float32(0.8)
    assert p.top_k == 40 and p.top_p == np.float32(0.95) and p.min_p == np.float32(0.05)
    assert p.typical_p == 1.0 and p.top_n_sigma == -1.0
    assert p.xtc_probability == 0.0 and p.xtc_threshold == np.float32(0.1)
    assert p.repeat_last_n == 64 and p.repeat_penalty == 1.0
    assert p.frequency_penalty == 0.0 and p.presence_penalty == 0.0
    assert p.dry_multiplier == 0.0 and p.dry_base == 1.75 and p.dry_allowed_length == 2
    assert p.dry_penalty_last_n == 64 and p.dry_sequence_breakers == ("\n", ":", '"', "*")
    assert p.mirostat == 0 and p.mirostat_tau == 5.0 and p.mirostat_eta == np.float32(0.1)
    assert p.dynatemp_range == 0.0 and p.dynatemp_exponent == 1.0
    assert p.logit_bias == ()
    assert ";".join(p.samplers) == DEFAULT_SAMPLERS


@pytest.mark.parametrize(
    "field, value",
    [
        ("temperature", -0.1),
        ("temperature", math.nan),
        ("top_k", -1),
        ("top_k", 2.5),
        ("top_p", 1.5),
        ("top_p", -0.1),
        ("min_p", 2.0),
        ("xtc_probability", 1.1),
        ("xtc_threshold", -1.0),
        ("repeat_last_n", -1),
        ("repeat_penalty", 0.0),
        ("repeat_penalty", -1.0),
        ("repeat_penalty", math.inf),
        ("frequency_penalty", math.nan),
        ("presence_penalty", math.inf),
        ("dry_allowed_length", -1),
        ("dry_penalty_last_n", -5),
        ("mirostat", 3),
        ("mirostat", -1),
        ("mirostat_tau", math.nan),
        ("dynatemp_range", math.inf),
        ("typical_p", "0.5"),
        ("top_k", True),
        ("min_keep", -1),
        ("seed", -3),
        ("samplers", "top_k;bogus"),
        ("samplers", "kz"),
        ("dry_sequence_breakers", []),
        ("dry_sequence_breakers", "abc"),
        ("logit_bias", [[1]]),
        ("logit_bias", {"1": "x"}),
        ("logit_bias", [["hello", 1.0]]),
    ],
)
def test_invalid_values_name_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        SamplerParams(**{field: value})


def test_unknown_field():
    with pytest.raises(ValueError, match="top_q"):
        SamplerParams(top_q=0.5)


def test_repeat_penalty_whose_inverse_overflows():
    with pytest.raises(ValueError, match="repeat_penalty"):
        SamplerParams(repeat_penalty=1e-45)


def test_dry_base_below_one_becomes_the_default():
    assert SamplerParams(dry_base=0.5).dry_base == 1.75
    assert SamplerParams(dry_base=2.0).dry_base == 2.0


def test_sampler_names_aliases_and_chars():
    assert SamplerParams(samplers="top-k;nucleus;TEMP;typ").samplers == ("top_k", "top_p", "temperature", "typ_p")
    assert SamplerParams(samplers=["minp", "top_n_sigma"]).samplers == ("min_p", "top_n_sigma")
    assert SamplerParams(samplers="edskypmxt").samplers == tuple(DEFAULT_SAMPLERS.split(";"))
    assert SamplerParams(samplers="top_k").samplers == ("top_k",)


def test_logit_bias_forms():
    p = SamplerParams(logit_bias={"3": 1.5, 5: False})
    assert p.logit_bias == ((3, 1.5), (5, -math.inf))
    assert SamplerParams(logit_bias=[[2, -1]]).logit_bias == ((2, -1.0),)


def test_params_are_immutable_and_replaceable():
    p = SamplerParams(top_k=5)
    with pytest.raises(AttributeError):
        p.top_k = 6
    q = p.replace(top_k=6)
    assert q.top_k == 6 and p.top_k == 5 and q != p
    assert p == SamplerParams(top_k=5) and hash(p) == hash(SamplerParams(top_k=5))


# --- the sampler -------------------------------------------------------------------------------


def logits_stream(n, count, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(n) * 3).astype(np.float32) for _ in range(count)]


def draw_all(sampler, stream):
    out = []
    for logits in stream:
        token = sampler.sample(logits)
        sampler.accept(token)
        out.append(token)
    return out


def test_chain_follows_the_disabled_sampler_rules():
    assert Sampler(SamplerParams(seed=1), SizedVocab(10)).chain_names == ("top-k", "top-p", "min-p", "temp-ext", "dist")
    params = SamplerParams(seed=1, mirostat=2, temperature=1.0, logit_bias={1: 2.0})
    assert Sampler(params, SizedVocab(10)).chain_names == ("logit-bias", "mirostat-v2")
    params = SamplerParams(seed=1, repeat_penalty=1.1, samplers="top_k;penalties", top_k=0)
    assert Sampler(params, SizedVocab(10)).chain_names == ("top-k", "penalties", "dist")


def test_same_seed_same_draws_and_reset_repeats_them():
    stream = logits_stream(300, 60)
    params = SamplerParams(seed=99, repeat_penalty=1.2, xtc_probability=0.5, top_k=0)
    a = Sampler(params, SizedVocab(300))
    b = Sampler(params, SizedVocab(300))
    first = draw_all(a, stream)
    assert first == draw_all(b, stream)
    assert len(set(first)) > 5
    a.reset()
    assert draw_all(a, stream) == first


def test_clone_continues_identically():
    stream = logits_stream(300, 80, seed=3)
    sampler = Sampler(SamplerParams(seed=5, mirostat=1), SizedVocab(300))
    draw_all(sampler, stream[:20])
    copy = sampler.clone()
    assert draw_all(sampler, stream[20:]) == draw_all(copy, stream[20:])


def test_greedy_picks_the_first_maximum():
    logits = np.zeros(50, dtype=np.float32)
    logits[[7, 30]] = 5.0
    sampler = Sampler(SamplerParams(seed=1, temperature=0.0), SizedVocab(50))
    assert [sampler.sample(logits) for _ in range(5)] == [7] * 5


def test_logit_bias_ban():
    logits = np.zeros(20, dtype=np.float32)
    logits[3] = 10.0
    sampler = Sampler(SamplerParams(seed=1, temperature=0.0, logit_bias={3: False}), SizedVocab(20))
    assert sampler.sample(logits) != 3


def test_logit_bias_token_out_of_range():
    with pytest.raises(ValueError, match="logit_bias"):
        Sampler(SamplerParams(logit_bias={25: 1.0}), SizedVocab(20))


@pytest.mark.parametrize(
    "bad",
    [np.zeros(10, dtype=np.float64), np.zeros(11, dtype=np.float32), np.zeros((1, 10), dtype=np.float32), [0.0] * 10],
)
def test_invalid_logits(bad):
    sampler = Sampler(SamplerParams(seed=1), SizedVocab(10))
    with pytest.raises(ValueError, match="Invalid logits"):
        sampler.sample(bad)


def test_accept_out_of_range():
    sampler = Sampler(SamplerParams(seed=1), SizedVocab(10))
    with pytest.raises(ValueError, match="token id"):
        sampler.accept(10)


def test_penalties_see_accepted_tokens_only():
    logits = np.zeros(4, dtype=np.float32)
    logits[0] = 1.0
    params = SamplerParams(seed=1, temperature=0.0, presence_penalty=2.0, top_k=0, min_p=0.0, top_p=1.0)
    sampler = Sampler(params, SizedVocab(4))
    assert sampler.sample(logits) == 0
    assert sampler.sample(logits) == 0  # not accepted yet: no penalty
    sampler.accept(0)
    assert sampler.sample(logits) == 1  # 1.0 - 2.0 < 0: the first 0.0 wins


def small_json_vocab():
    pieces = [b"{", b"}", b'"', b"a", b"b", b":", b" ", b"x", b"</s>"]
    return Vocab(pieces, [8])


def test_grammar_redraw_and_prefill():
    vocab = small_json_vocab()
    grammar = Grammar('root ::= "{" "a"* "}"', vocab)
    logits = np.zeros(len(vocab), dtype=np.float32)
    logits[7] = 20.0  # "x" would always be drawn first: the grammar must send every draw to a redraw
    sampler = Sampler(SamplerParams(seed=3, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0), vocab, grammar)
    token = sampler.sample(logits)
    assert token == 0 and sampler.n_redraws == 1
    sampler.accept(token)
    out = []
    for _ in range(20):
        token = sampler.sample(logits)
        if token == 8:
            break
        sampler.accept(token)
        out.append(token)
    assert set(out) <= {1, 3}
    assert sampler.n_redraws >= 2
    # prefill: the grammar moves past "{" but the penalty history does not change
    grammar2 = Grammar('root ::= "{" "a"* "}"', vocab)
    sampler2 = Sampler(SamplerParams(seed=3), vocab, grammar2)
    sampler2.prefill([0])
    assert not grammar2.allows(0) and grammar2.allows(3)


def test_clone_copies_the_grammar_state():
    vocab = small_json_vocab()
    sampler = Sampler(SamplerParams(seed=3), vocab, Grammar('root ::= "{" "a"* "}"', vocab))
    sampler.accept(0)
    copy = sampler.clone()
    copy.accept(1)
    assert sampler.grammar.allows(3) and not copy.grammar.allows(3)
    sampler.reset()
    assert sampler.grammar.allows(0)


def test_not_picklable():
    import pickle

    with pytest.raises(TypeError):
        pickle.dumps(Sampler(SamplerParams(seed=1), SizedVocab(3)))
    assert pickle.loads(pickle.dumps(SamplerParams(top_k=3))) == SamplerParams(top_k=3)


# --- infill (its draws are compared with libllama's in test_sampler_oracle.py) ----------------------------

INFILL_PIECES = [b"a", b"ab", b"abc", b"x", b"<end>", b"y"]


def test_infill_merges_a_prefix_into_the_likelier_token():
    # "a" and "ab" equally likely: "a" is a prefix of "ab", so "ab" merges into "a" (the first when tied);
    # without infill, dist draws both
    vocab = Vocab(INFILL_PIECES, [4])
    logits = np.full(6, -30.0, dtype=np.float32)
    logits[[0, 1]] = 5.0
    drawn = {Sampler(SamplerParams(seed=s, samplers="infill"), vocab).sample(logits) for s in range(40)}
    assert drawn == {0}
    plain = {Sampler(SamplerParams(seed=s, samplers=""), vocab).sample(logits) for s in range(40)}
    assert plain == {0, 1}


def test_infill_samples_end_of_generation_when_text_is_unlikely():
    vocab = Vocab(INFILL_PIECES, [4])
    logits = np.zeros(6, dtype=np.float32)
    logits[4] = 1.0  # 3 * p_eog * 6 > p_txt: only the EOG tokens stay
    for seed in range(10):
        assert Sampler(SamplerParams(seed=seed, samplers="infill"), vocab).sample(logits) == 4


def test_infill_without_eot_or_eos_raises_where_llama_cpp_asserts():
    # no text token reaches 0.2 and a hand-made Vocab has no EOT/EOS token to fall back on
    vocab = Vocab([bytes([65 + i]) for i in range(10)], [])
    sampler = Sampler(SamplerParams(seed=1, samplers="infill"), vocab)
    with pytest.raises(SamplingError, match="EOT or EOS"):
        sampler.sample(np.zeros(10, dtype=np.float32))
    assert sampler.chain_names == ("infill", "dist")


def test_infill_clone_draws_the_same():
    vocab = Vocab(INFILL_PIECES, [4])
    rng = np.random.default_rng(3)
    sampler = Sampler(SamplerParams(seed=9, samplers="top_k;infill;temperature", top_k=4), vocab)
    clone = sampler.clone()
    for _ in range(30):
        logits = (rng.standard_normal(6) * 3).astype(np.float32)
        a, b = sampler.sample(logits), clone.sample(logits)
        assert a == b
        sampler.accept(a)
        clone.accept(b)


def test_infill_needs_pieces():
    with pytest.raises(ValueError, match="infill"):
        Sampler(SamplerParams(samplers="infill"), SizedVocab(10))
