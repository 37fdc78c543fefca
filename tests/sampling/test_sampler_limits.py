"""Hostile sampler input (issue 11): history lengths up to INT32_MAX, a grammar whose allowed tokens cannot be
drawn, and many long DRY sequence breakers. Each ends with a result or a clear error, never a signal, in a
child process bounded in time and address space where the failure was a crash or a blow-up."""

import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from bankml import Grammar, GrammarError, Rules, Vocab
from bankml.sampling._sampler import (
    DRY_MAX_CHAR_LEN,
    DRY_MAX_SEQ_LEN,
    NoAllowedTokenError,
    Sampler,
    SamplingError,
    _dry_breaker_bytes,
    _dry_breakers,
)
from bankml.sampling.params import SamplerParams

from ..bounded import HANG_SECONDS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
QWEN2 = os.path.join(ROOT, "tests", "data", "ggml-vocab-qwen2.gguf")
INT32_MAX = 2**31 - 1
LIMIT_AS = 4 << 30


def run_bounded(code, timeout=HANG_SECONDS):
    """Run ``code`` in a child Python with a 4 GiB address-space limit; its (returncode, stdout, stderr)."""
    prelude = "import resource\nresource.setrlimit(resource.RLIMIT_AS, (%d, %d))\n" % (LIMIT_AS, LIMIT_AS)
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=ROOT,
    )
    return proc.returncode, proc.stdout, proc.stderr


# --- history lengths up to INT32_MAX (issue 11, item 1) ----------------------------------------


@pytest.mark.parametrize(
    "fields",
    [
        "repeat_last_n=2**31-1, repeat_penalty=1.1",
        "repeat_last_n=2**31-1, frequency_penalty=0.5, presence_penalty=0.5",
        "dry_multiplier=0.8, dry_penalty_last_n=2**31-1",
        "repeat_last_n=2**31-1, repeat_penalty=1.1, dry_multiplier=0.8, dry_penalty_last_n=2**31-1",
    ],
)
def test_int32_max_history_works_with_bounded_memory(fields):
    # llama.cpp allocates the whole ring up front (8 GiB for INT32_MAX); bankml's grows with the tokens
    # accepted, so this works under 4 GiB and draws as llama.cpp would
    rc, out, err = run_bounded(f"""
        import numpy as np
        from bankml import Vocab
        from bankml.sampling._sampler import Sampler
        from bankml.sampling.params import SamplerParams
        vocab = Vocab([b"a", b"b", b":", b"c d", b"\\n"], [4])
        sampler = Sampler(SamplerParams(seed=7, {fields}), vocab)
        logits = np.array([3, 2, 1, 0.5, -1], dtype=np.float32)
        tokens = []
        for _ in range(2000):
            token = sampler.sample(logits)
            sampler.accept(token)
            tokens.append(token)
        clone = sampler.clone()
        sampler.accept_prompt(range(5))
        sampler.reset()
        print("ok", len(tokens), clone.sample(logits) in range(5), sampler.chain_names)
        """)
    assert rc == 0, err
    assert out.startswith("ok 2000 True"), out


def test_long_history_draws_as_a_history_longer_than_the_tokens_accepted():
    # a capacity the history never reaches drops nothing: INT32_MAX and 10,000 draw the same tokens
    vocab = Vocab([bytes([65 + i]) for i in range(40)], [39])
    rng = np.random.default_rng(3)
    logits = [rng.standard_normal(40).astype(np.float32) * 2 for _ in range(50)]
    draws = []
    for last_n in (INT32_MAX, 10_000):
        sampler = Sampler(
            SamplerParams(
                seed=11,
                repeat_last_n=last_n,
                repeat_penalty=1.5,
                frequency_penalty=0.3,
                dry_multiplier=1.0,
                dry_penalty_last_n=last_n,
                dry_allowed_length=1,
                top_k=0,
            ),
            vocab,
        )
        got = []
        for step in range(3000):
            token = sampler.sample(logits[step % 50])
            sampler.accept(token)
            got.append(token)
        draws.append(got)
    assert draws[0] == draws[1]


# --- a grammar whose allowed tokens cannot be drawn (issue 11, item 7) ----------------------------

VOCAB = Vocab([b"a", b"b", b"c", b"d"], [3])


