"""Token log-probabilities equal the pinned llama-server's, bit for bit.

``tests/data/server_logprobs_recordings.json`` holds requests with ``logprobs`` / ``top_logprobs`` /
``n_probs`` / ``post_sampling_probs`` answered by the pinned llama-server with SmolLM2-135M-Instruct
(``tests/oracle/record_logprobs.py``). Each is answered again through bankml's runtime and over HTTP
(``bankml serve``'s app): the ``logprobs`` objects, every chunk of a stream, the token ids, texts and bytes are
compared as JSON text (``json.dumps`` prints a double's shortest round-trip form, so equal text is equal bits).
As in test_e2e_oracle.py, the recordings hold where ggml runs the kernels they were made with; elsewhere the
pinned llama-server is built and run here and answers them live.

The formula itself (``get_token_probabilities``: std::partial_sort, then a float32 softmax over all n_vocab
candidates in the order the partial sort leaves them) is checked against that C++ code compiled on this machine,
on logits with many ties, for n_top 1 to above n_vocab.
"""

import json
import os
import pathlib

import numpy as np
import pytest

from bankml.chat.constraint import RequestError
from bankml.sampling import logprobs as lp
from bankml.sampling._sampler import Sampler, token_logarithm, token_probabilities
from bankml.sampling.params import SamplerParams

from ..oracle.record_logprobs import VOLATILE, digest_long_lists
from ..oracle.record_server import kernels_fingerprint, machine_recording
from ..oracle_support import ORACLE_STATS, recorded_job, recorded_model, sse_chunks

# the recording of this machine's kernels where there is one (record_logprobs --machine), else the shipped one
DATA = machine_recording(pathlib.Path(__file__).resolve().parent.parent / "data" / "server_logprobs_recordings.json")
RECORDING = json.loads(DATA.read_text(encoding="utf-8"))
RECORDS = RECORDING["recordings"]
RECORDINGS_HOLD = RECORDING.get("kernels") == kernels_fingerprint() and os.environ.get("BANKML_E2E_LIVE", "") in (
    "",
    "0",
)
CHAT = "/v1/chat/completions"


def _text(obj):
    return json.dumps(obj, sort_keys=True, ensure_ascii=False)


# --- the formula against llama-server's C++ ---------------------------------------------------------------


