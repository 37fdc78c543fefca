"""llama-server's ``--host`` list (one listening socket per address, on the same port), ``--alias`` as a
comma-separated set of names and ``--tags`` (``GET /models``'s ``aliases`` and ``tags``)."""

import json
import os
import socket
import tempfile

import pytest

from bankml import cli
from bankml.serve.app import bind_sockets
from bankml.serve.plumbing import Plumbing
from tests.serve.serve_support import free_port


def _connects(family, address):
    with socket.socket(family, socket.SOCK_STREAM) as c:
        c.settimeout(5)
        c.connect(address)
        return True


def test_each_address_of_the_list_listens_on_the_same_port():
    port = free_port()
    path = os.path.join(tempfile.mkdtemp(), "s.sock")
    socks = bind_sockets(["127.0.0.1", path], port)
    try:
        assert [s.family for s in socks] == [socket.AF_INET, socket.AF_UNIX]
        assert socks[0].getsockname() == ("127.0.0.1", port)
        assert _connects(socket.AF_INET, ("127.0.0.1", port)) and _connects(socket.AF_UNIX, path)
    finally:
        for s in socks:
            s.close()


def test_ipv6_binds_ipv6_only():
    try:
        socks = bind_sockets(["::1"], free_port())
    except OSError:
        pytest.skip("IPv6 loopback is unavailable")
    try:
        assert socks[0].getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY) == 1
    finally:
        socks[0].close()


def test_an_address_that_cannot_be_bound_is_named():
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    try:
        with pytest.raises(OSError, match=f"hostname: 127.0.0.1, port: {port}"):
            bind_sockets(["127.0.0.1"], port)
    finally:
        taken.close()


class _Model:
    name = "model.gguf"


def test_aliases_and_tags_are_sorted_sets_and_the_first_alias_names_the_model():
    app = Plumbing(_Model(), "tinyllama-2,fim, code,,fim", tags="small, chat,fim")
    assert app.aliases == ["code", "fim", "tinyllama-2"] and app.alias == "code"
    assert app.tags == ["chat", "fim", "small"]
    bare = Plumbing(_Model())
    assert (bare.alias, bare.aliases, bare.tags) == ("model.gguf", [], [])


def test_tags_flag():
    args = cli.build_parser().parse_args(["serve", "--tags", "chat,fim"])
    assert args.model_tags == "chat,fim"


def test_models_lists_aliases_and_tags():
    from starlette.testclient import TestClient

    from bankml.serve.app import create_app
    from bankml.serve.runtime import Model
    from tests.oracle_support import smollm2_path

    model = Model(smollm2_path(), n_ctx=256, n_threads=1)
    try:
        with TestClient(create_app(model, "tinyllama-2,fim,code", tags="chat,fim,small")) as c:
            (entry,) = c.get("/models").json()["data"]
            body = c.post("/v1/completions", json={"prompt": "Hi", "max_tokens": 1}).json()
            # llama-server names its model in every answer, whatever the body's "model" says
            chat = {"model": "other", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}
            named = [
                c.post("/v1/chat/completions", json=chat).json()["model"],
                c.post("/v1/completions", json={"model": "other", "prompt": "Hi", "max_tokens": 1}).json()["model"],
                c.post("/completion", json={"model": "other", "prompt": "Hi", "n_predict": 1}).json()["model"],
                c.post("/v1/responses", json={"model": "other", "input": "Hi", "max_output_tokens": 1}).json()["model"],
                c.post("/v1/messages", json=dict(chat, max_tokens=1)).json()["model"],
            ]
    finally:
        model.close()
    assert entry["id"] == "code" and set(entry["aliases"]) == {"tinyllama-2", "fim", "code"}
    assert set(entry["tags"]) == {"chat", "fim", "small"}
    assert body["model"] == "code" and named == ["code"] * 5


def test_the_model_is_named_by_its_path_as_given():
    """Without --alias llama-server names its model by the -m path as given (common_params_model::get_name)."""
    from bankml.serve.runtime import Model
    from tests.oracle_support import smollm2_path

    given = os.path.relpath(smollm2_path())
    model = Model(given, n_ctx=256, n_threads=1)
    try:
        assert model.name == given
    finally:
        model.close()


def test_models_answers_as_llama_server():
    """/v1/models and /models: the pinned llama-server's answer (get_res_models: Ollama's "models" list beside
    OpenAI's "data", owned by "llamacpp", the meta of server_context_meta), live, but the time it was asked."""
    import httpx

    from tests.serve.serve_support import running_llama_server, smollm2_client

    flags = ["-t", "1", "-tb", "1", "-c", "512", "-np", "1", "--no-warmup", "-a", "smol"]
    with running_llama_server(flags) as base, smollm2_client("smol", n_ctx=512, n_parallel=1) as client:
        for path in ("/v1/models", "/models"):
            theirs, ours = httpx.get(base + path, timeout=60).json(), client.get(path).json()
            assert isinstance(ours["data"][0].pop("created"), int)
            theirs["data"][0].pop("created")
            assert json.dumps(ours) == json.dumps(theirs), path  # the same keys in the same order
