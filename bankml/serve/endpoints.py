# Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.
"""llama-server's extra endpoints for ``bankml serve`` (``tools/server/server-context.cpp``'s routes):

* ``POST /apply-template``: ``{"prompt": ...}``, the text a chat request's messages render to (the same chat
  layer as ``/v1/chat/completions``: template, tools, ``chat_template_kwargs``, continuation rules);
* ``POST /tokenize``: ``content`` (a string, or an array of strings and token ids), ``add_special`` (default
  false), ``parse_special`` (default true), ``with_pieces`` (default false: ids; true: ``{"id", "piece"}``
  objects, a piece that is not valid UTF-8 given as its byte values);
* ``POST /detokenize``: ``tokens`` -> ``{"content": ...}``, every token's text with its special text;
* ``GET /props`` (and ``POST /props``: 501 unless ``--props``), ``GET /slots`` (501 with ``--no-slots``;
  ``?fail_on_no_slot=1`` gives a 503 when no slot is idle), ``GET /metrics`` (Prometheus text with
  ``--metrics``, a 501 otherwise).

Where llama-server quietly takes a default for a field of the wrong type (its ``json_value``), bankml answers a
400 (a field that changes the answer is never dropped); where it answers a 500 for a token id outside the
vocabulary or a body that is not JSON, bankml answers a 400. See docs/modules/server.md.
"""

import ctypes
import os
import secrets
import string
import threading
import time

import numpy as np
from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from bankml.errors import RequestError, json_type_name
from bankml.sampling.params import SAMPLER_FIELDS, SamplerParams
from bankml.schema import jsondepth
from bankml.serve import slot_files
from bankml.serve.fields import DETOKENIZE, TOKENIZE, known_only

__all__ = [
    "EndpointOptions",
    "Endpoints",
    "Metrics",
    "detokenize_body",
    "metrics_text",
    "props_body",
    "slots_body",
    "tokenize_body",
]

# the modalities bankml reports: it has no multimodal projector
_MODALITIES = {"vision": False, "video": False, "audio": False}
# task_params' fields that bankml's sampler has no counterpart for, as the pinned server's defaults give them
_TASK_DEFAULTS = {
    "max_tokens": -1,
    "n_predict": -1,
    "n_keep": 0,
    "n_discard": 0,
    "ignore_eos": False,
    "stream": False,
    "n_probs": 0,
    "chat_format": "Content-only",
    "reasoning_format": "none",
    "reasoning_in_content": False,
    "generation_prompt": "",
    "speculative.types": "none",
    "timings_per_token": False,
    "post_sampling_probs": False,
    "backend_sampling": False,
    "lora": [],
}
# task_params::to_json(only_metrics=true)'s sampler fields, in its order
_SAMPLER_ORDER = tuple(f.name for f in SAMPLER_FIELDS if f.props)


class EndpointOptions:
    """The server options the extra endpoints answer by: ``--slots``/``--no-slots`` (default on),
    ``--metrics`` and ``--props`` (default off), ``--slot-save-path`` (the folder of the slot actions' files;
    None: the actions answer 501)."""

    def __init__(self, slots=True, metrics=False, props=False, slot_save_path=None):
        self.slots = bool(slots)
        self.metrics = bool(metrics)
        self.props = bool(props)
        self.slot_save_path = slot_save_path or None


def _field_bool(body, name, default):
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise RequestError(
            f"Field '{name}': [json.exception.type_error.302] type must be boolean, but is {json_type_name(value)}"
        )
    return value


def _token_id(model, value, where):
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(
            f"{where}: [json.exception.type_error.302] type must be number, but is {json_type_name(value)}"
        )
    if not 0 <= value < model.n_vocab:
        # llama-server: std::out_of_range from the vocabulary (a 500); refused here as the request's fault
        raise RequestError(f"{where}: token id {value} is out of range (the vocabulary has {model.n_vocab} tokens)")
    return value


