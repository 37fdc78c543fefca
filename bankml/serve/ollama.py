"""An Ollama body (``/api/chat``, ``/api/generate``) read into one ``bankml.serve.request.Request``, as a client
of llama-server would ask for the same answer: Ollama's ``ChatRequest`` / ``GenerateRequest`` fields and its
``Options`` (``bankml.serve.fields``), ``format`` (``bankml.chat.constraint.from_ollama_text``), the sampler
options under llama-server's names (``bankml.sampling.params.OLLAMA_SAMPLER_OPTIONS``), ``think`` as the
template kwarg ``enable_thinking`` and ``reasoning_effort``, and Ollama's messages as the chat layer takes them.
Everything is checked here, before a slot is taken or a prompt tokenized (RequestError with Ollama's message
where Ollama has one).

Must not import: ``bankml.serve.runtime``, ``app`` or ``openai``.
"""

import json

from bankml.chat.constraint import from_ollama_text
from bankml.chat.inputs import ChatInputs, kwargs_texts
from bankml.errors import RequestError, json_type_name
from bankml.sampling.params import OLLAMA_SAMPLER_OPTIONS
from bankml.serve import fields
from bankml.serve.request import (
    ReadContext,
    Request,
    check_message_count,
    check_messages,
    check_stop_sizes,
    read_body,
    sampler_params,
)

__all__ = ["CHAT", "GENERATE", "messages_for_chat", "read_chat", "read_generate", "sampler_options", "think_options"]

CHAT = "/api/chat"
GENERATE = "/api/generate"


def read_chat(raw, context=None):
    """The Request of an ``/api/chat`` body."""
    return _read(raw, context or ReadContext(), True)


def read_generate(raw, context=None):
    """The Request of an ``/api/generate`` body: through the template (``system`` and ``prompt`` as messages),
    or raw with ``raw: true`` or a model without a chat template."""
    return _read(raw, context or ReadContext(), False)


def _read(raw, context, chat):
    body = read_body(raw)
    check_sizes(body, context.limits)
    if context.limits.reject_unknown_fields:
        fields.check_unknown(body, fields.FIELDS[CHAT if chat else GENERATE])
        if isinstance(body.get("options"), dict):
            fields.check_unknown(body["options"], fields.OLLAMA_OPTIONS, "options.")
    fields.check(body, CHAT if chat else GENERATE, context.n_ctx)
    stream = body.get("stream", True)
    if stream is None:
        stream = True
    if not isinstance(stream, bool):
        # Ollama's Go decoder
        raise RequestError(
            f"json: cannot unmarshal {json_type_name(stream)} into Go struct field "
            f"{'ChatRequest' if chat else 'GenerateRequest'}.stream of type bool"
        )
    constraint = from_ollama_text(body, raw)
    params, n_predict, stop = sampler_options(body, vocab=context.vocab, context=context)
    think = think_options(body.get("think"))
    kwargs = kwargs_texts(think.get("chat_template_kwargs"))
    common = {"stream": stream, "model": body.get("model"), "reasoning_effort": think.get("reasoning_effort")}
    if chat:
        messages = messages_for_chat(body.get("messages"))
        tools = body.get("tools")
        if tools is not None and not isinstance(tools, list):
            raise RequestError(
                f"json: cannot unmarshal {json_type_name(tools)} into Go struct field "
                "ChatRequest.tools of type api.Tools"
            )
        inputs = ChatInputs(messages, tools=tools or None, chat_template_kwargs=kwargs)
        return Request(CHAT, constraint, params, n_predict, tuple(stop), chat=inputs, **common)
    prompt = body.get("prompt", "")
    if not isinstance(prompt, str):
        raise RequestError("'prompt' must be a string")
    if body.get("raw") or not context.chat_template:
        if body.get("think") is not None:
            raise RequestError("'think' needs the chat template: it cannot be used with 'raw'")
        return Request(GENERATE, constraint, params, n_predict, tuple(stop), prompt=prompt, **common)
    messages = []
    if isinstance(body.get("system"), str):
        messages.append({"role": "system", "content": body["system"]})
    messages.append({"role": "user", "content": prompt})
    inputs = ChatInputs(messages, chat_template_kwargs=kwargs)
    return Request(GENERATE, constraint, params, n_predict, tuple(stop), chat=inputs, **common)


