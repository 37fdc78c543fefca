"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

The chat side of ``bankml.serve.runtime.Model``: ``ModelChat``, the mixin Model inherits, holds the server's chat
options (the template, ``--jinja``, ``--reasoning``, ``--reasoning-format``, ``--reasoning-budget(-message)``,
``--chat-template-kwargs``) and turns a chat Request into its Job as llama-server's
``oaicompat_chat_params_parse`` (``tools/server/server-common.cpp``) and ``common_chat_templates_apply``
(``common/chat.cpp``) do: ``chat_layer`` (the template as ``bankml.chat.template`` holds it, or the legacy path of
``bankml.serve.legacy_chat``), ``supports_thinking``, ``chat_options`` (thinking, kwargs, reasoning format),
``chat_inputs`` (the request's ``ChatInputs`` completed with them and the continuation rules), ``chat_prompt``,
``chat`` (the Job), ``render`` (``/apply-template``'s prompt), ``renders_tools``; the chat grammar and the reasoning
budget of a job.

A mixin rather than an object Model holds: these methods read the model's vocabulary, its libllama handles and its
schema modes as much as their own options, and the server, the tests and the routes call them on the Model
(``model.chat_layer()``, ``model.supports_thinking()``). Owns no weights, contexts or slots (``runtime``,
``contexts``); reads no request body (``openai``, ``ollama``).
"""

import json

from bankml.chat.constraint import Constraint, RequestError
from bankml.chat.inputs import ChatInputs, kwargs_texts
from bankml.chat.messages import parse_continuation
from bankml.chat.template import (
    CONTINUATION_NONE,
    ChatRequestError,
    ChatTemplate,
    TemplateError,
)
from bankml.errors import json_type_name
from bankml.schema.grammar import json_schema_to_grammar
from bankml.serve.job import Job, check_cancel
from bankml.serve.legacy_chat import LegacyChat, check_legacy_request, verify_override
from bankml.serve.request import Request, reasoning_format_from_name

__all__ = ["ModelChat"]


class ModelChat:
    """Model's chat methods (a mixin: ``bankml.serve.runtime.Model`` inherits it and calls ``_set_chat_template``
    and ``_set_reasoning`` once its vocabulary is loaded)."""

    # the Model's modes, which a request's fields left None fall back to (set by Model.__init__)
    json_schema_mode: str
    tool_call_mode: str
    strict_style: str

    def _set_chat_template(self, chat_template_file, chat_template, use_jinja):
        """The GGUF's template, or llama-server's ``--chat-template-file`` / ``--chat-template`` in its place;
        without ``--jinja`` a template libllama cannot format stops the load, as llama-server's example chat does."""
        L = self._L
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

    def _set_reasoning(self, reasoning, reasoning_format, reasoning_budget, reasoning_budget_message, kwargs):
        """llama-server's --reasoning on|off|auto (on/off also set the template kwarg enable_thinking:
        common/arg.cpp), --reasoning-format, --reasoning-budget(-message), --chat-template-kwargs (``kwargs``)."""
        if reasoning not in ("on", "off", "auto"):
            raise ValueError(f"error: unknown value for --reasoning: '{reasoning}'")
        self.reasoning = reasoning
        self.reasoning_format = reasoning_format_from_name(reasoning_format)
        if isinstance(reasoning_budget, bool) or not isinstance(reasoning_budget, int) or reasoning_budget < -1:
            raise ValueError("invalid value for --reasoning-budget: expected -1 or more")
        self.reasoning_budget = reasoning_budget
        self.reasoning_budget_message = str(reasoning_budget_message or "")
        self.chat_template_kwargs = {}
        if kwargs:
            for key, value in kwargs.items():
                # kept as JSON texts, as common/arg.cpp keeps each value's dump(): a string is a JSON string
                self.chat_template_kwargs[key] = kwargs_texts({key: value})[key]
        if reasoning != "auto":
            self.chat_template_kwargs["enable_thinking"] = "true" if reasoning == "on" else "false"

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
