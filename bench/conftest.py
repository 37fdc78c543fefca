"""Fixtures of the mask benchmarks: each engine's grammar state at the representative positions of the walk.

Run: ``python -m pytest bench/ --benchmark-only`` (about a minute on a 2-core machine).
BANKML_BENCH_SECONDS sets the time each benchmark aims to spend measuring (default 1 s; 5 to 1000 rounds).
"""

import functools
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import walks  # noqa: E402

BENCH_VOCABS = ("qwen2", "llama3")
BENCH_GRAMMARS = ("json",)


@functools.lru_cache(maxsize=None)
def prepared(engine_name, vocab_name, grammar_name):
    """(engine, {position name: matcher}) for one engine, vocabulary and grammar: one walk, cloned at each position."""
    eng = walks.engine(engine_name, vocab_name)
    compiled = eng.compile(walks.grammar_text(grammar_name))
    positions = walks.walk_positions(vocab_name)
    states = walks.states_along(eng, compiled, walks.walk_tokens(vocab_name), positions.values())
    return eng, {name: states[index] for name, index in positions.items()}


def pytest_generate_tests(metafunc):
    if {"vocab_name", "position", "grammar_name"} <= set(metafunc.fixturenames):
        cases = []
        for grammar_name in BENCH_GRAMMARS:
            for vocab_name in BENCH_VOCABS:
                for position in walks.walk_positions(vocab_name):
                    cases.append(
                        pytest.param(grammar_name, vocab_name, position, id=f"{grammar_name}-{vocab_name}-{position}")
                    )
        metafunc.parametrize(("grammar_name", "vocab_name", "position"), cases)


@pytest.fixture
def mask_state(request, grammar_name, vocab_name, position):
    """A function engine name -> (engine, matcher at this position, output buffer); skips absent engines."""

    def get(engine_name):
        module = walks.OPTIONAL_MODULES.get(engine_name)
        if module:
            pytest.importorskip(module)
        eng, states = prepared(engine_name, vocab_name, grammar_name)
        return eng, states[position], eng.new_mask()

    return get
