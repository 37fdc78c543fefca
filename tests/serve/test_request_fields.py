"""No request field silently ignored (issue 13, acceptance 2, tools aside): every field of the OpenAI
``/v1/chat/completions`` and ``/v1/completions`` requests (as the official ``openai`` client types them, and as
the pinned llama-server reads them: ``server-schema.cpp``'s fields and ``oaicompat_*_params_parse``) and of
Ollama's ``/api/chat`` and ``/api/generate`` (the ``ollama`` client's ``ChatRequest``, ``GenerateRequest``,
``Options``) is in ``bankml.serve.fields``'s tables, and is honoured, accepted (no bearing on the answer: the
same answer with and without it) or refused with a 400 naming it, before any token is computed."""

import json
import re
import tarfile

import pytest

from bankml.chat.inputs import ChatInputs
from bankml.errors import RequestError
from bankml.serve import fields as rf
from bankml.serve.request import Request

from ..oracle.build_converter import cache_dir, sdist_tarball
from ..oracle_support import smollm2_path
from .serve_support import smollm2_client

SERVER_DIR = "llama_cpp_python-0.3.36/vendor/llama.cpp/tools/server/"


def _server_source(name):
    with tarfile.open(sdist_tarball(cache_dir())) as tar:
        return tar.extractfile(SERVER_DIR + name).read().decode("utf-8")


def _llama_server_fields():
    """The body fields the pinned llama-server reads: its native parameters (server-schema.cpp, with their
    aliases) and what oaicompat_chat_params_parse / oaicompat_completion_params_parse read from the body."""
    schema = _server_source("server-schema.cpp")
    native = set(re.findall(r'new field_[a-z_]+\("([a-z_.]+)"', schema)) | set(
        re.findall(r'add_alias\("([a-z_]+)"\)', schema)
    )
    native.discard("include_usage")  # the field of stream_options (field_nested), not of the body
    common = _server_source("server-common.cpp")
    start = common.index("json oaicompat_chat_params_parse(")
    chat = common[start : common.index("json format_embeddings_response_oaicompat", start)]
    chat_fields = (
        set(re.findall(r'json_value\(body, "([a-z_]+)"', chat))
        | set(re.findall(r'body\.contains\("([a-z_]+)"\)', chat))
        | set(re.findall(r'body\.at\("([a-z_]+)"\)', chat))
    )
    start = common.index("json oaicompat_completion_params_parse(")
    cmpl = common[start : common.index("\n}\n", start)]
    cmpl_fields = (
        set(re.findall(r'json_value\(body, "([a-z_]+)"', cmpl))
        | set(re.findall(r'body\.contains\("([a-z_]+)"\)', cmpl))
        | {"best_of", "suffix"}
    )
    return native, chat_fields, cmpl_fields


# the field sets every table must cover
def _openai_fields():
    from openai.types import completion_create_params as cmpl
    from openai.types.chat import completion_create_params as chat

    return set(chat.CompletionCreateParamsBase.__annotations__), set(cmpl.CompletionCreateParamsBase.__annotations__)


def _ollama_fields():
    import ollama._types as t

    return set(t.ChatRequest.model_fields), set(t.GenerateRequest.model_fields), set(t.Options.model_fields)


def test_every_field_is_in_a_table():
    native, chat_fields, cmpl_fields = _llama_server_fields()
    assert len(native) >= 70 and {"messages", "tools", "chat_template_kwargs", "reasoning_format"} <= chat_fields
    openai_chat, openai_cmpl = _openai_fields()
    ollama_chat, ollama_generate, options = _ollama_fields()
    missing = {
        "/v1/chat/completions": (native | chat_fields | openai_chat) - set(rf.CHAT),
        "/v1/completions": (native | cmpl_fields | openai_cmpl) - set(rf.COMPLETIONS) - {"messages"},
        "/api/chat": ollama_chat - set(rf.OLLAMA_CHAT),
        "/api/generate": ollama_generate - set(rf.OLLAMA_GENERATE),
        "options": options - set(rf.OLLAMA_OPTIONS),
    }
    assert all(not m for m in missing.values()), missing


