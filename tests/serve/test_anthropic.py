"""Anthropic's Messages API as llama-server serves it (bankml.serve.anthropic): the body converted into the chat
body as server_chat_convert_anthropic_to_oai converts it, read into the one Request, and the answer and stream
written as to_json_anthropic / to_json_anthropic_stream write them (the shapes read from
tools/server/server-task.cpp of the pinned llama.cpp). No model: the writers take a hand-made Result."""

import json

import pytest

from bankml.errors import RequestError
from bankml.serve import anthropic
from bankml.serve.job import Result
from bankml.serve.request import MediaError

TOOL = {"name": "get_weather", "description": "weather", "input_schema": {"type": "object"}}


def _chat(**body):
    return anthropic.to_chat_body(dict({"messages": [{"role": "user", "content": "Hi"}]}, **body))


def test_system_blocks_and_defaults():
    chat = _chat(system=[{"type": "text", "text": "A"}, {"type": "text", "text": "B"}])
    assert chat["messages"][0] == {"role": "system", "content": "AB"}
    assert chat["max_tokens"] == 4096  # llama-server's default when max_tokens is absent


def test_billing_header_stamp_made_constant():
    text = "x-anthropic-billing-header: cc_version=2.1; cch=a5145;You are Claude Code."
    chat = _chat(system=text)
    assert (
        chat["messages"][0]["content"] == "x-anthropic-billing-header: cc_version=2.1; cch=fffff;You are Claude Code."
    )


def test_tool_use_thinking_and_tool_result_blocks():
    chat = anthropic.to_chat_body(
        {
            "messages": [
                {"role": "user", "content": "Weather?"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "look it up"},
                        {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Paris"}},
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "Here:"},
                        {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "sunny"}]},
                    ],
                },
            ],
            "tools": [TOOL],
            "tool_choice": {"type": "any"},
            "stop_sequences": ["END"],
            "max_tokens": 7,
            "top_k": 3,
            "thinking": {"type": "enabled", "budget_tokens": 50},
        }
    )
    assert chat["messages"][1] == {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "t1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}
        ],
        "reasoning_content": "look it up",
    }
    # the text stays a user message, the result follows it as a tool message
    assert chat["messages"][2] == {"role": "user", "content": [{"type": "text", "text": "Here:"}]}
    assert chat["messages"][3] == {"role": "tool", "tool_call_id": "t1", "content": "sunny"}
    assert chat["tools"] == [
        {
            "type": "function",
            "function": {"name": "get_weather", "description": "weather", "parameters": {"type": "object"}},
        }
    ]
    assert chat["tool_choice"] == "required"
    assert chat["stop"] == ["END"]
    assert (chat["max_tokens"], chat["top_k"], chat["thinking_budget_tokens"]) == (7, 3, 50)


@pytest.mark.parametrize(
    "choice, expected",
    [({"type": "auto"}, "auto"), ({"type": "any"}, "required"), ({"type": "tool", "name": "get_weather"}, "required")],
)
def test_tool_choice(choice, expected):
    assert _chat(tools=[TOOL], tool_choice=choice)["tool_choice"] == expected


def test_tool_choice_none_and_no_parallel_calls_read_into_the_request():
    req = anthropic.read_messages(
        json.dumps(
            {
                "messages": [{"role": "user", "content": "Hi"}],
                "tools": [TOOL],
                "tool_choice": {"type": "none", "disable_parallel_tool_use": True},
                "max_tokens": 5,
            }
        )
    )
    assert req.endpoint == anthropic.MESSAGES
    assert (req.chat.tool_choice, req.chat.parallel_tool_calls, req.n_predict) == ("none", False, 5)


@pytest.mark.parametrize(
    "body, field",
    [
        ({"messages": "hi"}, "'messages'"),
        (
            {"messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]},
            "messages[0].content[0].type",
        ),
        ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
        ({"messages": [{"role": "user", "content": [{"type": "text", "text": 3}]}]}, "messages[0].content[0].text"),
        (
            {
                "messages": [
                    {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "f", "input": []}]}
                ]
            },
            "messages[0].content[0].input",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "tool_result", "content": [{"type": "x"}]}]}]},
            "messages[0].content[0].content[0].type",
        ),
        ({"messages": [], "system": 3}, "'system'"),
        ({"messages": [], "system": [{"type": "image"}]}, "system[0].type"),
        ({"messages": [], "tools": {}}, "'tools'"),
        ({"messages": [], "tools": [{"type": "web_search_20250305", "name": "w"}]}, "tools[0].type"),
        ({"messages": [], "tools": [dict(TOOL, input_schema="x")]}, "tools[0].input_schema"),
        ({"messages": [], "tool_choice": "auto"}, "'tool_choice'"),
        ({"messages": [], "tool_choice": {"type": "some"}}, "tool_choice.type"),
        ({"messages": [], "tools": [TOOL], "tool_choice": {"type": "tool", "name": "nope"}}, "tool_choice.name"),
        ({"messages": [], "stop_sequences": "END"}, "stop_sequences"),
        ({"messages": [], "max_tokens": "10"}, "max_tokens"),
        ({"messages": [], "thinking": {"type": "enabled", "budget_tokens": "x"}}, "thinking.budget_tokens"),
        ({"max_tokens": 5}, "'messages' is required"),
    ],
)
def test_bad_input_names_the_field(body, field):
    with pytest.raises(RequestError) as e:
        anthropic.to_chat_body(body)
    assert field in str(e.value)


