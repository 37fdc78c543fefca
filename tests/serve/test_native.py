"""llama-server's native ``/completion`` (bankml.serve.native): the answer and the stream in the shape its
``to_json_non_oaicompat`` writers give (tools/server/server-task.cpp of the pinned llama.cpp), the timings as
``server_slot_stats::to_json`` computes them. No model: a hand-made Result and Job."""

import json
from types import SimpleNamespace

import pytest

from bankml.errors import RequestError
from bankml.sampling.logprobs import ProbRequest
from bankml.sampling.params import SamplerParams
from bankml.serve import native
from bankml.serve.job import Event, Result

TIMINGS = {"prompt_n": 4, "prompt_ms": 8.0, "predicted_n": 3, "predicted_ms": 4.0}


def _result(finish="length", word="", text="a\nb"):
    return Result(
        tokens=[5, 6, 7],
        text=text,
        content=text,
        finish_reason=finish,
        prompt_tokens=[1, 2, 3, 4],
        stopping_word=word,
        timings=TIMINGS,
    )


def _job(stream=False):
    return SimpleNamespace(
        stream_requested=stream,
        slot_index=2,
        params=SamplerParams(),
        max_tokens=3,
        probs=ProbRequest(0, False),
        chat=False,
        chat_prompt=None,
    )


def test_read_native_reads_the_completion_fields():
    req = native.read_native(json.dumps({"prompt": "Hi", "n_predict": 4, "n_probs": 2, "stream": True}))
    assert (req.endpoint, req.prompt, req.n_predict, req.probs.n_probs, req.stream) == ("/completion", "Hi", 4, 2, True)
    assert native.read_native(json.dumps({"prompt": [1, 2]})).prompt == (1, 2)  # token ids (test_prompt_forms)
    with pytest.raises(RequestError, match='"prompt" elements must be a string, a list of tokens'):
        native.read_native(json.dumps({"prompt": 12}))


@pytest.mark.parametrize(
    "finish, word, expected", [("length", "", "limit"), ("stop", "", "eos"), ("stop", "END", "word")]
)
def test_stop_type(finish, word, expected):
    assert native.stop_type(_result(finish, word)) == expected


def test_timings_as_server_slot_stats():
    # the first generated token comes from the prompt's logits: the generation rate counts 2 steps, not 3
    assert native.timings_json(_result()) == {
        "cache_n": 0,
        "prompt_n": 4,
        "prompt_ms": 8.0,
        "prompt_per_token_ms": 2.0,
        "prompt_per_second": 500.0,
        "predicted_n": 3,
        "predicted_ms": 4.0,
        "predicted_per_token_ms": 2.0,
        "predicted_per_second": 500.0,
    }


def test_completion_json_as_to_json_non_oaicompat():
    out = native.completion_json(_result("stop", "END"), _job(), "m", "Hi", return_tokens=True)
    assert list(out) == [
        "index",
        "content",
        "tokens",
        "id_slot",
        "stop",
        "model",
        "tokens_predicted",
        "tokens_evaluated",
        "generation_settings",
        "prompt",
        "has_new_line",
        "truncated",
        "stop_type",
        "stopping_word",
        "tokens_cached",
        "timings",
    ]
    assert (out["content"], out["tokens"], out["id_slot"], out["stop"], out["model"]) == (
        "a\nb",
        [5, 6, 7],
        2,
        True,
        "m",
    )
    assert (out["tokens_predicted"], out["tokens_evaluated"], out["tokens_cached"]) == (3, 4, 6)
    assert (out["has_new_line"], out["stop_type"], out["stopping_word"], out["prompt"]) == (True, "word", "END", "Hi")
    assert out["generation_settings"]["n_predict"] == 3
    # without return_tokens llama-server keeps no generated ids; streamed, the final result has no text
    assert native.completion_json(_result(), _job(), "m", "Hi")["tokens"] == []
    streamed = native.completion_json(_result(), _job(stream=True), "m", "Hi", return_tokens=True)
    assert (streamed["content"], streamed["tokens"]) == ("", [])


def test_partial_json_and_sse():
    event = Event(token=9, text="x", content="x", index=1, partial=True)
    out = native.partial_json(event, _job(stream=True), 4)
    assert out == {
        "index": 0,
        "content": "x",
        "tokens": [9],
        "stop": False,
        "id_slot": 2,
        "tokens_predicted": 1,
        "tokens_evaluated": 4,
    }
    assert native.sse({"a": "é"}) == 'data: {"a":"é"}\n\n'.encode()


def test_generation_settings_in_task_params_to_json_order():
    """task_params::to_json() (the whole object, not /slots' metrics): the DRY breakers, stop strings, logit
    biases and grammar fields in its places, the server's reasoning format for a raw prompt."""
    job = _job()
    job.params = SamplerParams.from_server({"logit_bias": [[5, 1.5]]})
    job.stop, job.grammar_text = ["}"], "root ::= [a]"
    job.model = SimpleNamespace(reasoning_format="deepseek")
    out = native.generation_settings(job)
    keys = list(out)
    for before, name in [
        ("dry_penalty_last_n", "dry_sequence_breakers"),
        ("adaptive_decay", "stop"),
        ("stream", "logit_bias"),
        ("min_keep", "grammar"),
        ("grammar", "grammar_lazy"),
        ("grammar_lazy", "grammar_triggers"),
        ("grammar_triggers", "preserved_tokens"),
        ("preserved_tokens", "chat_format"),
    ]:
        assert keys.index(name) == keys.index(before) + 1, name
    assert len(keys) == 49  # llama-server's to_json() fields
    assert (out["stop"], out["logit_bias"], out["grammar"]) == (["}"], [{"bias": 1.5, "token": 5}], "root ::= [a]")
    assert out["dry_sequence_breakers"] == ["\n", ":", '"', "*"]
    assert out["reasoning_format"] == "deepseek"
