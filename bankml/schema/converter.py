# Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.
# cython: boundscheck=True, wraparound=True
"""JSON schema to GBNF, as llama.cpp converts it.

The reference is the llama.cpp vendored by llama-cpp-python 0.3.36: ``common/json-schema.cpp`` (the schema
reader, which refuses what it cannot convert) and ``common/json-schema-to-grammar.cpp`` (the converter), called
as ``json_schema_to_grammar(schema, /* force_gbnf = */ true)``. The output is the same text, byte for byte.

llama.cpp works on the bytes of the UTF-8 text. To keep that behaviour (a pattern can, for instance, split a
multi-byte character between two literals), the converter below works on "byte strings": Python ``str``
objects whose characters are the UTF-8 bytes (latin-1 decoded). They are turned back into text at the end;
bytes that are not valid UTF-8 come back as surrogate escapes (``errors="surrogateescape"``).

setup.py compiles this file with Cython as it is (plain Python; ``converter.pxd`` makes its classes cdef classes
and its hot functions cpdef; the directive line above keeps Python's indexing: negative indices and
IndexError). The compiled code recurses on the C stack, which Python's recursion limit does not bound, so it
stops at a nesting depth of ``_COMPILED_MAX_DEPTH`` (far past any real schema) and the conversion, the
SchemaDocument or the build_grammar() is redone from the start by this same file run as plain Python, whose
RecursionError handling is the reference: the result is the same either way.
"""

import functools
import itertools
import json
import math
import re
import struct
import sys
import threading
import time
import types
from contextlib import contextmanager
from dataclasses import dataclass

from bankml.engine._grammar import Rules
from bankml.errors import GrammarError, SchemaError
from bankml.schema import jsondepth as _jsondepth

__all__ = [
    "json_schema_to_grammar",
    "json_schema_to_rules",
    "gbnf_format_literal",
    "load_schema",
    "SchemaError",
    "SchemaDocument",
    "GrammarBuilder",
    "build_grammar",
    "SchemaLimits",
    "DEFAULT_LIMITS",
    "budget",
    "MAX_JSON_DEPTH",
]

MAX_JSON_DEPTH = 512


@dataclass(frozen=True)
class SchemaLimits:
    """What one conversion may cost; past any of these it stops with a SchemaError naming the limit.

    llama.cpp's converter has no such bounds: a schema whose objects take their properties through
    ``allOf``/``$ref`` from the level below doubles the grammar per level (a 2 KB schema of 16 levels gives a
    19 MB grammar, 19 levels hundreds of MB), and a Python tree that shares sub-dicts (``x = {"anyOf": [x, x]}``
    40 times) expands to 2^40 nodes. Every count is checked while the tree is read and the rules are built,
    so the refusal comes before the cost. The defaults are far above any schema of the parity tables (the
    largest grammar there is well under 1 MB).

    * ``max_nodes``: JSON values in the schema tree (counted expanded, as llama.cpp's reader copies shared
      sub-trees), and schema nodes the reader builds from it (``"type": [...]`` lists copy the schema per type);
    * ``max_grammar_bytes``: the grammar text (rule names and bodies);
    * ``max_work_bytes``: rule text built, counting rules built again and found identical (a schema can make
      the converter redo the same rules exponentially often while the grammar stays small);
    * ``max_seconds``: wall-clock time of one conversion (None: no time limit).
    """

    max_nodes: int = 1_000_000
    max_grammar_bytes: int = 8 * 1024 * 1024
    max_work_bytes: int = 64 * 1024 * 1024
    max_seconds: float = 30.0


DEFAULT_LIMITS = SchemaLimits()

_BUDGET = threading.local()


@contextmanager
def budget(deadline=None, cancel=None):
    """Within the block, conversions on this thread also stop at ``deadline`` (a ``time.monotonic()`` value)
    or once ``cancel`` (a ``threading.Event``) is set, with a SchemaError. The server runs a request's
    preparation inside its time budget this way, and cancels it when the client goes away."""
    saved = getattr(_BUDGET, "value", None)
    _BUDGET.value = (deadline, cancel)
    try:
        yield
    finally:
        _BUDGET.value = saved


class _LimitExceeded(Exception):
    def __init__(self, message, pointer="#"):
        super().__init__(message)
        self.message = message
        self.pointer = pointer


