"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

The answer side of the chat layer (``common/chat.cpp``): a generated text parsed into the OpenAI message
(``chat_message``, ``answer_message``), the stream's deltas between two parses (``common_chat_msg_diff::
compute_diffs``: ``msg_diffs``, ``msg_diffs_with_tools``), the tool-call ids llama-server gives calls that have
none (``gen_tool_call_id``, ``set_tool_call_ids``) and ``ChatStream``, which turns generated pieces into those
deltas. ``bankml.chat.template`` builds the parser these functions run.
"""

from bankml.chat.chat_peg import ChatMessage, ChatParseError


def _string_diff(last, current):
    if not last:
        return current
    if not current.startswith(last):
        if last.startswith(current):
            return ""
        raise ChatParseError("Invalid diff: '%s' not found at start of '%s'" % (last, current))
    return current[len(last) :]


def msg_diffs(previous, current):
    """common_chat_msg_diff::compute_diffs: [(reasoning_content_delta, content_delta)], one entry per field
    that changed (reasoning first)."""
    out = []
    if previous.reasoning_content != current.reasoning_content:
        out.append((_string_diff(previous.reasoning_content, current.reasoning_content), ""))
    if previous.content != current.content:
        out.append(("", _string_diff(previous.content, current.content)))
    return out


def msg_diffs_with_tools(previous, current):
    """common_chat_msg_diff::compute_diffs in full: [(reasoning_delta, content_delta, tool_call_index (-1:
    none), name, arguments_delta, id)], reasoning and content first, then the last known call's argument
    delta (with its id and name when they changed) and the new calls. ChatParseError with llama.cpp's
    message when calls disappear or a call's name changes."""
    out = [d + (-1, "", "", "") for d in msg_diffs(previous, current)]
    prv, new = previous.tool_calls or [], current.tool_calls or []
    if len(new) < len(prv):
        err = "Invalid diff: now finding less tool calls!\n  Previous (%d):\n" % len(prv)
        err += "".join("    - name: '%s', args: '%s'\n" % (tc.name, tc.arguments) for tc in prv)
        err += "  Current (%d):\n" % len(new)
        err += "".join("    - name: '%s', args: '%s'\n" % (tc.name, tc.arguments) for tc in new)
        err += "  Current msg text content:\n" + current.content + "\n"
        raise ChatParseError(err)
    if prv:
        idx = len(prv) - 1
        pref, newf = prv[idx], new[idx]
        if pref.name != newf.name and pref.name and newf.name and not newf.name.startswith(pref.name):
            raise ChatParseError("Invalid diff: tool call mismatch!")
        args = _string_diff(pref.arguments, newf.arguments)
        if args or pref.id != newf.id or pref.name != newf.name:
            changed = pref.id != newf.id or pref.name != newf.name
            out.append(("", "", idx, newf.name if changed else "", args, newf.id if changed else ""))
    for idx in range(len(prv), len(new)):
        tc = new[idx]
        out.append(("", "", idx, tc.name, tc.arguments, tc.id))
    return out


def chat_message(parser, raw, parsed=None):
    """The assistant message llama-server answers a non-streamed request with: the parsed content, reasoning
    and tool calls (``common_chat_msg::to_json_oaicompat``: ``tool_calls`` as
    ``{"type": "function", "function": {"name", "arguments"}, "id"}``, with the ids ``set_tool_call_ids``
    gave), or, when the parse holds none of them, the raw text as content
    (server_task_result_cmpl_final::to_json_oaicompat_chat). ``parsed``: the final message already parsed (a
    ChatStream's, whose tool calls have their ids); otherwise ``raw`` is parsed and new ids are made. Raises
    ChatParseError where llama.cpp refuses."""
    msg = parsed
    if msg is None:
        msg = parser.parse(raw, partial=False)
        if not msg.empty():
            set_tool_call_ids(msg, [])
    if msg.empty():
        text = raw if isinstance(raw, str) else bytes(raw).decode("utf-8", "replace")
        return {"role": "assistant", "content": text}
    out = {"role": "assistant", "content": msg.content}
    if msg.reasoning_content:
        out["reasoning_content"] = msg.reasoning_content
    if msg.tool_calls:
        calls = []
        for tc in msg.tool_calls:
            call = {"type": "function", "function": {"name": tc.name, "arguments": tc.arguments}}
            if tc.id:
                call["id"] = tc.id
            calls.append(call)
        out["tool_calls"] = calls
    return out


