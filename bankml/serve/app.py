"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

``bankml serve``: an OpenAI- and Ollama-compatible HTTP server (Starlette + uvicorn) over ``bankml.serve.runtime``.

* ``POST /v1/chat/completions``: messages, ``response_format`` (json_object / json_schema), ``grammar``,
  ``json_schema``, the sampler fields and ``seed``, ``max_tokens``, ``stop``, ``stream`` (server-sent
  events); ``tools``, ``tool_choice`` (auto / none / required), ``parallel_tool_calls`` and histories with
  ``tool_calls`` and ``role: "tool"`` results; the answer is parsed by the template's parser into content,
  reasoning_content and ``tool_calls`` (``finish_reason: "tool_calls"``), streamed as llama-server's deltas.
* ``POST /v1/completions``: a raw prompt (no template), ``grammar`` / ``json_schema``.
* ``GET /v1/models``, ``GET /health``, ``GET /v1/health``.
* llama-server's extra endpoints (``bankml.serve.endpoints``): ``POST /apply-template``, ``/tokenize``,
  ``/detokenize``, ``GET /props``, ``/slots``, ``/metrics`` (with ``--metrics``).
* ``--api-key`` / ``--api-key-file``: every route but the public ones asks for a key (``bankml.serve.auth``).
* ``POST /api/chat``, ``POST /api/generate`` (Ollama: ``format``, ``options``, ``tools`` with
  ``message.tool_calls[].function.arguments`` as an object, NDJSON streaming, default ``stream: true``),
  ``GET /api/tags``, ``GET /api/version``.

A bad body, schema or grammar gets a 400 with llama-server's error object before any token is computed.
Each request is generated on one of ``--parallel`` contexts (slots) of one model, so concurrent requests
never share state; a client that disconnects cancels its generation after the current token and frees the
slot.
"""

import asyncio
import contextlib
import json
import os
import signal
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from bankml.chat.chat_peg import ChatParseError
from bankml.chat.constraint import RequestError, from_ollama_text, from_openai_text
from bankml.errors import GrammarError, SchemaError, json_type_name
from bankml.sampling import logprobs as _logprobs
from bankml.schema import jsondepth as _jsondepth
from bankml.schema import limits as _schema_limits
from bankml.serve import fields as _fields
from bankml.serve.auth import ApiKeyError, ApiKeyMiddleware, api_keys_from_args
from bankml.serve.endpoints import EndpointOptions, Endpoints
from bankml.serve.flags import context_options
from bankml.serve.runtime import (
    ContextSizeError,
    Model,
    ModelError,
    chat_model_options,
    check_messages,
    model_load_options,
    sampler_params_from_request,
)

__all__ = ["ServerLimits", "create_app", "serve"]

_FINGERPRINT = "bankml-0.1.0"
_DRAIN_BYTES = 64 * 1024 * 1024


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
      their ``prepare_seconds``, then get a 503.
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


def _malloc_trim():
    """Give freed heap memory back to the system (glibc): a large request's transient objects otherwise stay
    resident in the allocator's per-thread arenas, and resident memory drifts with the mix of requests."""
    global _TRIM
    if _TRIM is None:
        try:
            import ctypes

            _TRIM = ctypes.CDLL("libc.so.6").malloc_trim
        except (OSError, AttributeError):
            _TRIM = False
    if _TRIM:
        _TRIM(0)


_TRIM = None
_LARGE_BODY = 1024 * 1024


def _error(message, code=400, kind="invalid_request_error"):
    # llama-server's format_error_response
    return JSONResponse({"error": {"code": code, "message": message, "type": kind}}, status_code=code)


def _ollama_error(message, code=400):
    return JSONResponse({"error": message}, status_code=code)


class _Refusal(Exception):
    """A request answered with an error object: ``code`` and llama-server's error ``kind``."""

    def __init__(self, message, code=400, kind="invalid_request_error"):
        super().__init__(message)
        self.message = message
        self.code = code
        self.kind = kind


class _Gone(Exception):
    """The client went away: nothing to answer."""


def _refusal(exc):
    """The error object for an exception raised while a request is read, checked or prepared."""
    if isinstance(exc, _Refusal):
        return exc
    if isinstance(exc, ContextSizeError):
        return _Refusal(str(exc), 400, "exceed_context_size_error")
    if isinstance(exc, (RequestError, SchemaError, GrammarError)):
        return _Refusal(str(exc))
    if isinstance(exc, _jsondepth.NestingError):
        return _Refusal(f"a JSON text in the request is invalid: {exc}")
    if isinstance(exc, RecursionError):
        return _Refusal("Invalid JSON body: nesting too deep")
    if isinstance(exc, MemoryError):
        return _Refusal("out of memory while preparing the request", 500, "server_error")
    if isinstance(exc, ModelError):
        return _Refusal(str(exc), 503, "unavailable_error")
    if isinstance(exc, ValueError):
        return _Refusal(str(exc))
    return _Refusal(f"{type(exc).__name__}: {exc}", 500, "server_error")


def _bool_field(obj, name, default):
    """llama-server's ``field_bool``: absent or null gives the default, anything but a boolean is refused."""
    if not isinstance(obj, dict) or obj.get(name) is None:
        return default
    value = obj[name]
    if not isinstance(value, bool):
        raise RequestError(
            f"Field '{name}': [json.exception.type_error.302] type must be boolean, but is {json_type_name(value)}"
        )
    return value


