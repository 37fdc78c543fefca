"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

The request side of the chat layer that comes before a template renders (``common/chat.cpp``): the OpenAI
messages read as llama.cpp reads them (``common_chat_msgs_parse_oaicompat``: ``parse_messages``), the
workarounds applied to them for the template's capabilities (``normalize_messages``), a continued assistant message
(``parse_continuation``) and the tools as llama.cpp passes them to the template
(``common_chat_tools_parse_oaicompat`` + ``common_chat_tools_to_json_oaicompat``: ``tools_json_oaicompat``).
``bankml.chat.template`` renders what this module reads.
"""

import json

from bankml.chat.params import (
    CONTINUATION_AUTO,
    CONTINUATION_CONTENT,
    CONTINUATION_NONE,
    CONTINUATION_REASONING,
    ChatRequestError,
)
from bankml.errors import json_type_name


def _dump(value):
    """nlohmann's dump() of a request value, for the messages llama.cpp quotes."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def parse_messages(messages):
    """common_chat_msgs_parse_oaicompat: OpenAI messages -> llama.cpp's common_chat_msg fields, as dicts with
    the keys role, content, content_parts, tool_calls, reasoning_content, tool_name, tool_call_id."""
    try:
        if not isinstance(messages, list):
            raise ValueError("Expected 'messages' to be an array, got " + _dump(messages))
        out = []
        for message in messages:
            if not isinstance(message, dict):
                raise ValueError("Expected 'message' to be an object, got " + _dump(message))
            if "role" not in message:
                raise ValueError("Missing 'role' in message: " + _dump(message))
            msg = {
                "role": _str(message["role"]),
                "content": "",
                "content_parts": [],
                "tool_calls": [],
                "reasoning_content": "",
                "tool_name": "",
                "tool_call_id": "",
            }
            has_content, has_tool_calls = "content" in message, "tool_calls" in message
            if has_content:
                content = message["content"]
                if isinstance(content, str):
                    msg["content"] = content
                elif isinstance(content, list):
                    for part in content:
                        if not isinstance(part, dict) or "type" not in part:
                            raise ValueError("Missing content part type: " + _dump(part))
                        if part["type"] not in ("text", "media_marker"):
                            raise ValueError("Unsupported content part type: " + _dump(part["type"]))
                        msg["content_parts"].append({"type": part["type"], "text": _str(part["text"])})
                elif content is not None:
                    raise ValueError(
                        "Invalid 'content' type: expected string or array, got "
                        + _dump(content)
                        + " (ref: https://github.com/ggml-org/llama.cpp/issues/8367)"
                    )
            if has_tool_calls:
                for call in message["tool_calls"]:
                    if "type" not in call:
                        raise ValueError("Missing tool call type: " + _dump(call))
                    if call["type"] != "function":
                        raise ValueError("Unsupported tool call type: " + _dump(call))
                    if "function" not in call:
                        raise ValueError("Missing tool call function: " + _dump(call))
                    fn = call["function"]
                    if "name" not in fn:
                        raise ValueError("Missing tool call name: " + _dump(call))
                    args = fn["arguments"]
                    msg["tool_calls"].append(
                        {
                            "name": _str(fn["name"]),
                            "arguments": args if isinstance(args, str) else _dump(args),
                            "id": _str(call["id"]) if "id" in call else "",
                        }
                    )
            if not has_content and not has_tool_calls:
                raise ValueError(
                    "Expected 'content' or 'tool_calls' (ref: https://github.com/ggml-org/llama.cpp/issues/8367 & "
                    "https://github.com/ggml-org/llama.cpp/issues/12279)"
                )
            if "reasoning_content" in message:
                msg["reasoning_content"] = _str(message["reasoning_content"])
            if "name" in message:
                msg["tool_name"] = _str(message["name"])
            if "tool_call_id" in message:
                msg["tool_call_id"] = _str(message["tool_call_id"])
            out.append(msg)
        return out
    except (ValueError, KeyError, TypeError) as e:
        text = str(e) if isinstance(e, ValueError) else "[json.exception.out_of_range.403] key not found"
        raise ChatRequestError("Failed to parse messages: " + text) from None


def _str(value):
    if not isinstance(value, str):
        raise ValueError("[json.exception.type_error.302] type must be string, but is " + json_type_name(value))
    return value


