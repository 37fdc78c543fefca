"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

The UTF-8 reader of llama.cpp's ``common/peg-parser.cpp`` (``utf8_at``, shared with ``bankml.chat.peg``, the
port of the whole PEG arena) and ``JsonScanner``, bankml's own: a byte-at-a-time automaton with the same
results as the JSON-mode chat parser from the first byte of the value on, so that a stream need not be
reparsed on every piece (``bankml.chat.content``). Positions are byte offsets into UTF-8 input.
"""

SUCCESS, FAIL, NEED = 0, 1, 2

INCOMPLETE, INVALID, OK = 0, 1, 2


def utf8_at(data, pos):
    """llama.cpp's common_parse_utf8_codepoint: (status, codepoint, bytes consumed)."""
    n = len(data)
    if pos >= n:
        return INCOMPLETE, 0, 0
    b = data[pos]
    if not b & 0x80:
        return OK, b, 1
    if not b & 0x40:
        return INVALID, 0, 1
    if not b & 0x20:
        if pos + 1 >= n:
            return INCOMPLETE, 0, 1
        if (data[pos + 1] & 0xC0) != 0x80:
            return INVALID, 0, 1
        return OK, ((b & 0x1F) << 6) | (data[pos + 1] & 0x3F), 2
    if not b & 0x10:
        length, cp = 3, b & 0x0F
    elif not b & 0x08:
        length, cp = 4, b & 0x07
    else:
        return INVALID, 0, 1
    for i in range(1, length):
        if pos + i >= n:
            return INCOMPLETE, 0, i
        if (data[pos + i] & 0xC0) != 0x80:
            return INVALID, 0, i
        cp = (cp << 6) | (data[pos + i] & 0x3F)
    return OK, cp, length


# ---------------------------------------------------------------------------------------------------------
# An incremental scanner with the same results as the arena's json() parser followed by the JSON-mode tail
# (whitespace, the closing fence when the value was opened by one, the end), for streams: it consumes each
# byte once instead of reparsing the answer on every piece. JSON is LL(1) over bytes (a choice
# is decided by the first byte; whitespace before "," or a closing bracket is skipped either way; a number
# ends at the first byte outside [0-9.eE+-]), which is what makes a byte-at-a-time automaton exact.
# It reports "unsure" (the caller reparses) in the one place it does not model: a UTF-8 sequence cut at the
# end of the input outside a string.

_C_SPACE = frozenset(b" \t\n\v\f\r")
_HEX = frozenset(b"0123456789abcdefABCDEF")
_DIGITS = frozenset(b"0123456789")
_NUM_CONT = frozenset(b"0123456789.eE+-")
_ESCAPES = frozenset(b'"\\/bfnrt')
_LITERALS = {0x74: b"true", 0x66: b"false", 0x6E: b"null"}