# where each honoured field is shown honoured (a test that fails if it were ignored)
HONOURED_BY = {
    "stream": "tests/serve/test_e2e_oracle.py::test_same_http_answer_as_llama_server (stream/json_object/seed8)",
    "stream_options": "tests/serve/test_server.py::test_streaming_without_include_usage_puts_usage_on_the_finish_chunk",
    "return_tokens": "tests/serve/test_e2e_oracle.py::test_same_http_answer_as_llama_server (tokens)",
    "response_format": "tests/serve/test_e2e_oracle.py, tests/serve/test_e2e_templates.py (json_object, json_schema)",
    "json_schema": "tests/serve/test_e2e_oracle.py (json_schema-field/recipe/greedy)",
    "grammar": "tests/serve/test_e2e_oracle.py (grammar/item-list/seed17)",
    "messages": "tests/serve/test_e2e_oracle.py",
    "prompt": "tests/serve/test_e2e_oracle.py (completions/*)",
    "stop": "tests/serve/test_e2e_oracle.py (plain/count/stop)",
    "chat_template_kwargs": "test_chat_fields_are_honoured, tests/serve/test_e2e_templates.py (think/*)",
    "reasoning_format": "test_chat_fields_are_honoured, tests/serve/test_e2e_templates.py (reasoning_format-none)",
    "reasoning_effort": "test_chat_fields_are_honoured",
    "thinking_budget_tokens": "tests/serve/test_e2e_templates.py (think/*/budget*)",
    "reasoning_budget_tokens": "test_chat_fields_are_honoured",
    "reasoning_budget_message": "test_chat_fields_are_honoured",
    "add_generation_prompt": "test_chat_fields_are_honoured",
    "continue_final_message": "test_chat_fields_are_honoured",
    "tool_choice": "tests/serve/test_e2e_tools.py (required/*, none/*), test_tool_requests_llama_server_refuses",
    "tools": "tests/serve/test_e2e_tools.py::test_bankml_serve_answers_like_llama_server (42 recorded tool requests), "
    "tests/serve/test_e2e_tools.py::test_ollama_client_second_turn_is_llama_server_s",
    "parallel_tool_calls": "tests/serve/test_e2e_tools.py (required/parallel/prefill/seed3: two and three calls)",
    "think": "test_ollama_think_is_llama_server_s_reasoning",
    "format": "tests/serve/test_server.py::test_ollama_chat_schema_format",
    "options": "tests/serve/test_server.py",
    "system": "tests/serve/test_server.py::test_ollama_generate",
    "raw": "tests/serve/test_server.py::test_ollama_generate",
    "logprobs": "tests/sampling/test_logprobs.py::test_http_logprobs_equal_llama_servers (chat/*, completions/*)",
    "top_logprobs": "tests/sampling/test_logprobs.py::test_http_logprobs_equal_llama_servers (chat/*/top0|1|2|3|5|20)",
    "n_probs": "tests/sampling/test_logprobs.py::test_http_logprobs_equal_llama_servers (*native-n_probs*, *n_probs4)",
    "post_sampling_probs": "tests/sampling/test_logprobs.py::test_http_logprobs_equal_llama_servers (*post_sampling*)",
    "verbose": "tests/serve/test_server_flags.py::test_seed_n_predict_and_verbose_defaults",
    "timings_per_token": "tests/serve/test_server_flags.py::test_timings_per_token_and_progress_in_a_chat_stream",
    "return_progress": "tests/serve/test_server_flags.py::test_progress_in_a_native_stream",
    "cache_prompt": "tests/serve/test_prompt_cache.py::test_the_request_field_and_the_reports",
    "n_cache_reuse": "tests/serve/test_prompt_cache.py::test_cache_reuse_is_answered_as_llama_server_answers_it",
    "ignore_eos": "tests/serve/test_ignore_eos.py::test_ignore_eos_in_generation_settings",
    "n": "tests/serve/test_server_flags.py::test_several_completions",
    "n_cmpl": "tests/serve/test_server_flags.py::test_several_completions",
    "id_slot": "tests/serve/test_slot_save.py::test_a_saved_slot_restored_into_another_is_reused",
}
SAMPLER = {
    "n_predict",
    "max_tokens",
    "max_completion_tokens",
    "seed",
    "temperature",
    "dynatemp_range",
    "dynatemp_exponent",
    "top_k",
    "top_p",
    "min_p",
    "typical_p",
    "top_n_sigma",
    "xtc_probability",
    "xtc_threshold",
    "repeat_last_n",
    "repeat_penalty",
    "frequency_penalty",
    "presence_penalty",
    "dry_multiplier",
    "dry_base",
    "dry_allowed_length",
    "dry_penalty_last_n",
    "dry_sequence_breakers",
    "mirostat",
    "mirostat_tau",
    "mirostat_eta",
    "adaptive_target",
    "adaptive_decay",
    "min_keep",
    "samplers",
    "logit_bias",
    "num_predict",
}  # tests/sampling/test_sampler_server.py, tests/serve/test_e2e_oracle.py (seeded requests)


