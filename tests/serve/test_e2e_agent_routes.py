"""End-to-end agent routes (issue 46): the pinned llama-server's answers on ``/v1/responses``, ``/v1/messages``,
their token counters, the native ``/completion`` and ``/completions``, ``/infill`` and the chat token counter,
and bankml serve's, compared.

``tests/data/server_agent_recordings.json`` holds the requests of ``record_agent_routes.CASES`` (plain, sampled
with a seed, a JSON schema, tools auto, required and parallel, a tool's result in the history, a reasoning
template; each unstreamed and streamed) answered by the pinned llama-server with SmolLM2-135M-Instruct, recorded
by ``tests/oracle/record_agent_routes.py``. Each is sent to one in-process bankml serve per template (set up as
the recording servers: one slot, their batch sizes, their template kwargs, their clock), which must answer
identically but for what ``record_agent_routes.normalize`` leaves out (ids, times, timings, the slot, OpenAI's
stream indices). Where this machine's kernels are not the recording's (the logits differ in their last bits), or
with ``BANKML_E2E_LIVE=1``, the pinned llama-server run here answers instead (built when first needed).
"""

import json
import os
import pathlib

import pytest

from ..oracle.record_agent_routes import CASES, normalize, requests, sse_events, template_file
from ..oracle.record_server import kernels_fingerprint
from ..oracle_support import ORACLE_STATS, fix_clock, recorded_model

PATH = pathlib.Path(__file__).resolve().parent.parent / "data" / "server_agent_recordings.json"
RECORDING = json.loads(PATH.read_text(encoding="utf-8"))
RECORDS = {r["name"]: r for r in RECORDING["recordings"]}
NAMES = list(RECORDS)
FORCE_LIVE = os.environ.get("BANKML_E2E_LIVE", "") not in ("", "0")


def test_recordings_are_the_recorders_requests():
    """The file holds exactly the recorder's requests (a case added there is recorded before it is tested), and
    covers the issue: both agent APIs streamed and not, tools required, auto, parallel and a result, a schema,
    reasoning, each counter, the native completion, and a refusal."""
    assert {r[0]: list(r[1:]) for r in requests()} == {
        n: [r["template"], r["path"], r["request"]] for n, r in RECORDS.items()
    }
    paths = {r["path"] for r in RECORDS.values()}
    assert {"/v1/responses", "/v1/messages", "/completion", "/completions", "/infill"} <= paths
    assert {"/v1/responses/input_tokens", "/v1/messages/count_tokens", "/v1/chat/completions/input_tokens"} <= paths
    assert "/v1/chat/completions/control" in paths
    out = {n: r["response"] for n, r in RECORDS.items()}
    calls = [o for o in out["responses/tools/parallel/seed3"]["output"] if o["type"] == "function_call"]
    # two calls, the second cut by max_output_tokens (its arguments as far as they came)
    assert len(calls) == 2 and json.loads(calls[0]["arguments"]) == {"location": "Rome"}
    assert [b["type"] for b in out["messages/tools/any/greedy"]["content"]] == ["tool_use"]
    assert out["responses/think/greedy"]["output"][0]["type"] == "reasoning"
    assert out["messages/think/greedy"]["content"][0]["type"] == "thinking"
    assert json.loads(out["responses/json_schema/greedy"]["output"][0]["content"][0]["text"]).keys() == {"name", "age"}
    assert RECORDS["infill/no_fim_tokens"]["status"] == 501
    assert all(r["status"] == 200 for n, r in RECORDS.items() if not n.startswith("infill"))
    assert len(CASES) >= 20


_LIVE = {}


def reference(name):
    """What bankml must answer: the record where this machine's kernels are the recording's, else the pinned
    llama-server's answer here."""
    if not FORCE_LIVE and RECORDING["kernels"] == kernels_fingerprint():
        return RECORDS[name]
    if not _LIVE:
        from ..oracle.record_agent_routes import record_live

        _LIVE.update({r["name"]: r for r in record_live(set(NAMES))})
    return _LIVE[name]


@pytest.fixture(scope="module")
def clients():
    """One in-process bankml serve per template of the recordings, made when first asked for."""
    from starlette.testclient import TestClient

    from bankml.serve.app import create_app

    made, models = {}, []

    def client(key):
        if key not in made:
            model = recorded_model(
                RECORDING,
                reasoning="off",
                chat_template_file=str(template_file(key)),
                chat_template_kwargs=RECORDING["chat_template_kwargs"],
            )
            models.append(fix_clock(model, RECORDING["clock"]["posix"]))
            made[key] = TestClient(create_app(model, "SmolLM2-135M-Instruct")).__enter__()
        return made[key]

    yield client
    for c in made.values():
        c.__exit__(None, None, None)
    for m in models:
        m.close()


@pytest.mark.parametrize("name", NAMES)
def test_bankml_serve_answers_like_llama_server(clients, name):
    r = reference(name)
    response = clients(r["template"]).post(r["path"], json=r["request"])
    if r["request"].get("stream") and response.status_code == 200:
        got = sse_events(response.text.splitlines())
    else:
        got = response.json()
    assert [response.status_code, normalize(got)] == [r["status"], normalize(r["response"])]
    ORACLE_STATS["llama-server agent-route answers and streams identical (bankml serve)"] += 1
