# Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.
# cython: boundscheck=True, wraparound=True
"""JSON schema to GBNF, as llama.cpp converts it.

The reference is the llama.cpp vendored by llama-cpp-python 0.3.36: ``common/json-schema-to-grammar.cpp`` (the
converter), called as ``json_schema_to_grammar(schema, /* force_gbnf = */ true)``, on the schema as
``common/json-schema.cpp`` reads it (``bankml.schema.reader``) from the JSON as nlohmann reads it
(``bankml.schema.jsontext``). The output is the same text, byte for byte.

llama.cpp works on the bytes of the UTF-8 text. To keep that behaviour (a pattern can, for instance, split a
multi-byte character between two literals), the converter below works on "byte strings": Python ``str``
objects whose characters are the UTF-8 bytes (latin-1 decoded). They are turned back into text at the end;
bytes that are not valid UTF-8 come back as surrogate escapes (``errors="surrogateescape"``).

setup.py compiles this file with Cython as it is (plain Python; ``converter.pxd`` makes ``_Converter`` a cdef
class and the hot functions cpdef; the directive line above keeps Python's indexing: negative indices and
IndexError). The compiled code recurses on the C stack, which Python's recursion limit does not bound, so it
stops at a nesting depth of ``_COMPILED_MAX_DEPTH`` (``bankml.schema.limits``; far past any real schema) and the
conversion or the build_grammar() is redone from the start by this same file run as plain Python, with the
reader run as plain Python too, whose RecursionError handling is the reference: the result is the same either way.
"""

import functools
import itertools
import re
import types

from bankml.engine._grammar import Rules
from bankml.errors import GrammarError, SchemaError
from bankml.schema.jsontext import _INT64_MAX, _INT64_MIN, _dump, load_schema
from bankml.schema.limits import (
    _COMPILED_MAX_DEPTH,
    _PREFIX,
    _LimitExceeded,
    _Meter,
    _plain_module,
    _raise_recursion_limit,
    _restore_recursion_limit,
    _TooDeep,
)
from bankml.schema.reader import (
    _INT_MAX,
    ALL_OF,
    ANY,
    ANY_OF,
    ARRAY,
    BOOLEAN,
    CONST,
    ENUM,
    FORMAT_DATE,
    FORMAT_NONE,
    FORMAT_TIME,
    FORMAT_UUID,
    INTEGER,
    NULL,
    NUMBER,
    OBJECT,
    REF,
    STRING,
    TUPLE,
    SchemaDocument,
    _Builder,
    _Fail,
    _Node,
    _stoi,
    _wrap64,
)
from bankml.schema.reader import _python_module as _reader_python_module

__all__ = [
    "json_schema_to_grammar",
    "json_schema_to_rules",
    "gbnf_format_literal",
    "GrammarBuilder",
    "build_grammar",
]


def _b(s):
    """Text to a byte string (one character per UTF-8 byte)."""
    if type(s) is str and s.isascii():  # its own byte string (isascii() reads a flag of the string)
        return s
    return s.encode("utf-8", "surrogatepass").decode("latin-1")


def _t(s):
    """A byte string back to text."""
    if type(s) is str and s.isascii():
        return s
    return s.encode("latin-1").decode("utf-8", "surrogateescape")


# ---------------------------------------------------------------------------------------------------------
# The converter (common/json-schema-to-grammar.cpp), on byte strings


def _build_repetition(item_rule, min_items, max_items, separator_rule=""):
    has_max = max_items != _INT_MAX
    if max_items == 0:
        return ""
    if min_items == 0 and max_items == 1:
        return item_rule + "?"
    if not separator_rule:
        if min_items == 1 and not has_max:
            return item_rule + "+"
        if min_items == 0 and not has_max:
            return item_rule + "*"
        return item_rule + "{" + str(min_items) + "," + (str(max_items) if has_max else "") + "}"
    result = (
        item_rule
        + " "
        + _build_repetition(
            "(" + separator_rule + " " + item_rule + ")",
            0 if min_items == 0 else min_items - 1,
            max_items - 1 if has_max else max_items,
        )
    )
    if min_items == 0:
        result = "(" + result + ")?"
    return result


class _ConversionError(Exception):
    def __init__(self, message, pointer):
        super().__init__(message)
        self.message = message
        self.pointer = pointer


def _neg64(v):
    return _wrap64(-v)


# Compiled, a function is a Cython function, not a Python one
_COMPILED = not isinstance(_neg64, types.FunctionType)


