"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

OpenAI's Responses API (``/v1/responses``, ``/v1/responses/input_tokens``) as the pinned llama-server serves it:
the body is converted into a chat-completions body (``server_chat_convert_responses_to_chatcmpl`` in
``tools/server/server-chat.cpp``) and read by ``bankml.serve.openai.read_chat_body`` into the one ``Request``;
the answer and the stream are written from the one generation (``to_json_oaicompat_resp``,
``to_json_oaicompat_resp_stream`` and the partial results' ``to_json_oaicompat_resp`` in
``tools/server/server-task.cpp``).

Beyond llama-server: ``text.format`` (``json_schema`` / ``json_object``) constrains the answer as the chat
body's ``response_format`` does (llama-server leaves it unread); a tool other than a function, an assistant
``refusal`` part and a wrong type are a 400 naming the field (llama-server skips or misreads them); an input
message with role ``assistant`` and no ``type`` is read as an assistant message (llama-server cannot tell
its type). The stream's events carry OpenAI's ``output_index`` (and ``content_index`` on a message's text),
which llama-server leaves out and the openai client's ``responses.stream`` needs. Images are refused as
llama-server refuses them without a multimodal projector (a 500).

Must not import: ``bankml.serve.runtime``, ``app``.
"""

import json
import time
import uuid

from bankml.errors import RequestError, json_type_name
from bankml.serve.openai import read_converted
from bankml.serve.request import MediaError

__all__ = [
    "INPUT_TOKENS",
    "RESPONSES",
    "StreamWriter",
    "read_input_tokens",
    "read_responses",
    "response_json",
    "sse",
    "to_chat_body",
]

RESPONSES = "/v1/responses"
INPUT_TOKENS = "/v1/responses/input_tokens"


def _random_id():
    return uuid.uuid4().hex  # llama-server's random_string(): 32 characters


def _type_error(name, expected, value):
    return RequestError(f"Field '{name}': must be {expected}, but is {json_type_name(value)}")


def _text(part, name, what):
    text = part.get("text")
    if not isinstance(text, str):
        raise RequestError(f"Field '{name}.text': '{what}' requires 'text' (a string)")
    return {"text": text, "type": "text"}


def _input_parts(content, name):
    # #responses_create-input-input_item_list-item-input_message
    out = []
    for j, part in enumerate(content):
        pname = f"{name}.content[{j}]"
        if not isinstance(part, dict):
            raise _type_error(pname, "an object", part)
        kind = part.get("type")
        if kind == "input_text":
            out.append(_text(part, pname, "Input text"))
        elif kind == "input_image":
            if "image_url" not in part:
                raise RequestError(f"Field '{pname}.image_url': 'image_url' is required")
            raise MediaError("image")
        elif kind == "input_file":
            raise RequestError(f"Field '{pname}.type': 'input_file' is not supported by llamacpp at this moment")
        else:
            raise RequestError(
                f"Field '{pname}.type': 'type' must be one of 'input_text', 'input_image', or 'input_file'"
            )
    return out


def _output_parts(content, name):
    # #responses_create-input-input_item_list-item-output_message
    if isinstance(content, str):
        return [{"text": content, "type": "text"}]
    if content is None:
        return []
    if not isinstance(content, list):
        raise _type_error(name + ".content", "a string or an array of content parts", content)
    out = []
    for j, part in enumerate(content):
        pname = f"{name}.content[{j}]"
        if not isinstance(part, dict):
            raise _type_error(pname, "an object", part)
        kind = part.get("type")
        if kind in ("output_text", "input_text"):
            out.append(_text(part, pname, "Output text"))
        elif kind == "refusal":
            raise RequestError(f"Field '{pname}.type': 'refusal' parts are not supported by bankml's chat layer")
        else:
            raise RequestError(f"Field '{pname}.type': 'type' must be one of 'output_text' or 'refusal'")
    return out


def _function_output(item, name):
    # #responses_create-input-input_item_list-item-function_tool_call_output
    output = item["output"]
    if isinstance(output, list):
        parts = []
        for j, part in enumerate(output):
            pname = f"{name}.output[{j}]"
            if not isinstance(part, dict) or "type" not in part:
                raise RequestError(f"Field '{pname}': Output of tool call missing 'type' field")
            if part["type"] == "input_text":
                parts.append(_text(part, pname, "Input text"))
            elif part["type"] == "input_image":
                raise MediaError("image")
            else:
                raise RequestError(f"Field '{pname}.type': Output of tool call should be 'Input text' or 'Input image'")
        output = parts
    return {"content": output, "role": "tool", "tool_call_id": item["call_id"]}


def _is(item, key, kind):
    return isinstance(item.get(key), kind)


def _item(item, name, messages):
    """Adds one input item to ``messages`` (merged into the previous assistant message where llama-server merges
    it)."""
    merge = bool(messages) and messages[-1].get("role") == "assistant"
    role, kind = item.get("role"), item.get("type")
    if role in ("user", "system", "developer") and (_is(item, "content", str) or _is(item, "content", list)):
        content = item["content"]
        if isinstance(content, str):
            content = [{"text": content, "type": "input_text"}]
        messages.append({"role": role, "content": _input_parts(content, name)})
    elif role == "assistant" and kind in ("message", None):
        parts = _output_parts(item.get("content"), name)
        if merge:
            previous = messages[-1]
            if not isinstance(previous.get("content"), list):
                previous["content"] = []
            previous["content"] += parts
        else:
            messages.append({"role": "assistant", "content": parts})
    elif kind == "function_call" and all(_is(item, k, str) for k in ("arguments", "call_id", "name")):
        call = {
            "function": {"arguments": item["arguments"], "name": item["name"]},
            "id": item["call_id"],
            "type": "function",
        }
        if merge:
            messages[-1].setdefault("tool_calls", []).append(call)
        else:
            messages.append({"role": "assistant", "tool_calls": [call]})
    elif (
        kind == "function_call_output"
        and _is(item, "call_id", str)
        and (_is(item, "output", str) or _is(item, "output", list))
    ):
        messages.append(_function_output(item, name))
    elif kind == "reasoning" and _is(item, "summary", list):
        content = item.get("content")
        if not isinstance(content, list) or not content:
            raise RequestError(f"Field '{name}.content': a reasoning item needs a non-empty 'content' array")
        if not isinstance(content[0], dict) or not isinstance(content[0].get("text"), str):
            raise RequestError(f"Field '{name}.content[0].text': must be a string")
        if merge:
            messages[-1]["reasoning_content"] = content[0]["text"]
        else:
            messages.append({"role": "assistant", "content": [], "reasoning_content": content[0]["text"]})
    else:
        raise RequestError(
            f"Field '{name}': Cannot determine type of 'item' (a message, function_call, function_call_output "
            "or reasoning item with its fields)"
        )


def _tools(tools):
    if not isinstance(tools, list):
        raise RequestError("Field 'tools': 'tools' must be an array of objects")
    out = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise _type_error(f"tools[{i}]", "an object", tool)
        if tool.get("type") != "function":
            raise RequestError(
                f"Field 'tools[{i}].type': only function tools are supported by bankml, not {tool.get('type')!r}"
            )
        function = {k: v for k, v in tool.items() if k != "type"}
        function.setdefault("strict", True)
        out.append({"type": "function", "function": function})
    return out


def _text_format(text):
    """``text.format`` as the chat body's ``response_format`` (None: free text)."""
    if not isinstance(text, dict):
        raise _type_error("text", "an object", text)
    fmt = text.get("format")
    if fmt is None:
        return None
    if not isinstance(fmt, dict):
        raise _type_error("text.format", "an object", fmt)
    kind = fmt.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        schema = fmt.get("schema")
        if not isinstance(schema, dict):
            raise _type_error("text.format.schema", "an object", schema)
        inner = {"name": fmt.get("name", "response"), "schema": schema}
        if "strict" in fmt:
            inner["strict"] = fmt["strict"]
        return {"type": "json_schema", "json_schema": inner}
    raise RequestError(f"Field 'text.format.type': must be 'text', 'json_object' or 'json_schema', not {kind!r}")


def _tool_choice(choice):
    # Responses names a function at the top of the object; the chat body inside "function"
    if isinstance(choice, dict) and choice.get("type") == "function" and "function" not in choice:
        return {"type": "function", "function": {"name": choice.get("name")}}
    return choice


def to_chat_body(body):
    """The chat-completions body of a Responses body (server_chat_convert_responses_to_chatcmpl), every field it
    reads checked (RequestError naming it); the fields it does not read are kept, as llama-server keeps them."""
    if "input" not in body:
        raise RequestError("'input' is required")
    previous = body.get("previous_response_id")
    if previous is not None and previous != "":
        raise RequestError("llama.cpp does not support 'previous_response_id'.")
    chat = {k: v for k, v in body.items() if k not in ("input", "instructions", "text", "max_output_tokens")}
    messages = []
    if "instructions" in body:
        instructions = body["instructions"]
        if instructions is not None and not isinstance(instructions, str):
            raise _type_error("instructions", "a string", instructions)
        messages.append({"role": "system", "content": instructions or ""})
    value = body["input"]
    if isinstance(value, str):
        messages.append({"role": "user", "content": value})
    elif isinstance(value, list):
        for i, item in enumerate(value):
            if not isinstance(item, dict):
                raise _type_error(f"input[{i}]", "an object", item)
            _item(item, f"input[{i}]", messages)
    else:
        raise RequestError("Field 'input': 'input' must be a string or array of objects")
    chat["messages"] = messages
    if "tools" in body:
        chat.pop("tools")
        tools = _tools(body["tools"])
        if tools:
            chat["tools"] = tools
    if "tool_choice" in body:
        chat["tool_choice"] = _tool_choice(body["tool_choice"])
    if "max_output_tokens" in body:
        limit = body["max_output_tokens"]
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
            raise _type_error("max_output_tokens", "an integer", limit)
        chat["max_tokens"] = limit
    if "reasoning" in body:
        reasoning = chat.pop("reasoning")
        if reasoning is not None and not isinstance(reasoning, dict):
            raise _type_error("reasoning", "an object", reasoning)
        if reasoning and "effort" in reasoning:
            chat["reasoning_effort"] = reasoning["effort"]
    if body.get("text") is not None:
        response_format = _text_format(body["text"])
        if response_format is not None:
            if "response_format" in body:
                raise RequestError("Fields 'text.format' and 'response_format' cannot both be given")
            chat["response_format"] = response_format
    return chat


#: a Responses body's own fields that bankml reads; the others are chat fields, passed on into the chat body
#: (--reject-unknown-fields refuses a field that is neither)
OWN_FIELDS = frozenset("input instructions text max_output_tokens reasoning previous_response_id".split())


def read_responses(raw, context=None):
    """The Request of a ``/v1/responses`` body (its bytes or text)."""
    return _one_completion(read_converted(to_chat_body, raw, context, RESPONSES, OWN_FIELDS, passes_chat=True))


def _one_completion(req):
    # llama-server answers several completions of a Responses body with a bare array of results, no Responses
    # object: bankml refuses them
    if req.n > 1:
        raise RequestError("Field 'n': several completions are not served on the Responses API")
    return req


def read_input_tokens(raw, context=None):
    """The Request of a ``/v1/responses/input_tokens`` body: the prompt it renders is counted."""
    return read_converted(to_chat_body, raw, context, INPUT_TOKENS, OWN_FIELDS, passes_chat=True)


# -- the answer


def _message(result):
    message = result.message or {"role": "assistant", "content": result.content}
    return message.get("reasoning_content") or "", message.get("content") or "", message.get("tool_calls") or []


def _usage(result):
    n_prompt, n_decoded = len(result.prompt_tokens), len(result.tokens)
    return {
        "input_tokens": n_prompt,
        "output_tokens": n_decoded,
        "total_tokens": n_decoded + n_prompt,
        "input_tokens_details": {"cached_tokens": result.timings.get("cache_n", 0)},
    }


def _reasoning_item(item_id, text):
    return {
        "id": item_id,
        "summary": [],
        "type": "reasoning",
        "content": [{"text": text, "type": "reasoning_text"}],
        "encrypted_content": "",
    }


def _call_item(call):
    return {
        "id": "fc_" + call["id"],
        "type": "function_call",
        "status": "completed",
        "arguments": call["function"]["arguments"],
        "call_id": "call_" + call["id"],
        "name": call["function"]["name"],
    }


def response_json(result, response_id, model):
    """to_json_oaicompat_resp: the output items (reasoning, message, function calls), status and usage."""
    reasoning, content, calls = _message(result)
    output = []
    if reasoning:
        output.append(dict(_reasoning_item("rs_" + _random_id(), reasoning), status="completed"))
    if content:
        part = {"type": "output_text", "annotations": [], "logprobs": [], "text": content}
        output.append(
            {
                "content": [part],
                "id": "msg_" + _random_id(),
                "role": "assistant",
                "status": "completed",
                "type": "message",
            }
        )
    output += [_call_item(call) for call in calls]
    t = int(time.time())
    return {
        "completed_at": t,
        "created_at": t,
        "id": response_id,
        "model": model,
        "object": "response",
        "output": output,
        "status": "completed",
        "usage": _usage(result),
    }


def sse(event, data):
    """format_oai_resp_sse: one named event."""
    return (
        "event: " + event + "\ndata: " + json.dumps(data, ensure_ascii=False, separators=(",", ":")) + "\n\n"
    ).encode("utf-8")


def _event(kind, **data):
    return kind, dict({"type": kind}, **data)


class StreamWriter:
    """The events of one streamed answer, written as llama-server writes them: each partial result's
    (``partial``: ``response.created`` and ``response.in_progress`` first, then the items and deltas its
    message diffs open and extend) and the final result's (``final``: each item done, ``response.completed``).
    ``timings`` (a callable of the Result) gives the completed event's ``timings``."""

    def __init__(self, response_id, model, timings=None):
        self.response_id = response_id
        self.model = model
        self.timings = timings
        self.reasoning_id = "rs_" + _random_id()
        self.message_id = "msg_" + _random_id()
        self.indices = {}  # item id -> output_index, in the order the items were added
        self.created = False  # task_result_state's, across partial results
        self.thinking_started = False
        self.text_started = False
        self.fc_id = ""

    def _index(self, item_id):
        # output_index (and content_index 0 on a message's text events): OpenAI's fields, which llama-server
        # does not send and the openai client's stream helpers (responses.stream) need to place each event
        return self.indices.setdefault(item_id, len(self.indices))

    def _in_progress(self, kind):
        return _event(kind, response={"id": self.response_id, "object": "response", "status": "in_progress"})

    def partial(self, n_decoded, diffs, progress=None, timings=None):
        """The events of a partial result: its token's 1-based index and its message diffs; a prompt-progress
        result's ``progress`` (result_prompt_progress's JSON: another ``response.in_progress``) and, with
        ``timings_per_token``, the ``timings``, both on the result's last event."""
        events = []
        if not self.created:
            events += [self._in_progress("response.created"), self._in_progress("response.in_progress")]
        elif progress is not None:
            events.append(self._in_progress("response.in_progress"))
        if n_decoded == 1 or progress is not None:  # as llama-server's task_result_state sets it
            self.created = True
        for diff in diffs:
            if diff[0]:
                if not self.thinking_started:
                    item = dict(_reasoning_item(self.reasoning_id, ""), content=[], status="in_progress")
                    events.append(_event("response.output_item.added", item=item, output_index=self._index(item["id"])))
                    self.thinking_started = True
                index = self._index(self.reasoning_id)
                events.append(
                    _event(
                        "response.reasoning_text.delta",
                        delta=diff[0],
                        item_id=self.reasoning_id,
                        output_index=index,
                        content_index=0,
                    )
                )
            if diff[1]:
                if not self.text_started:
                    item = {"content": [], "id": self.message_id, "role": "assistant", "status": "in_progress"}
                    item["type"] = "message"
                    index = self._index(self.message_id)
                    events.append(_event("response.output_item.added", item=item, output_index=index))
                    part = {"type": "output_text", "text": ""}
                    events.append(
                        _event(
                            "response.content_part.added",
                            item_id=self.message_id,
                            part=part,
                            output_index=index,
                            content_index=0,
                        )
                    )
                    self.text_started = True
                index = self._index(self.message_id)
                events.append(
                    _event(
                        "response.output_text.delta",
                        item_id=self.message_id,
                        delta=diff[1],
                        output_index=index,
                        content_index=0,
                    )
                )
            if len(diff) > 2 and diff[2] >= 0:
                name, arguments, call_id = diff[3], diff[4], diff[5]
                if name:
                    item = {
                        "id": "fc_" + call_id,
                        "arguments": "",
                        "call_id": "call_" + call_id,
                        "name": name,
                        "type": "function_call",
                        "status": "in_progress",
                    }
                    events.append(_event("response.output_item.added", item=item, output_index=self._index(item["id"])))
                    self.fc_id = call_id
                if arguments:
                    item_id = "fc_" + self.fc_id
                    events.append(
                        _event(
                            "response.function_call_arguments.delta",
                            delta=arguments,
                            item_id=item_id,
                            output_index=self._index(item_id),
                        )
                    )
        if events and timings is not None:
            events[-1][1]["timings"] = timings
        if events and progress is not None:
            events[-1][1]["prompt_progress"] = progress
        return events

    def final(self, result, diffs):
        """The events of the final result (to_json_oaicompat_resp_stream), from the whole message: llama-server's
        final writer sends no delta of the final parse (``diffs``)."""
        reasoning, content, calls = _message(result)
        events, output = [], []
        if reasoning:
            item = _reasoning_item(self.reasoning_id, reasoning)
            events.append(_event("response.output_item.done", item=item, output_index=self._index(item["id"])))
            output.append(item)
        if content:
            at = {"output_index": self._index(self.message_id), "content_index": 0}
            events.append(_event("response.output_text.done", item_id=self.message_id, text=content, **at))
            part = {"type": "output_text", "annotations": [], "logprobs": [], "text": content}
            events.append(_event("response.content_part.done", item_id=self.message_id, part=part, **at))
            item = {"type": "message", "status": "completed", "id": self.message_id, "content": [part]}
            item["role"] = "assistant"
            events.append(_event("response.output_item.done", item=item, output_index=at["output_index"]))
            output.append(item)
        for call in calls:
            item = _call_item(call)
            events.append(_event("response.output_item.done", item=item, output_index=self._index(item["id"])))
            output.append(item)
        response = {
            "id": self.response_id,
            "object": "response",
            "created_at": int(time.time()),
            "status": "completed",
            "model": self.model,
            "output": output,
            "usage": _usage(result),
        }
        completed = _event("response.completed", response=response)
        if self.timings is not None:
            completed[1]["timings"] = self.timings(result)
        events.append(completed)
        return events
