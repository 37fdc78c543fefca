"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

The HTTP plumbing of ``bankml serve``, shared by every route: llama-server's error objects (``error``,
``Refusal``, ``refusal``), a body read within ``--max-body-bytes``, its preparation on a thread of its own
within ``--prepare-timeout``, the generation thread (``Runner``) that hands a Job's events to the event loop,
and the frames of an answer (``Plumbing._answer``), of a stream of named events (``_stream_events``) and of a
token count (``_count_tokens``). It writes no wire format's answer and reads no field.
"""

import asyncio
import ctypes
import json
import os
import sys
import threading
import time
from dataclasses import replace
from datetime import datetime, timezone

from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse, Response, StreamingResponse

from bankml.chat.chat_peg import ChatParseError
from bankml.errors import GrammarError, RequestError, SchemaError
from bankml.sampling import logprobs as _logprobs
from bankml.schema import jsondepth as _jsondepth
from bankml.schema import limits as _schema_limits
from bankml.serve import native
from bankml.serve.contexts import ModelError
from bankml.serve.job import ContextSizeError
from bankml.serve.request import MediaError, ReadContext, ServerDefaults, ServerLimits, read_body

__all__ = [
    "FINGERPRINT",
    "Gone",
    "Plumbing",
    "Refusal",
    "Runner",
    "error",
    "file_size",
    "jobs_of",
    "merge_choices",
    "merged",
    "http_error",
    "ndjson",
    "now",
    "ollama_error",
    "refusal",
    "server_error",
    "sse",
    "stream_error",
]

FINGERPRINT = "bankml-0.1.0"
_DRAIN_BYTES = 64 * 1024 * 1024


def malloc_trim():
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


def error(message, code=400, kind="invalid_request_error", extra=None):
    """llama-server's format_error_response (and the fields its error result adds: ``extra``), logged on stderr
    as its ex_wrapper logs a request's exception."""
    body = {"error": {"code": code, "message": message, "type": kind, **(extra or {})}}
    print("bankml: got exception: " + json.dumps(body, ensure_ascii=False), file=sys.stderr, flush=True)
    return JSONResponse(body, status_code=code)


def ollama_error(message, code=400):
    return JSONResponse({"error": message}, status_code=code)


class Refusal(Exception):
    """A request answered with an error object: ``code`` and llama-server's error ``kind``."""

    def __init__(self, message, code=400, kind="invalid_request_error", extra=None):
        super().__init__(message)
        self.message = message
        self.code = code
        self.kind = kind
        self.extra = extra or {}

    def response(self):
        """The error object as llama-server answers it."""
        return error(self.message, self.code, self.kind, self.extra)


class Gone(Exception):
    """The client went away: nothing to answer."""


def forget_frames(exc):
    """``exc`` with its traceback, and those of the exceptions it chains, dropped; returns it. An answered
    failure's traceback is never read, and it is a cycle (a frame that caught or raised it holds it): without
    this, the request's frames (its body, 200,000 messages, a refused schema's partial grammar) stay until the
    collector's next full pass, and a server under hostile load holds hundreds of MiB of them."""
    seen = set()
    chained = exc
    while chained is not None and id(chained) not in seen:
        seen.add(id(chained))
        chained.__traceback__ = None
        chained = chained.__cause__ or chained.__context__
    return exc


def refusal(exc):
    """The error object for an exception raised while a request is read, checked or prepared (its frames
    forgotten: ``forget_frames``)."""
    forget_frames(exc)
    if isinstance(exc, Refusal):
        return exc
    if isinstance(exc, ContextSizeError):
        # server_task_result_error::to_json: the prompt's tokens and the slot's context
        sizes = {"n_prompt_tokens": exc.n_prompt_tokens, "n_ctx": exc.n_ctx}
        return Refusal(str(exc), 400, "exceed_context_size_error", {k: v for k, v in sizes.items() if v is not None})
    if isinstance(exc, MediaError):  # llama-server's 500 for media without a multimodal projector
        return Refusal(str(exc), 500, "server_error")
    if isinstance(exc, (RequestError, SchemaError, GrammarError)):
        return Refusal(str(exc))
    if isinstance(exc, _jsondepth.NestingError):
        return Refusal(f"a JSON text in the request is invalid: {exc}")
    if isinstance(exc, RecursionError):
        return Refusal("Invalid JSON body: nesting too deep")
    if isinstance(exc, MemoryError):
        return Refusal("out of memory while preparing the request", 500, "server_error")
    if isinstance(exc, ModelError):
        return Refusal(str(exc), 503, "unavailable_error")
    if isinstance(exc, ValueError):
        return Refusal(str(exc))
    return Refusal(f"{type(exc).__name__}: {exc}", 500, "server_error")


