"""Vertex AI's prediction protocol (``AIP_MODE=PREDICTION``) as llama-server serves it: ``/predict`` dispatching
each instance to the route its ``@requestFormat`` names, ``AIP_HEALTH_ROUTE``, ``AIP_HTTP_PORT``."""

import pytest

from bankml.serve import gcp
from tests.oracle_support import smollm2_path


@pytest.mark.parametrize(
    "path, alias",
    [
        ("/v1/chat/completions", "chatCompletions"),
        ("/apply-template", "applyTemplate"),
        ("/completion", "completion"),
        ("/v1/messages/count_tokens", "messagesCountTokens"),
        ("/slots/{id_slot}", "slots"),
    ],
)
def test_aliases_as_path_to_gcp_format(path, alias):
    assert gcp.gcp_alias(path) == alias


def test_off_without_aip_mode_and_the_port_from_aip_http_port():
    assert gcp.routes([], {}) == [] and gcp.http_port({}, 8700) == 8700
    assert gcp.http_port({"AIP_MODE": "PREDICTION"}, 8700) == 8080
    assert gcp.http_port({"AIP_MODE": "PREDICTION", "AIP_HTTP_PORT": "9000"}, 8700) == 9000
    with pytest.raises(gcp.GcpError, match="AIP_HTTP_PORT"):
        gcp.http_port({"AIP_MODE": "PREDICTION", "AIP_HTTP_PORT": "x"}, 8700)


ENV = {"AIP_MODE": "PREDICTION", "AIP_HEALTH_ROUTE": "ready"}


@pytest.fixture(scope="module")
def client():
    from starlette.testclient import TestClient

    from bankml.serve.app import create_app
    from bankml.serve.runtime import Model

    model = Model(smollm2_path(), n_ctx=512, n_threads=1, n_parallel=2)
    with pytest.MonkeyPatch.context() as mp:
        for k, v in ENV.items():
            mp.setenv(k, v)
        app = create_app(model, "m")
    with TestClient(app) as c:
        yield c
    model.close()


def test_a_predict_route_that_is_already_a_route_is_refused(client, monkeypatch):
    from bankml.serve.app import create_app

    monkeypatch.setenv("AIP_MODE", "PREDICTION")
    monkeypatch.setenv("AIP_PREDICT_ROUTE", "health")
    with pytest.raises(gcp.GcpError, match="AIP_PREDICT_ROUTE=/health conflicts"):
        create_app(client.app.state.bankml.model, "m")


CHAT = {"max_tokens": 4, "temperature": 0, "messages": [{"role": "user", "content": "Say hello"}]}


def test_instances_are_answered_by_their_routes_in_order(client):
    body = {
        "instances": [
            {"@requestFormat": "chatCompletions", **CHAT, "stream": True},
            {"@requestFormat": "/tokenize", "content": "Hello world"},
            {"@requestFormat": "nope"},
            "text",
            {"@requestFormat": "chatCompletions", "messages": 3},
        ]
    }
    response = client.post("/predict", json=body)
    assert response.status_code == 200
    chat, tokens, unknown, not_object, bad = response.json()["predictions"]
    direct = client.post("/v1/chat/completions", json=CHAT).json()
    assert chat["choices"][0]["message"] == direct["choices"][0]["message"]  # stream forced to false, greedy
    assert tokens == client.post("/tokenize", json={"content": "Hello world"}).json()
    assert unknown["error"]["message"] == "no handler registered for @requestFormat: nope"
    assert not_object["error"]["message"] == "each instance must be a JSON object"
    assert bad["error"]["type"] == "invalid_request_error" and "messages" in bad["error"]["message"]


@pytest.mark.parametrize(
    "body, message",
    [
        ({}, "request body must include an array field named instances"),
        ([], "request body must be a JSON object"),
        ({"instances": [{}] * 129}, "instances array exceeds maximum size of 128"),
    ],
)
def test_bad_predict_bodies(client, body, message):
    response = client.post("/predict", json=body)
    assert response.status_code == 400 and response.json()["error"]["message"] == message


def test_the_health_route(client):
    assert client.get("/ready").json() == client.get("/health").json() == {"status": "ok"}
