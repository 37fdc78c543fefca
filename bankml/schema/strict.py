# cython: boundscheck=True, wraparound=True, cdivision=False, annotation_typing=False
"""Strict JSON Schema -> GBNF: every schema is compiled exactly, or refused with a SchemaError that names the
keyword (``SchemaError.keyword``) and the JSON pointer of the schema node (``SchemaError.pointer``).

This sits beside bankml's port of llama.cpp's converter (``bankml.schema``), never instead of it: that one is
byte-identical to llama.cpp and bends what it cannot enforce; this one accepts exactly the JSON texts that
``jsonschema`` (the validator of the schema's ``$schema`` draft, 2020-12 by default, with its FormatChecker)
accepts, within the policies below, and refuses what it cannot enforce.

Policies (what "exactly" means for texts, since a grammar sees text and jsonschema sees parsed values):

* **Whitespace**: llama.cpp's ``space ::= | " " | "\\n"{1,2} [ \\t]{0,20}`` may stand between any two tokens
  and after the root value; ``json.dumps(data, ensure_ascii=False)``'s ``", "`` and ``": "`` pass.
* **Strings** in every JSON spelling of every code point: raw UTF-8 (all but ``"``, ``\\`` and U+0000-U+001F),
  the short escapes ``\\" \\\\ \\/ \\b \\f \\n \\r \\t``, ``\\uXXXX`` (hex of either case) and surrogate
  pairs for code points past U+FFFF; lone surrogates (``json.loads`` would give an unpaired surrogate) are not
  accepted. Every spelling decodes to one code point, so lengths, key exclusions, enums and patterns are
  exact on the decoded string (bankml.schema.strict_lang's ``string_gbnf`` has the same policy).
* **Object keys**: each key at most once. An object schema of up to 8 listed keys (``properties``, and names
  that are only ``required`` or in dependencies) takes its members in any order, other keys
  (``additionalProperties``/``patternProperties``) anywhere among them: one rule per set of keys written,
  while the grammar's any-order objects have at most 4096 such sets in all (objects built first, outermost
  first, get them), and at most 512 of them go to objects the next form would also take. Past that (2^n
  rules would be too many: Kubernetes schemas spent the 4096 and wrote 750 KB of GBNF), when no
  minProperties, maxProperties or dependency counts keys and there are at most 12 required keys, members come
  in any order with one rule per set of required keys written, and an optional key may come again
  (``json.loads`` keeps the last value; every value must pass, so the verdict on texts without repeated keys
  is jsonschema's). Otherwise the object
  is refused (keyword ``properties``: a grammar of one key order would reject valid texts); with
  ``lenient=["properties"]`` the listed keys come in schema order there, each optional one skippable, then the
  other keys in any order.
* **Numbers**: ``type: integer`` takes integer texts (``-?(0|[1-9][0-9]*)``) and, from draft 6 on (where
  jsonschema counts 1.0 as an integer), the same with an all-zero fraction (``5.0``, as ``json.dumps`` writes
  an integral float); no exponent (``json.dumps(1e16)`` is ``1e+16``: rejected, though draft 6+ accepts it).
  ``type: number`` takes every JSON number text;
  when bounds or ``multipleOf`` apply, exponent forms need a normalised mantissa (``1.5e+20``, ``1e-05``, as
  ``json.dumps`` writes floats): ``0.5e1`` is rejected. Bounds compare the text's exact decimal value with the
  bound's (a float bound as its shortest repr), digit by digit: exact for every text ``json.dumps`` writes.
  ``multipleOf`` is enforced for integral divisors (divisibility automaton); other divisors are refused.
* **const/enum**: jsonschema equality (``1 == 1.0``, ``true != 1``): an integral number also matches its
  ``.0``-fraction texts; an object value matches in every key order (up to 8 keys; more is refused).
* Keywords that are no validation keyword of the draft (annotations, vendor extensions such as
  ``x-kubernetes-*``, OpenAPI's ``nullable``, misspellings) are ignored, as jsonschema ignores them; so are
  ``format`` names jsonschema's FormatChecker does not check.

``lenient`` names keywords strict mode may treat as annotations instead of refusing them (``{"format",
"pattern", "uniqueItems", "multipleOf", "contains"}``), and ``"properties"`` takes the keys of an object too
large for every key order in the schema's order: that is an explicit opt-out of exactness for them.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import json
import math
import re
import threading
import time
import types
import urllib.parse
import uuid
import warnings
from decimal import Decimal, localcontext

from bankml.errors import SchemaError
from bankml.schema import format_data, jsondepth
from bankml.schema import strict_lang as _sl
from bankml.schema._cstack import check_stack as _check_stack
from bankml.schema.limits import DEFAULT_LIMITS, _plain_module, _TooDeep

__all__ = ["LENIENT_KEYWORDS", "strict_schema_rules", "strict_schema_to_grammar"]

LENIENT_KEYWORDS = frozenset({"format", "pattern", "uniqueItems", "multipleOf", "contains", "properties"})

SPACE_RULE = '| " " | "\\n"{1,2} [ \\t]{0,20}'
# one code point of a JSON string, in any of its spellings (see the module docstring)
CHAR_RULE = (
    '[^"\\\\\\x00-\\x1F] | "\\\\" ( ["\\\\/bfnrt] | "u" ( [0-9a-cA-CefEF] hex hex hex | [dD] [0-7] hex hex'
    ' | [dD] [89abAB] hex hex "\\\\u" [dD] [c-fC-F] hex hex ) )'
)
NUMBER_RULE = '"-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?'
INTEGER_RULE = '"-"? ( "0" | [1-9] [0-9]* )'

_ALL_TYPES = frozenset({"null", "boolean", "int", "frac", "string", "array", "object"})
_TYPE_NAMES = {
    "null": {"null"},
    "boolean": {"boolean"},
    "integer": {"int"},
    "number": {"int", "frac"},
    "string": {"string"},
    "array": {"array"},
    "object": {"object"},
}

# formats jsonschema's Draft 2020-12 FORMAT_CHECKER checks (MaskBench validates every draft with it); any other
# format name is an annotation to jsonschema, so strict mode ignores it too
_CHECKED_FORMATS = frozenset(
    {
        "date",
        "date-time",
        "duration",
        "email",
        "hostname",
        "idn-email",
        "idn-hostname",
        "ipv4",
        "ipv6",
        "iri",
        "iri-reference",
        "json-pointer",
        "regex",
        "relative-json-pointer",
        "time",
        "uri",
        "uri-reference",
        "uri-template",
        "uuid",
    }
)

_COMMON = {
    "type",
    "enum",
    "multipleOf",
    "maximum",
    "minimum",
    "maxLength",
    "minLength",
    "pattern",
    "format",
    "items",
    "additionalItems",
    "maxItems",
    "minItems",
    "uniqueItems",
    "maxProperties",
    "minProperties",
    "required",
    "properties",
    "patternProperties",
    "additionalProperties",
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "$ref",
}
# the validation keywords of each draft, as jsonschema's validators know them (then/else, minContains and
# maxContains are read by "if" and "contains")
_DRAFT6 = {"const", "contains", "exclusiveMaximum", "exclusiveMinimum", "propertyNames"}  # added by draft 6
_DRAFT2019 = _DRAFT6 | {"if", "dependentRequired", "dependentSchemas", "unevaluatedItems", "unevaluatedProperties"}
_VOCAB = {
    4: _COMMON | {"dependencies"},
    6: _COMMON | {"dependencies"} | _DRAFT6,
    7: _COMMON | {"dependencies", "if"} | _DRAFT6,
    2019: _COMMON | _DRAFT2019 | {"$recursiveRef"},
    2020: (_COMMON - {"additionalItems"}) | _DRAFT2019 | {"prefixItems", "$dynamicRef"},
}
_ALWAYS_REFUSED = {"$recursiveRef", "$dynamicRef", "unevaluatedItems", "unevaluatedProperties"}
_MAX_TERMS = 1024  # alternatives one schema node may distribute into (anyOf/oneOf/if over allOf)
_MAX_ENUM_OBJECT_KEYS = 8
_MAX_PATTERN_REGIONS = 6  # patternProperties regexes of one object (2^n key regions)
_MAX_STATES = 20000  # states of one object/array/number automaton
# matches nothing: a class of every code point, negated (the parser reads an empty class "[]" as matching
# the empty string)
_NEVER = "[^\\x00-\\U0010FFFF]"
_MAX_REPETITION = 2000  # bankml.parser.MAX_REPETITION_THRESHOLD (llama.cpp's)
_ENGINE_MAX_GRAMMAR_BYTES = 4 << 20  # bankml.engine.parser.MAX_GRAMMAR_BYTES
_MAX_DEPTH = 512  # nesting of the schema document (bankml.schema.MAX_JSON_DEPTH)
_MAX_ANY_ORDER = 8  # objects of up to this many listed keys take them in any order (module docstring)
_MAX_REQUIRED_ANY_ORDER = 12  # ... or this many required keys, the optional ones free to come again
_ANY_ORDER_BUDGET = 4096  # ... while the any-order objects of one grammar have at most this many key sets
_EXACT_ORDER_BUDGET = 512  # ... of which at most this many go to objects that could repeat optional keys instead
_MAX_WITNESSES = 3  # negated object keywords met in one object (each doubles its states)
_MAX_CONTAINS = 3  # contains schemas of one array (its items split 2^n ways)
_MAX_UNIQUE_VALUES = 8  # uniqueItems: the distinct values an item may take (one rule per set of them)


def _draft_of(schema):
    uri = schema.get("$schema") if isinstance(schema, dict) else None
    if not isinstance(uri, str):
        return 2020
    for tag, d in (
        ("draft-03", 3),
        ("draft-04", 4),
        ("draft-06", 6),
        ("draft-07", 7),
        ("2019-09", 2019),
        ("2020-12", 2020),
    ):
        if tag in uri:
            return d
    return 2020


def _esc_ptr(k):
    return str(k).replace("~", "~0").replace("/", "~1")


class _Refuse(Exception):
    def __init__(self, keyword, pointer, reason):
        super().__init__(reason)
        self.keyword, self.pointer, self.reason = keyword, pointer, reason


# --- jsonschema's equality and type tests --------------------------------------------------------


def _is_num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _equal(a, b):
    """jsonschema's ``_utils.equal``: 1 == 1.0, True != 1, key order irrelevant."""
    _check_stack()
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (list, dict)) or isinstance(b, (list, dict)):
        return False
    return a == b


def _vkey(v):
    """A hashable key that two JSON values share exactly when ``_equal`` says they are equal, or None for a value
    holding a NaN (json.loads reads ``NaN``), which ``_equal`` finds equal to nothing, itself included."""
    _check_stack()
    if isinstance(v, str):
        return ("s", v)
    if isinstance(v, bool):
        return ("b", v)
    if isinstance(v, (int, float)):
        return None if v != v else ("n", v)  # 1 and 1.0 (and 0.0, -0.0) are equal with equal hashes
    if v is None:
        return ("z",)
    if isinstance(v, list):
        keys = tuple(_vkey(x) for x in v)
        return None if None in keys else ("l", keys)
    if isinstance(v, dict):
        items = []
        for k, x in v.items():
            kx = _vkey(x)
            if kx is None:
                return None
            items.append((k, kx))
        return ("d", frozenset(items))
    return None


