"""The slot's prompt cache (llama-server's ``cache_prompt``, its default): a slot keeps the tokens it evaluated, a new
prompt on it reuses the longest prefix they share and evaluates the rest (at least its last token), and the counts
are reported as llama-server reports them (``timings.cache_n``/``prompt_n``, ``usage.prompt_tokens_details``,
``prompt_progress.cache``, ``/metrics``' ``prompt_tokens_cached_total``), with ``n_cache_reuse`` a later chunk of the
cache shifted into place. The last two tests run the pinned llama-server (``tests/oracle/build_server.py``) on the
same requests: the same content, probabilities and counts."""

import json

import httpx
import pytest

from bankml.serve.contexts import SlotPool, common_prefix
from bankml.serve.runtime import Model
from tests.oracle_support import smollm2_path

from .serve_support import running_llama_server

PROMPT = "the quick brown fox jumps over the lazy dog"
GREEDY = {"temperature": 0.0, "n_predict": 6, "n_probs": 3}


@pytest.fixture(scope="module")
def cached():
    """SmolLM2 with the prompt cache on (bankml serve's default, as llama-server's) on one slot."""
    model = Model(smollm2_path(), n_ctx=512, n_threads=1, n_parallel=1, cache_prompt=True)
    yield model
    model.close()


@pytest.fixture(scope="module")
def client(cached):
    from starlette.testclient import TestClient

    from bankml.serve.app import create_app
    from bankml.serve.endpoints import EndpointOptions

    with TestClient(create_app(cached, "m", endpoints=EndpointOptions(metrics=True))) as c:
        yield c


def test_common_prefix():
    assert [common_prefix(a, b) for a, b in [([], [1]), ([1, 2, 3], [1, 2, 4]), ([1, 2], [1, 2, 3]), ([5], [6])]] == [
        0,
        2,
        2,
        0,
    ]


def test_a_repeated_prompt_reuses_all_but_its_last_token(cached):
    first = cached.complete(PROMPT, max_tokens=4).run()
    n = len(first.prompt_tokens)
    assert (first.timings["cache_n"], first.timings["prompt_n"]) in ((0, n), (n - 1, 1))  # a warm slot: cached
    again = cached.complete(PROMPT, max_tokens=4).run()
    assert (again.timings["cache_n"], again.timings["prompt_n"]) == (n - 1, 1)
    slot = cached.slots._all[0]
    # the cache holds the prompt and every generated token but the last (never decoded)
    assert slot.tokens == again.prompt_tokens + again.tokens[:-1]
    longer = cached.complete(PROMPT + " and then it", max_tokens=2).run()
    assert longer.timings["cache_n"] == common_prefix(again.prompt_tokens + again.tokens[:-1], longer.prompt_tokens)
    assert longer.timings["cache_n"] + longer.timings["prompt_n"] == len(longer.prompt_tokens)


def test_cache_prompt_false_evaluates_the_prompt_anew(cached):
    cached.complete(PROMPT, max_tokens=2).run()
    job = cached.complete(PROMPT, max_tokens=2)
    job.cache_prompt = False
    result = job.run()
    assert (result.timings["cache_n"], result.timings["prompt_n"]) == (0, len(result.prompt_tokens))


def test_the_request_field_and_the_reports(client):
    body = {"prompt": PROMPT, **GREEDY}
    fresh = client.post("/completion", json=dict(body, cache_prompt=False)).json()
    n = fresh["tokens_evaluated"]
    assert (fresh["timings"]["cache_n"], fresh["timings"]["prompt_n"]) == (0, n)
    again = client.post("/completion", json=body).json()
    assert (again["timings"]["cache_n"], again["timings"]["prompt_n"]) == (n - 1, 1)
    assert again["content"] == fresh["content"]  # greedy, 6 tokens: the same answer here (see runtime.md)
    with client.stream("POST", "/completion", json=dict(body, stream=True, return_progress=True)) as r:
        lines = [json.loads(x[6:]) for x in r.iter_lines() if x.startswith("data: ") and x[6:].startswith("{")]
    progress = [x["prompt_progress"] for x in lines if "prompt_progress" in x]
    assert [(p["cache"], p["processed"], p["total"]) for p in progress] == [(n - 1, n - 1, n), (n - 1, n, n)]
    chat = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "temperature": 0}
    client.post("/v1/chat/completions", json=chat)
    usage = client.post("/v1/chat/completions", json=chat).json()["usage"]
    assert usage["prompt_tokens_details"]["cached_tokens"] == usage["prompt_tokens"] - 1
    assert client.post("/completion", json=dict(body, cache_prompt="yes")).status_code == 400
    metrics = client.get("/metrics").text
    cached_total = [ln for ln in metrics.splitlines() if ln.startswith("llamacpp:prompt_tokens_cached_total")]
    assert cached_total and float(cached_total[0].split()[-1]) >= 2 * (n - 1)