class JsonScanner:
    """Feed it the bytes from the first byte of the value on (``feed(data)``, where ``data`` is the whole
    input so far and ``start`` the value's offset in it); ``result()`` is ``(status, content_end)`` with
    status FAIL, NEED or SUCCESS as the lenient parse of the whole input would end, or None when unsure."""

    def __init__(self, start, fenced):
        self.pos = start
        self.fenced = fenced
        self.stack = []  # b"{" / b"[" per open container
        self.mode = "value"
        self.failed = False
        self.value_end = None  # set when the top-level value is complete
        self.escape_at = None  # offset of a backslash whose escape is not complete yet
        self.hex_left = 0
        self.lit = b""  # literal being matched, and how far
        self.lit_i = 0
        self.ticks = 0
        self.pending = False  # a UTF-8 sequence cut at the end is waiting at self.pos

    def _fail(self):
        self.failed = True
        self.mode = "failed"

    def _close_value(self, end):
        # a value just ended at offset `end` (exclusive): continue in its container, or the tail
        if not self.stack:
            self.value_end = end
            self.mode = "trail"
        else:
            self.mode = "obj_after" if self.stack[-1] == 0x7B else "arr_after"

    def _start_value(self, b, at):
        if b == 0x7B:
            self.stack.append(0x7B)
            self.mode = "obj_first"
        elif b == 0x5B:
            self.stack.append(0x5B)
            self.mode = "arr_first"
        elif b == 0x22:
            self.mode = "str"
            self.key = False
        elif b == 0x2D:
            self.mode = "num_minus"
        elif b == 0x30:
            self.mode = "num_zero"
        elif 0x31 <= b <= 0x39:
            self.mode = "num_int"
        elif b in _LITERALS:
            self.lit, self.lit_i = _LITERALS[b], 1
            self.mode = "lit"
        else:
            self._fail()

    def feed(self, data):
        n = len(data)
        pos = self.pos
        self.pending = False
        while pos < n and not self.failed:
            b = data[pos]
            mode = self.mode
            if b >= 0x80:
                status, _, size = utf8_at(data, pos)
                if status == INCOMPLETE:
                    self.pending = True
                    break
                if mode == "str" and status == OK:
                    pos += size
                    continue
                self._fail()  # invalid UTF-8, or a non-ASCII character outside a string
                break
            if mode == "str":
                if b == 0x22:
                    if self.key:
                        self.mode = "obj_colon"
                    else:
                        self._close_value(pos + 1)
                elif b == 0x5C:
                    self.escape_at = pos
                    self.mode = "esc"
                pos += 1
            elif mode == "esc":
                if b in _ESCAPES:
                    self.escape_at = None
                    self.mode = "str"
                elif b == 0x75:
                    self.hex_left = 4
                    self.mode = "esc_u"
                else:
                    self._fail()
                    break
                pos += 1
            elif mode == "esc_u":
                if b not in _HEX:
                    self._fail()
                    break
                self.hex_left -= 1
                if self.hex_left == 0:
                    self.escape_at = None
                    self.mode = "str"
                pos += 1
            elif (
                mode
                in (
                    "obj_first",
                    "obj_colon",
                    "obj_val",
                    "obj_after",
                    "obj_key",
                    "arr_first",
                    "arr_after",
                    "arr_val",
                    "trail",
                )
                and b in _C_SPACE
            ):
                pos += 1
            elif mode == "value" or mode == "obj_val" or mode == "arr_val":
                self._start_value(b, pos)
                pos += 1
            elif mode == "obj_first":
                if b == 0x7D:
                    self.stack.pop()
                    self._close_value(pos + 1)
                elif b == 0x22:
                    self.mode, self.key = "str", True
                else:
                    self._fail()
                    break
                pos += 1
            elif mode == "obj_key":
                if b != 0x22:
                    self._fail()
                    break
                self.mode, self.key = "str", True
                pos += 1
            elif mode == "obj_colon":
                if b != 0x3A:
                    self._fail()
                    break
                self.mode = "obj_val"
                pos += 1
            elif mode == "obj_after" or mode == "arr_after":
                close = 0x7D if mode == "obj_after" else 0x5D
                if b == 0x2C:
                    self.mode = "obj_key" if mode == "obj_after" else "arr_val"
                elif b == close:
                    self.stack.pop()
                    self._close_value(pos + 1)
                else:
                    self._fail()
                    break
                pos += 1
            elif mode == "arr_first":
                if b == 0x5D:
                    self.stack.pop()
                    self._close_value(pos + 1)
                else:
                    self._start_value(b, pos)
                pos += 1
            elif mode == "lit":
                if b != self.lit[self.lit_i]:
                    self._fail()
                    break
                self.lit_i += 1
                pos += 1
                if self.lit_i == len(self.lit):
                    self._close_value(pos)
            elif mode.startswith("num_"):
                if mode == "num_minus":
                    nxt = "num_zero" if b == 0x30 else "num_int" if b in _DIGITS else None
                elif mode == "num_zero" or mode == "num_int":
                    nxt = (
                        "num_int"
                        if mode == "num_int" and b in _DIGITS
                        else "num_dot"
                        if b == 0x2E
                        else "num_e"
                        if b in (0x65, 0x45)
                        else None
                    )
                    if nxt is None and b not in _NUM_CONT:
                        self._close_value(pos)  # the number ends here; this byte belongs to what follows
                        continue
                elif mode == "num_dot":
                    nxt = "num_frac" if b in _DIGITS else None
                elif mode == "num_frac":
                    nxt = "num_frac" if b in _DIGITS else "num_e" if b in (0x65, 0x45) else None
                    if nxt is None and b not in _NUM_CONT:
                        self._close_value(pos)
                        continue
                elif mode == "num_e":
                    nxt = "num_esign" if b in (0x2B, 0x2D) else "num_exp" if b in _DIGITS else None
                elif mode == "num_esign":
                    nxt = "num_exp" if b in _DIGITS else None
                else:  # num_exp
                    nxt = "num_exp" if b in _DIGITS else None
                    if nxt is None and b not in _NUM_CONT:
                        self._close_value(pos)
                        continue
                if nxt is None:
                    self._fail()
                    break
                self.mode = nxt
                pos += 1
            elif mode == "trail":
                if self.fenced and b == 0x60 and self.ticks < 3:
                    self.ticks += 1
                    pos += 1
                    self.mode = "tick" if self.ticks < 3 else "done"
                else:
                    self._fail()
                    break
            elif mode == "tick":
                if b != 0x60:
                    self._fail()
                    break
                self.ticks += 1
                pos += 1
                if self.ticks == 3:
                    self.mode = "done"
            else:  # done: the end must follow
                self._fail()
                break
        self.pos = pos
        return self.result(n)

    def result(self, n):
        if self.failed:
            return FAIL, None
        if self.pending and self.mode != "str":
            return None  # unsure: the caller reparses
        if self.value_end is not None:
            done = self.mode == "done" or (self.mode == "trail" and not self.fenced)
            return (SUCCESS if done and not self.pending else NEED), self.value_end
        if self.escape_at is not None:
            return NEED, self.escape_at
        if self.pending:
            return NEED, self.pos
        return NEED, n
