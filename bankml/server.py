"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

``bankml serve``: an OpenAI- and Ollama-compatible HTTP server (Starlette + uvicorn) over ``bankml.runtime``.

* ``POST /v1/chat/completions``: messages, ``response_format`` (json_object / json_schema), ``grammar``,
  ``json_schema``, the sampler fields and ``seed``, ``max_tokens``, ``stop``, ``stream`` (server-sent
  events); the answer's content is extracted with llama-server's content rule.
* ``POST /v1/completions``: a raw prompt (no template), ``grammar`` / ``json_schema``.
* ``GET /v1/models``, ``GET /health``.
* ``POST /api/chat``, ``POST /api/generate`` (Ollama: ``format``, ``options``, NDJSON streaming, default
  ``stream: true``), ``GET /api/tags``, ``GET /api/version``.

A bad body, schema or grammar gets a 400 with llama-server's error object before any token is computed.
Each request is generated on one of ``--parallel`` contexts (slots) of one model, so concurrent requests
never share state; a client that disconnects cancels its generation after the current token and frees the
slot.
"""
import asyncio
import json
import threading
import time
import uuid
from datetime import datetime, timezone

from starlette.applications import Starlette
from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from .constraint import Constraint, RequestError, from_ollama_text, from_openai_text
from .errors import GrammarError, SchemaError
from .runtime import ContextSizeError, check_messages, sampler_params_from_request

__all__ = ["create_app", "serve"]

_FINGERPRINT = "bankml-0.1.0"


def _error(message, code=400, kind="invalid_request_error"):
    # llama-server's format_error_response
    return JSONResponse({"error": {"code": code, "message": message, "type": kind}}, status_code=code)


def _ollama_error(message, code=400):
    return JSONResponse({"error": message}, status_code=code)


class _Runner:
    """Runs a Job on a worker thread and hands its events to the event loop."""

    def __init__(self, job, loop):
        self.job = job
        self.loop = loop
        self.events = asyncio.Queue()
        self.thread = threading.Thread(target=self._work, daemon=True)
        self.error = None

    def start(self):
        self.thread.start()
        return self

    def _put(self, item):
        self.loop.call_soon_threadsafe(self.events.put_nowait, item)

    def _work(self):
        try:
            for event in self.job.stream():
                self._put(("event", event))
        except Exception as e:  # noqa: BLE001 - reported to the client as a 500
            self.error = e
        self._put(("end", None))

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


class _App:
    def __init__(self, model, alias=None):
        self.model = model
        self.alias = alias or model.name
        self.created = int(time.time())

    # -- helpers

    async def _body(self, request):
        try:
            raw = await request.body()
        except ClientDisconnect:
            raise RequestError("client disconnected") from None
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise RequestError(f"Invalid JSON body: {e}") from None
        if not isinstance(body, dict):
            raise RequestError("the request body must be a JSON object")
        return raw, body

    async def _prepare(self, make):
        # schema conversion, grammar parsing and tokenization can take a few ms: off the event loop
        return await asyncio.get_running_loop().run_in_executor(None, make)

    def _usage(self, result):
        n_prompt, n_gen = len(result.prompt_tokens), len(result.tokens)
        return {"completion_tokens": n_gen, "prompt_tokens": n_prompt, "total_tokens": n_prompt + n_gen}

    def _timings(self, result):
        t = result.timings
        return {"prompt_n": t["prompt_n"], "prompt_ms": t["prompt_ms"], "predicted_n": t["predicted_n"],
                "predicted_ms": t["predicted_ms"], "predicted_per_second": t["predicted_per_second"],
                "sampling_us_per_token": t["sample_us_per_token"], "redraws": t["redraws"]}

    # -- OpenAI

    async def chat_completions(self, request):
        try:
            raw, body = await self._body(request)
            constraint = from_openai_text(body, raw)
            messages = check_messages(body.get("messages"))
            params, n_predict, stop = sampler_params_from_request(body)
            job = await self._prepare(lambda: self.model.chat(messages, constraint, params, n_predict, stop))
        except ContextSizeError as e:
            return _error(str(e), 400, "exceed_context_size_error")
        except (RequestError, SchemaError, GrammarError, ValueError) as e:
            return _error(str(e))
        cid = "chatcmpl-" + uuid.uuid4().hex
        created = int(time.time())
        base = {"created": created, "id": cid, "model": body.get("model") or self.alias,
                "system_fingerprint": _FINGERPRINT}
        runner = _Runner(job, asyncio.get_running_loop()).start()
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))

            async def events():
                try:
                    first = dict(base, object="chat.completion.chunk",
                                 choices=[{"finish_reason": None, "index": 0,
                                           "delta": {"role": "assistant", "content": None}}])
                    yield _sse(first)
                    async for event in runner:
                        if event.content:
                            yield _sse(dict(base, object="chat.completion.chunk",
                                            choices=[{"finish_reason": None, "index": 0,
                                                      "delta": {"content": event.content}}]))
                    result = job.result
                    last = dict(base, object="chat.completion.chunk",
                                choices=[{"finish_reason": result.finish_reason, "index": 0, "delta": {}}],
                                timings=self._timings(result))
                    if include_usage:
                        yield _sse(last)
                        yield _sse(dict(base, object="chat.completion.chunk", choices=[],
                                        usage=self._usage(result)))
                    else:
                        last["usage"] = self._usage(result)
                        yield _sse(last)
                    yield b"data: [DONE]\n\n"
                finally:
                    job.cancel()   # a no-op once finished; frees the slot if the client went away
            return StreamingResponse(events(), media_type="text/event-stream")
        try:
            result = await runner.wait(request)
        except Exception as e:  # noqa: BLE001 - a failure during generation: llama-server's 500 error object
            return _error(f"{type(e).__name__}: {e}", 500, "server_error")
        if result.finish_reason == "cancelled":
            return Response(status_code=499)
        message = dict(result.message)
        out = dict(base, object="chat.completion",
                   choices=[{"finish_reason": result.finish_reason, "index": 0, "message": message}],
                   usage=self._usage(result), timings=self._timings(result))
        if body.get("return_tokens"):
            out["tokens"] = result.tokens
        return JSONResponse(out)

    async def completions(self, request):
        try:
            raw, body = await self._body(request)
            prompt = body.get("prompt")
            if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
                prompt = prompt[0]
            if not isinstance(prompt, str):
                raise RequestError("'prompt' must be a string")
            constraint = from_openai_text(body, raw)   # no template: the bare grammar (Model.complete)
            params, n_predict, stop = sampler_params_from_request(body)
            job = await self._prepare(lambda: self.model.complete(prompt, constraint, params, n_predict, stop))
        except ContextSizeError as e:
            return _error(str(e), 400, "exceed_context_size_error")
        except (RequestError, SchemaError, GrammarError, ValueError) as e:
            return _error(str(e))
        cid = "cmpl-" + uuid.uuid4().hex
        base = {"created": int(time.time()), "id": cid, "model": body.get("model") or self.alias,
                "system_fingerprint": _FINGERPRINT}
        runner = _Runner(job, asyncio.get_running_loop()).start()
        if body.get("stream"):
            async def events():
                try:
                    async for event in runner:
                        if event.text:
                            yield _sse(dict(base, object="text_completion",
                                            choices=[{"text": event.text, "index": 0, "logprobs": None,
                                                      "finish_reason": None}]))
                    result = job.result
                    yield _sse(dict(base, object="text_completion",
                                    choices=[{"text": "", "index": 0, "logprobs": None,
                                              "finish_reason": result.finish_reason}],
                                    usage=self._usage(result)))
                    yield b"data: [DONE]\n\n"
                finally:
                    job.cancel()
            return StreamingResponse(events(), media_type="text/event-stream")
        try:
            result = await runner.wait(request)
        except Exception as e:  # noqa: BLE001
            return _error(f"{type(e).__name__}: {e}", 500, "server_error")
        if result.finish_reason == "cancelled":
            return Response(status_code=499)
        out = dict(base, object="text_completion",
                   choices=[{"text": result.text, "index": 0, "logprobs": None,
                             "finish_reason": result.finish_reason}],
                   usage=self._usage(result), timings=self._timings(result))
        if body.get("return_tokens"):
            out["tokens"] = result.tokens
        return JSONResponse(out)

    async def models(self, request):
        m = self.model
        return JSONResponse({"object": "list", "data": [{
            "id": self.alias, "object": "model", "created": self.created, "owned_by": "bankml",
            "meta": {"n_vocab": m.n_vocab, "n_ctx": m.n_ctx, "n_parallel": m.n_parallel,
                     "template": m.template, "path": m.path}}]})

    async def health(self, request):
        return JSONResponse({"status": "ok"})

    # -- Ollama

    async def ollama_chat(self, request):
        return await self._ollama(request, chat=True)

    async def ollama_generate(self, request):
        return await self._ollama(request, chat=False)

    async def _ollama(self, request, chat):
        try:
            raw, body = await self._body(request)
            constraint = from_ollama_text(body, raw)
            params, n_predict, stop = sampler_params_from_request(body, ollama=True)
            if chat:
                messages = check_messages(body.get("messages"))
                make = lambda: self.model.chat(messages, constraint, params, n_predict, stop)  # noqa: E731
            else:
                prompt = body.get("prompt", "")
                if not isinstance(prompt, str):
                    raise RequestError("'prompt' must be a string")
                if body.get("raw") or not self.model.chat_template:
                    make = lambda: self.model.complete(prompt, constraint, params, n_predict, stop)  # noqa: E731
                else:
                    messages = []
                    if isinstance(body.get("system"), str):
                        messages.append({"role": "system", "content": body["system"]})
                    messages.append({"role": "user", "content": prompt})
                    make = lambda: self.model.chat(messages, constraint, params, n_predict, stop)  # noqa: E731
            job = await self._prepare(make)
        except (RequestError, SchemaError, GrammarError, ValueError) as e:
            return _ollama_error(str(e))
        name = body.get("model") or self.alias
        runner = _Runner(job, asyncio.get_running_loop()).start()
        started = time.perf_counter_ns()

        def piece(text):
            if chat:
                return {"message": {"role": "assistant", "content": text}}
            return {"response": text}

        def final(result):
            t = result.timings
            out = {"model": name, "created_at": _now(), **piece(""), "done": True,
                   "done_reason": result.finish_reason,
                   "total_duration": time.perf_counter_ns() - started, "load_duration": 0,
                   "prompt_eval_count": t["prompt_n"], "prompt_eval_duration": int(t["prompt_ms"] * 1e6),
                   "eval_count": t["predicted_n"], "eval_duration": int(t["predicted_ms"] * 1e6)}
            return out

        if body.get("stream", True):
            async def lines():
                try:
                    async for event in runner:
                        if event.content:
                            yield _ndjson({"model": name, "created_at": _now(), **piece(event.content),
                                           "done": False})
                    yield _ndjson(final(job.result))
                finally:
                    job.cancel()
            return StreamingResponse(lines(), media_type="application/x-ndjson")
        try:
            result = await runner.wait(request)
        except Exception as e:  # noqa: BLE001
            return _ollama_error(f"{type(e).__name__}: {e}", 500)
        if result.finish_reason == "cancelled":
            return Response(status_code=499)
        out = final(result)
        out.update(piece(result.content))
        return JSONResponse(out)

    async def ollama_tags(self, request):
        m = self.model
        return JSONResponse({"models": [{"name": self.alias, "model": self.alias, "modified_at": _now(),
                                         "size": _file_size(m.path), "digest": "",
                                         "details": {"format": "gguf"}}]})

    async def ollama_version(self, request):
        return JSONResponse({"version": "0.6.0"})


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


def create_app(model, alias=None):
    """The Starlette application serving ``model`` (a bankml.runtime.Model)."""
    app = _App(model, alias)
    routes = [
        Route("/v1/chat/completions", app.chat_completions, methods=["POST"]),
        Route("/chat/completions", app.chat_completions, methods=["POST"]),
        Route("/v1/completions", app.completions, methods=["POST"]),
        Route("/completions", app.completions, methods=["POST"]),
        Route("/v1/models", app.models, methods=["GET"]),
        Route("/models", app.models, methods=["GET"]),
        Route("/health", app.health, methods=["GET"]),
        Route("/api/chat", app.ollama_chat, methods=["POST"]),
        Route("/api/generate", app.ollama_generate, methods=["POST"]),
        Route("/api/tags", app.ollama_tags, methods=["GET"]),
        Route("/api/version", app.ollama_version, methods=["GET"]),
    ]
    starlette = Starlette(routes=routes)
    starlette.state.bankml = app
    return starlette


def serve(args):
    """``bankml serve``: load the model, serve until interrupted."""
    import uvicorn

    from .runtime import Model
    model = Model(args.model, n_ctx=args.ctx_size, n_batch=args.batch_size, n_ubatch=args.ubatch_size,
                  n_threads=args.threads, n_threads_batch=args.threads_batch, n_parallel=args.parallel,
                  no_repack=args.no_repack)
    print(f"bankml: serving {model.path} ({model.n_vocab:,} tokens, template {model.template}) on "
          f"http://{args.host}:{args.port} with {model.n_parallel} slot(s)", flush=True)
    uvicorn.run(create_app(model, args.alias), host=args.host, port=args.port, log_level="warning")
    model.close()
    return 0