def tokenize_body(model, body):
    """The answer of ``POST /tokenize`` (``tokenize_mixed``: the first string gets ``add_special``, later ones
    none; a token id in the array is taken as it is)."""
    if "content" not in body:
        return {"tokens": []}
    add_special = _field_bool(body, "add_special", False)
    parse_special = _field_bool(body, "parse_special", True)
    with_pieces = _field_bool(body, "with_pieces", False)
    content = body["content"]
    tokens = []
    if isinstance(content, list):
        first = True
        for i, part in enumerate(content):
            if isinstance(part, str):
                tokens += model.tokenize(part, add_special and first, parse_special)
            else:
                tokens.append(_token_id(model, part, f"content[{i}]"))
            first = False
    elif isinstance(content, str):
        tokens = model.tokenize(content, add_special, parse_special)
    else:
        raise RequestError(
            f"Field 'content': must be a string or an array of strings and token ids, not {json_type_name(content)}"
        )
    if not with_pieces:
        return {"tokens": tokens}
    out = []
    for token in tokens:
        piece = model.piece(token, special=True)
        try:
            text = piece.decode("utf-8")
        except UnicodeDecodeError:
            text = list(piece)  # not valid UTF-8: its byte values
        out.append({"id": token, "piece": text})
    return {"tokens": out}


def detokenize_body(model, body):
    """The answer of ``POST /detokenize``: the tokens' texts (special text included) joined, invalid UTF-8
    replaced as llama-server's JSON writer replaces it."""
    if "tokens" not in body:
        return {"content": ""}
    tokens = body["tokens"]
    if not isinstance(tokens, list):
        raise RequestError(
            f"Field 'tokens': [json.exception.type_error.302] type must be array, but is {json_type_name(tokens)}"
        )
    data = b"".join(model.piece(_token_id(model, t, f"tokens[{i}]"), special=True) for i, t in enumerate(tokens))
    return {"content": data.decode("utf-8", "replace")}


def _f32(value):
    return float(np.float32(value))


def default_generation_params(params, backend_sampling=False):
    """``task_params::to_json(true)`` of the server's default sampling settings (``params`` a SamplerParams;
    ``backend_sampling``: the server's ``-bs``)."""
    d = params.as_dict()
    out = {name: d[name] for name in _SAMPLER_ORDER}
    out["seed"] = int(d["seed"]) & 0xFFFFFFFF
    for name in ("max_tokens", "n_predict", "n_keep", "n_discard", "ignore_eos", "stream", "n_probs"):
        out[name] = _TASK_DEFAULTS[name]
    out["min_keep"] = d["min_keep"]
    for name in ("chat_format", "reasoning_format", "reasoning_in_content", "generation_prompt"):
        out[name] = _TASK_DEFAULTS[name]
    out["samplers"] = list(d["samplers"])
    for name in ("speculative.types", "timings_per_token", "post_sampling_probs", "backend_sampling", "lora"):
        out[name] = _TASK_DEFAULTS[name]
    out["backend_sampling"] = bool(backend_sampling)
    return out


def task_params(job):
    """``task_params::to_json(true)`` of a finished job: its sampler settings, token limit, stream and
    probabilities fields, and for a chat job the chat layer's format, reasoning format and generation prompt."""
    out = default_generation_params(job.params)
    out["max_tokens"] = out["n_predict"] = int(job.max_tokens)
    out["stream"] = bool(getattr(job, "stream_requested", False))
    out["backend_sampling"] = bool(getattr(job, "backend_sampling", False))
    out["ignore_eos"] = bool(getattr(job, "ignore_eos", False))
    probs = getattr(job, "probs", None)
    out["n_probs"] = int(probs.n_probs) if probs is not None else 0
    out["post_sampling_probs"] = bool(probs.post_sampling) if probs is not None else False
    prompt = getattr(job, "chat_prompt", None)
    if job.chat and prompt is not None:
        out["chat_format"] = prompt.format or out["chat_format"]
        out["reasoning_format"] = getattr(job, "reasoning_format", None) or job.model.reasoning_format
        out["generation_prompt"] = prompt.generation_prompt or ""
    return out


def model_ftype(model):
    """llama_ftype_name(llama_model_ftype(model)), e.g. ``"Q4_1"``."""
    L = model._L
    fn = L.llama_cpp._lib.llama_ftype_name
    fn.restype = ctypes.c_char_p
    fn.argtypes = [ctypes.c_int]
    return fn(int(L.llama_model_ftype(model._model))).decode("utf-8")


def model_meta(model):
    """The ``meta`` of ``/models``' entry (get_res_model_info's, from server_context_meta): read once, while the
    model is loaded, so that ``/models`` answers while it sleeps, as llama-server's."""
    L, lmodel = model._L, model._model
    return {
        "vocab_type": int(L.llama_vocab_type(model._lvocab)),
        "n_vocab": model.n_vocab,
        "n_ctx": model.n_ctx_slot,
        "n_ctx_train": int(L.llama_model_n_ctx_train(lmodel)),
        "n_embd": int(L.llama_model_n_embd_inp(lmodel)),
        "n_params": int(L.llama_model_n_params(lmodel)),
        "size": int(L.llama_model_size(lmodel)),
        "ftype": model_ftype(model),
    }


