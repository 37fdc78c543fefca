"""Property tests of request resolution and the content parser (hypothesis, a fixed example budget):
``from_openai`` / ``from_ollama_text`` give a Constraint or a RequestError (and its grammar or a
SchemaError), ``openai.sampler_fields`` / ``ollama.sampler_options`` params or a RequestError, the content parser two strings or a
ContentError, its incremental scanner the same deltas as a full reparse — never another exception.
The corpus of tests/fuzz/corpus/{request,content} is replayed. The long harness:
``python -m tests.fuzz.fuzz_request --minutes 5``."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ..fuzz.fuzz_request import (
    ANSWERS,
    OLLAMA_REQUESTS,
    OPENAI_REQUESTS,
    RAW_ANSWERS,
    SAMPLER_REQUESTS,
    check_content,
    check_ollama,
    check_openai,
    check_sampler_fields,
    corpus_answers,
    corpus_requests,
    replay_corpus,
)

FAST = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@FAST
@given(OPENAI_REQUESTS)
def test_openai_constraint_resolution(req):
    check_openai(req)


@FAST
@given(OLLAMA_REQUESTS)
def test_ollama_format_resolution(req):
    check_ollama(req)


@FAST
@given(SAMPLER_REQUESTS, st.booleans())
def test_sampler_fields_resolution(req, ollama):
    check_sampler_fields({"options": req} if ollama else req, ollama)


@FAST
@given(
    RAW_ANSWERS | ANSWERS,
    st.lists(st.integers(0, 64), max_size=4),
    st.booleans(),
    st.sampled_from(["chatml", "qwen3"]),
    st.booleans(),
)
def test_content_parser(raw, cuts, json_mode, template, thinking):
    check_content(raw, cuts, json_mode, template, thinking)


def test_corpus_replays():
    assert len(list(corpus_requests())) >= 4 and len(list(corpus_answers())) >= 4
    replay_corpus()
