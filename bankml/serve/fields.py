"""Every request field of the endpoints ``bankml serve`` answers, and what bankml does with it.

llama-server reads the OpenAI fields of ``oaicompat_chat_params_parse`` / ``oaicompat_completion_params_parse``
(``tools/server/server-common.cpp``) and copies every other body field into its native parameters
(``tools/server/server-schema.cpp``); Ollama reads its ``ChatRequest`` / ``GenerateRequest`` and ``Options``.
A field that shapes the answer is either honoured by bankml or refused with a 400 that names it: nothing is
silently ignored. Fields with no bearing on the answer (``user``, ``metadata``, transport and cache hints) are
accepted. Fields neither server knows are accepted, as llama-server accepts them (its default, and bankml's);
with ``bankml serve --reject-unknown-fields`` they are a 400 that names them (``check_unknown``), on every route
that reads a body: a misspelt field (``respons_format``) is then an error instead of an answer without it.

``check(body, endpoint)`` raises RequestError for the first refused field; ``FIELDS[endpoint]`` is the table
(field -> ``HONOURED`` | ``ACCEPTED`` | a predicate ``value -> refused?`` with the reason).
"""

from bankml.chat.params import ChatRequestError, check_tool_choice
from bankml.errors import RequestError
from bankml.sampling.params import OLLAMA_SAMPLER_OPTIONS, SAMPLER_FIELDS

__all__ = [
    "ACCEPTED",
    "FIELDS",
    "HONOURED",
    "OLLAMA_NAMES",
    "OLLAMA_OPTIONS",
    "TOKENIZE",
    "DETOKENIZE",
    "EMBEDDINGS",
    "OLLAMA_EMBED",
    "OLLAMA_EMBEDDINGS",
    "RERANK",
    "WIRE_NAMES",
    "check",
    "check_unknown",
    "known_only",
    "read_field",
]

HONOURED = "honoured"
ACCEPTED = "accepted (no bearing on the answer)"


#: The fields read under several wire names: llama-server's name -> the names read, in the order it reads them, the
#: last present winning (``oaicompat_chat_params_parse`` copies ``max_completion_tokens`` into ``max_tokens``'s
#: place, and ``params_from_json_cmpl`` reads ``n_predict`` over ``max_tokens``). The sampler fields have one name
#: each (``bankml.sampling.params.SAMPLER_FIELDS``).
WIRE_NAMES = {"n_predict": ("max_tokens", "max_completion_tokens", "n_predict")}
#: Ollama's names of the fields that are no sampler field, in its ``options`` (the sampler fields' Ollama names are
#: ``SAMPLER_FIELDS``' ``ollama``)
OLLAMA_NAMES = {"n_predict": "num_predict", "stop": "stop"}


def read_field(body, name, default):
    """The value of field ``name`` in ``body`` under its wire names (WIRE_NAMES), or ``default``."""
    value = default
    for key in WIRE_NAMES.get(name, (name,)):
        if body.get(key) is not None:
            value = body[key]
    return value


class Refuse:
    """Refused when ``when(value)``; ``why`` is the 400's reason."""

    def __init__(self, why, when=None):
        self.why = why
        self.when = when or (lambda v: v is not None)

    def refuses(self, value):
        try:
            return bool(self.when(value))
        except Exception:  # noqa: BLE001 - an odd value is refused, not a crash
            return True


def _truthy(v):
    return v is not None and v is not False and v != 0 and v != "" and v != [] and v != {}


def _nonempty(v):
    return v is not None and v != [] and v != {} and v != ""


_NOT_YET = "is not supported by bankml yet"
LOGPROBS = Refuse(
    "log-probabilities are not returned by bankml's Ollama endpoints yet: 'logprobs' must be false or absent", _truthy
)