@functools.lru_cache(maxsize=1024)
def _regex(pattern):
    """re.compile(pattern) without Python's FutureWarnings on its syntax ("possible nested set"): notes on
    future syntax, not the schema's."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return re.compile(pattern)


def _member(exclude=frozenset(), patterns=(), notpatterns=(), names=None, value=True):
    """A $strict-some member constraint: a key not in exclude, matching every regex of patterns and none of
    notpatterns ((regex, pointer) pairs) and satisfying the term names (or None), whose value satisfies the schema
    value (_Compiler.key_ok, extra_kv)."""
    return {"exclude": exclude, "patterns": patterns, "notpatterns": notpatterns, "names": names, "value": value}


def _same(x, y):
    """x == y, but a boolean equals only a boolean (Python finds 0 == False and 1 == True): the values of two
    schemas, compared as jsonschema reads them."""
    _check_stack()
    if x is y:
        return True
    if isinstance(x, bool) or isinstance(y, bool):
        return x.__class__ is y.__class__ and x == y
    if isinstance(x, dict):
        return isinstance(y, dict) and x.keys() == y.keys() and all(_same(v, y[k]) for k, v in x.items())
    if isinstance(x, (list, tuple)):
        return x.__class__ is y.__class__ and len(x) == len(y) and all(_same(a, b) for a, b in zip(x, y))
    return x == y


def _vkeys(values):
    """The keys of values (those that have one: a NaN-holding value equals nothing)."""
    out = set()
    for v in values:
        k = _vkey(v)
        if k is not None:
            out.add(k)
    return out


def _spellings(x):
    """The parsed values jsonschema-equal to the enum value x that an instance may hold: an integral number as
    an int and as a float (their types differ: draft 4 counts 1.0 as no integer)."""
    if _is_num(x) and math.isfinite(x) and float(x).is_integer() and abs(x) < 2**63:
        return [int(x), float(x)]
    return [x]


def _json_type(v, draft):
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        # draft 6+ counts 1.0 as an integer; strict mode's integer texts never spell it so (module docstring)
        return "int" if (draft >= 6 and v.is_integer()) else "frac"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    if isinstance(v, dict):
        return "object"
    return "?"


class _Dec(Decimal):
    """A float bound's shortest repr, carrying the float's exact binary value (``exact``): Python compares an
    int instance with the exact value, a float instance (its text the shortest repr) as the repr."""

    exact = None


def _dec(v):
    """A numeric schema value as a Decimal (a float as its shortest repr: module docstring)."""
    if isinstance(v, bool):
        return Decimal(int(v))
    if isinstance(v, int):
        return Decimal(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            return None
        d = _Dec(repr(v))
        exact = Decimal(v)
        if exact != d:
            d.exact = exact
        return d
    return None


# --- GBNF text helpers ----------------------------------------------------------------------------


def _lit(s):
    """A GBNF literal of the text s."""
    out = ['"']
    for ch in s:
        o = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif o < 0x20 or o == 0x7F:
            out.append("\\x%02X" % o)
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _class_char(o):
    if o < 0x80 and (chr(o).isalnum()):
        return chr(o)
    if o <= 0xFF:
        return "\\x%02X" % o
    if o <= 0xFFFF:
        return "\\u%04X" % o
    return "\\U%08X" % o


_SCALARS = (str, int, float, bool, type(None))  # values valid() remembers its verdicts on
_UNMERGED = object()  # _Compiler.merge_cache: not merged yet (a merge may be None)
_CLASS_CACHE = {}


def _char_class(cps, negate=False):
    """A GBNF character class of the code points cps (a set of ints)."""
    key = (frozenset(cps), negate)
    text = _CLASS_CACHE.get(key)
    if text is None:
        text = _char_class_text(cps, negate)
        if len(_CLASS_CACHE) > 4096:
            _CLASS_CACHE.clear()
        _CLASS_CACHE[key] = text
    return text


def _char_class_text(cps, negate):
    cps = sorted(cps)
    parts = []
    i = 0
    while i < len(cps):
        j = i
        while j + 1 < len(cps) and cps[j + 1] == cps[j] + 1:
            j += 1
        parts.append(_class_char(cps[i]) if i == j else _class_char(cps[i]) + "-" + _class_char(cps[j]))
        i = j + 1
    return "[" + ("^" if negate else "") + "".join(parts) + "]"


_SHORT_ESC = {'"': '\\"', "\\": "\\\\", "/": "\\/", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _hex_spell(v):
    """GBNF of the 4 hex digits of v, either case."""
    return " ".join("[" + c + c.upper() + "]" if c.isalpha() else _lit(c) for c in "%04x" % v)


_HEX_DIGITS = "0123456789abcdef"
_HEX_STEPS = {}


def _hex_class(hs):
    """The character class of the hex digits hs (lowercase), either case."""
    cps = set()
    for h in hs:
        cps.add(ord(h))
        cps.add(ord(h.upper()))
    return _char_class(cps)


def _hex_except_steps(ex):
    """The rules of ``Compiler.hex_except`` for ex (a frozenset of 4-digit lowercase hex strings), once per
    process: ``(steps, root)``. Each step is one rule's body, in the order the trie's nodes are finished, as
    parts: text, or the index of an earlier step (that rule's name once made). ``root`` is None (no code
    point), "" (none excluded) or the index of the step of the root's rule. The compiler makes the rules in
    this order with ``add_rule`` (one rule per distinct body), so the grammar is the one the trie walk would
    write: the walk is done once per set of excluded code points instead of once per trie node asking."""
    got = _HEX_STEPS.get(ex)
    if got is not None:
        return got
    prefixes = {e[:i] for e in ex for i in range(1, 5)}
    steps = []

    def node(prefix):
        depth = len(prefix)
        if depth == 4:
            return None if prefix in ex else ""
        free, alts = [], []
        for h in _HEX_DIGITS:
            p = prefix + h
            if len(p) == 2 and p[0] == "d" and h in "89abcdef":
                continue  # U+D800-U+DFFF: only as surrogate pairs
            if p == "d" or p in prefixes:
                sub = node(p)
                if sub is not None:
                    alts.append([_hex_class(h)] if sub == "" else [_hex_class(h) + " ", sub])
            else:
                free.append(h)
        if free:
            alts.append([_hex_class(free) + " hex" * (3 - depth)])
        if not alts:
            return None
        parts = []
        for i, alt in enumerate(alts):
            if i:
                parts.append(" | ")
            parts.extend(alt)
        steps.append(tuple(parts))
        return len(steps) - 1

    root = node("")
    # a recursive closure refers to itself: freed now, not by the collector
    node = None  # noqa: F841
    got = (tuple(steps), root)
    if len(_HEX_STEPS) > 4096:
        _HEX_STEPS.clear()
    _HEX_STEPS[ex] = got
    return got


def _spell_char(ch):
    """GBNF of every spelling of one code point inside a JSON string (module docstring)."""
    o = ord(ch)
    alts = []
    if o >= 0x20 and ch not in '"\\':
        alts.append(_lit(ch))
    if ch in _SHORT_ESC:
        alts.append(_lit(_SHORT_ESC[ch]))
    if o <= 0xFFFF:
        alts.append('"\\\\u" ' + _hex_spell(o))
    else:
        hi, lo = 0xD800 + ((o - 0x10000) >> 10), 0xDC00 + ((o - 0x10000) & 0x3FF)
        alts.append('"\\\\u" ' + _hex_spell(hi) + ' "\\\\u" ' + _hex_spell(lo))
    return "( " + " | ".join(alts) + " )"


class _StrC:
    """The constraints on one JSON string, as an intersection: length range, regexes (and negated ones),
    formats (and negated), a finite set it must belong to (or None) and a finite set it must avoid."""

    __slots__ = ("min", "max", "patterns", "notpatterns", "formats", "notformats", "include", "exclude")

    def __init__(self):
        self.min, self.max = 0, None
        self.patterns, self.notpatterns, self.formats, self.notformats = [], [], [], []
        self.include, self.exclude = None, set()

    def copy(self):
        c = _StrC()
        c.min, c.max = self.min, self.max
        c.patterns, c.notpatterns = list(self.patterns), list(self.notpatterns)
        c.formats, c.notformats = list(self.formats), list(self.notformats)
        c.include = None if self.include is None else set(self.include)
        c.exclude = set(self.exclude)
        return c

    def needs_lang(self):
        return bool(self.patterns or self.notpatterns or self.formats or self.notformats)


# --- numbers: a digit-wise automaton over the number's text ---------------------------------------


def _sgn(x):
    return (x > 0) - (x < 0)


class _Bound:
    """A comparison of a number text's value with the decimal B, kept digit by digit."""

    def __init__(self, value, accept, texts="all"):
        self.texts = texts  # "all", or "int" (integer texts only) or "float" (texts with fraction/exponent)
        self.neg = value < 0
        self.zero = value == 0
        a = value.copy_abs()  # abs() would round to the context's 28 digits
        with localcontext() as ctx:
            ctx.prec = 1000
            s = format(a, "f")
        ip, _, fp = s.partition(".")
        self.ib = ip.lstrip("0") or "0"
        self.fb = fp.rstrip("0")
        if self.zero:
            self.mb, self.f = "", 0
        else:
            with localcontext() as ctx:
                ctx.prec = 1000  # normalize() rounds to the context's precision too
                t = a.normalize().as_tuple()
            ds = "".join(map(str, t.digits))
            self.f = len(ds) - 1 + t.exponent
            self.mb = ds.rstrip("0")
        self.fd = str(abs(self.f)) if self.f else ""
        self.accept = accept  # a predicate on the comparison's result in {-1, 0, 1}

    # the state: (n, cmp) of the integer part against ib; (decided, j) of fraction digits against fb;
    # (decided, j) of mantissa digits against mb; (esign, k, cmp) of the exponent against |f|
    def start(self):
        # an integer-texts-only comparison needs no mantissa comparator (exponent texts are not its business)
        return ((0, 0), None, None if self.texts == "int" else (None, 0), None)

    def int_digit(self, st, d):
        (n, c), fc, mc, ec = st
        if n < len(self.ib):
            if c == 0:
                c = _sgn(d - int(self.ib[n]))
            n += 1
        else:
            n, c = len(self.ib) + 1, 0  # more digits than B's integer part: c is read no more
        if mc is not None:
            mc = self._seq(mc, d, self.mb) if n == 1 and d != 0 else None
        return ((n, c), fc, mc, ec)

    def _ires(self, ic):
        n, c = ic
        if n < len(self.ib):
            return -1
        if n > len(self.ib):
            return 1
        return c

    @staticmethod
    def _seq(sc, d, ref):
        dec, j = sc
        if dec is not None:
            return sc
        bd = int(ref[j]) if j < len(ref) else 0
        if d != bd:
            return (_sgn(d - bd), 0)  # decided: j is read no more
        return (None, min(j + 1, len(ref)))

    def dot(self, st):
        if st is None:
            return None
        ic, _, mc, ec = st
        r = self._ires(ic)
        return (ic, (r if r != 0 else None, 0), mc, ec)

    def frac_digit(self, st, d):
        if st is None:
            return None
        ic, fc, mc, ec = st
        return (ic, self._seq(fc, d, self.fb), None if mc is None else self._seq(mc, d, self.mb), ec)

    def exp_start(self, st, sign):
        if st is None:
            return None
        ic, fc, mc, _ = st
        return (ic, fc, mc, (sign, 0, 0))

    def exp_digit(self, st, d):
        if st is None:
            return None
        ic, fc, mc, (s, k, c) = st
        if k == 0 and d == 0:
            return st
        if k < len(self.fd):
            if c == 0:
                c = _sgn(d - int(self.fd[k]))
            k += 1
        else:
            k, c = len(self.fd) + 1, 0  # more exponent digits than |f| has: c is read no more
        return (ic, fc, mc, (s, k, c))

    @staticmethod
    def _seq_end(sc, ref):
        dec, j = sc
        if dec is not None:
            return dec
        return -1 if j < len(ref) else 0

    def result(self, st, phase, xneg):
        if self.texts != "all" and (self.texts == "int") != (phase in ("Z", "I")):
            return True  # this comparison is for the other kind of text
        ic, fc, mc, ec = st
        if phase in ("Z", "I"):
            c = self._ires(ic)
            if c == 0:
                c = -1 if self.fb else 0
        elif phase == "F":
            c = self._seq_end(fc, self.fb)
        else:  # exponent form with a normalised mantissa
            if self.zero:
                c = 1
            else:
                s, k, cc = ec
                cabs = -1 if k < len(self.fd) else (1 if k > len(self.fd) else cc)
                se = 0 if k == 0 else s
                sf = _sgn(self.f)
                if se != sf:
                    ce = _sgn(se - sf)
                else:
                    ce = 0 if se == 0 else (cabs if se > 0 else -cabs)
                c = ce if ce != 0 else self._seq_end(mc, self.mb)
        if not xneg and not self.neg:
            r = c
        elif xneg and self.neg:
            r = -c
        elif xneg:
            r = 0 if (c == 0 and self.zero) else -1
        else:
            r = 1
        return self.accept(r)


_NUMBER_DFAS: dict = {}  # number automata by their bounds (Compiler.number_expr), bounded
_NUMBER_DFAS_MAX = 1024


def _number_dfa(
    integer_only, bounds, modulus, zero_fraction_only, no_exponent=False, frac_only=None, must=None, notmods=()
):
    """The DFA (transitions, accepting) of number texts whose value satisfies every bound and is divisible by
    modulus (an int or None). ``frac_only``: only texts of non-integral values, 4 (draft 4: every text with a
    fraction or exponent, a Python float) or 6 (a nonzero fraction digit, or a negative nonzero exponent).
    ``notmods`` (negated multipleOf): the value is a multiple of none of these; modulus is then only the
    remainder kept (a multiple of each, and of ``must``, the divisor it must have, or None). A value with a
    fraction is a multiple of no integer; an exponent text is taken only with a negative exponent (a value
    below 1), as ``frac_only`` 6 takes it. States are tuples; the alphabet is "-0123456789.eE+"."""
    # The comparisons' states, a tuple per bound, are interned: an automaton state holds the small number of
    # its tuple, so that hashing states and moves costs no walk of nested tuples. They move alike in many
    # automaton states (which differ in sign, remainder, flags): each move computed once.
    comps: list = []
    comp_ids: dict = {}
    moves: dict = {}
    int_only = tuple(b.texts == "int" for b in bounds)
    settle = any(int_only)
    # the flags (nonzero fraction digit, negative exponent, nonzero exponent digit) are read by acceptance only
    # for frac_only 6 and beside notmods: elsewhere kept False, so that they do not multiply the states
    flags = frac_only == 6 or bool(notmods)

    def intern(bs):
        got = comp_ids.get(bs)
        if got is None:
            got = comp_ids[bs] = len(comps)
            comps.append(bs)
        return got

    def move(kind, ci, d):
        key = (kind, ci, d)
        got = moves.get(key)
        if got is None:
            bs = comps[ci]
            if kind == 0:
                nb = tuple(b.int_digit(s, d) for b, s in zip(bounds, bs))
            elif kind == 1:
                nb = tuple(b.frac_digit(s, d) for b, s in zip(bounds, bs))
            elif kind == 2:
                nb = tuple(b.exp_digit(s, d) for b, s in zip(bounds, bs))
            elif kind == 3:
                nb = tuple(b.exp_start(s, d) for b, s in zip(bounds, bs))
            elif kind == 4:
                nb = tuple(b.dot(s) for b, s in zip(bounds, bs))
            else:
                nb = tuple(b.exp_start(b.dot(s) if d else s, 1) for b, s in zip(bounds, bs))
            if settle and kind in (4, 5):
                # past the integer part (".", or "e" after the integer part), comparisons kept for integer texts
                # only are settled: forget them so that their states do not multiply the automaton's
                nb = tuple(None if io else x for io, x in zip(int_only, nb))
            got = moves[key] = intern(nb)
        return got

    def step(state, ch):
        """The state after ch, or None. A state: (phase, negative, integer digits 0/1/2, remainder or None,
        comparisons' number, nonzero fraction digit seen, negative exponent, nonzero exponent digit seen)."""
        phase, xneg, nint, mod, ci, fnz, eneg, enz = state
        if ch == "-":
            if phase == "S":
                return ("M", True, 0, mod, ci, fnz, eneg, enz)
            if phase == "X":
                return ("XS", xneg, nint, mod, move(3, ci, -1), fnz, flags, enz)
            return None
        if ch == "+":
            if phase == "X":
                return ("XS", xneg, nint, mod, move(3, ci, 1), fnz, eneg, enz)
            return None
        if ch == ".":
            if phase in ("Z", "I") and not integer_only:
                return ("D", xneg, nint, mod, move(4, ci, 0), fnz, eneg, enz)
            return None
        if ch in "eE":
            # exponents only after a normalised mantissa, and never with multipleOf (module docstring)
            if (
                phase in ("I", "F")
                and nint == 1
                and not integer_only
                and (modulus is None or (notmods and must is None))
                and not no_exponent
            ):
                # past the mantissa nint is read no more
                return ("X", xneg, 0, mod, move(5, ci, phase == "I"), fnz, eneg, enz)
            return None
        d = ord(ch) - 48
        if phase in ("S", "M"):
            nmod = None if mod is None else d % modulus
            # nint: 1 after a first digit that can start a normalised mantissa, 0 after "0"
            return ("Z" if d == 0 else "I", xneg, 0 if d == 0 else 1, nmod, move(0, ci, d), fnz, eneg, enz)
        if phase == "I":
            nmod = None if mod is None else (mod * 10 + d) % modulus
            return ("I", xneg, min(nint + 1, 2), nmod, move(0, ci, d), fnz, eneg, enz)
        if phase in ("D", "F"):
            if zero_fraction_only and d != 0:
                return None
            return ("F", xneg, nint, mod, move(1, ci, d), fnz or (flags and d != 0), eneg, enz)
        if phase in ("X", "XS", "E"):
            return ("E", xneg, nint, mod, move(2, ci, d), fnz, eneg, enz or (flags and d != 0))
        return None

    def accepting(state):
        phase, xneg, nint, mod, ci, fnz, eneg, enz = state
        bs = comps[ci]
        if phase not in ("Z", "I", "F", "E"):
            return False
        if frac_only == 4 and phase not in ("F", "E"):
            return False
        if frac_only == 6 and not ((phase == "F" and fnz) or (phase == "E" and eneg and enz)):
            return False
        if notmods:
            if phase == "E" and not (eneg and enz):
                return False  # a positive exponent: maybe an integer, maybe a multiple (not taken)
            if phase in ("Z", "I") or (phase == "F" and not fnz):  # an integral value
                if (must is not None and mod % must) or any(mod % q == 0 for q in notmods):
                    return False
            elif must is not None:
                return False
        elif mod is not None and mod != 0:
            return False
        return all(b.result(s, phase, xneg) for b, s in zip(bounds, bs))

    start = (
        "S",
        False,
        0,
        None if modulus is None else 0,
        intern(tuple(b.start() for b in bounds)),
        False,
        False,
        False,
    )
    states = {start: 0}
    order = [start]
    trans = []
    i = 0
    # the characters step can take in each phase (the others lead nowhere), in the alphabet's order
    chars = {"S": "-0123456789", "Z": ".", "I": "0123456789.eE", "F": "0123456789eE", "X": "-0123456789+"}
    kinds = {"S": 0, "M": 0, "I": 0, "D": 1, "F": 1, "X": 2, "XS": 2, "E": 2}  # move's kind for a digit
    while i < len(order):
        st = order[i]
        row = {}
        # without a remainder, a digit acts through the comparisons' move and whether it is 0 alone: digits
        # alike in both lead to the same state, computed once
        kind = kinds.get(st[0]) if st[3] is None else None
        alike = {}
        for ch in chars.get(st[0], "0123456789"):
            if kind is not None and "0" <= ch <= "9":
                key = (move(kind, st[4], ord(ch) - 48), ch == "0")
                nx = alike.get(key, alike)
                if nx is alike:
                    nx = alike[key] = step(st, ch)
            else:
                nx = step(st, ch)
            if nx is None:
                continue
            if nx not in states:
                if len(order) >= _MAX_STATES:
                    raise _Refuse("SchemaLimits", "#", "the number automaton has more than %d states" % _MAX_STATES)
                states[nx] = len(order)
                order.append(nx)
            row[ch] = states[nx]
        trans.append(row)
        i += 1
    acc = [accepting(s) for s in order]
    # minimized (the comparisons keep more than the language needs: 560 states for "maximum": 512, 32 after)
    small = _sl._finish([sorted((ord(c), ord(c), t) for c, t in row.items()) for row in trans], acc, "minimum")
    return [{chr(c): t for lo, hi, t in row for c in range(lo, hi + 1)} for row in small._trans], list(small._acc)


# --- the compiler ---------------------------------------------------------------------------------