def _build_min_max_int(min_value, max_value, out, decimals_left=16, top_level=True):
    has_min = min_value != _INT64_MIN
    has_max = max_value != _INT64_MAX

    def digit_range(frm, to):
        out.append("[")
        if frm == to:
            out.append(frm)
        else:
            out.append(frm + "-" + to)
        out.append("]")

    def more_digits(min_digits, max_digits):
        out.append("[0-9]")
        if min_digits == max_digits and min_digits == 1:
            return
        out.append("{")
        out.append(str(min_digits))
        if max_digits != min_digits:
            out.append(",")
            if max_digits != _INT_MAX:
                out.append(str(max_digits))
        out.append("}")

    def dec(c):
        return chr(ord(c) - 1)

    def inc(c):
        return chr(ord(c) + 1)

    def uniform_range(frm, to):
        i = 0
        while i < len(frm) and i < len(to) and frm[i] == to[i]:
            i += 1
        if i > 0:
            out.append('"' + frm[:i] + '"')
        if i < len(frm) and i < len(to):
            if i > 0:
                out.append(" ")
            sub_len = len(frm) - i - 1
            if sub_len > 0:
                from_sub = frm[i + 1 :]
                to_sub = to[i + 1 :]
                sub_zeros = "0" * sub_len
                sub_nines = "9" * sub_len
                to_reached = False
                out.append("(")
                if from_sub == sub_zeros:
                    digit_range(frm[i], dec(to[i]))
                    out.append(" ")
                    more_digits(sub_len, sub_len)
                else:
                    out.append("[" + frm[i] + "] ")
                    out.append("(")
                    uniform_range(from_sub, sub_nines)
                    out.append(")")
                    if frm[i] < dec(to[i]):
                        out.append(" | ")
                        if to_sub == sub_nines:
                            digit_range(inc(frm[i]), to[i])
                            to_reached = True
                        else:
                            digit_range(inc(frm[i]), dec(to[i]))
                        out.append(" ")
                        more_digits(sub_len, sub_len)
                if not to_reached:
                    out.append(" | ")
                    digit_range(to[i], to[i])
                    out.append(" ")
                    uniform_range(sub_zeros, to_sub)
                out.append(")")
            else:
                out.append("[" + frm[i] + "-" + to[i] + "]")

    if has_min and has_max:
        if min_value < 0 and max_value < 0:
            out.append('"-" (')
            _build_min_max_int(_neg64(max_value), _neg64(min_value), out, decimals_left, True)
            out.append(")")
            return
        if min_value < 0:
            out.append('"-" (')
            _build_min_max_int(0, _neg64(min_value), out, decimals_left, True)
            out.append(") | ")
            min_value = 0
        min_s = str(min_value)
        max_s = str(max_value)
        for digits in range(len(min_s), len(max_s)):
            uniform_range(min_s, "9" * digits)
            min_s = "1" + "0" * digits
            out.append(" | ")
        uniform_range(min_s, max_s)
        return

    less_decimals = max(decimals_left - 1, 1)

    if has_min:
        if min_value < 0:
            out.append('"-" (')
            _build_min_max_int(_INT64_MIN, _neg64(min_value), out, decimals_left, False)
            out.append(") | [0] | [1-9] ")
            more_digits(0, decimals_left - 1)
        elif min_value == 0:
            if top_level:
                out.append("[0] | [1-9] ")
                more_digits(0, less_decimals)
            else:
                more_digits(1, decimals_left)
        elif min_value <= 9:
            c = chr(ord("0") + min_value)
            range_start = "1" if top_level else "0"
            if c > range_start:
                digit_range(range_start, dec(c))
                out.append(" ")
                more_digits(1, less_decimals)
                out.append(" | ")
            digit_range(c, "9")
            out.append(" ")
            more_digits(0, less_decimals)
        else:
            min_s = str(min_value)
            n = len(min_s)
            c = min_s[0]
            if c > "1":
                digit_range("1" if top_level else "0", dec(c))
                out.append(" ")
                more_digits(n, less_decimals)
                out.append(" | ")
            digit_range(c, c)
            out.append(" (")
            _build_min_max_int(int(min_s[1:]), _INT64_MAX, out, less_decimals, False)
            out.append(")")
            if c < "9":
                out.append(" | ")
                digit_range(inc(c), "9")
                out.append(" ")
                more_digits(n - 1, less_decimals)
        return

    if has_max:
        if max_value >= 0:
            if top_level:
                out.append('"-" [1-9] ')
                more_digits(0, less_decimals)
                out.append(" | ")
            _build_min_max_int(0, max_value, out, decimals_left, True)
        else:
            out.append('"-" (')
            _build_min_max_int(_neg64(max_value), _INT64_MAX, out, decimals_left, False)
            out.append(")")
        return

    raise _MinMaxError("At least one of min_value or max_value must be set")


class _MinMaxError(Exception):
    pass


SPACE_RULE = '| " " | "\\n"{1,2} [ \\t]{0,20}'

