"""One whole generation on SmolLM2-135M-Instruct, bankml and llama-cpp-python side by side (pytest-benchmark).

Group ``generate-smollm2``: the same chat prompt, 48 new tokens at most, llama-server's default sampler with a
fixed seed, 2 threads —

* ``bankml-json``: ``bankml.serve.runtime`` in JSON mode (what ``bankml generate --json`` runs);
* ``bankml-plain``: the same loop unconstrained;
* ``llama-cpp-python-json``: ``Llama.create_chat_completion(response_format={"type": "json_object"})``;
* ``llama-cpp-python-plain``: ``create_chat_completion`` without a response format.

Tokens/s over several prompts, with the grammar + sampling share of a decoding step: bench/generate_summary.py.
Run: ``python -m pytest bench/test_generate_bench.py --benchmark-only``.
"""

import os

import pytest

PROMPT = "Describe a cat as a JSON object with its name, age and favourite toys."
MAX_TOKENS = 48
THREADS = min(2, os.cpu_count() or 1)


@pytest.fixture(scope="module")
def model():
    from bankml.serve.runtime import Model

    m = Model(n_ctx=2048, n_threads=THREADS)
    yield m
    m.close()


@pytest.fixture(scope="module")
def llm(model):
    from bankml.serve.contexts import open_llama

    return open_llama(
        model.path,
        n_ctx=2048,
        n_batch=2048,
        n_ubatch=512,
        n_threads=THREADS,
        n_threads_batch=THREADS,
        flash_attn=False,
        verbose=False,
    )


@pytest.mark.parametrize("engine", ["bankml-json", "bankml-plain", "llama-cpp-python-json", "llama-cpp-python-plain"])
def test_generate(benchmark, engine, model, llm):
    from bankml import Constraint, SamplerParams
    from bankml.chat.inputs import ChatInputs
    from bankml.serve.request import Request

    benchmark.group = "generate-smollm2"
    messages = [{"role": "user", "content": PROMPT}]
    if engine.startswith("bankml"):
        constraint = Constraint("json_object", {"type": "object"}) if engine.endswith("json") else Constraint()

        def run():
            result = model.chat(
                Request.for_chat(ChatInputs(messages), constraint, SamplerParams(seed=7), MAX_TOKENS)
            ).run()
            return len(result.tokens)
    else:
        extra = {"response_format": {"type": "json_object"}} if engine.endswith("json") else {}

        def run():
            out = llm.create_chat_completion(
                messages,
                max_tokens=MAX_TOKENS,
                seed=7,
                temperature=0.8,
                top_k=40,
                top_p=0.95,
                min_p=0.05,
                repeat_penalty=1.0,
                **extra,
            )
            return out["usage"]["completion_tokens"]

    n = benchmark.pedantic(run, rounds=3, iterations=1, warmup_rounds=1)
    benchmark.extra_info.update(engine=engine, tokens=n)
    assert n > 0
