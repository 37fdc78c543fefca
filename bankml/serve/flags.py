# Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.
"""The values of llama-server's context flags (``common/arg.cpp``), as bankml's Model takes them.

``model_load_options`` and ``chat_model_options`` give a Model's keyword arguments from ``bankml generate``'s and
``bankml serve``'s parsed command line.

* ``-fa, --flash-attn [on|off|auto]`` (default ``auto``): ``on``/``enabled``/``true``/``1`` and
  ``off``/``disabled``/``false``/``0`` (llama.cpp's ``is_truthy``/``is_falsey``), ``auto`` (``is_autoy``: also
  ``-1``). ``auto`` is handed to libllama as ``LLAMA_FLASH_ATTN_TYPE_AUTO``, which resolves it when the context is
  created exactly as in llama-server (same library): on for the CPU, where every layer's attention runs on a
  device that supports it. Flash attention changes the logits (not by much, but enough to change an argmax).
  ``bankml.runtime.Model``'s own default stays ``False`` (llama-cpp-python's ``Llama(flash_attn=False)``); the
  ``bankml serve`` command's default is llama-server's ``auto``.
* ``-ctk, --cache-type-k`` / ``-ctv, --cache-type-v`` (default ``f16``): the KV cache's ggml type, one of
  ``f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1`` (``kv_cache_types``). A type other than f16 changes the
  logits.
"""

import json

from bankml.schema.grammar import DEFAULT_STRICT_STYLE

__all__ = [
    "chat_model_options",
    "model_load_options",
    "ENV_OPTIONS",
    "FLASH_ATTN_VALUES",
    "KV_CACHE_TYPES",
    "context_options",
    "env_defaults",
    "flash_attn_name",
    "flash_attn_type",
    "kv_cache_type",
    "sleep_idle_seconds",
]

# get_all_kv_cache_types(): the names llama-server accepts, in its order
KV_CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
_TRUTHY = ("on", "enabled", "true", "1")
_FALSEY = ("off", "disabled", "false", "0")
_AUTOY = ("auto", "-1")
FLASH_ATTN_VALUES = _TRUTHY + _FALSEY + _AUTOY


def flash_attn_name(value):
    """``"on"``, ``"off"`` or ``"auto"`` for a flag value or a bool; ValueError (llama-server's message) else."""
    if value is True:
        return "on"
    if value is False or value is None:
        return "off"
    text = str(value)
    if text in _TRUTHY:
        return "on"
    if text in _FALSEY:
        return "off"
    if text in _AUTOY:
        return "auto"
    raise ValueError(f"error: unknown value for --flash-attn: '{text}'")


def flash_attn_type(L, value):
    """The ``llama_flash_attn_type`` of a value (``L``: the llama_cpp module)."""
    return {
        "on": L.LLAMA_FLASH_ATTN_TYPE_ENABLED,
        "off": L.LLAMA_FLASH_ATTN_TYPE_DISABLED,
        "auto": L.LLAMA_FLASH_ATTN_TYPE_AUTO,
    }[flash_attn_name(value)]


def kv_cache_type(L, name):
    """The ggml type id of a KV cache type name (``kv_cache_type_from_str``); ValueError for another name."""
    if name not in KV_CACHE_TYPES:
        raise ValueError(f"Unsupported cache type: {name}")
    return getattr(L, "GGML_TYPE_" + name.upper())


# llama-server's environment variables for the options bankml serve shares (common/arg.cpp's set_env), read
# before the command line, which overrides them: (variable, argparse dest, kind)
ENV_OPTIONS = (
    ("LLAMA_ARG_MODEL", "model", "str"),
    ("LLAMA_ARG_THREADS", "threads", "int"),
    ("LLAMA_ARG_CTX_SIZE", "ctx_size", "int"),
    ("LLAMA_ARG_BATCH", "batch_size", "int"),
    ("LLAMA_ARG_UBATCH", "ubatch_size", "int"),
    ("LLAMA_ARG_FLASH_ATTN", "flash_attn", "str"),
    ("LLAMA_ARG_CACHE_TYPE_K", "cache_type_k", "str"),
    ("LLAMA_ARG_CACHE_TYPE_V", "cache_type_v", "str"),
    ("LLAMA_ARG_N_PARALLEL", "parallel", "int"),
    ("LLAMA_ARG_ALIAS", "alias", "str"),
    ("LLAMA_ARG_HOST", "host", "str"),
    ("LLAMA_ARG_PORT", "port", "int"),
    ("LLAMA_ARG_ENDPOINT_METRICS", "metrics", "flag"),
    ("LLAMA_ARG_ENDPOINT_PROPS", "props", "flag"),
    ("LLAMA_ARG_ENDPOINT_SLOTS", "slots", "bool"),
    ("LLAMA_ARG_REPACK", "no_repack", "not-bool"),
    ("LLAMA_ARG_CHAT_TEMPLATE_FILE", "chat_template_file", "str"),
    ("LLAMA_ARG_CHAT_TEMPLATE", "chat_template", "str"),
    ("LLAMA_ARG_JINJA", "jinja", "bool"),
    ("LLAMA_ARG_TAGS", "model_tags", "str"),
    ("LLAMA_ARG_REASONING", "reasoning", "str"),
    ("LLAMA_ARG_THINK", "reasoning_format", "str"),
    ("LLAMA_ARG_THINK_BUDGET", "reasoning_budget", "int"),
    ("LLAMA_ARG_THINK_BUDGET_MESSAGE", "reasoning_budget_message", "str"),
    ("LLAMA_ARG_CHAT_TEMPLATE_KWARGS", "chat_template_kwargs", "str"),
    ("LLAMA_ARG_N_PREDICT", "n_predict", "int"),
    ("LLAMA_ARG_CORS_ORIGINS", "cors_origins", "str"),
    ("LLAMA_ARG_CORS_METHODS", "cors_methods", "str"),
    ("LLAMA_ARG_CORS_HEADERS", "cors_headers", "str"),
    ("LLAMA_ARG_CORS_CREDENTIALS", "cors_credentials", "bool"),
    ("LLAMA_ARG_KV_UNIFIED", "kv_unified", "bool"),
    ("LLAMA_ARG_KV_UNIFIED_PER_SLOT", "kv_unified_per_slot", "int"),
    ("LLAMA_ARG_EMBEDDINGS", "embedding", "flag"),
    ("LLAMA_ARG_POOLING", "pooling", "str"),
    ("LLAMA_ARG_RERANKING", "embedding", "rerank"),
    ("LLAMA_ARG_BACKEND_SAMPLING", "backend_sampling", "flag"),
)