def answer_message(parser, raw, tools=False, initial=None, streamed=None):
    """The assistant message llama-server answers a finished generation with: task_result_state's message after
    the final update (``update_chat_msg`` with ``is_partial`` false, which keeps the message it holds when the
    parse gives an empty one), then ``chat_message``'s shape (the raw text as content when that message is
    empty). ``streamed``: the answer's ChatStream when it was streamed (llama-server parses partial answers
    only then); a non-streamed answer is parsed once, whole, from ``initial`` (a continued message's parse of
    no output, else empty), so a broken call that partial parses took for a call is answered as text. Raises
    ChatParseError where llama.cpp refuses the final parse."""
    state = streamed
    if state is None:
        state = ChatStream(parser, tools=tools, initial=initial)
        state.finish(raw)
    elif not state.finished:
        state.finish()  # its final parse was refused: raised again here
    return chat_message(parser, raw, state.message)


_ID_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def gen_tool_call_id():
    """llama-server's gen_tool_call_id (random_string): 32 random letters and digits."""
    import secrets

    return "".join(secrets.choice(_ID_ALPHABET) for _ in range(32))


def set_tool_call_ids(msg, ids_cache, gen=gen_tool_call_id):
    """common_chat_msg::set_tool_call_ids: each call keeps the id the output gave it or gets a new one, the
    same for the same call index across a stream's parses (``ids_cache``, a list, holds them)."""
    for i, tc in enumerate(msg.tool_calls):
        if len(ids_cache) <= i:
            ids_cache.append(tc.id or gen())
        tc.id = ids_cache[i]
    return msg


class ChatStream:
    """The deltas of a streamed answer as llama-server sends them (task_result_state::update_chat_msg):
    after each piece the whole answer is parsed partially; a refused or empty parse leaves the previous
    message; the deltas are common_chat_msg_diff's. ``push(piece)`` returns the content delta ("" often) and
    keeps the (reasoning, content) diffs in ``diffs``; ``finish()`` does the final, non-partial parse.
    With ``tools`` the diffs are ``msg_diffs_with_tools``' (reasoning, content, tool call index, name,
    arguments, id) and the calls get their ids as llama-server's ``set_tool_call_ids``; ``initial`` is the
    message the stream starts from (a continued message's parse of no output, task_result_state).
    ``strict``: a partial parse that llama.cpp refuses raises ChatParseError, as llama-server's streamed
    update does (the stream then ends with an error event); otherwise it sends nothing and the stream goes on."""

    def __init__(self, parser, tools=False, initial=None, strict=False):
        self.parser = parser
        self.strict = strict
        self._data = bytearray()
        self.message = initial if initial is not None else ChatMessage()
        self.diffs = []
        self.content = ""
        self.reasoning = ""
        self.tools = bool(tools)
        self.tool_call_ids = []
        self.finished = False

    @property
    def raw(self):
        return bytes(self._data)

    def _update(self, partial):
        try:
            msg = self.parser.parse(bytes(self._data), partial)
        except ChatParseError:
            if partial and not self.strict:
                return ""
            raise
        if msg.empty():
            self.diffs = []
            if not partial:
                self.finished = True
            return ""
        if self.tools:
            # the tool-call deltas too (6-tuples, msg_diffs_with_tools), the calls with their stable ids
            set_tool_call_ids(msg, self.tool_call_ids)
            self.diffs = msg_diffs_with_tools(self.message, msg)
        else:
            self.diffs = msg_diffs(self.message, msg)
        self.message = msg
        if not partial:
            self.finished = True
        delta = "".join(d[1] for d in self.diffs)
        self.content += delta
        self.reasoning += "".join(d[0] for d in self.diffs)
        return delta

    def push(self, piece):
        self._data += piece.encode("utf-8", "surrogatepass") if isinstance(piece, str) else bytes(piece)
        return self._update(partial=True)

    def finish(self, piece=b""):
        """The final, non-partial parse (of the text pushed so far and ``piece``). A non-streamed answer is a
        stream with no partial parse: llama-server updates a task's message only at its final result, so a
        final parse that holds nothing leaves the task's initial message (task_result_state::update_chat_msg)."""
        if piece:
            self._data += piece.encode("utf-8", "surrogatepass") if isinstance(piece, str) else bytes(piece)
        return self._update(partial=False)


def msg_empty(msg):
    return not (
        msg["content"]
        or msg["content_parts"]
        or msg["tool_calls"]
        or msg["reasoning_content"]
        or msg["tool_name"]
        or msg["tool_call_id"]
    )
