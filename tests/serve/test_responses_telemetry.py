"""A streamed Responses answer with llama-server's telemetry: ``return_progress`` (``response.in_progress``
events carrying ``prompt_progress``) and ``timings_per_token`` (``timings`` on each partial result's last event),
as ``to_json_oaicompat_resp`` writes them."""

import json

import pytest

from bankml.serve.responses import StreamWriter
from tests.serve.serve_support import smollm2_client


def _events(response):
    return [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]


def test_writer_progress_then_tokens():
    writer = StreamWriter("resp_1", "m")
    first = writer.partial(0, [], progress={"total": 5, "cache": 0, "processed": 0, "time_ms": 0})
    assert [k for k, _ in first] == ["response.created", "response.in_progress"]
    assert "prompt_progress" in first[1][1] and "prompt_progress" not in first[0][1]
    again = writer.partial(0, [], progress={"total": 5, "cache": 0, "processed": 5, "time_ms": 1}, timings={"x": 1})
    assert [k for k, _ in again] == ["response.in_progress"] and again[0][1]["timings"] == {"x": 1}
    token = writer.partial(1, [("", "Hi")], timings={"predicted_n": 1})
    assert [k for k, _ in token][-1] == "response.output_text.delta"
    assert token[-1][1]["timings"] == {"predicted_n": 1} and "prompt_progress" not in token[-1][1]


def test_writer_without_telemetry_is_unchanged():
    events = StreamWriter("resp_1", "m").partial(1, [("", "Hi")])
    assert all("timings" not in d and "prompt_progress" not in d for _, d in events)


@pytest.fixture(scope="module")
def client():
    with smollm2_client() as c:
        yield c


def test_streamed_response_with_telemetry(client):
    body = {"input": "This is a test", "max_output_tokens": 3, "stream": True}
    events = _events(client.post("/v1/responses", json=dict(body, timings_per_token=True, return_progress=True)))
    progress = [e for e in events if "prompt_progress" in e]
    assert progress and all(e["type"] == "response.in_progress" for e in progress)
    assert progress[-1]["prompt_progress"]["processed"] == progress[-1]["prompt_progress"]["total"] > 0
    deltas = [e for e in events if e["type"] == "response.output_text.delta"]
    assert deltas and all("predicted_per_second" in e["timings"] for e in deltas)
    completed = events[-1]
    assert completed["type"] == "response.completed" and "timings" in completed and "usage" in completed["response"]
    plain = _events(client.post("/v1/responses", json=body))
    assert not any("prompt_progress" in e for e in plain)
    assert not any("timings" in e for e in plain if e["type"] == "response.output_text.delta")