class _Compiler:
    def __init__(self, schema, lenient, limits):
        self.root = schema
        self.draft = _draft_of(schema)
        self.vocab = _VOCAB.get(self.draft)
        self.lenient = frozenset(lenient or ())
        self.limits = limits
        self.deadline = None
        if limits is not None and limits.max_seconds is not None:
            self.deadline = time.monotonic() + limits.max_seconds
        # no more than the engine takes (a longer grammar would be refused there, by a GrammarError)
        self.max_bytes = min(limits.max_grammar_bytes if limits is not None else 8 << 20, _ENGINE_MAX_GRAMMAR_BYTES)
        self.max_nodes = limits.max_nodes if limits is not None else 1_000_000
        self.ptr = {}  # id(dict) -> JSON pointer
        self.base = {}  # id(dict) -> base URI
        self.ids = {}  # resource URI -> node
        self.anchors = {}  # (resource URI, anchor) -> node
        self.keep = []  # synthetic dicts (their ids must stay unique)
        self.syn = set()  # ids of synthetic dicts
        self.rules = {}  # name -> body
        self.body_names = {}
        self.counter = 0
        self.conj_rules = {}
        self.expand_cache = {}
        self.negate_cache = {}
        self.valid_memo = {}  # (class, scalar value, id(schema)) -> valid(value, schema) at depth 0
        self.merge_cache = {}  # id(dict), or the frozenset of a term's dict ids -> merge(term)
        self.active = set()
        self.nodes = 0
        self.bytes = 0
        self.any_order_states = 0
        self.exact_order_states = 0  # key sets of objects taking the exact form where the repeating one would do
        if self.draft == 3:
            raise _Refuse("$schema", "#", "draft-03 schemas are not supported")
        self._index(schema, "#", "")

    # --- bookkeeping ---
    def tick(self, pointer):
        self.nodes += 1
        if self.nodes > self.max_nodes:
            raise _Refuse(
                "SchemaLimits.max_nodes", pointer, "the schema expands to more than %d nodes" % self.max_nodes
            )
        if self.deadline is not None and self.nodes & 63 == 0 and time.monotonic() > self.deadline:
            raise _Refuse("SchemaLimits.max_seconds", pointer, "the conversion takes longer than its time budget")

    def refuse(self, keyword, pointer, reason):
        raise _Refuse(keyword, pointer, reason)

    def p(self, d):
        return self.ptr.get(id(d), "#")

    def synth(self, d, pointer):
        self.keep.append(d)
        self.syn.add(id(d))
        self.ptr[id(d)] = pointer
        return d

    def new_name(self, prefix):
        self.counter += 1
        return "%s-%d" % (prefix, self.counter)

    def add_rule(self, prefix, body):
        """A rule for body (one rule per distinct body)."""
        if body in self.body_names:
            return self.body_names[body]
        name = self.new_name(prefix)
        self.set_rule(name, body)
        self.body_names[body] = name
        return name

    def set_rule(self, name, body):
        self.rules[name] = body
        self.bytes += len(name) + len(body) + 6  # " ::= " and the newline
        if self.bytes > self.max_bytes:
            raise _Refuse("SchemaLimits.max_grammar_bytes", "#", "the grammar grows past %d bytes" % self.max_bytes)

    # --- the document: pointers, bases, $id and $anchor, $ref ---
    def _index(self, node, pointer, base, depth=0):
        stack = [(node, pointer, base, depth)]
        while stack:
            node, pointer, base, depth = stack.pop()
            if depth > _MAX_DEPTH:
                # every node's pointer is kept: past this, pointers alone would cost depth^2 bytes
                raise _Refuse(
                    "SchemaLimits.max_depth",
                    pointer[:200] + "...",
                    "the schema nests deeper than %d levels" % _MAX_DEPTH,
                )
            if isinstance(node, list):
                for i, x in enumerate(node):
                    stack.append((x, "%s/%d" % (pointer, i), base, depth + 1))
                continue
            if not isinstance(node, dict) or id(node) in self.ptr:
                continue
            self.tick(pointer)
            idkey = "id" if self.draft <= 4 else "$id"
            sid = node.get(idkey)
            if isinstance(sid, str) and not (self.draft <= 7 and "$ref" in node):
                if sid.startswith("#"):
                    self.anchors[(base, sid[1:])] = node
                else:
                    base = urllib.parse.urldefrag(urllib.parse.urljoin(base, sid))[0]
                    self.ids.setdefault(base, node)
            if pointer == "#":
                self.ids.setdefault(base, node)
                self.ids.setdefault("", node)
            if isinstance(node.get("$anchor"), str):
                self.anchors[(base, node["$anchor"])] = node
            self.ptr[id(node)] = pointer
            self.base[id(node)] = base
            for k, v in node.items():
                if k in ("enum", "const", "default", "examples", "required", "example"):
                    continue
                if isinstance(v, (dict, list)):
                    stack.append((v, "%s/%s" % (pointer, _esc_ptr(k)), base, depth + 1))

    def resolve(self, ref, where):
        pointer = self.p(where) + "/$ref"
        if not isinstance(ref, str):
            self.refuse("$ref", pointer, "$ref is not a string")
        base = self.base.get(id(where), "")
        full = urllib.parse.urljoin(base, ref) if base else ref
        url, frag = urllib.parse.urldefrag(full)
        doc = self.ids.get(url)
        if doc is None:
            self.refuse("$ref", pointer, "remote or unknown reference %r" % ref)
        frag = urllib.parse.unquote(frag)
        if frag == "":
            return doc
        if not frag.startswith("/"):
            node = self.anchors.get((url, frag))
            if node is None:
                self.refuse("$ref", pointer, "unknown anchor in %r" % ref)
            return node
        node = doc
        at = self.p(doc)
        for part in frag[1:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            at += "/" + _esc_ptr(part)
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                self.refuse("$ref", pointer, "unresolvable reference %r" % ref)
        if isinstance(node, dict) and id(node) not in self.ptr:
            self._index(node, at, self.base.get(id(doc), url))
        return node

    # --- schemas to disjunctive normal form: a list of terms, each a tuple of atomic dicts ---
    def check_schema(self, s, pointer):
        if isinstance(s, bool):
            return
        if not isinstance(s, dict):
            self.refuse("schema", pointer, "a schema must be an object or a boolean")

    def expand(self, s):
        if s is True:
            return [()]
        if s is False:
            return []
        self.check_schema(s, "#")
        return self.once(
            self.expand_cache,
            id(s),
            self._expand,
            s,
            "$ref",
            "a reference cycle that does not descend into the instance",
        )

    def once(self, cache, key, build, s, keyword, cycle):
        """``build(s)`` computed once per ``key`` (cached in ``cache``); a call of it for the same ``key`` from
        within itself is a cycle the instance does not descend through: refused naming ``keyword``."""
        if key in cache:
            return cache[key]
        mark = (build.__name__, key)
        if mark in self.active:
            self.refuse(keyword, self.p(s), cycle)
        if len(self.active) >= _MAX_DEPTH:
            # builds nest as $ref chains, allOf and not do: bounded as nesting is (each level costs more work
            # the deeper it is, so a 3,000-level chain took 22 s before compiled code reached its stack's end)
            raise _Refuse(
                "SchemaLimits.max_depth", self.p(s), "the schema's references nest deeper than %d levels" % _MAX_DEPTH
            )
        self.active.add(mark)
        try:
            res = build(s)
        finally:
            self.active.discard(mark)
        cache[key] = res
        return res

    def _expand(self, s):
        _check_stack()
        ptr = self.p(s)
        self.tick(ptr)
        synthetic = id(s) in self.syn
        if "$strict-not" in s:
            return self.negate(s["$strict-not"])
        if "$strict-any" in s:
            return self.union([self.expand(x) for x in s["$strict-any"]])
        if not synthetic:
            for k in s:
                if k in self.vocab and k in _ALWAYS_REFUSED:
                    self.refuse(k, ptr + "/" + _esc_ptr(k), "%s is not supported in strict mode" % k)
        if "$ref" in s and not synthetic:
            target = self.resolve(s["$ref"], s)
            if self.draft <= 7:
                return self.expand(target)  # draft 4-7: keywords beside $ref are ignored
            parts = [[(s,)], self.expand(target)]
        else:
            parts = [[(s,)]]
        v = self.vocab if not synthetic else _VOCAB[2020]
        if "allOf" in s and "allOf" in v:
            subs = self.sublist(s, "allOf")
            for x in subs:
                parts.append(self.expand(x))
        if "anyOf" in s and "anyOf" in v:
            parts.append(self.union([self.expand(x) for x in self.sublist(s, "anyOf")]))
        if "oneOf" in s and "oneOf" in v:
            parts.append(self.one_of(s))
        if "not" in s and "not" in v:
            self.check_schema(s["not"], ptr + "/not")
            parts.append(self.negate(s["not"]))
        if "if" in s and "if" in v and ("then" in s or "else" in s):  # if alone validates nothing
            self.check_schema(s["if"], ptr + "/if")
            then = s.get("then", True)
            els = s.get("else", True)
            self.check_schema(then, ptr + "/then")
            self.check_schema(els, ptr + "/else")
            parts.append(
                self.union(
                    [
                        self.product([self.expand(s["if"]), self.expand(then)], ptr),
                        self.product([self.negate(s["if"]), self.expand(els)], ptr),
                    ]
                )
            )
        for k, a, x, kp in self.schema_deps(s, v):
            # a schema dependency: an object holding the key a satisfies x too; the instances split into those
            # (the key present, x) and the rest (not an object, or an object without a), as jsonschema reads it
            has = self.has_key(a, kp)
            parts.append(self.union([self.product([[(has,)], self.expand(x)], kp), self.negate(has)]))
        return self.product(parts, ptr)

    def schema_deps(self, s, v):
        """(keyword, key, schema, pointer) of each schema dependency of s (``dependentSchemas``, and the schema form
        of draft 4-7's ``dependencies``; its array form is ``deps_of``'s); one that constrains nothing is left out."""
        out = []
        for k in ("dependentSchemas", "dependencies"):
            val = s.get(k)
            if val is None or k not in v:
                continue
            if not isinstance(val, dict):
                self.refuse(k, self.p(s) + "/" + k, "%s must be an object" % k)
            for a, x in val.items():
                kp = self.p(s) + "/" + k + "/" + _esc_ptr(a)
                if isinstance(x, list):
                    if k == "dependentSchemas":
                        self.refuse(k, kp, "a dependentSchemas value must be a schema")
                    continue
                self.check_schema(x, kp)
                if x is True or x == {}:
                    continue
                out.append((k, a, x, kp))
        return out

    def has_key(self, a, pointer):
        """The synthetic schema of the objects that hold the key a."""
        cache = self.__dict__.setdefault("has_key_cache", {})
        if a not in cache:
            cache[a] = self.synth({"$strict-types": frozenset({"object"}), "required": [a]}, pointer)
        return cache[a]

    def sublist(self, s, k):
        subs = s[k]
        if not isinstance(subs, list) or not subs:
            self.refuse(k, self.p(s) + "/" + k, "%s must be a non-empty array of schemas" % k)
        for i, x in enumerate(subs):
            self.check_schema(x, "%s/%s/%d" % (self.p(s), k, i))
        return subs

    def union(self, lists):
        out = []
        seen = set()
        for terms in lists:
            for t in terms:
                key = frozenset(map(id, t))
                if key not in seen:
                    seen.add(key)
                    out.append(t)
        if len(out) > _MAX_TERMS:
            self.refuse("anyOf", "#", "the schema distributes into more than %d alternatives" % _MAX_TERMS)
        return out

    def product(self, parts, ptr):
        terms = [()]
        for part in parts:
            nt = []
            seen = set()
            for a in terms:
                for b in part:
                    # a dict equal to one the term holds adds nothing; Python's == finds {"enum": [0]} equal to
                    # {"enum": [false]}, so equal ones are compared again with JSON's types (_same)
                    t = a + tuple(x for x in b if x not in a or not any(y == x and self.same(x, y) for y in a))
                    key = frozenset(map(id, t))
                    if key not in seen:
                        seen.add(key)
                        nt.append(t)
            terms = nt
            if len(terms) > _MAX_TERMS:
                self.refuse("anyOf", ptr, "allOf/anyOf/oneOf/if distribute into more than %d alternatives" % _MAX_TERMS)
        # drop terms whose keywords contradict (no instance), so they do not multiply further up
        return [t for t in terms if self.merge(t) is not None]

    def same(self, x, y):
        """Two schema dicts equal as JSON (a boolean is no number) and read with the same vocabulary."""
        return (id(x) in self.syn) == (id(y) in self.syn) and _same(x, y)

    def one_of(self, s):
        ptr = self.p(s) + "/oneOf"
        subs = self.sublist(s, "oneOf")
        branches = [(x, self.expand(x)) for x in subs]
        live = [(x, b) for x, b in branches if b]
        # the branches are met only beside s's own type (s's term is in every product oneOf's terms join): two
        # branches that overlap only where it fails (a number, under "type": "object") are disjoint here. Only
        # the type: s's other keywords may lead back to s through $ref while s is being expanded
        v = self.vocab if id(s) not in self.syn else _VOCAB[2020]
        within = [b for _, b in live]
        if "type" in s and "type" in v:
            ctx = self.synth({"$strict-types": self.types_of(s["type"], self.p(s) + "/type")}, self.p(s))
            within = [[(ctx,) + t for t in b] for b in within]
        overlap = {i: [] for i in range(len(live))}
        for i in range(len(live)):
            for j in range(i + 1, len(live)):
                if not all(self.disjoint(t1, t2, 0) for t1 in within[i] for t2 in within[j]):
                    overlap[i].append(j)
                    overlap[j].append(i)
        if not any(overlap.values()):
            return self.union([b for _, b in live])  # provably disjoint: oneOf is anyOf
        # exactly one: branch i and the negation of every branch it may overlap
        out = []
        for i, (x, terms) in enumerate(live):
            try:
                negs = [self.negate(live[j][0]) for j in overlap[i]]
            except _Refuse as e:
                raise _Refuse(
                    "oneOf",
                    ptr,
                    "oneOf branches that are not provably disjoint, one of which strict "
                    "mode cannot negate (%s: %s)" % (e.keyword, e.reason),
                ) from None
            out.append(self.product([terms] + negs, ptr))
        return self.union(out)

    # --- negation: the DNF of "not s" ---
    def negate(self, s):
        if s is True:
            return []
        if s is False:
            return [()]
        return self.once(self.negate_cache, id(s), self._negate, s, "not", "a negated reference cycle")

    def _negate(self, s):
        _check_stack()
        ptr = self.p(s)
        self.tick(ptr)
        synthetic = id(s) in self.syn
        if "$strict-not" in s:
            return self.expand(s["$strict-not"])
        if "$strict-any" in s:
            return self.product([self.negate(x) for x in s["$strict-any"]], ptr)
        if "$ref" in s and not synthetic and self.draft <= 7:
            return self.negate(self.resolve(s["$ref"], s))
        v = self.vocab if not synthetic else _VOCAB[2020]
        alts = []

        def syn(d, k):
            _check_stack()
            return (self.synth(d, ptr + "/" + _esc_ptr(k)),)

        others = lambda types: _ALL_TYPES - types  # noqa: E731
        for k, val in s.items():
            if k.startswith("$strict-"):
                kk = k
            elif k not in v:
                continue
            else:
                kk = k
            kp = ptr + "/" + _esc_ptr(k)
            if kk in _ALWAYS_REFUSED:
                self.refuse(kk, kp, "%s is not supported in strict mode" % kk)
            if kk == "$ref":
                alts.extend(self.negate(self.resolve(val, s)))
            elif kk == "allOf":
                for x in self.sublist(s, "allOf"):
                    alts.extend(self.negate(x))
            elif kk == "anyOf":
                alts.extend(self.product([self.negate(x) for x in self.sublist(s, "anyOf")], kp))
            elif kk == "oneOf":
                self.refuse("oneOf", kp, "a negated oneOf")
            elif kk == "not":
                self.check_schema(val, kp)
                alts.extend(self.expand(val))
            elif kk == "if":
                if "then" not in s and "else" not in s:
                    continue
                then = s.get("then", True)
                els = s.get("else", True)
                alts.extend(self.product([self.expand(val), self.negate(then)], kp))
                alts.extend(self.product([self.negate(val), self.negate(els)], kp))
            elif kk in ("type", "$strict-types"):
                types = self.types_of(val, kp) if kk == "type" else val
                alts.append(syn({"$strict-types": others(types)}, k))
            elif kk in ("enum", "const"):
                vals = val if kk == "enum" else [val]
                if kk == "enum" and not isinstance(val, list):
                    self.refuse("enum", kp, "enum must be an array")
                alts.append(syn({"$strict-notvalues": list(vals)}, k))
            elif kk == "$strict-notvalues":
                alts.append(syn({"enum": list(val)}, k))
            elif kk in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "$strict-bound"):
                # the instances that fail a keyword are of the keyword's type (it passes every other type):
                # not (x >= b) is a number x < b; not (x > b) a number x <= b
                for lo, b, excl in self.bounds_of(s, kk, val, kp):
                    alts.append(
                        syn({"$strict-types": frozenset({"int", "frac"}), "$strict-bound": [(not lo, b, not excl)]}, k)
                    )
            elif kk in ("minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties"):
                n = self.count(s, kk, kp)
                t = {
                    "minLength": "string",
                    "maxLength": "string",
                    "minItems": "array",
                    "maxItems": "array",
                    "minProperties": "object",
                    "maxProperties": "object",
                }[kk]
                if kk.startswith("min"):
                    if n > 0:
                        alts.append(syn({"$strict-types": frozenset({t}), "max" + kk[3:]: n - 1}, k))
                else:
                    alts.append(syn({"$strict-types": frozenset({t}), "min" + kk[3:]: n + 1}, k))
            elif kk == "pattern":
                if "pattern" in self.lenient:
                    continue
                if not isinstance(val, str):
                    self.refuse("pattern", kp, "pattern must be a string")
                self.regex(val, "pattern", kp)  # the validator searches with it (valid_atomic)
                alts.append(syn({"$strict-types": frozenset({"string"}), "$strict-notpattern": val}, k))
            elif kk == "$strict-notpattern":
                alts.append(syn({"$strict-types": frozenset({"string"}), "pattern": val}, k))
            elif kk == "format":
                if not isinstance(val, str) or val not in _CHECKED_FORMATS or "format" in self.lenient:
                    continue
                alts.append(syn({"$strict-types": frozenset({"string"}), "$strict-notformat": val}, k))
            elif kk == "required":
                if not isinstance(val, list):
                    self.refuse("required", kp, "required must be an array")
                for name in val:
                    alts.append(syn({"$strict-types": frozenset({"object"}), "properties": {name: False}}, k))
            elif kk == "properties":
                if not isinstance(val, dict):
                    self.refuse("properties", kp, "properties must be an object")
                for name, sub in val.items():
                    self.check_schema(sub, kp + "/" + _esc_ptr(name))
                    if sub is True:
                        continue
                    neg = self.synth({"$strict-not": sub}, kp + "/" + _esc_ptr(name))
                    alts.append(
                        syn({"$strict-types": frozenset({"object"}), "required": [name], "properties": {name: neg}}, k)
                    )
            elif kk in ("dependentRequired", "dependencies"):
                if not isinstance(val, dict):
                    self.refuse(kk, kp, "%s must be an object" % kk)
                for a, bs in val.items():
                    if not isinstance(bs, list):
                        continue  # a schema dependency: below
                    for b in bs:
                        alts.append(
                            syn({"$strict-types": frozenset({"object"}), "required": [a], "properties": {b: False}}, k)
                        )
            elif kk == "dependentSchemas":
                pass  # below
            elif kk == "propertyNames":
                # a key that fails the names' schema: one member constraint per term of its negation
                self.check_schema(val, kp)
                for t in self.negate(val):
                    nm = self.merge(t)
                    if nm is None or "string" not in nm["types"]:
                        continue  # keys are strings
                    some = _member(names=t)
                    alts.append(syn({"$strict-types": frozenset({"object"}), "$strict-some": some}, k))
            elif kk == "patternProperties":
                # a key matching a regex whose value fails the regex's schema (listed keys too)
                if not isinstance(val, dict):
                    self.refuse("patternProperties", kp, "patternProperties must be an object")
                for pat, sub in val.items():
                    pp = kp + "/" + _esc_ptr(pat)
                    self.check_schema(sub, pp)
                    self.regex(pat, "patternProperties", pp)
                    if sub is True:
                        continue
                    some = _member(patterns=((pat, pp),), value=self.not_of(sub, pp))
                    alts.append(syn({"$strict-types": frozenset({"object"}), "$strict-some": some}, k))
            elif kk == "additionalProperties":
                # a key neither listed nor matching a patternProperties regex whose value fails it
                self.check_schema(val, kp)
                if val is True or val == {}:
                    continue
                listed = s.get("properties") if "properties" in v else None
                pats = s.get("patternProperties") if "patternProperties" in v else None
                notpatterns = []
                for pat in pats if isinstance(pats, dict) else ():
                    pp = ptr + "/patternProperties/" + _esc_ptr(pat)
                    self.regex(pat, "patternProperties", pp)
                    notpatterns.append((pat, pp))
                some = _member(
                    exclude=frozenset(listed) if isinstance(listed, dict) else frozenset(),
                    notpatterns=tuple(notpatterns),
                    value=True if val is False else self.not_of(val, kp),
                )
                alts.append(syn({"$strict-types": frozenset({"object"}), "$strict-some": some}, k))
            elif kk in ("uniqueItems",) and val is False:
                continue
            elif kk == "items" and isinstance(val, (dict, bool)) and not ("prefixItems" in s and "prefixItems" in v):
                # an item that fails the items schema: an array that contains one
                if val is True:
                    continue
                self.check_schema(val, kp)
                neg = self.synth({"$strict-not": val}, kp)
                alts.append(syn({"$strict-types": frozenset({"array"}), "contains": neg}, k))
            elif kk == "contains" and not ("minContains" in s or "maxContains" in s):
                # no item passes contains: every item fails it
                self.check_schema(val, kp)
                neg = self.synth({"$strict-not": val}, kp)
                alts.append(syn({"$strict-types": frozenset({"array"}), "items": neg}, k))
            elif kk == "multipleOf" and "multipleOf" not in self.lenient:
                # a number that is no multiple: an integer of a nonzero remainder, or a value with a fraction
                if not _is_num(val) or val <= 0:
                    self.refuse(kk, kp, "multipleOf must be a positive number")
                if isinstance(val, float) and not val.is_integer():
                    self.refuse("not", kp, "the negation of a multipleOf that is not an integer")
                alts.append(syn({"$strict-types": frozenset({"int", "frac"}), "$strict-notmult": int(val)}, k))
            elif kk == "$strict-notmult":
                alts.append(syn({"$strict-types": frozenset({"int", "frac"}), "multipleOf": val}, k))
            elif kk in (
                "multipleOf",
                "items",
                "prefixItems",
                "additionalItems",
                "contains",
                "uniqueItems",
                "$strict-notformat",
            ):
                self.refuse("not", kp, "the negation of %s" % kk)
            else:
                self.refuse("not", kp, "the negation of %s" % kk)
        for k, a, x, kp in self.schema_deps(s, v):
            # failing a schema dependency: an object that holds the key and fails its schema
            alts.extend(self.product([[(self.has_key(a, kp),)], self.negate(x)], kp))
        return self.union([alts])

    # --- merging one term (a conjunction of atomic dicts) into per-type constraints ---
    def types_of(self, val, pointer):
        names = [val] if isinstance(val, str) else val
        if not isinstance(names, list):
            self.refuse("type", pointer, "type must be a string or an array")
        out = set()
        for n in names:
            if n == "any" and self.draft <= 3:
                out |= _ALL_TYPES
            elif n not in _TYPE_NAMES:
                self.refuse("type", pointer, "unknown type %r" % (n,))
            else:
                out |= _TYPE_NAMES[n]
        return frozenset(out)

    def count(self, s, k, pointer):
        v = s[k]
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            self.refuse(k, pointer, "%s must be a non-negative integer" % k)
        return v

    def bounds_of(self, s, k, val, pointer):
        """[(is_lower, Decimal, exclusive)] of one bound keyword of s."""
        if k == "$strict-bound":
            return list(val)
        if self.draft <= 4 and k in ("exclusiveMinimum", "exclusiveMaximum"):
            return []  # draft 4: a modifier of minimum/maximum, read with them
        if not _is_num(val) and not (isinstance(val, bool) and self.draft >= 6 and k.startswith("exclusive")):
            self.refuse(k, pointer, "%s must be a number" % k)
        b = _dec(val)
        if b is None:
            self.refuse(k, pointer, "a non-finite bound")
        lower = k in ("minimum", "exclusiveMinimum")
        excl = k.startswith("exclusive")
        if self.draft <= 4:
            excl = bool(s.get("exclusiveMinimum" if lower else "exclusiveMaximum", False))
        return [(lower, b, excl)]

    def merge(self, term):
        """The per-type constraints of a term, or None when no instance satisfies it."""
        # a one-dict term (each atom valid() checks a value against) keyed by the dict's id, without a set
        key = id(term[0]) if len(term) == 1 else frozenset(map(id, term))
        m = self.merge_cache.get(key, _UNMERGED)
        if m is _UNMERGED:
            m = self.merge_cache[key] = self._merge(term)
        return m

    def _merge(self, term):
        m = {
            "types": set(_ALL_TYPES),
            "enum": None,
            "notvalues": [],
            "bounds": [],
            "mult": [],
            "notmult": [],  # $strict-notmult: divisors the number must not be a multiple of
            "str": _StrC(),
            "minI": 0,
            "maxI": None,
            "contains": [],
            "unique": None,
            "minP": 0,
            "maxP": None,
            "some": [],  # $strict-some: (member constraint, pointer): the object holds such a member (_some_ok)
            "dicts": term,
        }
        st = m["str"]
        for d in term:
            ptr = self.p(d)
            synthetic = id(d) in self.syn
            v = _VOCAB[2020] if synthetic else self.vocab
            for k, val in d.items():
                kp = ptr + "/" + _esc_ptr(k)
                if k.startswith("$strict-"):
                    pass
                elif k not in v:
                    continue
                if k == "type":
                    m["types"] &= self.types_of(val, kp)
                elif k == "$strict-types":
                    m["types"] &= val
                elif k in ("enum", "const"):
                    vals = val if k == "enum" else [val]
                    if k == "enum" and not isinstance(val, list):
                        self.refuse("enum", kp, "enum must be an array")
                    if m["enum"] is None:
                        m["enum"] = list(vals)
                    else:
                        keys = _vkeys(vals)  # hashed: enums of thousands of values met each other pairwise
                        m["enum"] = [x for x in m["enum"] if _vkey(x) in keys]
                elif k == "$strict-notvalues":
                    m["notvalues"].extend(val)
                elif k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "$strict-bound"):
                    m["bounds"].extend(self.bounds_of(d, k, val, kp))
                elif k == "multipleOf":
                    if "multipleOf" in self.lenient:
                        continue
                    if not _is_num(val) or val <= 0:
                        self.refuse(k, kp, "multipleOf must be a positive number")
                    if isinstance(val, float) and not val.is_integer():
                        self.refuse(
                            "multipleOf",
                            kp,
                            "a multipleOf that is not an integer (jsonschema divides floats: not a regular language)",
                        )
                    m["mult"].append(int(val))
                elif k == "$strict-notmult":
                    m["notmult"].append(val)
                elif k == "minLength":
                    st.min = max(st.min, self.count(d, k, kp))
                elif k == "maxLength":
                    n = self.count(d, k, kp)
                    st.max = n if st.max is None else min(st.max, n)
                elif k == "pattern":
                    if "pattern" in self.lenient:
                        continue
                    if not isinstance(val, str):
                        self.refuse(k, kp, "pattern must be a string")
                    self.regex(val, "pattern", kp)
                    st.patterns.append((val, kp))
                elif k == "$strict-notpattern":
                    st.notpatterns.append((val, kp))
                elif k == "format":
                    if isinstance(val, str) and val in _CHECKED_FORMATS and "format" not in self.lenient:
                        st.formats.append((val, kp))
                elif k == "$strict-notformat":
                    st.notformats.append((val, kp))
                elif k == "$strict-some":
                    if not any(_same(x, val) for x, _ in m["some"]):  # the same constraint twice: once
                        m["some"].append((val, ptr))
                elif k == "minItems":
                    m["minI"] = max(m["minI"], self.count(d, k, kp))
                elif k == "maxItems":
                    n = self.count(d, k, kp)
                    m["maxI"] = n if m["maxI"] is None else min(m["maxI"], n)
                elif k == "minProperties":
                    m["minP"] = max(m["minP"], self.count(d, k, kp))
                elif k == "maxProperties":
                    n = self.count(d, k, kp)
                    m["maxP"] = n if m["maxP"] is None else min(m["maxP"], n)
                elif k == "uniqueItems":
                    if val is True and "uniqueItems" not in self.lenient:
                        m["unique"] = kp
                elif k == "contains":
                    if "contains" in self.lenient:
                        continue
                    self.check_schema(val, kp)
                    lo, hi = 1, None
                    if self.draft >= 2019:
                        if "minContains" in d:
                            lo = self.count(d, "minContains", ptr + "/minContains")
                        if "maxContains" in d:
                            hi = self.count(d, "maxContains", ptr + "/maxContains")
                    m["contains"].append((val, lo, hi, kp))
                elif k in ("dependentSchemas", "dependencies"):
                    # the array form is read by deps_of; the schema form was expanded into the term (schema_deps)
                    if not isinstance(val, dict):
                        self.refuse(k, kp, "%s must be an object" % k)
                elif k in (
                    "required",
                    "properties",
                    "patternProperties",
                    "additionalProperties",
                    "propertyNames",
                    "dependentRequired",
                    "dependencies",
                    "items",
                    "prefixItems",
                    "additionalItems",
                    "$ref",
                    "allOf",
                    "anyOf",
                    "oneOf",
                    "not",
                    "if",
                    "$strict-not",
                    "$strict-any",
                ):
                    pass  # read where the object/array rules are built, or expanded into the term
                elif k in ("$recursiveRef", "$dynamicRef", "unevaluatedItems", "unevaluatedProperties"):
                    self.refuse(k, kp, "%s is not supported in strict mode" % k)
                else:
                    self.refuse(k, kp, "%s is not supported in strict mode" % k)
        types = m["types"]
        if not types:
            return None
        if st.max is not None and st.min > st.max:
            types.discard("string")
        if m["maxI"] is not None and m["minI"] > m["maxI"]:
            types.discard("array")
        if m["maxP"] is not None and m["minP"] > m["maxP"]:
            types.discard("object")
        if not types:
            return None
        if m["enum"] is not None:
            vals = []
            excluded = _vkeys(m["notvalues"])
            kept = set()  # the keys of the values kept: no value twice, and valid_atomic's membership test
            for x in m["enum"]:
                k = _vkey(x)
                if self.enum_type_ok(x, types) and (k is None or (k not in excluded and k not in kept)):
                    if k is not None:
                        kept.add(k)
                    vals.append(x)
            if not vals:
                return None
            m["enum"] = vals
            m["enum_keys"] = kept
        return m

    def enum_type_ok(self, x, types):
        """Some instance jsonschema-equal to the enum value x has a type in types (an integral number can be an
        int or a float)."""
        if _is_num(x) and (isinstance(x, int) or x.is_integer()):
            return bool(types & {"int", "frac"}) and (self.draft <= 4 or "int" in types)
        return _json_type(x, self.draft) in types

    # --- disjointness (for oneOf) ---
    def disjoint(self, t1, t2, depth):
        _check_stack()
        m1, m2 = self.merge(t1), self.merge(t2)
        if m1 is None or m2 is None:
            return True
        common = m1["types"] & m2["types"]
        if not common:
            return True
        for m, t, other in ((m1, t1, t2), (m2, t2, t1)):
            if m["enum"] is not None:
                vals = [y for x in m["enum"] for y in _spellings(x) if self.valid_term(y, t)]
                if not any(self.valid_term(x, other) for x in vals):
                    return True
        if common == {"object"} and depth < 4:
            # sorted: the keys' order decides which check (and which refusal inside it) comes first, and a
            # set of strings iterates in the order of the process's string hashes (PYTHONHASHSEED)
            r1, r2 = sorted(self.required_of(t1)), sorted(self.required_of(t2))
            for k in sorted(set(r1) & set(r2)):
                c1, c2 = self.value_conj(t1, k), self.value_conj(t2, k)
                e1 = self.product([self.expand(x) for x in c1], "#")
                e2 = self.product([self.expand(x) for x in c2], "#")
                if all(self.disjoint(a, b, depth + 1) for a in e1 for b in e2):
                    return True
            for k in r1:
                if not self.product([self.expand(x) for x in self.value_conj(t2, k)], "#"):
                    return True
            for k in r2:
                if not self.product([self.expand(x) for x in self.value_conj(t1, k)], "#"):
                    return True
        if common <= {"int", "frac"}:
            lo1, hi1 = self.range_of(m1)
            lo2, hi2 = self.range_of(m2)
            if (hi1 is not None and lo2 is not None and self.below(hi1, lo2)) or (
                hi2 is not None and lo1 is not None and self.below(hi2, lo1)
            ):
                return True
        return False

    @staticmethod
    def below(hi, lo):
        """Every x <= hi is below every y >= lo (each a (value, exclusive) pair)."""
        return hi[0] < lo[0] or (hi[0] == lo[0] and (hi[1] or lo[1]))

    @staticmethod
    def range_of(m):
        lo = hi = None
        for lower, b, excl in m["bounds"]:
            if lower and (lo is None or b > lo[0] or (b == lo[0] and excl)):
                lo = (b, excl)
            if not lower and (hi is None or b < hi[0] or (b == hi[0] and excl)):
                hi = (b, excl)
        return lo, hi

    def required_of(self, term):
        out = set()
        for d in term:
            r = d.get("required")
            if isinstance(r, list) and ("required" in self.vocab or id(d) in self.syn):
                out |= {x for x in r if isinstance(x, str)}
        return out

    def value_conj(self, term, key):
        """The schemas a property named key must satisfy in the term (properties, patternProperties,
        additionalProperties of each dict, each relative to its own dict)."""
        conj = []
        for d in term:
            v = _VOCAB[2020] if id(d) in self.syn else self.vocab
            ptr = self.p(d)
            props = d.get("properties") if "properties" in v else None
            pats = d.get("patternProperties") if "patternProperties" in v else None
            matched = False
            if isinstance(props, dict) and key in props:
                self.check_schema(props[key], ptr + "/properties/" + _esc_ptr(key))
                conj.append(props[key])
                matched = True
            if isinstance(pats, dict):
                for pat, sub in pats.items():
                    if self.search(pat, key, ptr + "/patternProperties/" + _esc_ptr(pat)):
                        self.check_schema(sub, ptr + "/patternProperties/" + _esc_ptr(pat))
                        conj.append(sub)
                        matched = True
            if not matched and "additionalProperties" in d and "additionalProperties" in v:
                self.check_schema(d["additionalProperties"], ptr + "/additionalProperties")
                conj.append(d["additionalProperties"])
        return conj

    def search(self, pattern, s, pointer):
        try:
            return re.search(pattern, s) is not None
        except re.error as e:
            self.refuse("patternProperties", pointer, "a pattern Python's re refuses: %s" % e)

    # --- a small validator (for enum values, property names, finite sets) ---
    def valid_term(self, x, term):
        return all(self.valid(x, d) for d in term)

    def valid(self, x, s, depth=0):
        _check_stack()
        if depth > 200:
            self.refuse("$ref", self.p(s), "validating a const/enum value recursed too deeply")
        if s is True:
            return True
        if s is False:
            return False
        memo = None
        if depth == 0 and x.__class__ in _SCALARS:
            # an enum's values meet the same schema once per term of every node that holds it (a oneOf of many
            # branches: the same value against the same dict thousands of times); the class keeps 1, 1.0, True
            # apart (their JSON types differ)
            memo = (x.__class__, x, id(s))
            got = self.valid_memo.get(memo)
            if got is not None:
                return got
        terms = self.expand(s)
        xt = _json_type(x, self.draft)  # once per value: a big enum meets every atom of every term
        out = any(all(self.valid_atomic(x, d, depth, xt) for d in t) for t in terms)
        if memo is not None:
            self.valid_memo[memo] = out
        return out

    def valid_atomic(self, x, d, depth, t):
        """x (of JSON type t, ``_json_type``) against the leaf keywords of d (its combinators are already
        expanded into the term)."""
        m = self.merge_cache.get(id(d), _UNMERGED)  # merge((d,))'s entry, looked up inline: the hot loop of enums
        if m is _UNMERGED:
            m = self.merge((d,))
        if m is None:
            return False
        if t not in m["types"]:
            return False
        if m["enum"] is not None and _vkey(x) not in m["enum_keys"]:  # a NaN-holding x has no key: equals none
            return False
        if any(_equal(x, y) for y in m["notvalues"]):
            return False
        if t in ("int", "frac"):
            dx = _dec(x)
            if dx is None:
                return False
            for lower, b, excl in m["bounds"]:
                if lower and (dx < b or (excl and dx == b)):
                    return False
                if not lower and (dx > b or (excl and dx == b)):
                    return False
            for q in m["mult"]:
                if isinstance(x, float) and not x.is_integer():
                    return False
                if int(x) % q:
                    return False
            for q in m["notmult"]:
                if not (isinstance(x, float) and not x.is_integer()) and not int(x) % q:
                    return False
        elif t == "string":
            st = m["str"]
            if len(x) < st.min or (st.max is not None and len(x) > st.max):
                return False
            for p, _ in st.patterns:
                if re.search(p, x) is None:
                    return False
            for p, _ in st.notpatterns:
                if re.search(p, x) is not None:
                    return False
            for f, kp in st.formats + st.notformats:
                ok = self.format_ok(f, x, kp)
                if ok != ((f, kp) in st.formats):
                    return False
        elif t == "array":
            if len(x) < m["minI"] or (m["maxI"] is not None and len(x) > m["maxI"]):
                return False
            for i, item in enumerate(x):
                for s in self.item_conj((d,), i):
                    if not self.valid(item, s, depth + 1):
                        return False
            if m["unique"] is not None:
                for i in range(len(x)):
                    for j in range(i):
                        if _equal(x[i], x[j]):
                            return False
            for c, lo, hi, _ in m["contains"]:
                n = sum(1 for item in x if self.valid(item, c, depth + 1))
                if n < lo or (hi is not None and n > hi):
                    return False
        elif t == "object":
            if len(x) < m["minP"] or (m["maxP"] is not None and len(x) > m["maxP"]):
                return False
            for some, _ in m["some"]:
                if not any(self.key_ok(some, k) and self.valid(val, some["value"], depth + 1) for k, val in x.items()):
                    return False
            if not self.required_of((d,)) <= set(x):
                return False
            for a, bs in self.deps_of((d,)).items():
                if a in x and not set(bs) <= set(x):
                    return False
            for k, val in x.items():
                for s in self.value_conj((d,), k):
                    if not self.valid(val, s, depth + 1):
                        return False
                for pn in self.prop_names((d,)):
                    if not self.valid(k, pn, depth + 1):
                        return False
        return True

    def format_ok(self, f, x, pointer):
        lang = self.format_lang(f, pointer)
        return lang.matches(x)

    # --- keyword readers shared by the validator and the rules ---
    def deps_of(self, term):
        out = {}
        for d in term:
            v = _VOCAB[2020] if id(d) in self.syn else self.vocab
            for k in ("dependentRequired", "dependencies"):
                if k in d and k in v:
                    val = d[k]
                    if not isinstance(val, dict):
                        self.refuse(k, self.p(d) + "/" + k, "%s must be an object" % k)
                    for a, bs in val.items():
                        if isinstance(bs, list):
                            out.setdefault(a, [])
                            out[a].extend(b for b in bs if b not in out[a])
        return out

    def prop_names(self, term):
        out = []
        for d in term:
            v = _VOCAB[2020] if id(d) in self.syn else self.vocab
            if "propertyNames" in d and "propertyNames" in v:
                self.check_schema(d["propertyNames"], self.p(d) + "/propertyNames")
                out.append(d["propertyNames"])
        return out

    def item_conj(self, term, i):
        """The schemas item i of an array must satisfy in the term."""
        conj = []
        for d in term:
            prefix, rest = self.items_of(d)
            if i < len(prefix):
                conj.append(prefix[i])
            elif rest is not None:
                conj.append(rest)
        return conj

    def items_of(self, d):
        """(prefix schemas, schema of the items after them or None) of one dict."""
        v = _VOCAB[2020] if id(d) in self.syn else self.vocab
        ptr = self.p(d)
        prefix, rest = [], None
        items = d.get("items") if "items" in v else None
        if "prefixItems" in v and "prefixItems" in d:
            prefix = d["prefixItems"]
            if not isinstance(prefix, list):
                self.refuse("prefixItems", ptr + "/prefixItems", "prefixItems must be an array")
        if isinstance(items, list):
            if self.draft >= 2020 and id(d) not in self.syn:
                self.refuse("items", ptr + "/items", "an array-form items in draft 2020-12")
            prefix = items
            if "additionalItems" in v and "additionalItems" in d:
                rest = d["additionalItems"]
                self.check_schema(rest, ptr + "/additionalItems")
        elif items is not None:
            self.check_schema(items, ptr + "/items")
            rest = items
        for i, x in enumerate(prefix):
            self.check_schema(x, "%s/%s/%d" % (ptr, "items" if isinstance(items, list) else "prefixItems", i))
        return prefix, rest

    # --- strings ---
    def lang_mod(self, keyword, pointer):
        if _sl is None:
            self.refuse(keyword, pointer, "%s needs bankml's string-language module (not in this build)" % keyword)
        return _sl

    def format_lang(self, f, pointer):
        sl = self.lang_mod("format", pointer)
        try:
            return _cached_lang("format", f)
        except sl.LangError as e:
            self.refuse("format", pointer, "format %r: %s" % (f, getattr(e, "reason", e)))

    def str_lang(self, st, pointer):
        """The Lang of a _StrC (through the string-language module)."""
        kw = (
            (st.patterns and "pattern")
            or (st.formats and "format")
            or (st.notpatterns and "not")
            or (st.notformats and "not")
            or "additionalProperties"
        )
        kp = (st.patterns or st.formats or st.notpatterns or st.notformats or [(None, pointer)])[0][1]
        sl = self.lang_mod(kw, kp)
        parts = []  # (language, negated), intersected in one product (strict_lang.intersect_all)
        try:
            if st.min > 0 or st.max is not None:
                parts.append((sl.Lang.length(st.min, st.max), False))
            for p, kp in st.patterns:
                parts.append((_cached_lang("regex", p), False))
            for p, kp in st.notpatterns:
                parts.append((_cached_lang("regex", p), True))
            for f, kp in st.formats:
                parts.append((_cached_lang("format", f), False))
            for f, kp in st.notformats:
                parts.append((_cached_lang("format", f), True))
            if st.exclude:
                parts.append((sl.Lang.literals(st.exclude), True))
            lang = sl.intersect_all(parts)
        except sl.LangError as e:
            k = getattr(e, "keyword", None) or kw
            if k == "allOf":  # the language module's name for an intersection: here, the string's keywords
                k = kw
            self.refuse(k, kp, "%s: %s" % (k, getattr(e, "reason", e)))
        return lang

    def string_expr(self, st, pointer, keyword=None):
        """A GBNF expression of the JSON strings (quotes included) satisfying st, or None when there is none.
        ``keyword`` names the keyword a refusal of the string language blames (patternProperties for keys)."""
        if st.max is not None and st.min > st.max:
            return None
        if st.include is not None:
            vals = sorted(s for s in st.include if self.str_ok(s, st, pointer))
            if not vals:
                return None
            return self.alts([self.str_literal(s) for s in vals])
        if not st.needs_lang() and not st.exclude:
            inner = self.chars(st.min, st.max, pointer)
            return '"\\"" ' + (inner + " " if inner else "") + '"\\""'
        key = (
            st.min,
            st.max,
            tuple(st.patterns),
            tuple(st.notpatterns),
            tuple(st.formats),
            tuple(st.notformats),
            frozenset(st.exclude),
        )
        cache = self.__dict__.setdefault("string_cache", {})
        if key in cache:
            return cache[key]
        if not st.needs_lang() and all(ord(c) <= 0xFFFF for x in st.exclude for c in x):
            # the commonest case (the keys of additionalProperties: any string but the listed names) built
            # here as a trie, much smaller and faster than through the general DFA emitter
            cache[key] = self.excluding_string(st.min, st.max, st.exclude)
            return cache[key]
        # across conversions: the constraint's strings only (no pointers) name it
        gkey = (
            st.min,
            st.max,
            tuple(p for p, _ in st.patterns),
            tuple(p for p, _ in st.notpatterns),
            tuple(f for f, _ in st.formats),
            tuple(f for f, _ in st.notformats),
            frozenset(st.exclude),
        )
        if (
            gkey not in _GBNF_CACHE
            and gkey[:4] == (0, None, (), ())
            and len(gkey[4]) == 1
            and gkey[5:] == ((), frozenset())
        ):
            # a format and nothing else: its GBNF as shipped, where the file has it
            shipped = _shipped_format_gbnf(gkey[4][0])
            if shipped is not None:
                _cache_put(_GBNF_CACHE, gkey, shipped)
        run = _pattern_run(st)
        if run is not None:
            # one pattern whose strings are the runs of one character class: the length bounds as a repetition
            # of that class, not as a product automaton of one state per length (same language)
            cs, a, b, nl = run
            cls = self.add_rule("strc", _sl._charset_gbnf(cs))
            alts = []
            for extra in range(2 if nl else 1):  # the run alone, then the run and its newline (one more char)
                lo = max(a, st.min - extra)
                hi = b if st.max is None else st.max - extra if b is None else min(b, st.max - extra)
                if hi is not None and lo > hi:
                    continue
                parts = [] if hi == 0 else [self.repeat(cls, lo, hi, "maxLength", pointer)]
                if extra:
                    parts.append(self.spell("\n"))
                alts.append(" ".join(parts))
            if not alts:
                cache[key] = None
                return None
            body = alts[0] if len(alts) == 1 else "( " + " | ".join(x or '""' for x in alts) + " )"
            cache[key] = '"\\"" ' + (body + " " if body else "") + '"\\""'
            return cache[key]
        if gkey not in _GBNF_CACHE:
            try:
                lang = self.str_lang(st, pointer)
            except _Refuse as e:
                if keyword is not None:
                    raise _Refuse(keyword, e.pointer, e.reason) from None
                raise
            if lang.is_empty():
                _cache_put(_GBNF_CACHE, gkey, None)
            else:
                expr, rules = _sl.string_gbnf(lang, _PLACEHOLDER)
                _cache_put(_GBNF_CACHE, gkey, (expr, dict(rules)))
        hit = _GBNF_CACHE[gkey]
        if hit is None:
            cache[key] = None
            return None
        expr, rules = _renamed(hit, self.new_name("str"))
        for name, body in rules.items():
            self.set_rule(name, body)
        cache[key] = expr
        return expr

    def str_ok(self, s, st, pointer):
        if len(s) < st.min or (st.max is not None and len(s) > st.max) or s in st.exclude:
            return False
        if any(re.search(p, s) is None for p, _ in st.patterns):
            return False
        if any(re.search(p, s) is not None for p, _ in st.notpatterns):
            return False
        if any(not self.format_ok(f, s, kp) for f, kp in st.formats):
            return False
        if any(self.format_ok(f, s, kp) for f, kp in st.notformats):
            return False
        return True

    def spell(self, c):
        """The rule of every spelling of the code point c (one rule per code point: keys and enum strings name
        it instead of repeating its escapes)."""
        cache = self.__dict__.setdefault("spell_cache", {})
        if c not in cache:
            o = ord(c)
            cache[c] = self.add_rule("c%x" % o, _spell_char(c)[2:-2])
        return cache[c]

    def str_literal(self, s):
        """GBNF of the JSON string s (quotes included), every spelling of each of its code points."""
        if not s:
            return _lit('""')
        return '"\\"" ' + " ".join(self.spell(c) for c in s) + ' "\\""'

    def excluding_string(self, lo, hi, exclude):
        """JSON strings of lo..hi code points (hi None: unbounded) other than those in exclude (BMP code points
        only): a trie of the excluded strings, each node letting any other code point leave into a free tail."""
        if hi is not None and lo > hi:
            return None
        if hi == 0 and "" in exclude:
            return None
        # the trie: a node is [children by code point, whether the string ending here is excluded, how many
        # excluded strings pass through it or end there, the first of them]
        root = [{}, False, 0, None]
        for x in exclude:
            t = root
            for c in x:
                nxt = t[0].get(c)
                if nxt is None:
                    nxt = t[0][c] = [{}, False, 0, x]
                nxt[2] += 1
                t = nxt
            t[1] = True
        spells = self.__dict__.setdefault("spell_cache", {})
        tails = {}  # the free tail after leaving at a depth
        quote = '"\\""'
        # Unbounded keys: a node that one excluded string passes through is the chain of that string's rest,
        # whose rule depends on the rest alone (not on the depth): made once per compiler, then named. Kubernetes
        # objects' tries share such chains ("piVersion", "etadata"): 3,948 nodes in 88 tries, 1,770 distinct.
        chains = self.__dict__.setdefault("key_chains", {}) if lo == 0 and hi is None else None

        def node(t, depth):
            # each trie node is met once (its depth is its prefix's length)
            _check_stack()
            kids, excluded, passing, first = t
            rest = first[depth:] if chains is not None and passing == 1 else None
            if rest is not None:
                got = chains.get(rest)
                if got is not None:
                    return got
            alts = []
            if depth >= lo and not excluded:
                alts.append(quote)
            if hi is None or depth < hi:
                children = sorted(kids)
                for c in children:
                    sub = node(kids[c], depth + 1)
                    if sub is not None:
                        sp = spells.get(c)
                        alts.append((sp if sp is not None else self.spell(c)) + " " + sub)
                tail = tails.get(depth)
                if tail is None:
                    tail = self.chars(max(0, lo - depth - 1), None if hi is None else hi - depth - 1)
                    tail = tails[depth] = self.add_rule("key-tail", (tail + " " if tail else "") + quote)
                alts.append(self.char_except(children) + " " + tail)
            name = self.add_rule("key", " | ".join(alts)) if alts else None
            if rest is not None:
                chains[rest] = name
            return name

        start = node(root, 0)
        # a recursive closure refers to itself: freed now, not by the collector
        node = None  # noqa: F841
        return None if start is None else quote + " " + start

    def char_except(self, cs):
        """GBNF of one string code point, in any spelling, other than those of cs (BMP code points)."""
        if not cs:
            return "char"
        cache = self.__dict__.setdefault("except_cache", {})
        key = tuple(cs)
        if key in cache:
            return cache[key]
        raw = {ord(c) for c in cs if ord(c) >= 0x20 and c not in '"\\'}
        alts = [_char_class(raw | {0x22, 0x5C} | set(range(0x20)), negate=True)]
        short = [esc[1] for c, esc in _SHORT_ESC.items() if c not in cs]
        alts.append('"\\\\" ' + _char_class({ord(x) for x in short}))
        alts.append('"\\\\u" ' + self.hex_except({"%04x" % ord(c) for c in cs}))
        alts.append('"\\\\u" [dD] [89abAB] hex hex "\\\\u" [dD] [c-fC-F] hex hex')
        name = self.add_rule("char-except", " | ".join(alts))
        cache[key] = name
        return name

    def hex_except(self, ex):
        """GBNF of the 4 hex digits (either case) of a code point that is no surrogate and not in ex (a set of
        4-digit lowercase hex strings): a trie over the excluded digits (``_hex_except_steps``, its rules made
        here in the order it gives)."""
        steps, root = _hex_except_steps(frozenset(ex))
        names = []
        for parts in steps:
            names.append(self.add_rule("hex-except", "".join(x if x.__class__ is str else names[x] for x in parts)))
        return root if root is None or root.__class__ is str else names[root]

    def chars(self, lo, hi, pointer="#"):
        if hi is not None and hi == 0:
            return None
        return self.repeat("char", lo, hi, "maxLength", pointer)

    # --- rules for conjunctions of schemas ---
    @staticmethod
    def alts(xs):
        xs = [x for x in xs if x is not None]
        if not xs:
            return None
        return xs[0] if len(xs) == 1 else "( " + " | ".join(xs) + " )"

    def rule(self, conj, pointer="#"):
        """The name of the rule of the values satisfying every schema of conj, or None when none does."""
        _check_stack()
        for s in conj:
            if s is False:
                return None
        conj = [s for s in conj if s is not True]
        key = frozenset(map(id, conj))
        if key in self.conj_rules:
            return self.conj_rules[key]
        if not conj:
            self.conj_rules[key] = "value"
            return "value"
        terms = self.product([self.expand(s) for s in conj], pointer)
        if not terms:
            self.conj_rules[key] = None
            return None
        name = self.new_name("v")
        self.conj_rules[key] = name  # before the body: recursive schemas refer to it
        body = self.alts([self.term_expr(t) for t in terms])
        if body is None:
            body = _NEVER  # no instance (reached through recursion)
        self.set_rule(name, body)
        return name

    def term_expr(self, term):
        m = self.merge(term)
        if m is None:
            return None
        ptr = self.p(term[0]) if term else "#"
        self.tick(ptr)
        types = m["types"]
        if m["enum"] is not None:
            vals = [x for x in m["enum"] if any(self.valid_term(y, term) for y in _spellings(x))]
            return self.alts(
                [self.number_value(x, ptr, types) if _is_num(x) else self.value_expr(x, ptr) for x in vals]
            )
        nv = m["notvalues"]
        out = []
        if "null" in types and not any(x is None for x in nv):
            out.append('"null"')
        if "boolean" in types:
            for b in (True, False):
                if not any(isinstance(x, bool) and x is b for x in nv):
                    out.append('"true"' if b else '"false"')
        if "int" in types or "frac" in types:
            out.append(self.number_expr(m, ptr))
        if "string" in types:
            st = m["str"].copy()
            st.exclude |= {x for x in nv if isinstance(x, str)}
            out.append(self.string_expr(st, ptr))
        if "array" in types:
            if any(isinstance(x, list) for x in nv):
                self.refuse("not", ptr, "excluding array values")
            out.append(self.array_expr(m, term, ptr))
        if "object" in types:
            if any(isinstance(x, dict) for x in nv):
                self.refuse("not", ptr, "excluding object values")
            out.append(self.object_expr(m, term, ptr))
        return self.alts(out)

    # --- const/enum values ---
    def value_expr(self, x, ptr):
        _check_stack()
        if x is None:
            return '"null"'
        if x is True:
            return '"true"'
        if x is False:
            return '"false"'
        if isinstance(x, (int, float)):
            return self.number_value(x, ptr)
        if isinstance(x, str):
            return self.str_literal(x)
        if isinstance(x, list):
            if not x:
                return '"[" space "]"'
            return '"[" space ' + ' "," space '.join(self.value_expr(y, ptr) + " space" for y in x) + ' "]"'
        if isinstance(x, dict):
            return self.object_value(x, ptr)
        self.refuse("enum", ptr, "a value that is not JSON")

    def number_value(self, x, ptr, types=_ALL_TYPES):
        """The texts of the numbers jsonschema-equal to x whose type is in types (an integral value may be
        written as an int or as a float: "5", "5.0"; a float is an integer from draft 6 on)."""
        if isinstance(x, float) and not math.isfinite(x):
            return None
        if isinstance(x, float) and not x.is_integer():
            if "frac" not in types:
                return None
            t = json.dumps(x)
            return _lit(t) if "e" in t else _lit(t) + ' "0"*'
        n = int(x)
        int_ok = "int" in types
        float_ok = ("int" in types) if self.draft >= 6 else ("frac" in types)
        base = '"-"? "0"' if n == 0 else _lit(str(n))
        alts = []
        if int_ok and float_ok:
            alts.append(base + ' ( "." "0"+ )?')
        elif int_ok:
            alts.append(base)
        elif float_ok:
            alts.append(base + ' "." "0"+')
        t = json.dumps(float(n)) if abs(n) < 1e308 else ""
        if float_ok and "e" in t and float(t) == n:
            alts.append(_lit(t))
        return self.alts(alts)

    def object_value(self, x, ptr):
        keys = list(x)
        if len(keys) > _MAX_ENUM_OBJECT_KEYS:
            self.refuse(
                "enum", ptr, "an object const/enum value of more than %d keys (every key order)" % _MAX_ENUM_OBJECT_KEYS
            )
        if not keys:
            return '"{" space "}"'
        kv = [self.str_literal(k) + ' space ":" space ' + self.value_expr(x[k], ptr) + " space" for k in keys]
        memo = {}

        def rest(mask):
            # the members not yet written (bits of mask), each after a comma
            _check_stack()
            if mask == 0:
                return '"}"'
            if mask in memo:
                return memo[mask]
            alts = ['"," space ' + kv[i] + " " + rest(mask & ~(1 << i)) for i in range(len(keys)) if mask >> i & 1]
            name = self.add_rule("const-obj", " | ".join(alts))
            memo[mask] = name
            return name

        full = (1 << len(keys)) - 1
        out = '"{" space ' + self.alts([kv[i] + " " + rest(full & ~(1 << i)) for i in range(len(keys))])
        # a recursive closure refers to itself: freed now, not by the collector
        rest = None  # noqa: F841
        return out

    # --- numbers ---
    def number_expr(self, m, ptr):
        types = m["types"]
        integer_only = "frac" not in types
        # draft 6+: an integral float (5.0) is an integer; its text is the integer's with an all-zero fraction
        int_rule = "integer" if self.draft <= 4 else '"-"? ( "0" | [1-9] [0-9]* ) ( "." "0"+ )?'
        zero_frac = integer_only and self.draft >= 6
        frac_only = None
        if "int" not in types:
            # numbers that are no integers: draft 4, every float text; draft 6+, a nonzero fraction digit or a
            # normalised mantissa with a negative exponent (1.25e1 is not taken: module docstring)
            frac_only = 4 if self.draft <= 4 else 6
            if m["mult"]:
                return None  # a multiple of an integer is an integer
        bounds = []
        for lower, b, excl in m["bounds"]:
            if lower:
                acc = (lambda r: r > 0) if excl else (lambda r: r >= 0)
            else:
                acc = (lambda r: r < 0) if excl else (lambda r: r <= 0)
            exact = getattr(b, "exact", None)
            if exact is None:
                bounds.append(_Bound(b, acc))
            else:
                # a float bound past 2^53 (or with a long binary expansion): integer texts are compared with its
                # exact value, as Python compares an int with a float; other texts with its repr
                bounds.append(_Bound(exact, acc, "int"))
                bounds.append(_Bound(b, acc, "float"))
        for x in m["notvalues"]:
            if _is_num(x):
                dx = _dec(x)
                if dx is not None:
                    bounds.append(_Bound(dx, lambda r: r != 0))
        modulus = None
        for q in m["mult"]:
            modulus = q if modulus is None else modulus * q // math.gcd(modulus, q)
        if m["notmult"]:
            return self.number_notmult(m, integer_only, zero_frac, frac_only, bounds, modulus)
        if not bounds and modulus is None and frac_only is None:
            return int_rule if integer_only else "number"
        integral = modulus is not None  # a multiple of an integer: no fraction but zeros, no exponent
        if modulus == 1:
            modulus = None
            if not bounds and frac_only is None:
                return int_rule if integer_only else '"-"? ( "0" | [1-9] [0-9]* ) ( "." "0"+ )?'
        return self.number_rules(m, bounds, integer_only, zero_frac, integral, frac_only, modulus)

    def number_rules(self, m, bounds, integer_only, zero_frac, integral, frac_only, modulus, must=None, notmods=()):
        """The rules of _number_dfa's automaton. It depends on these alone: shared by every schema of the process
        with the same numbers."""
        key = (
            integer_only,
            zero_frac,
            integral,
            frac_only,
            modulus,
            must,
            notmods,
            tuple(
                (lower, type(b).__name__, repr(b), repr(getattr(b, "exact", None)), excl)
                for lower, b, excl in m["bounds"]
            ),
            tuple(repr(_dec(x)) for x in m["notvalues"] if _is_num(x)),
        )
        got = _NUMBER_DFAS.get(key)
        if got is None:
            if len(_NUMBER_DFAS) >= _NUMBER_DFAS_MAX:
                _NUMBER_DFAS.clear()
            got = _NUMBER_DFAS[key] = _number_dfa(
                integer_only and not zero_frac,
                bounds,
                modulus,
                zero_fraction_only=integral or zero_frac,
                no_exponent=integer_only or integral,
                frac_only=frac_only,
                must=must,
                notmods=notmods,
            )
        trans, acc = got
        return self.dfa_rules(trans, acc, "num")

    def number_notmult(self, m, integer_only, zero_frac, frac_only, bounds, must):
        """number_expr's automaton beside a negated multipleOf: no multiple of any m["notmult"] divisor (and a
        multiple of must, the multipleOf divisors' lcm, or None)."""
        nots = tuple(sorted(set(m["notmult"])))
        if must is not None and any(must % q == 0 for q in nots):
            return None  # every multiple of must is a multiple of one of them
        modulus = must or 1
        for q in nots:
            modulus = modulus * q // math.gcd(modulus, q)
        return self.number_rules(m, bounds, integer_only, zero_frac, must is not None, frac_only, modulus, must, nots)

    def dfa_rules(self, trans, acc, prefix):
        n = len(trans)
        # keep the states from which an accepting state is reachable
        live = [bool(a) for a in acc]
        changed = True
        while changed:
            changed = False
            for i in range(n):
                if not live[i] and any(live[j] for j in trans[i].values()):
                    live[i] = changed = True
        if not live[0]:
            return None
        names = {}
        base = self.new_name(prefix)
        for i in range(n):
            if live[i]:
                names[i] = "%s-%d" % (base, i)
        for i in range(n):
            if not live[i]:
                continue
            by_target = {}
            for ch, j in trans[i].items():
                if live[j]:
                    by_target.setdefault(j, []).append(ch)
            alts = []
            for j, chs in by_target.items():
                cls = _lit(chs[0]) if len(chs) == 1 else _char_class({ord(c) for c in chs})
                alts.append(cls + " " + names[j])
            body = " | ".join(alts)
            if acc[i]:
                # an accepting state may also end here: an empty alternative
                body = "| " + body if body else '""'
            self.set_rule(names[i], body)
        return names[0]

    # --- arrays ---
    def array_expr(self, m, term, ptr):
        if m["unique"] is not None:
            if m["maxI"] is None or m["maxI"] > 1:
                return self.array_unique(m, term, ptr)
        if len(m["contains"]) > _MAX_CONTAINS:
            self.refuse("contains", m["contains"][-1][3], "more than %d contains on one array" % _MAX_CONTAINS)
        lo, hi = m["minI"], m["maxI"]
        plen = 0
        for d in term:
            plen = max(plen, len(self.items_of(d)[0]))
        pos = [self.rule(self.item_conj(term, i), ptr + "/items/%d" % i) for i in range(plen)]
        rest_conj = self.item_conj(term, plen)
        rest = self.rule(rest_conj, ptr + "/items")
        # an impossible item ends the array before it
        for i, r in enumerate(pos):
            if r is None:
                hi = i if hi is None else min(hi, i)
                break
        else:
            if rest is None:
                hi = plen if hi is None else min(hi, plen)
        if hi is not None and lo > hi:
            return None
        if m["contains"]:
            return self.array_contains(m, term, pos, rest, rest_conj, lo, hi, ptr)
        memo = {}

        def seq(i, first):
            # the items from position i on ("," before each but the first), then "]"
            _check_stack()
            key = (i, first)
            if key in memo:
                return memo[key]
            sep = "" if first else '"," space '
            if i >= plen:
                # the rest: a repetition of the rest item
                a = max(0, lo - i)
                b = None if hi is None else hi - i
                if b == 0:
                    out = '"]"'
                elif first:
                    more = self.rep('"," space ' + rest + " space", max(a - 1, 0), None if b is None else b - 1)
                    one = rest + " space" + (" " + more if more else "")
                    out = ("( " + one + " )? " if a == 0 else one + " ") + '"]"'
                else:
                    more = self.rep('"," space ' + rest + " space", a, b)
                    out = (more + " " if more else "") + '"]"'
                memo[key] = out
                return out
            alts = []
            if i >= lo:
                alts.append('"]"')
            if hi is None or i < hi:
                alts.append(sep + pos[i] + " space " + seq(i + 1, False))
            body = " | ".join(alts)
            name = self.add_rule("arr", body)
            memo[key] = name
            return name

        out = '"[" space ' + seq(0, True)
        # a recursive closure refers to itself: freed now, not by the collector
        seq = None  # noqa: F841
        return out

    def array_unique(self, m, term, ptr):
        """uniqueItems over a finite item language of at most _MAX_UNIQUE_VALUES values (an enum, const,
        booleans and null): the items in any order, each value at most once, one rule per set of values
        written. Refused otherwise."""
        if m["contains"] or any(self.items_of(d)[0] for d in term):
            self.refuse("uniqueItems", m["unique"], "uniqueItems beside prefixItems or contains")
        values = {}  # value key -> the texts of its spellings
        for t in self.product([self.expand(x) for x in self.item_conj(term, 0)], ptr + "/items"):
            mt = self.merge(t)
            if mt is None:
                continue
            if mt["enum"] is not None:
                cands = mt["enum"]
            elif mt["types"] <= {"null", "boolean"}:
                cands = [x for x in (None, True, False) if _json_type(x, self.draft) in mt["types"]]
            else:
                self.refuse("uniqueItems", m["unique"], "uniqueItems over items that are not a small finite set")
            for x in cands:
                key = _vkey(x)
                if key is None or not any(self.valid_term(y, t) for y in _spellings(x)):
                    continue
                text = self.number_value(x, ptr, mt["types"]) if _is_num(x) else self.value_expr(x, ptr)
                if text is not None:
                    values.setdefault(key, []).append(text)
        if len(values) > _MAX_UNIQUE_VALUES:
            self.refuse(
                "uniqueItems",
                m["unique"],
                "uniqueItems over %d distinct item values (at most %d)" % (len(values), _MAX_UNIQUE_VALUES),
            )
        items = [self.add_rule("uitem", " | ".join(dict.fromkeys(texts))) for texts in values.values()]
        lo, hi = m["minI"], m["maxI"]
        memo = {}

        def state(mask):
            _check_stack()
            if mask in memo:
                return memo[mask]
            name = self.new_name("uarr")
            memo[mask] = name
            count = mask.bit_count()
            alts = ['"]"'] if count >= lo else []
            if hi is None or count < hi:
                sep = "" if mask == 0 else '"," space '
                for i, item in enumerate(items):
                    if not mask >> i & 1:
                        alts.append(sep + item + " space " + state(mask | 1 << i))
            self.set_rule(name, " | ".join(alts) if alts else _NEVER)
            return name

        out = '"[" space ' + state(0)
        # a recursive closure refers to itself: freed now, not by the collector
        state = None  # noqa: F841
        return out

    def rep(self, item, a, b, keyword="maxItems", pointer="#"):
        """item repeated a..b times (b None: unbounded) as GBNF, or "" for exactly zero."""
        if b is not None and b == 0:
            return ""
        return self.repeat(self.add_rule("item", item), a, b, keyword, pointer)

    def repeat(self, name, a, b, keyword, pointer):
        """The rule name repeated a..b times (b None: unbounded). The GBNF parser refuses a minimum past
        MAX_REPETITION (llama.cpp's 2000) and reads a maximum past it as no maximum: a larger maximum is
        spelled as blocks of 1000 (counts 1000j + t: j < k full blocks then up to 999, or k blocks then up to
        the remainder); a larger minimum is refused naming the keyword."""
        if a > _MAX_REPETITION:
            self.refuse(keyword.replace("max", "min"), pointer, "a minimum count past %d" % _MAX_REPETITION)
        if b is None:
            return "%s*" % name if a == 0 else "%s{%d,}" % (name, a)
        if b <= _MAX_REPETITION:
            return "%s{%d}" % (name, a) if a == b else "%s{%d,%d}" % (name, a, b)
        k, r = divmod(b - a, 1000)
        if k > _MAX_REPETITION:
            self.refuse(keyword, pointer, "a maximum count past %d" % (_MAX_REPETITION * 1000))
        block = self.add_rule("block", "%s{1000}" % name)
        fewer = (block + "{0,%d} " % (k - 1) if k > 1 else "") + name + "{0,999}"
        full = block + ("{%d}" % k if k > 1 else "") + (" %s{0,%d}" % (name, r) if r else "")
        tail = self.add_rule("upto", fewer + " | " + full)
        return ("%s{%d} " % (name, a) if a else "") + tail

    def array_contains(self, m, term, pos, rest, rest_conj, lo, hi, ptr):
        """The array of item counts lo..hi whose items each contains schema counts within its bounds: per
        position, one rule per set of the contains schemas the item satisfies (and fails the others), the
        states counting items per contains schema (capped where its bounds stop telling counts apart)."""
        cs = m["contains"]
        plen = len(pos)
        negs = [self.synth({"$strict-not": c}, cptr) for c, _, _, cptr in cs]
        cptr0 = cs[0][3]

        def split(i):
            """{set of contains schemas the item satisfies (bits): its rule} at position i."""
            _check_stack()
            conj = self.item_conj(term, i)
            if i < plen and pos[i] is None:
                return {}
            out = {}
            for ws in reversed(range(1 << len(cs))):  # (one schema: its items first, then the others)
                parts = [cs[j][0] if ws >> j & 1 else negs[j] for j in range(len(cs))]
                r = self.rule(conj + parts, cptr0 if len(cs) == 1 else ptr + "/contains")
                if r is not None:
                    out[ws] = r
            return out

        icap = max(plen, lo, (hi + 1) if hi is not None else 0)
        caps = [max(cmin, (cmax + 1) if cmax is not None else 0) for _, cmin, cmax, _ in cs]
        states = icap + 1
        for cap in caps:
            states *= cap + 1
        if states > _MAX_STATES:
            self.refuse("contains", cptr0, "contains with counts that need more than %d states" % _MAX_STATES)
        splits = {}
        memo = {}

        def seq(i, ns, first):
            _check_stack()
            ns = tuple(min(n, cap) for n, cap in zip(ns, caps))
            key = (min(i, icap), ns, first)
            if key in memo:
                return memo[key]
            name = self.new_name("arr")
            memo[key] = name
            alts = []
            if i >= lo and all(n >= cmin for n, (_, cmin, _, _) in zip(ns, cs)):
                alts.append('"]"')
            if hi is None or i < hi:
                j = min(i, plen)
                if j not in splits:
                    splits[j] = split(j)
                sep = "" if first else '"," space '
                # the item that satisfies every contains schema first, as the one-schema automaton had it
                for ws, r in sorted(splits[j].items(), reverse=True):
                    nxt = tuple(n + (ws >> k & 1) for k, n in enumerate(ns))
                    if all(cmax is None or n <= cmax for n, (_, _, cmax, _) in zip(nxt, cs)):
                        alts.append(sep + r + " space " + seq(i + 1, nxt, False))
            self.set_rule(name, " | ".join(alts) if alts else _NEVER)
            return name

        out = '"[" space ' + seq(0, (0,) * len(cs), True)
        # closures that refer to themselves: freed now, not by the collector
        seq = split = None  # noqa: F811, F841
        return out

    # --- objects ---
    def object_expr(self, m, term, ptr):
        dicts = term
        names = []
        seen = set()

        def add(k):
            _check_stack()
            if isinstance(k, str) and k not in seen:
                seen.add(k)
                names.append(k)

        for d in dicts:
            v = _VOCAB[2020] if id(d) in self.syn else self.vocab
            props = d.get("properties") if "properties" in v else None
            if props is not None and not isinstance(props, dict):
                self.refuse("properties", self.p(d) + "/properties", "properties must be an object")
            for k in props or {}:
                add(k)
        required = self.required_of(term)
        deps = self.deps_of(term)
        for d in dicts:
            r = d.get("required")
            if isinstance(r, list) and ("required" in self.vocab or id(d) in self.syn):
                for k in r:
                    if not isinstance(k, str):
                        self.refuse("required", self.p(d) + "/required", "required must list strings")
                    add(k)
        for a, bs in deps.items():
            add(a)
            for b in bs:
                add(b)
        if len(m["some"]) > _MAX_WITNESSES:
            self.refuse(
                "not", m["some"][-1][1], "more than %d negated object keywords met in one object" % _MAX_WITNESSES
            )
        pnames = self.prop_names(term)
        items = []
        for k in names:
            conj = self.value_conj(term, k)
            ok = all(self.valid(k, pn) for pn in pnames)
            r = self.rule(conj, ptr + "/properties/" + _esc_ptr(k)) if ok else None
            if r is None:
                if k in required:
                    return None
                continue
            items.append((k, r))
        present = {k for k, _ in items}
        for a, bs in deps.items():
            if a in present and not set(bs) <= present:
                # a can only come with keys that cannot come: a cannot come
                items = [(k, r) for k, r in items if k != a]
                if a in required:
                    return None
        extra = self.extra_kv(term, names, pnames, ptr)
        witness = None
        if m["some"]:
            # negated object keywords: the object must hold, for each, a member it names (key_ok and its value),
            # a listed one or an extra one. Per set S of them, the members that witness all of S get a rule of
            # their own (the value satisfies S's schemas too): {S: (per listed member its rule or None, the
            # extra members' rule or None)}
            somes = [x for x, _ in m["some"]]
            witness = {}
            covered = 0
            for wset in range(1, 1 << len(somes)):
                chosen = [somes[j] for j in range(len(somes)) if wset >> j & 1]
                wit_kv = []
                for k, _ in items:
                    wr = None
                    if all(self.key_ok(x, k) for x in chosen):
                        wr = self.rule(
                            self.value_conj(term, k) + [x["value"] for x in chosen],
                            ptr + "/properties/" + _esc_ptr(k),
                        )
                    wit_kv.append(None if wr is None else self.member_rule(k, wr))
                wit_extra = self.extra_kv(term, names, pnames, ptr, chosen)
                if wit_extra is not None or any(x is not None for x in wit_kv):
                    witness[wset] = (wit_kv, wit_extra)
                    covered |= wset
            if covered != (1 << len(somes)) - 1:
                return None  # a negated keyword no member can witness
        minp, maxp = m["minP"], m["maxP"]
        counted = bool(minp or maxp is not None)
        cap = max(minp, (maxp + 1) if maxp is not None else 0) if counted else 0
        n = len(items)
        # which keys must be remembered: dependency targets listed before their source
        index = {k: i for i, (k, _) in enumerate(items)}
        track = set()
        for a, bs in deps.items():
            if a in index:
                for b in bs:
                    if b in index and index[b] < index[a]:
                        track.add(b)
        # one rule per member: the automaton's states name it instead of repeating the key's spellings
        kv = [self.member_rule(k, r) for k, r in items]
        sets = 1 << (n + len(m["some"]))  # each negated keyword doubles the states: witnessed or not
        req = [i for i, (k, _) in enumerate(items) if k in required]
        # the repeating form (optional keys may come again) fits: no count or dependency tells keys apart
        repeats = (
            witness is None
            and not deps
            and not minp
            and maxp is None
            and len(req) <= _MAX_REQUIRED_ANY_ORDER
            and (self.any_order_states + (1 << len(req)) <= _ANY_ORDER_BUDGET)
        )
        if n <= _MAX_ANY_ORDER and self.any_order_states + sets <= _ANY_ORDER_BUDGET:
            # exact where the repeating form would not do, or would be as large (no optional key), and for the
            # first _EXACT_ORDER_BUDGET key sets of the others: 2^n rules an object, the cost of big schemas
            if not repeats or len(req) == n or self.exact_order_states + sets <= _EXACT_ORDER_BUDGET:
                if repeats and len(req) < n:
                    self.exact_order_states += sets
                self.any_order_states += sets
                return self.object_any_order(items, kv, required, deps, extra, minp, maxp, ptr, witness)
        if witness is not None:
            self.refuse(
                "not",
                m["some"][0][1],
                "a negated object keyword beside %d listed keys (at most %d, and %d key sets per grammar)"
                % (n, _MAX_ANY_ORDER, _ANY_ORDER_BUDGET),
            )
        if repeats:
            self.any_order_states += 1 << len(req)
            return self.object_any_order_repeating(items, kv, req, extra)
        if "properties" not in self.lenient and (n > 1 or extra is not None):
            # JSON objects are unordered: a grammar of one key order would reject valid texts
            self.refuse(
                "properties",
                ptr,
                "%d listed keys (%d required) cannot be taken in every order (at most %d listed keys, or %d required "
                "keys without minProperties, maxProperties or dependencies, and %d key sets per grammar); "
                "lenient=['properties'] takes them in the schema's order"
                % (n, len(req), _MAX_ANY_ORDER, _MAX_REQUIRED_ANY_ORDER, _ANY_ORDER_BUDGET),
            )
        memo = {}
        states = [0]

        def seq(i, c, first, seenk, oblig):
            _check_stack()
            key = (i, c, first, seenk, oblig)
            if key in memo:
                return memo[key]
            states[0] += 1
            if states[0] > _MAX_STATES:
                self.refuse("SchemaLimits", ptr, "the object's automaton has more than %d states" % _MAX_STATES)
            sep = "" if first else '"," space '
            if i == n:
                if oblig:
                    memo[key] = None
                    return None
                out = self.extras_tail(extra, c, first, minp, maxp)
                memo[key] = out
                return out
            k, _ = items[i]
            alts = []
            # take item i
            if maxp is None or c < maxp:
                ok = True
                nob = set(oblig)
                nob.discard(k)
                for b in deps.get(k, ()):
                    if b in index and index[b] < i:
                        if b not in seenk:
                            ok = False
                    elif b in index:
                        nob.add(b)
                    else:
                        ok = False
                if ok:
                    nxt = seq(
                        i + 1,
                        min(c + 1, cap) if counted else 0,
                        False,
                        seenk | {k} if k in track else seenk,
                        frozenset(nob),
                    )
                    if nxt is not None:
                        alts.append(sep + kv[i] + " " + nxt)
            # skip item i
            if k not in required and k not in oblig:
                nxt = seq(i + 1, c, first, seenk, oblig)
                if nxt is not None:
                    alts.append(nxt)
            if not alts:
                memo[key] = None
                return None
            name = self.add_rule("obj", " | ".join(alts))
            memo[key] = name
            return name

        body = seq(0, 0, True, frozenset(), frozenset())
        # a recursive closure refers to itself: freed now, not by the collector
        seq = None  # noqa: F841
        if body is None:
            return None
        return '"{" space ' + body

    def member_rule(self, k, value_rule):
        """The rule of one member: the key k in every spelling, the colon, a value of value_rule."""
        return self.add_rule("kv", self.str_literal(k) + ' space ":" space ' + value_rule + " space")

    def object_any_order(self, items, kv, required, deps, extra, minp, maxp, ptr, witness=None):
        """The members in any order, each listed key at most once, extra keys anywhere: one rule per set of
        listed keys written so far (and count of extra members, capped where min/maxProperties need it).
        witness: object_expr's witness rules by set of negated object keywords, when the object must hold a
        witness of each: the states then also tell which have one."""
        n = len(items)
        keys = [k for k, _ in items]
        counted = bool(minp or maxp is not None)
        ecap = max(minp, (maxp + 1) if maxp is not None else 0) if counted else 1
        if n == 0 and witness is None:
            tail = self.extras_tail(extra, 0, True, minp, maxp)
            return None if tail is None else '"{" space ' + tail
        witness = witness or {}
        full = 0  # every keyword witnessed (object_expr built a witness set for each)
        for ws in witness:
            full |= ws
        if ecap > 256:
            self.refuse(
                "maxProperties" if maxp is not None and maxp >= 256 else "minProperties",
                ptr,
                "property counts past 256 beside listed properties",
            )
        memo = {}
        # the keys as bits of the mask: which must be written before "}" (required, and what a written key's
        # dependentRequired names); a key named there that is not listed can never be written, so no "}"
        bit = {k: 1 << i for i, k in enumerate(keys)}  # the listed keys are distinct (object_expr's names)
        closable = all(k in bit for k in required)
        need = sum(bit[k] for k in required if k in bit)
        dep_masks = []  # (the key's bit, the bits it needs, or -1 when it needs a key that is not listed)
        for k in keys:
            ds = set(deps.get(k, ()))
            if ds:
                dep_masks.append((bit[k], sum(bit[d] for d in ds) if ds <= bit.keys() else -1))
        opening = [kv[i] + " " for i in range(n)]
        following = ['"," space ' + kv[i] + " " for i in range(n)]

        def state(mask, e, w):
            _check_stack()
            if not counted and mask:
                e = 0  # uncounted, e only tells whether something was written: mask says so already
            key = (mask, e, w)
            if key in memo:
                return memo[key]
            name = self.new_name("obj")
            memo[key] = name
            first = mask == 0 and e == 0
            count = mask.bit_count() + e
            alts = []
            if (
                closable
                and mask & need == need
                and all(d != -1 and mask & d == d for b, d in dep_masks if mask & b)
                and (not counted or count >= minp)
                and w == full
            ):
                alts.append('"}"')
            if maxp is None or count < maxp:
                pre = opening if first else following
                sep = "" if first else '"," space '
                # a member witnessing keywords already witnessed adds nothing: only sets of the others
                wsets = [(ws, r) for ws, r in witness.items() if not ws & w]
                for i in range(n):
                    if not mask >> i & 1:
                        alts.append(pre[i] + state(mask | 1 << i, e, w))
                        for ws, (wit_kv, _) in wsets:
                            if wit_kv[i] is not None:
                                alts.append(sep + wit_kv[i] + " " + state(mask | 1 << i, e, w | ws))
                if extra is not None:
                    alts.append(sep + extra + " " + state(mask, min(e + 1, ecap), w))
                for ws, (_, wit_extra) in wsets:
                    if wit_extra is not None:
                        alts.append(sep + wit_extra + " " + state(mask, min(e + 1, ecap), w | ws))
            self.set_rule(name, " | ".join(alts) if alts else _NEVER)
            return name

        out = '"{" space ' + state(0, 0, 0)
        # a recursive closure refers to itself: freed now, not by the collector
        state = None  # noqa: F841
        return out

    def object_any_order_repeating(self, items, kv, req, extra):
        """Members in any order where the optional keys are too many for one rule per set of keys: one rule per
        set of required keys written; an optional key may come again (json.loads keeps the last value, and
        every value must pass its schema, so no invalid object is accepted; module docstring)."""
        n = len(items)
        optional = [kv[i] for i in range(n) if i not in req] + ([extra] if extra is not None else [])
        opt = self.add_rule("opt", " | ".join(optional)) if optional else None
        memo = {}
        full = (1 << len(req)) - 1

        def state(mask, first):
            _check_stack()
            key = (mask, first)
            if key in memo:
                return memo[key]
            name = self.new_name("obj")
            memo[key] = name
            sep = "" if first else '"," space '
            alts = ['"}"'] if mask == full else []
            if opt is not None:
                alts.append(sep + opt + " " + state(mask, False))
            for b, i in enumerate(req):
                if not mask >> b & 1:
                    alts.append(sep + kv[i] + " " + state(mask | 1 << b, False))
            self.set_rule(name, " | ".join(alts) if alts else _NEVER)
            return name

        out = '"{" space ' + state(0, True)
        # a recursive closure refers to itself: freed now, not by the collector
        state = None  # noqa: F841
        return out

    def extras_tail(self, extra, c, first, minp, maxp):
        """The extra keys after the listed ones, then "}": c members so far."""
        a = max(0, minp - c)
        b = None if maxp is None else maxp - c
        if extra is None or b == 0:
            return '"}"' if a == 0 else None
        if first:
            if a == 0:
                more = self.rep('"," space ' + extra, 0, None if b is None else b - 1, "maxProperties")
                return "( " + extra + (" " + more if more else "") + ' )? "}"'
            more = self.rep('"," space ' + extra, a - 1, None if b is None else b - 1, "maxProperties")
            return extra + (" " + more if more else "") + ' "}"'
        more = self.rep('"," space ' + extra, a, b, "maxProperties")
        return (more + " " if more else "") + '"}"'

    def extra_kv(self, term, names, pnames, ptr, somes=()):
        """The GBNF of one extra member (key, colon, value, trailing space), or None when no extra key may
        come. Keys are split into regions by which patternProperties regexes they match. somes (member
        constraints of $strict-some): only the extra members that each names (a witness rule)."""
        pats = []
        for d in term:
            v = _VOCAB[2020] if id(d) in self.syn else self.vocab
            pp = d.get("patternProperties") if "patternProperties" in v else None
            if pp is not None:
                if not isinstance(pp, dict):
                    self.refuse("patternProperties", self.p(d) + "/patternProperties", "must be an object")
                for pat, sub in pp.items():
                    kp = self.p(d) + "/patternProperties/" + _esc_ptr(pat)
                    self.check_schema(sub, kp)
                    pats.append((pat, sub, d, kp))
        if len(pats) > _MAX_PATTERN_REGIONS:
            self.refuse(
                "patternProperties",
                pats[0][3],
                "more than %d patternProperties regexes on one object" % _MAX_PATTERN_REGIONS,
            )
        # the key constraints of propertyNames
        keyc = _StrC()
        keyc.exclude = set(names)
        for pn in pnames:
            keyc = self.names_constraint(pn, keyc, ptr)
            if keyc is None:
                return None
        alts = []
        nreg = 1 << len(pats)
        for mask in range(nreg):
            matched = [pats[i] for i in range(len(pats)) if mask >> i & 1]
            conj = [sub for _, sub, _, _ in matched] + [x["value"] for x in somes]
            for d in term:
                v = _VOCAB[2020] if id(d) in self.syn else self.vocab
                if (
                    "additionalProperties" in d
                    and "additionalProperties" in v
                    and not any(md is d for _, _, md, _ in matched)
                ):
                    self.check_schema(d["additionalProperties"], self.p(d) + "/additionalProperties")
                    conj.append(d["additionalProperties"])
            val = self.rule(conj, ptr + "/additionalProperties")
            if val is None:
                continue
            kc = keyc.copy()
            for i, (pat, _, _, kp) in enumerate(pats):
                (kc.patterns if mask >> i & 1 else kc.notpatterns).append((pat, kp))
            for some in somes:
                kc.exclude |= set(some["exclude"])
                kc.patterns += some["patterns"]
                kc.notpatterns += some["notpatterns"]
                if some["names"] is not None:
                    kc = self.narrow_names(kc, some["names"])
                    if kc is None:
                        break
            if kc is None:
                continue
            key = self.string_expr(
                kc, pats[0][3] if pats else ptr, keyword="patternProperties" if pats else "additionalProperties"
            )
            if key is None:
                continue
            alts.append(key + ' space ":" space ' + val + " space")
        if not alts:
            return None
        return self.add_rule("extra", " | ".join(alts))

    def key_ok(self, some, k):
        """Whether the key k is one a $strict-some member constraint names (the value aside)."""
        return (
            k not in some["exclude"]
            and all(_regex(p).search(k) is not None for p, _ in some["patterns"])
            and not any(_regex(p).search(k) is not None for p, _ in some["notpatterns"])
            and (some["names"] is None or self.valid_term(k, some["names"]))
        )

    def regex(self, pat, keyword, pointer):
        """The compiled regex pat (the validator searches with it: valid_atomic, key_ok), or a refusal naming
        keyword when Python's re refuses it (a syntax error, a repetition count past its limit)."""
        try:
            return _regex(pat)
        except (re.error, RecursionError, OverflowError) as e:
            self.refuse(keyword, pointer, "a pattern Python's re refuses: %s" % e)

    def not_of(self, sub, pointer):
        """The synthetic schema of the values that fail sub."""
        return self.synth({"$strict-not": sub}, pointer)

    def names_constraint(self, pn, keyc, ptr):
        """keyc narrowed by the propertyNames schema pn (a string schema), or None when no key passes."""
        terms = self.expand(pn)
        live = []
        for t in terms:
            m = self.merge(t)
            if m is None or "string" not in m["types"]:
                continue
            live.append((t, m))
        if not live:
            return None
        if len(live) > 1:
            self.refuse("propertyNames", self.p(pn), "propertyNames with alternatives")
        return self.narrow_names(keyc, live[0][0])

    def narrow_names(self, keyc, t):
        """keyc narrowed by the string constraints of the term t, or None when no string passes it."""
        m = self.merge(t)
        if m is None or "string" not in m["types"]:
            return None
        st = m["str"]
        kc = keyc.copy()
        kc.min = max(kc.min, st.min)
        if st.max is not None:
            kc.max = st.max if kc.max is None else min(kc.max, st.max)
        kc.patterns += st.patterns
        kc.notpatterns += st.notpatterns
        kc.formats += st.formats
        kc.notformats += st.notformats
        kc.exclude |= {x for x in m["notvalues"] if isinstance(x, str)}
        if m["enum"] is not None:
            inc = {x for x in m["enum"] if isinstance(x, str)}
            kc.include = inc if kc.include is None else kc.include & inc
        return kc


