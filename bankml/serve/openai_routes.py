"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

The OpenAI routes of ``bankml serve``: ``/v1/chat/completions`` (its answer and its stream of
llama-server's deltas), ``/v1/completions``, ``/v1/chat/completions/input_tokens``, ``/v1/models`` and
``/health``; the bodies are read by ``bankml.serve.openai``, the frame is ``bankml.serve.plumbing``'s.
"""

import asyncio
import time
import uuid

from starlette.responses import JSONResponse, Response, StreamingResponse

from bankml.serve import openai
from bankml.serve.plumbing import FINGERPRINT, Runner, error, sse, stream_error
from bankml.serve.runtime import ModelError

__all__ = ["OpenAIRoutes", "diff_delta"]


class OpenAIRoutes:
    """The OpenAI routes, a part of the server's application object (``bankml.serve.app``)."""

    def render_prompt(self, body, raw, cancel):
        """The prompt a chat request renders to (llama-server's /apply-template): its messages, tools and chat
        fields through the chat layer, nothing generated."""
        return self.model.render(openai.read_template(body, raw, self._context()), cancel=cancel)

    async def chat_completions(self, request):
        return await self._handle(request, openai.read_chat, self._respond_chat)

    async def _respond_chat(self, request, req, job):
        base = {
            "created": int(time.time()),
            "id": "chatcmpl-" + uuid.uuid4().hex,
            "model": req.model or self.alias,
            "system_fingerprint": FINGERPRINT,
        }
        if req.stream:
            runner = Runner(job, asyncio.get_running_loop(), self).start()
            return StreamingResponse(
                self._chat_events(runner, job, base, req.include_usage), media_type="text/event-stream"
            )

        def write(result):
            out = dict(
                base,
                object="chat.completion",
                choices=[{"finish_reason": result.finish_reason, "index": 0, "message": dict(result.message)}],
                usage=self._usage(result),
                timings=self._timings(result),
            )
            if job.probs:
                logprobs = self._final_probs(job, result)
                if logprobs is not None:
                    out["choices"][0]["logprobs"] = logprobs
            if req.return_tokens:
                out["tokens"] = result.tokens
            return out

        return await self._answer(request, job, write)

    def _chat_chunks(self, job, event, base, role_pending):
        """The chunks of one generation event: the role delta with the first token's (none when that token's text
        is not whole UTF-8: to_json_oaicompat_chat's n_decoded == 1), one chunk per message diff (as
        server_chat_msg_diff_to_json_oaicompat), and a token's logprobs on the last delta of its partial result."""
        chunks = []
        if role_pending and event.partial and event.index == 1:  # llama-server's `first = n_decoded == 1`
            role = {"role": "assistant", "content": None}
            chunks.append(
                dict(base, object="chat.completion.chunk", choices=[{"finish_reason": None, "index": 0, "delta": role}])
            )
        n_partial = len(chunks)
        for i, diff in enumerate(event.diffs):
            delta = diff_delta(diff)
            if delta:
                choice = {"finish_reason": None, "index": 0, "delta": delta}
                chunks.append(dict(base, object="chat.completion.chunk", choices=[choice]))
                if i < event.n_partial_diffs:
                    n_partial = len(chunks)
        logprobs = self._chunk_probs(job, event) if event.partial else None
        if logprobs is not None and n_partial:
            last = chunks[n_partial - 1]
            last["choices"] = [dict(last["choices"][0], logprobs=logprobs)]
        return chunks

    async def _chat_events(self, runner, job, base, include_usage):
        """The SSE stream of a chat completion, as llama-server's partial results and its final chunk."""
        try:
            role_pending = True
            try:
                async for event in runner:
                    for chunk in self._chat_chunks(job, event, base, role_pending):
                        yield sse(chunk)
                    role_pending = role_pending and not event.partial
            except Exception as e:  # noqa: BLE001 - llama-server sends the error as an event
                yield sse({"error": stream_error(e)})
                return
            result = job.result
            last = dict(
                base,
                object="chat.completion.chunk",
                choices=[{"finish_reason": result.finish_reason, "index": 0, "delta": {}}],
                timings=self._timings(result),
            )
            if include_usage:
                yield sse(last)
                yield sse(dict(base, object="chat.completion.chunk", choices=[], usage=self._usage(result)))
            else:
                last["usage"] = self._usage(result)
                yield sse(last)
            yield b"data: [DONE]\n\n"
        finally:
            job.cancel()  # a no-op once finished; frees the slot if the client went away

    async def completions(self, request):
        return await self._handle(request, openai.read_completion, self._respond_completion)

    async def chat_input_tokens(self, request):
        return await self._count_tokens(request, openai.read_chat, True)

    async def _respond_completion(self, request, req, job):
        stream, return_tokens = req.stream, req.return_tokens
        cid = "cmpl-" + uuid.uuid4().hex
        base = {
            "created": int(time.time()),
            "id": cid,
            "model": req.model or self.alias,
            "system_fingerprint": FINGERPRINT,
        }
        runner = Runner(job, asyncio.get_running_loop(), self).start()
        if stream:

            async def events():
                try:
                    try:
                        async for event in runner:
                            # one chunk per partial result, empty text included, as llama-server sends them
                            if event.partial:
                                yield sse(
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
                        yield sse({"error": stream_error(e)})
                        return
                    result = job.result
                    yield sse(
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
            return error(str(e), 503, "unavailable_error")
        except Exception as e:  # noqa: BLE001
            return error(f"{type(e).__name__}: {e}", 500, "server_error")
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
            return error("the server is shutting down", 503, "unavailable_error")
        return JSONResponse({"status": "ok"})


def diff_delta(diff):
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
