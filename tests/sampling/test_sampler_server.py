"""llama-server's reading of a request's sampler fields (SamplerParams.from_server, bankml.serve.openai.sampler_fields):
clamped where the pinned tools/server/server-schema.cpp clamps, refused where it answers 400, the Python API
strict. The table rows are that file's field_num limits."""

import math
import pathlib

import numpy as np
import pytest

from bankml import Vocab
from bankml.chat.constraint import RequestError
from bankml.sampling._sampler import Sampler
from bankml.sampling.params import DEFAULT_SAMPLERS, SamplerParams
from bankml.serve.ollama import sampler_options
from bankml.serve.openai import sampler_fields

INT32_MAX = 2**31 - 1


class SizedVocab:
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


FLT_MAX = float(np.finfo(np.float32).max)

CLAMPED = [
    # (field, request value, the value llama-server samples with)
    ("temperature", -0.5, 0.0),
    ("temperature", 1e39, math.inf),
    ("top_k", -3, 0),
    ("top_k", 40.9, 40),
    ("top_k", 2**32 + 7, 7),
    ("top_k", -(2**32) - 1, 0),
    ("top_p", 1.5, 1.0),
    ("top_p", -0.1, 0.0),
    ("min_p", 2.0, 1.0),
    ("min_p", -1.0, 0.0),
    ("xtc_probability", 3.0, 1.0),
    ("xtc_threshold", -2.0, 0.0),
    ("mirostat", 3, 2),
    ("mirostat", -1, 0),
    ("mirostat", 7.5, 2),
    ("adaptive_target", 5.0, 1.0),
    ("adaptive_target", -1e39, -FLT_MAX),
    ("dry_multiplier", 1e39, FLT_MAX),
    ("frequency_penalty", -1e39, -FLT_MAX),
    ("typical_p", 1e39, FLT_MAX),
    ("repeat_penalty", -1.5, -1.5),
    ("dry_base", 0.5, np.float32(1.75)),
    ("seed", -1, 0xFFFFFFFF),
    ("seed", -2, 0xFFFFFFFE),
    ("seed", 2**32 + 5, 5),
    ("seed", 12.9, 12),
    ("repeat_last_n", INT32_MAX, INT32_MAX),
    ("dry_penalty_last_n", INT32_MAX, INT32_MAX),
    ("repeat_last_n", 2**32 + 64, 64),
]


@pytest.mark.parametrize("field,value,expected", CLAMPED)
def test_values_llama_server_clamps_are_clamped(field, value, expected):
    params = SamplerParams.from_server({field: value})
    assert (
        getattr(params, field) == pytest.approx(expected, rel=1e-7)
        if math.isfinite(expected)
        else getattr(params, field) == expected
    )


REFUSED = [
    ("repeat_last_n", -1),
    ("repeat_last_n", 2**31),
    ("dry_penalty_last_n", -5),
    ("dry_allowed_length", -1),
    ("min_keep", -1),
    ("adaptive_decay", 0.995),
    ("adaptive_decay", -0.1),
    ("top_k", "40"),
    ("top_p", True),
    ("temperature", [1]),
    ("seed", "1"),
    ("dry_sequence_breakers", []),
    ("dry_sequence_breakers", "abc"),
    ("dry_sequence_breakers", [1]),
    ("samplers", [1, 2]),
    ("repeat_penalty", 0.0),
]


@pytest.mark.parametrize("field,value", REFUSED)
def test_values_llama_server_refuses_are_refused(field, value):
    with pytest.raises(ValueError, match=field):
        SamplerParams.from_server({field: value})


def test_samplers_as_llama_server_reads_them():
    # a string is one-letter codes (unknown ones skipped), an array names (unknown ones skipped)
    assert SamplerParams.from_server({"samplers": "top_k;top_p"}).samplers == (
        "temperature",
        "top_p",
        "top_k",
        "temperature",
        "top_p",
        "top_p",
    )  # t o p _ k ; t o p _ p
    assert SamplerParams.from_server({"samplers": ["Top-K", "nope", "min_p", "adaptive-p"]}).samplers == (
        "top_k",
        "min_p",
        "adaptive_p",
    )
    assert SamplerParams.from_server({"samplers": 5}).samplers == tuple(DEFAULT_SAMPLERS.split(";"))
    assert SamplerParams.from_server({"samplers": []}).samplers == ()
    # infill, as llama-server's `samplers` reaches it (code 'i', name "infill")
    assert SamplerParams.from_server({"samplers": "ki"}).samplers == ("top_k", "infill")
    assert SamplerParams.from_server({"samplers": ["top_k", "Infill"]}).samplers == ("top_k", "infill")


def test_the_python_api_stays_strict():
    for field, value in [
        ("temperature", -0.5),
        ("top_k", -3),
        ("top_p", 1.5),
        ("mirostat", 3),
        ("adaptive_target", 5.0),
        ("repeat_penalty", -1.5),
        ("samplers", "nope"),
    ]:
        with pytest.raises(ValueError, match=field):
            SamplerParams(**{field: value})


def test_request_layer_uses_llama_servers_values():
    params, n_predict, stop = sampler_fields(
        {
            "temperature": -1,
            "top_p": 7,
            "mirostat": 9,
            "repeat_last_n": INT32_MAX,
            "repeat_penalty": 1.1,
            "adaptive_target": 0.5,
            "adaptive_decay": 0.5,
            "samplers": ["top_k", "adaptive_p"],
            "seed": -1,
        }
    )
    assert (params.temperature, params.top_p, params.mirostat) == (0.0, 1.0, 2)
    assert params.repeat_last_n == INT32_MAX and params.seed == 0xFFFFFFFF
    assert params.samplers == ("top_k", "adaptive_p") and params.adaptive_decay == np.float32(0.5)
    with pytest.raises(RequestError, match="repeat_last_n"):
        sampler_fields({"repeat_last_n": -1})