# Languages and their GBNF are pure functions of the pattern, format or constraint: kept across conversions
# (a server sees the same date-time and uuid formats in schema after schema). Bounded, oldest dropped first.
_LANG_CACHE = {}
_GBNF_CACHE = {}
_CACHE_MAX = 512
# a name no schema can guess: the replacement below must not touch text inside the rules' literals
_PLACEHOLDER = "strc" + uuid.uuid4().hex


def _cache_put(cache, key, value):
    if len(cache) >= _CACHE_MAX:
        cache.pop(next(iter(cache)))
    cache[key] = value


def _cached_lang(kind, arg):
    key = (kind, arg)
    lang = _LANG_CACHE.get(key)
    if lang is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # Python's notes on future regex syntax
            lang = _sl.Lang.regex(arg) if kind == "regex" else _sl.Lang.format(arg)
        _cache_put(_LANG_CACHE, key, lang)
    return lang


def _pattern_run(st):
    """(cs, a, b, nl) when st's one constraint besides its length is one pattern whose strings are exactly those
    of a..b characters (b None: no bound) of the character set cs, each followed or not by one newline when nl
    (Python's ``$`` matches before a final newline): ``^[\\w.-]+$``, ``^\\d{4}$``. Else None."""
    if len(st.patterns) != 1 or st.notpatterns or st.formats or st.notformats or st.exclude:
        return None
    try:
        lang = _cached_lang("regex", st.patterns[0][0])
    except _sl.LangError:
        return None  # the general path refuses it, naming the keyword
    trans, acc = lang._trans, lang._acc
    # the state a final newline leads to: accepting, nothing after it
    final = {t for row in trans for lo, hi, t in row if lo == hi == 10 and not trans[t] and acc[t]}
    if len(final) > 1:
        return None
    nl_to = final.pop() if final else -1
    chain = []
    cs = None
    s, loops = 0, False
    while True:
        chain.append(s)
        row = [(lo, hi, t) for lo, hi, t in trans[s] if t != nl_to]
        if acc[s] != (len(row) < len(trans[s])) and nl_to >= 0:
            return None  # the newline must follow exactly the accepted runs
        if len(row) + 1 < len(trans[s]):
            return None
        if not row:
            break
        target = row[0][2]
        ranges = []
        for lo, hi, t in row:
            if t != target:
                return None
            if ranges and ranges[-1][1] + 1 == lo:
                ranges[-1] = (ranges[-1][0], hi)
            else:
                ranges.append((lo, hi))
        ranges = tuple(ranges)
        if cs is None:
            cs = ranges
        elif ranges != cs:
            return None
        if target == s:
            loops = True
            break
        if target in chain:
            return None
        s = target
    if cs is None or len(chain) + (nl_to >= 0) != len(trans):
        return None
    accepting = [acc[x] for x in chain]
    first = accepting.index(True) if True in accepting else None
    if first is None or not all(accepting[first:]):
        return None
    return cs, first, None if loops else len(chain) - 1, nl_to >= 0


