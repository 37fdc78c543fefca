"""Embeddings and reranking (bankml.serve.embeddings): the pinned llama-server (``tests/oracle/build_server.py``) and
bankml serve, both started with the same flags on SmolLM2-135M-Instruct (``--embedding`` with pooling last, mean and
none, and ``--reranking``), answer the same requests with the same statuses and JSON: the vectors and scores are
equal, float for float (measured: libllama computes both, on one thread, with the same context sizes and batches; the
only difference found is kept on purpose, below); then bad input, answered with an error that names the field.

The kept difference: llama-server with several slots evaluates inputs of unequal lengths side by side in one
physical batch, split into equal per-sequence parts, and libllama's mean pooling then averages only the last part's
tokens of the longer input (``--pooling mean -np 2``, ["hello hello hello", "one two"]: the first vector is its last
token's). bankml evaluates each input on its own slot, so its mean is over every token
(``test_mean_pooling_averages_every_token``); the identity cases use mean pooling with one slot.
"""

import contextlib
import json
import time

import httpx
import numpy as np
import pytest

from bankml import cli
from bankml.serve.app import _load_model, create_app
from bankml.serve.embeddings import embd_normalize
from bankml.serve.flags import chat_model_options, context_options
from tests.oracle_support import ORACLE_STATS, smollm2_path

from .serve_support import running_llama_server

BASE = ["-t", "1", "-tb", "1", "-c", "512", "-b", "128", "-ub", "128", "--alias", "m", "--no-warmup"]
LONG = "Write a joke about AI from a very long prompt which will not be truncated"
DOCUMENTS = [
    "A machine is a physical system that uses power to apply forces and control movement to perform an action.",
    "Learning is the process of acquiring new understanding, knowledge, behaviors, skills, values, attitudes.",
    "Machine learning is a field of study in artificial intelligence concerned with statistical algorithms.",
    "Paris, capitale de la France, est une grande ville européenne et un centre mondial de l'art.",
]
EMBED_CASES = [
    ("/v1/embeddings", {"input": "I believe the meaning of life is"}),
    ("/v1/embeddings", {"input": ["I believe the meaning of life is", LONG, "This is a test", [12, 34, 56]]}),
    ("/v1/embeddings", {"input": [12, "string", 56], "encoding_format": "base64", "model": "x"}),
    ("/v1/embeddings", {"input": ["hello world", {"content": [{"type": "text", "text": "hello world"}]}]}),
    ("/v1/embeddings", {"input": {"prompt_string": "a b c"}, "embd_normalize": 1}),
    ("/v1/embeddings", {"input": "a b c", "embd_normalize": 0}),
    ("/v1/embeddings", {"input": "a b c", "embd_normalize": -1}),
    ("/v1/embeddings", {"input": "a b c", "embd_normalize": 3}),
    ("/embeddings", {"input": ["hello hello hello", "one two"]}),
    ("/embedding", {"content": "hello"}),
    ("/v1/embeddings", {"content": "hello"}),  # "content": the native answer
    # completions are still served, the slot's cache reused after an embedding as llama-server reuses it
    ("/completion", {"prompt": "hello world and", "n_predict": 4, "temperature": 0, "n_probs": 2}),
    ("/v1/embeddings", {"input": []}),
    ("/v1/embeddings", {"input": ""}),
    ("/v1/embeddings", {"input": [[]]}),
    ("/v1/embeddings", {}),
    ("/v1/embeddings", {"input": [99999999]}),
    ("/v1/embeddings", {"input": "a", "encoding_format": "int8"}),
    ("/v1/embeddings", {"input": {"content": "s"}}),
    ("/v1/embeddings", {"input": {"content": [{"type": "unknown"}]}}),
    ("/v1/embeddings", {"input": {"content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,"}}]}}),
    ("/v1/embeddings", {"input": {"prompt_string": "s", "multimodal_data": ["AAAA"]}}),
    ("/v1/embeddings", {"input": "a " * 300}),  # past the batch (mean, none) or the slot's context (last)
    ("/v1/embeddings", {"input": "This is a test " * 100}),
    ("/rerank", {"query": "q", "documents": ["a"]}),  # not started with --reranking: the 501
]
RERANK_CASES = [
    ("/rerank", {"query": "Machine learning is", "documents": DOCUMENTS}),
    ("/v1/rerank", {"query": "Machine learning is", "documents": DOCUMENTS, "top_n": 2}),
    ("/reranking", {"query": "Machine learning is", "texts": DOCUMENTS, "return_text": True, "top_n": 99}),
    ("/v1/reranking", {"query": "Which city?", "texts": DOCUMENTS[2:], "top_n": 1.5, "model": "r"}),
    ("/rerank", {"query": "q", "documents": 123, "texts": ["a", "b"]}),
    ("/rerank", {"query": "q", "documents": [1, 2, 3]}),
    ("/rerank", {"query": "q", "documents": []}),
    ("/rerank", {"query": 5, "documents": ["a"]}),
    ("/rerank", {"documents": ["a"]}),
]


