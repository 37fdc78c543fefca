"""Bad input on the agent routes and llama-server's other new doors (issue 46, deliverable 7): malformed JSON,
wrong types, unknown content blocks, media without a projector, oversize bodies and a tool whose schema strict
mode refuses, on ``/v1/responses``, ``/v1/messages``, their token counters, ``/completion``, ``/completions``,
``/infill``, ``/v1/chat/completions/control``, ``/chat/completions/input_tokens`` and Ollama's ``/api/show``
and ``/api/embed``.

``BAD`` is the table: each body, the status and a piece of the message bankml answers, and the status the pinned
llama-server answered (recorded in tests/data/server_agent_recordings.json by ``record_agent_routes``).
Where they differ the row names why (docs/modules/server.md, "Where llama-server reads a field of the wrong type
as its default..."): a body that is not JSON is a 400 (llama-server: 500); a wrong type or a content block
llama-server reads as its default or drops is a 400 naming the field (llama-server: 200), and so is a fractional
token count (llama-server truncates it); a required field left out is a 400 (llama-server: a 500, its converter's
exception). Ollama's routes are bankml's own (llama-server: 404).

In process (one client): every row's answer, then the same greedy answer as before them (nothing of a refused
request is left applied). As a child process (``bankml serve``): every row answered within a timeout, a body
that stops before its ``Content-Length`` and a chunked oversize body neither hang the server.
"""

import json
import os
import socket

import httpx
import pytest

from ..oracle_support import ORACLE_STATS, recorded_template_file
from .serve_support import running_serve

LIMIT = 64 * 1024  # --max-body-bytes of the servers here
U = {"role": "user", "content": "Hi"}


def _json(value):
    return json.dumps(value).encode()


NOT_JSON = "not JSON: a 400 (llama-server: 500)"
WRONG_TYPE = "a wrong type / unknown block: a 400 naming the field (llama-server: reads a default or drops it)"
FRACTION = "a fractional token count: a 400 naming the field (llama-server: truncates it)"
MISSING = "a required field left out: a 400 (llama-server: 500)"
OLLAMA = "Ollama's route: bankml's own (llama-server: 404)"
STRICT = "strict tool-call mode: bankml's own (llama-server has none)"
LIMITS = "--max-body-bytes: bankml's own (llama-server reads any body)"
ODD_TOOL = {"type": "object", "properties": {"a": {"type": "string", "pattern": "(?=a)"}}}  # a lookahead
IMAGE = "image input is not supported - hint: if this is unexpected, you may need to provide the mmproj"
AUDIO = IMAGE.replace("image", "audio")

