"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

A small PEG interpreter with the parse semantics of llama.cpp's ``common/peg-parser.cpp`` (the
``parser_executor`` visitor) for the parsers its chat parsers use in JSON mode: literal, sequence, choice,
repetition, negative lookahead, whitespace, character classes, JSON string content, ``until``, rules and
tags. Parsing is always *lenient*, as llama.cpp's ``common_chat_peg_parse`` runs it: input that ends inside
something yields NEED_MORE (with the position reached) instead of failing. Positions are byte offsets
into UTF-8 input. Private to bankml; ``bankml.content`` builds its parsers from these pieces.

``JsonScanner`` is bankml's own: a byte-at-a-time automaton with the same results as the JSON-mode parser
from the first byte of the value on, so that a stream need not be reparsed on every piece.
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


class Result:
    __slots__ = ("type", "start", "end", "nodes", "invalid")

    def __init__(self, type_, start, end=None, nodes=(), invalid=()):
        self.type = type_
        self.start = start
        self.end = start if end is None else end
        self.nodes = list(nodes)
        self.invalid = list(invalid)


class Node:
    """A tagged AST node: ``tag``, byte span, children, invalid UTF-8 runs [(pos, len)]."""
    __slots__ = ("tag", "start", "end", "children", "invalid")

    def __init__(self, tag, start, end, children, invalid):
        self.tag, self.start, self.end, self.children, self.invalid = tag, start, end, children, invalid

    def text(self, data):
        """llama.cpp's sanitized_text(): the span, invalid UTF-8 runs replaced by U+FFFD."""
        if self.start >= len(data):
            return b""
        if not self.invalid:
            return data[self.start:self.end]
        out, seg = [], self.start
        for pos, length in self.invalid:
            out.append(data[seg:pos])
            out.append(b"\xef\xbf\xbd")
            seg = pos + length
        out.append(data[seg:self.end])
        return b"".join(out)


class Eps:
    def parse(self, data, pos):
        return Result(SUCCESS, pos)


class End:
    def parse(self, data, pos):
        return Result(SUCCESS if pos >= len(data) else FAIL, pos)


class Lit:
    def __init__(self, literal):
        self.lit = literal.encode("utf-8") if isinstance(literal, str) else literal

    def parse(self, data, pos):
        p = pos
        for c in self.lit:
            if p >= len(data):
                return Result(NEED, pos, p)
            if data[p] != c:
                return Result(FAIL, pos)
            p += 1
        return Result(SUCCESS, pos, p)


class Seq:
    def __init__(self, *children):
        self.children = children

    def parse(self, data, pos):
        start, nodes, invalid = pos, [], []
        for child in self.children:
            r = child.parse(data, pos)
            if r.type == FAIL:
                return Result(FAIL, start, r.end)
            nodes += r.nodes
            invalid += r.invalid
            if r.type == NEED:
                return Result(NEED, start, r.end, nodes, invalid)
            pos = r.end
        return Result(SUCCESS, start, pos, nodes, invalid)


class Choice:
    def __init__(self, *children):
        self.children = children

    def parse(self, data, pos):
        for child in self.children:
            r = child.parse(data, pos)
            if r.type != FAIL:
                return r
        return Result(FAIL, pos)


class Repeat:
    def __init__(self, child, min_count, max_count):
        self.child, self.min, self.max = child, min_count, max_count

    def parse(self, data, pos):
        start, count, nodes, invalid = pos, 0, [], []
        while self.max == -1 or count < self.max:
            if pos >= len(data):
                break
            r = self.child.parse(data, pos)
            if r.type == SUCCESS:
                if r.end == pos:
                    break
                nodes += r.nodes
                invalid += r.invalid
                pos = r.end
                count += 1
                continue
            if r.type == NEED:
                nodes += r.nodes
                invalid += r.invalid
                return Result(NEED, start, r.end, nodes, invalid)
            break
        if self.min > 0 and count < self.min:
            if pos >= len(data):
                return Result(NEED, start, pos, nodes, invalid)
            return Result(FAIL, start, pos)
        return Result(SUCCESS, start, pos, nodes, invalid)


def optional(child):
    return Repeat(child, 0, 1)


def zero_or_more(child):
    return Repeat(child, 0, -1)