def test_ollama_repeat_last_n_minus_one_is_the_context():
    params, _, _ = sampler_options({"options": {"repeat_last_n": -1}}, n_ctx=4096)
    assert params.repeat_last_n == 4096
    params, _, _ = sampler_options({"options": {"repeat_last_n": -1}})
    assert params.repeat_last_n == INT32_MAX


def test_clamped_parameters_sample():
    # the clamped values build a chain and draw (temperature 0 after clamping: greedy)
    params = SamplerParams.from_server({"temperature": -3, "top_k": -1, "min_p": 5, "seed": 3})

    class Sized:
        def __len__(self):
            return 50

    sampler = Sampler(params, Sized())
    logits = np.linspace(-1, 1, 50, dtype=np.float32)
    assert sampler.sample(logits) == 49


# --- logit_bias as llama-server's params_from_json_cmpl reads it ----------------------------------------------

QWEN2 = pathlib.Path(__file__).parent.parent / "data" / "ggml-vocab-qwen2.gguf"


@pytest.fixture(scope="module")
def qwen2_hooked():
    import llama_cpp  # noqa: F401  (the oracle: the test extra installs it; a missing oracle fails, never skips)

    from bankml.integrations.adapters import llama_cpp_tokenizer

    vocab = Vocab.from_gguf(QWEN2)
    return vocab.with_tokenizer(llama_cpp_tokenizer(QWEN2))


def test_logit_bias_object_keys_read_as_strtol_reads_them(qwen2_hooked):
    vocab = qwen2_hooked
    tok = lambda text: vocab.tokenize(text.encode(), False, False)  # noqa: E731
    bias = {
        "hello": 2.0,
        "151935": 1,
        "151936": 5,
        "-1": 3,
        "": 1.5,
        " 7": 1,
        "+8": 1,
        "0x10": 1,
        "4294967301": 1,
        "7 ": 1,
        "99999999999999999999": 1,
        "-99999999999999999999": 0.5,
        "12\u0000x": 1,
        "<|im_end|>": False,
        "9": True,
        "10": "x",
        "11": None,
    }
    params = SamplerParams.from_server({"logit_bias": bias}, vocab=vocab)
    ninf = -math.inf
    # std::map order (bytes of the keys); ids outside [0, n_vocab) skipped, LONG_MAX wraps to -1 (skipped) and
    # LONG_MIN to 0; text tokenized without special tokens; true / strings / null as a bias skip the entry
    expected = (
        [(0, 1.5), (7, 1.0), (8, 1.0), (0, 0.5)]
        + [(t, 1.0) for t in tok("0x10")]
        + [(12, 1.0), (151935, 1.0), (5, 1.0)]
        + [(t, 1.0) for t in tok("7 ")]
        + [(t, ninf) for t in tok("<|im_end|>")]
        + [(t, 2.0) for t in tok("hello")]
    )
    assert list(params.logit_bias) == expected
    assert len(tok("<|im_end|>")) > 1  # parse_special=false: the text, not the special token
    Sampler(params, vocab).sample(np.zeros(len(vocab), dtype=np.float32))


def test_logit_bias_pairs_read_as_llama_server_reads_them(qwen2_hooked):
    vocab = qwen2_hooked
    pairs = [
        [151936, 1],
        [-5, 1],
        [3, True],
        [4, "x"],
        [5],
        [2**32 + 6, 1.0],
        [7.0, 1],
        ["hi", False],
        [2**64, 1],
        [True, 1],
        "junk",
        [9, 1e39],
        [10, -1e39],
        [11, 2],
    ]
    params = SamplerParams.from_server({"logit_bias": pairs}, vocab=vocab)
    assert list(params.logit_bias) == (
        [(6, 1.0)]
        + [(t, -math.inf) for t in vocab.tokenize(b"hi", False, False)]
        + [(9, math.inf), (10, -math.inf), (11, 2.0)]
    )
    assert SamplerParams.from_server({"logit_bias": 5}, vocab=vocab).logit_bias == ()
    with pytest.raises(ValueError, match="logit_bias"):
        SamplerParams.from_server({"logit_bias": [[1, math.nan]]}, vocab=vocab)


def test_logit_bias_without_the_vocabulary_or_its_tokenizer():
    # without a vocabulary: ids kept (the Sampler checks the range), negative ids skipped, text refused
    params = SamplerParams.from_server({"logit_bias": {"25": 1, "-3": 1, "4": False}})
    assert params.logit_bias == ((25, 1.0), (4, -math.inf))
    with pytest.raises(ValueError, match="logit_bias"):
        Sampler(params, SizedVocab(20))
    with pytest.raises(ValueError, match="vocab="):
        SamplerParams.from_server({"logit_bias": {"hello": 1}})
    plain = Vocab([b"a", b"b"], [])
    with pytest.raises(ValueError, match="tokenizer hook"):
        SamplerParams.from_server({"logit_bias": [["a", 1]]}, vocab=plain)
    assert SamplerParams.from_server({"logit_bias": {"2": 1, "1": 1}}, vocab=plain).logit_bias == ((1, 1.0),)


def test_the_python_api_refuses_logit_bias_outside_the_vocabulary():
    with pytest.raises(ValueError, match=r"logit_bias: token 20 is outside \[0, 20\)"):
        Sampler(SamplerParams(logit_bias={20: 1.0}), SizedVocab(20))
    with pytest.raises(ValueError, match="logit_bias"):
        SamplerParams(logit_bias={"hello": 1.0})