def _check_sizes(body, limits, ollama=False):
    """The field size limits, before the fields are read for their meaning."""
    if not ollama:
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
        stop = body.get("stop")
    else:
        options = body.get("options")
        stop = options.get("stop") if isinstance(options, dict) else None
    if isinstance(stop, list):
        if len(stop) > limits.max_stop:
            raise RequestError(f"Field 'stop': {len(stop)} stop strings, past the server's limit of {limits.max_stop}")
        if any(isinstance(x, str) and len(x) > limits.max_stop_bytes for x in stop):
            raise RequestError(f"Field 'stop': a stop string longer than {limits.max_stop_bytes} characters")
    elif isinstance(stop, str) and len(stop) > limits.max_stop_bytes:
        raise RequestError(f"Field 'stop': a stop string longer than {limits.max_stop_bytes} characters")
    messages = body.get("messages")
    if isinstance(messages, list) and len(messages) > limits.max_messages:
        raise RequestError(
            f"{len(messages)} messages, past the server's limit of {limits.max_messages} (--max-messages)"
        )


class _Runner:
    """Runs a Job on a worker thread and hands its events to the event loop."""

    def __init__(self, job, loop, app):
        self.job = job
        self.loop = loop
        self.app = app
        self.events = asyncio.Queue()
        self.thread = threading.Thread(target=self._work, daemon=True, name="bankml-generate")
        self.error = None

    def start(self):
        self.app._started(self)
        self.thread.start()
        return self

    def _put(self, item):
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, item)
        except RuntimeError:  # the loop is closed: the server is gone
            pass

    def _work(self):
        try:
            for event in self.job.stream():
                self._put(("event", event))
        except BaseException as e:  # noqa: BLE001 - reported to the client as an error object
            self.error = e
        finally:
            self.app._finished(self)
            self._put(("end", None))
            if not self.app.busy():
                _malloc_trim()  # idle: what the requests freed goes back to the system

    async def __aiter__(self):
        while True:
            kind, item = await self.events.get()
            if kind == "end":
                if self.error is not None:
                    raise self.error
                return
            yield item

    async def wait(self, request=None):
        """Run to the end; cancel the job if the client goes away first."""
        done = asyncio.ensure_future(self._drain())
        try:
            while not done.done():
                if request is not None and await _disconnected(request):
                    self.job.cancel()
                await asyncio.wait([done], timeout=0.25)
            return done.result()
        finally:
            if not done.done():
                self.job.cancel()
                done.cancel()

    async def _drain(self):
        async for _ in self:
            pass
        return self.job.result


async def _disconnected(request):
    try:
        return await asyncio.wait_for(request.is_disconnected(), 0.01)
    except asyncio.TimeoutError:
        return False


def _stream_error(exc):
    """The error object of a failure after a stream has started (llama-server sends it as an event)."""
    if isinstance(exc, ModelError):
        return {"code": 503, "message": str(exc), "type": "unavailable_error"}
    if isinstance(exc, ChatParseError):
        return {"code": 500, "message": str(exc), "type": "server_error"}
    return {"code": 500, "message": f"{type(exc).__name__}: {exc}", "type": "server_error"}