def test_every_honoured_field_is_shown_honoured():
    tables = [rf.CHAT, rf.COMPLETIONS, rf.OLLAMA_CHAT, rf.OLLAMA_GENERATE, rf.OLLAMA_OPTIONS]
    honoured = {name for t in tables for name, rule in t.items() if rule == rf.HONOURED}
    assert honoured - set(HONOURED_BY) - SAMPLER == set()


def _refusing_value(rule):
    for value in (True, 2, [{"type": "function", "function": {"name": "f"}}], {"a": 1}, "x", ["audio"], 5):
        if rule.refuses(value):
            return value
    raise AssertionError("no refused value")


REFUSED = [
    (endpoint, name, rule)
    for endpoint, table in rf.FIELDS.items()
    for name, rule in table.items()
    if isinstance(rule, rf.Refuse)
] + [("/api/chat", "options." + name, rule) for name, rule in rf.OLLAMA_OPTIONS.items() if isinstance(rule, rf.Refuse)]


@pytest.fixture(scope="module")
def client():
    with smollm2_client("m", n_ctx=512, n_threads=1, n_parallel=1) as c:
        yield c


BASES = {
    "/v1/chat/completions": {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3, "temperature": 0},
    "/v1/completions": {"prompt": "The sky is", "max_tokens": 3, "temperature": 0},
    "/api/chat": {
        "messages": [{"role": "user", "content": "Hi"}],
        "stream": False,
        "options": {"num_predict": 3, "temperature": 0},
    },
    "/api/generate": {"prompt": "Hi", "stream": False, "options": {"num_predict": 3, "temperature": 0}},
}


def _error(response, endpoint):
    body = response.json()
    return body["error"] if endpoint.startswith("/api/") else body["error"]["message"]


@pytest.mark.parametrize("endpoint,name,rule", REFUSED, ids=[f"{e}:{n}" for e, n, _ in REFUSED])
def test_refused_fields(client, endpoint, name, rule):
    body = json.loads(json.dumps(BASES[endpoint]))
    value = _refusing_value(rule)
    if name.startswith("options."):
        body["options"][name[len("options.") :]] = value
    else:
        body[name] = value
    response = client.post(endpoint, json=body)
    assert response.status_code == 400, (name, response.text)
    assert name.split(".")[-1] in _error(response, endpoint)


def test_llama_server_s_messages(client):
    chat = dict(BASES["/v1/chat/completions"])
    r = client.post("/v1/chat/completions", json=dict(chat, top_logprobs=3))
    assert (
        r.status_code == 400 and _error(r, "/v1/chat/completions") == "top_logprobs requires logprobs to be set to true"
    )
    r = client.post("/v1/chat/completions", json=dict(chat, tool_choice="sometimes"))
    assert r.status_code == 400 and _error(r, "/v1/chat/completions") == "Invalid tool_choice: sometimes"
    r = client.post("/v1/completions", json=dict(BASES["/v1/completions"], echo=True))
    assert r.status_code == 400 and _error(r, "/v1/completions") == "Only no echo is supported"
    r = client.post("/v1/completions", json=dict(BASES["/v1/completions"], suffix=""))
    assert r.status_code == 400 and _error(r, "/v1/completions") == "Unsupported param: suffix"
    r = client.post("/v1/chat/completions", json=dict(chat, reasoning_format="fancy"))
    assert r.status_code == 400 and _error(r, "/v1/chat/completions") == "Unknown reasoning format: fancy"
    r = client.post("/v1/chat/completions", json=dict(chat, chat_template_kwargs={"enable_thinking": "yes"}))
    assert (
        r.status_code == 400
        and _error(r, "/v1/chat/completions") == 'invalid type for "enable_thinking" (expected boolean, got string)'
    )
    msgs = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "a"},
        {"role": "assistant", "content": "b"},
    ]
    r = client.post("/v1/chat/completions", json=dict(chat, messages=msgs))
    assert (
        r.status_code == 400
        and _error(r, "/v1/chat/completions") == "Cannot have 2 or more assistant messages at the end of the list."
    )
    r = client.post("/v1/chat/completions", json=dict(chat, continue_final_message=True, messages=msgs[:2]))
    assert (
        r.status_code == 400
        and _error(r, "/v1/chat/completions")
        == "Cannot set both add_generation_prompt and continue_final_message to true."
    )


TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def test_tool_requests_llama_server_refuses(client):
    """Tool requests refused before any token, with llama-server's message where it has one: a grammar beside
    tools, logprobs with tools and stream, a tools field that is not an array; bankml's own for a tool_choice
    naming a function (llama-server would read it as "auto") and a parallel_tool_calls that is not a boolean. (A
    tool whose parameters the converter refuses: tests/serve/test_e2e_tools.py::
    test_a_tool_the_converter_refuses_is_a_400.)"""
    chat = dict(BASES["/v1/chat/completions"], tools=[TOOL])
    r = client.post("/v1/chat/completions", json=dict(chat, grammar='root ::= "a"'))
    assert (
        r.status_code == 400
        and _error(r, "/v1/chat/completions") == "Cannot use custom grammar constraints with tools."
    )
    r = client.post("/v1/chat/completions", json=dict(chat, logprobs=True, stream=True))
    assert r.status_code == 400 and _error(r, "/v1/chat/completions") == "logprobs is not supported with tools + stream"
    r = client.post("/v1/chat/completions", json=dict(chat, tools={"a": 1}))
    assert r.status_code == 400 and "Expected 'tools' to be an array" in _error(r, "/v1/chat/completions")
    r = client.post(
        "/v1/chat/completions", json=dict(chat, tool_choice={"type": "function", "function": {"name": "get_weather"}})
    )
    assert r.status_code == 400 and "tool_choice" in _error(r, "/v1/chat/completions")
    r = client.post("/v1/chat/completions", json=dict(chat, parallel_tool_calls="yes"))
    assert r.status_code == 400 and "parallel_tool_calls" in _error(r, "/v1/chat/completions")


def test_tools_on_a_template_that_renders_none(client):
    """SmolLM2's own template renders neither tools nor tool calls. llama-server renders such a request without
    its tools and parses no call, whatever tool_choice says (seen live on the pinned llama-server: the answers to
    auto, required and a named choice, and to Anthropic's /v1/messages, are those without tools): the llama.cpp
    mode answers so; the strict tool-call mode refuses (it promises a call, which this template cannot frame);
    Ollama's /api/chat answers Ollama's own refusal of a model whose template has no tools."""
    base = BASES["/v1/chat/completions"]
    plain = client.post("/v1/chat/completions", json=base).json()
    prompt = client.post("/apply-template", json={"messages": base["messages"]}).json()
    assert client.post("/apply-template", json={"messages": base["messages"], "tools": [TOOL]}).json() == prompt
    for choice in ("auto", "required", "none"):
        r = client.post("/v1/chat/completions", json=dict(base, tools=[TOOL], tool_choice=choice))
        assert r.status_code == 200 and r.json()["choices"] == plain["choices"], choice
    tool = {"name": "get_weather", "input_schema": TOOL["function"]["parameters"]}
    body = {"max_tokens": base["max_tokens"], "temperature": 0, "messages": base["messages"]}
    r = client.post("/v1/messages", json=dict(body, tools=[tool]))
    assert r.status_code == 200 and r.json()["content"] == client.post("/v1/messages", json=body).json()["content"]
    r = client.post("/api/chat", json=dict(BASES["/api/chat"], tools=[TOOL]))
    assert r.status_code == 400 and r.json() == {"error": "m does not support tools"}
    model = client.bankml_model
    model.tool_call_mode = "strict"
    try:
        r = client.post("/v1/chat/completions", json=dict(base, tools=[TOOL]))
        assert r.status_code == 400 and "strict tool-call mode cannot constrain a call" in _error(
            r, "/v1/chat/completions"
        )
        assert (
            client.post("/v1/chat/completions", json=dict(base, tools=[TOOL], tool_choice="none")).json()["choices"]
            == plain["choices"]
        )
    finally:
        model.tool_call_mode = "llama.cpp"