PRIMITIVE_RULES = {
    "boolean": ('("true" | "false")', ()),
    "decimal-part": ("[0-9]{1,16}", ()),
    "integral-part": ("[0] | [1-9] [0-9]{0,15}", ()),
    "number": (
        '("-"? integral-part) ("." decimal-part)? ([eE] [-+]? integral-part)?',
        ("integral-part", "decimal-part"),
    ),
    "integer": ('("-"? integral-part)', ("integral-part",)),
    "value": (
        "object | array | string | number | boolean | null",
        ("object", "array", "string", "number", "boolean", "null"),
    ),
    "object": (
        '"{" space ( string ":" space value ("," space string ":" space value)* )? space "}"',
        ("string", "value"),
    ),
    "array": ('"[" space ( value ("," space value)* )? space "]"', ("value",)),
    "uuid": (
        '"\\"" [0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12} "\\""',
        (),
    ),
    "char": ('[^"\\\\\\x7F\\x00-\\x1F] | [\\\\] (["\\\\bfnrt] | "u" [0-9a-fA-F]{4})', ()),
    "string": ('"\\"" char* "\\""', ("char",)),
    "null": ('"null"', ()),
}

STRING_FORMAT_RULES = {
    "date": ('[0-9]{4} "-" ( "0" [1-9] | "1" [0-2] ) "-" ( "0" [1-9] | [1-2] [0-9] | "3" [0-1] )', ()),
    "time": (
        '([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{3} )? '
        '( "Z" | ( "+" | "-" ) ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] )',
        (),
    ),
    "date-time": ('date "T" time', ("date", "time")),
    "date-string": ('"\\"" date "\\""', ("date",)),
    "time-string": ('"\\"" time "\\""', ("time",)),
    "date-time-string": ('"\\"" date-time "\\""', ("date-time",)),
}

_RESERVED_NAMES = frozenset(["root"]) | frozenset(PRIMITIVE_RULES) | frozenset(STRING_FORMAT_RULES)

_INVALID_RULE_CHARS_RE = re.compile(r"[^a-zA-Z0-9-]+")


def _escape_rule_name(name):
    """name with each run of characters outside [a-zA-Z0-9-] made one '-' (llama.cpp's INVALID_RULE_CHARS_RE).
    Rule names are nearly always valid already: one pass over the characters (a C loop once compiled, with
    `c` a Py_UCS4: converter.pxd) tells, and only the others take the regex (a regex pass on every name was
    1.9 ms of o9882's 5.8; a check by str methods cost 0.8 ms more than this loop)."""
    for c in name:
        if not (("a" <= c <= "z") or ("A" <= c <= "Z") or ("0" <= c <= "9") or c == "-"):
            return _INVALID_RULE_CHARS_RE.sub("-", name)
    return name


MAX_PATTERN_DEPTH = 100

_NON_LITERAL_SET = frozenset("|.()[]{}*+?^$")
_ESCAPED_IN_REGEXPS_BUT_NOT_IN_LITERALS = frozenset("^$.[]()|{}*+?")
_HEX = frozenset("0123456789abcdefABCDEF")


def _format_literal(literal):
    # llama.cpp's regex_replace of [\r\n"\\] by their escapes; the backslashes first, so that no inserted
    # backslash is escaped again
    if "\\" in literal:
        literal = literal.replace("\\", "\\\\")
    if '"' in literal:
        literal = literal.replace('"', '\\"')
    if "\n" in literal:
        literal = literal.replace("\n", "\\n")
    if "\r" in literal:
        literal = literal.replace("\r", "\\r")
    return '"' + literal + '"'


def gbnf_format_literal(literal):
    """llama.cpp's gbnf_format_literal(): a GBNF string literal for text."""
    return _t(_format_literal(_b(literal)))


def _gbnf_escape_length(pattern, pos):
    if pos + 1 >= len(pattern) or pattern[pos] != "\\":
        return 0
    e = pattern[pos + 1]
    if e == "x":
        n_hex = 2
    elif e == "u":
        n_hex = 4
    elif e == "U":
        n_hex = 8
    elif e in 'trn\\"[]-':
        return 2
    else:
        return 0
    if pos + 2 + n_hex > len(pattern):
        return 0
    for i in range(pos + 2, pos + 2 + n_hex):
        if pattern[i] not in _HEX:
            return 0
    return 2 + n_hex


def _generate_constant_rule(value):
    return _format_literal(_b(_dump(value)))


class _Unsupported(Exception):
    pass


class _Invalid(Exception):
    pass