class _App:
    def __init__(self, model, alias=None, limits=None):
        self.model = model
        self.alias = alias or model.name
        self.created = int(time.time())
        self.limits = limits or ServerLimits()
        self.closing = False
        self._preparing = 0
        self._runners = set()
        self._lock = threading.Lock()

    # -- bookkeeping for shutdown

    def _started(self, runner):
        with self._lock:
            self._runners.add(runner)

    def _finished(self, runner):
        with self._lock:
            self._runners.discard(runner)
        metrics = getattr(self, "metrics", None)
        if metrics is not None:
            metrics.finished(runner.job, self.model.n_batch)

    def busy(self):
        """Whether a generation runs or a request is being prepared."""
        with self._lock:
            return bool(self._runners) or self._preparing > 0

    def shutdown(self):
        """Refuse new requests and cancel every generation (each stops after its current token)."""
        self.closing = True
        with self._lock:
            runners = list(self._runners)
        for runner in runners:
            runner.job.cancel()

    def join(self, timeout):
        """Wait up to ``timeout`` seconds for the generation threads; whether they all ended."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if not self._runners:
                    return True
            time.sleep(0.05)
        with self._lock:
            return not self._runners

    # -- reading and preparing a request

    async def _read(self, request):
        """The raw body, within ``max_body_bytes`` (checked on Content-Length, then while reading). A body
        past the limit is read on and dropped (up to 64 MiB more) before the 400, so that the client, still
        sending, reads the answer instead of a reset connection; nothing of it is kept."""
        limit = self.limits.max_body_bytes
        message = f"the request body is larger than the server's limit of {limit} bytes (--max-body-bytes)"
        length = request.headers.get("content-length")
        too_large = False
        if length is not None:
            try:
                too_large = int(length) > limit
            except ValueError:
                raise _Refusal("invalid Content-Length header") from None
        chunks, size = [], 0
        try:
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    too_large = True
                    chunks = []
                    if size > limit + _DRAIN_BYTES:
                        break
                elif not too_large:
                    chunks.append(chunk)
        except ClientDisconnect:
            raise _Gone() from None
        if too_large:
            chunks = None
            _malloc_trim()
            raise _Refusal(message)
        return b"".join(chunks)

    async def _prepare(self, request, make, size=0):
        """Run ``make(cancel)`` on a thread of its own within the preparation budget, its schema conversion
        inside that deadline too; cancelled (``_Gone``) when the client goes away. Returns what it returns."""
        limits = self.limits
        loop = asyncio.get_running_loop()
        deadline = time.monotonic() + limits.prepare_seconds
        cancel = threading.Event()
        # a turn among the preparing threads: a preparation stuck in native code keeps its turn, the others
        # still run, up to max_preparing at once
        while self._preparing >= limits.max_preparing:
            if time.monotonic() > deadline:
                raise _Refusal("the server is too busy preparing other requests; try again", 503, "unavailable_error")
            if await _disconnected(request):
                raise _Gone()
            await asyncio.sleep(0.05)
        self._preparing += 1
        future = loop.create_future()

        def deliver(ok, value):
            self._preparing -= 1
            if not future.done():
                if ok:
                    future.set_result(value)
                else:
                    future.set_exception(value)

        def work():
            try:
                with _schema_limits.budget(deadline, cancel):
                    value = make(cancel)
                ok = True
            except BaseException as e:  # noqa: BLE001 - answered as an error object
                value, ok = e, False
            if size > _LARGE_BODY or isinstance(value, (SchemaError, MemoryError)):
                _malloc_trim()  # a large body's objects, a refused schema's partial grammar: freed now
            try:
                loop.call_soon_threadsafe(deliver, ok, value)
            except RuntimeError:
                pass

        threading.Thread(target=work, daemon=True, name="bankml-prepare").start()
        try:
            while True:
                done, _ = await asyncio.wait([future], timeout=0.1)
                if done:
                    return future.result()
                if await _disconnected(request):
                    raise _Gone()
                if time.monotonic() > deadline:
                    raise _Refusal(
                        f"preparing the request took longer than the server's limit of "
                        f"{limits.prepare_seconds:g} s (--prepare-timeout)"
                    )
        finally:
            if not future.done():
                cancel.set()  # the thread stops at its next check;
                future.cancel()  # its result (or error) is dropped

    def _deadline(self):
        return time.monotonic() + self.limits.request_seconds

    def _sampler_vocab(self):
        # the model's vocabulary with libllama's tokenizer: logit_bias text keys and ids as llama-server reads them
        return getattr(self.model, "_sampler_vocab", None)

    async def _handle(self, request, build, respond, ollama=False):
        """The frame of every generation endpoint: read, check and prepare the request off the event loop
        (``build(raw, cancel)`` returns ``(body, job, options)``), then ``respond`` — every failure answered
        with the error object, never a plain-text 500, and no slot taken before the request is valid."""
        err = _ollama_error if ollama else _error
        job = None
        try:
            if self.closing:
                raise _Refusal("the server is shutting down", 503, "unavailable_error")
            raw = await self._read(request)
            body, job, options = await self._prepare(request, lambda cancel: build(raw, cancel), len(raw))
            return await respond(request, body, job, options)
        except _Gone:
            if job is not None:
                job.cancel()
            return Response(status_code=499)
        except Exception as e:  # noqa: BLE001 - the catch-all: llama-server's error object
            if job is not None:
                job.cancel()
            r = _refusal(e)
            return err(r.message, r.code) if ollama else err(r.message, r.code, r.kind)

    def _parse(self, raw):
        try:
            body = _jsondepth.loads(raw)  # nesting bounded before the decoder recurses
        except RecursionError:
            raise RequestError(
                f"Invalid JSON body: nesting too deep (more than {_jsondepth.MAX_DEPTH} levels)"
            ) from None
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise RequestError(f"Invalid JSON body: {e}") from None
        if not isinstance(body, dict):
            raise RequestError("the request body must be a JSON object")
        return body

    def _usage(self, result):
        n_prompt, n_gen = len(result.prompt_tokens), len(result.tokens)
        # prompt_tokens_details as llama-server's: bankml has no prompt cache, every prompt is evaluated anew
        return {
            "completion_tokens": n_gen,
            "prompt_tokens": n_prompt,
            "total_tokens": n_prompt + n_gen,
            "prompt_tokens_details": {"cached_tokens": 0},
        }

    def _timings(self, result):
        t = result.timings
        return {
            "prompt_n": t["prompt_n"],
            "prompt_ms": t["prompt_ms"],
            "predicted_n": t["predicted_n"],
            "predicted_ms": t["predicted_ms"],
            "predicted_per_second": t["predicted_per_second"],
            "sampling_us_per_token": t["sample_us_per_token"],
            "redraws": t["redraws"],
        }

    def refusal_of(self, exc):
        """The error (a ``_Refusal``) for an exception of a request's preparation; None: the client is gone."""
        return None if isinstance(exc, _Gone) else _refusal(exc)

    def render_prompt(self, body, raw, cancel):
        """The prompt a chat request renders to (llama-server's /apply-template): its messages, tools and chat
        fields through the chat layer, nothing generated."""
        _check_sizes(body, self.limits)
        constraint = from_openai_text(body, raw)
        check_messages(body.get("messages"))
        return self.model.chat(
            body.get("messages"),
            constraint,
            cancel=cancel,
            render_only=True,
            **chat_request_options(body),
            **chat_tool_options(body),
        )

    # -- OpenAI

    def _build_chat(self, raw, cancel):
        body = self._parse(raw)
        _check_sizes(body, self.limits)
        _fields.check(body, "/v1/chat/completions")
        stream = _bool_field(body, "stream", False)
        # llama-server's field_nested: stream_options that is not an object is ignored
        include_usage = _bool_field(body.get("stream_options"), "include_usage", False)
        return_tokens = _bool_field(body, "return_tokens", False)
        constraint = from_openai_text(body, raw)
        messages = body.get("messages")
        check_messages(messages)  # the shape; the chat layer reads them whole (reasoning_content, parts, ...)
        params, n_predict, stop = sampler_params_from_request(body, vocab=self._sampler_vocab())
        probs = self._probs(body, "/v1/chat/completions", n_predict)
        job = self.model.chat(
            messages,
            constraint,
            params,
            n_predict,
            stop,
            cancel=cancel,
            deadline=self._deadline(),
            **chat_request_options(body),
            **chat_tool_options(body),
        )
        job.probs = probs
        job.stream_requested = stream  # for /slots' view of the task
        return body, job, (stream, include_usage, return_tokens)

    def _probs(self, body, endpoint, n_predict):
        # logprobs / top_logprobs / n_probs / post_sampling_probs, as llama-server reads them (bankml.sampling.logprobs)
        probs = _logprobs.read_request(body, endpoint)
        _logprobs.check_size(probs, self.model.n_vocab, n_predict, self.model.n_ctx)
        return probs

    def _final_probs(self, job, result):
        # send_final_response without streaming: the records, those of the stop word's tokens dropped
        records = _logprobs.trim_stop_word(
            result.probs, result.stopping_word, lambda text: self.model.tokenize(text, False, False)
        )
        return {"content": _logprobs.probs_to_json(records, job.probs.post_sampling)} if records else None

    def _chunk_probs(self, job, event):
        # a partial result's logprobs: its one record, when it has top candidates (prob_output.probs non-empty)
        record = event.probs
        if record is None or not record.top:
            return None
        return {"content": _logprobs.probs_to_json([record], job.probs.post_sampling)}

    async def chat_completions(self, request):
        return await self._handle(request, self._build_chat, self._respond_chat)

    async def _respond_chat(self, request, body, job, options):
        stream, include_usage, return_tokens = options
        cid = "chatcmpl-" + uuid.uuid4().hex
        created = int(time.time())
        base = {
            "created": created,
            "id": cid,
            "model": body.get("model") or self.alias,
            "system_fingerprint": _FINGERPRINT,
        }
        runner = _Runner(job, asyncio.get_running_loop(), self).start()
        if stream:

            async def events():
                try:
                    first = dict(
                        base,
                        object="chat.completion.chunk",
                        choices=[{"finish_reason": None, "index": 0, "delta": {"role": "assistant", "content": None}}],
                    )
                    # chunks follow llama-server's partial results: the role delta comes with the first token's
                    # (none when that token's text is not whole UTF-8: to_json_oaicompat_chat's n_decoded == 1),
                    # and a token's logprobs ride on the last delta of its partial result
                    role_pending = True
                    try:
                        async for event in runner:
                            chunks = []
                            if role_pending and event.partial:
                                role_pending = False
                                if event.index == 1:  # llama-server's `first = n_decoded == 1`
                                    chunks.append(first)
                            n_partial = len(chunks)
                            # one chunk per message diff, as server_chat_msg_diff_to_json_oaicompat
                            for i, diff in enumerate(event.diffs):
                                delta = _diff_delta(diff)
                                if delta:
                                    chunks.append(
                                        dict(
                                            base,
                                            object="chat.completion.chunk",
                                            choices=[{"finish_reason": None, "index": 0, "delta": delta}],
                                        )
                                    )
                                    if i < event.n_partial_diffs:
                                        n_partial = len(chunks)
                            logprobs = self._chunk_probs(job, event) if event.partial else None
                            if logprobs is not None and n_partial:
                                last = chunks[n_partial - 1]
                                last["choices"] = [dict(last["choices"][0], logprobs=logprobs)]
                            for chunk in chunks:
                                yield _sse(chunk)
                    except Exception as e:  # noqa: BLE001 - llama-server sends the error as an event
                        yield _sse({"error": _stream_error(e)})
                        return
                    result = job.result
                    last = dict(
                        base,
                        object="chat.completion.chunk",
                        choices=[{"finish_reason": result.finish_reason, "index": 0, "delta": {}}],
                        timings=self._timings(result),
                    )
                    if include_usage:
                        yield _sse(last)
                        yield _sse(dict(base, object="chat.completion.chunk", choices=[], usage=self._usage(result)))
                    else:
                        last["usage"] = self._usage(result)
                        yield _sse(last)
                    yield b"data: [DONE]\n\n"
                finally:
                    job.cancel()  # a no-op once finished; frees the slot if the client went away

            return StreamingResponse(events(), media_type="text/event-stream")
        try:
            result = await runner.wait(request)
        except ModelError as e:
            return _error(str(e), 503, "unavailable_error")
        except ChatParseError as e:  # the answer does not match the template's format: llama-server's 500
            return _error(str(e), 500, "server_error")
        except Exception as e:  # noqa: BLE001 - a failure during generation: llama-server's 500 error object
            return _error(f"{type(e).__name__}: {e}", 500, "server_error")
        if result.finish_reason == "cancelled":
            return Response(status_code=499)
        message = dict(result.message)
        out = dict(
            base,
            object="chat.completion",
            choices=[{"finish_reason": result.finish_reason, "index": 0, "message": message}],
            usage=self._usage(result),
            timings=self._timings(result),
        )
        if job.probs:
            logprobs = self._final_probs(job, result)
            if logprobs is not None:
                out["choices"][0]["logprobs"] = logprobs
        if return_tokens:
            out["tokens"] = result.tokens
        return JSONResponse(out)

    def _build_completion(self, raw, cancel):
        body = self._parse(raw)
        _check_sizes(body, self.limits)
        _fields.check(body, "/v1/completions")
        stream = _bool_field(body, "stream", False)
        return_tokens = _bool_field(body, "return_tokens", False)
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if not isinstance(prompt, str):
            raise RequestError("'prompt' must be a string")
        constraint = from_openai_text(body, raw)  # no template: the bare grammar (Model.complete)
        params, n_predict, stop = sampler_params_from_request(body, vocab=self._sampler_vocab())
        probs = self._probs(body, "/v1/completions", n_predict)
        job = self.model.complete(prompt, constraint, params, n_predict, stop, cancel=cancel, deadline=self._deadline())
        job.probs = probs
        job.stream_requested = stream  # for /slots' view of the task
        return body, job, (stream, return_tokens)

    async def completions(self, request):
        return await self._handle(request, self._build_completion, self._respond_completion)

    async def _respond_completion(self, request, body, job, options):
        stream, return_tokens = options
        cid = "cmpl-" + uuid.uuid4().hex
        base = {
            "created": int(time.time()),
            "id": cid,
            "model": body.get("model") or self.alias,
            "system_fingerprint": _FINGERPRINT,
        }
        runner = _Runner(job, asyncio.get_running_loop(), self).start()
        if stream:

            async def events():
                try:
                    try:
                        async for event in runner:
                            # one chunk per partial result, empty text included, as llama-server sends them
                            if event.partial:
                                yield _sse(
                                    dict(
                                        base,
                                        object="text_completion",
                                        choices=[
                                            {
                                                "text": event.text,
                                                "index": 0,
                                                "logprobs": self._chunk_probs(job, event),
                                                "finish_reason": None,
                                            }
                                        ],
                                    )
                                )
                    except Exception as e:  # noqa: BLE001
                        yield _sse({"error": _stream_error(e)})
                        return
                    result = job.result
                    yield _sse(
                        dict(
                            base,
                            object="text_completion",
                            choices=[{"text": "", "index": 0, "logprobs": None, "finish_reason": result.finish_reason}],
                            usage=self._usage(result),
                        )
                    )
                    yield b"data: [DONE]\n\n"
                finally:
                    job.cancel()

            return StreamingResponse(events(), media_type="text/event-stream")
        try:
            result = await runner.wait(request)
        except ModelError as e:
            return _error(str(e), 503, "unavailable_error")
        except Exception as e:  # noqa: BLE001
            return _error(f"{type(e).__name__}: {e}", 500, "server_error")
        if result.finish_reason == "cancelled":
            return Response(status_code=499)
        out = dict(
            base,
            object="text_completion",
            choices=[
                {
                    "text": result.text,
                    "index": 0,
                    "logprobs": self._final_probs(job, result) if job.probs else None,
                    "finish_reason": result.finish_reason,
                }
            ],
            usage=self._usage(result),
            timings=self._timings(result),
        )
        if return_tokens:
            out["tokens"] = result.tokens
        return JSONResponse(out)

    async def models(self, request):
        m = self.model
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {
                        "id": self.alias,
                        "object": "model",
                        "created": self.created,
                        "owned_by": "bankml",
                        "meta": {
                            "n_vocab": m.n_vocab,
                            "n_ctx": m.n_ctx,
                            "n_parallel": m.n_parallel,
                            "chat_template": m.chat_template,
                            "path": m.path,
                        },
                    }
                ],
            }
        )

    async def health(self, request):
        if self.closing:
            return _error("the server is shutting down", 503, "unavailable_error")
        return JSONResponse({"status": "ok"})

    # -- Ollama

    async def ollama_chat(self, request):
        return await self._handle(
            request, lambda raw, cancel: self._build_ollama(raw, cancel, True), self._respond_ollama_chat, ollama=True
        )

    async def ollama_generate(self, request):
        return await self._handle(
            request,
            lambda raw, cancel: self._build_ollama(raw, cancel, False),
            self._respond_ollama_generate,
            ollama=True,
        )

    def _build_ollama(self, raw, cancel, chat):
        body = self._parse(raw)
        _check_sizes(body, self.limits, ollama=True)
        _fields.check(body, "/api/chat" if chat else "/api/generate", self.model.n_ctx)
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
        params, n_predict, stop = sampler_params_from_request(body, ollama=True, vocab=self._sampler_vocab())
        kw = {"cancel": cancel, "deadline": self._deadline()}
        kw.update(_ollama_think(body.get("think"), chat))
        if chat:
            messages = _ollama_messages(body.get("messages"))
            tools = body.get("tools")
            if tools is not None and not isinstance(tools, list):
                raise RequestError(
                    f"json: cannot unmarshal {json_type_name(tools)} into Go struct field "
                    "ChatRequest.tools of type api.Tools"
                )
            job = self.model.chat(messages, constraint, params, n_predict, stop, tools=tools or None, **kw)
        else:
            prompt = body.get("prompt", "")
            if not isinstance(prompt, str):
                raise RequestError("'prompt' must be a string")
            if body.get("raw") or not self.model.chat_template:
                if body.get("think") is not None:
                    raise RequestError("'think' needs the chat template: it cannot be used with 'raw'")
                job = self.model.complete(
                    prompt, constraint, params, n_predict, stop, cancel=kw["cancel"], deadline=kw["deadline"]
                )
            else:
                messages = []
                if isinstance(body.get("system"), str):
                    messages.append({"role": "system", "content": body["system"]})
                messages.append({"role": "user", "content": prompt})
                job = self.model.chat(messages, constraint, params, n_predict, stop, **kw)
        job.stream_requested = stream
        return body, job, stream

    async def _respond_ollama_chat(self, request, body, job, stream):
        return await self._respond_ollama(request, body, job, stream, True)

    async def _respond_ollama_generate(self, request, body, job, stream):
        return await self._respond_ollama(request, body, job, stream, False)

    async def _respond_ollama(self, request, body, job, stream, chat):
        name = body.get("model") or self.alias
        runner = _Runner(job, asyncio.get_running_loop(), self).start()
        started = time.perf_counter_ns()

        def piece(text, thinking=""):
            # Ollama: the reasoning goes to message.thinking (/api/chat) or thinking (/api/generate)
            if chat:
                msg = {"role": "assistant", "content": text}
                if thinking:
                    msg["thinking"] = thinking
                return {"message": msg}
            return dict({"response": text}, **({"thinking": thinking} if thinking else {}))

        def final(result):
            t = result.timings
            # Ollama's done_reason for an answer that ends with tool calls is "stop"
            out = {
                "model": name,
                "created_at": _now(),
                **piece(""),
                "done": True,
                "done_reason": "stop" if result.finish_reason == "tool_calls" else result.finish_reason,
                "total_duration": time.perf_counter_ns() - started,
                "load_duration": 0,
                "prompt_eval_count": t["prompt_n"],
                "prompt_eval_duration": int(t["prompt_ms"] * 1e6),
                "eval_count": t["predicted_n"],
                "eval_duration": int(t["predicted_ms"] * 1e6),
            }
            return out

        if stream:

            async def lines():
                try:
                    try:
                        async for event in runner:
                            if event.content or event.reasoning:
                                yield _ndjson(
                                    {
                                        "model": name,
                                        "created_at": _now(),
                                        **piece(event.content, event.reasoning),
                                        "done": False,
                                    }
                                )
                    except Exception as e:  # noqa: BLE001 - Ollama streams an error line
                        yield _ndjson({"error": _stream_error(e)["message"]})
                        return
                    calls = _ollama_tool_calls(job.result.message) if chat else []
                    if calls:  # Ollama sends the parsed calls in a message of their own, before the last line
                        yield _ndjson(
                            {
                                "model": name,
                                "created_at": _now(),
                                "message": {"role": "assistant", "content": "", "tool_calls": calls},
                                "done": False,
                            }
                        )
                    yield _ndjson(final(job.result))
                finally:
                    job.cancel()

            return StreamingResponse(lines(), media_type="application/x-ndjson")
        try:
            result = await runner.wait(request)
        except ModelError as e:
            return _ollama_error(str(e), 503)
        except ChatParseError as e:
            return _ollama_error(str(e), 500)
        except Exception as e:  # noqa: BLE001
            return _ollama_error(f"{type(e).__name__}: {e}", 500)
        if result.finish_reason == "cancelled":
            return Response(status_code=499)
        out = final(result)
        out.update(piece(result.content, result.message.get("reasoning_content", "")))
        calls = _ollama_tool_calls(result.message) if chat else []
        if calls:
            out["message"]["tool_calls"] = calls
        return JSONResponse(out)

    async def ollama_tags(self, request):
        m = self.model
        return JSONResponse(
            {
                "models": [
                    {
                        "name": self.alias,
                        "model": self.alias,
                        "modified_at": _now(),
                        "size": _file_size(m.path),
                        "digest": "",
                        "details": {"format": "gguf"},
                    }
                ]
            }
        )

    async def ollama_version(self, request):
        return JSONResponse({"version": "0.6.0"})


