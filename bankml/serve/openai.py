"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

An OpenAI body (``/v1/chat/completions``, ``/v1/completions``, llama-server's ``/apply-template``) read into one
``bankml.serve.request.Request``, as the pinned llama-server reads it (``oaicompat_chat_params_parse`` and
``oaicompat_completion_params_parse`` in ``tools/server/server-common.cpp``, the native fields of
``tools/server/server-schema.cpp``): the size limits, every field's treatment (``bankml.serve.fields``), the
transport flags, the constraint (``bankml.chat.constraint``), the messages' shape, the sampler fields, the
log-probabilities and the chat fields. Everything is checked here, before a slot is taken or a prompt
tokenized; a refused request raises RequestError with llama-server's message.

Must not import: ``bankml.serve.runtime``, ``app`` or ``ollama``.
"""

import json

from bankml.chat.constraint import from_openai_text
from bankml.chat.inputs import ChatInputs, kwargs_texts
from bankml.chat.params import ChatRequestError
from bankml.errors import RequestError, json_type_name
from bankml.sampling import logprobs
from bankml.sampling.params import SAMPLER_FIELDS
from bankml.serve import fields
from bankml.serve.request import (
    ReadContext,
    Request,
    bool_field,
    check_message_count,
    check_messages,
    check_oaicompat_messages,
    check_stop_sizes,
    ignore_eos,
    read_body,
    reasoning_format_from_name,
    sampler_params,
)

__all__ = [
    "CHAT",
    "COMPLETIONS",
    "chat_inputs",
    "read_chat",
    "read_chat_body",
    "read_completion",
    "read_template",
    "reasoning_fields",
    "sampler_fields",
]

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"


def read_chat(raw, context=None):
    """The Request of a ``/v1/chat/completions`` body (``raw``: its bytes or text)."""
    return read_chat_body(read_body(raw), raw, context)


def read_converted(convert, raw, context, endpoint, known, passes_chat=False):
    """The Request of another wire format's body (its bytes or text): ``convert`` turns the parsed body into the
    chat-completions body, as llama-server's ``server_chat_convert_*`` do, which is then read as one. ``known``:
    the body's own fields (with ``passes_chat``, the chat fields too, which the conversion passes on), checked
    with --reject-unknown-fields; the converted body is not checked again."""
    context = context or ReadContext()
    body = read_body(raw)
    if context.limits.reject_unknown_fields:
        fields.check_unknown(body, set(known) | (set(fields.FIELDS[CHAT]) if passes_chat else set()))
    chat = convert(body)
    return read_chat_body(chat, json.dumps(chat, ensure_ascii=False), context, endpoint)


def read_chat_body(body, raw, context=None, endpoint=CHAT):
    """The Request of a chat-completions body already read as JSON (``raw``: its text, which the constraint's
    schema is read from): ``/v1/chat/completions``' own, or the one ``bankml.serve.anthropic`` and
    ``bankml.serve.responses`` convert their wire formats into (``endpoint`` then names the route)."""
    context = context or ReadContext()
    check_sizes(body, context.limits)
    if endpoint == CHAT and context.limits.reject_unknown_fields:
        fields.check_unknown(body, fields.FIELDS[CHAT])
    fields.check(body, CHAT)  # a tool choice llama.cpp does not know is refused there, first
    stream = bool_field(body, "stream", False)
    # llama-server's field_nested: stream_options that is not an object is ignored
    include_usage = bool_field(body.get("stream_options"), "include_usage", False)
    return_tokens = bool_field(body, "return_tokens", False)
    constraint = from_openai_text(body, raw)
    messages = body.get("messages")
    check_messages(messages)  # the shape; the chat layer reads them whole (reasoning_content, parts, ...)
    check_oaicompat_messages(messages)
    params, n_predict, stop = sampler_fields(body, vocab=context.vocab, context=context)
    probs = _probs(body, CHAT, n_predict, context)
    reasoning = reasoning_fields(body)
    return Request(
        endpoint,
        constraint,
        params,
        n_predict,
        tuple(stop),
        chat=chat_inputs(body),
        **reasoning,
        stream=stream,
        include_usage=include_usage,
        return_tokens=return_tokens,
        probs=probs,
        model=body.get("model"),
        **debug_fields(body, context),
    )


def debug_fields(body, context):
    """llama-server's ``verbose`` (its default: the server's ``-v``), ``timings_per_token`` and
    ``return_progress`` and ``cache_prompt`` (None when absent: the server's ``--cache-prompt``), read as its
    ``field_bool`` reads them, and ``n``."""
    return {
        "verbose": bool_field(body, "verbose", context.defaults.verbose),
        "timings_per_token": bool_field(body, "timings_per_token", False),
        "return_progress": bool_field(body, "return_progress", False),
        "cache_prompt": bool_field(body, "cache_prompt", None),
        "n_cache_reuse": _int_field(body, "n_cache_reuse"),
        "id_slot": _int_field(body, "id_slot"),
        "backend_sampling": bool_field(body, "backend_sampling", context.defaults.backend_sampling),
        "ignore_eos": bool_field(body, "ignore_eos", False),
        "n": read_n(body, context.n_parallel),
    }


def _int_field(body, name):
    """llama-server's ``field_num`` of an int32 field: absent or null gives None (the server's), a number is
    truncated, anything else refused."""
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RequestError(
            f"Field '{name}': [json.exception.type_error.302] type must be number, but is {json_type_name(value)}"
        )
    return int(value)


def read_n(body, n_parallel):
    """llama-server's ``n_cmpl`` (read first) or its alias ``n``: a ``field_num`` with hard limits 1 and the server's
    slots (``n_parallel``; None: no upper limit); 1 when absent."""
    for name in ("n_cmpl", "n"):
        value = body.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise RequestError(
                f"Field '{name}': [json.exception.type_error.302] type must be number, but is {json_type_name(value)}"
            )
        n = int(value)  # get<int32_t> truncates
        if n_parallel is not None and not 1 <= n <= n_parallel:
            raise RequestError(f"Field '{name}': Value must be between 1 <= value <= {n_parallel}, but got {n}")
        if n < 1:
            raise RequestError(f"Field '{name}': Value must be 1 or more, but got {n}")
        return n
    return 1


def read_completion(raw, context=None, endpoint=COMPLETIONS):
    """The Request of a ``/v1/completions`` body: a raw prompt, no template (``endpoint``: llama-server's native
    ``/completion`` reads the same fields)."""
    context = context or ReadContext()
    body = read_body(raw)
    check_sizes(body, context.limits)
    if context.limits.reject_unknown_fields:
        fields.check_unknown(body, fields.FIELDS[COMPLETIONS])
    fields.check(body, COMPLETIONS)
    stream = bool_field(body, "stream", False)
    return_tokens = bool_field(body, "return_tokens", False)
    prompts = read_prompts(body.get("prompt"))
    constraint = from_openai_text(body, raw)  # no template: the bare grammar (Model.complete)
    params, n_predict, stop = sampler_fields(body, vocab=context.vocab, context=context)
    probs = _probs(body, COMPLETIONS, n_predict, context)
    return Request(
        endpoint,
        constraint,
        params,
        n_predict,
        tuple(stop),
        prompt=prompts[0],
        more_prompts=tuple(prompts[1:]),
        stream=stream,
        return_tokens=return_tokens,
        probs=probs,
        model=body.get("model"),
        **debug_fields(body, context),
    )


_PROMPT_ELEMENTS = (
    '"prompt" elements must be a string, a list of tokens, a JSON object containing a prompt string, or a list of '
    "mixed strings & tokens."
)


def _is_token(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _subprompt(value):
    """tokenize_input_subprompt's reading of one prompt: a string, or a tuple of token ids and strings (a token
    array, a mixed array, or an object's ``prompt_string``)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value and all(_is_token(v) or isinstance(v, str) for v in value):
        return value[0] if len(value) == 1 and isinstance(value[0], str) else tuple(value)
    if isinstance(value, dict) and "prompt_string" in value:
        if "multimodal_data" in value:
            raise RequestError("Multimodal data provided, but model does not support multimodal requests.")
        inner = value["prompt_string"]
        if isinstance(inner, str) or (isinstance(inner, list) and inner):
            return _subprompt(inner)
    raise RequestError(_PROMPT_ELEMENTS)


