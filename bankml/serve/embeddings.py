# Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.
"""llama-server's embeddings and reranking for ``bankml serve`` (``--embedding``, ``--pooling``, ``--reranking``,
``--embd-normalize``), computed by libllama (llama-cpp-python) on the model's slots.

Ports the semantics of ``tools/server/server-context.cpp``'s ``handle_embeddings_impl``, ``post_rerank``,
``send_embedding`` and ``send_rerank`` (and its slot's size checks, ``can_split``), ``server-common.cpp``'s
``tokenize_input_subprompt``, ``tokenize_oai_content_array``, ``format_prompt_rerank``,
``format_embeddings_response_oaicompat`` and ``format_response_rerank``, ``server-task.cpp``'s embedding and
rerank results, and ``common/common.cpp``'s ``common_embd_normalize``.

* ``POST /embedding``, ``/embeddings``: llama-server's native answer, ``[{"index", "embedding": [[...]]}]`` (one
  vector per input with pooling, one per token with ``--pooling none``, never normalized then);
  ``POST /v1/embeddings``: the OpenAI answer (``data``, ``usage``, ``encoding_format`` ``base64``: the float32
  bytes), refused with ``--pooling none``; a body with ``content`` instead of ``input`` gets the native answer.
  An input is a string, an array of token ids, an array of strings and token ids, ``{"prompt_string": ...}`` or
  ``{"content": [{"type": "text", "text": ...}]}``; an array of those is several inputs.
* ``POST /rerank``, ``/reranking``, ``/v1/rerank``, ``/v1/reranking`` (with ``--reranking``, or ``--embedding
  --pooling rank``): ``query``, ``documents`` (Jina's answer: ``results`` sorted by ``relevance_score``) or
  ``texts`` (TEI's: a list sorted by ``score``, ``return_text``), ``top_n``.

The context is made as llama-server makes it (``embeddings`` on, the pooling of ``--pooling`` or the model's);
each input is evaluated from an empty cache on a slot (embeddings on for that decode only: completions still
run, as llama-server serves them with ``--embedding``), its pooled vector read with ``llama_get_embeddings_seq``
(every token's with ``llama_get_embeddings_ith`` for pooling none), normalized by ``--embd-normalize`` or the
request's ``embd_normalize``. Where llama-server answers a 500 for a field of the wrong type (nlohmann's
``type_error``), bankml answers a 400 naming the field; messages llama-server gives for an input name the input.
"""

import asyncio
import base64
import math
import threading
import time

import numpy as np
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from bankml.errors import json_type_name
from bankml.serve.contexts import POOLING, ModelError
from bankml.serve.fields import EMBEDDINGS, OLLAMA_EMBED, OLLAMA_EMBEDDINGS, RERANK, known_only
from bankml.serve.job import ContextSizeError, check_cancel
from bankml.serve.plumbing import Gone, Refusal, disconnected, ollama_error, refusal
from bankml.serve.request import read_body

__all__ = ["EmbeddingRoutes", "embd_normalize", "ollama_inputs", "ollama_normalize", "rerank_tokens"]

NONE, LAST, RANK = (POOLING.index(name) for name in ("none", "last", "rank"))
_ELEMENTS = (
    '"prompt" elements must be a string, a list of tokens, a JSON object containing a prompt string, or a list of '
    "mixed strings & tokens."
)
_MEDIA = {
    "image_url": "image",
    "input_audio": "audio",
    "input_video": "video",
    "video_url": "video",
}


def embd_normalize(vec, norm):
    """``common_embd_normalize``: -1 none, 0 max absolute scaled to int16's range, 2 euclidean, any other p the
    p-norm; sums in double as llama.cpp sums (in order), the scale a float."""
    v = np.asarray(vec, dtype=np.float32)
    if norm == -1:
        total = 1.0
    elif norm == 0:
        total = float(np.max(np.abs(v))) / 32760.0 if v.size else 0.0
    elif norm == 2:
        squares = (v * v).astype(np.float64)  # float products, added in double
        total = math.sqrt(float(np.cumsum(squares)[-1])) if v.size else 0.0
    else:
        powers = np.abs(v).astype(np.float64) ** norm
        total = float(np.cumsum(powers)[-1]) ** (1.0 / norm) if v.size else 0.0
    scale = np.float32(1.0 / total) if total > 0.0 else np.float32(0.0)
    return v * scale


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _mixed(value):
    """json_is_array_of_mixed_numbers_strings: an array with at least one string and one integer."""
    return isinstance(value, list) and any(isinstance(v, str) for v in value) and any(_is_int(v) for v in value)


