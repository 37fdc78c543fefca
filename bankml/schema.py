"""JSON schema to GBNF, as llama.cpp converts it.

Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

The reference is the llama.cpp vendored by llama-cpp-python 0.3.36: ``common/json-schema.cpp`` (the schema
reader, which refuses what it cannot convert) and ``common/json-schema-to-grammar.cpp`` (the converter), called
as ``json_schema_to_grammar(schema, /* force_gbnf = */ true)``. The output is the same text, byte for byte.

llama.cpp works on the bytes of the UTF-8 text. To keep that behaviour (a pattern can, for instance, split a
multi-byte character between two literals), the converter below works on "byte strings": Python ``str``
objects whose characters are the UTF-8 bytes (latin-1 decoded). They are turned back into text at the end;
bytes that are not valid UTF-8 come back as surrogate escapes (``errors="surrogateescape"``).
"""
import json
import math
import re
import sys

from .errors import SchemaError

__all__ = ["json_schema_to_grammar", "load_schema", "SchemaError", "MAX_JSON_DEPTH"]

MAX_JSON_DEPTH = 512

_INT_MAX = 2**31 - 1
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_UINT64_MAX = 2**64 - 1


def _wrap64(v):
    v &= 0xFFFFFFFFFFFFFFFF
    return v - 2**64 if v >= 2**63 else v


def _wrap32(v):
    v &= 0xFFFFFFFF
    return v - 2**32 if v >= 2**31 else v


def _b(s):
    """Text to a byte string (one character per UTF-8 byte)."""
    return s.encode("utf-8", "surrogatepass").decode("latin-1")


def _t(s):
    """A byte string back to text."""
    return s.encode("latin-1").decode("utf-8", "surrogateescape")


# ---------------------------------------------------------------------------------------------------------
# JSON values as nlohmann::ordered_json holds them


def _is_int(v):
    return type(v) is int


def _is_number(v):
    return type(v) is int or type(v) is float


class _JsonReadError(Exception):
    pass


def _parse_int(s):
    v = int(s)
    if _INT64_MIN <= v <= _UINT64_MAX:
        return v
    # nlohmann falls back to a double for an integer too large for 64 bits
    return _parse_float(s)


def _parse_float(s):
    v = float(s)
    if math.isinf(v):
        raise _JsonReadError("number overflow parsing '%s'" % s)
    return v


def _parse_constant(s):
    raise _JsonReadError("invalid literal %s" % s)


def _pairs(pairs):
    # the last duplicate key wins, in the position of the first (ordered_json's operator[])
    d = {}
    for k, v in pairs:
        d[k] = v
    return d


def _check_tree(value):
    """Depth and string checks on a parsed tree, and plain JSON types for a tree given as Python objects.
    Iterative, so a hostile tree cannot exhaust the stack."""
    top = [None]

    def norm(v):
        t = type(v)
        if v is None or t is bool or t is str:
            return v
        if t is int:
            return v if _INT64_MIN <= v <= _UINT64_MAX else float(v)
        if t is float:
            if math.isnan(v) or math.isinf(v):
                raise SchemaError("JSON schema error at #: %r is not a JSON number" % v, "#")
            return v
        if isinstance(v, bool):
            return bool(v)
        if isinstance(v, int):
            return norm(int(v))
        if isinstance(v, float):
            return norm(float(v))
        if isinstance(v, str):
            return str(v)
        if isinstance(v, dict):
            return v
        if isinstance(v, (list, tuple)):
            return v
        raise SchemaError("JSON schema error at #: %s is not a JSON value" % type(v).__name__, "#")

    # (source, depth, parent container, key) - the copy is built as it goes
    work = [(value, 1, top, 0)]
    while work:
        v, depth, parent, key = work.pop()
        v = norm(v)
        if isinstance(v, dict):
            if depth > MAX_JSON_DEPTH:
                raise SchemaError("JSON schema error at #: nesting deeper than %d" % MAX_JSON_DEPTH, "#")
            out = {}
            parent[key] = out
            for k, item in v.items():
                if not isinstance(k, str):
                    raise SchemaError("JSON schema error at #: object key %r is not a string" % (k,), "#")
                _check_string(k)
                out[str(k)] = None
                work.append((item, depth + 1, out, str(k)))
        elif isinstance(v, (list, tuple)):
            if depth > MAX_JSON_DEPTH:
                raise SchemaError("JSON schema error at #: nesting deeper than %d" % MAX_JSON_DEPTH, "#")
            out = [None] * len(v)
            parent[key] = out
            for i, item in enumerate(v):
                work.append((item, depth + 1, out, i))
        else:
            if type(v) is str:
                _check_string(v)
            parent[key] = v
    return top[0]


