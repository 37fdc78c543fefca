"""llama-server's ``ignore_eos``: -inf logit biases for every end-of-generation token (its ``logit_bias_eog``),
after the request's own, reported in ``generation_settings`` (a -inf bias written as null)."""

import pytest

from bankml.sampling.params import SamplerParams
from bankml.serve.request import RequestError, ignore_eos
from tests.serve.serve_support import smollm2_client


class _Vocab:
    eog_tokens = (2, 7)


def test_eog_biases_follow_the_request_ones():
    params = ignore_eos(SamplerParams(logit_bias=[(5, 1.5)]), _Vocab())
    assert params.logit_bias == ((5, 1.5), (2, float("-inf")), (7, float("-inf")))


def test_no_eog_tokens_is_an_error():
    with pytest.raises(RequestError, match="end-of-generation"):
        ignore_eos(SamplerParams(), object())


@pytest.fixture(scope="module")
def client():
    with smollm2_client() as c:
        yield c


def test_ignore_eos_in_generation_settings(client):
    body = {"prompt": "Once upon a time", "n_predict": 4, "temperature": 0.0}
    r = client.post("/completion", json=dict(body, ignore_eos=True)).json()
    settings = r["generation_settings"]
    assert settings["ignore_eos"] is True and settings["logit_bias"]
    assert all(entry["bias"] is None for entry in settings["logit_bias"])
    eog = [entry["token"] for entry in settings["logit_bias"]]
    assert 2 in eog and eog == sorted(eog)  # SmolLM2's <|im_end|> (2) ends a generation
    assert r["tokens_predicted"] == 4
    plain = client.post("/completion", json=dict(body, ignore_eos=False)).json()["generation_settings"]
    assert plain["logit_bias"] == [] and plain["ignore_eos"] is False
    chat = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "ignore_eos": True}
    assert client.post("/v1/chat/completions", json=chat).status_code == 200


def test_a_false_bias_is_null_and_a_bad_ignore_eos_is_refused(client):
    r = client.post("/completion", json={"prompt": "Hi", "n_predict": 1, "logit_bias": [[5, False], [6, -1]]})
    assert r.status_code == 200
    assert r.json()["generation_settings"]["logit_bias"] == [{"bias": None, "token": 5}, {"bias": -1.0, "token": 6}]
    r = client.post("/completion", json={"prompt": "Hi", "n_predict": 1, "ignore_eos": "yes"})
    assert r.status_code == 400 and "ignore_eos" in r.json()["error"]["message"]