class _Converter:
    def __init__(self, dotall=False, meter=None):
        self.dotall = dotall
        self.rules = {"space": SPACE_RULE}
        self.refs_being_resolved = set()
        self.errors = []
        self.warnings = []
        self.error_pointer = None
        self.meter = meter or _Meter(None)
        self.pointer = "#"  # the node being visited: where a limit is reported
        self.depth = 0
        self.meter.output(len("space ::= \n") + len(SPACE_RULE), "#")

    def add_rule(self, name, rule):
        esc_name = _escape_rule_name(name)
        rules = self.rules
        meter = self.meter
        meter.work(len(rule), self.pointer)
        existing = rules.get(esc_name)
        if existing is None:
            meter.output(len(esc_name) + len(rule) + 6, self.pointer)
            rules[esc_name] = rule
            return esc_name
        if existing == rule:
            return esc_name
        i = 0
        while (esc_name + str(i)) in rules and rules[esc_name + str(i)] != rule:
            i += 1
        key = esc_name + str(i)
        if key not in rules:
            meter.output(len(key) + len(rule) + 6, self.pointer)
        rules[key] = rule
        return key

    def _error(self, message, pointer):
        if self.error_pointer is None:
            self.error_pointer = pointer
        self.meter.output(len(message), pointer)
        self.errors.append(message)

    def generate_union_rule(self, name, alt_schemas):
        return " | ".join(
            self.visit(alt, name + ("alternative-" if name == "" else "-") + str(i))
            for i, alt in enumerate(alt_schemas)
        )

    def visit_pattern(self, pattern, name, node):
        # add_rule() only ever appends keys (an existing rule is never changed), so the rules as they were
        # are the first `snapshot` keys: reverting drops the keys added since (llama.cpp copies the map)
        snapshot = len(self.rules)
        try:
            return self.pattern_to_rule(pattern, name)
        except _Unsupported as err:
            self._revert(snapshot)
            warning = "pattern " + pattern + " is not supported (" + str(err) + "), accepting any string"
            self.meter.output(len(warning), node.path)
            self.warnings.append(warning)
            return self.add_rule(name, self.add_primitive("string", PRIMITIVE_RULES["string"]))
        except _Invalid as err:
            self._revert(snapshot)
            self._error("Invalid pattern " + pattern + ": " + str(err), node.path)
            return ""

    def _revert(self, n):
        extra = len(self.rules) - n
        if extra > 0:
            for key in list(itertools.islice(reversed(self.rules), extra)):
                del self.rules[key]

    def pattern_to_rule(self, pattern, name):
        if len(pattern) < 2 or pattern[0] != "^" or pattern[-1] != "$":
            raise _Unsupported("not anchored with '^' and '$'")
        sub_pattern = pattern[1:-1]
        sub_rule_ids = {}
        length = len(sub_pattern)
        state = {"i": 0, "depth": 0}

        def to_rule(ls):
            s, is_literal = ls
            return '"' + s + '"' if is_literal else s

        def get_dot():
            rule = "[\\U00000000-\\U0010FFFF]" if self.dotall else "[^\\x0A\\x0D]"
            return self.add_rule("dot", rule)

        def transform():
            seq = []

            def join_seq():
                ret = []
                literal = []
                for item in seq:
                    if item[1]:
                        literal.append(item[0])
                    else:
                        if literal:
                            ret.append(("".join(literal), True))
                            literal = []
                        ret.append(item)
                if literal:
                    ret.append(("".join(literal), True))
                return (" ".join(to_rule(x) for x in ret), False)

            while state["i"] < length:
                i = state["i"]
                c = sub_pattern[i]
                if c == ".":
                    seq.append((get_dot(), False))
                    state["i"] = i + 1
                elif c == "(":
                    i += 1
                    if i < length and sub_pattern[i] == "?":
                        if i + 1 < length and sub_pattern[i + 1] == ":":
                            i += 2
                        else:
                            raise _Unsupported("unsupported group syntax")
                    state["i"] = i
                    state["depth"] += 1
                    if state["depth"] > MAX_PATTERN_DEPTH:
                        raise _Unsupported("pattern nesting too deep")
                    seq.append(("(" + to_rule(transform()) + ")", False))
                elif c == ")":
                    state["i"] = i + 1
                    if state["depth"] == 0:
                        raise _Invalid("unbalanced parentheses")
                    state["depth"] -= 1
                    return join_seq()
                elif c == "^" or c == "$":
                    raise _Unsupported("anchor inside the pattern")
                elif c == "[":
                    sq = [c]
                    i += 1
                    while i < length and sub_pattern[i] != "]":
                        if sub_pattern[i] == "\\":
                            n = _gbnf_escape_length(sub_pattern, i)
                            if n == 0:
                                raise _Unsupported("unsupported escape in character class: " + sub_pattern[i : i + 2])
                            sq.append(sub_pattern[i : i + n])
                            i += n
                        else:
                            sq.append(sub_pattern[i])
                            i += 1
                    if i >= length:
                        raise _Invalid("unterminated character class")
                    sq.append("]")
                    state["i"] = i + 1
                    seq.append(("".join(sq), False))
                elif c == "|":
                    seq.append(("|", False))
                    state["i"] = i + 1
                elif c == "*" or c == "+" or c == "?":
                    if not seq:
                        raise _Invalid("nothing to repeat")
                    seq[-1] = (to_rule(seq[-1]) + c, False)
                    state["i"] = i + 1
                elif c == "{":
                    j = sub_pattern.find("}", i + 1)
                    if j < 0:
                        raise _Unsupported("unterminated curly brackets")
                    inner = sub_pattern[i + 1 : j]
                    state["i"] = j + 1
                    nums = inner.split(",")
                    min_times = 0
                    max_times = _INT_MAX
                    if len(nums) != 1 and len(nums) != 2:
                        raise _Unsupported("wrong number of values in curly brackets")
                    if len(nums) == 1:
                        v = _stoi(nums[0])
                        if v is None:
                            raise _Unsupported("invalid number in curly brackets")
                        min_times = max_times = v
                    else:
                        if nums[0]:
                            v = _stoi(nums[0])
                            if v is None:
                                raise _Unsupported("invalid number in curly brackets")
                            min_times = v
                        if nums[1]:
                            v = _stoi(nums[1])
                            if v is None:
                                raise _Unsupported("invalid number in curly brackets")
                            max_times = v
                    if not seq:
                        raise _Invalid("nothing to repeat")
                    sub, sub_is_literal = seq[-1]
                    if not sub_is_literal:
                        sub_id = sub_rule_ids.get(sub, "")
                        if not sub_id:
                            sub_rule_ids[sub] = ""
                            sub_id = self.add_rule(name + "-" + str(len(sub_rule_ids)), sub)
                            sub_rule_ids[sub] = sub_id
                        sub = sub_id
                    seq[-1] = (
                        _build_repetition('"' + sub + '"' if sub_is_literal else sub, min_times, max_times, ""),
                        False,
                    )
                else:
                    literal = []
                    while i < length:
                        ch = sub_pattern[i]
                        if ch == "\\":
                            if i == length - 1:
                                raise _Invalid("trailing backslash")
                            nxt = sub_pattern[i + 1]
                            if nxt in _ESCAPED_IN_REGEXPS_BUT_NOT_IN_LITERALS:
                                literal.append(nxt)
                                i += 2
                            else:
                                n = _gbnf_escape_length(sub_pattern, i)
                                if n == 0:
                                    raise _Unsupported("unsupported escape: " + sub_pattern[i : i + 2])
                                literal.append(sub_pattern[i : i + n])
                                i += n
                        elif ch == '"':
                            literal.append('\\"')
                            i += 1
                        elif ch not in _NON_LITERAL_SET and (
                            i == length - 1
                            or not literal
                            or sub_pattern[i + 1] == "."
                            or sub_pattern[i + 1] not in _NON_LITERAL_SET
                        ):
                            literal.append(ch)
                            i += 1
                        else:
                            break
                    state["i"] = i
                    if not literal:
                        raise _Unsupported("unsupported character: " + c)
                    seq.append(("".join(literal), True))
            return join_seq()

        rule = to_rule(transform())
        if state["depth"] != 0:
            raise _Invalid("unbalanced parentheses")
        return self.add_rule(name, '"\\"" (' + rule + ') "\\""')

    def not_strings(self, strings):
        # a trie over code points; children in code point order
        root = {}
        terminal_root = False
        for word in strings:
            word = _t(word)
            node = root
            for ch in word:
                node = node.setdefault(ch, {})
            if node is root:
                terminal_root = True
        char_rule = self.add_primitive("char", PRIMITIVE_RULES["char"])
        out = ['["] ( ']

        def visit(node, depth):
            if _COMPILED and depth > _COMPILED_MAX_DEPTH:
                raise _TooDeep()
            rejects = []
            first = True
            for ch in sorted(node):
                child = node[ch]
                c = _b(ch)
                rejects.append(c)
                if first:
                    first = False
                else:
                    out.append(" | ")
                out.append("[" + c + "]")
                if child:
                    out.append(" (")
                    visit(child, depth + 1)
                    out.append(")")
                else:
                    out.append(" " + char_rule + "+")
            if node:
                out.append(' | [^"' + "".join(rejects) + "] " + char_rule + "*")

        visit(root, 0)
        out.append(" )")
        if not terminal_root:
            out.append("?")
        out.append(' ["]')
        return "".join(out)

    def resolve_ref(self, node):
        ref = _b(node.ref)
        pos = ref.find("#")
        fragment = ref[pos + 1 :] if pos >= 0 else ref
        ref_name = "ref" + _escape_rule_name(fragment)
        if ref_name not in self.rules and ref not in self.refs_being_resolved:
            if node.target is None:
                self._error("Unresolved $ref " + ref, node.path)
                return ""
            self.refs_being_resolved.add(ref)
            ref_name = self.visit(node.target, ref_name)
            self.refs_being_resolved.discard(ref)
        return ref_name

    def build_object_rule(self, properties, required, name, additional):
        required_props = []
        optional_props = []
        prop_kv_rule_names = {}
        prop_names = []
        prefix = name + ("" if name == "" else "-")
        for prop_name, prop_schema in properties:
            bname = _b(prop_name)
            prop_rule_name = self.visit(prop_schema, prefix + bname)
            prop_kv_rule_names[bname] = self.add_rule(
                prefix + bname + "-kv", _format_literal(_b(_dump(prop_name))) + ' space ":" space ' + prop_rule_name
            )
            if prop_name in required:
                required_props.append(bname)
            else:
                optional_props.append(bname)
            prop_names.append(bname)
        if additional is not None:
            sub_name = prefix + "additional"
            if additional.kind != ANY:
                value_rule = self.visit(additional, sub_name + "-value")
            else:
                value_rule = self.add_primitive("value", PRIMITIVE_RULES["value"])
            if not prop_names:
                key_rule = self.add_primitive("string", PRIMITIVE_RULES["string"])
            else:
                key_rule = self.add_rule(sub_name + "-k", self.not_strings(prop_names))
            kv_rule = self.add_rule(sub_name + "-kv", key_rule + ' ":" space ' + value_rule)
            # keyed "*" as in llama.cpp, so a property named "*" behaves as it does there
            prop_kv_rule_names["*"] = kv_rule
            optional_props.append("*")

        if not required_props and not optional_props:
            return '"{" space "}"'

        rule = ['"{" space ']
        for i, p in enumerate(required_props):
            if i > 0:
                rule.append(' "," space ')
            rule.append(prop_kv_rule_names[p])

        if optional_props:
            rule.append(" (")
            if required_props:
                rule.append(' "," space ( ')

            # llama.cpp's get_recursive_refs(), which rebuilds the chain of "-rest" rules from every optional
            # property (cubic in their number); the chain is built once here, from the end, which adds the
            # rules in the same order as its first (deepest) call, and reused, as its later calls find them
            ks = optional_props
            n = len(ks)
            rest_name = [None] * n
            opt = [""] * (n + 1)
            for j in range(n - 1, -1, -1):
                k = ks[j]
                if j + 1 < n:
                    rest_name[j] = self.add_rule(prefix + k + "-rest", opt[j + 1])
                if j > 0:
                    res = '( "," space ' + prop_kv_rule_names[k] + " )" + ("*" if k == "*" else "?")
                    if j + 1 < n:
                        res += " " + rest_name[j]
                    opt[j] = res
            for i in range(n):
                if i > 0:
                    rule.append(" | ")
                k = ks[i]
                kv_rule_name = prop_kv_rule_names[k]
                res = kv_rule_name + (" " + '( "," space ' + kv_rule_name + " )" + "*" if k == "*" else "")
                if i + 1 < n:
                    res += " " + rest_name[i]
                rule.append(res)
            if required_props:
                rule.append(" )")
            rule.append(" )?")
        rule.append(' space "}"')
        return "".join(rule)

    def add_primitive(self, name, rule):
        content, deps = rule
        n = self.add_rule(name, content)
        for dep in deps:
            dep_rule = PRIMITIVE_RULES.get(dep) or STRING_FORMAT_RULES.get(dep)
            if dep_rule is None:
                self.errors.append("Rule " + dep + " not known")
                continue
            if dep not in self.rules:
                self.add_primitive(dep, dep_rule)
        return n

    def visit_primitive(self, rule_name, typ):
        return self.add_primitive("root" if rule_name == "root" else typ, PRIMITIVE_RULES[typ])

    def visit_all_of(self, node, name, rule_name):
        required = set()
        properties = []
        enum_values = {}

        def add_component(comp, is_required):
            if comp.kind == REF:
                # llama.cpp follows a $ref to a $ref without end when they form a cycle (a stack overflow, it
                # crashes); the chain is followed here with a check, iteratively
                seen = set()
                while comp.kind == REF and comp.target is not None:
                    if id(comp) in seen:
                        raise _ConversionError(
                            "JSON schema conversion failed:\nallOf reaches a cycle of $refs "
                            "that refer only to each other (" + comp.ref + ")",
                            comp.path,
                        )
                    seen.add(id(comp))
                    comp = comp.target
                if comp.kind != REF:
                    add_component(comp, is_required)
            elif comp.kind == OBJECT:
                for prop_name, prop_schema, _req in comp.properties:
                    properties.append((prop_name, prop_schema))
                    if is_required:
                        required.add(prop_name)
            elif comp.kind == ENUM:
                for v in comp.values:
                    lit = _generate_constant_rule(v)
                    enum_values[lit] = enum_values.get(lit, 0) + 1

        for child in node.children:
            if child.kind == ANY_OF:
                for alt in child.children:
                    add_component(alt, False)
            else:
                add_component(child, True)
        if enum_values:
            inter = [lit for lit in sorted(enum_values) if enum_values[lit] == len(node.children)]
            if inter:
                return self.add_rule(rule_name, "(" + " | ".join(inter) + ")")
        return self.add_rule(rule_name, self.build_object_rule(properties, required, name, None))

    def visit(self, node, name):
        self.depth += 1
        try:
            if _COMPILED and self.depth > _COMPILED_MAX_DEPTH:
                raise _TooDeep()
            meter = self.meter
            self.pointer = node.path
            meter.work(len(name), node.path)
            meter.ticks += 1
            if meter.ticks & 63 == 0:
                meter.clock(node.path)
            if name in _RESERVED_NAMES:
                rule_name = name + "-"
            elif name == "":
                rule_name = "root"
            else:
                rule_name = name
            sub_name = name + ("" if name == "" else "-")
            kind = node.kind

            if kind == REF:
                return self.add_rule(rule_name, self.resolve_ref(node))
            if kind == ANY_OF:
                return self.add_rule(rule_name, self.generate_union_rule(name, node.children))
            if kind == ALL_OF:
                return self.visit_all_of(node, name, rule_name)
            if kind == CONST:
                return self.add_rule(rule_name, _generate_constant_rule(node.value))
            if kind == ENUM:
                return self.add_rule(
                    rule_name, "(" + " | ".join([_generate_constant_rule(v) for v in node.values]) + ")"
                )
            if kind == OBJECT:
                if not node.properties and node.additional is not None and node.additional.kind == ANY:
                    return self.add_rule(rule_name, self.add_primitive("object", PRIMITIVE_RULES["object"]))
                required = {p for p, _s, req in node.properties if req}
                return self.add_rule(
                    rule_name,
                    self.build_object_rule([(p, s) for p, s, _r in node.properties], required, name, node.additional),
                )
            if kind == TUPLE:
                parts = ['"[" space ']
                for i, item in enumerate(node.items):
                    if i > 0:
                        parts.append(' "," space ')
                    parts.append(self.visit(item, sub_name + "tuple-" + str(i)))
                parts.append(' space "]"')
                return self.add_rule(rule_name, "".join(parts))
            if kind == ARRAY:
                if node.items.kind == ANY and node.min_items == 0 and node.max_items < 0:
                    return self.visit_primitive(rule_name, "array")
                item_rule_name = self.visit(node.items, sub_name + "item")
                max_items = _INT_MAX if node.max_items < 0 else node.max_items
                return self.add_rule(
                    rule_name,
                    '"[" space '
                    + _build_repetition(item_rule_name, node.min_items, max_items, '"," space')
                    + ' space "]"',
                )
            if kind == STRING:
                if node.pattern:
                    return self.visit_pattern(_b(node.pattern), rule_name, node)
                if node.format == FORMAT_UUID:
                    return self.visit_primitive(rule_name, "uuid")
                if node.format != FORMAT_NONE:
                    prim = {FORMAT_DATE: "date", FORMAT_TIME: "time"}.get(node.format, "date-time") + "-string"
                    return self.add_rule(rule_name, self.add_primitive(prim, STRING_FORMAT_RULES[prim]))
                if node.min_length > 0 or node.max_length >= 0:
                    char_rule = self.add_primitive("char", PRIMITIVE_RULES["char"])
                    max_len = _INT_MAX if node.max_length < 0 else node.max_length
                    return self.add_rule(
                        rule_name, '"\\"" ' + _build_repetition(char_rule, node.min_length, max_len) + ' "\\""'
                    )
                return self.visit_primitive(rule_name, "string")
            if kind == INTEGER:
                if node.minimum == _INT64_MIN and node.maximum == _INT64_MAX:
                    return self.visit_primitive(rule_name, "integer")
                out = ["("]
                try:
                    _build_min_max_int(node.minimum, node.maximum, out)
                except _MinMaxError as e:
                    raise _ConversionError("JSON schema conversion failed:\n" + str(e), node.path) from None
                out.append(")")
                return self.add_rule(rule_name, "".join(out))
            if kind == NUMBER:
                return self.visit_primitive(rule_name, "number")
            if kind == BOOLEAN:
                return self.visit_primitive(rule_name, "boolean")
            if kind == NULL:
                return self.visit_primitive(rule_name, "null")
            if kind == ANY:
                return self.add_rule(rule_name, self.add_primitive("value", PRIMITIVE_RULES["value"]))
            return ""
        finally:
            self.depth -= 1

    def format_grammar(self):
        rules = self.rules
        parts = []
        for k in sorted(rules):
            parts.append(k)
            parts.append(" ::= ")
            parts.append(rules[k])
            parts.append("\n")
        return "".join(parts)