_SURROGATE_RE = re.compile("[\ud800-\udfff]")


def _check_string(s):
    if _SURROGATE_RE.search(s):
        raise SchemaError("JSON schema error at #: a string holds a lone UTF-16 surrogate", "#")


def load_schema(schema):
    """A schema as llama.cpp's JSON reader holds it: from JSON text (str or bytes) or from Python objects.

    Integers keep being integers and numbers with a fraction or an exponent are floats (``2.0`` stays a
    float), object keys keep their order, the last of duplicate keys wins, nesting deeper than
    ``MAX_JSON_DEPTH`` is refused. Raises SchemaError for text that is not JSON.
    """
    if isinstance(schema, (bytes, bytearray)):
        try:
            schema = bytes(schema).decode("utf-8")
        except UnicodeDecodeError as e:
            raise SchemaError("JSON schema error at #: invalid UTF-8 in the schema text (%s)" % e, "#") from None
    if isinstance(schema, str):
        try:
            value = json.loads(schema, object_pairs_hook=_pairs, parse_float=_parse_float, parse_int=_parse_int,
                               parse_constant=_parse_constant)
        except RecursionError:
            raise SchemaError("JSON schema error at #: nesting deeper than %d" % MAX_JSON_DEPTH, "#") from None
        except (ValueError, _JsonReadError) as e:
            raise SchemaError("JSON schema error at #: invalid JSON: %s" % e, "#") from None
        return _check_tree(value)
    return _check_tree(schema)


def _dump_float(x):
    # nlohmann's dtoa: shortest round-trip digits, then its format_buffer layout
    if x == 0:
        return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"
    sign = "-" if x < 0 else ""
    r = repr(abs(x))
    mant, _, exp = r.partition("e")
    exp = int(exp) if exp else 0
    if "." in mant:
        ip, fp = mant.split(".")
    else:
        ip, fp = mant, ""
    digits = (ip + fp).lstrip("0")
    # position of the decimal point relative to the start of `digits`
    lead_zeros = len(ip + fp) - len((ip + fp).lstrip("0"))
    n = len(ip) - lead_zeros + exp
    digits = digits.rstrip("0")
    k = len(digits)
    if k <= n <= 15:
        s = digits + "0" * (n - k) + ".0"
    elif 0 < n <= 15:
        s = digits[:n] + "." + digits[n:]
    elif -4 < n <= 0:
        s = "0." + "0" * (-n) + digits
    else:
        e = n - 1
        s = digits[0] + ("." + digits[1:] if k > 1 else "") + "e" + ("-" if e < 0 else "+") + "%02d" % abs(e)
    return sign + s


def _dump(v):
    """nlohmann's dump(): compact, non-ASCII kept as is."""
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    t = type(v)
    if t is int:
        return str(v)
    if t is float:
        if math.isnan(v) or math.isinf(v):
            return "null"
        return _dump_float(v)
    if t is str:
        return json.dumps(v, ensure_ascii=False)
    if t is list:
        return "[" + ",".join(_dump(x) for x in v) + "]"
    return "{" + ",".join(json.dumps(k, ensure_ascii=False) + ":" + _dump(x) for k, x in v.items()) + "}"