@contextlib.contextmanager
def _bankml(flags):
    """bankml serve's app as ``bankml serve FLAGS`` makes it (its parser, its model loading), in process."""
    from starlette.testclient import TestClient

    args = cli.build_parser().parse_args(["serve", "-m", str(smollm2_path()), *flags])
    options = {**chat_model_options(args), **context_options(args, "auto")}
    model = _load_model(args, options)
    try:
        with TestClient(create_app(model, args.alias)) as client:
            yield client
    finally:
        model.close()


def _answers(flags, cases):
    with running_llama_server(flags) as base:
        theirs = [httpx.post(base + path, json=body, timeout=120) for path, body in cases]
    with _bankml(flags) as client:
        ours = [client.post(path, json=body) for path, body in cases]
    return theirs, ours


def _comparable(path, answer):
    body = answer.json()
    if path == "/completion":  # the completion's content, tokens, probabilities and cache; its times differ
        out = {k: body[k] for k in ("content", "tokens_evaluated", "stop_type", "completion_probabilities")}
        return {**out, "cache_n": body["timings"]["cache_n"], "prompt_n": body["timings"]["prompt_n"]}
    return body


@pytest.mark.parametrize(
    "flags",
    [
        ["--embedding", "--pooling", "last", "-np", "2"],
        ["--embedding", "--pooling", "mean", "-np", "1"],
        ["--embeddings", "--pooling", "none", "-np", "1"],
        ["--reranking", "-b", "512", "-ub", "512", "-np", "1"],
    ],
    ids=["last", "mean", "none", "rerank"],
)
def test_answers_equal_llama_server_s(flags):
    cases = RERANK_CASES if "--reranking" in flags else EMBED_CASES
    theirs, ours = _answers([*BASE, *flags], cases)
    for (path, body), a, b in zip(cases, theirs, ours, strict=True):
        where = f"{path} {json.dumps(body)[:80]}"
        assert b.status_code == a.status_code, where
        if a.status_code == 500 and "elements must be" in a.text:  # bankml names the input too
            assert a.json()["error"]["message"] in b.json()["error"]["message"], where
            continue
        assert _comparable(path, b) == _comparable(path, a), where
        ORACLE_STATS["llama-server embedding and rerank answers identical (bankml serve, live)"] += 1
    assert sum(a.status_code == 200 for a in theirs) >= 3  # pooling none: /embeddings, /embedding, /completion


@pytest.fixture(scope="module")
def last():
    with _bankml([*BASE, "--embedding", "--pooling", "last", "-np", "1"]) as client:
        yield client


def _error(response, status=400):
    assert response.status_code == status, response.text
    return response.json()["error"]["message"]


@pytest.mark.parametrize(
    "body, status, message",
    [
        ({"input": "a", "encoding_format": 3}, 400, "Field 'encoding_format': [json.exception.type_error.302] type "),
        ({"input": "a", "embd_normalize": "2"}, 400, "Field 'embd_normalize': [json.exception.type_error.302] type "),
        ({"input": "a", "embd_normalize": 1e40}, 400, "Field 'embd_normalize': 1e+40 is out of range"),
        ({"input": ["a", None]}, 500, "Field 'input[1]': \"prompt\" elements must be a string"),
        ({"input": 1.5}, 500, "Field 'input': \"prompt\" elements must be"),
        ({"input": [1, "a", None]}, 400, "Field 'input[2]': [json.exception.type_error.302] type must be number"),
        ({"input": [{"prompt_string": 5}]}, 400, "Field 'input[0].prompt_string': [json.exception.type_error.302]"),
        ({"input": []}, 400, '"input" must not be empty'),
        ({"content": [""]}, 400, "Input content cannot be empty"),
        ({"input": "This is a test " * 200}, 400, "request (801 tokens) exceeds the available context size (512 "),
        ({"input": [-1]}, 400, "Prompt contains invalid tokens"),
    ],
)
def test_bad_input_is_answered_naming_the_field(last, body, status, message):
    assert message in _error(last.post("/v1/embeddings", json=body), status)


def test_an_oversized_input_reports_its_size(last):
    r = last.post("/v1/embeddings", json={"input": "This is a test " * 200})
    err = r.json()["error"]
    assert (err["type"], err["n_prompt_tokens"], err["n_ctx"]) == ("exceed_context_size_error", 801, 512)