def json_schema_to_grammar(schema, limits=None):
    """Convert a JSON schema (a dict, or JSON text) to GBNF, as llama.cpp's
    ``json_schema_to_grammar(schema, force_gbnf=true)`` does.

    Returns ``(grammar, warnings)``: the grammar text, byte for byte llama.cpp's, and the parts llama.cpp
    converted only loosely (unsupported patterns, which accept any string), in its wording. Raises
    ``SchemaError`` for a schema llama.cpp refuses, with llama.cpp's message and the JSON pointer of the
    offending node, and for a schema whose conversion would pass ``limits`` (a ``SchemaLimits``, default
    ``DEFAULT_LIMITS``; llama.cpp has no bound there), naming the limit.
    """
    _raise_recursion_limit()
    try:
        if limits is None and isinstance(schema, (str, bytes)) and len(schema) <= _CACHED_TEXT_MAX:
            grammar, warnings = _convert_text(schema)
            return grammar, list(warnings)
        return _convert(load_schema(schema, limits), limits)
    finally:
        _restore_recursion_limit()


_CACHED_TEXT_MAX = 65536  # schema texts up to this size are cached (256 of them)


@functools.lru_cache(maxsize=256)
def _convert_text(text):
    grammar, warnings = _convert(load_schema(text))
    return grammar, tuple(warnings)


