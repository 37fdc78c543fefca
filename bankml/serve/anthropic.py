"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

Anthropic's Messages API (``/v1/messages``, ``/v1/messages/count_tokens``) as the pinned llama-server serves it:
the body is converted into a chat-completions body (``server_chat_convert_anthropic_to_oai`` in
``tools/server/server-chat.cpp``) and read by ``bankml.serve.openai.read_chat_body`` into the one ``Request``;
the answer and the stream are written from the one generation (``to_json_anthropic``,
``to_json_anthropic_stream`` and the partial results' ``to_json_anthropic`` in ``tools/server/server-task.cpp``).

Where llama-server reads a field of the wrong type as its default, or drops a content block it does not know,
bankml answers a 400 that names the field. An image is refused as llama-server refuses it without a
multimodal projector (a 500). ``tool_choice: {"type": "none"}`` turns the tools off (llama-server reads it as
``auto``).

Must not import: ``bankml.serve.runtime``, ``app``.
"""

import json

from bankml.errors import RequestError, json_type_name
from bankml.serve.openai import read_converted
from bankml.serve.request import MediaError

__all__ = [
    "COUNT_TOKENS",
    "MESSAGES",
    "StreamWriter",
    "message_json",
    "read_count_tokens",
    "read_messages",
    "sse",
    "stop_reason",
    "to_chat_body",
]

MESSAGES = "/v1/messages"
COUNT_TOKENS = "/v1/messages/count_tokens"
_BLOCK_TYPES = ("text", "image", "tool_use", "tool_result", "thinking")
_BILLING = "x-anthropic-billing-header:"


def _type_error(name, expected, value):
    return RequestError(f"Field '{name}': must be {expected}, but is {json_type_name(value)}")


def _string(obj, key, name, default=None):
    value = obj.get(key, default)
    if value is None and default is None and key not in obj:
        return None
    if not isinstance(value, str):
        raise _type_error(name, "a string", value)
    return value


def _normalize_billing_header(text):
    # normalize_anthropic_billing_header: the per-request "cch=" stamp of Claude Code's system prompt, made
    # constant so that the prompt does not change from one request to the next
    if not text.startswith(_BILLING):
        return text
    at = text.find("cch=", len(_BILLING))
    if at < 0:
        return text
    start = at + 4
    if start + 5 < len(text) and text[start + 5] == ";":
        return text[:start] + "fffff" + text[start + 5 :]
    return text


def _system(value):
    if isinstance(value, str):
        return _normalize_billing_header(value)
    if not isinstance(value, list):
        raise _type_error("system", "a string or an array of text blocks", value)
    out = []
    for i, block in enumerate(value):
        name = f"system[{i}]"
        if not isinstance(block, dict):
            raise _type_error(name, "an object", block)
        if block.get("type") != "text":
            raise RequestError(f"Field '{name}.type': a system block must be of type 'text', not {block.get('type')!r}")
        out.append(_normalize_billing_header(_string(block, "text", name + ".text", "")))
    return "".join(out)


def _check_image(block, name):
    source = block.get("source")
    if not isinstance(source, dict):
        raise _type_error(name + ".source", "an object", source)
    raise MediaError("image")  # llama-server has no model that reads it: oaicompat_content_load_media's refusal


def _tool_result(block, name):
    tool_use_id = _string(block, "tool_use_id", name + ".tool_use_id", "")
    content = block.get("content")
    if content is None:
        text = ""
    elif isinstance(content, str):
        text = content
    elif isinstance(content, list):
        parts = []
        for j, part in enumerate(content):
            pname = f"{name}.content[{j}]"
            if not isinstance(part, dict):
                raise _type_error(pname, "an object", part)
            kind = part.get("type")
            if kind == "text":
                parts.append(_string(part, "text", pname + ".text", ""))
            elif kind == "image":
                _check_image(part, pname)
            else:
                raise RequestError(
                    f"Field '{pname}.type': unknown tool_result content block type {kind!r} (text and image are read)"
                )
        text = "".join(parts)  # text only: collapsed to a string, as llama-server collapses it
    else:
        raise _type_error(name + ".content", "a string or an array of content blocks", content)
    return {"role": "tool", "tool_call_id": tool_use_id, "content": text}


def _blocks(role, content, name):
    """The chat messages of one Anthropic message's content blocks: the message itself (text, reasoning, tool
    calls) and, after it, one ``tool`` message per ``tool_result``."""
    converted, calls, results, reasoning = [], [], [], ""
    for j, block in enumerate(content):
        bname = f"{name}.content[{j}]"
        if not isinstance(block, dict):
            raise _type_error(bname, "an object", block)
        kind = block.get("type")
        if kind == "text":
            _string(block, "text", bname + ".text", "")
            converted.append(block)
        elif kind == "thinking":
            reasoning += _string(block, "thinking", bname + ".thinking", "")
        elif kind == "image":
            _check_image(block, bname)
        elif kind == "tool_use":
            arguments = block.get("input", {})
            if not isinstance(arguments, dict):
                raise _type_error(bname + ".input", "an object", arguments)
            calls.append(
                {
                    "id": _string(block, "id", bname + ".id", ""),
                    "type": "function",
                    "function": {
                        "name": _string(block, "name", bname + ".name", ""),
                        "arguments": json.dumps(arguments, ensure_ascii=False, separators=(",", ":")),
                    },
                }
            )
        elif kind == "tool_result":
            results.append(_tool_result(block, bname))
        else:
            raise RequestError(
                f"Field '{bname}.type': unknown content block type {kind!r} (bankml reads "
                + ", ".join(_BLOCK_TYPES)
                + ")"
            )
    out = []
    if converted or calls or reasoning:
        message = {"role": role, "content": converted or ""}
        if calls:
            message["tool_calls"] = calls
        if reasoning:
            message["reasoning_content"] = reasoning
        out.append(message)
    return out + results


def _messages(messages):
    if not isinstance(messages, list):
        raise _type_error("messages", "an array", messages)
    out = []
    for i, msg in enumerate(messages):
        name = f"messages[{i}]"
        if not isinstance(msg, dict):
            raise _type_error(name, "an object", msg)
        role = _string(msg, "role", name + ".role", "")
        if "content" not in msg:
            if role != "assistant":
                out.append(msg)  # the chat reader refuses it, as llama-server's does
            continue
        content = msg["content"]
        if isinstance(content, str):
            out.append(msg)
        elif isinstance(content, list):
            out += _blocks(role, content, name)
        else:
            raise _type_error(name + ".content", "a string or an array of content blocks", content)
    return out


def _tools(tools):
    if not isinstance(tools, list):
        raise _type_error("tools", "an array", tools)
    out = []
    for i, tool in enumerate(tools):
        name = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise _type_error(name, "an object", tool)
        kind = tool.get("type")
        if kind not in (None, "custom"):
            raise RequestError(
                f"Field '{name}.type': Anthropic's server tools ({kind!r}) are not supported by bankml: "
                "give a client tool with 'name' and 'input_schema'"
            )
        schema = tool.get("input_schema", {})
        if not isinstance(schema, dict):
            raise _type_error(name + ".input_schema", "an object", schema)
        out.append(
            {
                "type": "function",
                "function": {
                    "name": _string(tool, "name", name + ".name", ""),
                    "description": _string(tool, "description", name + ".description", ""),
                    "parameters": schema,
                },
            }
        )
    return out


def _tool_choice(choice, tools, chat):
    if not isinstance(choice, dict):
        raise _type_error("tool_choice", "an object", choice)
    kind = choice.get("type")
    if kind == "auto":
        chat["tool_choice"] = "auto"
    elif kind in ("any", "tool"):
        chat["tool_choice"] = "required"  # a named tool too, as llama-server reads it
        if kind == "tool":
            wanted = _string(choice, "name", "tool_choice.name", "")
            if not any(t.get("name") == wanted for t in tools or () if isinstance(t, dict)):
                raise RequestError(f"Field 'tool_choice.name': no tool named {wanted!r} in 'tools'")
    elif kind == "none":
        chat["tool_choice"] = "none"
    else:
        raise RequestError(f"Field 'tool_choice.type': must be one of 'auto', 'any', 'tool', 'none', not {kind!r}")
    disable = choice.get("disable_parallel_tool_use")
    if disable is not None:
        if not isinstance(disable, bool):
            raise _type_error("tool_choice.disable_parallel_tool_use", "a boolean", disable)
        if disable:
            chat["parallel_tool_calls"] = False


#: the fields of a Messages body that bankml reads (--reject-unknown-fields refuses the others)
FIELDS = frozenset(
    "model messages max_tokens system stop_sequences stream temperature top_p top_k tools tool_choice metadata "
    "thinking chat_template_kwargs".split()
)


def to_chat_body(body):
    """The chat-completions body of an Anthropic Messages body (server_chat_convert_anthropic_to_oai), every
    field it reads checked (RequestError naming it)."""
    chat = {}
    messages = []
    if body.get("system") is not None:
        messages.append({"role": "system", "content": _system(body["system"])})
    if "messages" not in body:
        raise RequestError("'messages' is required")
    chat["messages"] = messages + _messages(body["messages"])
    if "tools" in body:
        chat["tools"] = _tools(body["tools"])
    if "tool_choice" in body:
        _tool_choice(body["tool_choice"], body.get("tools"), chat)
    if "stop_sequences" in body:
        stop = body["stop_sequences"]
        if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
            raise _type_error("stop_sequences", "an array of strings", stop)
        chat["stop"] = stop
    max_tokens = body.get("max_tokens", 4096)  # required by Anthropic; llama-server is permissive
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int):
        raise _type_error("max_tokens", "an integer", max_tokens)
    chat["max_tokens"] = max_tokens
    for key in ("temperature", "top_p", "top_k", "stream", "chat_template_kwargs", "model"):
        if key in body:
            chat[key] = body[key]
    thinking = body.get("thinking")
    if thinking is not None:
        if not isinstance(thinking, dict):
            raise _type_error("thinking", "an object", thinking)
        if thinking.get("type") == "enabled":
            budget = thinking.get("budget_tokens", 10000)
            if isinstance(budget, bool) or not isinstance(budget, int):
                raise _type_error("thinking.budget_tokens", "an integer", budget)
            chat["thinking_budget_tokens"] = budget
    metadata = body.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise _type_error("metadata", "an object", metadata)
    return chat


def read_messages(raw, context=None):
    """The Request of a ``/v1/messages`` body (its bytes or text)."""
    return read_converted(to_chat_body, raw, context, MESSAGES, FIELDS)


def read_count_tokens(raw, context=None):
    """The Request of a ``/v1/messages/count_tokens`` body: the prompt it renders is counted, nothing generated."""
    return read_converted(to_chat_body, raw, context, COUNT_TOKENS, FIELDS)


# -- the answer


def stop_reason(result):
    """to_json_anthropic's stop_reason: ``max_tokens`` unless the generation ended by a stop word or the end of
    generation, then ``tool_use`` with calls and ``end_turn`` without."""
    if result.finish_reason == "length":
        return "max_tokens"
    return "tool_use" if result.message.get("tool_calls") else "end_turn"


def _arguments(text):
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return {}  # to_json_anthropic: arguments that do not parse give an empty input
    return value


def _message(result):
    message = result.message or {"role": "assistant", "content": result.content}
    return message.get("reasoning_content") or "", message.get("content") or "", message.get("tool_calls") or []


def message_json(result, message_id, model):
    """to_json_anthropic: the answer's content blocks (thinking, text, tool_use), stop_reason and usage."""
    reasoning, content, calls = _message(result)
    blocks = []
    if reasoning:
        blocks.append({"type": "thinking", "thinking": reasoning, "signature": ""})
    if content:
        blocks.append({"type": "text", "text": content})
    for call in calls:
        blocks.append(
            {
                "type": "tool_use",
                "id": call["id"],
                "name": call["function"]["name"],
                "input": _arguments(call["function"]["arguments"]),
            }
        )
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "content": blocks,
        "model": model,
        "stop_reason": stop_reason(result),
        "stop_sequence": result.stopping_word or None,
        "usage": _usage(len(result.prompt_tokens), len(result.tokens), result.timings.get("cache_n", 0)),
    }