class Runner:
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
            self.error = forget_frames(e)  # this frame holds self, which holds it
        finally:
            self.app._finished(self)
            self._put(("end", None))
            if not self.app.busy():
                malloc_trim()  # idle: what the requests freed goes back to the system

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
                if request is not None and await disconnected(request):
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


async def disconnected(request):
    try:
        return await asyncio.wait_for(request.is_disconnected(), 0.01)
    except asyncio.TimeoutError:
        return False


def jobs_of(job):
    """The jobs of a request: its own and its siblings' (llama-server's ``n_cmpl`` child tasks)."""
    return [job, *getattr(job, "siblings", ())]


def merge_choices(outs):
    """llama-server's join of several OpenAI results: the first, with every other's choice after its own (its
    usage and timings are the first's)."""
    first = outs[0]
    first["choices"] = [choice for out in outs for choice in out["choices"]]
    return first


async def merged(runners):
    """``(index, event)`` of several generations as their events come, ``(index, None)`` when one ends; the first
    failure is raised."""
    queue = asyncio.Queue()

    async def pump(i, runner):
        try:
            async for event in runner:
                await queue.put((i, event, None))
            await queue.put((i, None, None))
        except Exception as e:  # noqa: BLE001 - raised below, in the stream's own frame
            await queue.put((i, None, e))

    tasks = [asyncio.ensure_future(pump(i, runner)) for i, runner in enumerate(runners)]
    try:
        left = len(runners)
        while left:
            i, event, err = await queue.get()
            if err is not None:
                raise err
            if event is None:
                left -= 1
            yield i, event
    finally:
        for task in tasks:
            task.cancel()


def stream_error(exc):
    """The error object of a failure after a stream has started (llama-server sends it as an event; its frames
    forgotten: ``forget_frames``)."""
    forget_frames(exc)
    if isinstance(exc, ModelError):
        return {"code": 503, "message": str(exc), "type": "unavailable_error"}
    if isinstance(exc, ChatParseError):
        return {"code": 500, "message": str(exc), "type": "server_error"}
    return {"code": 500, "message": f"{type(exc).__name__}: {exc}", "type": "server_error"}


def _name_set(text):
    """common/arg.cpp's reading of --alias and --tags: split on commas, stripped, empty names dropped, sorted."""
    return sorted({name.strip() for name in (text or "").split(",")} - {""})


