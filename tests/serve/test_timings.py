"""The ``timings`` object of a chat answer and of its stream's last chunk: llama-server's fields
(``server_slot_stats::to_json``: ``cache_n``, ``prompt_n``, ``prompt_ms``, ``prompt_per_token_ms``,
``prompt_per_second``, ``predicted_n``, ``predicted_ms``, ``predicted_per_token_ms``, ``predicted_per_second``),
then bankml's ``sampling_us_per_token`` and ``redraws``. llama-server's test suite reads
``prompt_per_second`` from the stream's usage chunk."""

import json

import pytest

from tests.serve.serve_support import smollm2_client

LLAMA_SERVER_TIMINGS = [
    "cache_n",
    "prompt_n",
    "prompt_ms",
    "prompt_per_token_ms",
    "prompt_per_second",
    "predicted_n",
    "predicted_ms",
    "predicted_per_token_ms",
    "predicted_per_second",
]


@pytest.fixture(scope="module")
def client():
    with smollm2_client("m", n_ctx=256, n_threads=1, n_parallel=1) as c:
        yield c


BODY = {"messages": [{"role": "user", "content": "test"}], "max_tokens": 4, "temperature": 0}


def _check(timings, n_tokens):
    assert list(timings) == LLAMA_SERVER_TIMINGS + ["sampling_us_per_token", "redraws"]
    assert timings["predicted_n"] == n_tokens and timings["cache_n"] == 0 and timings["prompt_n"] > 5
    assert timings["prompt_per_second"] > 0 and timings["prompt_per_token_ms"] > 0


def test_a_chat_answer_s_timings(client):
    answer = client.post("/v1/chat/completions", json=BODY).json()
    _check(answer["timings"], answer["usage"]["completion_tokens"])


def test_the_usage_chunk_s_timings(client):
    body = dict(BODY, stream=True, stream_options={"include_usage": True})
    with client.stream("POST", "/v1/chat/completions", json=body) as response:
        chunks = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: {")]
    (last,) = [c for c in chunks if not c["choices"]]
    _check(last["timings"], last["usage"]["completion_tokens"])