def _concat_parts(parts):
    """Parts joined with newlines, none before or after a media marker."""
    text, last_was_media = "", False
    for part in parts:
        kind = part.get("type", "")
        if kind == "text":
            add_newline = not last_was_media and bool(text)
            last_was_media = False
        elif kind == "media_marker":
            add_newline, last_was_media = False, True
        else:
            continue
        if add_newline:
            text += "\n"
        text += part.get("text", "")
    return text


def msg_to_json(msg):
    """common_chat_msg::to_json_oaicompat(concat_typed_text=false): the message as the template sees it."""
    if msg["content"] and msg["content_parts"]:
        raise ChatRequestError("Cannot specify both content and content_parts")
    out = {"role": msg["role"]}
    if msg["content"]:
        out["content"] = msg["content"]
    elif msg["content_parts"]:
        if any(p["type"] == "media_marker" for p in msg["content_parts"]):
            out["content"] = _concat_parts(msg["content_parts"])
        else:
            out["content"] = [{"type": p["type"], "text": p["text"]} for p in msg["content_parts"]]
    else:
        out["content"] = ""
    if msg["reasoning_content"]:
        out["reasoning_content"] = msg["reasoning_content"]
    if msg["tool_name"]:
        out["name"] = msg["tool_name"]
    if msg["tool_call_id"]:
        out["tool_call_id"] = msg["tool_call_id"]
    if msg["tool_calls"]:
        calls = []
        for call in msg["tool_calls"]:
            tc = {"type": "function", "function": {"name": call["name"], "arguments": call["arguments"]}}
            if call["id"]:
                tc["id"] = call["id"]
            calls.append(tc)
        out["tool_calls"] = calls
    return out


def normalize_messages(messages, caps):
    """messages_inp_normalizer: string content for templates that only take strings, parts for the others."""
    only_string = caps.supports_string_content and not caps.supports_typed_content
    only_typed = not caps.supports_string_content and caps.supports_typed_content
    if not only_string and not only_typed:
        return messages
    out = []
    for msg in messages:
        msg = dict(msg)
        if "content" in msg:
            content = msg["content"]
            if only_typed and isinstance(content, str):
                msg["content"] = [{"type": "text", "text": content}]
            elif only_string and isinstance(content, list):
                msg["content"] = _concat_parts(content)
        out.append(msg)
    return out


def common_prefix_length(a, b):
    """The length of the longest common prefix of two strings, by slice comparisons (C loops, not a Python one
    per character): halving the differing range keeps the total compared length linear."""
    limit = min(len(a), len(b))
    if a[:limit] == b[:limit]:
        return limit
    lo, hi = 0, limit  # a[:lo] == b[:lo] and a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def trim_spaces(text):
    """llama.cpp's trim_whitespace (the C locale's isspace)."""
    return text.strip(" \t\n\v\f\r")


def parse_continuation(value):
    if value is True:
        return CONTINUATION_AUTO
    if value == "reasoning_content":
        return CONTINUATION_REASONING
    if value == "content":
        return CONTINUATION_CONTENT
    return CONTINUATION_NONE


def as_text(content):
    if not isinstance(content, str):
        raise ChatRequestError("[json.exception.type_error.302] type must be string, but is " + json_type_name(content))
    return content


def tools_json_oaicompat(tools):
    """common_chat_tools_parse_oaicompat + common_chat_tools_to_json_oaicompat."""
    if not tools:
        return None
    out = []
    try:
        if not isinstance(tools, list):
            raise ValueError("Expected 'tools' to be an array, got " + _dump(tools))
        for tool in tools:
            if "type" not in tool:
                raise ValueError("Missing tool type: " + _dump(tool))
            if tool["type"] != "function":
                raise ValueError("Unsupported tool type: " + _dump(tool))
            if "function" not in tool:
                raise ValueError("Missing tool function: " + _dump(tool))
            fn = tool["function"]
            out.append(
                {
                    "type": "function",
                    "function": {
                        "name": _str(fn["name"]),
                        "description": fn.get("description", ""),
                        "parameters": fn.get("parameters", {}),
                    },
                }
            )
    except (ValueError, KeyError, TypeError) as e:
        raise ChatRequestError("Failed to parse tools: %s; tools = %s" % (e, json.dumps(tools, indent=2))) from None
    return out