def _numbers(value):
    """json_is_array_of_numbers: an array of integers only (an empty array is one)."""
    return isinstance(value, list) and all(_is_int(v) for v in value)


def _tokenize_mixed(model, items, where):
    """llama-server's tokenize_mixed: a string first gets the vocabulary's special tokens, later ones none."""
    if isinstance(items, str):
        return model.tokenize_prompt(items)
    out = []
    for i, item in enumerate(items):
        if isinstance(item, str):
            out += model.tokenize_prompt(item) if i == 0 else model.tokenize(item, False, True)
        elif _is_int(item):
            out.append(item)
        else:
            raise Refusal(
                f"Field '{where}[{i}]': [json.exception.type_error.302] type must be number, but is "
                f"{json_type_name(item)}"
            )
    return out


def _content_tokens(model, content, where):
    """tokenize_oai_content_array without media: the text parts joined, tokenized with special tokens."""
    if not isinstance(content, list):
        raise Refusal('"content" must be an array')
    text = ""
    for part in content:
        kind = part.get("type", "") if isinstance(part, dict) else ""
        if kind in _MEDIA:
            raise Refusal(
                f"{_MEDIA[kind]} input is not supported - hint: if this is unexpected, you may need to provide the "
                "mmproj",
                500,
                "server_error",
            )
        if kind != "text":
            raise Refusal("unsupported content[].type")
        value = part.get("text", "")
        text += value if isinstance(value, str) else ""
    return model.tokenize_prompt(text)


def input_tokens(model, prompt, where):
    """The tokens of one input (tokenize_input_subprompt, or tokenize_oai_content_array for ``{"content"}``)."""
    if isinstance(prompt, dict) and "content" in prompt:
        return _content_tokens(model, prompt["content"], where + ".content")
    if isinstance(prompt, str) or _mixed(prompt):
        return _tokenize_mixed(model, prompt, where)
    if _numbers(prompt):
        return list(prompt)
    if isinstance(prompt, dict) and "prompt_string" in prompt:
        if "multimodal_data" in prompt:
            raise Refusal(
                "Multimodal data provided, but model does not support multimodal requests.", 500, "server_error"
            )
        text = prompt["prompt_string"]
        if not isinstance(text, (str, list)):
            raise Refusal(
                f"Field '{where}.prompt_string': [json.exception.type_error.302] type must be string, but is "
                f"{json_type_name(text)}"
            )
        return _tokenize_mixed(model, text, where + ".prompt_string")
    raise Refusal(f"Field '{where}': {_ELEMENTS}", 500, "server_error")


def inputs_tokens(model, prompt, key, cancel=None):
    """Every input's tokens: an array that holds no integer is several inputs, anything else one (``cancel`` set:
    stopped between inputs)."""
    if isinstance(prompt, list) and not any(_is_int(v) for v in prompt):
        out = []
        for i, p in enumerate(prompt):
            check_cancel(cancel)
            out.append(input_tokens(model, p, f"{key}[{i}]"))
    else:
        out = [input_tokens(model, prompt, key)]
    if not out:
        raise Refusal(f'"{key}" must not be empty')
    if any(not tokens for tokens in out):
        raise Refusal("Input content cannot be empty")  # for models that add no BOS token
    return out


def check_size(model, tokens):
    """llama-server's checks of a prompt on its slot: valid token ids; within the slot's context; within one
    physical batch where the pooling needs every token in one (all but last, and a causal model's rank)."""
    if any(not 0 <= t < model.n_vocab for t in tokens):
        raise Refusal("Prompt contains invalid tokens")
    n, n_ctx = len(tokens), model.n_ctx_slot
    if can_split(model):
        if n >= n_ctx:
            raise ContextSizeError(
                f"request ({n} tokens) exceeds the available context size ({n_ctx} tokens), try increasing it",
                n,
                n_ctx,
            )
        return
    if n > model.n_ubatch:
        raise Refusal(
            f"input ({n} tokens) is too large to process. increase the physical batch size (current batch size: "
            f"{model.n_ubatch})",
            500,
            "server_error",
        )
    if n > n_ctx:
        raise ContextSizeError(
            f"input ({n} tokens) is larger than the max context size ({n_ctx} tokens). skipping", n, n_ctx
        )


