"""bankml.errors.json_type_name: the one JSON type name the request errors print (nlohmann::json's type_name(),
as in llama-server's ``type must be number, but is string``), and JSON schema's names for the chat parser."""

import pytest

from bankml.errors import json_type_name
from bankml.sampling import logprobs
from bankml.sampling.params import SamplerParams
from bankml.serve import openai as serve_openai

JSON_VALUES = [
    (None, "null"),
    (True, "boolean"),
    (False, "boolean"),
    (0, "number"),
    (-3, "number"),
    (1.5, "number"),
    (1e300, "number"),
    ("", "string"),
    ("x", "string"),
    ([], "array"),
    ([1, "a"], "array"),
    ({}, "object"),
    ({"a": 1}, "object"),
]


@pytest.mark.parametrize("value, name", JSON_VALUES)
def test_nlohmann_names_of_json_values(value, name):
    assert json_type_name(value) == name


@pytest.mark.parametrize(
    "value, name",
    [
        (3, "integer"),
        (True, "boolean"),
        (3.0, "number"),
        (None, "null"),
        ("3", "string"),
        ([3], "array"),
        ({}, "object"),
    ],
)
def test_json_schema_names_tell_integers(value, name):
    assert json_type_name(value, integer=True) == name


def test_python_values_json_has_no_type_for():
    import fractions

    import numpy as np

    assert json_type_name((1, 2)) == "array"
    assert json_type_name(np.float32(1)) == "number" and json_type_name(fractions.Fraction(1, 3)) == "number"
    assert json_type_name(b"x") == "bytes" and json_type_name({1}) == "set"


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda: logprobs.read_request({"logprobs": "5"}, "/v1/completions"),
            "Field 'logprobs': [json.exception.type_error.302] type must be number, but is string",
        ),
        (
            lambda: logprobs.read_request({"post_sampling_probs": []}, "/v1/completions"),
            "Field 'post_sampling_probs': [json.exception.type_error.302] type must be boolean, but is array",
        ),
        (
            lambda: serve_openai.reasoning_fields({"thinking_budget_tokens": "8"}),
            "Field 'thinking_budget_tokens': [json.exception.type_error.302] type must be number, but is string",
        ),
        (lambda: SamplerParams.from_server({"seed": "1"}), "Field 'seed': type must be number, but is string"),
        (lambda: SamplerParams.from_server({"top_k": {}}), "Field 'top_k': type must be number, but is object"),
        (lambda: SamplerParams.from_server({"top_k": True}), "Field 'top_k': type must be number, but is boolean"),
    ],
)
def test_the_messages_print_it(call, message):
    with pytest.raises(ValueError) as e:
        call()
    assert message in str(e.value)