# (route, body, bankml's status, a piece of its message, llama-server's status, why they differ or None)
BAD = [
    ("/v1/responses", b'{"input": "Hi"', 400, "Invalid JSON body", 500, NOT_JSON),
    ("/v1/responses", b"[1, 2]", 400, "must be a JSON object", 400, None),
    ("/v1/responses", _json({"input": 5}), 400, "Field 'input'", 400, None),
    (
        "/v1/responses",
        _json({"input": [{"role": "user", "content": [{"type": "input_audio", "audio": "x"}]}]}),
        400,
        "Field 'input[0].content[0].type'",
        400,
        None,
    ),
    ("/v1/responses", _json({"input": [{"type": "item_reference", "id": "x"}]}), 400, "Field 'input[0]'", 400, None),
    ("/v1/responses", _json({"input": "Hi", "max_output_tokens": "many"}), 400, "Field 'max_output_tokens'", 400, None),
    ("/v1/responses", _json({"input": "Hi", "temperature": "hot"}), 400, "Field 'temperature'", 400, None),
    (
        "/v1/responses",
        _json({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "http://x/y.png"}]}]}),
        500,
        IMAGE,
        500,
        None,
    ),
    ("/v1/responses/input_tokens", b'{"input": ', 400, "Invalid JSON body", 500, NOT_JSON),
    ("/v1/responses/input_tokens", _json({"input": 5}), 400, "Field 'input'", 400, None),
    ("/v1/messages", b'{"messages": [', 400, "Invalid JSON body", 500, NOT_JSON),
    ("/v1/messages", _json({"max_tokens": 5}), 400, "'messages' is required", 500, MISSING),
    ("/v1/messages", _json({"messages": "Hi", "max_tokens": 5}), 400, "Field 'messages'", 200, WRONG_TYPE),
    (
        "/v1/messages",
        _json({"messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}], "max_tokens": 5}),
        400,
        "Field 'messages[0].content[0].type'",
        200,
        WRONG_TYPE,
    ),
    (
        "/v1/messages",
        _json({"messages": [{"role": "user", "content": 5}]}),
        400,
        "Field 'messages[0].content'",
        400,
        None,
    ),
    ("/v1/messages", _json({"messages": [U], "max_tokens": "five"}), 400, "Field 'max_tokens'", 400, None),
    ("/v1/messages", _json({"messages": [U], "temperature": "hot"}), 400, "Field 'temperature'", 400, None),
    ("/v1/messages/count_tokens", b"nope", 400, "Invalid JSON body", 500, NOT_JSON),
    ("/v1/messages/count_tokens", _json({"messages": 5}), 400, "Field 'messages'", 200, WRONG_TYPE),
    ("/completion", b'{"prompt": ', 400, "Invalid JSON body", 500, NOT_JSON),
    ("/completion", _json({"prompt": {"a": 1}}), 400, '"prompt"', 400, None),
    ("/completion", _json({"prompt": "Hi", "n_predict": "x"}), 400, "Field 'n_predict'", 400, None),
    ("/completion", _json({"n_predict": 2}), 400, '"prompt"', 400, None),
    ("/completions", _json({"prompt": 5}), 400, '"prompt"', 400, None),
    ("/completions", _json({"prompt": "Hi", "max_tokens": 1.5}), 400, "Field 'max_tokens'", 200, FRACTION),
    ("/infill", b'{"input_prefix": ', 501, "Infill is not supported by this model", 501, None),
    ("/infill", _json({"input_prefix": 5}), 501, "Infill is not supported by this model", 501, None),
    ("/v1/chat/completions/control", b'{"id": ', 400, "Invalid JSON body", 500, NOT_JSON),
    (
        "/v1/chat/completions/control",
        _json({"id": 5, "action": "reasoning_end"}),
        400,
        "missing completion id",
        400,
        None,
    ),
    ("/v1/chat/completions/control", _json({"id": "x", "action": "stop"}), 400, "unknown control action", 400, None),
    ("/chat/completions/input_tokens", b'{"messages": ', 400, "Invalid JSON body", 500, NOT_JSON),
    ("/chat/completions/input_tokens", _json({"messages": "Hi"}), 400, "'messages' must be an array", 400, None),
    (
        "/chat/completions/input_tokens",
        _json({"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]}),
        500,
        AUDIO,
        500,
        None,
    ),
    (
        "/chat/completions/input_tokens",
        _json({"messages": [{"role": "user", "content": [{"type": "document"}]}]}),
        400,
        "Field 'messages[0].content[0]'",
        400,
        None,
    ),
    ("/api/show", b'{"model": ', 400, "Invalid JSON body", 404, OLLAMA),
    ("/api/show", _json({"model": 5}), 400, "Field 'model'", 404, OLLAMA),
    ("/api/embed", _json({"model": "m", "input": 5}), 501, "does not support embeddings", 404, OLLAMA),
]
# a tool whose schema strict mode cannot write exactly (minProperties), tools required
STRICT_BAD = [
    (
        "/v1/responses",
        _json(
            {
                "input": "Hi",
                "tools": [{"type": "function", "name": "odd", "parameters": ODD_TOOL}],
                "tool_choice": "required",
            }
        ),
    ),
    (
        "/v1/messages",
        _json({"messages": [U], "tools": [{"name": "odd", "input_schema": ODD_TOOL}], "tool_choice": {"type": "any"}}),
    ),
]
# the routes that read a body, each refused past --max-body-bytes
BODY_ROUTES = sorted({row[0] for row in BAD} - {"/infill", "/api/embed"})
GOOD = ("/completion", {"prompt": "Hi", "n_predict": 4, "temperature": 0})


def _message(response):
    body = response.json()
    error = body["error"]
    return error if isinstance(error, str) else error["message"]


def _ids(rows):
    return ["%s:%s" % (row[0], row[1][:24].decode()) for row in rows]


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    """An in-process bankml serve in strict tool-call mode with Llama 3.1's template (it renders tools) and a
    small body limit."""

    from starlette.testclient import TestClient

    from bankml.serve.app import create_app
    from bankml.serve.request import ServerLimits
    from bankml.serve.runtime import Model
    from tests.oracle_support import smollm2_path

    template = recorded_template_file(
        tmp_path_factory.mktemp("tmpl"), "meta-llama-Llama-3.1-8B-Instruct.jinja", "llama31.jinja"
    )
    model = Model(
        smollm2_path(), n_ctx=512, n_threads=1, n_parallel=1, chat_template_file=str(template), tool_call_mode="strict"
    )
    try:
        with TestClient(create_app(model, "m", limits=ServerLimits(max_body_bytes=LIMIT))) as c:
            yield c
    finally:
        model.close()


def _post(client, path, raw):
    return client.post(path, content=raw, headers={"Content-Type": "application/json"})


def test_the_table_says_why_bankml_differs():
    for route, _, status, _, llama_status, why in BAD:
        assert (status == llama_status) == (why is None), route


@pytest.mark.parametrize("row", BAD, ids=_ids(BAD))
def test_bad_input_answers_its_status_naming_the_field(client, row):
    route, raw, status, message, _, _ = row
    response = _post(client, route, raw)
    assert response.status_code == status, response.text
    assert message in _message(response)


def test_bad_input_leaves_nothing_applied(client):
    """The same greedy answer before and after every bad body (and a refused tool), and no job left running."""
    before = client.post(GOOD[0], json=GOOD[1]).json()["content"]
    for route, raw, *_ in BAD + [(r, b) for r, b in STRICT_BAD]:
        _post(client, route, raw)
    assert client.post(GOOD[0], json=GOOD[1]).json()["content"] == before
    assert [slot["is_processing"] for slot in client.get("/slots").json()] == [False]


@pytest.mark.parametrize("route,raw", STRICT_BAD, ids=[r for r, _ in STRICT_BAD])
def test_a_tool_strict_mode_refuses_is_a_400_naming_the_tool(client, route, raw):
    response = _post(client, route, raw)
    assert response.status_code == 400
    assert 'tool "odd"' in _message(response) and "pattern" in _message(response), _message(response)


@pytest.mark.parametrize("route", BODY_ROUTES)
def test_an_oversize_body_is_a_400_on_every_route(client, route):
    raw = b'{"pad": "' + b"x" * LIMIT + b'"}'
    response = _post(client, route, raw)
    assert response.status_code == 400
    assert f"larger than the server's limit of {LIMIT} bytes" in _message(response)


def _raw_http(port, request, timeout=30):
    """Send ``request`` (bytes) on a fresh connection, close the sending side, read the answer until the server
    closes it (or ``timeout``): the answer's bytes."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(request)
        s.shutdown(socket.SHUT_WR)
        out = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return out
            out += chunk


def test_a_bankml_serve_process_never_hangs_on_bad_bodies():
    """``bankml serve`` as a child process: every bad body answered within a timeout with the in-process status;
    a body cut before its Content-Length and an oversize chunked body answered or dropped, never hung; the server
    healthy after them, and answering while another client stalls inside its body."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
    args = ["-t", "1", "-c", "512", "--max-body-bytes", str(LIMIT)]
    with running_serve(args, cwd=root) as base:
        port = int(base.rsplit(":", 1)[1])
        with httpx.Client(base_url=base, timeout=60) as http:
            for route, raw, status, message, *_ in BAD:
                response = http.post(route, content=raw, headers={"Content-Type": "application/json"})
                # SmolLM2's own template here (no tools): the same refusals, read before any template
                assert response.status_code == status and message in _message(response), (route, raw)
            cut = b'POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{"mes'
            _raw_http(port, cut)  # the server sees the client leave; nothing to answer
            chunked = b"POST /v1/responses HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
            piece = b"x" * 32768
            chunked += (b"%x\r\n" % len(piece) + piece + b"\r\n") * 4 + b"0\r\n\r\n"
            assert b" 400 " in _raw_http(port, chunked).split(b"\r\n", 1)[0]
            # a client that stalls inside its body holds its own connection only: the server answers the others
            with socket.create_connection(("127.0.0.1", port), timeout=30) as stalled:
                stalled.sendall(cut)
                assert http.get("/health").json() == {"status": "ok"}
                assert http.post(GOOD[0], json=GOOD[1]).status_code == 200


def test_llama_server_answered_the_tables_status():
    """The pinned llama-server (Llama 3.1's template, SmolLM2) answered each body of the table with the table's
    llama-server status (recorded by ``python -m tests.oracle.record_agent_routes --bad-input``)."""
    from ..oracle.record_agent_routes import OUTPUT

    recorded = json.loads(OUTPUT.read_text(encoding="utf-8"))["bad_input"]
    assert [(r["route"], r["body"]) for r in recorded] == [(row[0], row[1].decode()) for row in BAD]
    assert [r["status"] for r in recorded] == [row[4] for row in BAD]
    ORACLE_STATS["llama-server bad-input statuses matched by the table"] += len(BAD)
    for r, row in zip(recorded, BAD):
        if row[2] == row[4] and row[2] != 400:  # the same refusal as llama-server's, in its words
            assert row[3] in r["message"], r
