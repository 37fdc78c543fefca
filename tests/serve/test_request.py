"""One request pipeline (issue 28): ``bankml.serve.openai`` and ``bankml.serve.ollama`` read a body into one typed,
frozen ``bankml.serve.request.Request``, every field checked and refused with llama-server's (or Ollama's)
message, with no model at all: nothing here loads a model, takes a slot or tokenizes a prompt. Within the
package, imports point down the pipeline (app -> openai / ollama -> request; runtime -> request)."""

import ast
import dataclasses
import json
import pathlib

import pytest

from bankml.chat.inputs import ChatInputs
from bankml.errors import RequestError
from bankml.serve import ollama, openai
from bankml.serve.request import ReadContext, Request, ServerLimits

CONTEXT = ReadContext(n_ctx=4096, n_vocab=49152)
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]


def _chat(**fields):
    return openai.read_chat(json.dumps({"messages": MESSAGES, **fields}), CONTEXT)


def test_an_openai_chat_body_is_one_typed_request():
    req = _chat(
        model="m",
        temperature=0.5,
        max_tokens=12,
        stop="END",
        stream=False,  # logprobs with tools and stream is refused, as llama-server refuses it
        stream_options={"include_usage": True},
        logprobs=True,
        top_logprobs=3,
        response_format={"type": "json_object"},
        chat_template_kwargs={"enable_thinking": False},
        reasoning_format="auto",
        reasoning_effort="low",
        thinking_budget_tokens=5,
        tools=TOOLS,
        tool_choice="required",
        parallel_tool_calls=True,
    )
    assert isinstance(req, Request) and req.is_chat and req.prompt is None
    assert (req.endpoint, req.model, req.messages) == ("/v1/chat/completions", "m", MESSAGES)
    assert (req.stream, req.include_usage, req.return_tokens) == (False, True, False)
    assert (req.n_predict, req.stop, req.params.temperature) == (12, ("END",), 0.5)
    assert (req.probs.n_probs, req.probs.post_sampling) == (3, False)
    assert req.constraint.kind == "json_object"
    assert req.chat == ChatInputs(
        MESSAGES,
        chat_template_kwargs={"enable_thinking": "false"},  # each value's JSON text, as llama-server keeps them
        reasoning_format="deepseek",  # common_reasoning_format_from_name("auto")
        tools=TOOLS,
        tool_choice="required",
        parallel_tool_calls=True,
    )
    assert (req.reasoning_effort, req.reasoning_budget, req.reasoning_budget_message) == ("low", 5, None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        req.stream = False  # type: ignore[misc]


def test_the_defaults_are_llama_servers():
    req = _chat()
    assert (req.stream, req.include_usage, req.n_predict, req.stop, bool(req.probs)) == (False, False, -1, (), False)
    assert req.chat == ChatInputs(MESSAGES) and req.chat.tool_choice == "auto" and req.model is None
    assert (req.reasoning_effort, req.reasoning_budget, req.reasoning_budget_message) == (None, None, None)
    assert req.constraint.kind == "none"


@pytest.mark.parametrize(
    "fields, n_predict",
    [
        ({"max_tokens": 5}, 5),
        ({"max_completion_tokens": 6, "max_tokens": 5}, 6),
        ({"n_predict": 7, "max_tokens": 5}, 7),
    ],
)
def test_n_predict_and_its_aliases(fields, n_predict):
    # llama-server reads n_predict, then its aliases: the native name wins, then max_completion_tokens
    assert _chat(**fields).n_predict == n_predict


def test_a_completion_body_is_a_raw_prompt():
    req = openai.read_completion(json.dumps({"prompt": ["Once"], "logprobs": 2, "grammar": 'root ::= "a"'}), CONTEXT)
    assert (req.endpoint, req.prompt, req.messages, req.is_chat) == ("/v1/completions", "Once", None, False)
    assert req.probs.n_probs == 2 and req.constraint.kind == "gbnf"


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"stream": "yes"}, "Field 'stream': [json.exception.type_error.302] type must be boolean, but is string"),
        ({"n": 0}, "Field 'n': Value must be 1 or more, but got 0"),
        ({"n_cmpl": "2"}, "Field 'n_cmpl': [json.exception.type_error.302] type must be number, but is string"),
        ({"top_logprobs": 2}, "top_logprobs requires logprobs to be set to true"),
        ({"tool_choice": "any"}, "Invalid tool_choice: any"),
        ({"tool_choice": {"type": "function"}}, "tool_choice: the function's name must be a non-empty string"),
        ({"tool_choice": {"type": "tool"}}, 'tool_choice: an object must have "type": "function" or "allowed_tools"'),
        ({"tool_choice": 3}, 'tool_choice: expected "auto", "none", "required" or an object naming a function'),
        (
            {"tool_choice": {"type": "allowed_tools", "allowed_tools": {"mode": "any", "tools": []}}},
            'tool_choice.allowed_tools.mode: expected "auto" or "required"',
        ),
        ({"parallel_tool_calls": 1}, "Field 'parallel_tool_calls': [json.exception.type_error.302]"),
        ({"chat_template_kwargs": []}, "Field 'chat_template_kwargs': [json.exception.type_error.302]"),
        ({"reasoning_effort": 1}, "Field 'reasoning_effort': [json.exception.type_error.302]"),
        ({"reasoning_format": "mine"}, "Unknown reasoning format: mine"),
        ({"thinking_budget_tokens": "8"}, "Field 'thinking_budget_tokens': [json.exception.type_error.302]"),
        ({"tools": TOOLS, "grammar": 'root ::= "a"'}, "Cannot use custom grammar constraints with tools."),
        ({"tools": {}}, "Failed to parse tools: Expected 'tools' to be an array, got {}"),
        ({"stop": 3}, "'stop' must be a string or an array of strings"),
        ({"max_tokens": 1.5}, "Field 'max_tokens': must be an integer, but is number"),
        ({"top_k": "4"}, "Field 'top_k': type must be number, but is string"),
        ({"messages": {}}, "'messages' must be an array"),
        ({"logprobs": True, "max_tokens": 100000}, "exceed bankml's limit of 1000000 entries per answer"),
    ],
)
def test_a_refused_chat_body_is_refused_without_a_model(fields, message):
    with pytest.raises(RequestError) as e:
        _chat(**fields)
    assert message in str(e.value)


