"""End-to-end oracle: bankml's answers equal the pinned llama-server's, request by request.

``tests/data/server_recordings.json`` holds requests answered by llama-server built from llama-cpp-python
0.3.36's vendored llama.cpp (``tests/oracle/build_server.py`` builds it against the very libllama/libggml
llama-cpp-python installs; ``tests/oracle/record_server.py`` records), with SmolLM2-135M-Instruct, one slot,
2 threads, ``-c 2048 -b 2048 -ub 512 -fa off`` and ``cache_prompt: false``: JSON mode, response-format and
top-level schemas, GBNF grammars, greedy and seeded sampling with several sampler settings, a streamed
answer, answers cut by ``max_tokens`` and by a stop string, raw-prompt completions.

Here bankml.serve.runtime serves each recorded request on a context set up as that slot (same thread counts,
batch sizes, context size, flash attention off; every prompt evaluated from an empty cache) and must give
the same prompt text and prompt token ids, the same grammar text, the same generated token ids, raw text,
content, finish reason and stopping word — and, for the streamed one, the same content deltas.

The logits depend on the CPU kernels ggml runs, which differ between machines of this project's kind: the
instruction sets the native llama-cpp-python build was compiled for (AVX2 on AMD EPYC Milan, AVX-512 on others)
and whether ggml's AMX kernels run (``bankml.serve.cpu``). The recording file names its machine's kernels
(``kernels``: ``tests.oracle.record_server.kernels_fingerprint()``); on a machine with the same fingerprint the
recordings are the reference, and two requests are answered live as well, which must give them. Elsewhere every
request is answered live by the pinned llama-server, built and run on this machine (``build_server.py``), and
bankml is compared with that (``BANKML_E2E_LIVE=1`` forces this everywhere). A machine's kernels can have a
recording of their own beside the shipped one (``server_recordings.<kernels key>.json``, written by
``record_server --machine``), which is read where its fingerprint is this machine's.
"""

import json
import os
import pathlib

import pytest

from ..oracle.record_server import kernels_fingerprint, machine_recording
from ..oracle_support import ORACLE_STATS, recorded_job, recorded_model, sse_chunks

# the recording of this machine's kernels where there is one (the recorder's --machine), else the shipped one
DATA = machine_recording(pathlib.Path(__file__).resolve().parent.parent / "data" / "server_recordings.json")
RECORDING = json.loads(DATA.read_text(encoding="utf-8"))
RECORDS = RECORDING["recordings"]
# the recordings hold where ggml runs the kernels they were made with; elsewhere llama-server answers live
RECORDINGS_HOLD = RECORDING.get("kernels") == kernels_fingerprint() and os.environ.get("BANKML_E2E_LIVE", "") in (
    "",
    "0",
)
LIVE_NAMES = ("json_object/book/seed42", "stream/json_object/seed8")


def test_recordings_cover_the_issue():
    names = [r["name"] for r in RECORDS]
    assert len(names) >= 20 and len(set(names)) == len(names)
    requests = [r["request"] for r in RECORDS]
    assert any((q.get("response_format") or {}).get("type") == "json_object" for q in requests)
    assert sum((q.get("response_format") or {}).get("type") == "json_schema" for q in requests) >= 5
    assert any(q.get("grammar") for q in requests)
    assert any(q.get("stream") for q in requests)
    assert any(q.get("temperature") == 0 for q in requests)
    assert any(q.get("seed") is not None and q.get("temperature", 0.8) > 0 for q in requests)
    assert any(r["finish_reason"] == "length" for r in RECORDS)
    assert any(r["stopping_word"] for r in RECORDS)


@pytest.fixture(scope="module")
def model():
    m = recorded_model(RECORDING)
    yield m
    m.close()


def _deltas(chunks):
    out = []
    for chunk in chunks:
        if not isinstance(chunk, dict):  # the closing "[DONE]"
            continue
        for choice in chunk.get("choices", []):
            text = (choice.get("delta") or {}).get("content")
            if text:
                out.append(text)
    return out


@pytest.fixture(scope="module")
def live_recordings():
    """LIVE_NAMES (every request where the recordings do not hold) answered by llama-server on this machine."""
    from ..oracle.record_server import REQUESTS, record_live

    names = list(LIVE_NAMES) if RECORDINGS_HOLD else [r[0] for r in REQUESTS]
    return {r["name"]: r for r in record_live(names)}


@pytest.mark.parametrize("name", [r["name"] for r in RECORDS])
def test_same_answer_as_llama_server(model, name, request):
    record = next(r for r in RECORDS if r["name"] == name)
    if not RECORDINGS_HOLD:  # the file's logits are other kernels': the server running here is the reference
        record = request.getfixturevalue("live_recordings")[name]
    _check_same_answer(model, record)