def _usage(n_prompt, n_decoded, n_cached=0):
    # the prompt's tokens read from the slot's cache apart from the ones evaluated, as llama-server counts them
    return {"cache_read_input_tokens": n_cached, "input_tokens": n_prompt - n_cached, "output_tokens": n_decoded}


def sse(event, data):
    """format_anthropic_sse: one named event."""
    return (
        "event: " + event + "\ndata: " + json.dumps(data, ensure_ascii=False, separators=(",", ":")) + "\n\n"
    ).encode("utf-8")


def _event(kind, **data):
    return kind, dict({"type": kind}, **data)


def _block_start(index, block):
    return _event("content_block_start", index=index, content_block=block)


def _block_delta(index, delta):
    return _event("content_block_delta", index=index, delta=delta)


class StreamWriter:
    """The SSE events of one streamed answer, written as llama-server writes them: each partial result's
    (``partial``: ``message_start`` with the first token, then the blocks its message diffs open and extend) and
    the final result's (``final``: its own diffs, every block closed, ``message_delta`` and ``message_stop``).
    A diff is ``(reasoning, content)`` or, with tools, ``(reasoning, content, tool index, name, arguments, id)``
    (``bankml.serve.job.Event``)."""

    def __init__(self, message_id, model, n_prompt, n_cached=lambda: 0):
        self.message_id = message_id
        self.model = model
        self.n_prompt = n_prompt
        self.n_cached = n_cached  # the prompt's tokens reused from the cache, known once the prompt is evaluated
        self.thinking_started = False  # task_result_state's, across partial results
        self.text_started = False
        self.reasoning = ""  # the reasoning so far (anthropic_has_reasoning)

    def partial(self, n_decoded, diffs):
        """The events of a partial result: its token's 1-based index and its message diffs."""
        events = []
        if n_decoded == 1:
            message = {
                "id": self.message_id,
                "type": "message",
                "role": "assistant",
                "content": [],
                "model": self.model,
                "stop_reason": None,
                "stop_sequence": None,
                "usage": _usage(self.n_prompt, 0, self.n_cached()),
            }
            events.append(_event("message_start", message=message))
        self.reasoning += "".join(d[0] for d in diffs)
        has_reasoning = bool(self.reasoning)
        text_index = 1 if has_reasoning else 0
        for diff in diffs:
            if diff[0]:
                if not self.thinking_started:
                    events.append(_block_start(0, {"type": "thinking", "thinking": ""}))
                    self.thinking_started = True
                events.append(_block_delta(0, {"type": "thinking_delta", "thinking": diff[0]}))
            if diff[1]:
                if not self.text_started:
                    events.append(_block_start(text_index, {"type": "text", "text": ""}))
                    self.text_started = True
                events.append(_block_delta(text_index, {"type": "text_delta", "text": diff[1]}))
            if len(diff) > 2 and diff[2] >= 0:
                _, _, index, name, arguments, call_id = diff
                block = int(has_reasoning) + int(self.text_started) + index
                if name:
                    events.append(_block_start(block, {"type": "tool_use", "id": call_id, "name": name}))
                if arguments:
                    events.append(_block_delta(block, {"type": "input_json_delta", "partial_json": arguments}))
        return events

    def final(self, result, diffs):
        """The events of the final result (to_json_anthropic_stream): ``diffs`` are the final parse's."""
        reasoning, content, calls = _message(result)
        has_thinking, has_text = bool(reasoning), bool(content)
        text_index = 1 if has_thinking else 0
        thinking_started = text_started = False  # llama-server's final writer starts afresh
        calls_started = set()
        events = []
        for diff in diffs:
            if diff[0]:
                if not thinking_started:
                    events.append(_block_start(0, {"type": "thinking", "thinking": ""}))
                    thinking_started = True
                events.append(_block_delta(0, {"type": "thinking_delta", "thinking": diff[0]}))
            if diff[1]:
                if not text_started:
                    events.append(_block_start(text_index, {"type": "text", "text": ""}))
                    text_started = True
                events.append(_block_delta(text_index, {"type": "text_delta", "text": diff[1]}))
            if len(diff) > 2 and diff[2] >= 0:
                index, arguments = diff[2], diff[4]
                block = int(has_thinking) + int(has_text) + index
                if index not in calls_started and index < len(calls):
                    call = calls[index]
                    events.append(
                        _block_start(block, {"type": "tool_use", "id": call["id"], "name": call["function"]["name"]})
                    )
                    calls_started.add(index)
                if arguments:
                    events.append(_block_delta(block, {"type": "input_json_delta", "partial_json": arguments}))
        if has_thinking:
            events.append(_block_delta(0, {"type": "signature_delta", "signature": ""}))
            events.append(_event("content_block_stop", index=0))
        if has_text:
            events.append(_event("content_block_stop", index=text_index))
        for i in range(len(calls)):
            events.append(_event("content_block_stop", index=int(has_thinking) + int(has_text) + i))
        delta = {"stop_reason": stop_reason(result), "stop_sequence": result.stopping_word or None}
        events.append(_event("message_delta", delta=delta, usage={"output_tokens": len(result.tokens)}))
        events.append(_event("message_stop"))
        return events