def test_a_slot_is_chosen_by_prompt_similarity():
    class _S:
        def __init__(self, index, tokens):
            self.index, self.tokens = index, tokens

    a, b = _S(0, [1, 2, 3, 4]), _S(1, [7, 8, 9])
    pool = SlotPool([a, b], similarity=0.1)
    assert pool.acquire(0.1, tokens=[1, 2, 5, 6]) is a  # 2 of 4 shared
    pool.release(a)
    assert pool.acquire(0.1, tokens=[5, 6]) is b  # none alike: the least recently used (b never was)
    assert pool.acquire(0.1, tokens=[7, 8, 9]) is a  # the only free one
    pool.release(b)
    pool.release(a)
    assert pool.acquire(0.1, tokens=[5]) is b  # released before a
    pool.release(b)
    fresh = SlotPool([a, b], similarity=0.0)  # similarity off; never used: the last slot, as llama-server's scan
    assert fresh.acquire(0.1, tokens=[1, 2, 3, 4]) is b


def test_the_flags():
    from bankml.cli import build_parser

    parse = lambda *a: build_parser().parse_args(["serve", *a])  # noqa: E731
    assert (parse().cache_prompt, parse("--no-cache-prompt").cache_prompt, parse("--cache-prompt").cache_prompt) == (
        True,
        False,
        True,
    )
    assert (parse().slot_prompt_similarity, parse("-sps", "0.5").slot_prompt_similarity) == (0.1, 0.5)


def _both(prompts, extra_flags=(), **options):
    """The answers of the pinned llama-server (its default: cache on; one slot, one thread) and of a fresh bankml
    model set up as it is (``options``) to the same /completion requests, in turn."""
    from starlette.testclient import TestClient

    from bankml.serve.app import create_app

    flags = ["-t", "1", "-tb", "1", "-c", "512", "-np", "1", "-fa", "off", "--no-warmup", *extra_flags]
    model = Model(smollm2_path(), n_ctx=512, n_threads=1, n_parallel=1, cache_prompt=True, **options)
    try:
        theirs, ours = [], []
        with running_llama_server(flags) as base, TestClient(create_app(model, "m")) as client:
            for prompt in prompts:  # a prompt, or a body's fields
                body = {**GREEDY, **(prompt if isinstance(prompt, dict) else {"prompt": prompt})}
                theirs.append(httpx.post(base + "/completion", json=body, timeout=120).json())
                ours.append(client.post("/completion", json=body).json())
    finally:
        model.close()
    return theirs, ours


def _same(theirs, ours):
    for a, b in zip(theirs, ours, strict=True):
        assert b["content"] == a["content"]
        assert (b["timings"]["cache_n"], b["timings"]["prompt_n"]) == (
            a["timings"]["cache_n"],
            a["timings"]["prompt_n"],
        )
        assert b["completion_probabilities"] == a["completion_probabilities"]


def test_a_repeated_prompt_is_answered_as_llama_server_answers_it():
    theirs, ours = _both((PROMPT, PROMPT, PROMPT + " and then it"))
    assert theirs[1]["timings"]["cache_n"] > 0
    _same(theirs, ours)


def test_cache_reuse_is_answered_as_llama_server_answers_it():
    """``--cache-reuse 4``: a prompt that drops a middle part of the cached one gets its later chunk shifted into
    place; then a request's ``n_cache_reuse`` 0 turns it off."""
    head = "Once upon a time there was a small town by the sea."
    middle = " The weather was often grey, and the fishermen went out before dawn."
    tail = " Every evening the children ran along the harbour wall and counted the boats coming home."
    prompts = (head + middle + tail, head + tail, head + middle + tail, {"prompt": head + tail, "n_cache_reuse": 0})
    # --cache-ram 0: without it llama-server would restore the first prompt's state from its host-memory prompt
    # cache for the third request (bankml keeps none: docs/modules/runtime.md's limitations)
    theirs, ours = _both(prompts, ("--cache-reuse", "4", "--cache-ram", "0"), cache_reuse=4)
    assert theirs[1]["timings"]["cache_n"] > theirs[1]["timings"]["prompt_n"]  # the tail came from the cache
    assert theirs[3]["timings"]["cache_n"] < theirs[3]["timings"]["prompt_n"]  # the common prefix only
    _same(theirs, ours)