def max_input_tokens(model):
    """The most tokens ``check_size`` lets an input have on a slot (Ollama's truncation cuts to it)."""
    return model.n_ctx_slot - 1 if can_split(model) else min(model.n_ubatch, model.n_ctx_slot)


def can_split(model):
    """server_slot::can_split for an embedding: the pooling reads the last token only (last, or rank of a causal
    model), so the prompt may span several batches."""
    return model.pooling_type == LAST or (model.pooling_type == RANK and model.causal_attn)


def rerank_tokens(model, query, document):
    """format_prompt_rerank: the model's ``rerank`` template with ``{query}`` and ``{document}`` replaced (special
    tokens parsed, none added), else [BOS] query [EOS] [SEP] document [EOS] as the vocabulary adds them."""
    L, vocab = model._L, model._lvocab
    template = L.llama_model_chat_template(model._model, b"rerank")
    if template:
        text = template.decode("utf-8").replace("{query}", query).replace("{document}", document)
        return model.tokenize(text, False, True)
    eos = L.llama_vocab_eos(vocab)
    if eos == -1:
        eos = L.llama_vocab_sep(vocab)
    out = [L.llama_vocab_bos(vocab)] if L.llama_vocab_get_add_bos(vocab) else []
    out += model.tokenize(query, False, False)
    out += [eos] if L.llama_vocab_get_add_eos(vocab) else []
    out += [L.llama_vocab_sep(vocab)] if L.llama_vocab_get_add_sep(vocab) else []
    out += model.tokenize(document, False, False)
    out += [eos] if L.llama_vocab_get_add_eos(vocab) else []
    return out


def evaluate(model, prompts, cancel, deadline, limit):
    """Each prompt evaluated on a free slot (the most alike, as a completion's): its vectors (None where libllama
    gave none); Gone once ``cancel`` is set; a 503 past ``deadline`` (``--request-timeout``, ``limit`` seconds)."""
    out = []
    for tokens in prompts:
        left = deadline - time.monotonic()
        if left <= 0:
            raise Refusal(
                f"the request took longer than the server's limit of {limit:g} s (--request-timeout)",
                503,
                "unavailable_error",
            )
        try:
            slot = model.acquire(left, cancel, tokens)
        except ModelError:
            raise Refusal("no free slot within the request's time budget", 503, "unavailable_error") from None
        if slot is None:
            raise Gone()
        try:
            out.append(slot.embed(tokens))
        finally:
            model.release(slot)
    return out


class _Work:
    """An embedding request's evaluation, as the app's bookkeeping sees a generation (cancelled at shutdown)."""

    def __init__(self):
        self.job = self
        self.result = None
        self.event = threading.Event()

    def cancel(self):
        self.event.set()


def _field_int(body, name, default):
    """An integer field read as nlohmann's get<int> reads it (a number, truncated); a 400 naming it otherwise."""
    value = body.get(name)
    if name not in body:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not abs(value) < 2**31:
        raise Refusal(
            f"Field '{name}': [json.exception.type_error.302] type must be number, but is {json_type_name(value)}"
            if not isinstance(value, (int, float)) or isinstance(value, bool)
            else f"Field '{name}': {value} is out of range"
        )
    return int(value)


def _native(index, vectors, norm, pooled):
    """server_task_result_embd's native answer: the pooled vector normalized (in a list), or every token's."""
    n = 0
    out = []
    for vec in vectors:
        if vec is None:  # llama-server logs the failure and answers zeros
            vec = np.zeros(n, dtype=np.float32)
        n = len(vec)
        out.append((embd_normalize(vec, norm) if pooled else vec).astype(np.float64).tolist())
        if pooled:
            break
    return {"index": index, "embedding": out}