def _convert(doc, limits=None):
    try:
        return _convert_here(doc, limits)
    except _TooDeep:
        return _python_module()._convert(doc, limits)


def _convert_here(doc, limits):
    # the converter recurses as the schema nests (and along $ref chains): the caller raised the recursion
    # limit for the call (counted across threads), and RecursionError becomes SchemaError
    meter = _Meter(limits)
    builder = _Builder(doc, meter)
    try:
        root = builder.build()
        conv = _Converter(False, meter)
        conv.visit(root, "")
    except _Fail as e:
        raise SchemaError("JSON schema conversion failed:\n" + e.message, e.pointer) from None
    except (_ConversionError, _LimitExceeded) as e:
        raise SchemaError(_t(e.message), e.pointer) from None
    except RecursionError:
        raise SchemaError(
            "JSON schema conversion failed:\nthe schema nests too deeply (through $ref or "
            "nesting) to convert, or recurses through allOf (where llama.cpp overflows its stack)",
            "#",
        ) from None
    finally:
        # the $ref nodes of a recursive schema make cycles: cut, the tree goes as soon as it is dropped
        for ref in builder.pending:
            ref.target = None
    if conv.errors:
        raise SchemaError(_t("JSON schema conversion failed:\n" + "\n".join(conv.errors)), conv.error_pointer or "#")
    return _t(conv.format_grammar()), [_t(w) for w in conv.warnings]