def _diff_delta(diff):
    """server_chat_msg_diff_to_json_oaicompat: the delta of one message diff, ``(reasoning, content)`` or
    msg_diffs_with_tools' ``(reasoning, content, index, name, arguments, id)``; {} when it holds nothing."""
    delta = {}
    if diff[0]:
        delta["reasoning_content"] = diff[0]
    if diff[1]:
        delta["content"] = diff[1]
    if len(diff) > 2 and diff[2] >= 0:
        _, _, index, name, arguments, call_id = diff
        call = {"index": index}
        if call_id:
            call["id"] = call_id
            call["type"] = "function"
        if name or arguments:
            function = {}
            if name:
                function["name"] = name
            if arguments:
                function["arguments"] = arguments
            call["function"] = function
        delta["tool_calls"] = [call]
    return delta


def chat_tool_options(body):
    """Model.chat's tool arguments from an OpenAI chat request (oaicompat_chat_params_parse): ``tools`` (an
    empty or absent array: none), ``tool_choice`` (absent or null: ``"auto"``), ``parallel_tool_calls``
    (absent or null: what the template supports). With tools, a ``grammar`` field is refused."""
    tools = body.get("tools")
    tool_choice = body.get("tool_choice")
    if tools is not None and not isinstance(tools, list):
        raise RequestError("Failed to parse tools: Expected 'tools' to be an array, got " + json.dumps(tools))
    if tools and tool_choice != "none" and "grammar" in body:
        raise RequestError("Cannot use custom grammar constraints with tools.")
    return {
        "tools": tools or None,
        "tool_choice": "auto" if tool_choice is None else tool_choice,
        "parallel_tool_calls": body.get("parallel_tool_calls"),
    }


