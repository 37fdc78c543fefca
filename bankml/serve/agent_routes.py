"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

The agent APIs and llama-server's native completion in ``bankml serve``: ``/v1/messages`` and
``/v1/messages/count_tokens`` (Anthropic), ``/v1/responses`` and ``/v1/responses/input_tokens`` (OpenAI's
Responses), ``/completion``. Each body is converted and read by its module (``bankml.serve.anthropic``,
``.responses``, ``.native``), generated once, and written by that module's answer and stream writers.
"""

import uuid

from starlette.responses import StreamingResponse

from bankml.serve import anthropic, native, responses
from bankml.serve.plumbing import jobs_of, merged, stream_error

__all__ = ["AgentRoutes"]


class AgentRoutes:
    """The agent API routes, a part of the server's application object (``bankml.serve.app``)."""

    async def anthropic_messages(self, request):
        return await self._handle(request, anthropic.read_messages, self._respond_anthropic)

    async def _respond_anthropic(self, request, req, job):
        message_id = "chatcmpl-" + uuid.uuid4().hex  # llama-server's oaicompat_cmpl_id
        job.cmpl_id = message_id
        model = self.alias
        if req.stream:
            writer = anthropic.StreamWriter(message_id, model, len(job.prompt_tokens), lambda: job.n_cached)
            return self._stream_events(request, job, writer, anthropic.sse)
        return await self._answer(request, job, lambda result: anthropic.message_json(result, message_id, model))

    async def native_completion(self, request):
        return await self._handle(request, native.read_native, self._respond_native)

    async def _respond_native(self, request, req, job):
        model = self.alias
        jobs = jobs_of(job)
        if req.stream:
            return StreamingResponse(self._native_events(jobs, model, req), media_type="text/event-stream")

        def write(result, index=0):
            return self._native_json(jobs[index], result, model, req.return_tokens, index)

        return await self._answer(request, job, write, list)  # several completions: llama-server's array

    async def _native_events(self, jobs, model, req):
        """The native stream: each partial result (a prompt-progress one included), each completion's final one."""
        try:
            try:
                async for i, event in merged(self._start_runners(jobs[0])):
                    j = jobs[i]
                    if event is None:
                        yield native.sse(self._native_json(j, j.result, model, False, i))
                    elif event.partial or event.progress is not None:
                        n_prompt = len(j.prompt_tokens)
                        yield native.sse(native.partial_json(event, j, n_prompt, req.timings_per_token, i))
            except Exception as e:  # noqa: BLE001
                yield native.sse({"error": stream_error(e)})
        finally:
            for j in jobs:
                j.cancel()

    async def responses(self, request):
        return await self._handle(request, responses.read_responses, self._respond_responses)

    async def _respond_responses(self, request, req, job):
        response_id = "resp_" + uuid.uuid4().hex
        model = self.alias
        if req.stream:
            writer = responses.StreamWriter(response_id, model, self._timings)
            return self._stream_events(request, job, writer, responses.sse, _telemetry(req))
        return await self._answer(request, job, lambda result: responses.response_json(result, response_id, model))

    async def responses_input_tokens(self, request):
        return await self._count_tokens(request, responses.read_input_tokens, True)

    async def anthropic_count_tokens(self, request):
        return await self._count_tokens(request, anthropic.read_count_tokens, False)


def _telemetry(req):
    """The extras of a Responses stream's partial results (``Plumbing._stream_events``): a prompt-progress
    result's ``prompt_progress`` (``return_progress``) and, with ``timings_per_token``, each result's timings."""

    def extras(job, event):
        out = {}
        if event.progress is not None:
            out["progress"] = native.progress_json(event, len(job.prompt_tokens))
        if req.timings_per_token:
            out["timings"] = native.partial_timings(job, event)
        return out

    return extras
