"""OpenAI's Responses API as llama-server serves it (bankml.serve.responses): the body converted into the chat
body as server_chat_convert_responses_to_chatcmpl converts it, read into the one Request, and the answer and
stream written as to_json_oaicompat_resp / to_json_oaicompat_resp_stream write them (the shapes read from
tools/server/server-task.cpp of the pinned llama.cpp). No model: the writers take a hand-made Result."""

import json

import pytest

from bankml.errors import RequestError
from bankml.serve import responses
from bankml.serve.job import Result
from bankml.serve.request import MediaError

TOOL = {"type": "function", "name": "get_weather", "description": "weather", "parameters": {"type": "object"}}


def test_string_input_instructions_and_renamed_fields():
    chat = responses.to_chat_body(
        {
            "input": "Hi",
            "instructions": "Be brief",
            "max_output_tokens": 9,
            "reasoning": {"effort": "low"},
            "temperature": 0.5,
            "store": False,
        }
    )
    assert chat["messages"] == [{"role": "system", "content": "Be brief"}, {"role": "user", "content": "Hi"}]
    assert (chat["max_tokens"], chat["reasoning_effort"], chat["temperature"]) == (9, "low", 0.5)
    # the fields llama-server does not read are kept, as it keeps them (and ignored by the chat reader)
    assert chat["store"] is False
    assert "max_output_tokens" not in chat and "reasoning" not in chat and "input" not in chat


def test_items_merge_into_the_assistant_message():
    chat = responses.to_chat_body(
        {
            "input": [
                {"role": "developer", "content": [{"type": "input_text", "text": "rules"}]},
                {"role": "user", "content": "Weather?"},
                {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "think"}]},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
                {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"c":"P"}'},
                {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
                {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "x"}]},
            ],
            "tools": [TOOL],
            "tool_choice": {"type": "function", "name": "get_weather"},
        }
    )
    assert chat["messages"] == [
        {"role": "developer", "content": [{"text": "rules", "type": "text"}]},
        {"role": "user", "content": [{"text": "Weather?", "type": "text"}]},
        {
            "role": "assistant",
            "content": [{"text": "Checking.", "type": "text"}],
            "reasoning_content": "think",
            "tool_calls": [
                {"function": {"arguments": '{"c":"P"}', "name": "get_weather"}, "id": "call_1", "type": "function"}
            ],
        },
        {"content": "sunny", "role": "tool", "tool_call_id": "call_1"},
        {"content": [{"text": "x", "type": "text"}], "role": "tool", "tool_call_id": "call_2"},
    ]
    assert chat["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "weather",
                "parameters": {"type": "object"},
                "strict": True,
            },
        }
    ]
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}


@pytest.mark.parametrize(
    "fmt, expected",
    [
        ({"type": "text"}, None),
        ({"type": "json_object"}, {"type": "json_object"}),
        (
            {"type": "json_schema", "name": "p", "schema": {"type": "object"}, "strict": True},
            {"type": "json_schema", "json_schema": {"name": "p", "schema": {"type": "object"}, "strict": True}},
        ),
    ],
)
def test_text_format_is_the_response_format(fmt, expected):
    chat = responses.to_chat_body({"input": "Hi", "text": {"format": fmt}})
    assert chat.get("response_format") == expected
    assert "text" not in chat


def test_text_format_constrains_the_request():
    body = {"input": "Hi", "text": {"format": {"type": "json_schema", "name": "p", "schema": {"type": "object"}}}}
    req = responses.read_responses(json.dumps(body))
    assert req.endpoint == responses.RESPONSES
    assert req.constraint.is_json and req.constraint.schema == {"type": "object"}


@pytest.mark.parametrize(
    "body, field",
    [
        ({}, "'input' is required"),
        ({"input": 3}, "'input'"),
        ({"input": "x", "previous_response_id": "resp_1"}, "previous_response_id"),
        ({"input": [5]}, "input[0]"),
        ({"input": [{"type": "item_reference", "id": "x"}]}, "input[0]"),
        ({"input": [{"role": "user", "content": [{"type": "input_audio"}]}]}, "input[0].content[0].type"),
        ({"input": [{"role": "user", "content": [{"type": "input_text"}]}]}, "input[0].content[0].text"),
        ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]}, "input_file"),
        (
            {"input": [{"role": "assistant", "type": "message", "content": [{"type": "refusal"}]}]},
            "input[0].content[0]",
        ),
        ({"input": [{"type": "function_call_output", "call_id": "c", "output": [{}]}]}, "input[0].output[0]"),
        ({"input": [{"type": "reasoning", "summary": [], "content": []}]}, "input[0].content"),
        ({"input": "x", "tools": {}}, "'tools'"),
        ({"input": "x", "tools": [{"type": "web_search"}]}, "tools[0].type"),
        ({"input": "x", "instructions": 5}, "'instructions'"),
        ({"input": "x", "reasoning": "high"}, "'reasoning'"),
        ({"input": "x", "text": "json"}, "'text'"),
        ({"input": "x", "text": {"format": {"type": "xml"}}}, "text.format.type"),
        ({"input": "x", "text": {"format": {"type": "json_schema", "schema": 1}}}, "text.format.schema"),
    ],
)
def test_bad_input_names_the_field(body, field):
    with pytest.raises(RequestError) as e:
        responses.to_chat_body(body)
    assert field in str(e.value)