def chat_request_options(body):
    """Model.chat's keyword arguments from an OpenAI chat request's chat fields (as llama-server's
    oaicompat_chat_params_parse reads them)."""
    out = {}
    if "chat_template_kwargs" in body:
        out["chat_template_kwargs"] = body["chat_template_kwargs"] if body["chat_template_kwargs"] is not None else {}
    if "reasoning_format" in body:
        out["reasoning_format"] = body["reasoning_format"]
    if body.get("reasoning_effort") is not None:
        out["reasoning_effort"] = body["reasoning_effort"]
    budget = body.get("reasoning_budget_tokens", body.get("thinking_budget_tokens"))
    if budget is not None:
        if isinstance(budget, bool) or not isinstance(budget, (int, float)) or budget != int(budget):
            raise RequestError(
                "Field 'thinking_budget_tokens': [json.exception.type_error.302] type must be number, "
                f"but is {json_type_name(budget)}"
            )
        out["reasoning_budget"] = int(budget)
    if body.get("reasoning_budget_message") is not None:
        out["reasoning_budget_message"] = body["reasoning_budget_message"]
    add_gen = _bool_field(body, "add_generation_prompt", True)
    if "continue_final_message" in body or not add_gen:
        out["add_generation_prompt"] = add_gen
    if "continue_final_message" in body:
        out["continue_final_message"] = body["continue_final_message"]
    return out