class Plumbing:
    """The state every route shares (the model, the limits, the generations running) and the frame of a
    request: the body read within the limits, its preparation off the event loop, the error objects."""

    def __init__(self, model, alias=None, limits=None, defaults=None, tags=None):
        self.model = model
        # llama-server's --alias and --tags: comma-separated names, kept as sorted sets (its std::set); the
        # model's name in answers is the first alias, else Model.name (the -m path as given)
        self.aliases, self.tags = _name_set(alias), _name_set(tags)
        self.alias = self.aliases[0] if self.aliases else model.name
        self.limits = limits or ServerLimits()
        self.defaults = defaults or ServerDefaults()
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

    def running(self, cmpl_id):
        """The job of the running completion named ``cmpl_id`` (its answer's ``id``), or None."""
        with self._lock:
            for runner in self._runners:
                if getattr(runner.job, "cmpl_id", None) == cmpl_id:
                    return runner.job
        return None

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
                raise Refusal("invalid Content-Length header") from None
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
            raise Gone() from None
        if too_large:
            chunks = None
            malloc_trim()
            raise Refusal(message)
        return b"".join(chunks)

    async def _prepare(self, request, make, size=0):
        """Run ``make(cancel)`` on a thread of its own within the preparation budget, its schema conversion
        inside that deadline too; cancelled (``Gone``) when the client goes away. Returns what it returns."""
        limits = self.limits
        loop = asyncio.get_running_loop()
        deadline = time.monotonic() + limits.prepare_seconds
        cancel = threading.Event()
        # a turn among the preparing threads: a preparation stuck in native code keeps its turn, the others
        # still run, up to max_preparing at once
        while self._preparing >= limits.max_preparing:
            if time.monotonic() > deadline:
                raise Refusal("the server is too busy preparing other requests; try again", 503, "unavailable_error")
            if await disconnected(request):
                raise Gone()
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
                value, ok = forget_frames(e), False  # this frame holds it
            if size > _LARGE_BODY or isinstance(value, (SchemaError, MemoryError)):
                malloc_trim()  # a large body's objects, a refused schema's partial grammar: freed now
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
                if await disconnected(request):
                    raise Gone()
                if time.monotonic() > deadline:
                    raise Refusal(
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
        job = None
        try:
            if self.closing:
                raise Refusal("the server is shutting down", 503, "unavailable_error")
            raw = await self._read(request)
            req, job = await self._prepare(request, lambda cancel: self._build(read, raw, cancel), len(raw))
            return await respond(request, req, job)
        except Gone:
            for j in jobs_of(job) if job is not None else ():
                j.cancel()
            return Response(status_code=499)
        except Exception as e:  # noqa: BLE001 - the catch-all: llama-server's error object
            for j in jobs_of(job) if job is not None else ():
                j.cancel()
            r = refusal(e)
            return ollama_error(r.message, r.code) if ollama_shape else r.response()

    def _parse(self, raw):
        return read_body(raw)

    def _usage(self, result):
        n_prompt, n_gen = len(result.prompt_tokens), len(result.tokens)
        # prompt_tokens_details as llama-server's: the prompt's tokens reused from the slot's cache
        return {
            "completion_tokens": n_gen,
            "prompt_tokens": n_prompt,
            "total_tokens": n_prompt + n_gen,
            "prompt_tokens_details": {"cached_tokens": result.timings.get("cache_n", 0)},
        }

    def _timings(self, result):
        # llama-server's server_slot_stats::to_json, then bankml's grammar + sampling time and redraws
        t = result.timings
        out = native.timings_json(result)
        out.update(sampling_us_per_token=t["sample_us_per_token"], redraws=t["redraws"])
        return out

    def refusal_of(self, exc):
        """The error (a ``Refusal``) for an exception of a request's preparation; None: the client is gone."""
        return None if isinstance(exc, Gone) else refusal(exc)

    def _context(self):
        """What a request body is read against: the limits, the model's sizes, whether it has a template, its
        vocabulary with libllama's tokenizer (logit_bias text keys and ids as llama-server reads them) and the
        server's defaults (``--seed``, ``-n``, ``-v``...)."""
        m = self.model
        return ReadContext(
            self.limits, m.n_ctx, m.n_vocab, bool(m.chat_template), m.sampler_vocab, self.defaults, m.n_parallel
        )

    def _build(self, read, raw, cancel):
        """The request of a body (``read``: a reader of bankml.serve.openai or bankml.serve.ollama, every field
        checked) and its Job, prepared before any slot is taken."""
        request = read(raw, self._context())
        # llama-server's tasks: one per prompt (an array of prompts), each with its n_cmpl (``n``) completions,
        # every one a job of its own on its own slot, answered in that order
        requests = [request] + [replace(request, prompt=p, more_prompts=()) for p in request.more_prompts]
        jobs = []
        for r in requests:
            for i in range(r.n):
                jobs.append(self.model.prepare(r, cancel=cancel, deadline=self._deadline()))
                if i:  # an n_cmpl child takes another free slot; the parent keeps the request's id_slot
                    jobs[-1].slot_request = None
        job = jobs[0]
        job.siblings = jobs[1:]
        return request, job

    # -- OpenAI

    def _final_probs(self, job, result):
        # send_final_response without streaming: the records, those of the stop word's tokens dropped
        records = _logprobs.trim_stop_word(
            result.probs, result.stopping_word, lambda text: self.model.tokenize(text, False, False)
        )
        return {"content": _logprobs.probs_to_json(records, job.probs.post_sampling)} if records else None

    def _native_json(self, job, result, model, return_tokens, index=0):
        """llama-server's native final result (to_json_non_oaicompat): ``/completion``'s answer, and the
        ``__verbose`` field of the OpenAI answers. Its prompt is the prompt's tokens with their special text."""
        prompt = b"".join(self.model.piece(t, special=True) for t in job.prompt_tokens).decode("utf-8", "replace")
        records = None
        if job.probs and not job.stream_requested:
            records = _logprobs.trim_stop_word(
                result.probs, result.stopping_word, lambda text: self.model.tokenize(text, False, False)
            )
        return native.completion_json(result, job, model, prompt, records, return_tokens, index)

    def _chunk_probs(self, job, event):
        # a partial result's logprobs: its one record, when it has top candidates (prob_output.probs non-empty)
        record = event.probs
        if record is None or not record.top:
            return None
        return {"content": _logprobs.probs_to_json([record], job.probs.post_sampling)}

    def _stream_events(self, request, job, writer, sse, extras=None):
        """The SSE stream of a format whose writer gives named events: each partial result's (``writer.partial``)
        and the final result's (``writer.final``, with the final parse's diffs); a failure is an ``error``
        event, as llama-server sends it. ``extras(job, event)``: the keyword arguments of ``writer.partial`` for
        a format that carries prompt progress and per-token timings (None: it carries neither, and a
        prompt-progress event writes nothing)."""
        runner = Runner(job, asyncio.get_running_loop(), self).start()

        async def events():
            try:
                last = None
                try:
                    async for event in runner:
                        last = event
                        more = extras(job, event) if extras is not None else {}
                        if event.partial or (event.progress is not None and more):
                            diffs = event.diffs[: event.n_partial_diffs] if event.partial else []
                            for kind, data in writer.partial(event.index, diffs, **more):
                                yield sse(kind, data)
                except Exception as e:  # noqa: BLE001 - llama-server sends the error as an event
                    yield sse("error", stream_error(e))
                    return
                final = last.diffs[last.n_partial_diffs :] if last is not None else []
                for kind, data in writer.final(job.result, final):
                    yield sse(kind, data)
            finally:
                job.cancel()

        return StreamingResponse(events(), media_type="text/event-stream")

    async def _answer(self, request, job, write, merge=None):
        """Generate to the end and answer ``write(result)``, or llama-server's error object. With several
        completions (``n``), each is generated on its own slot and ``merge`` joins ``write(result, index)`` of
        each, as llama-server joins its results."""
        jobs = jobs_of(job)
        loop = asyncio.get_running_loop()
        runners = [Runner(j, loop, self).start() for j in jobs]
        try:
            results = await asyncio.gather(*(runner.wait(request) for runner in runners))
        except ModelError as e:
            return error(str(e), 503, "unavailable_error")
        except ChatParseError as e:
            return error(str(e), 500, "server_error")
        except Exception as e:  # noqa: BLE001
            return error(f"{type(e).__name__}: {e}", 500, "server_error")
        finally:
            for j in jobs:
                j.cancel()  # a no-op once finished; the others stop when one failed
        if any(result.finish_reason == "cancelled" for result in results):
            return Response(status_code=499)
        if len(results) == 1:
            return JSONResponse(write(results[0]))
        return JSONResponse(merge([write(result, i) for i, result in enumerate(results)]))

    def _start_runners(self, job):
        """A started Runner for each completion of a request (``n``)."""
        loop = asyncio.get_running_loop()
        return [Runner(j, loop, self).start() for j in jobs_of(job)]

    async def _count_tokens(self, request, read, oai):
        """llama-server's handle_count_tokens: the prompt a body renders to, tokenized; nothing generated."""
        try:
            if self.closing:
                raise Refusal("the server is shutting down", 503, "unavailable_error")
            raw = await self._read(request)
            n = await self._prepare(request, lambda cancel: self._count_prompt(read, raw, cancel), len(raw))
        except Gone:
            return Response(status_code=499)
        except Exception as e:  # noqa: BLE001 - llama-server's error object
            r = refusal(e)
            return r.response()
        out = {"input_tokens": n}
        if oai:
            out["object"] = "response.input_tokens"
        return JSONResponse(out)

    def _count_prompt(self, read, raw, cancel):
        req = read(raw, self._context())
        return len(self.model.tokenize_prompt(self.model.render(req, cancel=cancel), cancel))


def file_size(path):
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def now():
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def sse(obj):
    return b"data: " + json.dumps(obj, ensure_ascii=False).encode("utf-8") + b"\n\n"


def ndjson(obj):
    return json.dumps(obj, ensure_ascii=False).encode("utf-8") + b"\n"


async def http_error(request, exc):
    # llama-server's answers for a path or a method it does not serve
    if exc.status_code == 404:
        # server-http.cpp's error handler writes this one in its own order (message, type, code)
        body = {"error": {"message": "File Not Found", "type": "not_found_error", "code": 404}}
        return JSONResponse(body, status_code=404)
    kind = {
        401: "authentication_error",
        403: "permission_error",
        501: "not_supported_error",
        503: "unavailable_error",
    }.get(exc.status_code, "invalid_request_error")
    return error(str(exc.detail), exc.status_code, kind)


async def server_error(request, exc):
    # the last resort (an exception outside every handler's own catch-all): never a plain-text 500
    return error(f"{type(exc).__name__}: {exc}", 500, "server_error")
