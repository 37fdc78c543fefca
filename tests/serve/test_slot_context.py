"""Each slot's context as llama-server sizes it (``n_ctx_slot``: the context divided between the slots unless the
KV cache is unified, which ``-np`` auto implies), and the ``exceed_context_size_error`` object with its
``n_prompt_tokens`` and ``n_ctx`` (llama-server's test_basic.py and test_chat_completion.py check both)."""

import pytest

from bankml.cli import build_parser
from bankml.serve.contexts import slot_context_size
from bankml.serve.job import ContextSizeError
from bankml.serve.plumbing import refusal
from bankml.serve.runtime import Model
from tests.oracle_support import smollm2_path


@pytest.mark.parametrize(
    "n_ctx, n_parallel, unified, slot",
    [
        (512, 2, False, 256),  # the suite's tinyllama2 preset: -c 512 -np 2
        (512, 2, True, 512),
        (256, 2, False, 256),  # 128 padded to 256
        (1000, 3, False, 512),  # 1000 -> 1024; 1024 // 3 = 341 -> 512
        (100, 1, False, 256),
    ],
)
def test_slot_context_is_llama_context_s(n_ctx, n_parallel, unified, slot):
    # (bankml.serve.contexts.slot_context_size; more sizes in tests/serve/test_server_flags.py)
    assert slot_context_size(n_ctx, n_parallel, unified, 0) == slot


def test_kv_unified_flags_and_environment(monkeypatch):
    parse = lambda *a: build_parser().parse_args(["serve", *a]).kv_unified  # noqa: E731
    assert (parse(), parse("-kvu"), parse("--kv-unified"), parse("-no-kvu"), parse("--no-kv-unified")) == (
        None,
        True,
        True,
        False,
        False,
    )
    monkeypatch.setenv("LLAMA_ARG_KV_UNIFIED", "1")
    assert parse() is True and parse("--no-kv-unified") is False


def test_a_context_size_error_without_a_token_count_gives_only_n_ctx():
    assert refusal(ContextSizeError("too long", None, 256)).extra == {"n_ctx": 256}
    assert refusal(ContextSizeError("too long", 300, 256)).extra == {"n_prompt_tokens": 300, "n_ctx": 256}


@pytest.fixture(scope="module")
def split():
    """SmolLM2 as llama-server's tinyllama2 preset sizes it: -c 512 -np 2, no unified cache."""
    model = Model(smollm2_path(), n_ctx=512, n_threads=1, n_parallel=2, kv_unified=False)
    yield model
    model.close()


@pytest.fixture(scope="module")
def client(split):
    from starlette.testclient import TestClient

    from bankml.serve.app import create_app

    with TestClient(create_app(split, "m")) as c:
        yield c


def test_each_slot_has_its_part_of_the_context_in_libllama_too(split):
    assert split.n_ctx_slot == 256
    slot = split.acquire(timeout=5)
    try:
        assert split._L.llama_n_ctx(slot.ctx) == 256
    finally:
        split.release(slot)


def test_slots_and_props_report_the_slot_s_context(client):
    assert [s["n_ctx"] for s in client.get("/slots").json()] == [256, 256]
    assert client.get("/props").json()["default_generation_settings"]["n_ctx"] == 256


LONG = [{"role": "system", "content": "Book"}, {"role": "user", "content": "What is the best book"}] * 100


@pytest.mark.parametrize("stream", [False, True])
def test_the_context_size_error_names_the_prompt_s_tokens_and_the_slot_s_context(client, split, stream):
    response = client.post("/v1/chat/completions", json={"messages": LONG, "stream": stream, "max_tokens": 2})
    assert response.status_code == 400
    error = response.json()["error"]
    n = error["n_prompt_tokens"]
    assert n > 256 and error["n_ctx"] == 256 and error["type"] == "exceed_context_size_error"
    assert (
        error["message"] == f"request ({n} tokens) exceeds the available context size (256 tokens), try increasing it"
    )
    assert error["code"] == 400
