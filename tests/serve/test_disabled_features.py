"""``/tools`` and ``/cors-proxy`` (llama-server's server-side tools and the web UI's CORS proxy, which bankml
refuses at start): answered with llama-server's 403 for a disabled feature, before any body is read."""

import asyncio

import pytest

from bankml.serve.endpoints import Endpoints, feature_disabled


def test_the_403_body():
    r = asyncio.run(feature_disabled(None))
    assert r.status_code == 403
    assert r.body == b'{"error":{"message":"this feature is disabled","type":"feature_disabled"}}'


@pytest.mark.parametrize("path", ["/tools", "/cors-proxy"])
def test_routes_answer_get_and_post(path):
    class _App:
        pass

    routes = [r for r in Endpoints(_App(), None).routes() if r.path == path]
    assert len(routes) == 1 and {"GET", "POST"} <= routes[0].methods and routes[0].endpoint is feature_disabled


def test_served():
    from tests.serve.serve_support import smollm2_client

    with smollm2_client() as c:
        assert c.get("/cors-proxy").status_code == 403
        r = c.post("/tools", json={"tool": "x"})
        assert r.status_code == 403 and r.json()["error"]["type"] == "feature_disabled"