def test_not_enabled_and_pooling_none_are_refused_as_llama_server_refuses_them(last):
    assert "Start it with `--reranking`" in _error(last.post("/rerank", json={"query": "q", "documents": ["a"]}), 501)
    with _bankml([*BASE, "--embedding", "--pooling", "none", "-np", "1"]) as client:
        r = client.post("/v1/embeddings", json={"input": "hello hello"})
        assert _error(r) == "Pooling type 'none' is not OAI compatible. Please use a different pooling type"
        vectors = client.post("/embeddings", json={"input": "hello hello"}).json()[0]["embedding"]
        assert len(vectors) == 2 and all(len(v) == 576 for v in vectors)  # one per token, not normalized
        assert abs(float(np.linalg.norm(vectors[0])) - 1) > 1e-3


def test_rerank_bad_input_names_the_field():
    with _bankml([*BASE, "--rerank", "-np", "1"]) as client:
        r = client.post("/rerank", json={"query": "q", "documents": ["a"], "top_n": -1})
        assert _error(r).startswith("Field 'top_n': must be a number of results, 0 or more")
        assert _error(client.post("/rerank", json={"query": "", "documents": [""]})) == "Input content cannot be empty"
        assert _error(client.post("/rerank", json={"query": ["q"], "documents": ["a"]})) == '"query" must be a string'
        # --reranking also serves /embeddings: the rank pooling's scores (n_cls_out of them)
        assert len(client.post("/embeddings", json={"input": "a"}).json()[0]["embedding"][0]) == 1


def test_mean_pooling_averages_every_token():
    """bankml's mean (each input on its own slot) is the normalized mean of the per-token vectors (pooling none),
    within float32 rounding (the sums are made in another order)."""
    texts = ["hello hello hello", "one two"]
    with _bankml([*BASE, "--embedding", "--pooling", "mean", "-np", "2"]) as client:
        means = [d["embedding"][0] for d in client.post("/embeddings", json={"input": texts}).json()]
    with _bankml([*BASE, "--embedding", "--pooling", "none", "-np", "1"]) as client:
        tokens = [np.array(d["embedding"]) for d in client.post("/embeddings", json={"input": texts}).json()]
    for mean, per_token in zip(means, tokens, strict=True):
        expected = embd_normalize(per_token.mean(axis=0), 2)
        assert np.abs(np.array(mean) - expected).max() < 1e-5


def test_embd_normalize_follows_common_embd_normalize():
    v = np.array([3.0, -4.0, 0.0], dtype=np.float32)
    assert embd_normalize(v, 2).tolist() == pytest.approx([0.6, -0.8, 0.0])
    assert embd_normalize(v, 1).tolist() == pytest.approx([3 / 7, -4 / 7, 0.0])
    assert embd_normalize(v, 0).tolist() == pytest.approx([3 * 32760 / 4, -32760, 0.0])
    assert embd_normalize(v, -1).tolist() == [3.0, -4.0, 0.0]
    assert embd_normalize(v, 3).tolist() == pytest.approx((v / np.cbrt(91.0)).tolist())
    assert embd_normalize(np.zeros(3, dtype=np.float32), 2).tolist() == [0.0, 0.0, 0.0]


def test_pooling_flags():
    parse = lambda *a: cli.build_parser().parse_args(["serve", *a])  # noqa: E731
    assert (parse().embedding, parse().pooling, parse().embd_normalize) == (False, None, 2)
    assert (parse("--reranking").embedding, parse("--rerank").pooling) == (True, "rank")
    assert parse("--reranking", "--pooling", "last").pooling == "last"  # the later flag wins, as in llama-server
    assert parse("--pooling", "cls", "--reranking").pooling == "rank"
    with pytest.raises(SystemExit):
        parse("--pooling", "max")


def test_an_evaluation_past_the_request_s_budget_is_a_503():
    import threading

    from bankml.serve.embeddings import evaluate
    from bankml.serve.plumbing import Refusal

    with pytest.raises(Refusal) as err:
        evaluate(None, [[1, 2]], threading.Event(), time.monotonic() - 1, 600)
    assert (err.value.code, err.value.message) == (
        503,
        "the request took longer than the server's limit of 600 s (--request-timeout)",
    )


def test_the_environment_variables_and_a_bad_pooling_name():
    from bankml.serve.contexts import pooling_request
    from bankml.serve.flags import env_defaults

    assert env_defaults({"LLAMA_ARG_RERANKING": "1"}) == {"embedding": True, "pooling": "rank"}
    assert env_defaults({"LLAMA_ARG_EMBEDDINGS": "true", "LLAMA_ARG_POOLING": "cls"}) == {
        "embedding": True,
        "pooling": "cls",
    }
    assert (pooling_request(True, None), pooling_request(True, "last"), pooling_request(False, "last")) == (-1, 3, -1)
    with pytest.raises(ValueError, match="\"--pooling\": invalid value 'max'"):
        pooling_request(True, "max")


