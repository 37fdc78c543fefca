"""The routes of issue 46 beside the wire formats: llama-server's ``/v1/chat/completions/control`` (its answers for a
missing id, an unknown action, no running completion, and a running one without ``reasoning_control``), Ollama's
``/api/show``, ``/api/ps`` and ``/api/embed`` (the model's details; the loaded model; Ollama's 501 for a model it
cannot embed with), and an empty ``messages`` list answered as llama-server answers it (the generation prompt
alone). With SmolLM2."""

import json
import threading

import pytest

from .serve_support import smollm2_client


@pytest.fixture(scope="module")
def client():
    with smollm2_client("smol", n_ctx=1024, n_threads=1, n_parallel=2) as c:
        yield c


@pytest.mark.parametrize(
    "body, status, answer",
    [
        ({}, 400, "missing completion id"),
        ({"id": 3, "action": "reasoning_end"}, 400, "missing completion id"),
        ({"id": "chatcmpl-x"}, 400, "unknown control action"),
        ({"id": "chatcmpl-x", "action": "stop"}, 400, "unknown control action"),
        ({"id": "chatcmpl-x", "action": "reasoning_end"}, 200, "no active completion for this id"),
    ],
)
def test_control_answers_as_llama_server(client, body, status, answer):
    r = client.post("/v1/chat/completions/control", json=body)
    assert r.status_code == status
    got = r.json()
    assert (got["error"]["message"] if status == 400 else got) == (
        answer if status == 400 else {"success": False, "message": answer}
    )


def test_control_of_a_running_completion(client):
    body = {"messages": [{"role": "user", "content": "Hi"}], "grammar": 'root ::= "a"{300}', "stream": True}
    answers, started, release = [], threading.Event(), threading.Event()

    def stream():
        with client.stream("POST", "/v1/chat/completions", json=body) as r:
            for line in r.iter_lines():
                if line.startswith("data: {") and not started.is_set():
                    answers.append(json.loads(line[6:])["id"])
                    started.set()
                    release.wait(60)

    worker = threading.Thread(target=stream)
    worker.start()
    try:
        assert started.wait(120)
        r = client.post("/v1/chat/completions/control", json={"id": answers[0], "action": "reasoning_end"})
        # bankml refuses reasoning_control, so no completion has it armed: llama-server's answer for such a one
        assert r.json() == {"success": False, "message": "reasoning control not enabled for this completion"}
    finally:
        release.set()
        worker.join(120)


def test_ollama_show(client):
    r = client.post("/api/show", json={"model": "smol"})
    assert r.status_code == 200
    body = r.json()
    assert body["details"] == {
        "parent_model": "",
        "format": "gguf",
        "family": "llama",
        "families": ["llama"],
        "parameter_size": "134.52M",
        "quantization_level": "Q4_1",
    }
    info = body["model_info"]
    assert info["general.architecture"] == "llama" and info["llama.context_length"] == 8192
    assert info["general.parameter_count"] == 134515008
    assert not any(key.startswith("tokenizer.ggml.") for key in info)
    assert "<|im_start|>" in body["template"] and body["capabilities"] == ["completion"]  # no tools, no embeddings
    assert client.post("/api/show", json={"name": "smol"}).status_code == 200  # Ollama's older field
    r = client.post("/api/show", json={})
    assert (r.status_code, r.json()) == (400, {"error": "model is required"})


def test_ollama_ps_and_embed(client):
    (model,) = client.get("/api/ps").json()["models"]
    assert (model["name"], model["context_length"], model["details"]["format"]) == ("smol", 1024, "gguf")
    for path in ("/api/embed", "/api/embeddings"):
        r = client.post(path, json={"model": "smol", "input": "Hi"})
        assert (r.status_code, r.json()) == (501, {"error": "this model does not support embeddings"})


@pytest.mark.parametrize(
    "path, body",
    [
        ("/v1/chat/completions", {"messages": [], "max_tokens": 2}),
        ("/v1/messages", {"messages": [], "max_tokens": 2}),
        ("/v1/responses", {"input": [], "max_output_tokens": 2}),
    ],
)
def test_empty_messages_answered(client, path, body):
    assert client.post(path, json=body).status_code == 200
    assert client.post("/apply-template", json={"messages": []}).json() == {"prompt": "<|im_start|>assistant\n"}