def oai_embeddings(model_name, results, n_tokens, use_base64):
    """format_embeddings_response_oaicompat: ``data`` (each input's vector, or its float32 bytes in base64),
    ``usage`` (the inputs' tokens)."""
    data = []
    for i, result in enumerate(results):
        vec = result["embedding"][0]
        if use_base64:
            raw = np.asarray(vec, dtype="<f4").tobytes()
            item = {"embedding": base64.b64encode(raw).decode("ascii"), "index": i, "object": "embedding"}
            item["encoding_format"] = "base64"
        else:
            item = {"embedding": vec, "index": i, "object": "embedding"}
        data.append(item)
    return _list_answer(model_name, n_tokens, "data", data)


def _list_answer(model_name, n_tokens, key, items):
    """The list object of format_embeddings_response_oaicompat and format_response_rerank (Jina's): the model,
    the prompts' tokens as usage, the items under ``key``."""
    total = sum(n_tokens)
    return {"model": model_name, "object": "list", "usage": {"prompt_tokens": total, "total_tokens": total}, key: items}


def rerank_answer(body, model_name, scores, n_tokens, documents, tei):
    """format_response_rerank: the documents by score, highest first, ``top_n`` of them; TEI's list (``score``,
    ``text`` with ``return_text``) or Jina's object (``relevance_score``, ``usage``)."""
    label = "score" if tei else "relevance_score"
    return_text = tei and body.get("return_text") is True
    top_n = body.get("top_n")
    top_n = len(documents) if top_n is None or isinstance(top_n, (bool, str, list, dict)) else top_n
    if not 0 <= top_n < math.inf:  # llama-server: a negative top_n throws (std::length_error, a 500)
        raise Refusal(f"Field 'top_n': must be a number of results, 0 or more, not {top_n}")
    elements = []
    for i, score in enumerate(scores):
        elem = {"index": i, label: score}
        if return_text:
            elem["text"] = documents[i]
        elements.append(elem)
    elements.sort(key=lambda e: -e[label])
    results = elements[: int(top_n)]
    return results if tei else _list_answer(model_name, n_tokens, "results", results)


def _documents(body):
    """json_value(body, "documents", json_value(body, "texts", [])) as strings: a field of another type falls
    back, as llama-server's json_value falls back to its default."""
    for name in ("documents", "texts"):
        value = body.get(name)
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return value
    return []