# ---------------------------------------------------------------------------------------------------------
# The schema reader (common/json-schema.cpp)

ANY, REF, ANY_OF, ALL_OF, CONST, ENUM, NULL, BOOLEAN, NUMBER, INTEGER, STRING, ARRAY, TUPLE, OBJECT = range(14)
FORMAT_NONE, FORMAT_UUID, FORMAT_DATE, FORMAT_TIME, FORMAT_DATE_TIME = range(5)


class _Node:
    __slots__ = ("kind", "path", "ref", "target", "children", "value", "values", "minimum", "maximum", "pattern",
                 "format", "min_length", "max_length", "items", "min_items", "max_items", "properties",
                 "additional")

    def __init__(self, kind, path):
        self.kind = kind
        self.path = path


class _Fail(Exception):
    def __init__(self, message, pointer):
        super().__init__(message)
        self.message = message
        self.pointer = pointer


def _fail(path, msg):
    raise _Fail("JSON schema error at " + path + ": " + msg, path)


def _stoull(s):
    """std::stoull's reading of an array index; None where it throws."""
    m = re.match(r"[ \t\n\v\f\r]*([+-]?)([0-9]+)", s)
    if not m:
        return None
    v = int(m.group(2))
    if v > _UINT64_MAX:
        return None
    if m.group(1) == "-":
        v = (-v) & _UINT64_MAX
    return v


def _stoi(s):
    """std::stoi; None where it throws."""
    m = re.match(r"[ \t\n\v\f\r]*([+-]?[0-9]+)", s)
    if not m:
        return None
    v = int(m.group(1))
    if v < -(2**31) or v > _INT_MAX:
        return None
    return v


