"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

The content rule: what llama-server returns as a message's ``content`` for a model's raw answer.

llama-server parses the generation prompt followed by the raw answer with the chat parser the template's
auto-parser built (``common/chat-auto-parser-generator.cpp``, run by ``common_chat_peg_parse`` in
``common/chat.cpp``, always in lenient mode, on ``common/peg-parser.cpp``'s engine). The parser is the one
``bankml.chat.template`` derives from the template (``template``: a ``bankml.chat.template.ChatTemplate``, a template text or a
name of ``bankml.chat.templates``, see ``bankml.chat.constraint.chat_template``); for the auto-parser's templates:

* JSON mode (``response_format`` / a schema object): the generation prompt (up to the reasoning block),
  whitespace, the optional reasoning block (``<think>...</think>`` for qwen3), whitespace, then either ```` ```json ````,
  whitespace, the value, whitespace, ```` ``` ```` or whitespace, the value, whitespace; then the end. The
  content is the text of the JSON value (``p.json()``): any JSON value, whatever the schema. An answer cut
  short leaves an open value (``{"a": "F``); an escape cut mid-way (``\\``, ``\\u12``) is not content yet;
  a number at the very end counts (its lookahead asks for more input, the text so far is kept).
* Otherwise the content is the whole answer (after the reasoning block for qwen3), less a UTF-8 sequence
  cut at its end; invalid UTF-8 becomes U+FFFD.

A non-streamed answer whose parse holds nothing (empty, whitespace, a fence with no value yet) is
answered with the raw text (``server_task_result_cmpl_final::to_json_oaicompat_chat``); a streamed one
sends only the growth of the parsed content (``task_result_state::update_chat_msg``). An answer the parser
refuses raises ContentError with llama-server's message.
"""

from bankml.chat import _peg, peg
from bankml.chat.chat_peg import CONTENT, Mapper
from bankml.chat.constraint import Constraint, chat_template
from bankml.chat.inputs import ChatInputs

__all__ = ["ContentError", "ContentStream", "content", "json_content", "json_message", "parse_message"]

_FORMAT_NAME = "peg-native"


class ContentError(ValueError):
    """llama-server refuses the answer: ``The model produced output that does not match the expected
    peg-native format`` (a full parse), or ``Invalid diff: ...`` (a stream whose content shrank)."""


_PARSERS: dict = {}


def _parser(template, json_mode, thinking):
    """The chat layer's parser for the template (JSON mode: a response format; thinking on or off)."""
    tmpl = chat_template(template)
    key = (id(tmpl), bool(json_mode), bool(thinking))
    hit = _PARSERS.get(key)
    if hit is not None and hit[0] is tmpl:
        return hit[1]
    out = tmpl.apply(
        ChatInputs(
            [{"role": "user", "content": "x"}],
            json_schema={"type": "object"} if json_mode else None,
            enable_thinking=bool(thinking),
        )
    )
    if out.parser is None:
        raise ValueError(f"bankml does not parse the answers of this template's handler ({out.handler}) yet")
    if len(_PARSERS) >= 64:
        _PARSERS.pop(next(iter(_PARSERS)))
    _PARSERS[key] = (tmpl, out.parser)
    return out.parser


def generation_prompt(template, thinking=False, json_mode=True):
    """What the parser starts with (the template's generation prompt)."""
    return _parser(template, json_mode, thinking).generation_prompt


def _as_bytes(raw):
    return raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else bytes(raw)


class _Parsed:
    """One lenient parse of the generation prompt + answer by the chat layer's arena: the result, the message
    (llama.cpp's mapper) and the offset where the content begins (for the incremental JSON scan)."""

    __slots__ = ("type", "end", "text", "reasoning", "start")

    def __init__(self, result, message, start):
        self.type, self.end = result.type, result.end
        self.text, self.reasoning, self.start = message.content, message.reasoning_content, start


def _peg_parse(data, json_mode, template, thinking=False):
    parser = _parser(template, json_mode, thinking)
    ctx = peg.Context(bytes(data), lenient=True)
    result = parser.arena.parse(ctx)
    if result.type == peg.FAIL:
        return _Parsed(result, Mapper().message(), None)
    mapper = parser.mapper()
    mapper.from_ast(ctx, result)
    start = next((node.start for node in ctx.visit(result.nodes) if node.tag == CONTENT), None)
    return _Parsed(result, mapper.message(), start)


def _refused():
    return ContentError("The model produced output that does not match the expected %s format" % _FORMAT_NAME)


def parse_message(raw, json_mode=True, template="chatml", thinking=False, partial=False):
    """Parse a raw answer as llama-server does: ``(content, reasoning_content)``, both str ("" when absent;
    whitespace-only reasoning is dropped). ``partial`` (a stream in progress): an answer the parser refuses
    gives ``("", "")`` when something was parsed, as llama-server's partial parse does; a full parse raises
    ContentError."""
    data = _as_bytes(generation_prompt(template, thinking, json_mode)) + _as_bytes(raw)
    result = _peg_parse(data, json_mode, template, thinking)
    if result.type == peg.FAIL:
        if partial and result.end > 0:
            return "", ""
        raise _refused()
    return result.text, result.reasoning


def json_content(raw, template="chatml", thinking=False, partial=False):
    """The content llama-server's JSON-mode parser takes from a raw answer: the JSON value's text (open if
    the answer was cut short), "" when there is none yet. Raises ContentError where llama-server does."""
    return parse_message(raw, True, template, thinking, partial)[0]


def _mode(constraint):
    if constraint is None:
        return True
    if isinstance(constraint, Constraint):
        return constraint.is_json
    return bool(constraint)


def json_message(raw, template="chatml", thinking=False, constraint=None):
    """The assistant message of a non-streamed answer: ``{"role": "assistant", "content": ...}`` plus
    ``"reasoning_content"`` when there is some. The content is the parsed one, or the raw text itself when
    the parse holds nothing (llama-server's fallback). ``constraint`` (default: JSON mode) picks the parser."""
    text, reasoning = parse_message(raw, _mode(constraint), template, thinking, partial=False)
    message = {"role": "assistant"}
    if not text and not reasoning:
        message["content"] = raw if isinstance(raw, str) else _as_bytes(raw).decode("utf-8", "replace")
        return message
    message["content"] = text
    if reasoning:
        message["reasoning_content"] = reasoning
    return message


def content(raw, streamed=False, constraint=None, template="chatml", thinking=False):
    """The content llama-server gives for the full raw answer: non-streamed, the message content (raw text
    when the parse is empty); streamed, what the deltas add up to (the parsed content, "" when empty)."""
    if streamed:
        stream = ContentStream(constraint, template, thinking)
        stream.push(raw)
        stream.finish()
        return stream.content
    return json_message(raw, template, thinking, constraint)["content"]


class ContentStream:
    """The content deltas of a streamed answer, as llama-server sends them: ``push(piece)`` appends the
    answer's next text and returns what the parsed content grew by ("" often); ``finish()`` does the final
    (non-partial) parse and returns the last growth. ``content`` is everything sent so far.

    ``constraint``: a Constraint (JSON mode when ``constraint.is_json``), a bool, or None for JSON mode."""

    def __init__(self, constraint=None, template="chatml", thinking=False, incremental=True):
        self.json_mode = _mode(constraint)
        self.template = template
        self.thinking = thinking
        self.incremental = incremental
        prompt = _as_bytes(generation_prompt(template, thinking, self.json_mode))
        self._prompt_len = len(prompt)
        self._data = bytearray(prompt)
        self._scanner = None
        self._value_start = None
        self._sent = []  # the deltas sent (joined on demand: .content)
        self._parts = []  # the server's current parsed content, in pieces (joined on demand: ._state)
        self._end = None  # once scanning: the content's end offset in the data
        self.reasoning = ""

    @property
    def raw(self):
        return bytes(self._data[self._prompt_len :])

    def _parse(self, partial):
        """(content, reasoning) of everything so far, or None for a refused partial parse."""
        data = self._data
        if self._scanner is not None:
            verdict = self._scanner.feed(data)
            if verdict is not None:
                status, end = verdict
                if status == _peg.FAIL:
                    if partial:
                        return None
                    raise _refused()
                return end  # the content is data[value_start:end]: it only grows, and on UTF-8 boundaries
        frozen = bytes(data)
        result = _peg_parse(frozen, self.json_mode, self.template, self.thinking)
        if result.type == peg.FAIL:
            if partial and result.end > 0:
                return None
            raise _refused()
        text, reasoning, start = result.text, result.reasoning, result.start
        if self.incremental and self.json_mode and self._scanner is None and text and start is not None:
            # the value has begun: what precedes it is settled, the rest can be scanned byte by byte
            before = frozen[:start].rstrip(b" \t\n\v\f\r")
            self._scanner = _peg.JsonScanner(start, before.endswith(b"```json"))
            self._value_start = start
            self._scanner.feed(data)
        return text, reasoning

    def _update(self, partial):
        parsed = self._parse(partial)
        if parsed is None:
            return ""
        if isinstance(parsed, int):
            # scanned: the growth is the bytes past the previous end (the state is data[value_start:end])
            if parsed <= self._end:
                return ""
            delta = bytes(self._data[self._end : parsed]).decode("utf-8", "replace")
            self._end = parsed
            self._parts.append(delta)
            self._sent.append(delta)
            return delta
        text, reasoning = parsed
        if not text and not reasoning:
            return ""  # an empty message leaves the previous one in place
        delta = ""
        state = self._state
        if text != state:
            if state and not text.startswith(state):
                if not state.startswith(text):
                    raise ContentError("Invalid diff: '%s' not found at start of '%s'" % (state, text))
                # llama.cpp's string_diff: a shrink to a prefix sends nothing (the state still shrinks)
            else:
                delta = text[len(state) :]
            self._parts = [text]
        if self._scanner is not None:
            self._end = self._value_start + len(text.encode("utf-8"))
        if delta:
            self._sent.append(delta)
        self.reasoning = reasoning
        return delta

    @property
    def _state(self):
        """The server's current parsed content."""
        if len(self._parts) > 1:
            self._parts = ["".join(self._parts)]
        return self._parts[0] if self._parts else ""

    @property
    def content(self):
        """Everything the deltas sent add up to."""
        if len(self._sent) > 1:
            self._sent = ["".join(self._sent)]
        return self._sent[0] if self._sent else ""

    def push(self, piece):
        self._data += _as_bytes(piece)
        return self._update(partial=True)

    def finish(self):
        return self._update(partial=False)