@pytest.mark.parametrize("name", LIVE_NAMES)
def test_live_llama_server_on_this_machine(model, live_recordings, name):
    live = live_recordings[name]
    _check_same_answer(model, live)
    ORACLE_STATS["llama-server requests answered live on this machine, identical"] += 1
    if RECORDINGS_HOLD:  # the recordings hold here: the server running here gives them too
        recorded = next(r for r in RECORDS if r["name"] == name)
        for key in ("prompt", "prompt_token_ids", "token_ids", "raw_text", "content", "finish_reason", "grammar"):
            assert live[key] == recorded[key], key


def _check_same_answer(model, record):
    job = recorded_job(model, record)
    assert job.prompt == record["prompt"]
    assert job.prompt_tokens == record["prompt_token_ids"]
    assert job.grammar_text == (record["grammar"] or None)
    events = list(job.stream())
    result = job.result
    ORACLE_STATS["llama-server requests answered by bankml with the prompt and grammar identical"] += 1
    assert result.tokens == record["token_ids"]
    assert result.text == record["raw_text"]
    assert result.finish_reason == record["finish_reason"]
    assert result.stopping_word == record["stopping_word"]
    if record["endpoint"] in ("/v1/chat/completions", "/chat/completions"):
        assert result.content == record["content"]
        if record["request"].get("stream"):
            assert [e.content for e in events if e.content] == _deltas(record["response"])
        else:
            assert result.message == record["response"]["choices"][0]["message"]
    else:
        assert result.content == record["content"]
    ORACLE_STATS["llama-server requests identical (prompt, grammar, token ids, text, content, finish)"] += 1
    ORACLE_STATS["llama-server generated tokens identical"] += len(record["token_ids"])


HTTP_RECORDS = [
    r
    for r in RECORDS
    if r["endpoint"] in ("/v1/chat/completions", "/v1/completions")
    and r["name"]
    in (
        "json_object/cat/greedy",
        "json_schema/shopping-defs/greedy",
        "json_schema/phone/repeat1.1/seed5",
        "grammar/item-list/seed17",
        "plain/count/stop",
        "stream/json_object/seed8",
        "completions/grammar/yes-no/seed4",
    )
]


@pytest.fixture(scope="module")
def client(model):
    from starlette.testclient import TestClient

    from bankml.serve.app import create_app

    with TestClient(create_app(model, "SmolLM2-135M-Instruct")) as c:
        yield c


@pytest.mark.parametrize("record", HTTP_RECORDS, ids=[r["name"] for r in HTTP_RECORDS])
def test_same_http_answer_as_llama_server(client, record, request):
    """The same requests through bankml serve's endpoints: the OpenAI fields llama-server answered with."""
    assert len(HTTP_RECORDS) == 7
    if not RECORDINGS_HOLD:
        record = request.getfixturevalue("live_recordings")[record["name"]]
    req = {k: v for k, v in record["request"].items() if k not in ("verbose", "cache_prompt")}
    response = client.post(record["endpoint"], json=req)
    assert response.status_code == 200, response.text
    want = record["response"]
    if req.get("stream"):
        got = sse_chunks(response.text)
        assert got[-1] == "[DONE]" and want[-1] == "[DONE]"
        assert _deltas(got) == _deltas(want)
        finals = [c["choices"][0]["finish_reason"] for c in got[:-1] if c.get("choices")]
        assert finals[-1] == record["finish_reason"]
        usage = [c["usage"] for c in got[:-1] if c.get("usage")]
        assert usage[-1]["completion_tokens"] == want_usage(want)["completion_tokens"]
        ORACLE_STATS["llama-server HTTP answers identical (bankml serve)"] += 1
        return
    body = response.json()
    assert body["object"] == want["object"]
    assert body["tokens"] == record["token_ids"]
    for mine, theirs in zip(body["choices"], want["choices"], strict=True):
        assert mine["finish_reason"] == theirs["finish_reason"]
        if "message" in theirs:
            assert mine["message"] == theirs["message"]
        else:
            assert mine["text"] == theirs["text"]
    for key in ("completion_tokens", "prompt_tokens", "total_tokens"):
        assert body["usage"][key] == want["usage"][key]
    ORACLE_STATS["llama-server HTTP answers identical (bankml serve)"] += 1


def want_usage(chunks):
    return [c["usage"] for c in chunks if isinstance(c, dict) and c.get("usage")][-1]