def read_prompts(prompt):
    """The prompts of a completion body, as llama-server's tokenize_input_prompts reads ``prompt``: a string; an
    array holding a number is one prompt of token ids (and strings: a mixed prompt); any other array is one
    prompt per element (each a string, an array of tokens or a mixed one, or ``{"prompt_string": ...}``); an
    object with ``prompt_string``. Each prompt a string or a tuple of token ids and strings (``Model.complete``
    tokenizes them)."""
    if prompt is None:
        raise RequestError('"prompt" is required')
    if isinstance(prompt, list) and not any(_is_token(v) or isinstance(v, float) for v in prompt):
        out = [_subprompt(p) for p in prompt]
        if not out:
            raise RequestError('"prompt" must not be empty')
        return out
    return [_subprompt(prompt)]


def read_template(body, raw, context=None):
    """The Request of an ``/apply-template`` body (already read as JSON): the messages, the constraint, the
    tools and the chat fields, as ``/v1/chat/completions`` renders them; nothing for a generation."""
    context = context or ReadContext()
    check_sizes(body, context.limits)
    if context.limits.reject_unknown_fields:
        fields.check_unknown(body, fields.FIELDS[CHAT])
    constraint = from_openai_text(body, raw)
    messages = body.get("messages")
    check_messages(messages)
    check_oaicompat_messages(messages)
    reasoning = reasoning_fields(body)
    return Request("/apply-template", constraint, None, chat=chat_inputs(body), **reasoning, model=body.get("model"))