def _tied_logits(rng, n):
    x = (rng.normal(size=n) * 3).astype(np.float32)
    x[rng.integers(0, n, n // 3)] = np.float32(1.5)  # a third of the vocabulary tied
    x[rng.integers(0, n, 5)] = x.max()  # ties at the top
    return x


def test_token_probabilities_equal_llama_servers_compiled_formula():
    import llama_cpp  # noqa: F401  (the oracle: the test extra installs it; a missing oracle fails, never skips)

    from ..oracle.record_server import _server_logprobs

    rng = np.random.default_rng(13)
    cases = [(1000, 1), (1000, 5), (1000, 20), (300, 300), (50, 60), (49152, 20), (49152, 1), (2000, 1999)]
    batches = [(_tied_logits(rng, n), k) for n, k in cases]
    theirs = _server_logprobs(batches)
    for (logits, k), want in zip(batches, theirs, strict=True):
        ids, p = token_probabilities(logits, k)
        top = min(k, len(logits))
        assert len(ids) == len(p) == len(logits)
        assert sorted(ids.tolist()) == list(range(len(logits)))  # every candidate, once
        mine = [(int(i), token_logarithm(q)) for i, q in zip(ids[:top], p[:top])]
        assert mine == want, (len(logits), k)
        ORACLE_STATS["llama-server get_token_probabilities calls, bit-identical"] += 1


def test_the_summation_order_is_the_partial_sorts():
    # the same float32 terms summed in token-id order give another sum on these logits: the order the partial
    # sort leaves is what makes the bits llama-server's
    rng = np.random.default_rng(5)
    logits = _tied_logits(rng, 49152)
    ids, _ = token_probabilities(logits, 20)
    terms = np.exp(logits - logits.max())
    assert float(np.cumsum(terms[ids])[-1]) != float(np.cumsum(terms)[-1])


def test_logarithm_of_zero_is_the_lowest_float():
    assert token_logarithm(0.0) == -3.4028234663852886e38
    assert token_logarithm(1.0) == 0.0
    assert token_logarithm(0.5) == float(np.log(np.float32(0.5)))


def test_candidates_are_the_last_draws_sorted_by_probability():
    class Sized:
        def __len__(self):
            return 6

    sampler = Sampler(SamplerParams(temperature=1.0, top_k=3, seed=4), Sized())
    assert sampler.candidates()[0].size == 0
    logits = np.array([0.1, 2.0, -1.0, 1.0, 3.0, 0.5], dtype=np.float32)
    token = sampler.sample(logits)
    ids, p = sampler.candidates()
    assert ids.tolist() == [4, 1, 3] and token in ids.tolist()
    assert (np.diff(p) <= 0).all() and abs(float(p.sum()) - 1) < 1e-6


# --- the request fields as llama-server reads them --------------------------------------------------------

READ = [
    # (endpoint, body, n_probs, post_sampling)
    (CHAT, {}, 0, False),
    (CHAT, {"logprobs": True}, 20, False),
    (CHAT, {"logprobs": True, "top_logprobs": 3}, 3, False),
    (CHAT, {"logprobs": True, "top_logprobs": 0}, 0, False),
    (CHAT, {"logprobs": True, "top_logprobs": 2.9}, 2, False),
    (CHAT, {"logprobs": True, "top_logprobs": "x"}, 20, False),  # json_value's default on a type error
    (CHAT, {"logprobs": True, "n_probs": 7}, 20, False),  # logprobs' n_probs wins
    (CHAT, {"logprobs": False}, 0, False),
    (CHAT, {"logprobs": 4}, 4, False),  # not true: the native alias reads it
    (CHAT, {"n_probs": 3, "post_sampling_probs": True}, 3, True),
    (CHAT, {"logprobs": True, "top_logprobs": -5}, 0, False),
    ("/v1/completions", {"logprobs": 5}, 5, False),
    ("/v1/completions", {"logprobs": True}, 1, False),
    ("/v1/completions", {"logprobs": 5, "n_probs": 2}, 2, False),
    ("/v1/completions", {"logprobs": None, "n_probs": None}, 0, False),
    ("/v1/completions", {"logprobs": 50000}, 50000, False),
]


@pytest.mark.parametrize("endpoint,body,n_probs,post", READ)
def test_fields_read_as_llama_server_reads_them(endpoint, body, n_probs, post):
    probs = lp.read_request(body, endpoint)
    assert (probs.n_probs, probs.post_sampling) == (n_probs, post)


@pytest.mark.parametrize(
    "endpoint,body,message",
    [
        (CHAT, {"top_logprobs": 3}, "top_logprobs requires logprobs to be set to true"),
        (CHAT, {"logprobs": 1, "top_logprobs": 3}, "top_logprobs requires logprobs to be set to true"),
        (
            CHAT,
            {"logprobs": True, "stream": True, "tools": [{"type": "function"}]},
            "logprobs is not supported with tools + stream",
        ),
        ("/v1/completions", {"logprobs": "5"}, "Field 'logprobs': [json.exception.type_error.302] type must be number"),
        ("/v1/completions", {"post_sampling_probs": 1}, "Field 'post_sampling_probs'"),
    ],
)
def test_fields_llama_server_refuses_are_refused(endpoint, body, message):
    with pytest.raises(RequestError) as e:
        lp.read_request(body, endpoint)
    assert message in str(e.value)


def test_answers_too_large_are_refused():
    probs = lp.read_request({"logprobs": 50000}, "/v1/completions")
    lp.check_size(probs, 49152, 20, 2048)  # 983,040 entries: answered
    with pytest.raises(RequestError, match="limit"):
        lp.check_size(probs, 49152, -1, 2048)  # up to the context: refused
    lp.check_size(lp.read_request({"logprobs": True}, CHAT), 49152, -1, 32768)  # 20 per token, 32k context


# --- the recorded requests --------------------------------------------------------------------------------


def test_recordings_cover_the_shapes():
    reqs = [(r["endpoint"], r["request"]) for r in RECORDS]
    assert len(reqs) >= 20
    assert {q.get("top_logprobs") for e, q in reqs if e == CHAT} >= {0, 1, 5, 20, None}
    assert any(q.get("stream") for e, q in reqs if e == CHAT) and any(q.get("stream") for e, q in reqs if e != CHAT)
    assert any(q.get("response_format", {}).get("type") == "json_schema" for _, q in reqs)
    assert any(q.get("post_sampling_probs") for _, q in reqs) and any(q.get("n_probs") for _, q in reqs)
    assert any(q.get("temperature") == 0 for _, q in reqs) and any(q.get("temperature", 0) > 0 for _, q in reqs)
    assert any(q.get("logprobs", 0) is not True and q.get("logprobs", 0) > 49152 for _, q in reqs)


@pytest.fixture(scope="module")
def records():
    if RECORDINGS_HOLD:
        return RECORDS
    from ..oracle.record_logprobs import record

    return record()["recordings"]


@pytest.fixture(scope="module")
def model():
    m = recorded_model(RECORDING)
    yield m
    m.close()


def _record(records, name):
    return next(r for r in records if r["name"] == name)


def _job(model, record):
    job = recorded_job(model, record)
    job.probs = lp.read_request(record["request"], record["endpoint"])
    return job


UNSTREAMED = [r["name"] for r in RECORDS if not r["request"].get("stream")]
NAMES = [r["name"] for r in RECORDS]


@pytest.mark.parametrize("name", UNSTREAMED)
def test_runtime_logprobs_equal_llama_servers(model, records, name):
    record = _record(records, name)
    job = _job(model, record)
    result = job.run()
    records_kept = lp.trim_stop_word(
        result.probs, result.stopping_word, lambda text: model.tokenize(text, False, False)
    )
    want = record["response"]["choices"][0].get("logprobs")
    if want is None:
        assert not records_kept
    else:
        got = digest_long_lists(lp.probs_to_json(records_kept, job.probs.post_sampling))
        assert _text(got) == _text(want["content"])
        ORACLE_STATS["llama-server logprob entries identical (runtime)"] += len(got)


def _strip(obj):
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if k not in VOLATILE}
    return obj


@pytest.fixture(scope="module")
def client(model):
    from starlette.testclient import TestClient

    from bankml.serve.app import create_app

    with TestClient(create_app(model, "SmolLM2-135M-Instruct")) as c:
        yield c


def _choices(answer):
    return [c if c == "[DONE]" else c.get("choices") for c in answer] if isinstance(answer, list) else answer["choices"]


@pytest.mark.parametrize("name", NAMES)
def test_http_logprobs_equal_llama_servers(client, records, name):
    """Every choice of the answer (message or text, finish reason, logprobs), and for a stream every chunk's,
    as llama-server sent them."""
    record = _record(records, name)
    response = client.post(record["endpoint"], json=record["request"])
    assert response.status_code == 200, response.text
    want = record["response"]
    if record["request"].get("stream"):
        got = digest_long_lists([c if c == "[DONE]" else _strip(c) for c in sse_chunks(response.text)])
        assert _text(_choices(got)) == _text(_choices(want))
    else:
        got = digest_long_lists(_strip(response.json()))
        assert _text(got["choices"]) == _text(want["choices"])
        for key in ("completion_tokens", "prompt_tokens"):
            assert got["usage"][key] == want["usage"][key]
    n = sum(
        len((c.get("logprobs") or {}).get("content") or [])
        for cs in _choices(want)
        if cs != "[DONE]"
        for c in (cs if isinstance(cs, list) else [cs])
    )
    ORACLE_STATS["llama-server logprob entries identical (bankml serve)"] += n


# --- the shape of a stream, without logprobs ------------------------------------------------------------------

STREAMED = [r["name"] for r in RECORDS if r["request"].get("stream")]
PROB_FIELDS = ("logprobs", "top_logprobs", "n_probs", "post_sampling_probs")


def _without_probs(chunk, endpoint):
    """A recorded chunk as llama-server sends it without logprobs: the completions chunk's ``logprobs`` null
    (to_json_oaicompat's default), the chat chunk's absent; the rest (which chunks, in which order, their
    text and deltas) does not depend on them (send_partial_response is the same)."""
    if chunk == "[DONE]" or not chunk.get("choices"):
        return chunk
    choices = []
    for c in chunk["choices"]:
        c = dict(c)
        if endpoint == CHAT:
            c.pop("logprobs", None)
        else:
            c["logprobs"] = None
        choices.append(c)
    return dict(chunk, choices=choices)


@pytest.mark.parametrize("name", STREAMED)
def test_stream_chunks_without_logprobs_are_llama_servers(client, records, name):
    """Issue 29: a stream without logprobs is chunked as llama-server chunks it: one chunk per partial result
    (a completion's empty text included, a chat's message diffs), the chat role delta with the first token's
    partial result and none when that token is not whole UTF-8 (the recorded emoji stream has none)."""
    record = _record(records, name)
    request = {k: v for k, v in record["request"].items() if k not in PROB_FIELDS}
    response = client.post(record["endpoint"], json=request)
    assert response.status_code == 200, response.text
    got = [c if c == "[DONE]" else _strip(c) for c in sse_chunks(response.text)]
    want = [_without_probs(c, record["endpoint"]) for c in record["response"]]
    assert _text(_choices(got)) == _text(_choices(want))
    ORACLE_STATS["llama-server stream chunks identical without logprobs (bankml serve)"] += len(want)


def test_stream_shapes_covered():
    """The recordings hold what the shape turns on: a chat stream whose first token is not whole UTF-8 (no role
    delta), and completions streams with empty-text chunks before the last."""
    streams = {r["name"]: r for r in RECORDS if r["request"].get("stream")}
    no_role = [
        n
        for n, r in streams.items()
        if r["endpoint"] == CHAT and not any("role" in c["choices"][0]["delta"] for c in r["response"][:1])
    ]
    assert no_role == ["stream/chat/emoji/greedy/top2"]
    empty = sum(
        1
        for r in streams.values()
        if r["endpoint"] != CHAT
        for c in r["response"][:-2]
        if c != "[DONE]" and c["choices"] and c["choices"][0]["text"] == ""
    )
    assert empty == 4
