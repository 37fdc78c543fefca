"""End-to-end oracle with other chat templates (issue 12, deliverable 5): bankml's answers equal the pinned
llama-server's when SmolLM2-135M-Instruct runs with a template of the sdist's ``models/templates/`` given by
``--chat-template-file``: Qwen3.5-4B (Qwen3-Coder's handler, thinking), Qwen3-0.6B (the analysed path, thinking)
and Gemma 2 (not ChatML-like) — JSON mode and schemas, streamed and not, thinking on through
``chat_template_kwargs``, ``thinking_budget_tokens`` and ``reasoning_format: none``.

``tests/data/server_recordings_templates.json`` holds the recordings (``tests/oracle/record_server_templates.py``);
the server ran with ``--reasoning off`` (so ``enable_thinking`` is false unless a request's kwargs turn it on), and
bankml's model is set up the same way (``Model(reasoning="off", chat_template_file=...)``). Each request is
answered by ``Model.chat`` and by ``bankml serve``'s ``/v1/chat/completions`` over HTTP, and must give the same
prompt, prompt token ids, grammar, generated token ids, raw text, content, reasoning content, finish reason and,
streamed, the same deltas (content and ``reasoning_content``, chunk by chunk).

As in ``tests/serve/test_e2e_oracle.py``, the recordings hold where this machine's CPU kernels are the recording
machine's (``kernels``); elsewhere (or with ``BANKML_E2E_LIVE=1``) every request is answered live by the pinned
llama-server built and run here, and bankml is compared with that.
"""

import json
import os
import pathlib

import pytest

from bankml.chat.constraint import from_openai_text
from bankml.serve.openai import chat_inputs, reasoning_fields, sampler_fields
from bankml.serve.request import Request

from ..oracle.record_server import kernels_fingerprint, machine_recording
from ..oracle.record_server_templates import REQUESTS, TEMPLATE_REQUESTS, template_text
from ..oracle_support import ORACLE_STATS, RECORDED_THREADS, recorded_cache_prompt, recorded_model, sse_chunks

# the recording of this machine's kernels where there is one (the recorder's --machine), else the shipped one
DATA = machine_recording(pathlib.Path(__file__).resolve().parent.parent / "data" / "server_recordings_templates.json")
RECORDING = json.loads(DATA.read_text(encoding="utf-8"))
RECORDS = RECORDING["recordings"]
RECORDINGS_HOLD = RECORDING.get("kernels") == kernels_fingerprint() and os.environ.get("BANKML_E2E_LIVE", "") in (
    "",
    "0",
)
NAMES = [r["name"] for r in RECORDS]


def test_recordings_cover_the_issue():
    assert NAMES == [r[0] for r in REQUESTS]
    templates = {r["template"] for r in RECORDS}
    assert templates == set(TEMPLATE_REQUESTS) and len(templates) >= 3
    for tmpl in templates:
        mine = [r for r in RECORDS if r["template"] == tmpl]
        formats = {(r["request"].get("response_format") or {}).get("type") for r in mine}
        assert {"json_object", "json_schema"} <= formats, tmpl
        assert any(r["request"].get("stream") for r in mine) and any(not r["request"].get("stream") for r in mine)
    thinking = [r for r in RECORDS if r["reasoning_content"]]
    assert len(thinking) >= 4
    assert any(r["request"].get("stream") for r in thinking)
    assert any(r["request"].get("thinking_budget_tokens") for r in thinking)
    assert any(r["request"].get("reasoning_format") == "none" for r in RECORDS)
    assert RECORDING["templates"]["Qwen3.5-4B.jinja"] == template_text("Qwen3.5-4B.jinja")[0]


@pytest.fixture(scope="module")
def live_recordings():
    from ..oracle.record_server_templates import record_live

    return {r["name"]: r for r in record_live(NAMES)}


def _record(name, request):
    record = next(r for r in RECORDS if r["name"] == name)
    if not RECORDINGS_HOLD:
        record = request.getfixturevalue("live_recordings")[name]
    return record


_MODELS = {}


@pytest.fixture(scope="module")
def models():
    yield _MODELS
    for m in _MODELS.values():
        m.close()
    _MODELS.clear()


def _model(models, tmpl):
    if tmpl not in models:
        for other in list(models):  # one model at a time
            models.pop(other).close()
        models[tmpl] = recorded_model(RECORDING, reasoning="off", chat_template_file=template_text(tmpl)[1])
    return models[tmpl]


def _deltas(chunks):
    """The message deltas of a stream (the role chunk, the finish chunk and the usage chunk aside)."""
    out = []
    for chunk in chunks:
        if not isinstance(chunk, dict):
            continue
        for choice in chunk.get("choices", []):
            delta = {k: v for k, v in (choice.get("delta") or {}).items() if k != "role"}
            if delta and any(v is not None for v in delta.values()):
                out.append(delta)
    return out


def _message(record):
    resp = record["twin_response"] if record["request"].get("stream") else record["response"]
    return resp["choices"][0]["message"]