def test_an_unknown_tool_choice_is_refused_first():
    # as llama-server's oaicompat_chat_params_parse, before params_from_json_cmpl reads the other fields
    for fields in [{"temperature": "hot"}, {"stream": "y"}, {"n": 2}, {"messages": []}, {"chat_template_kwargs": []}]:
        with pytest.raises(RequestError, match="^Invalid tool_choice: bogus$"):
            _chat(tool_choice="bogus", **fields)


def test_the_servers_limits():
    context = ReadContext(limits=ServerLimits(max_stop=1, max_messages=1, max_grammar_bytes=4))
    for body, message in [
        ({"messages": MESSAGES}, "2 messages, past the server's limit of 1 (--max-messages)"),
        ({"messages": MESSAGES[1:], "stop": ["a", "b"]}, "Field 'stop': 2 stop strings, past the server's limit of 1"),
        ({"messages": MESSAGES[1:], "grammar": 'root ::= "ab"'}, "Field 'grammar': 13 characters, past the"),
    ]:
        with pytest.raises(RequestError, match=message.replace("(", r"\(").replace(")", r"\)")):
            openai.read_chat(json.dumps(body), context)
    with pytest.raises(RequestError, match="2 stop strings"):
        ollama.read_chat(json.dumps({"messages": MESSAGES[1:], "options": {"stop": ["a", "b"]}}), context)