def json_schema_to_rules(schema, vocab=None, limits=None):
    """Convert a JSON schema and parse the grammar, as llama.cpp does before it samples with it.

    Returns ``(rules, grammar, warnings)``. A schema that converts to a grammar llama.cpp's GBNF parser then
    refuses (``minItems``/``minLength`` past its 2000-repetition cap, for instance) raises SchemaError here,
    with the parser's reason; ``__cause__`` is the GrammarError.
    """

    grammar, warnings = json_schema_to_grammar(schema, limits)
    try:
        rules = Rules.parse(grammar, vocab=vocab)
    except GrammarError as e:
        raise SchemaError(
            _PREFIX + "the grammar converted from the schema is refused by the GBNF parser: " + str(e), "#"
        ) from e
    return rules, grammar, warnings


class GrammarBuilder:
    """llama.cpp's ``common_grammar_builder``: what a ``build_grammar`` callback adds rules with."""

    def __init__(self, converter):
        self._conv = converter

    def add_rule(self, name, rule):
        """Adds a rule (renamed ``name0``, ``name1``... when the name is taken by a different rule); returns
        the name it got."""
        return _t(self._conv.add_rule(_b(name), _b(rule)))

    def add_schema(self, name, node):
        """Adds the rules of a schema node (a ``SchemaDocument``'s root or one of its nodes, or a schema, read
        here); ``name`` "root" makes it the root rule. Returns the rule name."""
        if not isinstance(node, _Node):
            node = SchemaDocument(node, self._conv.meter.limits).root
        return _t(self._conv.visit(node, "" if name == "root" else _b(name)))


