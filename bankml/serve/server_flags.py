"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

Every command-line flag of the pinned llama-server (``common/arg.cpp``, as its ``--help`` lists them) and what
``bankml serve`` does with it. A flag is

* **served** as llama-server serves it: defined by ``bankml serve``'s own parser (``bankml.cli``), the sampler
  flags of ``SAMPLER_FLAGS`` among them (each the server's default of one request field);
* **accepted with no bearing** on any answer (``NO_BEARING``: logging, the prompt cache bankml does not keep,
  HTTP threads), each with the reason;
* or **refused** at start, with a message naming the flag and why (``REFUSED``), never dropped.

A flag that is none of these is no llama-server flag, and argparse refuses it as unknown.
``tests/serve/test_server_flags.py`` checks this table against the pinned llama-server's ``--help``.
"""

import argparse
import os

from bankml.serve.contexts import POOLING
from bankml.serve.flags import sleep_idle_seconds

__all__ = ["NO_BEARING", "REFUSED", "SAMPLER_FLAGS", "add_arguments", "refusal", "sampler_defaults", "verbose"]

#: llama-server's sampler flags served as the default of a request field: (flags, field, type)
SAMPLER_FLAGS = (
    (("-s", "--seed"), "seed", int),
    (("--temp", "--temperature"), "temperature", float),
    (("--top-k",), "top_k", int),
    (("--top-p",), "top_p", float),
    (("--min-p",), "min_p", float),
    (("--top-nsigma", "--top-n-sigma"), "top_n_sigma", float),
    (("--xtc-probability",), "xtc_probability", float),
    (("--xtc-threshold",), "xtc_threshold", float),
    (("--typical", "--typical-p"), "typical_p", float),
    (("--repeat-last-n",), "repeat_last_n", int),
    (("--repeat-penalty",), "repeat_penalty", float),
    (("--presence-penalty",), "presence_penalty", float),
    (("--frequency-penalty",), "frequency_penalty", float),
    (("--dry-multiplier",), "dry_multiplier", float),
    (("--dry-base",), "dry_base", float),
    (("--dry-allowed-length",), "dry_allowed_length", int),
    (("--dry-penalty-last-n",), "dry_penalty_last_n", int),
    (("--adaptive-target",), "adaptive_target", float),
    (("--adaptive-decay",), "adaptive_decay", float),
    (("--dynatemp-range",), "dynatemp_range", float),
    (("--dynatemp-exp",), "dynatemp_exponent", float),
    (("--mirostat",), "mirostat", int),
    (("--mirostat-lr",), "mirostat_eta", float),
    (("--mirostat-ent",), "mirostat_tau", float),
)

_PROMPT_CACHE = (
    "bankml keeps each slot's tokens only (no host-memory prompt cache, no context checkpoints): a prompt reuses "
    "the longest prefix it shares with its slot's cache"
)

_LOGGING = "bankml's log is its own (a line at start, errors on stderr)"

#: flags accepted with no bearing on any answer: flag -> (takes a value, why)
NO_BEARING = {
    **{f: (False, _LOGGING) for f in ("--log-disable", "--perf", "--no-perf", "--log-jsonl", "--no-log-jsonl")},
    **{f: (False, _LOGGING) for f in ("--log-prefix", "--no-log-prefix", "--log-timestamps", "--no-log-timestamps")},
    **{f: (True, _LOGGING) for f in ("--log-file", "--log-colors")},
    **{f: (False, _PROMPT_CACHE) for f in ("--cache-idle-slots", "--no-cache-idle-slots")},
    **{f: (True, _PROMPT_CACHE) for f in ("-cram", "--cache-ram", "-ctxcp", "--ctx-checkpoints")},
    **{f: (True, _PROMPT_CACHE) for f in ("--swa-checkpoints", "-cms", "--checkpoint-min-step")},
    "--offline": (False, "bankml downloads nothing: it loads the local GGUF file of -m"),
    "--no-ui": (False, "bankml serves no web UI"),
    "--no-webui": (False, "bankml serves no web UI"),
    "--no-mmproj": (False, "bankml loads no multimodal projector"),
    "--no-mmproj-auto": (False, "bankml loads no multimodal projector"),
    "--no-context-shift": (False, "bankml never shifts the context (llama-server's default)"),
    "--warmup": (False, "bankml runs no warmup decode; it changes no answer"),
    **{
        f: (False, "each slot is a context of its own; batching changes no answer")
        for f in ("-cb", "--cont-batching", "-nocb", "--no-cont-batching")
    },
    **{f: (True, "uvicorn's worker answers HTTP") for f in ("--threads-http", "-to", "--timeout")},
    "--reuse-port": (False, "uvicorn's socket is bankml's"),
    "--repack": (False, "bankml's default, as llama-server's (--no-repack turns it off)"),
    "--reasoning-preserve": (False, "the template's reasoning history is kept, llama-server's default"),
    "--prefill-assistant": (False, "a final assistant message is continued, llama-server's default"),
}

_SPEC = "speculative decoding (draft models, n-gram and lookup drafts) is not implemented by bankml"
_LORA = "LoRA adapters and control vectors are not implemented by bankml"
_TOOLS = "server-side tools, MCP servers and the CORS proxy are not implemented by bankml"
_ROUTER = "router mode (several models, loaded on demand) is not implemented by bankml: give one model with -m"
_MEDIA = "multimodal projectors (images, audio, video) are not implemented by bankml"
_UI = "bankml serves no web UI"
_DOWNLOAD = "bankml loads a local GGUF file (-m) and downloads nothing"
_PLACEMENT = "bankml loads the model with libllama's default device placement and CPU scheduling"
_ROPE = "bankml keeps the model's own RoPE and context settings"
_PER_REQUEST = "the server-wide default is not served by bankml: give the request field"
_CONTEXT_SHIFT = "context shifting is not implemented by bankml"
_NOT_SERVER = "it is not a server option in bankml serve"


def _each(names, why):
    return dict.fromkeys(names.split(), why)


#: refused flags: flag -> why (the message names the flag)
REFUSED = {
    **_each(
        """
        --spec-default --spec-type --spec-synth-len --spec-synth-rates --draft --draft-n --draft-max
        --draft-min --draft-n-min --spec-draft-model -md --model-draft --spec-draft-hf -hfd -hfrd
        --hf-repo-draft --spec-draft-threads -td --threads-draft --spec-draft-threads-batch -tbd
        --threads-batch-draft --spec-draft-cpu-mask -Cd --cpu-mask-draft --spec-draft-cpu-range -Crd
        --cpu-range-draft --spec-draft-cpu-strict --cpu-strict-draft --spec-draft-prio --prio-draft
        --spec-draft-poll --poll-draft --spec-draft-cpu-mask-batch -Cbd --cpu-mask-batch-draft
        --spec-draft-cpu-strict-batch --cpu-strict-batch-draft --spec-draft-prio-batch --prio-batch-draft
        --spec-draft-poll-batch --poll-batch-draft --spec-draft-override-tensor -otd --override-tensor-draft
        --spec-draft-cpu-moe -cmoed --cpu-moe-draft --spec-draft-n-cpu-moe --spec-draft-ncmoe -ncmoed
        --n-cpu-moe-draft --spec-draft-n-max --spec-draft-n-min --spec-draft-p-split --draft-p-split
        --spec-draft-p-min --draft-p-min --spec-draft-backend-sampling --no-spec-draft-backend-sampling
        --spec-draft-device -devd --device-draft --spec-draft-ngl -ngld --gpu-layers-draft
        --n-gpu-layers-draft --spec-draft-type-k -ctkd --cache-type-k-draft --spec-draft-type-v -ctvd
        --cache-type-v-draft --spec-ngram-mod-n-min --spec-ngram-mod-n-max --spec-ngram-mod-n-match
        --spec-ngram-simple-size-n --spec-ngram-simple-size-m --spec-ngram-simple-min-hits
        --spec-ngram-map-k-size-n --spec-ngram-map-k-size-m --spec-ngram-map-k-min-hits
        --spec-ngram-map-k4v-size-n --spec-ngram-map-k4v-size-m --spec-ngram-map-k4v-min-hits
        --spec-ngram-size-n --spec-ngram-size-m --spec-ngram-min-hits -lcs --lookup-cache-static -lcd
        --lookup-cache-dynamic
        """,
        _SPEC,
    ),
    **_each(
        """
        --lora --lora-scaled --lora-init-without-apply --control-vector --control-vector-scaled
        """,
        _LORA,
    ),
    "--control-vector-layer-range": _LORA,
    **_each(
        """
        --tools --tools-runtime --mcp-servers-config --mcp-servers-json -ag --agent -no-ag --no-agent
        --ui-mcp-proxy --webui-mcp-proxy --no-ui-mcp-proxy --no-webui-mcp-proxy
        """,
        _TOOLS,
    ),
    **_each(
        """
        --models-dir --models-preset --models-max --models-autoload --no-models-autoload
        """,
        _ROUTER,
    ),
    **_each(
        """
        -mm --mmproj -mmu --mmproj-url --mmproj-auto --mmproj-offload --no-mmproj-offload -mmdev
        --mmproj-device --image-min-tokens --image-max-tokens --mtmd-batch-max-tokens --video-fps
        --video-timestamp-interval --video-ffmpeg-dir --media-path
        """,
        _MEDIA,
    ),
    **_each(
        """
        --ui --webui --ui-config --webui-config --ui-config-file --webui-config-file --path
        """,
        _UI,
    ),
    **_each(
        """
        -mu --model-url -dr --docker-repo -hf -hfr --hf-repo -hff --hf-file -hft --hf-token -cl --cache-list
        --embd-gemma-default --fim-qwen-1.5b-default --fim-qwen-3b-default --fim-qwen-7b-default
        --fim-qwen-7b-spec --fim-qwen-14b-spec --fim-qwen-30b-default --gpt-oss-20b-default
        --gpt-oss-120b-default --vision-gemma-4b-default --vision-gemma-12b-default
        """,
        _DOWNLOAD,
    ),
    **_each(
        """
        -C --cpu-mask -Cr --cpu-range --cpu-strict --prio --poll -Cb --cpu-mask-batch -Crb --cpu-range-batch
        --cpu-strict-batch --prio-batch --poll-batch -kvo --kv-offload -nkvo --no-kv-offload
        --no-host -dt --defrag-thold --rpc -lm --load-mode -lzm --lazy-mode --numa -dev --device
        --list-devices -ot --override-tensor -cmoe --cpu-moe -ncmoe --n-cpu-moe -ncffn --n-cpu-ffn -ngl
        --gpu-layers --n-gpu-layers -sm --split-mode -ts --tensor-split -mg --main-gpu -fit --fit -fitt
        --fit-target -fitc --fit-ctx --check-tensors --op-offload --no-op-offload --swa-full
        """,
        _PLACEMENT,
    ),
    **_each(
        """
        --rope-scaling --rope-scale --rope-freq-base --rope-freq-scale --yarn-orig-ctx --yarn-ext-factor
        --yarn-attn-factor --yarn-beta-slow --yarn-beta-fast --override-kv
        """,
        _ROPE,
    ),
    "--samplers": _PER_REQUEST + " 'samplers'",
    "--sampler-seq": _PER_REQUEST + " 'samplers'",
    "--sampling-seq": _PER_REQUEST + " 'samplers'",
    "--dry-sequence-breaker": _PER_REQUEST + " 'dry_sequence_breakers'",
    "-l": _PER_REQUEST + " 'logit_bias'",
    "--logit-bias": _PER_REQUEST + " 'logit_bias'",
    "--grammar": _PER_REQUEST + " 'grammar'",
    "--grammar-file": _PER_REQUEST + " 'grammar'",
    "-j": _PER_REQUEST + " 'json_schema'",
    "--json-schema": _PER_REQUEST + " 'json_schema'",
    "-jf": _PER_REQUEST + " 'json_schema'",
    "--json-schema-file": _PER_REQUEST + " 'json_schema'",
    "-r": _PER_REQUEST + " 'stop'",
    "--reverse-prompt": _PER_REQUEST + " 'stop'",
    "--reasoning-effort": _PER_REQUEST + " 'reasoning_effort'",
    "--ignore-eos": "'ignore_eos' is not implemented by bankml",
    "--context-shift": _CONTEXT_SHIFT,
    "--keep": _CONTEXT_SHIFT,
    "--skip-chat-parsing": "a pure content parser is not served by bankml: the template's parser reads every answer",
    "--no-skip-chat-parsing": "a pure content parser is not served by bankml: the template's parser reads every answer",
    "--no-reasoning-preserve": "dropping the reasoning of earlier turns is not implemented by bankml",
    "--no-prefill-assistant": "answering after a final assistant message (instead of continuing it) is not "
    "implemented by bankml",
    "--ssl-key-file": "TLS is not implemented by bankml serve: put a TLS proxy in front of it",
    "--ssl-cert-file": "TLS is not implemented by bankml serve: put a TLS proxy in front of it",
    "--api-prefix": "a path prefix is not implemented by bankml serve: put a proxy in front of it",
    "--sse-ping-interval": "bankml sends no SSE pings while a stream is silent",
    "--log-prompts-dir": "bankml does not log prompts",
    "-sp": "special tokens in the answer's text are not served by bankml (llama-server's default: off)",
    "--special": "special tokens in the answer's text are not served by bankml (llama-server's default: off)",
    "--spm-infill": "/infill is not served by bankml (it answers llama-server's 501)",
    "-e": _NOT_SERVER,
    "--escape": _NOT_SERVER,
    "--no-escape": _NOT_SERVER,
    "--version": _NOT_SERVER,
    "--usage": _NOT_SERVER,
    "--completion-bash": _NOT_SERVER,
}


def refusal(flag):
    """The message of a refused flag: it names the flag and the reason."""
    return f"llama-server's {flag} is not served by bankml serve: {REFUSED[flag]}"


def sampler_defaults(args):
    """The request fields' server defaults given by the sampler flags (only those given): field -> value."""
    out = {}
    for _, field, _ in SAMPLER_FLAGS:
        value = getattr(args, "default_" + field, None)
        if value is not None:
            out[field] = value
    return out


def verbose(args):
    """Whether answers carry llama-server's ``__verbose`` field: its ``params.verbose = verbosity > 9``, with
    ``-v`` setting the verbosity to the maximum."""
    return bool(getattr(args, "verbose", False)) or (getattr(args, "verbosity", None) or 0) > 9


class _Rerank(argparse.Action):
    """llama-server's --rerank/--reranking: embeddings on, with rank pooling (a later --pooling overrides it)."""

    def __call__(self, parser, namespace, values, option_string=None):
        namespace.embedding = True
        namespace.pooling = "rank"


def _sleep_seconds(text):
    try:
        return sleep_idle_seconds(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e) if "cannot be" in str(e) else f"invalid int value: {text!r}") from None