def check_sizes(body, limits):
    """The field size limits, before the fields are read for their meaning."""
    grammar = body.get("grammar")
    if isinstance(grammar, str) and len(grammar) > limits.max_grammar_bytes:
        raise RequestError(
            f"Field 'grammar': {len(grammar)} characters, past the server's limit of "
            f"{limits.max_grammar_bytes} (--max-grammar-bytes)"
        )
    samplers = body.get("samplers")
    if isinstance(samplers, (str, list)) and len(samplers) > limits.max_samplers:
        raise RequestError(
            f"Field 'samplers': {len(samplers)} entries, past the server's limit of {limits.max_samplers}"
        )
    if isinstance(samplers, list) and any(isinstance(x, str) and len(x) > 64 for x in samplers):
        raise RequestError("Field 'samplers': a sampler name longer than 64 characters")
    breakers = body.get("dry_sequence_breakers")
    if isinstance(breakers, list):
        if len(breakers) > limits.max_dry_breakers:
            raise RequestError(
                f"Field 'dry_sequence_breakers': {len(breakers)} breakers, past the server's "
                f"limit of {limits.max_dry_breakers}"
            )
        if any(isinstance(x, str) and len(x) > limits.max_dry_breaker_bytes for x in breakers):
            raise RequestError(
                f"Field 'dry_sequence_breakers': a breaker longer than {limits.max_dry_breaker_bytes} characters"
            )
    check_stop_sizes(body.get("stop"), limits)
    check_message_count(body.get("messages"), limits)


def sampler_fields(body, n_ctx=None, vocab=None, context=None):
    """``(SamplerParams, n_predict, stop)`` from an OpenAI body's sampler fields, named as llama-server names
    them (``bankml.sampling.params.SAMPLER_FIELDS``), its maximum tokens (``n_predict`` under its wire names,
    ``bankml.serve.fields.WIRE_NAMES``) and ``stop``.
    ``logit_bias`` is read with ``vocab`` as llama-server reads it: ids outside it and malformed entries are
    skipped, text keys tokenized; ``ignore_eos`` adds its end-of-generation biases (``ignore_eos``). The fields
    left out take ``context``'s server defaults (``--seed``, ``-n``...)."""
    values = {f.name: body[f.name] for f in SAMPLER_FIELDS if f.name != "logit_bias" and body.get(f.name) is not None}
    n_predict = fields.read_field(body, "n_predict", None if context is not None else -1)
    if n_predict is not None and (
        isinstance(n_predict, bool) or not isinstance(n_predict, (int, float)) or not float(n_predict).is_integer()
    ):  # named by the key that gave it (llama-server: "Field 'n_predict': ... type must be number")
        key = [k for k in fields.WIRE_NAMES["n_predict"] if body.get(k) is not None][-1]
        raise RequestError(f"Field '{key}': must be an integer, but is {json_type_name(n_predict)}")
    if body.get("logit_bias") is not None:
        values["logit_bias"] = body["logit_bias"]
    params, n_predict, stop = sampler_params(values, n_predict, body.get("stop", []), n_ctx, vocab, context)
    if bool_field(body, "ignore_eos", False):
        params = ignore_eos(params, vocab)
    return params, n_predict, stop