def _ollama_think(think, chat):
    """Ollama's ``think``, as a client of llama-server asks for it: true/false set the template kwarg
    ``enable_thinking`` (which also turns the chat layer's thinking on or off); a level ("high", "medium",
    "low") turns it on with that ``reasoning_effort``; absent, the server's default."""
    if think is None:
        return {}
    if isinstance(think, bool):
        return {"chat_template_kwargs": {"enable_thinking": think}}
    if isinstance(think, str) and think in ("high", "medium", "low"):
        return {"chat_template_kwargs": {"enable_thinking": True}, "reasoning_effort": think}
    raise RequestError(f'invalid think value: {json.dumps(think)} (must be "high", "medium", "low", true, or false)')


def _ollama_messages(messages):
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


def _ollama_tool_calls(message):
    """An answer's tool calls in Ollama's shape (the ``ollama`` client's ``Message.ToolCall``):
    ``{"function": {"name", "arguments": object}}``. A call whose arguments are not a whole JSON object (an
    answer cut by the token limit, done_reason "length") is left out: Ollama's shape has no place for it."""
    out = []
    for call in message.get("tool_calls") or ():
        fn = call["function"]
        try:
            args = _jsondepth.loads(fn["arguments"])
        except (ValueError, RecursionError):
            continue
        if isinstance(args, dict):
            out.append({"function": {"name": fn["name"], "arguments": args}})
    return out


