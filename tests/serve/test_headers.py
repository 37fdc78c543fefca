"""Response header names as llama-server writes them (``Process-Start-Time-Unix``, ``Content-Type``): llama-server's
own test suite reads them from a plain dict, where ``process-start-time-unix`` is another key."""

import pytest

from bankml.serve.headers import title_case
from tests.oracle_support import smollm2_path


@pytest.mark.parametrize(
    "name, cased",
    [
        (b"content-type", b"Content-Type"),
        (b"process-start-time-unix", b"Process-Start-Time-Unix"),
        (b"ACCESS-CONTROL-ALLOW-ORIGIN", b"Access-Control-Allow-Origin"),
        (b"server", b"Server"),
        (b"x-1a", b"X-1a"),
    ],
)
def test_title_case(name, cased):
    assert title_case(name) == cased


@pytest.fixture(scope="module")
def client():
    from starlette.testclient import TestClient

    from bankml.serve.app import create_app
    from bankml.serve.endpoints import EndpointOptions
    from bankml.serve.runtime import Model

    model = Model(smollm2_path(), n_ctx=256, n_threads=1, n_parallel=1)
    app = create_app(model, "m", api_keys=["k"], endpoints=EndpointOptions(slots=True, metrics=True, props=False))
    with TestClient(app) as c:
        yield c
    model.close()


def _names(response):
    return [name for name, _ in response.headers.raw]


def test_metrics_sends_process_start_time_unix_in_llama_server_s_case(client):
    response = client.get("/metrics", headers={"Authorization": "Bearer k"})
    assert response.status_code == 200
    assert b"Process-Start-Time-Unix" in _names(response) and b"Content-Type" in _names(response)
    assert dict((k.decode(), v.decode()) for k, v in response.headers.raw)["Process-Start-Time-Unix"].isdigit()


@pytest.mark.parametrize(
    "path, key, status",
    [("/health", None, 200), ("/v1/models", None, 401), ("/v1/models", "k", 200), ("/nope", "k", 404)],
)
def test_every_answer_s_header_names_are_title_cased(client, path, key, status):
    response = client.get(path, headers={"Authorization": "Bearer " + key} if key else {})
    assert response.status_code == status
    names = _names(response)
    assert names and all(name == title_case(name) for name in names)


@pytest.mark.parametrize("method", ["GET", "OPTIONS"])
def test_cors_headers_are_cased_too(client, method):
    # the header case is the outermost middleware: CORS's headers (and a preflight answered before the API key
    # check) come through it
    headers = {"Origin": "http://example.com", "Access-Control-Request-Method": "POST"}
    response = client.request(method, "/health", headers=headers)
    assert response.status_code == 200
    names = _names(response)
    assert b"Access-Control-Allow-Origin" in names, names
    assert all(name == title_case(name) for name in names)