class _Builder:
    def __init__(self, root):
        self.root = root
        self.refs = {}
        self.pending = []

    def build(self):
        node = self.build_node(self.root, "#")
        for ref in self.pending:
            ref.target = self.refs[ref.ref]
        return node

    @staticmethod
    def get_count(schema, key, path, default):
        if key not in schema:
            return default
        v = schema[key]
        if not _is_int(v) or _wrap32(v) < 0:
            _fail(path, key + " must be a non-negative integer")
        return _wrap32(v)

    @staticmethod
    def get_bound(schema, key, path, round_up):
        v = schema[key]
        if _is_int(v):
            return _wrap64(v)
        if not _is_number(v):
            _fail(path, key + " must be a number")
        d = math.ceil(v) if round_up else math.floor(v)
        if d < _INT64_MIN or d > _INT64_MAX:
            return _INT64_MIN  # what x86-64's conversion gives for a double out of range
        return d

    @staticmethod
    def get_format(schema, path):
        if "format" not in schema:
            return FORMAT_NONE
        v = schema["format"]
        if type(v) is not str:
            _fail(path, "format must be a string")
        if v == "date":
            return FORMAT_DATE
        if v == "time":
            return FORMAT_TIME
        if v == "date-time":
            return FORMAT_DATE_TIME
        if v == "uuid" or (len(v) == 5 and v.startswith("uuid") and "1" <= v[4] <= "5"):
            return FORMAT_UUID
        return FORMAT_NONE

    def resolve_ref(self, ref, path):
        target = self.root
        tokens = ref[1:].split("/")
        for sel in tokens[1:]:
            if isinstance(target, dict) and sel in target:
                target = target[sel]
            elif isinstance(target, list):
                idx = _stoull(sel)
                if idx is None:
                    idx = len(target)
                if idx >= len(target):
                    _fail(path, "cannot resolve $ref " + ref + ", " + sel + " is out of range")
                target = target[idx]
            else:
                _fail(path, "cannot resolve $ref " + ref + ", " + sel + " not found")
        return target

    def build_ref(self, value, path):
        if type(value) is not str:
            _fail(path, "$ref must be a string")
        ref = value
        if not ref.startswith("#/"):
            _fail(path, "unsupported $ref " + ref + ", only references into the same document are supported")
        if ref not in self.refs:
            self.refs[ref] = None
            self.refs[ref] = self.build_node(self.resolve_ref(ref, path), ref)
        node = _Node(REF, path)
        node.ref = ref
        node.target = None
        self.pending.append(node)
        return node

    def build_alternatives(self, kind, alts, path):
        if type(alts) is not list:
            _fail(path, "must be an array of schemas")
        if not alts:
            _fail(path, "must not be empty")
        node = _Node(kind, path)
        node.children = [self.build_node(alt, path + "/" + str(i)) for i, alt in enumerate(alts)]
        return node

    def build_object(self, schema, path):
        node = _Node(OBJECT, path)
        required = set()
        if type(schema.get("required")) is list:
            for name in schema["required"]:
                if type(name) is str:
                    required.add(name)
        node.properties = []
        if "properties" in schema:
            props = schema["properties"]
            if type(props) is not dict:
                _fail(path, "properties must be an object")
            for name, prop in props.items():
                node.properties.append((name, self.build_node(prop, path + "/properties/" + name), name in required))
        node.additional = None
        if "additionalProperties" in schema:
            additional = schema["additionalProperties"]
            if type(additional) is bool:
                if additional:
                    node.additional = _Node(ANY, path + "/additionalProperties")
            elif type(additional) is dict:
                node.additional = self.build_node(additional, path + "/additionalProperties")
            else:
                _fail(path, "additionalProperties must be a boolean or a schema")
        elif "properties" not in schema:
            node.additional = _Node(ANY, path)
        return node

    def build_array(self, schema, path):
        node = _Node(ARRAY, path)
        if "items" in schema or "prefixItems" in schema:
            key = "items" if "items" in schema else "prefixItems"
            items = schema[key]
            if type(items) is list:
                tup = _Node(TUPLE, path)
                tup.items = [self.build_node(item, path + "/" + key + "/" + str(i)) for i, item in enumerate(items)]
                return tup
            node.items = self.build_node(items, path + "/" + key)
        else:
            node.items = _Node(ANY, path)
        node.min_items = self.get_count(schema, "minItems", path, 0)
        node.max_items = self.get_count(schema, "maxItems", path, -1)
        return node

    def build_string(self, schema, path):
        node = _Node(STRING, path)
        node.pattern = ""
        if "pattern" in schema:
            pattern = schema["pattern"]
            if type(pattern) is not str:
                _fail(path, "pattern must be a string")
            node.pattern = pattern
        node.format = self.get_format(schema, path)
        node.min_length = self.get_count(schema, "minLength", path, 0)
        node.max_length = self.get_count(schema, "maxLength", path, -1)
        return node

    def build_integer(self, schema, path):
        node = _Node(INTEGER, path)
        node.minimum = _INT64_MIN
        node.maximum = _INT64_MAX
        if "minimum" in schema:
            node.minimum = self.get_bound(schema, "minimum", path, True)
        elif "exclusiveMinimum" in schema:
            node.minimum = _wrap64(self.get_bound(schema, "exclusiveMinimum", path, False) + 1)
        if "maximum" in schema:
            node.maximum = self.get_bound(schema, "maximum", path, False)
        elif "exclusiveMaximum" in schema:
            node.maximum = _wrap64(self.get_bound(schema, "exclusiveMaximum", path, True) - 1)
        return node

    def build_node(self, schema, path):
        if type(schema) is not dict:
            _fail(path, "schema must be an object")
        if "$ref" in schema:
            return self.build_ref(schema["$ref"], path)
        if "oneOf" in schema or "anyOf" in schema:
            key = "oneOf" if "oneOf" in schema else "anyOf"
            return self.build_alternatives(ANY_OF, schema[key], path + "/" + key)

        typ = schema.get("type")
        if type(typ) is list:
            if not typ:
                _fail(path, "type must not be empty")
            node = _Node(ANY_OF, path)
            node.children = []
            for i, t in enumerate(typ):
                alt = dict(schema)
                alt["type"] = t
                node.children.append(self.build_node(alt, path + "/type/" + str(i)))
            return node
        if "const" in schema:
            node = _Node(CONST, path)
            node.value = schema["const"]
            return node
        if "enum" in schema:
            values = schema["enum"]
            if type(values) is not list or not values:
                _fail(path, "enum must be a non-empty array")
            node = _Node(ENUM, path)
            node.values = list(values)
            return node
        if typ is not None and type(typ) is not str:
            _fail(path, "type must be a string or an array of strings")

        type_name = typ if type(typ) is str else ""
        has_properties = "properties" in schema or (
            "additionalProperties" in schema and schema["additionalProperties"] is not True)

        if type_name == "":
            if has_properties:
                return self.build_object(schema, path)
            if "allOf" in schema:
                return self.build_alternatives(ALL_OF, schema["allOf"], path + "/allOf")
            if "items" in schema or "prefixItems" in schema:
                return self.build_array(schema, path)
            if ("pattern" in schema or "minLength" in schema or "maxLength" in schema
                    or self.get_format(schema, path) != FORMAT_NONE):
                return self.build_string(schema, path)
            return _Node(ANY, path)
        if type_name == "object":
            if not has_properties and "allOf" in schema:
                return self.build_alternatives(ALL_OF, schema["allOf"], path + "/allOf")
            return self.build_object(schema, path)
        if type_name == "string":
            if "allOf" in schema:
                return self.build_alternatives(ALL_OF, schema["allOf"], path + "/allOf")
            return self.build_string(schema, path)
        if type_name == "array":
            return self.build_array(schema, path)
        if type_name == "integer":
            return self.build_integer(schema, path)
        if type_name == "number":
            return _Node(NUMBER, path)
        if type_name == "boolean":
            return _Node(BOOLEAN, path)
        if type_name == "null":
            return _Node(NULL, path)
        _fail(path, "unrecognized type " + type_name)


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
    result = item_rule + " " + _build_repetition("(" + separator_rule + " " + item_rule + ")",
                                                 0 if min_items == 0 else min_items - 1,
                                                 max_items - 1 if has_max else max_items)
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
                from_sub = frm[i + 1:]
                to_sub = to[i + 1:]
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
    "number": ('("-"? integral-part) ("." decimal-part)? ([eE] [-+]? integral-part)?',
               ("integral-part", "decimal-part")),
    "integer": ('("-"? integral-part)', ("integral-part",)),
    "value": ("object | array | string | number | boolean | null",
              ("object", "array", "string", "number", "boolean", "null")),
    "object": ('"{" space ( string ":" space value ("," space string ":" space value)* )? space "}"',
               ("string", "value")),
    "array": ('"[" space ( value ("," space value)* )? space "]"', ("value",)),
    "uuid": ('"\\"" [0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" '
             '[0-9a-fA-F]{12} "\\""', ()),
    "char": ('[^"\\\\\\x7F\\x00-\\x1F] | [\\\\] (["\\\\bfnrt] | "u" [0-9a-fA-F]{4})', ()),
    "string": ('"\\"" char* "\\""', ("char",)),
    "null": ('"null"', ()),
}

