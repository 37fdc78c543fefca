"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

The OpenAI routes of ``bankml serve``: ``/v1/chat/completions`` (its answer and its stream of
llama-server's deltas), ``/v1/completions``, ``/v1/chat/completions/input_tokens``, ``/v1/models`` and
``/health``; the bodies are read by ``bankml.serve.openai``, the frame is ``bankml.serve.plumbing``'s.
"""

import time
import uuid

from starlette.responses import JSONResponse, Response, StreamingResponse

from bankml.serve import native, openai
from bankml.serve.plumbing import FINGERPRINT, Gone, error, jobs_of, merge_choices, merged, refusal, sse, stream_error
from bankml.serve.request import read_body

__all__ = ["OpenAIRoutes", "diff_delta"]


class OpenAIRoutes:
    """The OpenAI routes, a part of the server's application object (``bankml.serve.app``)."""

    def render_prompt(self, body, raw, cancel):
        """The prompt a chat request renders to (llama-server's /apply-template): its messages, tools and chat
        fields through the chat layer, nothing generated."""
        return self.model.render(openai.read_template(body, raw, self._context()), cancel=cancel)

    async def chat_completions(self, request):
        return await self._handle(request, openai.read_chat, self._respond_chat)

    def _answer_base(self, prefix, req, job):
        """The fields every chunk of an OpenAI answer carries, and the answer's jobs, each named by the answer's id
        (what /v1/chat/completions/control names a completion by)."""
        base = {
            "created": int(time.time()),
            "id": prefix + uuid.uuid4().hex,
            "model": self.alias,
            "system_fingerprint": FINGERPRINT,
        }
        jobs = jobs_of(job)
        for j in jobs:
            j.cmpl_id = base["id"]
        return base, jobs

    async def _respond_chat(self, request, req, job):
        base, jobs = self._answer_base("chatcmpl-", req, job)
        if req.stream:
            events = self._chat_events(self._start_runners(job), jobs, base, req)
            return StreamingResponse(events, media_type="text/event-stream")

        def write(result, index=0):
            j = jobs[index]
            choice = {"finish_reason": result.finish_reason, "index": index, "message": dict(result.message)}
            out = dict(base, object="chat.completion", choices=[choice], usage=self._usage(result))
            if req.verbose:  # before the timings, as llama-server writes them
                out["__verbose"] = self._native_json(j, result, base["model"], req.return_tokens)
            out["timings"] = self._timings(result)
            if j.probs:
                logprobs = self._final_probs(j, result)
                if logprobs is not None:
                    choice["logprobs"] = logprobs
            if req.return_tokens:
                out["tokens"] = result.tokens
            return out

        return await self._answer(request, job, write, merge_choices)

    def _chat_chunks(self, job, event, base, role_pending, req, index=0):
        """The chunks of one generation event: the role delta with the first token's (none when that token's text
        is not whole UTF-8: to_json_oaicompat_chat's n_decoded == 1) and with a prompt-progress event, one chunk
        per message diff (as server_chat_msg_diff_to_json_oaicompat), and a token's logprobs, its timings
        (timings_per_token) and a progress event's ``prompt_progress`` on the last delta of its partial result.
        ``index``: the completion's (``n``)."""
        chunks = []
        progress = event.progress is not None
        if progress or (role_pending and event.partial and event.index == 1):  # llama-server's `first || is_progress`
            role = {"role": "assistant", "content": None}
            choice = {"finish_reason": None, "index": index, "delta": role}
            chunks.append(dict(base, object="chat.completion.chunk", choices=[choice]))
        n_partial = len(chunks)
        for i, diff in enumerate(event.diffs):
            delta = diff_delta(diff)
            if delta:
                choice = {"finish_reason": None, "index": index, "delta": delta}
                chunks.append(dict(base, object="chat.completion.chunk", choices=[choice]))
                if i < event.n_partial_diffs:
                    n_partial = len(chunks)
        if n_partial and (event.partial or progress):
            last = chunks[n_partial - 1]
            logprobs = self._chunk_probs(job, event) if event.partial else None
            if logprobs is not None:
                last["choices"] = [dict(last["choices"][0], logprobs=logprobs)]
            if req.timings_per_token:
                last["timings"] = native.partial_timings(job, event)
            if progress:
                last["prompt_progress"] = native.progress_json(event, len(job.prompt_tokens))
        return chunks

    def _chat_final(self, job, base, req, index):
        """The last chunks of one completion: its finish reason (with llama-server's ``__verbose``), its usage."""
        result = job.result
        choice = {"finish_reason": result.finish_reason, "index": index, "delta": {}}
        last = dict(base, object="chat.completion.chunk", choices=[choice])
        if req.verbose:
            last["__verbose"] = self._native_json(job, result, base["model"], False)
        if not req.include_usage:
            return [dict(last, timings=self._timings(result), usage=self._usage(result))]
        # the timings on the last chunk, the usage chunk, as llama-server's (its test suite reads them there)
        usage = dict(base, object="chat.completion.chunk", choices=[], usage=self._usage(result))
        return [last, dict(usage, timings=self._timings(result))]

    async def _chat_events(self, runners, jobs, base, req):
        """The SSE stream of a chat completion (of each of its ``n`` completions, their chunks as they come), as
        llama-server's partial results and each one's final chunks."""
        try:
            role_pending = [True] * len(jobs)
            try:
                async for i, event in merged(runners):
                    chunks = self._chat_chunks(jobs[i], event, base, role_pending[i], req, i) if event else []
                    chunks += self._chat_final(jobs[i], base, req, i) if event is None else []
                    for chunk in chunks:
                        yield sse(chunk)
                    role_pending[i] = role_pending[i] and not (event is not None and event.partial)
            except Exception as e:  # noqa: BLE001 - llama-server sends the error as an event
                yield sse({"error": stream_error(e)})
                return
            yield b"data: [DONE]\n\n"
        finally:
            for job in jobs:
                job.cancel()  # a no-op once finished; frees the slot if the client went away

    async def completions(self, request):
        return await self._handle(request, openai.read_completion, self._respond_completion)

    async def control(self, request):
        """llama-server's ``/v1/chat/completions/control``: ``{"id": <a completion's id>, "action": "reasoning_end"}``
        ends a running completion's reasoning when it was started with ``reasoning_control``. bankml refuses
        ``reasoning_control`` (400), so a running completion answers that reasoning control is not enabled for it,
        as llama-server answers for one started without it."""
        try:
            body = read_body(await self._read(request))
        except Gone:
            return Response(status_code=499)
        except Exception as e:  # noqa: BLE001 - llama-server's error object
            return refusal(e).response()
        cmpl_id = body.get("id")
        if not isinstance(cmpl_id, str) or not cmpl_id:  # json_value: a value of another type reads as absent
            return error("missing completion id")
        if body.get("action") != "reasoning_end":
            return error("unknown control action")
        if self.running(cmpl_id) is None:
            return JSONResponse({"success": False, "message": "no active completion for this id"})
        return JSONResponse({"success": False, "message": "reasoning control not enabled for this completion"})

    async def chat_input_tokens(self, request):
        return await self._count_tokens(request, openai.read_chat, True)

    async def _respond_completion(self, request, req, job):
        base, jobs = self._answer_base("cmpl-", req, job)
        if req.stream:
            events = self._completion_events(self._start_runners(job), jobs, base, req)
            return StreamingResponse(events, media_type="text/event-stream")

        def write(result, index=0):
            j = jobs[index]
            choice = {
                "text": result.text,
                "index": index,
                "logprobs": self._final_probs(j, result) if j.probs else None,
                "finish_reason": result.finish_reason,
            }
            out = dict(base, object="text_completion", choices=[choice], usage=self._usage(result))
            if req.verbose:  # before the timings, as llama-server writes them
                out["__verbose"] = self._native_json(j, result, base["model"], req.return_tokens)
            out["timings"] = self._timings(result)
            if req.return_tokens:
                out["tokens"] = result.tokens
            return out

        return await self._answer(request, job, write, merge_choices)

    def _completion_chunk(self, job, event, base, req, index):
        """The chunk of one partial result (with timings_per_token its timings, with verbose its native result)."""
        n_prompt = len(job.prompt_tokens)
        logprobs = self._chunk_probs(job, event) if event.partial else None
        choice = {"text": event.text, "index": index, "logprobs": logprobs, "finish_reason": None}
        chunk = dict(base, object="text_completion", choices=[choice])
        if req.verbose:
            chunk["__verbose"] = native.partial_json(event, job, n_prompt, req.timings_per_token, index)
        if req.timings_per_token:
            chunk["timings"] = native.partial_timings(job, event)
        if event.progress is not None:
            chunk["prompt_progress"] = native.progress_json(event, n_prompt)
        return chunk

    async def _completion_events(self, runners, jobs, base, req):
        """The SSE stream of a completion: one chunk per partial result, empty text included, as llama-server
        sends them, and each completion's last chunk."""
        try:
            try:
                async for i, event in merged(runners):
                    if event is not None and (event.partial or event.progress is not None):
                        yield sse(self._completion_chunk(jobs[i], event, base, req, i))
                    elif event is None:
                        result = jobs[i].result
                        choice = {"text": "", "index": i, "logprobs": None, "finish_reason": result.finish_reason}
                        last = dict(base, object="text_completion", choices=[choice], usage=self._usage(result))
                        if req.verbose:
                            last["__verbose"] = self._native_json(jobs[i], result, base["model"], False)
                        yield sse(last)
            except Exception as e:  # noqa: BLE001
                yield sse({"error": stream_error(e)})
                return
            yield b"data: [DONE]\n\n"
        finally:
            for job in jobs:
                job.cancel()

    async def models(self, request):
        # get_res_models: an Ollama-style "models" list beside OpenAI's "data", the model named as in answers
        name = self.alias
        details = {"parent_model": "", "format": "gguf", "family": "", "families": [""]}
        details.update(parameter_size="", quantization_level="")
        ollama_entry = {"name": name, "model": name, "modified_at": "", "size": "", "digest": "", "type": "model"}
        ollama_entry.update(description="", tags=[""], capabilities=["completion"], parameters="", details=details)
        info = {"id": name, "aliases": self.aliases, "tags": self.tags, "object": "model"}
        info.update(created=int(time.time()), owned_by="llamacpp", meta=self.meta)
        return JSONResponse({"models": [ollama_entry], "object": "list", "data": [info]})

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