class Not:
    def __init__(self, child):
        self.child = child

    def parse(self, data, pos):
        r = self.child.parse(data, pos)
        if r.type == SUCCESS:
            return Result(FAIL, pos)
        if r.type == NEED:
            return Result(NEED, pos)
        return Result(SUCCESS, pos)


_C_SPACE = frozenset(b" \t\n\v\f\r")


class Space:
    def parse(self, data, pos):
        start = pos
        while pos < len(data) and data[pos] in _C_SPACE:
            pos += 1
        return Result(SUCCESS, start, pos)


class Chars:
    """A character class ``[...]`` / ``[^...]`` of plain characters and ranges, repeated min..max."""

    def __init__(self, ranges, negated=False, min_count=1, max_count=-1):
        self.ranges, self.negated, self.min, self.max = ranges, negated, min_count, max_count

    def parse(self, data, pos):
        start, count = pos, 0
        while self.max == -1 or count < self.max:
            status, cp, size = utf8_at(data, pos)
            if status == INCOMPLETE:
                if count >= self.min:
                    return Result(SUCCESS, start, pos)
                return Result(NEED, start, pos)
            if status == INVALID:
                if count >= self.min:
                    return Result(SUCCESS, start, pos)
                return Result(FAIL, start)
            matches = any(lo <= cp <= hi for lo, hi in self.ranges)
            if self.negated:
                matches = not matches
            if not matches:
                break
            pos += size
            count += 1
        if count < self.min:
            if pos >= len(data):
                return Result(NEED, start, pos)
            return Result(FAIL, start, pos)
        return Result(SUCCESS, start, pos)


def chars(spec, min_count=1, max_count=-1):
    """``chars("[0-9]")``: plain characters and ``a-b`` ranges only (all bankml needs)."""
    body = spec[1:-1]
    negated = body.startswith("^")
    if negated:
        body = body[1:]
    ranges, i = [], 0
    while i < len(body):
        if i + 2 < len(body) and body[i + 1] == "-":
            ranges.append((ord(body[i]), ord(body[i + 2])))
            i += 3
        else:
            ranges.append((ord(body[i]), ord(body[i])))
            i += 1
    return Chars(ranges, negated, min_count, max_count)


_HEX = frozenset(b"0123456789abcdefABCDEF")


class StringContent:
    """The inside of a quoted string up to (not including) the closing delimiter; an escape cut short
    by the end of the input is not consumed."""

    def __init__(self, delimiter):
        self.delim = ord(delimiter)

    def parse(self, data, start):
        pos, n = start, len(data)
        while pos < n:
            c = data[pos]
            if c == self.delim:
                return Result(SUCCESS, start, pos)
            if c == 0x5C:  # backslash
                save = pos
                pos += 1
                if pos >= n:
                    return Result(NEED, start, save)
                e = data[pos]
                if e == self.delim or e in b"\\/bfnrt":
                    pos += 1
                    continue
                if e == 0x75:  # u
                    pos += 1
                    for _ in range(4):
                        if pos >= n:
                            return Result(NEED, start, save)
                        if data[pos] not in _HEX:
                            return Result(FAIL, start)
                        pos += 1
                    continue
                return Result(FAIL, start)
            status, _, size = utf8_at(data, pos)
            if status == INCOMPLETE:
                return Result(NEED, start, pos)
            if status == INVALID:
                return Result(FAIL, start)
            pos += size
        return Result(NEED, start, pos)


class Until:
    """Everything up to the first of ``delimiters`` (or to the end of the input when there are none)."""

    def __init__(self, *delimiters):
        self.delims = [d.encode("utf-8") for d in delimiters]

    def _check(self, data, pos):
        # common_trie::check_at: 2 = complete match, 1 = partial (input ends inside a delimiter), 0 = none
        best = 0
        for d in self.delims:
            # the trie walks code points; for ASCII delimiters byte comparison is the same walk
            rest = data[pos:pos + len(d)]
            if rest == d:
                return 2
            if rest and d.startswith(rest) and pos + len(rest) == len(data):
                best = 1
        return best

    def parse(self, data, start):
        pos = last_valid = start
        invalid = []
        n = len(data)
        while pos < n:
            status, _, size = utf8_at(data, pos)
            if status == INCOMPLETE:
                return Result(NEED, start, last_valid, (), invalid)
            if status != OK:
                invalid.append((pos, size))
                pos += size
                last_valid = pos
                continue
            if self.delims and self._check(data, pos):
                return Result(SUCCESS, start, pos, (), invalid)
            pos += size
            last_valid = pos
        if last_valid == n:
            return Result(NEED, start, last_valid, (), invalid)
        return Result(SUCCESS, start, last_valid, (), invalid)


