"""Property tests of the JSON schema converter (hypothesis, a fixed example budget): every schema ends in a
grammar llama.cpp's parser reads (or refuses with a GrammarError) or in a SchemaError — never another
exception — the same as dict and as JSON text; the corpus of tests/fuzz/corpus/schema is replayed.
The long harness: ``python -m tests.fuzz.fuzz_schema --minutes 5``."""

from hypothesis import HealthCheck, given, settings

from ..fuzz.fuzz_schema import DOCUMENTS, check_chat, check_convert, corpus_examples, replay_corpus

FAST = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@FAST
@given(DOCUMENTS)
def test_conversion_ends_in_a_grammar_or_a_schema_error(schema):
    check_convert(schema)


@FAST
@given(DOCUMENTS)
def test_chat_grammar_ends_in_a_grammar_or_a_schema_error(schema):
    check_chat(schema)


def test_corpus_replays():
    assert len(list(corpus_examples())) >= 8
    replay_corpus()