def _limit_message(what):
    return _PREFIX + what + "; bankml refuses it (llama.cpp has no such bound and would build it whole)"


def _count_bound(v):
    """A limit as the int a count is compared with: a count (an int) is above v exactly when it is above
    floor(v); a limit no count can reach (or NaN, which no count is above) becomes sys.maxsize."""
    if v != v or v >= sys.maxsize:
        return sys.maxsize
    return math.floor(v)


class _Meter:
    """The counts of one conversion against its SchemaLimits, and its deadline."""

    def __init__(self, limits):
        self.limits = limits = limits or DEFAULT_LIMITS
        self.max_nodes = _count_bound(limits.max_nodes)
        self.max_grammar_bytes = _count_bound(limits.max_grammar_bytes)
        self.max_work_bytes = _count_bound(limits.max_work_bytes)
        self.nodes = 0
        self.grammar_bytes = 0
        self.work_bytes = 0
        self.ticks = 0
        deadline = None if limits.max_seconds is None else time.monotonic() + limits.max_seconds
        outer, self.cancel = getattr(_BUDGET, "value", None) or (None, None)
        if outer is not None and (deadline is None or outer < deadline):
            deadline = outer
        self.deadline = deadline

    def node(self, pointer):
        self.nodes += 1
        if self.nodes > self.max_nodes:
            raise _LimitExceeded(
                _limit_message(
                    "the schema expands to more than %d nodes (SchemaLimits.max_nodes)" % self.limits.max_nodes
                ),
                pointer,
            )
        self.ticks += 1
        if self.ticks & 255 == 0:
            self.clock(pointer)

    def work(self, n, pointer):
        self.work_bytes += n
        if self.work_bytes > self.max_work_bytes:
            raise _LimitExceeded(
                _limit_message(
                    "converting the schema builds more than %d bytes of rules and node paths (SchemaLimits.max_work_bytes)"
                    % self.limits.max_work_bytes
                ),
                pointer,
            )

    def output(self, n, pointer):
        self.grammar_bytes += n
        if self.grammar_bytes > self.max_grammar_bytes:
            raise _LimitExceeded(
                _limit_message(
                    "the grammar grows past %d bytes (SchemaLimits.max_grammar_bytes)" % self.limits.max_grammar_bytes
                ),
                pointer,
            )

    def clock(self, pointer):
        if self.cancel is not None and self.cancel.is_set():
            raise _LimitExceeded(_PREFIX + "the conversion was cancelled", pointer)
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise _LimitExceeded(
                _limit_message(
                    "the conversion takes longer than its time budget (SchemaLimits.max_seconds = %s, or the "
                    "request's)" % self.limits.max_seconds
                ),
                pointer,
            )


_PREFIX = "JSON schema conversion failed:\n"

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


# Compiled, a function is a Cython function, not a Python one
_COMPILED = not isinstance(_wrap32, types.FunctionType)
# Nesting of schema nodes (building or visiting them) and of the key-exclusion trie past which the compiled
# module hands the conversion to the plain-Python one. A level takes 1-2.5 KB of C stack compiled: 400 levels
# fit in a 1 MB thread stack (Linux gives threads 8 MB). Of the 11,305 MaskBench schemas, the deepest converted
# one nests 36 levels; only four that end past a SchemaLimits bound go deeper (646 to 3,665 levels)
_COMPILED_MAX_DEPTH = 400


class _TooDeep(Exception):
    """Raised by the compiled module only, past _COMPILED_MAX_DEPTH."""


_PYTHON_MODULE = None


def _python_module():
    """This file run as plain Python (bankml.schema._converter_python), where deep recursion ends in RecursionError."""
    global _PYTHON_MODULE
    if _PYTHON_MODULE is None:
        import importlib.util
        import os

        spec = importlib.util.spec_from_file_location(
            __package__ + "._converter_python", os.path.join(os.path.dirname(__file__), "converter.py")
        )
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        # its nodes are this module's (their attributes are public), so a SchemaDocument's nodes from either
        # go into a GrammarBuilder of either
        module._Node = _Node
        _PYTHON_MODULE = module
    return _PYTHON_MODULE


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


