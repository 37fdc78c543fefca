"""The prompt forms of llama-server's completion endpoints (tokenize_input_prompts): a string, token ids, token
ids mixed with strings, ``{"prompt_string": ...}``, and an array of prompts (one completion each)."""

import pytest

from bankml.serve.openai import read_prompts
from bankml.serve.request import RequestError
from tests.serve.serve_support import smollm2_client


@pytest.mark.parametrize(
    "prompt, expected",
    [
        ("Hi", ["Hi"]),
        (["Hi"], ["Hi"]),
        ([1, 2, 3], [(1, 2, 3)]),
        ([1, "a", 2], [(1, "a", 2)]),  # an array holding a number is one prompt
        (["a", "b"], ["a", "b"]),  # an array of strings is several
        ([[1, 2], "a", [3, "b"], {"prompt_string": "c"}], [(1, 2), "a", (3, "b"), "c"]),
        ({"prompt_string": [5, "x"]}, [(5, "x")]),
    ],
)
def test_read_prompts(prompt, expected):
    assert read_prompts(prompt) == expected


@pytest.mark.parametrize(
    "prompt, message",
    [
        (None, '"prompt" is required'),
        ([], '"prompt" must not be empty'),
        (12, '"prompt" elements must be a string'),
        ([1.5, 2], '"prompt" elements must be a string'),
        ([[]], '"prompt" elements must be a string'),
        ({"text": "x"}, '"prompt" elements must be a string'),
        ({"prompt_string": "x", "multimodal_data": ["AA"]}, "model does not support multimodal requests"),
    ],
)
def test_bad_prompts(prompt, message):
    with pytest.raises(RequestError, match=message):
        read_prompts(prompt)


@pytest.fixture(scope="module")
def client():
    with smollm2_client(n_parallel=2) as c:
        yield c


TEXT = "I believe the meaning of life is"


def test_token_and_mixed_prompts_answer_as_the_string(client):
    tokens = client.post("/tokenize", json={"content": TEXT, "add_special": True}).json()["tokens"]
    base = {"temperature": 0.0, "n_predict": 4}
    text = client.post("/completion", json=dict(base, prompt=TEXT)).json()
    by_ids = client.post("/completion", json=dict(base, prompt=tokens)).json()
    assert by_ids["content"] == text["content"] and by_ids["tokens_evaluated"] == text["tokens_evaluated"]
    both = client.post("/completion", json=dict(base, prompt=[tokens, {"prompt_string": TEXT}])).json()
    assert [r["content"] for r in both] == [text["content"]] * 2 and [r["index"] for r in both] == [0, 1]
    # a string after the first item is tokenized without the BOS
    plain = client.post("/tokenize", json={"content": TEXT, "add_special": False}).json()["tokens"]
    mixed = client.post("/completion", json=dict(base, prompt=[tokens[0], TEXT, 7], n_predict=1)).json()
    assert mixed["tokens_evaluated"] == 2 + len(plain)
    choices = client.post("/v1/completions", json={"prompt": ["Hi", "Ho"], "max_tokens": 1}).json()["choices"]
    assert [c["index"] for c in choices] == [0, 1]


def test_an_id_outside_the_vocabulary_is_refused(client):
    r = client.post("/completion", json={"prompt": [1, 10**9], "n_predict": 1})
    assert r.status_code == 400 and r.json()["error"]["message"] == "Prompt contains invalid tokens"