def test_malformed_json_and_non_object_body():
    with pytest.raises(RequestError, match="Invalid JSON body"):
        anthropic.read_messages('{"messages": [')
    with pytest.raises(RequestError, match="JSON object"):
        anthropic.read_messages("[1]")


@pytest.mark.parametrize(
    "content",
    [
        [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}],
        [
            {
                "type": "tool_result",
                "tool_use_id": "t",
                "content": [{"type": "image", "source": {"type": "url", "url": "u"}}],
            }
        ],
    ],
)
def test_image_refused_as_llama_server_without_a_projector(content):
    with pytest.raises(MediaError, match="image input is not supported"):
        anthropic.to_chat_body({"messages": [{"role": "user", "content": content}]})


def _result(message, finish="stop", word="", n=3):
    return Result(
        tokens=list(range(n)),
        text="",
        content=message.get("content") or "",
        finish_reason=finish,
        prompt_tokens=[1] * 10,
        message=message,
        stopping_word=word,
    )


CALL = {"id": "abc", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}


def test_message_json_as_to_json_anthropic():
    result = _result(
        {"role": "assistant", "content": "Hello", "reasoning_content": "hm", "tool_calls": [CALL]}, "tool_calls"
    )
    assert anthropic.message_json(result, "chatcmpl-1", "m") == {
        "id": "chatcmpl-1",
        "type": "message",
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "hm", "signature": ""},
            {"type": "text", "text": "Hello"},
            {"type": "tool_use", "id": "abc", "name": "get_weather", "input": {"city": "Paris"}},
        ],
        "model": "m",
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"cache_read_input_tokens": 0, "input_tokens": 10, "output_tokens": 3},
    }


@pytest.mark.parametrize(
    "finish, word, calls, reason",
    [("length", "", False, "max_tokens"), ("stop", "END", False, "end_turn"), ("tool_calls", "", True, "tool_use")],
)
def test_stop_reason_and_sequence(finish, word, calls, reason):
    message = {"role": "assistant", "content": "x", **({"tool_calls": [CALL]} if calls else {})}
    out = anthropic.message_json(_result(message, finish, word), "i", "m")
    assert (out["stop_reason"], out["stop_sequence"]) == (reason, word or None)


def test_unparsable_arguments_give_an_empty_input():
    call = dict(CALL, function={"name": "f", "arguments": '{"city": '})
    out = anthropic.message_json(_result({"role": "assistant", "content": "", "tool_calls": [call]}), "i", "m")
    assert out["content"] == [{"type": "tool_use", "id": "abc", "name": "f", "input": {}}]


def _kinds(events):
    return [
        (kind, data.get("index"), (data.get("delta") or data.get("content_block") or {}).get("type"))
        for kind, data in events
    ]


def test_stream_events_in_llama_servers_order_and_shape():
    """Reasoning, text and a tool call over three partial results, then the final result: the block indices
    (thinking 0, text 1, tool 2), one start per block, the signature delta before the thinking block closes."""
    w = anthropic.StreamWriter("chatcmpl-1", "m", 10)
    first = w.partial(1, [("think", "")])
    assert first[0] == (
        "message_start",
        {
            "type": "message_start",
            "message": {
                "id": "chatcmpl-1",
                "type": "message",
                "role": "assistant",
                "content": [],
                "model": "m",
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"cache_read_input_tokens": 0, "input_tokens": 10, "output_tokens": 0},
            },
        },
    )
    events = first + w.partial(2, [("", "Hi", -1, "", "", "")])
    events += w.partial(3, [("", "", 0, "get_weather", "", "abc"), ("", "", 0, "", '{"city":', "")])
    events += w.partial(4, [])
    message = {"role": "assistant", "content": "Hi", "reasoning_content": "think", "tool_calls": [CALL]}
    events += w.final(_result(message, "tool_calls", n=4), [("", "", 0, "", ' "Paris"}', "")])
    assert _kinds(events) == [
        ("message_start", None, None),
        ("content_block_start", 0, "thinking"),
        ("content_block_delta", 0, "thinking_delta"),
        ("content_block_start", 1, "text"),
        ("content_block_delta", 1, "text_delta"),
        ("content_block_start", 2, "tool_use"),
        ("content_block_delta", 2, "input_json_delta"),
        # the final result's own writer: a call it has not started in its own loop is started again
        ("content_block_start", 2, "tool_use"),
        ("content_block_delta", 2, "input_json_delta"),
        ("content_block_delta", 0, "signature_delta"),
        ("content_block_stop", 0, None),
        ("content_block_stop", 1, None),
        ("content_block_stop", 2, None),
        ("message_delta", None, None),
        ("message_stop", None, None),
    ]
    assert events[5][1]["content_block"] == {"type": "tool_use", "id": "abc", "name": "get_weather"}
    assert events[-2][1] == {
        "type": "message_delta",
        "delta": {"stop_reason": "tool_use", "stop_sequence": None},
        "usage": {"output_tokens": 4},
    }
    assert events[-1][1] == {"type": "message_stop"}


def test_no_message_start_without_a_first_partial():
    # llama-server sends message_start with the partial result of the first token only
    w = anthropic.StreamWriter("i", "m", 1)
    assert [k for k, _ in w.partial(2, [("", "a")])] == ["content_block_start", "content_block_delta"]


def test_sse_as_format_anthropic_sse():
    assert anthropic.sse("message_stop", {"type": "message_stop", "t": "é"}) == (
        'event: message_stop\ndata: {"type":"message_stop","t":"é"}\n\n'.encode()
    )