def _accepted_value(name):
    return {
        "model": "other",
        "user": "u1",
        "metadata": {"k": "v"},
        "store": False,
        "service_tier": "auto",
        "prompt_cache_key": "k",
        "safety_identifier": "s",
        "cache_prompt": True,
        "n_cache_reuse": 4,
        "id_slot": 0,
        "backend_sampling": True,
        "sse_ping_interval": 30,
        "prediction": {"type": "content", "content": "x"},
        "prompt_cache_options": {},
        "prompt_cache_retention": "in_memory",
        "parse_tool_calls": True,
        "keep_alive": "5m",
        "n": 1,
        "logprobs": False,
        "tools": [],
        "num_gpu": 0,
        "main_gpu": 0,
        "use_mmap": True,
        "use_mlock": False,
        "numa": False,
        "num_thread": 2,
        "low_vram": False,
        "vocab_only": False,
        "f16_kv": True,
        "logits_all": False,
        # /v1/completions: chat-only fields
        "reasoning_format": "none",
        "continue_final_message": True,
        "reasoning_budget_tokens": 2,
        "reasoning_budget_message": "x",
    }.get(name)


ACCEPTED = [
    (endpoint, name) for endpoint, table in rf.FIELDS.items() for name, rule in table.items() if rule == rf.ACCEPTED
] + [("/api/chat", "options." + name) for name, rule in rf.OLLAMA_OPTIONS.items() if rule == rf.ACCEPTED]


@pytest.mark.parametrize("endpoint,name", ACCEPTED, ids=[f"{e}:{n}" for e, n in ACCEPTED])
def test_accepted_fields_change_nothing(client, endpoint, name):
    base = json.loads(json.dumps(BASES[endpoint]))
    value = _accepted_value(name.split(".")[-1])
    assert value is not None, name
    body = json.loads(json.dumps(base))
    if name.startswith("options."):
        body["options"][name[len("options.") :]] = value
    else:
        body[name] = value
    a, b = client.post(endpoint, json=base), client.post(endpoint, json=body)
    assert a.status_code == 200 and b.status_code == 200, b.text

    def answer(r):
        j = r.json()
        if endpoint.startswith("/api/"):
            return j.get("message", j.get("response"))
        return j["choices"][0]

    assert answer(a) == answer(b)


QWEN35 = "Qwen3.5-4B.jinja"


@pytest.fixture(scope="module")
def qwen35():
    from bankml.serve.runtime import Model

    from ..oracle.record_server_templates import template_text

    model = Model(
        smollm2_path(),
        n_ctx=2048,
        n_threads=1,
        n_threads_batch=1,
        n_parallel=1,
        reasoning="off",
        chat_template_file=template_text(QWEN35)[1],
    )
    yield model
    model.close()