@pytest.mark.parametrize("name", NAMES)
def test_same_answer_as_llama_server(models, name, request):
    record = _record(name, request)
    model = _model(models, record["template"])
    req = record["request"]
    params, n_predict, stop = sampler_fields(req)
    constraint = from_openai_text(req, json.dumps(req))
    job = model.chat(Request.for_chat(chat_inputs(req), constraint, params, n_predict, stop, **reasoning_fields(req)))
    assert job.prompt == record["prompt"]
    assert job.prompt_tokens == record["prompt_token_ids"]
    assert job.grammar_text == (record["grammar"] or None)
    events = list(job.stream())
    result = job.result
    assert result.tokens == record["token_ids"]
    assert result.text == record["raw_text"]
    assert result.finish_reason == record["finish_reason"]
    assert result.stopping_word == record["stopping_word"]
    assert result.content == record["content"]
    assert result.message == _message(record)
    assert result.message.get("reasoning_content", "") == record["reasoning_content"]
    if req.get("stream"):
        mine = [{"reasoning_content": r} if r else {"content": c} for e in events for r, c in e.diffs]
        assert mine == _deltas(record["response"])
    ORACLE_STATS["llama-server requests identical with other templates (prompt, grammar, tokens, message)"] += 1
    ORACLE_STATS["llama-server generated tokens identical with other templates"] += len(record["token_ids"])


@pytest.mark.parametrize("name", NAMES)
def test_same_http_answer_as_llama_server(models, name, request):
    from starlette.testclient import TestClient

    from bankml.serve.app import create_app

    record = _record(name, request)
    model = _model(models, record["template"])
    req = {k: v for k, v in record["request"].items() if k not in ("verbose", "cache_prompt")}
    with TestClient(create_app(model, "SmolLM2-135M-Instruct")) as client:
        response = client.post("/v1/chat/completions", json=req)
    assert response.status_code == 200, response.text
    want = record["response"]
    if req.get("stream"):
        got = sse_chunks(response.text)
        assert got[-1] == "[DONE]"
        assert got[0]["choices"][0]["delta"] == want[0]["choices"][0]["delta"]
        assert _deltas(got) == _deltas(want)
        finals = [c["choices"][0]["finish_reason"] for c in got[:-1] if c.get("choices")]
        assert finals[-1] == record["finish_reason"]
        usage = [c["usage"] for c in got[:-1] if c.get("usage")][-1]
        want_usage = [c["usage"] for c in want if isinstance(c, dict) and c.get("usage")]
        assert usage["completion_tokens"] == (
            want_usage[-1]["completion_tokens"] if want_usage else len(record["token_ids"])
        )
    else:
        body = response.json()
        assert body["tokens"] == record["token_ids"]
        assert body["choices"][0]["finish_reason"] == want["choices"][0]["finish_reason"]
        assert body["choices"][0]["message"] == want["choices"][0]["message"]
        for key in ("completion_tokens", "prompt_tokens", "total_tokens"):
            assert body["usage"][key] == want["usage"][key]
    ORACLE_STATS["llama-server HTTP answers identical with other templates (bankml serve)"] += 1


def test_bankml_serve_process_with_chat_template_file(request):
    """``bankml serve --chat-template-file FILE --reasoning off`` (a real process, llama-server's flags): a
    recorded Qwen3.5 request with thinking on and a reasoning budget gets llama-server's answer over HTTP (the
    answer of the llama-server run here where the recordings are another machine's kernels)."""
    import socket
    import subprocess
    import sys
    import time

    import httpx

    record = _record(QWEN35_BUDGET, request)
    s = RECORDING["llama_cpp_python_settings"]
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    bad = subprocess.run(
        [sys.executable, "-m", "bankml", "serve", "--chat-template-file", "/nonexistent.jinja"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "/nonexistent.jinja" in bad.stderr
    cmd = [
        sys.executable,
        "-m",
        "bankml",
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--parallel",
        "1",
        "-t",
        str(RECORDED_THREADS),
        "-tb",
        str(RECORDED_THREADS),
        "-c",
        str(s["n_ctx"]),
        "-b",
        str(s["n_batch"]),
        "-ub",
        str(s["n_ubatch"]),
        "--reasoning",
        "off",
        "-fa",
        "on" if s.get("flash_attn") else "off",  # the recordings' (serve's default is llama-server's auto)
        "--no-cache-prompt" if not recorded_cache_prompt(RECORDING) else "--cache-prompt",  # the recordings'
        "--chat-template-file",
        str(template_text(record["template"])[1]),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 180
        while True:
            assert proc.poll() is None, proc.stdout.read()
            try:
                if httpx.get(base + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline
            time.sleep(0.3)
        req = {k: v for k, v in record["request"].items() if k not in ("verbose", "cache_prompt")}
        body = httpx.post(base + "/v1/chat/completions", json=req, timeout=600).json()
        assert body["tokens"] == record["token_ids"]
        assert body["choices"][0]["message"] == record["response"]["choices"][0]["message"]
        assert body["choices"][0]["message"]["reasoning_content"]
    finally:
        proc.terminate()
        proc.wait(30)


QWEN35_BUDGET = "Qwen3.5-4B.jinja/think/json_object/budget12/greedy"
