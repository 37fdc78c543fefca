# Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.
"""llama-server's chat formatting without Jinja (``--no-jinja``): ``common_chat_templates_apply_legacy`` of
``common/chat.cpp``.

The prompt is libllama's own ``llama_chat_apply_template`` (``src/llama-chat.cpp``: the built-in templates,
picked by name or by the heuristics that read the template's text), called through llama-cpp-python, so the
text is the pinned llama.cpp's, byte for byte. Around it, llama-server's rules for such a request: each message
is its role and its text (a content array's text parts joined by newlines, other parts left out), ``tools`` and
a ``tool_choice`` other than ``"auto"`` are refused (``tools param requires --jinja flag``), a response format's
schema gives the constraint's own grammar and the answer is read as plain content (no parser, no reasoning,
no tool calls). The Jinja template is still parsed, as llama-server parses it: ``/props`` reports its source
and capabilities.

This module owns the legacy path only; ``Model.chat_layer`` (``bankml.serve.model_chat``) picks it.
"""

import ctypes

from bankml.chat.constraint import RequestError
from bankml.chat.template import ChatPrompt, ChatTemplate

__all__ = ["LegacyChat", "apply_builtin_template", "check_legacy_request", "legacy_messages", "verify_override"]

_CHECK_MESSAGES = [{"role": "user", "content": "test"}]
# common_chat_format_example's conversation, rendered once at start (llama-server's load fails where it cannot be)
_EXAMPLE = [
    {"role": "system", "content": "You are a helpful assistant"},
    {"role": "user", "content": "Hello"},
    {"role": "assistant", "content": "Hi there"},
    {"role": "user", "content": "How are you?"},
]


def _text(value):
    return value if isinstance(value, str) else ""


def legacy_messages(messages):
    """``[(role, content)]`` as common_chat_templates_apply_legacy builds them: a content array's ``text`` (and
    ``media_marker``) parts appended to the content, each after a newline when the content so far is not empty;
    other parts are left out (llama-server logs a warning)."""
    out = []
    for msg in messages:
        if not isinstance(msg, dict):
            raise RequestError("each message must be an object")
        content = msg.get("content")
        text = _text(content)
        if isinstance(content, list):
            for part in content:
                if not isinstance(part, dict) or part.get("type") not in ("text", "media_marker"):
                    continue
                if text:
                    text += "\n"
                text += _text(part.get("text"))
        out.append((_text(msg.get("role")), text))
    return out


def apply_builtin_template(llama, source, messages, add_generation_prompt):
    """libllama's ``llama_chat_apply_template`` over ``[(role, content)]``: the prompt text, or None where no
    built-in template matches ``source`` (a name such as ``"llama3"``, or a Jinja text its heuristics read)."""
    n = len(messages)
    chat = (llama.llama_chat_message * max(n, 1))()
    keep = []  # the encoded texts live as long as the call
    for i, (role, content) in enumerate(messages):
        r, c = role.encode("utf-8"), content.encode("utf-8")
        keep.extend((r, c))
        chat[i].role, chat[i].content = r, c
    src = source.encode("utf-8")
    size = sum(len(r) + len(c) for r, c in messages)
    size += size // 4 + 64
    for _ in range(2):  # once more with the length the first call asked for
        buf = ctypes.create_string_buffer(size)
        res = llama.llama_chat_apply_template(src, chat, n, bool(add_generation_prompt), buf, size)
        if res < 0:
            return None
        if res <= size:
            return buf.raw[:res].decode("utf-8", "replace")
        size = res
    return None


def check_legacy_request(tools, tool_choice):
    """oaicompat_chat_params_parse without --jinja: tools and a tool_choice other than "auto" are refused (a
    tool_choice that is no string counts as "auto", as its json_value reads it)."""
    if isinstance(tools, list) and tools:
        raise RequestError("tools param requires --jinja flag")
    if isinstance(tool_choice, str) and tool_choice != "auto":
        raise RequestError("tool_choice param requires --jinja flag")


class LegacyChat:
    """The chat layer of ``--no-jinja``: the Jinja template parsed (its ``source`` and ``caps``, as /props
    reports them) and the prompt made by libllama's built-in templates. ``apply`` takes the ``ChatInputs`` the
    runtime completed and gives a ``ChatPrompt`` with the prompt alone."""

    def __init__(self, llama, template: ChatTemplate):
        self._llama = llama
        self.template = template
        self.source = template.source
        self.caps = template.caps
        if apply_builtin_template(llama, self.source, legacy_messages(_EXAMPLE), True) is None:
            # llama-server's load: common_chat_format_example throws, the server stops
            raise RequestError("chat template parsing error: this custom template is not supported, try using --jinja")

    def apply(self, inputs):
        """The ChatPrompt of a request: the built-in template over its messages, ``add_generation_prompt`` as
        the runtime set it (a continued final assistant message is rendered whole, as llama-server renders it
        without Jinja); no parser, no grammar of its own."""
        prompt = apply_builtin_template(
            self._llama, self.source, legacy_messages(inputs.messages), inputs.add_generation_prompt is not False
        )
        if prompt is None:
            raise RequestError("this custom template is not supported, try using --jinja")
        return ChatPrompt(prompt=prompt, generation_prompt="", supports_thinking=False, caps=self.caps.to_dict())


def verify_override(llama, text):
    """common_chat_verify_template without --jinja: whether libllama formats a user message with ``text``."""
    return apply_builtin_template(llama, text, legacy_messages(_CHECK_MESSAGES), True) is not None