def test_chat_fields_are_honoured(qwen35):
    msgs = [{"role": "user", "content": "Hi"}]
    off = qwen35.chat(Request.for_chat(ChatInputs(msgs)))
    on = qwen35.chat(Request.for_chat(ChatInputs(msgs, chat_template_kwargs={"enable_thinking": "true"})))
    assert not off.prompt.endswith("<think>\n") and on.prompt.endswith("<think>\n")
    # reasoning_effort (oaicompat_chat_params_parse): "none" turns thinking off, a level becomes the kwarg; the
    # request's kwargs still reach the template (they override its enable_thinking variable, as in llama.cpp)
    assert qwen35.chat_options({"enable_thinking": "true"}, None, "none")[:2] == (False, {"enable_thinking": "true"})
    assert qwen35.chat_options(None, None, "high")[1] == {"enable_thinking": "false", "reasoning_effort": '"high"'}
    assert qwen35.chat(Request.for_chat(ChatInputs(msgs), reasoning_effort="none")).prompt == off.prompt
    # the reasoning budget: llama-server's reasoning_budget_tokens / thinking_budget_tokens
    assert on.reasoning_budget is None
    budget = qwen35.chat(
        Request.for_chat(
            ChatInputs(msgs, chat_template_kwargs={"enable_thinking": "true"}),
            reasoning_budget=4,
            reasoning_budget_message="OK.",
        )
    ).reasoning_budget
    assert budget is not None and budget.budget == 4 and budget.state == "counting"  # <think> was prefilled
    assert list(budget.forced) == qwen35.tokenize("OK.", False, True) + qwen35.tokenize(
        on.chat_prompt.thinking_end_tags[0], False, True
    )
    # reasoning_format none: the reasoning stays in the content
    raw = "The capital is Paris.\n</think>\n\nParis"
    deepseek = on.parser.parse(raw)
    none = qwen35.chat(
        Request.for_chat(ChatInputs(msgs, chat_template_kwargs={"enable_thinking": "true"}, reasoning_format="none"))
    ).parser.parse(raw)
    assert deepseek.reasoning_content and not none.reasoning_content and "</think>" in none.content
    # add_generation_prompt false / continue_final_message
    assert not qwen35.chat(Request.for_chat(ChatInputs(msgs, add_generation_prompt=False))).prompt.endswith(
        "<|im_start|>assistant\n"
    )
    cont = qwen35.chat(Request.for_chat(ChatInputs(msgs + [{"role": "assistant", "content": "Hel"}])))
    assert cont.prompt.endswith("Hel") and cont.chat_prompt.generation_prompt.endswith("Hel")
    # one value in: /apply-template's text is Model.render's (a str, never a Job), the chat Job's prompt
    assert qwen35.render(Request.for_chat(ChatInputs(msgs))) == off.prompt
    with pytest.raises(RequestError, match="a chat Request's schema is its constraint"):
        qwen35.chat(Request.for_chat(ChatInputs(msgs, json_schema={"type": "object"})))


def test_ollama_think_is_llama_server_s_reasoning(qwen35):
    """Ollama's think on /api/chat and /api/generate: the reasoning llama-server gave for the same request
    (the recording think/plain/capital/greedy) comes back as message.thinking / thinking."""
    from starlette.testclient import TestClient

    from bankml.serve.app import create_app

    from ..oracle.record_server_templates import record_live
    from .test_e2e_templates import RECORDINGS_HOLD, RECORDS

    name = QWEN35 + "/think/plain/capital/greedy"
    record = next(r for r in RECORDS if r["name"] == name)
    if not RECORDINGS_HOLD:  # another machine's kernels: the pinned llama-server run here is the reference
        (record,) = record_live([name])
    opts = {"temperature": 0, "seed": 1, "num_predict": 64}
    with TestClient(create_app(qwen35, "m")) as c:
        r = c.post(
            "/api/chat",
            json={"messages": record["request"]["messages"], "think": True, "stream": False, "options": opts},
        )
        assert r.status_code == 200, r.text
        assert r.json()["message"] == {"role": "assistant", "content": "", "thinking": record["reasoning_content"]}
        r = c.post(
            "/api/generate",
            json={
                "prompt": record["request"]["messages"][0]["content"],
                "think": True,
                "stream": False,
                "options": opts,
            },
        )
        assert r.json()["thinking"] == record["reasoning_content"] and r.json()["response"] == ""
        lines = [
            json.loads(x)
            for x in c.post(
                "/api/chat", json={"messages": record["request"]["messages"], "think": True, "options": opts}
            ).text.splitlines()
        ]
        assert "".join(x["message"].get("thinking", "") for x in lines) == record["reasoning_content"]
        off = c.post(
            "/api/chat",
            json={
                "messages": record["request"]["messages"],
                "think": False,
                "stream": False,
                "options": dict(opts, num_predict=4),
            },
        ).json()
        assert "thinking" not in off["message"]
        bad = c.post("/api/chat", json={"messages": record["request"]["messages"], "think": "very"})
        assert bad.status_code == 400 and "think" in bad.json()["error"]
