"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

One request to ``bankml serve``, typed: what ``bankml.serve.openai`` and ``bankml.serve.ollama`` read from a
body, every field checked (``bankml.serve.fields``), before any slot is taken or any prompt tokenized. The
runtime (``Model.prepare``) makes a Job of it; the HTTP app streams and shapes the answer.

Owns: ``Request`` (the typed request; a chat's fields are a ``bankml.chat.ChatInputs``, the chat layer's one input
value, built here by the readers and completed by the runtime), ``ServerLimits`` (what one request may ask of the
server), ``ReadContext`` (what a body is read against: the limits and the model's sizes), and the readings
both wire formats share: the JSON body, llama-server's ``field_bool``, the stop strings, the maximum tokens
and the sampler fields' tail (``SamplerParams.from_server``), ``common_reasoning_format_from_name``.

Must not import: ``bankml.serve.runtime`` (which imports this module), ``app``, ``openai`` or ``ollama``.
"""

import json
from dataclasses import dataclass, field
from typing import Any, Optional, Tuple

from bankml.chat.constraint import Constraint
from bankml.chat.inputs import ChatInputs
from bankml.errors import RequestError, json_type_name
from bankml.sampling.logprobs import ProbRequest
from bankml.sampling.params import SamplerParams
from bankml.schema import jsondepth

__all__ = [
    "CHAT_ENDPOINT",
    "MediaError",
    "ReadContext",
    "Request",
    "ServerDefaults",
    "ServerLimits",
    "bool_field",
    "check_message_count",
    "check_messages",
    "check_oaicompat_messages",
    "check_stop_sizes",
    "ignore_eos",
    "read_body",
    "reasoning_format_from_name",
    "sampler_params",
]


#: the endpoint a chat Request made in Python names (``Request.for_chat``)
CHAT_ENDPOINT = "/v1/chat/completions"


class MediaError(RequestError):
    """An image (or other media) in a request to a model that reads none: llama-server answers it with a 500
    (``server_error``) and this message when it has no multimodal projector (``oaicompat_content_load_media``)."""

    def __init__(self, kind="image"):
        super().__init__(
            f"{kind} input is not supported - hint: if this is unexpected, you may need to provide the mmproj"
        )


@dataclass(frozen=True)
class ServerLimits:
    """What one request may ask of the server; past a limit it gets a 400 (503 for a server too busy to
    prepare it) before any token is tokenized or computed. llama-server has none of these (its HTTP layer
    reads any body; it tokenizes before it compares the prompt with the context).

    * ``max_body_bytes``: the request body (``Content-Length`` first, then as it is read);
    * ``max_messages``: chat messages; ``max_grammar_bytes``: a GBNF ``grammar`` field;
    * ``max_stop`` / ``max_stop_bytes``: stop strings (each is searched for after every token);
    * ``max_samplers``: entries of ``samplers`` (each costs a pass over the candidates per token);
    * ``max_dry_breakers`` / ``max_dry_breaker_bytes``: DRY sequence breakers (each is tokenized per request);
    * ``prepare_seconds``: reading, checking, converting and tokenizing one request (its schema conversion
      stops at this deadline too);
    * ``request_seconds``: a whole request, waiting for a slot included; a generation still running then
      stops with ``finish_reason: "length"``, as llama-server's ``t_max_predict_ms`` stops one;
    * ``max_preparing``: requests prepared at once (each on its own thread); more wait for a turn within
      their ``prepare_seconds``, then get a 503;
    * ``reject_unknown_fields``: a body field the route does not read is a 400 naming it (llama-server, and
      bankml by default, ignore it).
    """

    max_body_bytes: int = 8 * 1024 * 1024
    max_messages: int = 4096
    max_grammar_bytes: int = 1024 * 1024
    max_stop: int = 64
    max_stop_bytes: int = 4096
    max_samplers: int = 64
    max_dry_breakers: int = 64
    max_dry_breaker_bytes: int = 1024
    prepare_seconds: float = 30.0
    request_seconds: float = 600.0
    max_preparing: int = 8
    reject_unknown_fields: bool = False


@dataclass(frozen=True)
class ReadContext:
    """What a body is read against: the server's ``limits``, the model's context and vocabulary sizes (Ollama's
    ``num_ctx`` equal to the context is accepted; the log-probabilities' size bound), whether it has a chat
    template (Ollama's ``/api/generate`` is raw without one), the vocabulary that reads ``logit_bias``'
    text keys with libllama's tokenizer (None: text keys are skipped), and the server's ``defaults`` of the
    fields a body leaves out."""

    limits: ServerLimits = field(default_factory=ServerLimits)
    n_ctx: Optional[int] = None
    n_vocab: int = 0
    chat_template: bool = True
    vocab: Any = None
    defaults: "ServerDefaults" = field(default_factory=lambda: ServerDefaults())
    n_parallel: Optional[int] = None  # the server's slots: the most completions (``n``) one request may ask


@dataclass(frozen=True)
class ServerDefaults:
    """The server's defaults of the fields a body leaves out, from llama-server's flags (its requests start from
    ``params_base``): ``sampler`` (``(field, value)`` pairs: ``--seed``, ``--temp``...), ``n_predict`` (``-n``),
    ``verbose`` (``-v``: the answers carry ``__verbose``) and ``backend_sampling`` (``-bs``: reported only, bankml
    samples with the CPU chain)."""

    sampler: Tuple[Tuple[str, Any], ...] = ()
    n_predict: int = -1
    verbose: bool = False
    backend_sampling: bool = False


@dataclass(frozen=True)
class Request:
    """One request, read and checked: a chat (``chat``, a ``bankml.chat.ChatInputs``: the messages and the chat
    fields, through the template; its fields left None are the server's options, ``Model.chat_inputs``) or a raw
    prompt (``prompt``, no template), its ``constraint``, sampler ``params``, ``n_predict`` (-1: until the end
    or the context) and ``stop`` strings; a chat's ``reasoning_effort`` (merged into the template kwargs by the
    runtime, as llama-server merges it with its own), ``reasoning_budget`` (``thinking_budget_tokens``; None:
    the server's) and ``reasoning_budget_message``; how the answer is sent (``stream``, ``include_usage``,
    ``return_tokens``), the token log-probabilities asked for (``probs``), the ``model`` name the body gave
    (None: the server's), llama-server's ``verbose``, ``timings_per_token``, ``return_progress`` and
    ``cache_prompt`` (None: the server's ``--cache-prompt``), and ``n``
    (its completions of the prompt). ``Request.for_chat`` makes a chat one in Python."""

    endpoint: str
    constraint: Constraint
    params: Optional[SamplerParams]  # None: the defaults (an /apply-template request has none)
    n_predict: int = -1
    stop: Tuple[str, ...] = ()
    chat: Optional[ChatInputs] = None
    prompt: Any = None  # a string, or a tuple of token ids and strings (llama-server's token and mixed prompts)
    more_prompts: Tuple[Any, ...] = ()  # a completion body's other prompts (an array of prompts), each a job
    reasoning_effort: Optional[str] = None
    reasoning_budget: Optional[int] = None
    reasoning_budget_message: Any = None  # a string; checked where the template has thinking tags
    stream: bool = False
    include_usage: bool = False
    return_tokens: bool = False
    probs: ProbRequest = field(default_factory=ProbRequest)
    model: Optional[str] = None
    # llama-server's debugging fields: ``__verbose`` in the answer, timings on every partial result, prompt
    # progress events before a stream's first token
    verbose: bool = False
    timings_per_token: bool = False
    return_progress: bool = False
    cache_prompt: Optional[bool] = None  # reuse the slot's cached prefix (None: the model's default)
    n_cache_reuse: Optional[int] = None  # the shortest cached chunk shifted into place (None: the model's default)
    id_slot: Optional[int] = None  # llama-server's id_slot: the slot to generate on (None or -1: any)
    backend_sampling: bool = False  # reported in generation_settings; bankml samples with the CPU chain
    ignore_eos: bool = False  # the EOG biases are in ``params``; kept for generation_settings
    n: int = 1  # llama-server's n_cmpl: completions of the prompt, each on a slot of its own

    @property
    def is_chat(self):
        return self.chat is not None

    @property
    def messages(self):
        """A chat's messages (None for a raw prompt)."""
        return self.chat.messages if self.chat is not None else None

    @classmethod
    def for_chat(cls, inputs, constraint=None, params=None, n_predict=-1, stop=(), endpoint=CHAT_ENDPOINT, **fields):
        """A chat Request made in Python (the CLI, benchmarks, tests): ``inputs`` a ``ChatInputs``, the rest
        ``Request``'s fields (``constraint`` None: unconstrained)."""
        if not isinstance(inputs, ChatInputs):
            raise TypeError("Request.for_chat takes a bankml.chat.ChatInputs, got " + type(inputs).__name__)
        return cls(endpoint, constraint or Constraint(), params, n_predict, tuple(stop or ()), chat=inputs, **fields)


def read_body(raw):
    """The JSON object of a request body (``RequestError`` for anything else); its nesting is bounded before
    the decoder recurses (``bankml.schema.jsondepth``)."""
    try:
        body = jsondepth.loads(raw)
    except RecursionError:
        raise RequestError(f"Invalid JSON body: nesting too deep (more than {jsondepth.MAX_DEPTH} levels)") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise RequestError(f"Invalid JSON body: {e}") from None
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    return body


def bool_field(obj, name, default):
    """llama-server's ``field_bool``: absent or null gives the default, anything but a boolean is refused."""
    if not isinstance(obj, dict) or obj.get(name) is None:
        return default
    value = obj[name]
    if not isinstance(value, bool):
        raise RequestError(
            f"Field '{name}': [json.exception.type_error.302] type must be boolean, but is {json_type_name(value)}"
        )
    return value


def check_stop_sizes(stop, limits):
    """The stop strings within ``max_stop`` and ``max_stop_bytes`` (their meaning is read later)."""
    if isinstance(stop, list):
        if len(stop) > limits.max_stop:
            raise RequestError(f"Field 'stop': {len(stop)} stop strings, past the server's limit of {limits.max_stop}")
        if any(isinstance(x, str) and len(x) > limits.max_stop_bytes for x in stop):
            raise RequestError(f"Field 'stop': a stop string longer than {limits.max_stop_bytes} characters")
    elif isinstance(stop, str) and len(stop) > limits.max_stop_bytes:
        raise RequestError(f"Field 'stop': a stop string longer than {limits.max_stop_bytes} characters")


def check_message_count(messages, limits):
    if isinstance(messages, list) and len(messages) > limits.max_messages:
        raise RequestError(
            f"{len(messages)} messages, past the server's limit of {limits.max_messages} (--max-messages)"
        )


# OpenAI content parts llama-server loads as media (oaicompat_content_load_media): refused without a multimodal
# projector with its 500
_MEDIA_PARTS = {"image_url": "image", "input_audio": "audio", "input_video": "video", "video_url": "video"}


def _message_text(content, name):
    # OpenAI content parts: the text parts joined (llama-server concatenates them)
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for j, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind in _MEDIA_PARTS:
                raise MediaError(_MEDIA_PARTS[kind])
            if kind != "text" or not isinstance(part.get("text"), str):
                # llama-server: "unsupported content[].type" (a 400)
                raise RequestError(
                    f"Field '{name}.content[{j}]': unsupported content part: only "
                    '{"type": "text", "text": ...} is accepted'
                )
            parts.append(part["text"])
        return "\n".join(parts)
    raise RequestError(f"Field '{name}.content': message content must be a string or an array of text parts")


def check_messages(messages):
    """The messages' shape (an array of objects with a string ``role`` and text content; an empty array is
    rendered as the generation prompt alone, as llama-server renders it); their ``role`` / ``content`` pairs with
    the content's text parts joined."""
    if not isinstance(messages, list):
        raise RequestError("'messages' must be an array")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise RequestError(f"messages[{i}]: each message needs a string 'role'")
        out.append({"role": m["role"], "content": _message_text(m.get("content"), f"messages[{i}]")})
    return out


def check_oaicompat_messages(messages):
    """llama-server's checks of each message before rendering (oaicompat_chat_params_parse), with its messages:
    a message other than the assistant's has a ``content``, an assistant message a ``content`` or
    ``tool_calls`` (RequestError, a 400). ``messages`` passed ``check_messages``."""
    for m in messages:
        role = m.get("role")
        if role != "assistant" and "content" not in m:
            raise RequestError("All non-assistant messages must contain 'content'")
        if role == "assistant" and "content" not in m and "tool_calls" not in m:
            raise RequestError("Assistant message must contain either 'content' or 'tool_calls'!")


def sampler_params(fields, n_predict, stop, n_ctx=None, vocab=None, context=None):
    """``(SamplerParams, n_predict, stop)`` from the sampler fields both wire formats name as llama-server does
    (``fields``), the maximum tokens and the stop strings: read as ``SamplerParams.from_server`` reads them
    (clamped where llama-server clamps, RequestError where it answers 400). A field left out (``n_predict``
    None) takes the server's default of ``context`` (a ReadContext), as llama-server's ``params_base``."""
    if context is not None:
        fields = {**dict(context.defaults.sampler), **fields}
        if n_predict is None:
            n_predict = context.defaults.n_predict
    if n_predict is None:
        n_predict = -1
    if stop is None:
        stop = []
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
        raise RequestError("'stop' must be a string or an array of strings")
    if isinstance(n_predict, bool) or not isinstance(n_predict, (int, float)) or not float(n_predict).is_integer():
        raise RequestError("'max_tokens' must be an integer")
    try:
        params = SamplerParams.from_server(fields, n_ctx, vocab=vocab)
    except (ValueError, TypeError) as e:
        raise RequestError(str(e)) from None
    return params, int(n_predict), [s for s in stop if s]


def ignore_eos(params, vocab):
    """llama-server's ``ignore_eos`` handler: the request's logit biases, then -inf for every end-of-generation
    token of the vocabulary (its ``logit_bias_eog``: ``vocab.eog_tokens``), so the generation never ends on one."""
    eog = tuple(getattr(vocab, "eog_tokens", ()) or ())
    if not eog:
        raise RequestError("'ignore_eos' needs the model's end-of-generation tokens")
    return params.replace(logit_bias=tuple(params.logit_bias) + tuple((t, float("-inf")) for t in eog))


def reasoning_format_from_name(name):
    """common_reasoning_format_from_name; bankml models ``none`` and ``deepseek`` (``auto`` parses as deepseek)."""
    if not isinstance(name, str):
        raise RequestError(
            "Field 'reasoning_format': [json.exception.type_error.302] type must be string, but is "
            f"{json_type_name(name)}"
        )
    if name in ("deepseek", "auto"):
        return "deepseek"
    if name == "none":
        return "none"
    if name == "deepseek-legacy":
        raise RequestError("reasoning_format 'deepseek-legacy' is not supported by bankml yet")
    raise RequestError("Unknown reasoning format: " + name)