def _file_size(path):
    try:
        import os

        return os.path.getsize(path)
    except OSError:
        return 0


def _now():
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def _sse(obj):
    return b"data: " + json.dumps(obj, ensure_ascii=False).encode("utf-8") + b"\n\n"


def _ndjson(obj):
    return json.dumps(obj, ensure_ascii=False).encode("utf-8") + b"\n"


async def _http_error(request, exc):
    # llama-server's answers for a path or a method it does not serve
    if exc.status_code == 404:
        return _error("File Not Found", 404, "not_found_error")
    kind = {
        401: "authentication_error",
        403: "permission_error",
        501: "not_supported_error",
        503: "unavailable_error",
    }.get(exc.status_code, "invalid_request_error")
    return _error(str(exc.detail), exc.status_code, kind)


async def _server_error(request, exc):
    # the last resort (an exception outside every handler's own catch-all): never a plain-text 500
    return _error(f"{type(exc).__name__}: {exc}", 500, "server_error")


def create_app(model, alias=None, limits=None, api_keys=(), endpoints=None):
    """The Starlette application serving ``model`` (a bankml.serve.runtime.Model) within ``limits`` (a
    ``ServerLimits``; the defaults without); with ``api_keys``, every route but the public ones asks for one
    (bankml.serve.auth); ``endpoints`` (a bankml.serve.endpoints.EndpointOptions) turns /slots, /metrics and
    POST /props on or off."""
    app = _App(model, alias, limits)
    extra = Endpoints(app, app.render_prompt, endpoints, build_info=_FINGERPRINT)
    routes = [
        Route("/v1/chat/completions", app.chat_completions, methods=["POST"]),
        Route("/chat/completions", app.chat_completions, methods=["POST"]),
        Route("/v1/completions", app.completions, methods=["POST"]),
        Route("/completions", app.completions, methods=["POST"]),
        Route("/v1/models", app.models, methods=["GET"]),
        Route("/models", app.models, methods=["GET"]),
        Route("/health", app.health, methods=["GET"]),
        Route("/v1/health", app.health, methods=["GET"]),
        Route("/api/chat", app.ollama_chat, methods=["POST"]),
        Route("/api/generate", app.ollama_generate, methods=["POST"]),
        Route("/api/tags", app.ollama_tags, methods=["GET"]),
        Route("/api/version", app.ollama_version, methods=["GET"]),
    ] + extra.routes()
    starlette = Starlette(
        routes=routes,
        exception_handlers={HTTPException: _http_error, Exception: _server_error},
        middleware=[Middleware(ApiKeyMiddleware, keys=list(api_keys or ()))],
    )
    starlette.state.bankml = app
    return starlette