# the fields common to the OpenAI endpoints and llama-server's native parameters (server-schema.cpp)
_COMMON = {
    # the sampler fields, declared in bankml.sampling.params
    **{f.name: HONOURED for f in SAMPLER_FIELDS},
    "model": ACCEPTED,
    "stream": HONOURED,
    "stream_options": HONOURED,
    "return_tokens": HONOURED,
    **{name: HONOURED for name in WIRE_NAMES["n_predict"]},
    "stop": HONOURED,
    "json_schema": HONOURED,
    "grammar": HONOURED,
    "response_format": HONOURED,
    # the slot's prompt cache (bankml.serve.runtime: the longest common prefix, then chunks shifted into place)
    "cache_prompt": HONOURED,
    "n_cache_reuse": HONOURED,
    # no bearing on the answer: identification, storage and transport hints
    "id_slot": HONOURED,  # the slot the request runs on (llama-server's get_slot_by_id)
    "sse_ping_interval": ACCEPTED,
    "user": ACCEPTED,
    "metadata": ACCEPTED,
    "store": ACCEPTED,
    "service_tier": ACCEPTED,
    "prompt_cache_key": ACCEPTED,
    "safety_identifier": ACCEPTED,
    # llama-server fields that change the answer or its shape, not implemented
    "n": HONOURED,
    "n_cmpl": HONOURED,
    # token probabilities as llama-server computes and shapes them (bankml.sampling.logprobs): chat's logprobs and
    # top_logprobs, completions' logprobs (n_probs' alias), the native n_probs and post_sampling_probs
    "logprobs": HONOURED,
    "top_logprobs": HONOURED,
    "n_probs": HONOURED,
    "post_sampling_probs": HONOURED,
    "verbose": HONOURED,
    "timings_per_token": HONOURED,
    "return_progress": HONOURED,
    "ignore_eos": HONOURED,
    "response_fields": Refuse("'response_fields' " + _NOT_YET, _nonempty),
    "n_indent": Refuse("'n_indent' " + _NOT_YET, _truthy),
    "n_keep": Refuse("context shifting is not supported by bankml: 'n_keep' must be 0 or absent", _truthy),
    "n_discard": Refuse("context shifting is not supported by bankml: 'n_discard' must be 0 or absent", _truthy),
    "t_max_prompt_ms": Refuse("'t_max_prompt_ms' " + _NOT_YET, lambda v: v is not None and v != -1),
    "t_max_predict_ms": Refuse(
        "'t_max_predict_ms' " + _NOT_YET + " (see --request-timeout)", lambda v: v is not None and v != -1
    ),
    "lora": Refuse("LoRA adapters are not supported by bankml: 'lora' must be empty", _nonempty),
    # llama-server runs the leading samplers of the chain in the model's graph; bankml samples with the CPU chain,
    # which is llama-server's answer with its default sampler order (docs/modules/server.md)
    "backend_sampling": ACCEPTED,
    "speculative.n_max": Refuse("speculative decoding is not supported by bankml: 'speculative.n_max'"),
    "speculative.n_min": Refuse("speculative decoding is not supported by bankml: 'speculative.n_min'"),
    "speculative.p_min": Refuse("speculative decoding is not supported by bankml: 'speculative.p_min'"),
    "speculative.type": Refuse("speculative decoding is not supported by bankml: 'speculative.type'"),
    "speculative.ngram_size_n": Refuse("speculative decoding is not supported by bankml: 'speculative.ngram_size_n'"),
    "speculative.ngram_size_m": Refuse("speculative decoding is not supported by bankml: 'speculative.ngram_size_m'"),
    "speculative.ngram_min_hits": Refuse(
        "speculative decoding is not supported by bankml: 'speculative.ngram_min_hits'"
    ),
    # the chat layer's outputs, which a client may set on llama-server's native endpoint: bankml derives them
    # from the template (an /v1 request's are overwritten by llama-server's chat path where the template sets them)
    "grammar_lazy": Refuse("'grammar_lazy' is set by the chat template, not by the request, in bankml", _truthy),
    "grammar_triggers": Refuse(
        "'grammar_triggers' are set by the chat template, not by the request, in bankml", _nonempty
    ),
    "preserved_tokens": Refuse(
        "'preserved_tokens' are set by the chat template, not by the request, in bankml", _nonempty
    ),
    "chat_format": Refuse("'chat_format' is set by the chat template, not by the request, in bankml"),
    "chat_parser": Refuse("'chat_parser' is set by the chat template, not by the request, in bankml"),
    "generation_prompt": Refuse("'generation_prompt' is set by the chat template, not by the request, in bankml"),
    # read by llama-server into chat_parser_params, which its parser never consults: no bearing
    "parse_tool_calls": ACCEPTED,
    "reasoning_budget_start_tag": Refuse("'reasoning_budget_start_tag' is set by the chat template in bankml"),
    "reasoning_budget_end_tags": Refuse("'reasoning_budget_end_tags' are set by the chat template in bankml"),
    "reasoning_budget_end_tag": Refuse("'reasoning_budget_end_tag' is set by the chat template in bankml"),
    "reasoning_control": Refuse(
        "ending the reasoning at runtime is not supported by bankml: 'reasoning_control' must be false", _truthy
    ),
    "echo": Refuse("Only no echo is supported", _truthy),
}

