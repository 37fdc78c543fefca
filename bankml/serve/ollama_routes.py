"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

The Ollama routes of ``bankml serve``: ``/api/chat`` and ``/api/generate`` (NDJSON streams), ``/api/tags``,
``/api/version``; the bodies are read by ``bankml.serve.ollama``.
"""

import asyncio
import ctypes
import time

from starlette.responses import JSONResponse, Response, StreamingResponse

from bankml.chat.chat_peg import ChatParseError
from bankml.errors import RequestError, json_type_name
from bankml.schema import jsondepth as _jsondepth
from bankml.serve import ollama
from bankml.serve.contexts import POOLING, ModelError
from bankml.serve.endpoints import model_ftype
from bankml.serve.plumbing import Gone, Runner, file_size, ndjson, now, ollama_error, refusal, stream_error
from bankml.serve.request import read_body

__all__ = ["OllamaRoutes", "ollama_tool_calls"]


class OllamaRoutes:
    """The Ollama routes, a part of the server's application object (``bankml.serve.app``)."""

    async def ollama_chat(self, request):
        return await self._handle(request, self._read_ollama_chat, self._respond_ollama, ollama_shape=True)

    def _read_ollama_chat(self, raw, context=None):
        req = ollama.read_chat(raw, context)
        if req.chat is not None and req.chat.tools and not self.model.renders_tools():
            # Ollama's capability check (server/routes.go): tools for a model whose template renders none
            raise RequestError(f"{req.model or self.alias} does not support tools")
        return req

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

    async def ollama_show(self, request):
        """Ollama's ``POST /api/show``: the served model's details, metadata, template and capabilities (bankml
        serves one model: any name is it, as ``/api/chat`` answers any name)."""
        try:
            body = read_body(await self._read(request))
        except Gone:
            return Response(status_code=499)
        except Exception as e:  # noqa: BLE001 - Ollama's error object
            return ollama_error(refusal(e).message)
        name = body.get("model") or body.get("name")
        if name is not None and not isinstance(name, str):  # Ollama: json: cannot unmarshal ... of type string
            key = "model" if body.get("model") else "name"
            return ollama_error(f"Field '{key}': must be a string, but is {json_type_name(name)}")
        if not name:
            return ollama_error("model is required")
        m = self.model
        template = m.chat_template or ""
        return JSONResponse(
            {
                "modelfile": f"# Modelfile of {self.alias}, served by bankml\nFROM {m.path}\n",
                "parameters": "",
                "template": template,
                "details": _details(m),
                "model_info": _model_info(m),
                "capabilities": _capabilities(m),
                "modified_at": now(),
            }
        )

    async def ollama_ps(self, request):
        """Ollama's ``GET /api/ps``: the loaded model, which bankml keeps loaded until it stops (with
        ``--sleep-idle-seconds``, this request wakes a sleeping model: bankml.serve.sleep)."""
        m = self.model
        entry = {
            "name": self.alias,
            "model": self.alias,
            "size": file_size(m.path),
            "digest": "",
            "details": _details(m),
            "expires_at": _NEVER,
            "size_vram": 0,
            "context_length": m.n_ctx,
        }
        return JSONResponse({"models": [entry]})


# no expiry is known (bankml unloads the model only after --sleep-idle-seconds of idleness): past any date a
# client compares
_NEVER = "9999-12-31T23:59:59Z"


def _details(model):
    """Ollama's ``details`` of a model: its architecture as family, its parameter count and quantization."""
    arch = _meta(model).get("general.architecture", "")
    return {
        "parent_model": "",
        "format": "gguf",
        "family": arch,
        "families": [arch] if arch else None,
        "parameter_size": _human_number(int(model._L.llama_model_n_params(model._model))),
        "quantization_level": model_ftype(model),
    }


def _human_number(n):
    # Ollama's format.HumanNumber: 134515008 -> "134.52M"
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            value = n / size
            text = f"{value:.0f}" if value == int(value) else f"{value:.2f}".rstrip("0").rstrip(".")
            return text + unit
    return str(n)


def _meta(model):
    """The model's GGUF metadata as libllama read it (llama_model_meta_*): key -> value text; arrays are left out."""
    cached = getattr(model, "_ollama_meta", None)
    if cached is not None:
        return cached
    L, out = model._L, {}
    buf = ctypes.create_string_buffer(4096)
    for i in range(int(L.llama_model_meta_count(model._model))):
        if L.llama_model_meta_key_by_index(model._model, i, buf, len(buf)) < 0:
            continue
        key = buf.value.decode("utf-8", "replace")
        n = L.llama_model_meta_val_str_by_index(model._model, i, buf, len(buf))
        if n < 0 or n >= len(buf) or key.startswith("tokenizer.ggml."):
            continue  # a value longer than the buffer is an array's or a template's: not in model_info
        out[key] = buf.value.decode("utf-8", "replace")
    model._ollama_meta = out
    return out


def _model_info(model):
    """Ollama's ``model_info``: the metadata, numbers as numbers, and ``general.parameter_count``."""
    info = {}
    for key, text in _meta(model).items():
        if key == "tokenizer.chat_template":
            continue
        for kind in (int, float):
            try:
                info[key] = kind(text)
                break
            except ValueError:
                pass
        else:
            info[key] = text
    info["general.parameter_count"] = int(model._L.llama_model_n_params(model._model))
    return dict(sorted(info.items()))


def _capabilities(model):
    """Ollama's capabilities: completion; embedding where /api/embed answers (``--embedding`` with a pooling of one
    vector per input); tools and thinking where the template supports them."""
    out = ["completion"]
    if getattr(model, "embedding", False) and model.pooling_type not in (POOLING.index("none"), POOLING.index("rank")):
        out.append("embedding")
    if model.chat_template and model.renders_tools():
        out.append("tools")
    if model.chat_template and model.supports_thinking():
        out.append("thinking")
    return out


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
        # Ollama's documented meaning, the prompt's tokens: those evaluated and those the slot's cache held
        "prompt_eval_count": t["prompt_n"] + t.get("cache_n", 0),
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