def _check_tree(value, depth=1, meter=None):
    """A tree as llama.cpp's reader would hold it: JSON types only (a tuple becomes a list, an integer past 64
    bits a float), no container nested deeper than MAX_JSON_DEPTH, no lone surrogate in a string. The tree
    is returned as is when it already is so (the common case), else copied where it differs."""
    t = type(value)
    if meter is not None:
        meter.node("#")
    if t is str:
        if not value.isascii():
            _check_string(value)
        return value
    if t is dict or t is list or t is tuple or isinstance(value, (dict, list, tuple)):
        if depth > MAX_JSON_DEPTH:
            raise SchemaError(_PREFIX + "JSON schema error at #: nesting deeper than %d" % MAX_JSON_DEPTH, "#")
        if isinstance(value, dict):
            out = value if t is dict else dict(value)
            copied = out is not value
            for k, x in out.items():
                if type(k) is not str:
                    raise SchemaError(_PREFIX + "JSON schema error at #: object key %r is not a string" % (k,), "#")
                if not k.isascii():
                    _check_string(k)
                y = _check_tree(x, depth + 1, meter)
                if y is not x:
                    if not copied:
                        out = dict(out)
                        copied = True
                    out[k] = y
            return out
        out = value if t is list else list(value)
        copied = out is not value
        for i, x in enumerate(out):
            y = _check_tree(x, depth + 1, meter)
            if y is not x:
                if not copied:
                    out = list(out)
                    copied = True
                out[i] = y
        return out
    if value is None or t is bool:
        return value
    if t is int:
        return value if _INT64_MIN <= value <= _UINT64_MAX else float(value)
    if t is float:
        if math.isnan(value) or math.isinf(value):
            raise SchemaError(_PREFIX + "JSON schema error at #: %r is not a JSON number" % value, "#")
        return value
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return _check_tree(int(value), depth, meter)
    if isinstance(value, float):
        return _check_tree(float(value), depth, meter)
    if isinstance(value, str):
        return _check_tree(str(value), depth, meter)
    raise SchemaError(_PREFIX + "JSON schema error at #: %s is not a JSON value" % t.__name__, "#")


_SURROGATE_RE = re.compile("[\ud800-\udfff]")


def _check_string(s):
    if _SURROGATE_RE.search(s):
        raise SchemaError(_PREFIX + "JSON schema error at #: a string holds a lone UTF-16 surrogate", "#")


def load_schema(schema, limits=None):
    """A schema as llama.cpp's JSON reader holds it: from JSON text (str or bytes) or from Python objects.

    Integers keep being integers and numbers with a fraction or an exponent are floats (``2.0`` stays a
    float), object keys keep their order, the last of duplicate keys wins, nesting deeper than
    ``MAX_JSON_DEPTH`` is refused, and so is a tree of more than ``limits.max_nodes`` values (counted
    expanded: a Python tree sharing sub-dicts counts each use). Raises SchemaError for text that is not JSON.
    """
    if isinstance(schema, (bytes, bytearray)):
        try:
            schema = bytes(schema).decode("utf-8")
        except UnicodeDecodeError as e:
            raise SchemaError(
                _PREFIX + "JSON schema error at #: invalid UTF-8 in the schema text (%s)" % e, "#"
            ) from None
    if isinstance(schema, str):
        try:
            value = _jsondepth.loads(
                schema,
                MAX_JSON_DEPTH,
                object_pairs_hook=_pairs,
                parse_float=_parse_float,
                parse_int=_parse_int,
                parse_constant=_parse_constant,
            )
        except RecursionError:
            raise SchemaError(
                _PREFIX + "JSON schema error at #: nesting deeper than %d" % MAX_JSON_DEPTH, "#"
            ) from None
        except (ValueError, _JsonReadError) as e:
            raise SchemaError(_PREFIX + "JSON schema error at #: invalid JSON: %s" % e, "#") from None
        return _check_tree_guarded(value, limits)
    return _check_tree_guarded(schema, limits)


def _check_tree_guarded(value, limits=None):
    try:
        return _check_tree(value, 1, _Meter(limits))
    except _LimitExceeded as e:
        raise SchemaError(e.message, e.pointer) from None
    except RecursionError:
        raise SchemaError(_PREFIX + "JSON schema error at #: the schema nests too deeply for the stack", "#") from None


# nlohmann's dtoa is Grisu2 (Loitsch), which does not always give the shortest digits, nor the same digits as
# Python's repr(): the steps below follow it, on Python integers