def limits_from_args(args):
    """ServerLimits from ``bankml serve``'s options."""
    base = ServerLimits()
    return ServerLimits(
        max_body_bytes=getattr(args, "max_body_bytes", None) or base.max_body_bytes,
        max_messages=getattr(args, "max_messages", None) or base.max_messages,
        max_grammar_bytes=getattr(args, "max_grammar_bytes", None) or base.max_grammar_bytes,
        prepare_seconds=getattr(args, "prepare_timeout", None) or base.prepare_seconds,
        request_seconds=getattr(args, "request_timeout", None) or base.request_seconds,
        max_preparing=getattr(args, "max_preparing", None) or base.max_preparing,
        max_stop=base.max_stop,
        max_stop_bytes=base.max_stop_bytes,
        max_samplers=base.max_samplers,
        max_dry_breakers=base.max_dry_breakers,
        max_dry_breaker_bytes=base.max_dry_breaker_bytes,
    )


def serve(args):
    """``bankml serve``: load the model, serve until interrupted. SIGTERM or SIGINT refuse new requests,
    cancel every generation (each stops after its current token) and exit within a few seconds."""
    import uvicorn

    try:
        options = chat_model_options(args)
        options.update(context_options(args, "auto"))  # llama-server's default -fa auto
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.chat_template_file is not None and not os.path.isfile(args.chat_template_file):
        print(f"error: {args.chat_template_file}: no such file", file=sys.stderr)
        return 2
    try:
        api_keys = api_keys_from_args(args)
    except ApiKeyError as err:
        print(str(err), file=sys.stderr)
        return 2
    if args.parallel == 0:
        print("error: invalid value for n_parallel", file=sys.stderr)
        return 2
    model = Model(
        args.model,
        **model_load_options(args),
        n_parallel=4 if args.parallel < 0 else args.parallel,  # -1: auto, 4 slots as llama-server
        **options,
    )
    starlette = create_app(
        model,
        args.alias,
        limits_from_args(args),
        api_keys=api_keys,
        endpoints=EndpointOptions(slots=args.slots, metrics=args.metrics, props=args.props),
    )
    app = starlette.state.bankml

    class _Server(uvicorn.Server):
        def handle_exit(self, sig, frame):
            app.shutdown()
            super().handle_exit(sig, frame)

        @contextlib.contextmanager
        def capture_signals(self):
            # uvicorn raises the signal again as it leaves: keep it for after the cleanup below
            with super().capture_signals():
                yield
                signals.extend(getattr(self, "_captured_signals", ()))
                if hasattr(self, "_captured_signals"):
                    self._captured_signals.clear()

    signals = []
    config = uvicorn.Config(starlette, host=args.host, port=args.port, log_level="warning", timeout_graceful_shutdown=3)
    source = args.chat_template_file or ("the model's" if model.chat_template else "llama.cpp's ChatML")
    print(
        f"bankml: serving {model.path} ({model.n_vocab:,} tokens, chat template {source}) on "
        f"http://{args.host}:{args.port} with {model.n_parallel} slot(s)",
        flush=True,
    )
    _Server(config).run()
    app.shutdown()
    if app.join(5.0):
        model.close()
        print("bankml: shut down", flush=True)
    else:
        # a generation thread is still inside libllama: freeing its context under it would crash the process
        print("bankml: shut down (a generation did not stop in time: the model is not freed)", flush=True)
    for sig in reversed(signals):
        signal.raise_signal(sig)  # as uvicorn does: the process ends by the signal it was sent
    if not app.join(0):
        os._exit(0)
    return 0