def _shipped_format_gbnf(name):
    """A format's GBNF from bankml.schema.format_data's file, under _PLACEHOLDER as string_expr caches it: what
    ``string_gbnf(Lang.format(name), _PLACEHOLDER)`` gives (tests/schema/test_format_data.py checks it)."""
    hit = format_data.load_gbnf(name)
    if hit is None:
        return None
    return _renamed(hit, _PLACEHOLDER, format_data.GBNF_NAME)


def write_format_gbnf():
    """Rebuild bankml/schema/formats-gbnf.json.gz: string_gbnf of each shipped format's language (the formats
    format_data ships for the 2020-12 checker), under format_data.GBNF_NAME."""
    entries = {}
    for name, bare in format_data.FORMATS:
        if not bare:
            entries[name] = _sl.string_gbnf(_sl.Lang.format(name), format_data.GBNF_NAME)
    format_data.write_gbnf(entries)


def _renamed(hit, name, old=_PLACEHOLDER):
    """A string_gbnf result made under the rule name prefix ``old`` (the cache's placeholder, or the shipped
    formats' name) under the prefix ``name``."""
    expr, rules = hit
    # rule names are the prefix then "-...": nothing else in GBNF text spells it
    return (
        expr.replace(old, name),
        {k.replace(old, name, 1): v.replace(old, name) for k, v in rules.items()},
    )