STRING_FORMAT_RULES = {
    "date": ('[0-9]{4} "-" ( "0" [1-9] | "1" [0-2] ) "-" ( "0" [1-9] | [1-2] [0-9] | "3" [0-1] )', ()),
    "time": ('([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{3} )? '
             '( "Z" | ( "+" | "-" ) ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] )', ()),
    "date-time": ('date "T" time', ("date", "time")),
    "date-string": ('"\\"" date "\\""', ("date",)),
    "time-string": ('"\\"" time "\\""', ("time",)),
    "date-time-string": ('"\\"" date-time "\\""', ("date-time",)),
}

_RESERVED_NAMES = frozenset(["root"]) | frozenset(PRIMITIVE_RULES) | frozenset(STRING_FORMAT_RULES)

_INVALID_RULE_CHARS_RE = re.compile(r"[^a-zA-Z0-9-]+")
_GRAMMAR_LITERAL_ESCAPE_RE = re.compile(r'[\r\n"\\]')
_GRAMMAR_LITERAL_ESCAPES = {"\r": "\\r", "\n": "\\n", '"': '\\"', "-": "\\-", "]": "\\]", "\\": "\\\\"}

MAX_PATTERN_DEPTH = 100

_NON_LITERAL_SET = frozenset("|.()[]{}*+?^$")
_ESCAPED_IN_REGEXPS_BUT_NOT_IN_LITERALS = frozenset("^$.[]()|{}*+?")
_HEX = frozenset("0123456789abcdefABCDEF")


