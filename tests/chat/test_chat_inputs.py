"""The chat layer's one input value (issue 46): ``bankml.chat.ChatInputs``, llama.cpp's
``common_chat_templates_inputs``. Every field is checked once, when the value is made, with an error naming the
field; ``ChatTemplate.apply`` takes only it; the serve layer's readers build it (a Responses or Anthropic body
through the chat-completions body it is converted into), and the runtime completes it. No model is loaded."""

import dataclasses
import json

import pytest

from bankml.chat import ChatInputs
from bankml.chat.families import Inputs
from bankml.chat.inputs import kwargs_texts
from bankml.chat.params import ChatRequestError
from bankml.chat.template import ChatTemplate
from bankml.serve import anthropic, ollama, openai, responses

USER = [{"role": "user", "content": "Hi"}]
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]


@pytest.mark.parametrize(
    "fields, error, match",
    [
        ({"json_schema_mode": "exact"}, ValueError, "json_schema_mode must be 'llama.cpp' or 'strict', not 'exact'"),
        ({"strict_style": "compact"}, ValueError, "strict_style must be 'canonical' or 'exact', not 'compact'"),
        ({"tool_call_mode": "forced"}, ValueError, "tool_call_mode must be 'llama.cpp' or 'strict', not 'forced'"),
        ({"tool_choice": "sometimes"}, ChatRequestError, "Invalid tool_choice: sometimes"),
        ({"tool_choice": 3}, ChatRequestError, '^tool_choice: expected "auto", "none", "required" or an object'),
        ({"tool_choice": {"type": "function"}}, ChatRequestError, "^tool_choice: the function's name must be"),
        (
            {"parallel_tool_calls": "yes"},
            ChatRequestError,
            '^parallel_tool_calls: expected a boolean or None, got "yes"',
        ),
        ({"enable_thinking": 1}, ChatRequestError, "^enable_thinking: expected a boolean or None, got 1"),
        ({"add_generation_prompt": None}, ChatRequestError, "^add_generation_prompt: expected a boolean, got null"),
        ({"reasoning_format": "deepseek-legacy"}, ChatRequestError, '^reasoning_format: expected "deepseek", "auto"'),
        ({"chat_template_kwargs": ["x"]}, ChatRequestError, "^chat_template_kwargs: expected an object of JSON texts"),
        ({"chat_template_kwargs": {"enable_thinking": True}}, ChatRequestError, "kwargs_texts makes them"),
        ({"now": True}, ChatRequestError, "^now: expected a POSIX time"),
        ({"now": "today"}, ChatRequestError, '^now: expected a POSIX time \\(a number\\) or None, got "today"'),
    ],
)
def test_a_bad_field_is_refused_when_the_value_is_made(fields, error, match):
    with pytest.raises(error, match=match):
        ChatInputs(USER, **fields)
    with pytest.raises(error, match=match):  # a copy is checked as a new value is
        ChatInputs(USER).replace(**fields)


def test_the_error_names_the_kwarg():
    with pytest.raises(ChatRequestError) as info:
        ChatInputs(USER, chat_template_kwargs={"enable_thinking": "true", "effort": 2})
    assert str(info.value).startswith('chat_template_kwargs["effort"]: expected a name and its value\'s JSON text')
    assert str(info.value).endswith("got number")


def test_frozen_and_the_defaults():
    inputs = ChatInputs(USER, tool_choice=None)
    assert inputs.tool_choice == "auto"  # absent or null: llama-server's "auto"
    with pytest.raises(dataclasses.FrozenInstanceError):
        inputs.tools = TOOLS  # type: ignore[misc]
    # None: decided by whoever completes the value; apply takes llama.cpp's defaults
    assert (inputs.enable_thinking, inputs.parallel_tool_calls, inputs.reasoning_format) == (None, None, None)
    full = ChatInputs(USER, reasoning_format="auto").with_defaults()
    assert (full.enable_thinking, full.parallel_tool_calls, full.reasoning_format) == (True, False, "deepseek")
    assert (full.json_schema_mode, full.tool_call_mode) == ("llama.cpp", "llama.cpp")
    assert inputs.strict_style is None and full.strict_style == "canonical"  # strict mode's generation style
    assert ChatInputs(USER, enable_thinking=False, reasoning_format="none").with_defaults().enable_thinking is False


def test_kwargs_texts_are_llama_servers_dumps():
    assert kwargs_texts({"enable_thinking": False, "x": {"a": [1, "é"]}, "s": "hi"}) == {
        "enable_thinking": "false",
        "x": '{"a":[1,"é"]}',
        "s": '"hi"',
    }
    assert kwargs_texts(None) is None
    with pytest.raises(ChatRequestError, match="chat_template_kwargs: expected an object, got array"):
        kwargs_texts([1])


def test_apply_takes_one_value():
    tmpl = ChatTemplate("chatml")
    with pytest.raises(TypeError, match="ChatTemplate.apply takes one bankml.chat.ChatInputs"):
        tmpl.apply(USER)  # type: ignore[arg-type]
    out = tmpl.apply(ChatInputs(USER, now=0))
    assert out.prompt == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    # llama.cpp's defaults where a field is None: the same answer as with them given
    given = tmpl.apply(
        ChatInputs(USER, now=0, enable_thinking=True, parallel_tool_calls=False, reasoning_format="deepseek")
    )
    assert (given.prompt, given.generation_prompt, given.grammar) == (out.prompt, out.generation_prompt, out.grammar)


def test_the_handlers_inputs_read_the_request():
    request = ChatInputs(USER, tools=TOOLS, parallel_tool_calls=True, tool_call_mode="strict").with_defaults()
    inp = Inputs(request, None, "", None, 0, None, TOOLS, "required", True, ("f",))
    assert inp.request is request
    assert (inp.enable_thinking, inp.parallel_tool_calls, inp.tool_call_mode, inp.reasoning_format) == (
        True,
        True,
        "strict",
        "deepseek",
    )
    assert inp.forced and inp.tools == TOOLS


def test_the_readers_build_the_value():
    """Each wire format's reader gives a Request whose ``chat`` is the ChatInputs: the fields the server decides
    left None, the template kwargs as their JSON texts. A Responses body's ``input`` and an Anthropic body's
    ``messages`` reach it through the chat-completions body they are converted into, read by the same reader."""
    req = openai.read_chat(json.dumps({"messages": USER, "chat_template_kwargs": {"enable_thinking": True}}))
    assert req.chat == ChatInputs(USER, chat_template_kwargs={"enable_thinking": "true"})
    assert req.messages is req.chat.messages
    converted = responses.read_responses(json.dumps({"input": "Hi", "instructions": "Be brief.", "tools": []}))
    assert isinstance(converted.chat, ChatInputs) and converted.endpoint == responses.RESPONSES
    assert (
        converted.chat
        == openai.read_chat(
            json.dumps(
                responses.to_chat_body(
                    json.loads(json.dumps({"input": "Hi", "instructions": "Be brief.", "tools": []}))
                )
            )
        ).chat
    )
    assert converted.chat.messages == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    claude = anthropic.read_messages(json.dumps({"messages": USER, "max_tokens": 4, "system": "Be brief."}))
    assert isinstance(claude.chat, ChatInputs) and claude.chat.messages[-1] == {"role": "user", "content": "Hi"}
    req = ollama.read_chat(json.dumps({"messages": USER, "think": "low", "tools": TOOLS}))
    assert req.chat == ChatInputs(USER, tools=TOOLS, chat_template_kwargs={"enable_thinking": "true"})
    assert req.reasoning_effort == "low"