_GC_LOCK = threading.Lock()
_GC_PAUSES = [0, False]  # conversions running, whether the collector was enabled when the first began


@contextlib.contextmanager
def _gc_paused():
    """Python's cyclic collector off while conversions run. A conversion allocates hundreds of thousands of
    short-lived tuples, dicts and strings, all freed by reference counting; with the collector on, the young
    collections it triggers promote the compiler's live tables, and the full collections that follow scan the
    whole process heap (12-30 ms each in a bench worker, landing in whichever schema's conversion ran: a 1.6 ms
    conversion measured 32 ms). The collector is enabled again when the last conversion ends, if it was."""
    with _GC_LOCK:
        if _GC_PAUSES[0] == 0:
            _GC_PAUSES[1] = gc.isenabled()
            gc.disable()
        _GC_PAUSES[0] += 1
    try:
        yield
    finally:
        with _GC_LOCK:
            _GC_PAUSES[0] -= 1
            if _GC_PAUSES[0] == 0 and _GC_PAUSES[1]:
                gc.enable()


def _compile(schema, lenient, limits, pointer="#"):
    """``(root expression, {name: body})``: the expression of the instances of the schema node at ``pointer``
    (a JSON pointer into ``schema``, the document its ``$ref``s resolve in) and every rule it may use, the fixed
    ones (``space``, ``char``, ``value``...) last. Raises SchemaError as strict_schema_to_grammar does."""
    with _gc_paused():
        try:
            return _compile_unpaused(schema, lenient, limits, pointer)
        except _TooDeep:
            if not _COMPILED:
                raise SchemaError(_TOO_DEEP, "#", keyword="SchemaLimits") from None
    # compiled, the recursion ran low on C stack: done again from the start as plain Python (bankml.schema._cstack)
    return _python_module()._compile(schema, lenient, limits, pointer)


