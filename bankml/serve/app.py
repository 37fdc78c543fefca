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

The app does HTTP and streaming only: a body is read, off the event loop, into one typed
``bankml.serve.request.Request`` by ``bankml.serve.openai`` or ``bankml.serve.ollama`` (every field checked there),
the runtime makes a Job of it (``Model.prepare``), and the app sends the answer or its stream. A bad body, schema
or grammar gets a 400 with llama-server's error object before any slot is taken or token computed.
Each request is generated on one of ``--parallel`` contexts (slots) of one model, so concurrent requests
never share state; a client that disconnects cancels its generation after the current token and frees the
slot.
"""

import asyncio
import contextlib
import ctypes
import json
import os
import signal
import sys
import threading
import time
import uuid
from datetime import datetime, timezone

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from bankml.chat.chat_peg import ChatParseError
from bankml.errors import GrammarError, RequestError, SchemaError
from bankml.sampling import logprobs as _logprobs
from bankml.schema import jsondepth as _jsondepth
from bankml.schema import limits as _schema_limits
from bankml.serve import anthropic, native, ollama, openai, responses
from bankml.serve.auth import ApiKeyError, ApiKeyMiddleware, api_keys_from_args
from bankml.serve.endpoints import EndpointOptions, Endpoints
from bankml.serve.flags import context_options
from bankml.serve.request import MediaError, ReadContext, ServerLimits, read_body
from bankml.serve.runtime import (
    ContextSizeError,
    Model,
    ModelError,
    chat_model_options,
    model_load_options,
)

__all__ = ["ServerLimits", "create_app", "serve"]

_FINGERPRINT = "bankml-0.1.0"
_DRAIN_BYTES = 64 * 1024 * 1024


def _malloc_trim():
    """Give freed heap memory back to the system (glibc): a large request's transient objects otherwise stay
    resident in the allocator's per-thread arenas, and resident memory drifts with the mix of requests."""
    global _TRIM
    if _TRIM is None:
        try:
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
    if isinstance(exc, MediaError):  # llama-server's 500 for media without a multimodal projector
        return _Refusal(str(exc), 500, "server_error")
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

    async def _handle(self, request, read, respond, ollama_shape=False):
        """The frame of every generation endpoint: read and check the body into a Request (``read``, a reader of
        bankml.serve.openai or bankml.serve.ollama) and prepare its Job off the event loop, then ``respond`` —
        every failure answered with the error object, never a plain-text 500, and no slot taken before the
        request is valid."""
        err = _ollama_error if ollama_shape else _error
        job = None
        try:
            if self.closing:
                raise _Refusal("the server is shutting down", 503, "unavailable_error")
            raw = await self._read(request)
            req, job = await self._prepare(request, lambda cancel: self._build(read, raw, cancel), len(raw))
            return await respond(request, req, job)
        except _Gone:
            if job is not None:
                job.cancel()
            return Response(status_code=499)
        except Exception as e:  # noqa: BLE001 - the catch-all: llama-server's error object
            if job is not None:
                job.cancel()
            r = _refusal(e)
            return err(r.message, r.code) if ollama_shape else err(r.message, r.code, r.kind)

    def _parse(self, raw):
        return read_body(raw)

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
        return self.model.render(openai.read_template(body, raw, self._context()), cancel=cancel)

    def _context(self):
        """What a request body is read against: the limits, the model's sizes, whether it has a template, and
        its vocabulary with libllama's tokenizer (logit_bias text keys and ids as llama-server reads them)."""
        m = self.model
        return ReadContext(self.limits, m.n_ctx, m.n_vocab, bool(m.chat_template), m.sampler_vocab)

    def _build(self, read, raw, cancel):
        """The request of a body (``read``: a reader of bankml.serve.openai or bankml.serve.ollama, every field
        checked) and its Job, prepared before any slot is taken."""
        request = read(raw, self._context())
        return request, self.model.prepare(request, cancel=cancel, deadline=self._deadline())

    # -- OpenAI

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
        return await self._handle(request, openai.read_chat, self._respond_chat)

    async def _respond_chat(self, request, req, job):
        stream, include_usage, return_tokens = req.stream, req.include_usage, req.return_tokens
        cid = "chatcmpl-" + uuid.uuid4().hex
        created = int(time.time())
        base = {
            "created": created,
            "id": cid,
            "model": req.model or self.alias,
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

    async def completions(self, request):
        return await self._handle(request, openai.read_completion, self._respond_completion)

    # -- the agent APIs: one generation, written by each format's writers (bankml.serve.anthropic, .responses)

    async def anthropic_messages(self, request):
        return await self._handle(request, anthropic.read_messages, self._respond_anthropic)

    async def _respond_anthropic(self, request, req, job):
        message_id = "chatcmpl-" + uuid.uuid4().hex  # llama-server's oaicompat_cmpl_id
        model = req.model or self.alias
        if req.stream:
            writer = anthropic.StreamWriter(message_id, model, len(job.prompt_tokens))
            return self._stream_events(request, job, writer, anthropic.sse)
        return await self._answer(request, job, lambda result: anthropic.message_json(result, message_id, model))

    async def native_completion(self, request):
        return await self._handle(request, native.read_native, self._respond_native)

    async def _respond_native(self, request, req, job):
        model = req.model or self.alias
        n_prompt = len(job.prompt_tokens)
        prompt = b"".join(self.model.piece(t, special=True) for t in job.prompt_tokens).decode("utf-8", "replace")
        if req.stream:
            runner = _Runner(job, asyncio.get_running_loop(), self).start()

            async def events():
                try:
                    try:
                        async for event in runner:
                            if event.partial:
                                yield native.sse(native.partial_json(event, job, n_prompt))
                    except Exception as e:  # noqa: BLE001
                        yield native.sse({"error": _stream_error(e)})
                        return
                    yield native.sse(native.completion_json(job.result, job, model, prompt))
                finally:
                    job.cancel()

            return StreamingResponse(events(), media_type="text/event-stream")

        def write(result):
            records = None
            if job.probs:
                records = _logprobs.trim_stop_word(
                    result.probs, result.stopping_word, lambda text: self.model.tokenize(text, False, False)
                )
            return native.completion_json(result, job, model, prompt, records, req.return_tokens)

        return await self._answer(request, job, write)

    async def responses(self, request):
        return await self._handle(request, responses.read_responses, self._respond_responses)

    async def _respond_responses(self, request, req, job):
        response_id = "resp_" + uuid.uuid4().hex
        model = req.model or self.alias
        if req.stream:
            writer = responses.StreamWriter(response_id, model, self._timings)
            return self._stream_events(request, job, writer, responses.sse)
        return await self._answer(request, job, lambda result: responses.response_json(result, response_id, model))

    async def responses_input_tokens(self, request):
        return await self._count_tokens(request, responses.read_input_tokens, True)

    def _stream_events(self, request, job, writer, sse):
        """The SSE stream of a format whose writer gives named events: each partial result's (``writer.partial``)
        and the final result's (``writer.final``, with the final parse's diffs); a failure is an ``error``
        event, as llama-server sends it."""
        runner = _Runner(job, asyncio.get_running_loop(), self).start()

        async def events():
            try:
                last = None
                try:
                    async for event in runner:
                        last = event
                        if event.partial:
                            for kind, data in writer.partial(event.index, event.diffs[: event.n_partial_diffs]):
                                yield sse(kind, data)
                except Exception as e:  # noqa: BLE001 - llama-server sends the error as an event
                    yield sse("error", _stream_error(e))
                    return
                final = last.diffs[last.n_partial_diffs :] if last is not None else []
                for kind, data in writer.final(job.result, final):
                    yield sse(kind, data)
            finally:
                job.cancel()

        return StreamingResponse(events(), media_type="text/event-stream")

    async def _answer(self, request, job, write):
        """Generate to the end and answer ``write(result)``, or llama-server's error object."""
        runner = _Runner(job, asyncio.get_running_loop(), self).start()
        try:
            result = await runner.wait(request)
        except ModelError as e:
            return _error(str(e), 503, "unavailable_error")
        except ChatParseError as e:
            return _error(str(e), 500, "server_error")
        except Exception as e:  # noqa: BLE001
            return _error(f"{type(e).__name__}: {e}", 500, "server_error")
        if result.finish_reason == "cancelled":
            return Response(status_code=499)
        return JSONResponse(write(result))

    async def _count_tokens(self, request, read, oai):
        """llama-server's handle_count_tokens: the prompt a body renders to, tokenized; nothing generated."""
        try:
            if self.closing:
                raise _Refusal("the server is shutting down", 503, "unavailable_error")
            raw = await self._read(request)
            n = await self._prepare(request, lambda cancel: self._count_prompt(read, raw, cancel), len(raw))
        except _Gone:
            return Response(status_code=499)
        except Exception as e:  # noqa: BLE001 - llama-server's error object
            r = _refusal(e)
            return _error(r.message, r.code, r.kind)
        out = {"input_tokens": n}
        if oai:
            out["object"] = "response.input_tokens"
        return JSONResponse(out)

    def _count_prompt(self, read, raw, cancel):
        req = read(raw, self._context())
        return len(self.model.tokenize_prompt(self.model.render(req, cancel=cancel), cancel))

    async def anthropic_count_tokens(self, request):
        return await self._count_tokens(request, anthropic.read_count_tokens, False)

    async def chat_input_tokens(self, request):
        return await self._count_tokens(request, openai.read_chat, True)

    async def _respond_completion(self, request, req, job):
        stream, return_tokens = req.stream, req.return_tokens
        cid = "cmpl-" + uuid.uuid4().hex
        base = {
            "created": int(time.time()),
            "id": cid,
            "model": req.model or self.alias,
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
        return await self._handle(request, ollama.read_chat, self._respond_ollama, ollama_shape=True)

    async def ollama_generate(self, request):
        return await self._handle(request, ollama.read_generate, self._respond_ollama, ollama_shape=True)

    async def _respond_ollama(self, request, req, job):
        stream, chat = req.stream, req.endpoint == ollama.CHAT
        name = req.model or self.alias
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
        Route("/completion", app.native_completion, methods=["POST"]),
        Route("/v1/completions", app.completions, methods=["POST"]),
        Route("/completions", app.completions, methods=["POST"]),
        Route("/v1/chat/completions/input_tokens", app.chat_input_tokens, methods=["POST"]),
        Route("/chat/completions/input_tokens", app.chat_input_tokens, methods=["POST"]),
        Route("/v1/responses", app.responses, methods=["POST"]),
        Route("/responses", app.responses, methods=["POST"]),
        Route("/v1/responses/input_tokens", app.responses_input_tokens, methods=["POST"]),
        Route("/responses/input_tokens", app.responses_input_tokens, methods=["POST"]),
        Route("/v1/messages", app.anthropic_messages, methods=["POST"]),
        Route("/messages", app.anthropic_messages, methods=["POST"]),
        Route("/v1/messages/count_tokens", app.anthropic_count_tokens, methods=["POST"]),
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