def props_body(app, options, default_params, build_info, is_sleeping=False):
    """The answer of ``GET /props`` (``get_res_props``)."""
    model = app.model
    layer = model.chat_layer()
    caps = layer.caps.to_dict()
    L = model._L
    tokens = []
    for fn in (L.llama_vocab_bos, L.llama_vocab_eos):
        tok = fn(model._lvocab)
        tokens.append(model.piece(tok, special=True).decode("utf-8", "replace") if 0 <= tok < model.n_vocab else "")
    body = {
        "default_generation_settings": {
            "params": default_generation_params(default_params, getattr(app.defaults, "backend_sampling", False)),
            "n_ctx": model.n_ctx_slot,
        },
        "total_slots": model.n_parallel,
        "model_alias": app.alias,
        "model_ftype": model_ftype(model),
        "model_path": model.path,
        "modalities": dict(_MODALITIES),
        "media_marker": app.media_marker,
        "endpoint_slots": options.slots,
        "endpoint_props": options.props,
        "endpoint_metrics": options.metrics,
        "ui": False,
        "ui_settings": {},
        "chat_template": layer_source(model),
        "chat_template_caps": {k: caps[k] for k in sorted(caps)},
        "bos_token": tokens[0],
        "eos_token": tokens[1],
        "build_info": build_info,
        "is_sleeping": bool(is_sleeping),
        "cors_proxy_enabled": False,
    }
    mode = getattr(model, "json_schema_mode", "llama.cpp")
    if mode != "llama.cpp":
        # bankml's own setting, reported only when it is not the default (the default answer stays llama-server's)
        body["json_schema_mode"] = mode
        body["strict_style"] = getattr(model, "strict_style", "canonical")
    mode = getattr(model, "tool_call_mode", "llama.cpp")
    if mode != "llama.cpp":
        body["tool_call_mode"] = mode
    return body


def layer_source(model):
    """The template text the chat layer renders (the model's, --chat-template-file's, or llama.cpp's ChatML)."""
    layer = model.chat_layer()
    return getattr(layer, "source", None) or model.chat_template or ""


def slots_body(app):
    """The answer of ``GET /slots``: one object per slot, ``id``, ``n_ctx``, ``speculative``, ``is_processing``,
    and, for a slot that has served a request, what bankml knows of its last task (see Metrics.slot_task)."""
    model = app.model
    free = model.slots.free_indices()
    out = []
    for i in range(model.n_parallel):
        item = {"id": i, "n_ctx": model.n_ctx_slot, "speculative": False, "is_processing": i not in free}
        task = app.metrics.slot_task(i)
        if task is not None:
            item.update(task)
        out.append(item)
    return out


