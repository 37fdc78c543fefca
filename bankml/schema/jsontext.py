# Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.
# Ports semantics of nlohmann/json (llama.cpp's vendor/nlohmann/json.hpp), MIT License, Copyright (c) 2013-2025 Niels Lohmann.
# cython: boundscheck=True, wraparound=True
"""JSON values as llama.cpp's nlohmann::ordered_json holds them: read (``load_schema``) and written (``_dump``).

Reading: integers stay integers (past 64 bits a double), numbers with a fraction or an exponent are doubles,
object keys keep their order and the last of duplicate keys wins, nesting deeper than ``MAX_JSON_DEPTH`` is
refused, and so is a tree of more than ``SchemaLimits.max_nodes`` values. Writing: nlohmann's ``dump()``, compact,
non-ASCII kept, doubles in Grisu2's digits (which are not always Python's ``repr()``).

setup.py compiles this file with Cython as it is (``jsontext.pxd`` makes its hot functions cpdef; the directive
line above keeps Python's indexing).
"""

import json
import math
import re
import struct

from bankml.errors import SchemaError
from bankml.schema import jsondepth as _jsondepth
from bankml.schema.limits import _PREFIX, _LimitExceeded, _Meter

__all__ = ["MAX_JSON_DEPTH", "load_schema"]

MAX_JSON_DEPTH = 512

# the integer ranges of nlohmann's number_integer_t (int64) and number_unsigned_t (uint64)
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_UINT64_MAX = 2**64 - 1


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
