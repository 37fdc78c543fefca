"""llama-server's reading of a request's sampler fields (SamplerParams.from_server, sampler_params_from_request):
clamped where the pinned tools/server/server-schema.cpp clamps, refused where it answers 400, the Python API
strict. The table rows are that file's field_num limits."""
import math

import numpy as np
import pytest

from bankml._sampler import DEFAULT_SAMPLERS, Sampler, SamplerParams
from bankml.constraint import RequestError
from bankml.runtime import sampler_params_from_request

INT32_MAX = 2**31 - 1
FLT_MAX = float(np.finfo(np.float32).max)

CLAMPED = [
    # (field, request value, the value llama-server samples with)
    ("temperature", -0.5, 0.0), ("temperature", 1e39, math.inf),
    ("top_k", -3, 0), ("top_k", 40.9, 40), ("top_k", 2**32 + 7, 7), ("top_k", -(2**32) - 1, 0),
    ("top_p", 1.5, 1.0), ("top_p", -0.1, 0.0), ("min_p", 2.0, 1.0), ("min_p", -1.0, 0.0),
    ("xtc_probability", 3.0, 1.0), ("xtc_threshold", -2.0, 0.0),
    ("mirostat", 3, 2), ("mirostat", -1, 0), ("mirostat", 7.5, 2),
    ("adaptive_target", 5.0, 1.0), ("adaptive_target", -1e39, -FLT_MAX),
    ("dry_multiplier", 1e39, FLT_MAX), ("frequency_penalty", -1e39, -FLT_MAX),
    ("typical_p", 1e39, FLT_MAX), ("repeat_penalty", -1.5, -1.5),
    ("dry_base", 0.5, np.float32(1.75)), ("seed", -1, 0xFFFFFFFF), ("seed", -2, 0xFFFFFFFE),
    ("seed", 2**32 + 5, 5), ("seed", 12.9, 12),
    ("repeat_last_n", INT32_MAX, INT32_MAX), ("dry_penalty_last_n", INT32_MAX, INT32_MAX),
    ("repeat_last_n", 2**32 + 64, 64),
]


@pytest.mark.parametrize("field,value,expected", CLAMPED)
def test_values_llama_server_clamps_are_clamped(field, value, expected):
    params = SamplerParams.from_server({field: value})
    assert getattr(params, field) == pytest.approx(expected, rel=1e-7) if math.isfinite(expected) \
        else getattr(params, field) == expected


REFUSED = [
    ("repeat_last_n", -1), ("repeat_last_n", 2**31), ("dry_penalty_last_n", -5), ("dry_allowed_length", -1),
    ("min_keep", -1), ("adaptive_decay", 0.995), ("adaptive_decay", -0.1), ("top_k", "40"), ("top_p", True),
    ("temperature", [1]), ("seed", "1"), ("dry_sequence_breakers", []), ("dry_sequence_breakers", "abc"),
    ("dry_sequence_breakers", [1]), ("samplers", [1, 2]), ("repeat_penalty", 0.0),
]


@pytest.mark.parametrize("field,value", REFUSED)
def test_values_llama_server_refuses_are_refused(field, value):
    with pytest.raises(ValueError, match=field):
        SamplerParams.from_server({field: value})


def test_samplers_as_llama_server_reads_them():
    # a string is one-letter codes (unknown ones skipped), an array names (unknown ones skipped)
    assert SamplerParams.from_server({"samplers": "top_k;top_p"}).samplers == (
        "temperature", "top_p", "top_k", "temperature", "top_p", "top_p")      # t o p _ k ; t o p _ p
    assert SamplerParams.from_server({"samplers": ["Top-K", "nope", "min_p", "adaptive-p"]}).samplers == (
        "top_k", "min_p", "adaptive_p")
    assert SamplerParams.from_server({"samplers": 5}).samplers == tuple(DEFAULT_SAMPLERS.split(";"))
    assert SamplerParams.from_server({"samplers": []}).samplers == ()
    # infill, as llama-server's `samplers` reaches it (code 'i', name "infill")
    assert SamplerParams.from_server({"samplers": "ki"}).samplers == ("top_k", "infill")
    assert SamplerParams.from_server({"samplers": ["top_k", "Infill"]}).samplers == ("top_k", "infill")


def test_the_python_api_stays_strict():
    for field, value in [("temperature", -0.5), ("top_k", -3), ("top_p", 1.5), ("mirostat", 3),
                         ("adaptive_target", 5.0), ("repeat_penalty", -1.5), ("samplers", "nope")]:
        with pytest.raises(ValueError, match=field):
            SamplerParams(**{field: value})


def test_request_layer_uses_llama_servers_values():
    params, n_predict, stop = sampler_params_from_request(
        {"temperature": -1, "top_p": 7, "mirostat": 9, "repeat_last_n": INT32_MAX, "repeat_penalty": 1.1,
         "adaptive_target": 0.5, "adaptive_decay": 0.5, "samplers": ["top_k", "adaptive_p"], "seed": -1})
    assert (params.temperature, params.top_p, params.mirostat) == (0.0, 1.0, 2)
    assert params.repeat_last_n == INT32_MAX and params.seed == 0xFFFFFFFF
    assert params.samplers == ("top_k", "adaptive_p") and params.adaptive_decay == np.float32(0.5)
    with pytest.raises(RequestError, match="repeat_last_n"):
        sampler_params_from_request({"repeat_last_n": -1})


def test_ollama_repeat_last_n_minus_one_is_the_context():
    params, _, _ = sampler_params_from_request({"options": {"repeat_last_n": -1}}, n_ctx=4096, ollama=True)
    assert params.repeat_last_n == 4096
    params, _, _ = sampler_params_from_request({"options": {"repeat_last_n": -1}}, ollama=True)
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
