"""Whole-vocabulary mask time at a few positions of JSON-schema walks, every engine in one group.

Groups are ``schema-<schema>-<vocabulary>-<position>`` (for example ``schema-invoice-qwen2-in-date``):
the state before a token of the schema's instance document (``schema_walks.BENCH_POSITIONS``),
reached by each engine through its own front-end for the schema -- bankml and libllama llama.cpp's
GBNF of it, XGrammar ``compile_json_schema``, llguidance ``grammar_from_json_schema`` -- so the
rows of a group are the same text prefix, not the same grammar. Each round fills a whole-vocabulary
mask of a fresh clone of the state (cloned outside the timing). bankml's clones share the context
of their Rules, which keeps the masks it has worked out: after the first round bankml answers from
that cache (the warm case; ``schema_summary.py`` reports cold walks too).

Run: ``python -m pytest bench/test_schema_bench.py --benchmark-only``.
"""

import functools

import pytest
import schema_walks
import walks
from test_mask_bench import ENGINES, _rounds_for

BENCH_VOCABS = ("qwen2", "llama3")


@functools.lru_cache(maxsize=None)
def prepared(engine_name, vocab_name, schema_name):
    """(engine, {position name: matcher}) along one walk of the schema's instance."""
    eng = walks.engine(engine_name, vocab_name)
    compiled = schema_walks.compile_schema(eng, schema_name)
    positions = schema_walks.bench_positions(schema_name, vocab_name)
    states = walks.states_along(eng, compiled, schema_walks.walk_tokens(schema_name, vocab_name), positions.values())
    return eng, {name: states[index] for name, index in positions.items()}


def pytest_generate_tests(metafunc):
    if {"schema_name", "vocab_name", "schema_position"} <= set(metafunc.fixturenames):
        cases = []
        for schema_name in schema_walks.BENCH_POSITIONS:
            for vocab_name in BENCH_VOCABS:
                for position in schema_walks.bench_positions(schema_name, vocab_name):
                    cases.append(
                        pytest.param(schema_name, vocab_name, position, id=f"{schema_name}-{vocab_name}-{position}")
                    )
        metafunc.parametrize(("schema_name", "vocab_name", "schema_position"), cases)


@pytest.mark.parametrize("engine_name", ENGINES)
def test_schema_mask(benchmark, engine_name, schema_name, vocab_name, schema_position):
    module = walks.OPTIONAL_MODULES.get(engine_name)
    if module:
        pytest.importorskip(module)
    eng, states = prepared(engine_name, vocab_name, schema_name)
    matcher, out = states[schema_position], eng.new_mask()
    benchmark.group = f"schema-{schema_name}-{vocab_name}-{schema_position}"

    def fresh_state():
        return (eng.clone(matcher), out), {}

    benchmark.pedantic(eng.fill, setup=fresh_state, rounds=_rounds_for(eng, matcher, out), iterations=1)
    eng.fill(matcher, out)
    allowed = eng.allowed_ids(matcher, out)
    count, digest = walks.ids_hash(allowed)
    benchmark.extra_info.update(
        engine=engine_name,
        version=walks.engine_version(engine_name),
        front_end=schema_walks.FRONT_ENDS[engine_name],
        n_vocab=eng.n_vocab,
        allowed=count,
        mask_hash=f"{digest:016x}",
    )
    assert 0 < len(allowed) <= eng.n_vocab