def _format_literal(literal):
    return '"' + _GRAMMAR_LITERAL_ESCAPE_RE.sub(lambda m: _GRAMMAR_LITERAL_ESCAPES[m.group(0)], literal) + '"'


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
    def __init__(self, dotall=False):
        self.dotall = dotall
        self.rules = {"space": SPACE_RULE}
        self.refs_being_resolved = set()
        self.errors = []
        self.warnings = []
        self.error_pointer = None

    def add_rule(self, name, rule):
        esc_name = _INVALID_RULE_CHARS_RE.sub("-", name)
        rules = self.rules
        if esc_name not in rules or rules[esc_name] == rule:
            rules[esc_name] = rule
            return esc_name
        i = 0
        while (esc_name + str(i)) in rules and rules[esc_name + str(i)] != rule:
            i += 1
        key = esc_name + str(i)
        rules[key] = rule
        return key

    def _error(self, message, pointer):
        if self.error_pointer is None:
            self.error_pointer = pointer
        self.errors.append(message)

    def generate_union_rule(self, name, alt_schemas):
        return " | ".join(self.visit(alt, name + ("alternative-" if name == "" else "-") + str(i))
                          for i, alt in enumerate(alt_schemas))

    def visit_pattern(self, pattern, name, node):
        snapshot = dict(self.rules)
        try:
            return self.pattern_to_rule(pattern, name)
        except _Unsupported as err:
            self.rules = snapshot
            self.warnings.append("pattern " + pattern + " is not supported (" + str(err) + "), accepting any string")
            return self.add_rule(name, self.add_primitive("string", PRIMITIVE_RULES["string"]))
        except _Invalid as err:
            self.rules = snapshot
            self._error("Invalid pattern " + pattern + ": " + str(err), node.path)
            return ""

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
                                raise _Unsupported("unsupported escape in character class: " + sub_pattern[i:i + 2])
                            sq.append(sub_pattern[i:i + n])
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
                    inner = sub_pattern[i + 1:j]
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
                    seq[-1] = (_build_repetition('"' + sub + '"' if sub_is_literal else sub, min_times, max_times, ""),
                               False)
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
                                    raise _Unsupported("unsupported escape: " + sub_pattern[i:i + 2])
                                literal.append(sub_pattern[i:i + n])
                                i += n
                        elif ch == '"':
                            literal.append('\\"')
                            i += 1
                        elif ch not in _NON_LITERAL_SET and (
                                i == length - 1 or not literal or sub_pattern[i + 1] == "."
                                or sub_pattern[i + 1] not in _NON_LITERAL_SET):
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

        def visit(node):
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
                    visit(child)
                    out.append(")")
                else:
                    out.append(" " + char_rule + "+")
            if node:
                out.append(' | [^"' + "".join(rejects) + "] " + char_rule + "*")

        visit(root)
        out.append(" )")
        if not terminal_root:
            out.append("?")
        out.append(' ["]')
        return "".join(out)

    def resolve_ref(self, node):
        ref = _b(node.ref)
        pos = ref.find("#")
        fragment = ref[pos + 1:] if pos >= 0 else ref
        ref_name = "ref" + _INVALID_RULE_CHARS_RE.sub("-", fragment)
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
                prefix + bname + "-kv",
                _format_literal(_b(_dump(prop_name))) + ' space ":" space ' + prop_rule_name)
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

            def get_recursive_refs(ks, first_is_optional):
                if not ks:
                    return ""
                k = ks[0]
                kv_rule_name = prop_kv_rule_names[k]
                comma_ref = '( "," space ' + kv_rule_name + " )"
                if first_is_optional:
                    res = comma_ref + ("*" if k == "*" else "?")
                else:
                    res = kv_rule_name + (" " + comma_ref + "*" if k == "*" else "")
                if len(ks) > 1:
                    res += " " + self.add_rule(prefix + k + "-rest", get_recursive_refs(ks[1:], True))
                return res

            for i in range(len(optional_props)):
                if i > 0:
                    rule.append(" | ")
                rule.append(get_recursive_refs(optional_props[i:], False))
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
                if comp.target is not None:
                    add_component(comp.target, is_required)
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
            return self.add_rule(rule_name, "(" + " | ".join(_generate_constant_rule(v) for v in node.values) + ")")
        if kind == OBJECT:
            if not node.properties and node.additional is not None and node.additional.kind == ANY:
                return self.add_rule(rule_name, self.add_primitive("object", PRIMITIVE_RULES["object"]))
            required = set(p for p, _s, req in node.properties if req)
            return self.add_rule(rule_name, self.build_object_rule(
                [(p, s) for p, s, _r in node.properties], required, name, node.additional))
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
            return self.add_rule(rule_name, '"[" space ' + _build_repetition(
                item_rule_name, node.min_items, max_items, '"," space') + ' space "]"')
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
                return self.add_rule(rule_name, '"\\"" ' + _build_repetition(char_rule, node.min_length, max_len)
                                     + ' "\\""')
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

    def format_grammar(self):
        return "".join(k + " ::= " + self.rules[k] + "\n" for k in sorted(self.rules))