class EmbeddingRoutes:
    """The embedding and rerank routes over a running app (``bankml.serve.app`` mounts them): llama-server's 501
    unless the model was loaded with embeddings (and rank pooling, for reranking)."""

    def __init__(self, app):
        self.app = app

    def routes(self):
        return [
            *(Route(p, self.embeddings, methods=["POST"]) for p in ("/embedding", "/embeddings")),
            Route("/v1/embeddings", self.embeddings_oai, methods=["POST"]),
            *(
                Route(p, self.rerank, methods=["POST"])
                for p in ("/rerank", "/reranking", "/v1/rerank", "/v1/reranking")
            ),
            Route("/api/embed", self.ollama_embed, methods=["POST"]),
            Route("/api/embeddings", self.ollama_embeddings, methods=["POST"]),
        ]

    async def embeddings(self, request):
        return await self._embeddings(request, oai=False)

    async def embeddings_oai(self, request):
        return await self._embeddings(request, oai=True)

    async def _embeddings(self, request, oai):
        model = self.app.model
        if not getattr(model, "embedding", False):
            return _not_supported("This server does not support embeddings. Start it with `--embeddings`")
        if oai and model.pooling_type == NONE:
            return Refusal("Pooling type 'none' is not OAI compatible. Please use a different pooling type").response()
        return await self._answer(request, lambda raw, cancel: self._embed_job(raw, oai, cancel))

    def _embed_job(self, raw, oai, cancel):
        """The embedding request's checks and prompts; the answer's maker for the vectors."""
        model = self.app.model
        body = known_only(read_body(raw), EMBEDDINGS, self.app.limits)
        if "input" in body:
            key = "input"
        elif "content" in body:
            key, oai = "content", False  # "content" is not OpenAI's: the native answer
        else:
            raise Refusal('"input" or "content" must be provided')
        use_base64 = False
        if "encoding_format" in body:
            fmt = body["encoding_format"]
            if not isinstance(fmt, str):
                raise Refusal(
                    "Field 'encoding_format': [json.exception.type_error.302] type must be string, but is "
                    + json_type_name(fmt)
                )
            if fmt not in ("float", "base64"):
                raise Refusal("The format to return the embeddings in. Can be either float or base64")
            use_base64 = fmt == "base64"
        prompts = inputs_tokens(model, body[key], key, cancel)
        norm = _field_int(body, "embd_normalize", model.embd_normalize)
        for tokens in prompts:
            check_size(model, tokens)
        pooled = model.pooling_type != NONE
        name = body.get("model") if isinstance(body.get("model"), str) else self.app.alias

        def answer(vectors):
            results = [_native(i, v, norm, pooled) for i, v in enumerate(vectors)]
            if oai:
                return oai_embeddings(name, results, [len(p) for p in prompts], use_base64)
            return results

        return prompts, answer

    async def rerank(self, request):
        model = self.app.model
        if not getattr(model, "embedding", False) or model.pooling_type != RANK:
            return _not_supported("This server does not support reranking. Start it with `--reranking`")
        return await self._answer(request, self._rerank_job)

    def _rerank_job(self, raw, cancel):
        model = self.app.model
        body = known_only(read_body(raw), RERANK, self.app.limits)
        tei = "texts" in body
        if "query" not in body:
            raise Refusal('"query" must be provided')
        query = body["query"]
        if not isinstance(query, str):
            raise Refusal('"query" must be a string')
        documents = _documents(body)
        if not documents:
            raise Refusal('"documents" must be a non-empty string array')
        prompts = []
        for doc in documents:
            check_cancel(cancel)
            prompts.append(rerank_tokens(model, query, doc))
        for tokens in prompts:
            if not tokens:  # llama-server aborts on an empty rerank prompt
                raise Refusal("Input content cannot be empty")
            check_size(model, tokens)
        name = body.get("model") if isinstance(body.get("model"), str) else self.app.alias
        rerank_answer(body, name, [0.0] * len(documents), [0] * len(documents), documents, tei)  # top_n checked

        def answer(vectors):
            scores = [float(v[0][0]) if v and v[0] is not None else -1e6 for v in vectors]
            return rerank_answer(body, name, scores, [len(p) for p in prompts], documents, tei)

        return prompts, answer

    async def ollama_embed(self, request):
        """Ollama's ``POST /api/embed``: each of ``input``'s texts' pooled embedding, normalized (Euclidean), cut to
        ``dimensions`` and normalized again; a text longer than a slot takes cut to what it takes, unless
        ``truncate`` is false."""
        return await self._ollama(request, self._ollama_embed_job)

    async def ollama_embeddings(self, request):
        """Ollama's ``POST /api/embeddings`` (its older route): ``prompt``'s pooled embedding as it comes."""
        return await self._ollama(request, self._ollama_embeddings_job)

    async def _ollama(self, request, prepare):
        model = self.app.model
        if not getattr(model, "embedding", False):
            return ollama_error("this model does not support embeddings", 501)
        if model.pooling_type in (NONE, RANK):
            reason = "none (one vector per token)" if model.pooling_type == NONE else "rank (one score)"
            return ollama_error(
                f"this model does not support embeddings: the server's pooling is {reason}, where Ollama's "
                "embeddings are one vector per input (--pooling mean, cls or last)",
                501,
            )
        return await self._answer(request, prepare, ollama=True)

    def _ollama_embed_job(self, raw, cancel):
        started = time.perf_counter_ns()
        body = known_only(read_body(raw), OLLAMA_EMBED, self.app.limits)
        name = body.get("model")
        if not isinstance(name, str) or not name:
            raise Refusal(f"model '{name if isinstance(name, str) else ''}' not found", 404, "not_found_error")
        texts = ollama_inputs(body.get("input"))
        truncate = _go_field(body, "truncate", bool, "EmbedRequest", True)
        dimensions = _go_field(body, "dimensions", int, "EmbedRequest", 0)
        prompts = [self._ollama_tokens(text, truncate, cancel) for text in texts]

        def answer(vectors):
            if not prompts:
                return {"model": name, "embeddings": []}
            embeddings = []
            for v in vectors:
                vec = ollama_normalize(v[0] if v and v[0] is not None else [])
                if 0 < dimensions < len(vec):
                    vec = ollama_normalize(vec[:dimensions])
                embeddings.append([float(x) for x in vec])
            total = time.perf_counter_ns() - started
            n = sum(len(p) for p in prompts)
            return {"model": name, "embeddings": embeddings, "total_duration": total, "prompt_eval_count": n}

        return prompts, answer

    def _ollama_embeddings_job(self, raw, cancel):
        body = known_only(read_body(raw), OLLAMA_EMBEDDINGS, self.app.limits)
        if not isinstance(body.get("model"), str) or not body["model"]:
            raise Refusal("model is required")
        prompt = _go_field(body, "prompt", str, "EmbeddingRequest", "")
        prompts = [self._ollama_tokens(prompt, False, cancel)] if prompt else []

        def answer(vectors):
            if not prompts:
                return {"embedding": []}
            v = vectors[0]
            return {"embedding": [float(x) for x in (v[0] if v and v[0] is not None else [])]}

        return prompts, answer

    def _ollama_tokens(self, text, truncate, cancel):
        """A text's tokens as an embedding input, cut to what a slot takes when ``truncate`` (Ollama's default)."""
        check_cancel(cancel)
        model = self.app.model
        tokens = model.tokenize_prompt(text)
        if not tokens:
            raise Refusal("Input content cannot be empty")
        if truncate:
            tokens = tokens[: max(max_input_tokens(model), 1)]
        check_size(model, tokens)
        return tokens

    async def _answer(self, request, prepare, ollama=False):
        """Read the body, check it and tokenize its prompts off the event loop (``prepare(raw, cancel)``: the prompts and
        the answer's maker), evaluate them on a worker thread (cancelled when the client goes away), answer."""
        app = self.app
        work = None
        try:
            if app.closing:
                raise Refusal("the server is shutting down", 503, "unavailable_error")
            raw = await app._read(request)
            prompts, answer = await app._prepare(request, lambda cancel: prepare(raw, cancel), len(raw))
            work = _Work()
            app._started(work)
            loop = asyncio.get_running_loop()
            limit = app.limits.request_seconds
            future = loop.run_in_executor(None, evaluate, app.model, prompts, work.event, app._deadline(), limit)
            try:
                while True:
                    done, _ = await asyncio.wait([future], timeout=0.25)
                    if done:
                        break
                    if await disconnected(request):
                        work.cancel()
            finally:
                if not future.done():
                    work.cancel()
                    await asyncio.wait([future])
                app._finished(work)
            return JSONResponse(answer(future.result()))
        except Gone:
            return Response(status_code=499)
        except Exception as e:  # noqa: BLE001 - answered with llama-server's (or Ollama's) error object
            r = refusal(e)
            return ollama_error(r.message, r.code) if ollama else r.response()