def test_an_ollama_chat_body_is_the_same_typed_request():
    history = [
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": "",
            "thinking": "Look it up.",
            "tool_calls": [{"function": {"name": "f", "arguments": {"city": "Oslo"}}}],
        },
        {"role": "tool", "content": "3 C", "tool_name": "f"},
    ]
    body = {
        "model": "m",
        "messages": history,
        "tools": TOOLS,
        "think": "high",
        "format": "json",
        "options": {"temperature": 0.25, "num_predict": 9, "stop": ["END"], "repeat_last_n": -1},
    }
    req = ollama.read_chat(json.dumps(body), CONTEXT)
    assert (req.endpoint, req.model, req.stream, req.n_predict, req.stop) == ("/api/chat", "m", True, 9, ("END",))
    assert req.params.temperature == 0.25 and req.params.repeat_last_n == 2**31 - 1
    assert req.constraint.kind == "json_object"
    assert req.chat == ChatInputs(req.messages, chat_template_kwargs={"enable_thinking": "true"}, tools=TOOLS)
    assert req.reasoning_effort == "high"
    assert req.messages[1] == {
        "role": "assistant",
        "content": None,
        "reasoning_content": "Look it up.",
        "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": '{"city": "Oslo"}'}}],
    }
    assert req.messages[2] == {"role": "tool", "content": "3 C", "name": "f"}


def test_an_ollama_generate_body_is_raw_or_templated():
    templated = ollama.read_generate(json.dumps({"prompt": "Hi", "system": "Be brief.", "stream": False}), CONTEXT)
    assert (templated.is_chat, templated.messages, templated.stream) == (True, MESSAGES, False)
    raw = ollama.read_generate(json.dumps({"prompt": "Hi", "raw": True}), CONTEXT)
    assert (raw.is_chat, raw.prompt) == (False, "Hi")
    untemplated = ollama.read_generate(json.dumps({"prompt": "Hi"}), dataclasses.replace(CONTEXT, chat_template=False))
    assert (untemplated.is_chat, untemplated.prompt) == (False, "Hi")
    with pytest.raises(RequestError, match="'think' needs the chat template"):
        ollama.read_generate(json.dumps({"prompt": "Hi", "raw": True, "think": True}), CONTEXT)


@pytest.mark.parametrize(
    "body, message",
    [
        ({"messages": MESSAGES, "stream": 1}, "json: cannot unmarshal number into Go struct field ChatRequest.stream"),
        ({"messages": MESSAGES, "think": "max"}, 'invalid think value: "max"'),
        ({"messages": MESSAGES, "tools": {}}, "json: cannot unmarshal object into Go struct field ChatRequest.tools"),
        ({"messages": MESSAGES, "options": {"num_ctx": 8}}, "the context size is the server's (-c): option 'num_ctx'"),
        ({"messages": [{"role": "user", "content": "x", "images": ["a"]}]}, "messages[0]: images are not supported"),
        ({"messages": MESSAGES, "format": "yaml"}, 'invalid format: "\\"yaml\\""; expected "json" or a valid JSON'),
    ],
)
def test_a_refused_ollama_body_is_refused_without_a_model(body, message):
    with pytest.raises(RequestError) as e:
        ollama.read_chat(json.dumps(body), CONTEXT)
    assert message in str(e.value)
    # the context size itself is accepted
    assert ollama.read_chat(json.dumps({"messages": MESSAGES, "options": {"num_ctx": 4096}}), CONTEXT).is_chat


SERVE = pathlib.Path(openai.__file__).parent


def _serve_imports(name):
    tree = ast.parse((SERVE / f"{name}.py").read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "bankml.serve":
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("bankml.serve."):
            out.add(node.module.split(".")[2])
    return out


def test_the_pipeline_imports_point_down():
    assert _serve_imports("request") == set()
    assert _serve_imports("openai") == {"fields", "request"}
    assert _serve_imports("ollama") == {"fields", "request"}
    assert {"app", "openai", "ollama", "fields"} & _serve_imports("runtime") == set()
    # the HTTP layer: the application and the routes of each wire format (bankml/serve/*_routes.py) over the plumbing
    http = set().union(
        *(_serve_imports(m) for m in ("app", "plumbing", "openai_routes", "ollama_routes", "agent_routes"))
    )
    assert {"openai", "ollama", "runtime", "request"} <= http and "fields" not in http
    # the agent APIs convert their bodies into the chat body and read it through openai's reader (issue 46)
    assert _serve_imports("anthropic") == {"openai", "request"}
    assert _serve_imports("responses") == {"openai", "request"}
    assert _serve_imports("native") == {"endpoints", "openai"}