def _bool_value(text):
    if text in _TRUTHY:
        return True
    if text in _FALSEY:
        return False
    raise ValueError("invalid boolean value")


def env_defaults(environ):
    """``bankml serve``'s defaults from llama-server's environment variables present in ``environ``; a ValueError
    with llama-server's message for a value it would refuse. A variable set to an empty string counts as unset."""
    out = {}
    for var, dest, kind in ENV_OPTIONS:
        text = environ.get(var)
        if not text:
            continue
        try:
            if kind == "int":
                out[dest] = int(text.strip())
            elif kind == "flag":  # a void option: set when the value is truthy
                if text in _TRUTHY:
                    out[dest] = True
            elif kind == "rerank":  # --reranking: embeddings with rank pooling
                if text in _TRUTHY:
                    out.update({dest: True, "pooling": "rank"})
            elif kind == "bool":
                out[dest] = _bool_value(text)
            elif kind == "not-bool":
                out[dest] = not _bool_value(text)
            else:
                out[dest] = text
        except ValueError as err:
            msg = "stoi" if kind == "int" else str(err)
            raise ValueError(f'error while handling environment variable "{var}": {msg}') from None
    return out


def context_options(args, flash_attn_default):
    """Model(...) keyword arguments from the context flags (a ValueError with llama-server's message)."""
    fa = args.flash_attn if args.flash_attn is not None else flash_attn_default
    flash_attn_name(fa)
    for name in (args.cache_type_k, args.cache_type_v):
        if name not in KV_CACHE_TYPES:
            raise ValueError(f"Unsupported cache type: {name}")
    return {"flash_attn": fa, "cache_type_k": args.cache_type_k, "cache_type_v": args.cache_type_v}


def model_load_options(args):
    """Model(...) keyword arguments from the loading options ``bankml generate`` and ``bankml serve`` share
    (llama-server's -c, -b, -ub, -t, -tb, --no-repack)."""
    return {
        "n_ctx": args.ctx_size,
        "n_batch": args.batch_size,
        "n_ubatch": args.ubatch_size,
        "n_threads": args.threads,
        "n_threads_batch": args.threads_batch,
        "no_repack": args.no_repack,
    }


def chat_model_options(args):
    """Model(...) keyword arguments from the chat options (a ValueError for a bad --chat-template-kwargs)."""
    kwargs = None
    if getattr(args, "chat_template_kwargs", None):
        try:
            kwargs = json.loads(args.chat_template_kwargs)
        except ValueError as err:
            raise ValueError(f"--chat-template-kwargs is not JSON: {err}") from None
        if not isinstance(kwargs, dict):
            raise ValueError("--chat-template-kwargs must be a JSON object")
    if args.reasoning_budget < -1:
        raise ValueError("--reasoning-budget: invalid value (-1 or more)")
    style = getattr(args, "strict_style", None)
    if style is not None and getattr(args, "json_schema_mode", "llama.cpp") != "strict":
        raise ValueError("--strict-style applies to --json-schema-mode strict only")
    return {
        "chat_template_file": args.chat_template_file,
        "chat_template": getattr(args, "chat_template", None),
        "use_jinja": getattr(args, "jinja", True),
        "reasoning": args.reasoning,
        "reasoning_format": args.reasoning_format,
        "reasoning_budget": args.reasoning_budget,
        "reasoning_budget_message": args.reasoning_budget_message,
        "chat_template_kwargs": kwargs,
        "json_schema_mode": getattr(args, "json_schema_mode", "llama.cpp"),
        "strict_style": style or DEFAULT_STRICT_STYLE,
        "tool_call_mode": getattr(args, "tool_call_mode", "llama.cpp"),
    }


def sleep_idle_seconds(value):
    """``--sleep-idle-seconds``' value as llama-server's common/arg.cpp takes it (-1: never sleep); a ValueError
    with its message otherwise."""
    n = int(value)
    if n == 0 or n < -1:
        raise ValueError("invalid value: cannot be 0 or less than -1")
    return n
