"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

The agent APIs and llama-server's native completion in ``bankml serve``: ``/v1/messages`` and
``/v1/messages/count_tokens`` (Anthropic), ``/v1/responses`` and ``/v1/responses/input_tokens`` (OpenAI's
Responses), ``/completion``. Each body is converted and read by its module (``bankml.serve.anthropic``,
``.responses``, ``.native``), generated once, and written by that module's answer and stream writers.
"""

import asyncio
import uuid

from starlette.responses import StreamingResponse

from bankml.serve import anthropic, native, responses
from bankml.serve.plumbing import Runner, stream_error

__all__ = ["AgentRoutes"]


class AgentRoutes:
    """The agent API routes, a part of the server's application object (``bankml.serve.app``)."""

    async def anthropic_messages(self, request):
        return await self._handle(request, anthropic.read_messages, self._respond_anthropic)

    async def _respond_anthropic(self, request, req, job):
        message_id = "chatcmpl-" + uuid.uuid4().hex  # llama-server's oaicompat_cmpl_id
        job.cmpl_id = message_id
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
        if req.stream:
            runner = Runner(job, asyncio.get_running_loop(), self).start()

            async def events():
                try:
                    try:
                        async for event in runner:
                            if event.partial or event.progress is not None:
                                yield native.sse(native.partial_json(event, job, n_prompt, req.timings_per_token))
                    except Exception as e:  # noqa: BLE001
                        yield native.sse({"error": stream_error(e)})
                        return
                    yield native.sse(self._native_json(job, job.result, model, False))
                finally:
                    job.cancel()

            return StreamingResponse(events(), media_type="text/event-stream")
        return await self._answer(request, job, lambda result: self._native_json(job, result, model, req.return_tokens))

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

    async def anthropic_count_tokens(self, request):
        return await self._count_tokens(request, anthropic.read_count_tokens, False)