def _diy_mul(xf, xe, yf, ye):
    # the upper 64 bits of the 128-bit product, rounded half up
    return (xf * yf + (1 << 63)) >> 64, xe + ye + 64


def _diy_normalize(f, e):
    shift = 64 - f.bit_length()
    return f << shift, e - shift


def _cached_power(k):
    """10^k as (f, e): f the 64-bit significand, rounded to nearest, 2^63 <= f < 2^64."""
    if k >= 0:
        v = 10**k
        e = v.bit_length() - 64
        f = (v + (1 << (e - 1))) >> e if e > 0 else v << -e
    else:
        d = 10**-k
        e = -(64 + (d.bit_length() - 1))  # 2^63 <= 2^-e / d < 2^64 for this e, or one less
        f = ((1 << -e) + d // 2) // d
        if f >= 1 << 64:
            e += 1
            f = ((1 << -e) + d // 2) // d
        elif f < 1 << 63:
            e -= 1
            f = ((1 << -e) + d // 2) // d
    if f == 1 << 64:  # rounding carried out
        f >>= 1
        e += 1
    return f, e


_CACHED_POWERS: dict = {}


def _cached_power_for_binary_exponent(e):
    f = -60 - e - 1
    q = f * 78913
    k = (q // 262144 if q >= 0 else -((-q) // 262144)) + (1 if f > 0 else 0)
    index = (300 + k + 7) // 8
    dec = -300 + 8 * index
    if dec not in _CACHED_POWERS:
        _CACHED_POWERS[dec] = _cached_power(dec)
    cf, ce = _CACHED_POWERS[dec]
    return cf, ce, dec


def _grisu2(value):
    """(digits, decimal_exponent) of a positive finite double, as nlohmann's grisu2() gives them."""
    bits = struct.unpack("<Q", struct.pack("<d", value))[0]
    E = bits >> 52
    F = bits & ((1 << 52) - 1)
    if E == 0:
        vf, ve = F, 1 - 1075
    else:
        vf, ve = F + (1 << 52), E - 1075
    lower_closer = F == 0 and E > 1
    mpf, mpe = 2 * vf + 1, ve - 1
    if lower_closer:
        mmf, mme = 4 * vf - 1, ve - 2
    else:
        mmf, mme = 2 * vf - 1, ve - 1
    wpf, wpe = _diy_normalize(mpf, mpe)
    wmf, wme = mmf << (mme - wpe), wpe
    wf, we = _diy_normalize(vf, ve)

    cf, ce, dec = _cached_power_for_binary_exponent(wpe)
    w_f, w_e = _diy_mul(wf, we, cf, ce)
    lo_f, _ = _diy_mul(wmf, wme, cf, ce)
    hi_f, hi_e = _diy_mul(wpf, wpe, cf, ce)
    m_minus = lo_f + 1
    m_plus = hi_f - 1
    decimal_exponent = -dec

    delta = m_plus - m_minus
    dist = m_plus - w_f
    one_e = -hi_e
    one_f = 1 << one_e
    p1 = m_plus >> one_e
    p2 = m_plus & (one_f - 1)
    digits = []
    k = len(str(p1)) if p1 > 0 else 1
    pow10 = 10 ** (k - 1)
    n = k
    while n > 0:
        d, p1 = divmod(p1, pow10)
        digits.append(d)
        n -= 1
        rest = (p1 << one_e) + p2
        if rest <= delta:
            decimal_exponent += n
            return _grisu2_round(digits, dist, delta, rest, pow10 << one_e), decimal_exponent
        pow10 //= 10
    m = 0
    while True:
        p2 *= 10
        digits.append(p2 >> one_e)
        p2 &= one_f - 1
        m += 1
        delta *= 10
        dist *= 10
        if p2 <= delta:
            break
    decimal_exponent -= m
    return _grisu2_round(digits, dist, delta, p2, one_f), decimal_exponent


def _grisu2_round(digits, dist, delta, rest, ten_k):
    while rest < dist and delta - rest >= ten_k and (rest + ten_k < dist or dist - rest > rest + ten_k - dist):
        digits[-1] -= 1
        rest += ten_k
    return "".join(map(str, digits))


def _dump_float(x):
    """nlohmann's dump() of a double: Grisu2 digits in its format_buffer() layout."""
    if x == 0:
        return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"
    sign = "-" if x < 0 else ""
    digits, exp10 = _grisu2(abs(x))
    k = len(digits)
    n = k + exp10
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


# json's own string encoder without ensure_ascii: escapes '"', '\\' and the control characters (\\b \\f \\n
# \\r \\t, else \\u00xx in lower case), as nlohmann's dump() does; DEL and non-ASCII stay as they are
_encode_string = json.encoder.encode_basestring


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
        return _encode_string(v)
    if t is list:
        return "[" + ",".join([_dump(x) for x in v]) + "]"
    return "{" + ",".join([_encode_string(k) + ":" + _dump(x) for k, x in v.items()]) + "}"


# ---------------------------------------------------------------------------------------------------------
# The schema reader (common/json-schema.cpp)

ANY, REF, ANY_OF, ALL_OF, CONST, ENUM, NULL, BOOLEAN, NUMBER, INTEGER, STRING, ARRAY, TUPLE, OBJECT = range(14)
FORMAT_NONE, FORMAT_UUID, FORMAT_DATE, FORMAT_TIME, FORMAT_DATE_TIME = range(5)


class _Node:
    # compiled, a cdef class whose attributes converter.pxd declares
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
    def __init__(self, root, meter=None):
        self.root = root
        self.refs = {}
        self.pending = []
        self.meter = meter or _Meter(None)
        self.depth = 0

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
        self.depth += 1
        try:
            if _COMPILED and self.depth > _COMPILED_MAX_DEPTH:
                raise _TooDeep()
            # a node keeps its JSON pointer: "type" lists that copy a schema per type make these grow with depth
            self.meter.node(path)
            self.meter.work(len(path), path)
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
                "additionalProperties" in schema and schema["additionalProperties"] is not True
            )

            if type_name == "":
                if has_properties:
                    return self.build_object(schema, path)
                if "allOf" in schema:
                    return self.build_alternatives(ALL_OF, schema["allOf"], path + "/allOf")
                if "items" in schema or "prefixItems" in schema:
                    return self.build_array(schema, path)
                if (
                    "pattern" in schema
                    or "minLength" in schema
                    or "maxLength" in schema
                    or self.get_format(schema, path) != FORMAT_NONE
                ):
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
        finally:
            self.depth -= 1


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


_RECURSION_HEADROOM = 20000


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


_RECURSION_LOCK = threading.Lock()
_RECURSION_USERS = 0
_RECURSION_SAVED = None


def _raise_recursion_limit():
    global _RECURSION_USERS, _RECURSION_SAVED
    with _RECURSION_LOCK:
        if _RECURSION_USERS == 0:
            _RECURSION_SAVED = sys.getrecursionlimit()
            if _RECURSION_SAVED < _RECURSION_HEADROOM:
                sys.setrecursionlimit(_RECURSION_HEADROOM)
        _RECURSION_USERS += 1


def _restore_recursion_limit():
    global _RECURSION_USERS
    with _RECURSION_LOCK:
        _RECURSION_USERS -= 1
        if _RECURSION_USERS == 0 and _RECURSION_SAVED < _RECURSION_HEADROOM:
            sys.setrecursionlimit(_RECURSION_SAVED)


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


class SchemaDocument:
    """A schema read as llama.cpp's ``common_chat_schema_from_json`` reads it: ``root`` is the tree's root
    node. Raises SchemaError as json_schema_to_grammar() does for a schema llama.cpp refuses, and for one
    past ``limits.max_nodes``.

    Nodes are opaque to callers except for what ``build_grammar`` needs: ``node.properties`` (for an object
    node) is the list of ``(name, node, required)`` in schema order.
    """

    def __init__(self, schema, limits=None):
        doc = load_schema(schema, limits)
        _raise_recursion_limit()
        try:
            self.root = _Builder(doc, _Meter(limits)).build()
        except _TooDeep:
            self.root = _python_module().SchemaDocument(schema, limits).root
        except _Fail as e:
            raise SchemaError("JSON schema conversion failed:\n" + e.message, e.pointer) from None
        except _LimitExceeded as e:
            raise SchemaError(_t(e.message), e.pointer) from None
        except RecursionError:
            raise SchemaError("JSON schema conversion failed:\nthe schema nests too deeply to read", "#") from None
        finally:
            _restore_recursion_limit()


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