_TOO_DEEP = "strict JSON schema conversion failed:\nthe schema nests too deeply"

# Compiled, a function is a Cython function, not a Python one
_COMPILED = not isinstance(_compile, types.FunctionType)
_PYTHON_MODULE = None


def _python_module():
    """This file run as plain Python (bankml.schema._strict_python), where deep recursion ends in RecursionError."""
    global _PYTHON_MODULE
    if _PYTHON_MODULE is None:
        _PYTHON_MODULE = _plain_module("_strict_python", "strict.py", _gc_paused=_gc_paused)
    return _PYTHON_MODULE


def _compile_unpaused(schema, lenient, limits, pointer):
    bad = set(lenient) - LENIENT_KEYWORDS
    if bad:
        raise ValueError("lenient takes %s; not %s" % (", ".join(sorted(LENIENT_KEYWORDS)), ", ".join(sorted(bad))))
    if isinstance(schema, (str, bytes)):
        try:
            schema = jsondepth.loads(schema)  # nesting bounded before the decoder recurses
        except ValueError as e:
            raise SchemaError(
                "strict JSON schema conversion failed:\nthe schema is not JSON: %s" % e, "#", keyword="schema"
            ) from None
    if limits is None:
        limits = DEFAULT_LIMITS  # the same bounds as the llama.cpp port: 30 s, 8 MB
    try:
        c = _Compiler(schema, lenient, limits)
        node = _at_pointer(schema, pointer)
        if node is True or node is False or isinstance(node, dict):
            root = c.rule([node], pointer)
        else:
            c.refuse("schema", pointer, "a schema must be an object or a boolean")
    except _Refuse as e:
        raise SchemaError(
            "strict JSON schema conversion failed:\n%s (keyword %s at %s)" % (e.reason, e.keyword, e.pointer),
            e.pointer,
            keyword=e.keyword,
        ) from None
    except RecursionError:
        raise SchemaError(_TOO_DEEP, "#", keyword="SchemaLimits") from None
    rules = dict(c.rules)
    rules.update(_FIXED_RULES)
    return (root if root is not None else _NEVER), rules