CHAT = dict(_COMMON)
CHAT.update(
    {
        "messages": HONOURED,
        "chat_template_kwargs": HONOURED,
        "reasoning_format": HONOURED,
        "reasoning_effort": HONOURED,
        "thinking_budget_tokens": HONOURED,
        "reasoning_budget_tokens": HONOURED,
        "reasoning_budget_message": HONOURED,
        "add_generation_prompt": HONOURED,
        "continue_final_message": HONOURED,
        "tools": HONOURED,
        # a tool_choice that is a string must be one llama.cpp knows (common_chat_tool_choice_parse_oaicompat);
        # one that names a function (an object) is served in strict tool-call mode and refused otherwise
        # (llama-server would read it as "auto"); checked in check() (an unknown string, first), read by
        # bankml.serve.openai.chat_inputs (its shape checked by bankml.chat.ChatInputs), resolved by the chat layer
        "tool_choice": HONOURED,
        "parallel_tool_calls": HONOURED,
        "functions": Refuse(
            "function calls are not supported by bankml yet: 'functions' must be empty or absent", _nonempty
        ),
        "function_call": Refuse(
            "function calls are not supported by bankml yet: 'function_call' must be absent",
            lambda v: v is not None and v != "none" and v != "auto",
        ),
        "modalities": Refuse(
            "only text answers are given by bankml: 'modalities' must be [\"text\"]",
            lambda v: v is not None and list(v) != ["text"],
        ),
        "audio": Refuse("audio answers are not supported by bankml: 'audio' must be absent"),
        "prediction": ACCEPTED,  # a latency hint: OpenAI's answer does not depend on it
        "prompt_cache_options": ACCEPTED,
        "prompt_cache_retention": ACCEPTED,
        "moderation": Refuse("moderation is not performed by bankml: 'moderation' must be absent"),
        "verbosity": Refuse("'verbosity' is not supported by bankml (it would change the answer)"),
        "web_search_options": Refuse("web search is not supported by bankml: 'web_search_options' must be absent"),
    }
)

COMPLETIONS = dict(_COMMON)
COMPLETIONS.update(
    {
        "prompt": HONOURED,
        # chat-only native fields: a raw completion has no chat parser (its text is the raw text), no messages,
        # and no reasoning budget without the (refused) budget tags
        "reasoning_format": ACCEPTED,
        "continue_final_message": ACCEPTED,
        "reasoning_budget_tokens": ACCEPTED,
        "reasoning_budget_message": ACCEPTED,
        "best_of": Refuse("Unsupported param: best_of", lambda v: True),
        "suffix": Refuse("Unsupported param: suffix", lambda v: True),
    }
)

OLLAMA_CHAT = {
    "model": ACCEPTED,
    "messages": HONOURED,
    "format": HONOURED,
    "options": HONOURED,
    "stream": HONOURED,
    "think": HONOURED,
    "keep_alive": ACCEPTED,
    "tools": HONOURED,
    "logprobs": LOGPROBS,
    "top_logprobs": Refuse("log-probabilities are not returned by bankml yet: 'top_logprobs' must be absent", _truthy),
}
OLLAMA_GENERATE = {
    "model": ACCEPTED,
    "prompt": HONOURED,
    "system": HONOURED,
    "raw": HONOURED,
    "format": HONOURED,
    "options": HONOURED,
    "stream": HONOURED,
    "think": HONOURED,
    "keep_alive": ACCEPTED,
    "suffix": Refuse("'suffix' (fill in the middle) is not supported by bankml", _nonempty),
    "images": Refuse("images are not supported by bankml: 'images' must be empty", _nonempty),
    "template": Refuse("a request's own 'template' is not supported by bankml (give --chat-template-file)", _nonempty),
    "context": Refuse("'context' (the tokens of an earlier answer) is not supported by bankml", _nonempty),
    "logprobs": LOGPROBS,
    "top_logprobs": Refuse("log-probabilities are not returned by bankml yet: 'top_logprobs' must be absent", _truthy),
    "width": Refuse("image generation is not supported by bankml: 'width'"),
    "height": Refuse("image generation is not supported by bankml: 'height'"),
    "steps": Refuse("image generation is not supported by bankml: 'steps'"),
}