def ollama_inputs(value):
    """The texts of Ollama's ``input``: a string (none if empty), an array of strings, or nothing."""
    if isinstance(value, str):
        return [value] if value else []
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    if value is None:
        return []
    raise Refusal("invalid input type")


def _go_field(body, name, kind, struct, default):
    """An Ollama request field of Go type ``kind`` (bool, int or str), or Go's decoding error for another JSON
    type."""
    value = body.get(name)
    if value is None:
        return default
    ok = isinstance(value, kind) and (kind is bool or not isinstance(value, bool))
    if not ok:
        go = {bool: "bool", int: "int", str: "string"}[kind]
        raise Refusal(
            f"json: cannot unmarshal {json_type_name(value).replace('boolean', 'bool')} into Go struct field "
            f"{struct}.{name} of type {go}"
        )
    return value


def ollama_normalize(vec):
    """Ollama's normalize: the vector over its Euclidean norm (float32 sums in order, the norm at least 1e-12);
    a NaN or infinite element is an error."""
    v = np.asarray(vec, dtype=np.float32)
    if not np.all(np.isfinite(v)):
        raise Refusal("embedding contains NaN or Inf values")
    total = float(np.cumsum(v * v, dtype=np.float32)[-1]) if v.size else 0.0
    return v * np.float32(1.0 / max(math.sqrt(total), 1e-12))


def _not_supported(message):
    return JSONResponse({"error": {"code": 501, "message": message, "type": "not_supported_error"}}, status_code=501)