def _at_pointer(schema, pointer):
    """The node of ``schema`` at the JSON pointer ``pointer`` (``#``, ``#/properties/a~1b``...: ``~0``/``~1``
    escapes only, no percent-encoding, so a property name with ``%`` is spelled as it is)."""
    if pointer == "#":
        return schema
    if not pointer.startswith("#/"):
        raise _Refuse("schema", pointer, "not a JSON pointer into the schema")
    node = schema
    for part in pointer[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise _Refuse("schema", pointer, "no schema at this pointer")
    return node


def strict_schema_to_grammar(schema, *, lenient=(), limits=None):
    """Compile a JSON schema (a dict, a bool, or JSON text) to GBNF whose root rule ``root`` accepts exactly
    the JSON texts (spelled as the module docstring says) of the instances jsonschema accepts.

    ``lenient``: keywords to treat as annotations instead of refusing them where strict mode cannot enforce
    them (see LENIENT_KEYWORDS). ``limits``: a ``bankml.schema.SchemaLimits`` (size, nodes, seconds).
    Raises ``SchemaError`` with ``keyword`` and ``pointer`` set for every schema it refuses.
    """
    root, rules = _compile(schema, lenient, limits)
    lines = ["root ::= " + root + " space"]
    for name, body in rules.items():
        lines.append("%s ::= %s" % (name, body))
    return "\n".join(lines) + "\n"


# a GBNF rule body's tokens: literals and character classes (their escapes inside), repetition bounds, names
_GBNF_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\]|\{[^}]*\}|[a-zA-Z0-9-]+|\s+|.', re.S)


def strict_schema_rules(schema, name, *, pointer="#", lenient=(), limits=None):
    """The strict rules of one schema, to embed in a bigger grammar: ``{rule name: body}`` where ``name``
    (a GBNF rule name) is the rule of the schema node at ``pointer`` (default the whole ``schema``; a pointer
    such as ``#/properties/a`` compiles one property, its ``$ref``s resolved in the whole document) followed
    by ``space``, as strict_schema_to_grammar's ``root``, and every other rule it reaches is named
    ``name + "-" + its own name``: no clash with another schema's rules under another name, nor with
    llama.cpp's converter rules (``space``, ``string``, ``value``... differ there). Raises SchemaError
    naming the keyword and pointer, as strict_schema_to_grammar does."""
    if not re.fullmatch(r"[a-zA-Z0-9-]+", name):
        raise ValueError("bad GBNF rule name %r" % (name,))
    root, rules = _compile(schema, lenient, limits, pointer)
    prefix = name + "-"
    out = {}
    pending = [(name, root + " space")]
    seen = {name}
    while pending:
        rule, body = pending.pop()
        parts = []
        for token in _GBNF_TOKEN.findall(body):
            if token in rules:
                if token not in seen:
                    seen.add(token)
                    pending.append((prefix + token, rules[token]))
                token = prefix + token
            parts.append(token)
        out[rule] = "".join(parts)
    return out


# any JSON value (the schema `true`), in the canonical string spelling
_VALUE_RULES = "\n".join(
    [
        'value ::= object | array | string | number | "true" | "false" | "null"',
        'object ::= "{" space ( string space ":" space value space ( "," space string space ":" space value space )* )? "}"',
        'array ::= "[" space ( value space ( "," space value space )* )? "]"',
        'string ::= "\\"" char* "\\""',
    ]
)

# the rules every compiled grammar may refer to by these names (after the compiled ones, in this order)
_FIXED_RULES = {
    "space": SPACE_RULE,
    "char": CHAR_RULE,
    "hex": "[0-9a-fA-F]",
    "number": NUMBER_RULE,
    "integer": INTEGER_RULE,
}
_FIXED_RULES.update(line.split(" ::= ", 1) for line in _VALUE_RULES.split("\n"))