# Ollama's api.Options: the sampling options bankml honours (bankml.sampling.params), those with no bearing on
# the answer (where and how the model is loaded), and the rest
OLLAMA_OPTIONS = {
    **{name: HONOURED for name in OLLAMA_SAMPLER_OPTIONS},
    **{name: HONOURED for name in OLLAMA_NAMES.values()},
    "num_gpu": ACCEPTED,
    "main_gpu": ACCEPTED,
    "use_mmap": ACCEPTED,
    "use_mlock": ACCEPTED,
    "numa": ACCEPTED,
    "num_thread": ACCEPTED,
    "low_vram": ACCEPTED,
    "vocab_only": ACCEPTED,
    "f16_kv": ACCEPTED,
    "logits_all": ACCEPTED,
    "embedding_only": Refuse("option 'embedding_only' is not supported by bankml", _truthy),
    "num_keep": Refuse("context shifting is not supported by bankml: option 'num_keep'"),
    "num_ctx": Refuse("the context size is the server's (-c): option 'num_ctx'"),
    "num_batch": Refuse("the batch size is the server's (-b): option 'num_batch'"),
    "penalize_newline": Refuse("option 'penalize_newline' is not supported by bankml", _truthy),
    "tfs_z": Refuse("option 'tfs_z' is not supported by bankml", lambda v: v is not None and v != 1),
}

FIELDS = {
    "/v1/chat/completions": CHAT,
    "/v1/completions": COMPLETIONS,
    "/api/chat": OLLAMA_CHAT,
    "/api/generate": OLLAMA_GENERATE,
}


def check(body, endpoint, n_ctx=None):
    """RequestError naming the first field of ``body`` that ``endpoint`` refuses (unknown fields pass)."""
    table = FIELDS[endpoint]
    if endpoint == "/v1/chat/completions" and body.get("top_logprobs") is not None and body.get("logprobs") is not True:
        raise RequestError("top_logprobs requires logprobs to be set to true")  # llama-server's message
    if (
        endpoint == "/v1/chat/completions"
        and _truthy(body.get("logprobs"))
        and body.get("stream") is True
        and isinstance(body.get("tools"), list)
        and body["tools"]
    ):
        raise RequestError("logprobs is not supported with tools + stream")  # oaicompat_chat_params_parse
    if endpoint == "/v1/chat/completions":
        # as llama-server's oaicompat_chat_params_parse, a tool choice llama.cpp does not know is refused before
        # the other fields are read (params_from_json_cmpl)
        try:
            check_tool_choice(body.get("tool_choice"))
        except ChatRequestError as e:
            raise RequestError(str(e)) from None
    for name, value in body.items():
        rule = table.get(name)
        if isinstance(rule, Refuse) and rule.refuses(value):
            raise RequestError(_message(name, rule.why))
    if endpoint.startswith("/api/"):
        options = body.get("options")
        if isinstance(options, dict):
            for name, value in options.items():
                rule = OLLAMA_OPTIONS.get(name)
                if name == "num_ctx" and n_ctx is not None and value == n_ctx:
                    continue
                if isinstance(rule, Refuse) and rule.refuses(value):
                    raise RequestError(_message("options." + name, rule.why))


#: llama-server's /tokenize and /detokenize fields
TOKENIZE = frozenset(("content", "add_special", "parse_special", "with_pieces"))
DETOKENIZE = frozenset(("tokens",))
#: the embedding routes' fields: llama-server's (handle_embeddings_impl, post_rerank; ``model`` and OpenAI's
#: ``user`` accepted), Ollama's EmbedRequest and EmbeddingRequest
EMBEDDINGS = frozenset(("input", "content", "encoding_format", "embd_normalize", "model", "user"))
RERANK = frozenset(("query", "documents", "texts", "top_n", "return_text", "model"))
OLLAMA_EMBED = frozenset(("model", "input", "truncate", "dimensions", "options", "keep_alive"))
OLLAMA_EMBEDDINGS = frozenset(("model", "prompt", "options", "keep_alive"))


def check_unknown(body, known, prefix=""):
    """RequestError naming every field of ``body`` (a JSON object) that is not in ``known`` (--reject-unknown-fields:
    a field the server does not read is refused, where llama-server ignores it)."""
    unknown = [prefix + str(name) for name in body if name not in known]
    if unknown:
        names = ", ".join(f"'{name}'" for name in unknown)
        raise RequestError(
            f"unknown field{'s' if len(unknown) > 1 else ''} {names}: this server refuses the fields it does not "
            "read (--reject-unknown-fields)"
        )


def known_only(body, known, limits):
    """``body``, its fields not in ``known`` refused (``check_unknown``) when the server was started with
    ``--reject-unknown-fields`` (``limits``, a ServerLimits); the body as it is otherwise."""
    if limits.reject_unknown_fields:
        check_unknown(body, known)
    return body


def _message(name, why):
    # the field's name always appears in the message
    return why if f"'{name.split('.')[-1]}'" in why or name in why else f"{why}: '{name}'"