def test_malformed_json_and_wrong_sampler_type():
    with pytest.raises(RequestError, match="Invalid JSON body"):
        responses.read_responses("{")
    with pytest.raises(RequestError):
        responses.read_responses(json.dumps({"input": "x", "max_output_tokens": "many"}))


def test_image_refused_as_llama_server_without_a_projector():
    body = {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "data:image/png;base64,AA"}]}]}
    with pytest.raises(MediaError, match="image input is not supported"):
        responses.to_chat_body(body)


def _result(message, n=3):
    return Result(
        tokens=list(range(n)),
        text="",
        content=message.get("content") or "",
        finish_reason="stop",
        prompt_tokens=[1] * 10,
        message=message,
    )


CALL = {"id": "abc", "type": "function", "function": {"name": "get_weather", "arguments": '{"c": "P"}'}}
USAGE = {"input_tokens": 10, "output_tokens": 3, "total_tokens": 13, "input_tokens_details": {"cached_tokens": 0}}


def test_response_json_as_to_json_oaicompat_resp():
    out = responses.response_json(
        _result({"role": "assistant", "content": "Hi", "reasoning_content": "hm", "tool_calls": [CALL]}), "resp_1", "m"
    )
    assert list(out) == ["completed_at", "created_at", "id", "model", "object", "output", "status", "usage"]
    assert (out["id"], out["model"], out["object"], out["status"], out["usage"]) == (
        "resp_1",
        "m",
        "response",
        "completed",
        USAGE,
    )
    reasoning, message, call = out["output"]
    assert reasoning["id"].startswith("rs_") and message["id"].startswith("msg_")
    assert dict(reasoning, id="") == {
        "id": "",
        "summary": [],
        "type": "reasoning",
        "content": [{"text": "hm", "type": "reasoning_text"}],
        "encrypted_content": "",
        "status": "completed",
    }
    assert dict(message, id="") == {
        "content": [{"type": "output_text", "annotations": [], "logprobs": [], "text": "Hi"}],
        "id": "",
        "role": "assistant",
        "status": "completed",
        "type": "message",
    }
    assert call == {
        "id": "fc_abc",
        "type": "function_call",
        "status": "completed",
        "arguments": '{"c": "P"}',
        "call_id": "call_abc",
        "name": "get_weather",
    }


def test_stream_events_in_llama_servers_order_and_shape():
    w = responses.StreamWriter("resp_1", "m", timings=lambda result: {"predicted_n": len(result.tokens)})
    events = w.partial(1, [("hm", "")])
    events += w.partial(2, [("", "Hi")])
    events += w.partial(3, [("", "", 0, "get_weather", "", "abc"), ("", "", 0, "", '{"c":', "")])
    events += w.partial(4, [])
    message = {"role": "assistant", "content": "Hi", "reasoning_content": "hm", "tool_calls": [CALL]}
    events += w.final(_result(message, 4), [("", "", 0, "", ' "P"}', "")])
    assert [k for k, _ in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.reasoning_text.delta",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        # the final writer: every item done from the whole message, no delta of the final parse
        "response.output_item.done",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert all(data["type"] == kind for kind, data in events)
    assert events[0][1]["response"] == {"id": "resp_1", "object": "response", "status": "in_progress"}
    assert events[8][1] == {
        "type": "response.function_call_arguments.delta",
        "delta": '{"c":',
        "item_id": "fc_abc",
        "output_index": 2,
    }
    message_id = events[4][1]["item"]["id"]
    assert events[6][1] == {
        "type": "response.output_text.delta",
        "item_id": message_id,
        "delta": "Hi",
        "output_index": 1,
        "content_index": 0,
    }
    # OpenAI's output_index (which llama-server leaves out): each item's, the same when it is added and done
    added = [(d["item"]["id"], d["output_index"]) for k, d in events if k == "response.output_item.added"]
    done = [(d["item"]["id"], d["output_index"]) for k, d in events if k == "response.output_item.done"]
    assert added == done and [i for _, i in added] == [0, 1, 2]
    completed = events[-1][1]
    assert completed["response"]["usage"] == dict(USAGE, output_tokens=4, total_tokens=14)
    assert [item["type"] for item in completed["response"]["output"]] == ["reasoning", "message", "function_call"]
    assert completed["timings"] == {"predicted_n": 4}


def test_created_repeats_until_the_first_tokens_partial():
    # llama-server marks the response created only at the first token's partial result
    w = responses.StreamWriter("r", "m")
    assert [k for k, _ in w.partial(2, [])] == ["response.created", "response.in_progress"]
    assert [k for k, _ in w.partial(3, [])] == ["response.created", "response.in_progress"]
    w = responses.StreamWriter("r", "m")
    assert len(w.partial(1, [])) == 2 and w.partial(2, []) == []