class Ref:
    """A rule (llama.cpp's rule/ref parsers): resolved lazily so rules can recurse. Rule AST nodes carry
    no tag; only their tagged descendants matter to the chat mapper, so they are not materialised."""

    def __init__(self, table, name):
        self.table, self.name = table, name

    def parse(self, data, pos):
        return self.table[self.name].parse(data, pos)


class Tag:
    def __init__(self, tag, child):
        self.tag, self.child = tag, child

    def parse(self, data, pos):
        r = self.child.parse(data, pos)
        if r.type == FAIL:
            return r
        node = Node(self.tag, r.start, r.end, r.nodes, r.invalid)
        return Result(r.type, r.start, r.end, [node], r.invalid)


def json_value_parser():
    """llama.cpp's ``p.json()``: json-value and its json-object / -array / -string / -number / -bool /
    -null rules, with the number's negative lookahead (a number at the end of the input is not complete)."""
    rules = {}
    value = Ref(rules, "json-value")
    ws = Space()
    string = Seq(Lit('"'), StringContent('"'), Lit('"'))
    int_part = Choice(Lit("0"), Seq(chars("[1-9]", 1, 1), chars("[0-9]", 0, -1)))
    frac = Seq(Lit("."), chars("[0-9]"))
    exp = Seq(Choice(Lit("e"), Lit("E")), optional(chars("[+-]", 1, 1)), chars("[0-9]"))
    number = Seq(optional(Lit("-")), int_part, optional(frac), optional(exp), Not(chars("[0-9.eE+-]", 1, 1)))
    member = Seq(string, ws, Lit(":"), ws, value)
    members = Seq(member, zero_or_more(Seq(ws, Lit(","), ws, member)))
    obj = Seq(Lit("{"), ws, Choice(Lit("}"), Seq(members, ws, Lit("}"))))
    elements = Seq(value, zero_or_more(Seq(ws, Lit(","), ws, value)))
    arr = Seq(Lit("["), ws, Choice(Lit("]"), Seq(elements, ws, Lit("]"))))
    rules["json-value"] = Choice(obj, arr, string, number, Choice(Lit("true"), Lit("false")), Lit("null"))
    return value


def visit(nodes):
    """Pre-order walk over tagged nodes, as common_peg_ast_arena::visit."""
    for node in nodes:
        yield node
        yield from visit(node.children)


# ---------------------------------------------------------------------------------------------------------
# An incremental scanner with the same results as json_value_parser() followed by the JSON-mode tail
# (whitespace, the closing fence when the value was opened by one, the end), for streams: it consumes each
# byte once instead of reparsing the answer on every piece. The grammar above is LL(1) over bytes (a choice
# is decided by the first byte; whitespace before "," or a closing bracket is skipped either way; a number
# ends at the first byte outside [0-9.eE+-]), which is what makes a byte-at-a-time automaton exact.
# It reports "unsure" (the caller reparses) in the one place it does not model: a UTF-8 sequence cut at the
# end of the input outside a string.

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
        self.stack = []           # b"{" / b"[" per open container
        self.mode = "value"
        self.failed = False
        self.value_end = None     # set when the top-level value is complete
        self.escape_at = None     # offset of a backslash whose escape is not complete yet
        self.hex_left = 0
        self.lit = b""            # literal being matched, and how far
        self.lit_i = 0
        self.ticks = 0
        self.pending = False      # a UTF-8 sequence cut at the end is waiting at self.pos

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
                self._fail()   # invalid UTF-8, or a non-ASCII character outside a string
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
            elif mode in ("obj_first", "obj_colon", "obj_val", "obj_after", "obj_key", "arr_first", "arr_after",
                          "arr_val", "trail") and b in _C_SPACE:
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
                    nxt = ("num_int" if mode == "num_int" and b in _DIGITS else "num_dot" if b == 0x2E
                           else "num_e" if b in (0x65, 0x45) else None)
                    if nxt is None and b not in _NUM_CONT:
                        self._close_value(pos)   # the number ends here; this byte belongs to what follows
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