def check_sizes(body, limits):
    """The size limits of the fields Ollama sends: its stop strings and messages."""
    options = body.get("options")
    check_stop_sizes(options.get("stop") if isinstance(options, dict) else None, limits)
    check_message_count(body.get("messages"), limits)


def sampler_options(body, n_ctx=None, vocab=None, context=None):
    """``(SamplerParams, n_predict, stop)`` from Ollama's ``options``: the sampler options under llama-server's
    names, ``num_predict`` and ``stop``. Ollama's ``repeat_last_n: -1`` means the context size (``n_ctx`` when
    given; without it INT32_MAX, which samples the same, since a history never outgrows the context)."""
    options = body.get("options") or {}
    if not isinstance(options, dict):
        raise RequestError("'options' must be an object")
    values = {OLLAMA_SAMPLER_OPTIONS[k]: v for k, v in options.items() if k in OLLAMA_SAMPLER_OPTIONS and v is not None}
    if values.get("repeat_last_n") == -1 and not isinstance(values["repeat_last_n"], bool):
        values["repeat_last_n"] = int(n_ctx) if n_ctx else 2**31 - 1
    n_predict = options.get(fields.OLLAMA_NAMES["n_predict"], None if context is not None else -1)
    return sampler_params(values, n_predict, options.get(fields.OLLAMA_NAMES["stop"], []), n_ctx, vocab, context)


def think_options(think):
    """Ollama's ``think``, as a client of llama-server asks for it (the chat fields ``chat_template_kwargs``, as
    values, and ``reasoning_effort``): true/false set the template kwarg
    ``enable_thinking`` (which also turns the chat layer's thinking on or off); a level ("high", "medium",
    "low") turns it on with that ``reasoning_effort``; absent, the server's default."""
    if think is None:
        return {}
    if isinstance(think, bool):
        return {"chat_template_kwargs": {"enable_thinking": think}}
    if isinstance(think, str) and think in ("high", "medium", "low"):
        return {"chat_template_kwargs": {"enable_thinking": True}, "reasoning_effort": think}
    raise RequestError(f'invalid think value: {json.dumps(think)} (must be "high", "medium", "low", true, or false)')


def messages_for_chat(messages):
    """Ollama's messages as the chat layer takes them: ``thinking`` in history is the reasoning; an assistant's
    ``tool_calls`` (arguments as an object) become OpenAI's (arguments as JSON text), a tool result's
    ``tool_name`` the message's ``name``; images are refused."""
    check_messages(messages)
    out = []
    for i, m in enumerate(messages):
        if m.get("images"):
            raise RequestError(f"messages[{i}]: images are not supported by bankml: 'images' must be empty")
        msg = {"role": m["role"], "content": m.get("content") if m.get("content") is not None else ""}
        if isinstance(m.get("thinking"), str) and m["thinking"]:
            msg["reasoning_content"] = m["thinking"]
        calls = m.get("tool_calls")
        if calls:
            if not isinstance(calls, list):
                raise RequestError(f"messages[{i}]: 'tool_calls' must be an array")
            msg["tool_calls"] = []
            for call in calls:
                fn = call.get("function") if isinstance(call, dict) else None
                if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                    raise RequestError(f"messages[{i}]: each tool call needs a 'function' with a string 'name'")
                args = fn.get("arguments", {})
                msg["tool_calls"].append(
                    {
                        "type": "function",
                        "function": {
                            "name": fn["name"],
                            "arguments": args if isinstance(args, str) else json.dumps(args, ensure_ascii=False),
                        },
                    }
                )
                if isinstance(call.get("id"), str) and call["id"]:
                    msg["tool_calls"][-1]["id"] = call["id"]
            if not msg["content"]:
                msg["content"] = None  # an assistant turn of calls only, as OpenAI clients send it
        if m.get("tool_name") is not None:
            if not isinstance(m["tool_name"], str):
                raise RequestError(f"messages[{i}]: 'tool_name' must be a string")
            msg["name"] = m["tool_name"]
        if isinstance(m.get("tool_call_id"), str) and m["tool_call_id"]:
            msg["tool_call_id"] = m["tool_call_id"]
        out.append(msg)
    return out