def build_grammar(callback, dotall=False, limits=None):
    """llama.cpp's ``build_grammar(cb, options)``: ``callback(builder)`` adds rules and schemas to one
    converter (``dotall``: ``.`` in patterns also matches newlines); the grammar text is returned, or
    SchemaError raised with llama.cpp's message for what the converter could not do, or naming the limit
    of ``limits`` (a ``SchemaLimits``) the conversion would pass."""
    conv = _Converter(dotall, _Meter(limits))
    _raise_recursion_limit()
    try:
        callback(GrammarBuilder(conv))
    except _TooDeep:
        # done again from the start in plain Python (the callback called again)
        return _python_module().build_grammar(callback, dotall, limits)
    except (_ConversionError, _LimitExceeded) as e:
        raise SchemaError(_t(e.message), e.pointer) from None
    except RecursionError:
        raise SchemaError(
            "JSON schema conversion failed:\nthe schema nests too deeply (through $ref or "
            "nesting) to convert, or recurses through allOf (where llama.cpp overflows its stack)",
            "#",
        ) from None
    finally:
        _restore_recursion_limit()
    if conv.errors:
        raise SchemaError(_t("JSON schema conversion failed:\n" + "\n".join(conv.errors)), conv.error_pointer or "#")
    return _t(conv.format_grammar())


_PYTHON_MODULE = None


def _python_module():
    """This file run as plain Python (bankml.schema._converter_python), where deep recursion ends in RecursionError;
    it reads schemas with the reader run as plain Python too (whose nodes are the compiled ones)."""
    global _PYTHON_MODULE
    if _PYTHON_MODULE is None:
        _PYTHON_MODULE = _plain_module("_converter_python", "converter.py", _Builder=_reader_python_module()._Builder)
    return _PYTHON_MODULE