def _probs(body, endpoint, n_predict, context):
    # logprobs / top_logprobs / n_probs / post_sampling_probs, as llama-server reads them (bankml.sampling.logprobs)
    probs = logprobs.read_request(body, endpoint)
    logprobs.check_size(probs, context.n_vocab, n_predict, context.n_ctx)
    return probs


def reasoning_fields(body):
    """A chat body's reasoning fields for the runtime, as llama-server's oaicompat_chat_params_parse reads them:
    ``reasoning_budget`` (``reasoning_budget_tokens`` / ``thinking_budget_tokens``), ``reasoning_budget_message``
    and ``reasoning_effort`` (``Request``'s fields of the same names)."""
    budget = body.get("reasoning_budget_tokens", body.get("thinking_budget_tokens"))
    if budget is not None:
        if isinstance(budget, bool) or not isinstance(budget, (int, float)) or budget != int(budget):
            raise RequestError(
                "Field 'thinking_budget_tokens': [json.exception.type_error.302] type must be number, "
                f"but is {json_type_name(budget)}"
            )
        budget = int(budget)
    effort = body.get("reasoning_effort")
    if effort is not None and not isinstance(effort, str):
        raise RequestError(
            "Field 'reasoning_effort': [json.exception.type_error.302] type must be string, "
            f"but is {json_type_name(effort)}"
        )
    return {
        "reasoning_budget": budget,
        "reasoning_budget_message": body.get("reasoning_budget_message"),
        "reasoning_effort": effort,
    }


def chat_inputs(body):
    """The ``bankml.chat.ChatInputs`` of an OpenAI chat body, as llama-server's oaicompat_chat_params_parse reads
    its fields: the messages, the generation prompt and continuation, ``tools`` (an empty or absent array: none;
    with tools, a ``grammar`` field is refused), ``tool_choice`` (absent or null: ``"auto"``; an object naming
    functions is kept for the chat layer, which serves it in strict tool-call mode), ``parallel_tool_calls``
    (absent or null: what the template supports), ``chat_template_kwargs`` (each value kept as its JSON text,
    as llama-server keeps it) and ``reasoning_format``. The fields the server decides are left None
    (``Model.chat_inputs`` completes them); the response format's schema is the Request's constraint."""
    add_generation_prompt = bool_field(body, "add_generation_prompt", True)
    tools = body.get("tools")
    tool_choice = body.get("tool_choice")
    if tools is not None and not isinstance(tools, list):
        raise RequestError("Failed to parse tools: Expected 'tools' to be an array, got " + json.dumps(tools))
    if tools and tool_choice != "none" and "grammar" in body:
        raise RequestError("Cannot use custom grammar constraints with tools.")
    kwargs = body.get("chat_template_kwargs")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise RequestError(
            "Field 'chat_template_kwargs': [json.exception.type_error.302] type must be "
            f"object, but is {json_type_name(kwargs)}"
        )
    reasoning_format = body.get("reasoning_format")
    if reasoning_format is not None:
        reasoning_format = reasoning_format_from_name(reasoning_format)
    parallel = body.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise RequestError(
            "Field 'parallel_tool_calls': [json.exception.type_error.302] type must be boolean, "
            f"but is {json_type_name(parallel)}"
        )
    # tool_choice: a string llama.cpp knows, or an object naming functions (OpenAI's named and allowed_tools
    # forms): its shape is checked by ChatInputs; the chat layer serves a named one in strict tool-call mode and
    # refuses it otherwise (llama-server would read it as "auto": bankml.chat.params.resolve_tool_choice)
    try:
        return ChatInputs(
            body.get("messages"),
            tools=tools or None,
            tool_choice=tool_choice,
            parallel_tool_calls=parallel,
            chat_template_kwargs=kwargs_texts(kwargs),
            reasoning_format=reasoning_format,
            add_generation_prompt=add_generation_prompt,
            continue_final_message=body.get("continue_final_message"),
        )
    except ChatRequestError as e:
        raise RequestError(str(e)) from None