@pytest.mark.parametrize("bad", [-math.inf, math.nan])
@pytest.mark.parametrize("fields", [{}, {"temperature": 0.0}, {"top_k": 0, "min_p": 0.0}])
def test_allowed_tokens_without_a_finite_logit_raise(bad, fields):
    grammar = Grammar(Rules.parse('root ::= "a"', vocab=VOCAB), VOCAB)
    sampler = Sampler(SamplerParams(seed=1, **fields), VOCAB, grammar)
    logits = np.array([bad, 1, 2, 3], dtype=np.float32)
    with pytest.raises(NoAllowedTokenError, match="no token the grammar allows can be sampled") as info:
        sampler.sample(logits)
    assert isinstance(info.value, GrammarError) and isinstance(info.value, RuntimeError)
    assert isinstance(info.value, SamplingError)
    # the sampler is still usable once the logits allow a token
    assert sampler.sample(np.array([0, 1, 2, 3], dtype=np.float32)) == 0


def test_a_rejected_token_never_comes_out():
    # random chains, logits with -inf / NaN holes, a grammar allowing two tokens: a token the grammar allows,
    # or NoAllowedTokenError -- never a token it rejects
    rng = np.random.default_rng(17)
    vocab = Vocab([bytes([97 + i]) for i in range(12)], [11])
    rules = Rules.parse("root ::= [bc]", vocab=vocab)
    outcomes = set()
    for case in range(300):
        fields = dict(
            seed=int(rng.integers(1 << 31)),
            top_k=int(rng.choice([0, 1, 3, 40])),
            temperature=float(rng.choice([0.0, 0.7, 1.0])),
            min_p=float(rng.choice([0.0, 0.05])),
            mirostat=int(rng.choice([0, 0, 2])),
        )
        sampler = Sampler(SamplerParams(**fields), vocab, Grammar(rules, vocab))
        logits = rng.standard_normal(12).astype(np.float32)
        holes = rng.random(12) < 0.5
        logits[holes] = rng.choice([-np.inf, np.nan], holes.sum())
        try:
            token = sampler.sample(logits)
        except NoAllowedTokenError:
            outcomes.add("error")
            continue
        assert token in (1, 2), (fields, logits, token)
        outcomes.add("token")
    assert outcomes == {"error", "token"}


def test_a_grammar_allowing_no_token_of_the_vocabulary_raises():
    # <[999999]> is refused by the parser now (a token id past the vocabulary); a text no token spells
    # allows no token either
    with pytest.raises(GrammarError, match="outside the vocabulary"):
        Rules.parse("root ::= <[999999]>", vocab=VOCAB)
    grammar = Grammar(Rules.parse('root ::= "\\u2603"', vocab=VOCAB), VOCAB)
    assert grammar.is_dead()
    sampler = Sampler(SamplerParams(seed=1), VOCAB, grammar)
    with pytest.raises(NoAllowedTokenError):
        sampler.sample(np.array([0, 1, 2, 3], dtype=np.float32))


def test_an_allowed_first_draw_is_returned_as_llama_cpp_returns_it():
    # every logit at -inf: the chain draws the last candidate, the grammar allows it, llama.cpp takes it
    vocab = Vocab([b"a", b"b", b"c", b"d"], [0])
    grammar = Grammar(Rules.parse("root ::= [a-d]", vocab=vocab), vocab)
    sampler = Sampler(SamplerParams(seed=1, top_k=0, top_p=1.0, min_p=0.0), vocab, grammar)
    assert sampler.sample(np.full(4, -np.inf, dtype=np.float32)) == 3
    assert sampler.n_redraws == 0


# --- DRY sequence breakers (issue 11, "50 long DRY breakers"; llama_sampler_init_dry's limits) ------------


class CountingVocab:
    """A Vocab's pieces with a tokenizer hook that counts its calls (one token per byte)."""

    def __init__(self, vocab):
        self.vocab = vocab
        self.pieces = vocab.pieces
        self.calls = []

    def __len__(self):
        return len(self.vocab)

    def piece(self, token_id):
        return self.vocab.piece(token_id)

    def tokenize(self, text, add_special, parse_special):
        assert (add_special, parse_special) == (False, False)
        self.calls.append(text)
        return list(text)


def test_breakers_are_cut_as_llama_cpp_cuts_them():
    assert _dry_breaker_bytes("x" * 100) == b"x" * DRY_MAX_CHAR_LEN
    assert _dry_breaker_bytes("ab\0cd") == b"ab"  # passed as a C string
    assert _dry_breaker_bytes("\0") == b""  # then skipped as empty
    assert _dry_breaker_bytes("é" * 30) == ("é" * 20).encode()
    vocab = CountingVocab(Vocab([b"a", b"xy", b"y"], [0]))
    # the tail of a breaker cut inside the 40 bytes; tokenizations cut to 20 tokens
    result = _dry_breakers(vocab, ["y" + "z" * 60])
    assert result[1] == [[ord("z")] * DRY_MAX_SEQ_LEN] and result[2] == [[ord("z")] * DRY_MAX_SEQ_LEN]
    assert vocab.calls == [b"z" * (DRY_MAX_CHAR_LEN - 1)]
    # one piece overlapping a breaker at two places gives two tails
    assert _dry_breakers(CountingVocab(Vocab([b"aa", b"b"], [1])), ["aab"]) == {0: [[ord("b")], [ord("a"), ord("b")]]}