_RECURSION_HEADROOM = 20000


def json_schema_to_grammar(schema):
    """Convert a JSON schema (a dict, or JSON text) to GBNF, as llama.cpp's
    ``json_schema_to_grammar(schema, force_gbnf=true)`` does.

    Returns ``(grammar, warnings)``: the grammar text, byte for byte llama.cpp's, and the parts llama.cpp
    converted only loosely (unsupported patterns, which accept any string), in its wording. Raises
    ``SchemaError`` for a schema llama.cpp refuses, with llama.cpp's message and the JSON pointer of the
    offending node.
    """
    doc = load_schema(schema)
    old_limit = sys.getrecursionlimit()
    if old_limit < _RECURSION_HEADROOM:
        sys.setrecursionlimit(_RECURSION_HEADROOM)
    try:
        try:
            root = _Builder(doc).build()
            conv = _Converter(False)
            conv.visit(root, "")
        except _Fail as e:
            raise SchemaError("JSON schema conversion failed:\n" + e.message, e.pointer) from None
        except _ConversionError as e:
            raise SchemaError(e.message, e.pointer) from None
        except RecursionError:
            raise SchemaError("JSON schema conversion failed:\nthe schema nests too deeply (through $ref or "
                              "nesting) to convert", "#") from None
    finally:
        if old_limit < _RECURSION_HEADROOM:
            sys.setrecursionlimit(old_limit)
    if conv.errors:
        raise SchemaError(_t("JSON schema conversion failed:\n" + "\n".join(conv.errors)), conv.error_pointer or "#")
    return _t(conv.format_grammar()), [_t(w) for w in conv.warnings]
