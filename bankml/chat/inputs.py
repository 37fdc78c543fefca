"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

The chat layer's one input value: ``ChatInputs``, what llama.cpp's ``common_chat_templates_inputs``
(``common/chat.h``) holds for one request (the messages, tools, tool choice, response format's schema, thinking,
template kwargs, reasoning format, generation prompt and continuation, the clock), with bankml's two modes
(``json_schema_mode``, ``tool_call_mode``). ``ChatTemplate.apply(inputs)`` takes it; the serve layer's readers
(``bankml.serve.openai``, ``ollama``, and the wire formats converted into a chat-completions body) build it, and
``bankml.serve.runtime.Model.chat`` completes the fields left None with the server's options, as llama-server's
``oaicompat_chat_params_parse`` completes a body with its own.

Every field is checked here, once, when the value is made: a bad one is a ``ChatRequestError`` (a ValueError)
that names it. What depends on the template (the tool choice against the tools and the mode, the messages as
llama.cpp parses them, the tools' shape, the kwargs' JSON) is checked by ``ChatTemplate.apply`` with
llama.cpp's messages.

Must not import: ``bankml.chat.template`` or ``families`` (both build on it).
"""

import json
import numbers
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Optional

from bankml.chat.params import ChatRequestError, check_tool_call_mode, read_tool_choice
from bankml.errors import json_type_name
from bankml.schema.grammar import DEFAULT_STRICT_STYLE, check_mode, check_strict_style

__all__ = ["ChatInputs", "REASONING_FORMATS", "kwargs_texts"]

#: the reasoning formats the chat layer reads (common_reasoning_format): ``deepseek`` extracts the reasoning
#: (``auto`` is read as ``deepseek``), ``none`` leaves it in the content
REASONING_FORMATS = ("deepseek", "auto", "none")


def kwargs_texts(values):
    """Template kwargs given as values, as JSON texts (what ``ChatInputs.chat_template_kwargs`` holds):
    each value's ``dump()``, as llama-server keeps a request's ``chat_template_kwargs``."""
    if values is None:
        return None
    if not isinstance(values, Mapping):
        raise ChatRequestError("chat_template_kwargs: expected an object, got " + json_type_name(values))
    return {key: json.dumps(value, ensure_ascii=False, separators=(",", ":")) for key, value in values.items()}


def _fail(name, expected, value):
    raise ChatRequestError("%s: expected %s, got %s" % (name, expected, _shown(value)))


def _shown(value):
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return type(value).__name__


@dataclass(frozen=True)
class ChatInputs:
    """One chat request as the chat layer takes it (llama.cpp's ``common_chat_templates_inputs``).

    * ``messages``: OpenAI's chat messages (read by ``ChatTemplate.apply`` as llama.cpp reads them);
    * ``tools``: OpenAI's function tools (None or an empty list: none); ``tool_choice``: ``"auto"`` (also for
      None), ``"none"``, ``"required"`` or an object naming functions (``{"type": "function", "function":
      {"name": X}}``, OpenAI's ``allowed_tools``: served in strict tool-call mode);
      ``parallel_tool_calls``: whether an answer may hold several calls;
    * ``json_schema``: the response format's schema (a dict, or its JSON text; None: none);
    * ``json_schema_mode``: how the grammar's schemas are compiled (``bankml.schema.MODES``: ``"llama.cpp"``
      or ``"strict"``); ``strict_style``: strict mode's style (``bankml.schema.grammar.STRICT_STYLES``:
      ``"canonical"``, the language to generate in, keys in schema order, no whitespace; or ``"exact"``, every
      JSON text of each valid instance); ``tool_call_mode``: how tool calls are constrained (``"llama.cpp"`` or
      ``"strict"``, ``bankml.chat.params.TOOL_CALL_MODES``);
    * ``enable_thinking``; ``chat_template_kwargs``: name -> the value's JSON text, as llama.cpp holds them
      (``kwargs_texts`` makes them from values); ``reasoning_format``: ``"deepseek"`` (``"auto"``) or ``"none"``;
    * ``add_generation_prompt``; ``continue_final_message``: True, ``"content"`` or ``"reasoning_content"``
      continue the last message (llama-server's field; anything else: none);
    * ``now``: POSIX time for the template's clock (None: the wall clock when it is rendered).

    A field left None is decided by whoever completes the value: ``ChatTemplate.apply`` takes llama.cpp's
    defaults (thinking on, no parallel calls, ``deepseek``, both modes ``"llama.cpp"``, the ``"canonical"``
    strict style); ``Model.chat`` takes the server's options (``--reasoning``, ``--reasoning-format``, the modes,
    ``--strict-style``, the template's parallel-call support). ``with_defaults()`` fills them as ``apply`` does."""

    messages: Any
    tools: Optional[list] = None
    tool_choice: Any = "auto"
    parallel_tool_calls: Optional[bool] = None
    json_schema: Any = None
    json_schema_mode: Optional[str] = None
    strict_style: Optional[str] = None
    tool_call_mode: Optional[str] = None
    enable_thinking: Optional[bool] = None
    chat_template_kwargs: Optional[Mapping] = None
    reasoning_format: Optional[str] = None
    add_generation_prompt: bool = True
    continue_final_message: Any = None
    now: Optional[float] = None

    def __post_init__(self):
        if self.json_schema_mode is not None:
            check_mode(self.json_schema_mode)
        if self.strict_style is not None:
            check_strict_style(self.strict_style)
        if self.tool_call_mode is not None:
            check_tool_call_mode(self.tool_call_mode)
        if self.tool_choice is None:
            object.__setattr__(self, "tool_choice", "auto")  # absent or null: llama-server's "auto"
        read_tool_choice(self.tool_choice)  # its shape; against the tools and the mode in apply
        for name in ("parallel_tool_calls", "enable_thinking"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, bool):
                _fail(name, "a boolean or None", value)
        if not isinstance(self.add_generation_prompt, bool):
            _fail("add_generation_prompt", "a boolean", self.add_generation_prompt)
        if self.reasoning_format is not None and self.reasoning_format not in REASONING_FORMATS:
            _fail("reasoning_format", '"deepseek", "auto" or "none"', self.reasoning_format)
        kwargs = self.chat_template_kwargs
        if kwargs is not None:
            if not isinstance(kwargs, Mapping):
                _fail("chat_template_kwargs", "an object of JSON texts", kwargs)
            for key, text in kwargs.items():
                if not isinstance(key, str) or not isinstance(text, str):
                    raise ChatRequestError(
                        "chat_template_kwargs[%s]: expected a name and its value's JSON text (a string, e.g. "
                        '"true"; bankml.chat.inputs.kwargs_texts makes them from values), got %s'
                        % (_shown(key), json_type_name(text))
                    )
        now = self.now
        if now is not None and (isinstance(now, bool) or not isinstance(now, numbers.Real)):
            _fail("now", "a POSIX time (a number) or None", now)

    def replace(self, **changes):
        """A copy with ``changes`` (checked as a new value is)."""
        return replace(self, **changes)

    def with_defaults(self):
        """The value with llama.cpp's defaults where a field is None (``common_chat_templates_inputs``' own:
        thinking on, no parallel calls, the ``deepseek`` reasoning format, both modes ``"llama.cpp"``, the
        ``"canonical"`` strict style), and ``"auto"`` read as ``"deepseek"``."""
        fmt = self.reasoning_format
        return replace(
            self,
            parallel_tool_calls=bool(self.parallel_tool_calls),
            json_schema_mode=self.json_schema_mode or "llama.cpp",
            strict_style=self.strict_style or DEFAULT_STRICT_STYLE,
            tool_call_mode=self.tool_call_mode or "llama.cpp",
            enable_thinking=True if self.enable_thinking is None else self.enable_thinking,
            reasoning_format="deepseek" if fmt in (None, "auto") else fmt,
        )
