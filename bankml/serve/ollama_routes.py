"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

The Ollama routes of ``bankml serve``: ``/api/chat`` and ``/api/generate`` (NDJSON streams), ``/api/tags``,
``/api/version``; the bodies are read by ``bankml.serve.ollama``.
"""

import asyncio
import time

from starlette.responses import JSONResponse, Response, StreamingResponse

from bankml.chat.chat_peg import ChatParseError
from bankml.schema import jsondepth as _jsondepth
from bankml.serve import ollama
from bankml.serve.plumbing import Runner, file_size, ndjson, now, ollama_error, stream_error
from bankml.serve.runtime import ModelError

__all__ = ["OllamaRoutes", "ollama_tool_calls"]


class OllamaRoutes:
    """The Ollama routes, a part of the server's application object (``bankml.serve.app``)."""

    async def ollama_chat(self, request):
        return await self._handle(request, ollama.read_chat, self._respond_ollama, ollama_shape=True)

    async def ollama_generate(self, request):
        return await self._handle(request, ollama.read_generate, self._respond_ollama, ollama_shape=True)

    async def _respond_ollama(self, request, req, job):
        chat = req.endpoint == ollama.CHAT
        name = req.model or self.alias
        runner = Runner(job, asyncio.get_running_loop(), self).start()
        started = time.perf_counter_ns()
        if req.stream:
            return StreamingResponse(
                self._ollama_lines(runner, job, name, chat, started), media_type="application/x-ndjson"
            )
        try:
            result = await runner.wait(request)
        except ModelError as e:
            return ollama_error(str(e), 503)
        except ChatParseError as e:
            return ollama_error(str(e), 500)
        except Exception as e:  # noqa: BLE001
            return ollama_error(f"{type(e).__name__}: {e}", 500)
        if result.finish_reason == "cancelled":
            return Response(status_code=499)
        out = _final(result, name, chat, started)
        out.update(_piece(chat, result.content, result.message.get("reasoning_content", "")))
        calls = ollama_tool_calls(result.message) if chat else []
        if calls:
            out["message"]["tool_calls"] = calls
        return JSONResponse(out)

    async def _ollama_lines(self, runner, job, name, chat, started):
        """The NDJSON stream: a line per piece of content or thinking, the tool calls, the final line."""
        try:
            try:
                async for event in runner:
                    if event.content or event.reasoning:
                        piece = _piece(chat, event.content, event.reasoning)
                        yield ndjson({"model": name, "created_at": now(), **piece, "done": False})
            except Exception as e:  # noqa: BLE001 - Ollama streams an error line
                yield ndjson({"error": stream_error(e)["message"]})
                return
            calls = ollama_tool_calls(job.result.message) if chat else []
            if calls:  # Ollama sends the parsed calls in a message of their own, before the last line
                message = {"role": "assistant", "content": "", "tool_calls": calls}
                yield ndjson({"model": name, "created_at": now(), "message": message, "done": False})
            yield ndjson(_final(job.result, name, chat, started))
        finally:
            job.cancel()

    async def ollama_tags(self, request):
        m = self.model
        return JSONResponse(
            {
                "models": [
                    {
                        "name": self.alias,
                        "model": self.alias,
                        "modified_at": now(),
                        "size": file_size(m.path),
                        "digest": "",
                        "details": {"format": "gguf"},
                    }
                ]
            }
        )

    async def ollama_version(self, request):
        return JSONResponse({"version": "0.6.0"})


def _piece(chat, text, thinking=""):
    """A piece of the answer: Ollama puts the reasoning in message.thinking (/api/chat) or thinking (/api/generate)."""
    if chat:
        msg = {"role": "assistant", "content": text}
        if thinking:
            msg["thinking"] = thinking
        return {"message": msg}
    return dict({"response": text}, **({"thinking": thinking} if thinking else {}))


def _final(result, name, chat, started):
    """The last line of an answer (its timings; Ollama's done_reason for an answer ending with tool calls is
    "stop")."""
    t = result.timings
    return {
        "model": name,
        "created_at": now(),
        **_piece(chat, ""),
        "done": True,
        "done_reason": "stop" if result.finish_reason == "tool_calls" else result.finish_reason,
        "total_duration": time.perf_counter_ns() - started,
        "load_duration": 0,
        "prompt_eval_count": t["prompt_n"],
        "prompt_eval_duration": int(t["prompt_ms"] * 1e6),
        "eval_count": t["predicted_n"],
        "eval_duration": int(t["predicted_ms"] * 1e6),
    }


def ollama_tool_calls(message):
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