class Metrics:
    """The server-wide counters of llama-server's ``server_metrics``, kept from bankml's results: prompt tokens
    evaluated and their time, tokens generated and their time, decode calls, the longest sequence; the two rate
    gauges over the window since the last scrape; which slot is busy and its last task."""

    def __init__(self):
        self.t_start = int(time.time())
        self._lock = threading.Lock()
        self.prompt_count = self.prompt_us = 0
        self.predict_count = self.predict_steps = self.predict_us = 0
        self.bucket = [0, 0, 0, 0]  # prompt tokens, prompt us, predict steps, predict us since the last scrape
        self.n_decode = 0
        self.n_busy_slots = 0
        self.n_tokens_max = 0
        self.n_prompt_cached = 0
        self._tasks = {}
        self._next_task = 0

    def finished(self, job, n_batch):
        """A finished job's result counted, and kept as its slot's last task."""
        result = job.result
        slot_index = getattr(job, "slot_index", None)
        with self._lock:
            if result is None or slot_index is None:
                return
            t = result.timings
            n_prompt, n_gen = int(t["prompt_n"]), int(t["predicted_n"])  # the prompt's tokens evaluated
            n_cached = int(t.get("cache_n", 0))  # and those reused from the slot's cache
            prompt_us, gen_us = int(t["prompt_ms"] * 1000), int(t["predicted_ms"] * 1000)
            steps = max(n_gen - 1, 0)  # the first token comes from the prompt's logits
            decodes = -(-n_prompt // max(n_batch, 1)) + steps
            self.prompt_count += n_prompt
            self.n_prompt_cached += n_cached
            self.prompt_us += prompt_us
            self.predict_count += n_gen
            self.predict_steps += steps
            self.predict_us += gen_us
            self.bucket[0] += n_prompt
            self.bucket[1] += prompt_us
            self.bucket[2] += steps
            self.bucket[3] += gen_us
            self.n_decode += decodes
            self.n_busy_slots += decodes
            self.n_tokens_max = max(self.n_tokens_max, n_cached + n_prompt + n_gen)
            # an idle slot's view of its last task, as server_slot::to_json(true) gives it after release():
            # the tokens in its cache (the prompt and every generated token but the last, which is never
            # decoded), the statistics and next-token state reset, the task's parameters
            self._tasks[slot_index] = {
                "id_task": self._next_task,
                "n_prompt_tokens": n_cached + n_prompt + max(n_gen - 1, 0),
                "n_prompt_tokens_processed": 0,
                "n_prompt_tokens_cache": 0,
                "params": task_params(job),
                "next_token": [{"has_next_token": False, "has_new_line": False, "n_remain": -1, "n_decoded": 0}],
            }
            self._next_task += 1

    def slot_task(self, i):
        with self._lock:
            task = self._tasks.get(i)
            return dict(task) if task else None

    def snapshot(self, n_processing, n_deferred):
        """The values of /metrics, the rate window then reset (as a scrape resets llama-server's buckets)."""
        with self._lock:
            p_n, p_us, g_steps, g_us = self.bucket
            self.bucket = [0, 0, 0, 0]
            return {
                "counters": [
                    (
                        "prompt_tokens_total",
                        "Number of prompt tokens processed, excluding cached tokens",
                        self.prompt_count,
                    ),
                    (
                        "prompt_tokens_cached_total",
                        "Number of prompt tokens reused from the cache",
                        self.n_prompt_cached,
                    ),
                    ("prompt_seconds_total", "Total time spent processing prompts", self.prompt_us / 1e6),
                    ("tokens_predicted_total", "Number of generation tokens processed", self.predict_count),
                    ("tokens_predicted_seconds_total", "Total time spent generating tokens", self.predict_us / 1e6),
                    (
                        "n_decode_total",
                        (
                            "Total number of llama_decode() calls, excluding speculative decoding and "
                            "multimodal decoding"
                        ),
                        self.n_decode,
                    ),
                    ("n_tokens_max", "Largest observed sequence length (prompt + generation)", self.n_tokens_max),
                    ("spec_decode_num_draft_tokens_total", "Speculative: Total draft tokens generated", 0),
                    (
                        "spec_decode_num_accepted_tokens_total",
                        "Speculative: Total draft tokens accepted by the target model",
                        0,
                    ),
                    ("spec_decode_num_drafts_total", "Speculative: Total speculative decoding verification steps", 0),
                ],
                "gauges": [
                    (
                        "prompt_tokens_seconds",
                        "Average prompt throughput in tokens/s",
                        p_n / p_us * 1e6 if p_us > 0 else 0.0,
                    ),
                    (
                        "predicted_tokens_seconds",
                        "Average generation throughput in tokens/s",
                        g_steps / g_us * 1e6 if g_us > 0 else 0.0,
                    ),
                    ("requests_processing", "Number of requests processing", n_processing),
                    ("requests_deferred", "Number of requests deferred", n_deferred),
                    (
                        "n_busy_slots_per_decode",
                        "Average number of busy slots per llama_decode() call",
                        self.n_busy_slots / max(self.n_decode, 1),
                    ),
                ],
            }


def _number(value):
    """A value as C++'s ``ostream << double`` writes it (``%g``, 6 significant digits)."""
    return f"{float(value):g}"


def metrics_text(snapshot):
    """The Prometheus text of ``server_task_result_metrics::to_metrics``."""
    lines = []
    for kind, items in (("counter", snapshot["counters"]), ("gauge", snapshot["gauges"])):
        for name, help_text, value in items:
            lines.append(f"# HELP llamacpp:{name} {help_text}")
            lines.append(f"# TYPE llamacpp:{name} {kind}")
            lines.append(f"llamacpp:{name} {_number(value)}")
    return "\n".join(lines) + "\n"


def _error(message, code=400, kind="invalid_request_error"):
    return JSONResponse({"error": {"code": code, "message": message, "type": kind}}, status_code=code)


def fim_missing(model):
    """What llama-server's ``/infill`` says the model lacks: its fill-in-the-middle tokens (empty: it has them)."""
    L, vocab = model._L, model._lvocab
    out = ""
    for fn, name in (
        (L.llama_vocab_fim_pre, "prefix"),
        (L.llama_vocab_fim_suf, "suffix"),
        (L.llama_vocab_fim_mid, "middle"),
    ):
        if fn(vocab) == -1:  # LLAMA_TOKEN_NULL
            out += f"{name} token is missing. "
    return out


def _not_supported(message):
    return _error(message, 501, "not_supported_error")


async def feature_disabled(request):
    """llama-server's ``res_403`` for a feature it was not started with (no ``code`` in its error object)."""
    return JSONResponse({"error": {"message": "this feature is disabled", "type": "feature_disabled"}}, status_code=403)


def media_marker():
    """A marker in the shape of llama-server's ``get_media_marker()`` (random per process)."""
    alphabet = string.ascii_letters + string.digits
    return "<__media_" + "".join(secrets.choice(alphabet) for _ in range(32)) + "__>"


class Endpoints:
    """The extra routes over a running ``bankml.server`` application ``app`` (its model, limits, request
    reading and preparation); ``render_prompt(body, raw, cancel)`` is the chat layer's prompt of a chat request
    body, as ``/v1/chat/completions`` renders it."""

    def __init__(self, app, render_prompt, options=None, default_params=None, build_info=""):
        self.app = app
        self.render_prompt = render_prompt
        self.options = options or EndpointOptions()
        self.default_params = default_params if default_params is not None else SamplerParams()
        self.build_info = build_info
        app.metrics = Metrics()
        app.media_marker = media_marker()
        self._asleep_props = None
        if getattr(app, "sleeper", None) is not None:
            app.sleeper.on_state(self._sleeping)

    def _props(self, is_sleeping=False):
        return props_body(self.app, self.options, self.default_params, self.build_info, is_sleeping)

    def _sleeping(self, is_sleeping):
        # llama-server's update_cached_responses: /props is answered from what it was on entering sleep
        if is_sleeping:
            self._asleep_props = self._props(True)

    def routes(self):
        return [
            Route("/apply-template", self.apply_template, methods=["POST"]),
            Route("/tokenize", self.tokenize, methods=["POST"]),
            Route("/detokenize", self.detokenize, methods=["POST"]),
            Route("/props", self.props, methods=["GET"]),
            Route("/props", self.post_props, methods=["POST"]),
            Route("/slots", self.slots, methods=["GET"]),
            Route("/metrics", self.metrics, methods=["GET"]),
            # the features bankml has no implementation of, answered as llama-server answers them when they are
            # not enabled (or, for LoRA, when no adapter is loaded)
            Route("/infill", self.infill, methods=["POST"]),
            Route("/lora-adapters", self.lora_adapters, methods=["GET"]),
            Route("/lora-adapters", self.set_lora_adapters, methods=["POST"]),
            Route("/slots/{id_slot}", self.slot_action, methods=["POST"]),
            # server-side tools and the web UI's CORS proxy (refused at start: --tools, --ui-mcp-proxy): llama-server's
            # answer while they are disabled
            *(Route(p, feature_disabled, methods=["GET", "POST"]) for p in ("/tools", "/cors-proxy")),
        ]

    async def infill(self, request):
        missing = fim_missing(self.app.model)
        if missing:
            return _not_supported("Infill is not supported by this model: " + missing)
        return _not_supported("Infill is not supported by bankml")

    async def lora_adapters(self, request):
        return JSONResponse([])  # no adapter loaded: bankml loads none (--lora is refused)

    async def set_lora_adapters(self, request):
        # with no adapter loaded, llama-server sets no scale and answers success to any array
        try:
            raw = await self.app._read(request)
        except Exception as e:  # noqa: BLE001 - answered with llama-server's error object
            r = self.app.refusal_of(e)
            return Response(status_code=499) if r is None else _error(r.message, r.code, r.kind)
        try:
            body = jsondepth.loads(raw)
        except (ValueError, RecursionError) as e:
            return _error(f"Invalid JSON body: {e}")
        if not isinstance(body, list):
            return _error("Request body must be an array")
        return JSONResponse({"success": True})

    async def slot_action(self, request):
        """``POST /slots/:id_slot?action=save|restore|erase`` (bankml.serve.slot_files), checked in llama-server's
        order: the folder, the slot id's text, the action, the body's ``filename``, the slot."""
        folder = self.options.slot_save_path
        if folder is None:
            return _not_supported("This server does not support slots action. Start it with `--slot-save-path`")
        model = self.app.model
        try:
            id_slot, index = slot_files.slot_index(request.path_params["id_slot"], model.n_parallel)
            action = request.query_params.get("action", "")
            if action not in ("save", "restore", "erase"):
                raise slot_files.SlotActionError("Invalid action")
            filename = None if action == "erase" else await self._slot_filename(request)
            timeout = self.app.limits.request_seconds
            if action == "erase":
                body = await run_in_threadpool(slot_files.erase, model, index, id_slot, timeout)
            else:
                run = slot_files.save if action == "save" else slot_files.restore
                path = os.path.join(folder, filename)
                body = await run_in_threadpool(run, model, index, id_slot, filename, path, timeout)
        except slot_files.SlotActionError as e:
            return _error(e.message, e.code, e.kind)
        return JSONResponse(body)

    async def _slot_filename(self, request):
        """The body's ``filename``, checked as llama-server's fs_validate_filename (no path out of the folder).
        llama-server answers a body that is not JSON, or has no string ``filename``, with a 500; bankml with a
        400."""
        try:
            raw = await self.app._read(request)
        except Exception as e:  # noqa: BLE001 - answered with llama-server's error object
            r = self.app.refusal_of(e)
            raise slot_files.SlotActionError(r.message if r else "the client went away", r.code if r else 499) from None
        try:
            body = jsondepth.loads(raw)
        except (ValueError, RecursionError) as e:
            raise slot_files.SlotActionError(f"Invalid JSON body: {e}") from None
        if not isinstance(body, dict) or "filename" not in body:
            raise slot_files.SlotActionError("[json.exception.out_of_range.403] key 'filename' not found")
        name = body["filename"]
        if not isinstance(name, str):
            raise slot_files.SlotActionError(
                "[json.exception.type_error.302] type must be string, but is " + json_type_name(name)
            )
        if not slot_files.valid_filename(name):
            raise slot_files.SlotActionError("Invalid filename")
        return name

    async def _post(self, request, make):
        app = self.app
        try:
            raw = await app._read(request)
            body = await app._prepare(request, lambda cancel: make(app._parse(raw), raw, cancel), len(raw))
            return JSONResponse(body)
        except Exception as e:  # noqa: BLE001 - answered with llama-server's error object
            refusal = getattr(app, "refusal_of", None)
            if refusal is not None:
                r = refusal(e)
                if r is None:
                    return Response(status_code=499)
                return _error(r.message, r.code, r.kind)
            return _error(str(e))

    async def apply_template(self, request):
        return await self._post(request, lambda body, raw, cancel: {"prompt": self.render_prompt(body, raw, cancel)})

    async def tokenize(self, request):
        return await self._post(request, lambda body, raw, cancel: tokenize_body(self.app.model, self._known(body)))

    async def detokenize(self, request):
        return await self._post(
            request, lambda body, raw, cancel: detokenize_body(self.app.model, self._known(body, DETOKENIZE))
        )

    def _known(self, body, known=TOKENIZE):
        return known_only(body, known, self.app.limits)

    async def props(self, request):
        sleeper = getattr(self.app, "sleeper", None)
        if sleeper is None:
            return JSONResponse(self._props())
        body = await run_in_threadpool(sleeper.awake, self._props)
        return JSONResponse(self._asleep_props if body is None else body)

    async def post_props(self, request):
        if not self.options.props:
            return _not_supported("This server does not support changing global properties. Start it with `--props`")
        return JSONResponse({"success": True})

    async def slots(self, request):
        if not self.options.slots:
            return _not_supported("This server does not support slots endpoint. Start it with `--slots`")
        out = slots_body(self.app)
        if request.query_params.get("fail_on_no_slot") and all(item["is_processing"] for item in out):
            return _error("no slot available", 503, "unavailable_error")
        return JSONResponse(out)

    async def metrics(self, request):
        if not self.options.metrics:
            return _not_supported("This server does not support metrics endpoint. Start it with `--metrics`")
        model = self.app.model
        busy = model.slots.n_busy()
        running = len(getattr(self.app, "_runners", ()))
        text = metrics_text(self.app.metrics.snapshot(busy, max(running - busy, 0)))
        return Response(
            text,
            media_type="text/plain; version=0.0.4",
            headers={"Process-Start-Time-Unix": str(self.app.metrics.t_start)},
        )