def _directory(text):
    if not os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"not a directory: {text}")
    return text


class _Refuse(argparse.Action):
    """A llama-server flag bankml serve refuses: the parser stops with the flag's reason."""

    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(refusal(option_string))


def _add_embedding_arguments(p):
    """llama-server's embedding flags (bankml.serve.embeddings)."""
    p.add_argument(
        "--embedding", "--embeddings", dest="embedding", action="store_true",
        help="serve /embedding, /embeddings and /v1/embeddings (completions are still served)",
    )  # fmt: skip
    p.add_argument(
        "--rerank", "--reranking", nargs=0, action=_Rerank,
        help="serve /rerank (and /reranking, /v1/rerank, /v1/reranking): --embedding with --pooling rank",
    )  # fmt: skip
    p.add_argument(
        "--pooling", choices=POOLING, default=None,
        help="pooling type for embeddings (default: the model's)",
    )  # fmt: skip
    p.add_argument(
        "--embd-normalize", dest="embd_normalize", type=int, default=2,
        help="normalisation of pooled embeddings (default: 2) (-1=none, 0=max absolute int16, 1=taxicab, "
        "2=euclidean, >2=p-norm)",
    )  # fmt: skip


def add_arguments(p):
    """llama-server's flags on ``bankml serve``'s parser ``p``, after its own: ``-n``, the sampler defaults,
    ``-v``/``-lv``, CORS, ``--kv-unified``, then the flags with no bearing and the refused ones (each of those
    not already defined)."""
    p.add_argument(
        "-n", "--predict", "--n-predict", dest="n_predict", type=int, default=-1,
        help="number of tokens to predict, the default of a request without max_tokens (-1: infinity)",
    )  # fmt: skip
    for flags, field, kind in SAMPLER_FLAGS:
        p.add_argument(*flags, dest="default_" + field, type=kind, default=None, help=f"default '{field}' of requests")
    p.add_argument("-v", "--verbose", "--log-verbose", action="store_true", help="__verbose in every answer")
    p.add_argument("-lv", "--verbosity", "--log-verbosity", type=int, default=None, help="above 9: as -v")
    p.add_argument("--cors-origins", default="*", help="allowed origins for CORS (default: *; 'localhost')")
    p.add_argument("--cors-methods", default="GET, POST, DELETE, OPTIONS", help="allowed methods for CORS")
    p.add_argument("--cors-headers", default="*", help="allowed headers for CORS (default: *)")
    p.add_argument(
        "--cors-credentials", action=argparse.BooleanOptionalAction, default=True,
        help="allow credentials for CORS (default: enabled)",
    )  # fmt: skip
    p.add_argument(
        "-kvu", "--kv-unified", dest="kv_unified", action="store_const", const=True, default=None,
        help="one KV pool for all slots: each slot's context is the whole -c (default: with -np auto)",
    )  # fmt: skip
    p.add_argument(
        "-no-kvu", "--no-kv-unified", dest="kv_unified", action="store_const", const=False,
        help="one KV cache per slot: the context divided between the slots",
    )  # fmt: skip
    _add_embedding_arguments(p)
    p.add_argument("--tags", dest="model_tags", help="model tags, comma-separated (informational: /models)")
    p.add_argument("--kv-unified-per-slot", type=int, default=0, help="context limit per slot (default: unset)")
    p.add_argument(
        "--cache-prompt", dest="cache_prompt", action="store_const", const=True, default=True,
        help="reuse the prefix a prompt shares with its slot's cache, the default of a request's cache_prompt "
        "(default: enabled, as llama-server)",
    )  # fmt: skip
    p.add_argument(
        "--no-cache-prompt", dest="cache_prompt", action="store_const", const=False,
        help="evaluate every prompt from an empty cache",
    )  # fmt: skip
    p.add_argument(
        "--cache-reuse", dest="cache_reuse", type=int, default=0,
        help="the shortest chunk of a slot's cache reused by shifting it into place, the default of a request's "
        "n_cache_reuse (default: 0, off)",
    )  # fmt: skip
    p.add_argument(
        "-sps", "--slot-prompt-similarity", dest="slot_prompt_similarity", type=float, default=0.1,
        help="how much a free slot's cached prompt must match a request's to be chosen for it (default: 0.1; "
        "0: the least recently used slot)",
    )  # fmt: skip
    p.add_argument(
        "-bs", "--backend-sampling", dest="backend_sampling", action="store_true",
        help="the default of a request's backend_sampling, reported in /props; bankml samples with the CPU chain "
        "either way (docs/modules/server.md: what llama-server's graph samplers change)",
    )  # fmt: skip
    p.add_argument(
        "--slot-save-path", dest="slot_save_path", type=_directory, default=None, metavar="PATH",
        help="the folder of POST /slots/:id?action=save|restore files (default: disabled)",
    )  # fmt: skip
    p.add_argument(
        "--sleep-idle-seconds", dest="sleep_idle_seconds", type=_sleep_seconds, default=-1, metavar="SECONDS",
        help="seconds of idleness after which the model is freed, loaded again by the next request (default: -1, "
        "disabled)",
    )  # fmt: skip
    known = set(p._option_string_actions)
    for flag, (takes_value, why) in NO_BEARING.items():
        if flag not in known:
            kind = {"nargs": None} if takes_value else {"action": "store_true"}
            p.add_argument(flag, dest="no_bearing_" + flag.strip("-").replace("-", "_"), help=argparse.SUPPRESS, **kind)
    known = set(p._option_string_actions)
    for flag in REFUSED:
        if flag not in known:
            p.add_argument(flag, nargs="?", action=_Refuse, help=argparse.SUPPRESS)
