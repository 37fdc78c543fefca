"""The templates whose handler builds no response-format grammar (issue 29): what ``bankml serve`` samples with is
what the pinned llama-server samples with.

Which templates they are comes from llama.cpp itself: the recorded ``common_chat_templates_apply`` answers
(tests/data/chat_templates_oracle.json.gz) whose grammar for a schema response format is empty (GigaChat 3,
Functionary v3.2, Kimi K2 / K3, Ling 3). For them llama-server's ``oaicompat_chat_params_parse`` sets no
``grammar`` (it does only when the chat grammar is not empty) and copies the body's own fields, so
``server-schema.cpp``'s ``json_schema`` / ``grammar`` handler decides: a top-level ``json_schema`` (without a
``grammar`` key) is converted bare, a ``grammar`` is taken as it is, and a ``response_format`` alone leaves the
answer unconstrained. The source lines this rests on are checked to be in the pinned server's source, and the
bare conversion is bankml's converter, which is checked against llama.cpp's elsewhere."""

import re

import pytest

from bankml import json_schema_to_grammar
from bankml.chat.constraint import Constraint, from_openai
from bankml.chat.inputs import ChatInputs
from bankml.chat.template import ChatTemplate, for_constraint
from bankml.serve.request import Request

from ..oracle_support import chat_templates_recording, smollm2_path
from .test_request_fields import _server_source

RECORDED = chat_templates_recording()["templates"]
# the templates on which llama.cpp's chat layer builds no grammar for a response format
NO_GRAMMAR = sorted(
    name
    for name, rec in RECORDED.items()
    if rec["answers"]["schema-object/think-off"]["ok"] and rec["answers"]["schema-object/think-off"]["grammar"] == ""
)
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
MESSAGES = [{"role": "user", "content": "Where?"}]


def test_the_five_handlers():
    assert len(NO_GRAMMAR) == 7  # GigaChat 3, Functionary v3.2, Ling 3, and Kimi K2 (three templates) / K3
    assert {n.split("-")[0] for n in NO_GRAMMAR} == {"GigaChat3", "Kimi", "inclusionai", "meetkai", "moonshotai"}


def test_the_server_source_rules():
    """The pinned llama-server's rules the fallback ports: the chat grammar only when not empty, the body's
    other fields copied, the json_schema handler that runs only without a grammar key."""
    common = _server_source("server-common.cpp")
    assert re.search(r'if \(!chat_params\.grammar\.empty\(\)\) \{\s*llama_params\["grammar"\]', common)
    assert 'if (!llama_params.contains(item.key()) || item.key() == "n_predict")' in common
    schema = _server_source("server-schema.cpp")
    assert 'if (data.contains("json_schema") && !data.contains("grammar"))' in schema


@pytest.fixture(scope="module")
def model():
    from bankml.serve.runtime import Model

    m = Model(smollm2_path(), n_ctx=4096, n_threads=1, n_threads_batch=1, n_parallel=1, reasoning="off")
    yield m
    m.close()


def _use(model, name):
    model.chat_template = RECORDED[name]["source"]
    model._chat_layer = None


@pytest.mark.parametrize("name", NO_GRAMMAR)
def test_what_llama_server_samples_with(model, name):
    _use(model, name)
    # a response_format alone: no grammar at all (bankml used to refuse the empty chat grammar)
    for body in (
        {"response_format": {"type": "json_schema", "json_schema": {"schema": SCHEMA}}},
        {"response_format": {"type": "json_object"}},
    ):
        job = model.chat(Request.for_chat(ChatInputs(MESSAGES), from_openai(body), n_predict=4))
        assert job.grammar_text is None and job.grammar is None, body
    # the request's own top-level json_schema: converted bare, not prefilled
    job = model.chat(Request.for_chat(ChatInputs(MESSAGES), from_openai({"json_schema": SCHEMA}), n_predict=4))
    assert job.grammar_text == json_schema_to_grammar(SCHEMA)[0]
    assert job.prefill_tokens == []
    job = model.chat(Request.for_chat(ChatInputs(MESSAGES), from_openai({"json_schema": {}}), n_predict=4))
    assert job.grammar_text == json_schema_to_grammar({"type": "object"})[0]
    # a response_format beside a user grammar: the grammar
    body = {"response_format": {"type": "json_object"}, "grammar": 'root ::= "{}"'}
    job = model.chat(Request.for_chat(ChatInputs(MESSAGES), from_openai(body), n_predict=4))
    assert job.grammar_text == 'root ::= "{}"'
    # the same through the chat layer alone, and the opt-in that constrains with the bare schema grammar
    tmpl = ChatTemplate(RECORDED[name]["source"])
    rf = from_openai({"response_format": {"type": "json_schema", "json_schema": {"schema": SCHEMA}}})
    inputs = ChatInputs(MESSAGES, enable_thinking=False)
    assert for_constraint(tmpl, inputs, rf).grammar is None
    assert for_constraint(tmpl, inputs, rf, bare_schema_fallback=True).grammar == json_schema_to_grammar(SCHEMA)[0]


def test_a_template_with_a_response_format_grammar(model):
    """The control: where llama.cpp builds the response-format grammar, it is the one sampled with (prefilled)."""
    name = "Qwen-Qwen3-0.6B.jinja"
    assert name not in NO_GRAMMAR
    _use(model, name)
    job = model.chat(
        Request.for_chat(ChatInputs(MESSAGES), from_openai({"response_format": {"type": "json_object"}}), n_predict=4)
    )
    want = RECORDED[name]["answers"]["json_object/think-off"]["grammar"]
    assert job.grammar_text == want and want
    assert Constraint("json_schema", SCHEMA).fallback is None
