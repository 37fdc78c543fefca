"""A request's ``verbose``: the answer's ``__verbose``, the generation's native answer (llama-server's
``to_json_non_oaicompat``), with the keys, in order, of the pinned llama-server's recorded ``__verbose``
(tests/data/server_recordings.json; llama-server's test suite reads its ``prompt``)."""

import json
import pathlib

import pytest

from tests.oracle_support import smollm2_path
from tests.serve.serve_support import smollm2_client

RECORDINGS = json.loads((pathlib.Path(__file__).parent.parent / "data" / "server_recordings.json").read_text())
RECORDED = [
    r for r in RECORDINGS["recordings"] if r["endpoint"] == "/v1/chat/completions" and not r["request"].get("stream")
][0]


@pytest.fixture(scope="module")
def client():
    with smollm2_client("m", n_ctx=512, n_threads=1, n_parallel=1) as c:
        yield c


CHAT = {
    "messages": [{"role": "system", "content": "Book"}, {"role": "user", "content": "Best book?"}],
    "max_tokens": 3,
    "temperature": 0,
}


def test_the_chat_answer_s_verbose_is_its_native_answer(client):
    body = client.post("/v1/chat/completions", json=dict(CHAT, verbose=True, return_tokens=True)).json()
    verbose = body["__verbose"]
    assert list(verbose) == list(RECORDED["response"]["__verbose"])
    keys = list(body)
    assert keys.index("__verbose") + 1 == keys.index("timings")  # as llama-server writes them
    assert verbose["prompt"].startswith("<|im_start|>system\nBook<|im_end|>\n") and "Best book?" in verbose["prompt"]
    assert verbose["content"] == body["choices"][0]["message"]["content"]
    assert verbose["tokens"] == body["tokens"] and verbose["tokens_predicted"] == body["usage"]["completion_tokens"]
    assert verbose["model"] == "m" and verbose["stop"] is True


def test_without_verbose_there_is_none(client):
    for extra in ({}, {"verbose": False}):
        assert "__verbose" not in client.post("/v1/chat/completions", json=dict(CHAT, **extra)).json()


def test_the_completion_and_the_streams_carry_it_on_their_final_answer(client):
    body = client.post("/v1/completions", json={"prompt": "Once", "max_tokens": 2, "verbose": True}).json()
    assert body["__verbose"]["prompt"] == "Once" and body["__verbose"]["content"] == body["choices"][0]["text"]
    for path, req in (("/v1/chat/completions", CHAT), ("/v1/completions", {"prompt": "Once", "max_tokens": 2})):
        text = client.post(path, json=dict(req, verbose=True, stream=True)).text
        chunks = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]
        with_verbose = [c for c in chunks if "__verbose" in c]
        final = [c for c in with_verbose if c["choices"] and c["choices"][0]["finish_reason"] is not None]
        assert len(final) == 1 and final[0]["__verbose"]["content"] == ""  # the partial results carried the text
        if path == "/v1/chat/completions":  # a chat stream's partial results carry none, as llama-server's
            assert with_verbose == final
        else:  # a completion's partial results each carry their own (llama-server's partial to_json_oaicompat)
            assert [c["__verbose"]["content"] for c in with_verbose[:-1]] == [
                c["choices"][0]["text"] for c in chunks[:-1]
            ]


def test_a_verbose_that_is_no_boolean_is_refused(client):
    response = client.post("/v1/chat/completions", json=dict(CHAT, verbose="yes"))
    assert response.status_code == 400 and "verbose" in response.json()["error"]["message"]


def test_the_server_s_verbose_is_the_default_a_request_overrides():
    from starlette.testclient import TestClient

    from bankml.cli import build_parser
    from bankml.serve.app import create_app, defaults_from_args
    from bankml.serve.runtime import Model

    assert [build_parser().parse_args(["serve", *a]).verbose for a in ([], ["-v"], ["--log-verbose"])] == [
        False,
        True,
        True,
    ]
    model = Model(smollm2_path(), n_ctx=256, n_threads=1)
    try:
        defaults = defaults_from_args(build_parser().parse_args(["serve", "-v"]))
        with TestClient(create_app(model, "m", defaults=defaults)) as c:
            assert "__verbose" in c.post("/v1/chat/completions", json=CHAT).json()
            assert "__verbose" not in c.post("/v1/chat/completions", json=dict(CHAT, verbose=False)).json()
    finally:
        model.close()