def test_ollama_embed_and_embeddings_with_the_official_client():
    """Ollama's /api/embed and /api/embeddings over ``--embedding`` (bankml serve, through the ollama client):
    each vector is the server's pooled embedding (llama-server's /embedding with ``embd_normalize`` -1), divided
    by its Euclidean norm for /api/embed (cut to ``dimensions`` and divided again), as it comes for
    /api/embeddings; an input longer than a slot takes is cut to it unless ``truncate`` is false; Ollama's
    errors; ``--reject-unknown-fields`` on every embedding route."""
    import ollama

    from .serve_support import running_serve

    flags = [*BASE, "-m", str(smollm2_path()), "--embedding", "--pooling", "last", "-np", "1"]
    with running_serve([*flags, "--reject-unknown-fields"]) as base:
        client = ollama.Client(host=base)
        texts = ["Hello there", "Cats are small"]
        raw = httpx.post(base + "/embedding", json={"content": texts, "embd_normalize": -1}, timeout=60).json()
        pooled = [np.asarray(r["embedding"][0], dtype=np.float64) for r in raw]
        n_tokens = sum(len(httpx.post(base + "/tokenize", json={"content": t}).json()["tokens"]) for t in texts)

        got = client.embed(model="m", input=texts)
        assert got.model == "m" and got.prompt_eval_count == n_tokens and got.total_duration > 0
        for vec, ref in zip(got.embeddings, pooled, strict=True):
            np.testing.assert_allclose(vec, ref / np.linalg.norm(ref), rtol=1e-5, atol=1e-7)
        cut = client.embed(model="m", input=texts[0], dimensions=8).embeddings[0]
        np.testing.assert_allclose(cut, pooled[0][:8] / np.linalg.norm(pooled[0][:8]), rtol=1e-5, atol=1e-7)
        assert client.embed(model="m", input="").embeddings == []
        legacy = client.embeddings(model="m", prompt=texts[0]).embedding
        np.testing.assert_allclose(legacy, pooled[0], rtol=1e-6)
        assert client.embeddings(model="m", prompt="").embedding == []
        assert httpx.post(base + "/api/show", json={"model": "m"}).json()["capabilities"] == ["completion", "embedding"]

        long = " ".join(["word"] * 700)
        assert client.embed(model="m", input=long).prompt_eval_count == 511  # the slot's 512 tokens, one kept free
        with pytest.raises(ollama.ResponseError) as e:
            client.embed(model="m", input=long, truncate=False)
        assert e.value.status_code == 400 and "exceeds the available context size (512 tokens)" in e.value.error

        def error(path, body):
            r = httpx.post(base + path, json=body, timeout=60)
            return r.status_code, r.json()["error"]

        assert error("/api/embed", {"model": "m", "input": 5}) == (400, "invalid input type")
        assert error("/api/embed", {"model": "m", "input": ["a", 1]}) == (400, "invalid input type")
        assert error("/api/embed", {"model": "m", "input": "a", "truncate": "no"}) == (
            400,
            "json: cannot unmarshal string into Go struct field EmbedRequest.truncate of type bool",
        )
        assert error("/api/embed", {"input": "a"}) == (404, "model '' not found")
        assert error("/api/embeddings", {"prompt": "a"}) == (400, "model is required")
        status, message = error("/api/embed", {"model": "m", "input": "a", "inputs": "b"})
        assert status == 400 and "'inputs'" in message
        status, message = error("/v1/embeddings", {"input": "a", "encoding": "float"})  # llama-server's error object
        assert status == 400 and "'encoding'" in message["message"]

        # hostile bodies, each answered within the client's timeout by a child process: nesting past the reader's
        # bound, a body that is no JSON, 20,000 inputs of 200 token ids and a last invalid one (every input is
        # checked before any is evaluated, so the refusal comes without 20,000 evaluations)
        for path in ("/v1/embeddings", "/api/embed", "/api/embeddings"):
            r = httpx.post(base + path, content="[" * 100_000 + "]" * 100_000, timeout=60)
            assert r.status_code == 400, (path, r.text[:200])
            r = httpx.post(base + path, content=b"\xff{not json", timeout=60)
            assert r.status_code == 400, (path, r.text[:200])
        r = httpx.post(base + "/v1/embeddings", json={"input": [[1] * 200] * 20_000 + [[-1]]}, timeout=120)
        assert r.status_code == 400 and "invalid tokens" in r.json()["error"]["message"]