def test_fifty_long_breakers_on_the_real_vocabulary_tokenize_each_tail_once():
    # the scan is bytes-only; the tokenizer runs once per distinct non-empty tail, at most 39 per breaker
    rng = np.random.default_rng(5)
    alphabet = list("abcdefghij \n:")
    breakers = ["".join(rng.choice(alphabet, 400)) for _ in range(50)]
    vocab = CountingVocab(Vocab.from_gguf(QWEN2))
    result = _dry_breakers(vocab, breakers)
    assert len(vocab.calls) == len(set(vocab.calls)) <= 50 * (DRY_MAX_CHAR_LEN - 1)
    assert len(result) > 1000
    before = len(vocab.calls)
    _dry_breakers(vocab, breakers)  # processed breakers are cached per vocabulary
    assert len(vocab.calls) == before


def test_fifty_long_breakers_finish_in_a_bounded_child():
    rc, out, err = run_bounded(
        """
        import numpy as np
        from bankml import Vocab
        from bankml.sampling._sampler import Sampler
        from bankml.sampling.params import SamplerParams
        rng = np.random.default_rng(5)
        breakers = ["".join(rng.choice(list("abcdefghij \\n:"), 400)) for _ in range(50)]
        vocab = Vocab.from_gguf("tests/data/ggml-vocab-qwen2.gguf").with_tokenizer(lambda t, a, p: list(t))
        sampler = Sampler(SamplerParams(seed=1, dry_multiplier=0.8, dry_sequence_breakers=breakers), vocab)
        print("ok", sampler.sample(np.zeros(len(vocab), dtype=np.float32)) >= 0)
        """,
    )
    assert rc == 0, err
    assert out.startswith("ok True"), out


def test_default_breakers_need_no_tokenizer():
    # one-byte breakers: llama.cpp tokenizes only the empty tail, so a plain Vocab is enough
    vocab = Vocab([b"a", b"b:", b"\n\n", b"x*y", b'"'], [0])
    result = _dry_breakers(vocab, ["\n", ":", '"', "*"])
    assert result == {1: [[]], 2: [[]], 3: [[]], 4: [[]]}
    sampler = Sampler(SamplerParams(dry_multiplier=0.8), vocab)
    assert "dry" in sampler.chain_names


def test_a_breaker_needing_the_tokenizer_names_it():
    vocab = Vocab([b"a", b"xy:", b"\n"], [0])
    with pytest.raises(ValueError, match=r"'::' overlaps the end of token 1 .*give the vocabulary a tokenizer"):
        Sampler(SamplerParams(dry_multiplier=0.8, dry_sequence_breakers=["::"]), vocab)
    # a multi-character breaker no piece ends inside needs no tokenizer either
    assert _dry_breakers(vocab, ["qa", "y:"]) == {1: [[]]}


# --- infill on the whole vocabulary ------------------------------------------------------------------------


def test_infill_on_every_candidate_of_the_real_vocabulary_finishes_in_a_bounded_child():
    # llama.cpp's infill compares every pair of candidates (about 1.5 hours per draw on 151,936); bankml visits
    # only the pairs whose pieces are prefixes of one another, the same merges in the same order
    rc, out, err = run_bounded(
        """
        import numpy as np
        from bankml import Vocab
        from bankml.sampling._sampler import Sampler
        from bankml.sampling.params import SamplerParams
        vocab = Vocab.from_gguf("tests/data/ggml-vocab-qwen2.gguf")
        rng = np.random.default_rng(2)
        sampler = Sampler(SamplerParams(seed=1, samplers="infill;temperature"), vocab)
        tokens = []
        for _ in range(5):
            logits = rng.standard_normal(len(vocab)).astype(np.float32)
            logits[rng.integers(0, len(vocab), 3)] += 12
            token = sampler.sample(logits)
            sampler.accept(token)
            tokens.append(token)
        print("ok", all(0 <= t < len(vocab) for t in tokens), sampler.chain_names)
        """,
    )
    assert rc == 0, err
    assert out.startswith("ok True ('infill', 'temp-ext', 'dist')"), out
