"""bankml.schema.converter compared with the pinned llama.cpp's own converter, live.

tests/oracle/build_converter.py compiles a tiny program against libllama-common.so of llama-cpp-python
0.3.36 (outside the repository, in ~/.cache/bankml-oracle/); every schema below goes through it and
through bankml.schema.converter.json_schema_to_grammar. The grammar must be the same bytes and the warning the same
text, or both must refuse with the same message.
"""

import json
import pathlib

import pytest

from bankml import Rules
from bankml.errors import GrammarError, SchemaError
from bankml.schema.converter import json_schema_to_grammar

from ..oracle import record_schema_grammars
from ..oracle.build_converter import Converter
from ..oracle_support import ORACLE_STATS

pytestmark = pytest.mark.oracle


def _obj(props, required=(), **extra):
    d = {"type": "object", "properties": props}
    if required:
        d["required"] = list(required)
    d.update(extra)
    return d


S = {"type": "string"}
I = {"type": "integer"}  # noqa: E741  (one letter per type, as the table below reads)
N = {"type": "number"}
B = {"type": "boolean"}

SCHEMAS = []


def add(schema):
    SCHEMAS.append(schema)


# --- Pydantic-shaped models -------------------------------------------------------------------------------
add(
    {
        "title": "User",
        "type": "object",
        "properties": {
            "id": {"title": "Id", "type": "integer"},
            "name": {"title": "Name", "type": "string"},
            "email": {
                "anyOf": [{"type": "string", "format": "email"}, {"type": "null"}],
                "default": None,
                "title": "Email",
            },
            "tags": {"type": "array", "items": {"type": "string"}, "title": "Tags"},
        },
        "required": ["id", "name"],
    }
)
add(
    {
        "$defs": {
            "Color": {"enum": ["red", "green", "blue"], "title": "Color", "type": "string"},
            "Point": {"properties": {"x": N, "y": N}, "required": ["x", "y"], "title": "Point", "type": "object"},
        },
        "properties": {
            "color": {"$ref": "#/$defs/Color"},
            "points": {"items": {"$ref": "#/$defs/Point"}, "type": "array"},
            "origin": {"anyOf": [{"$ref": "#/$defs/Point"}, {"type": "null"}], "default": None},
        },
        "required": ["color", "points"],
        "title": "Shape",
        "type": "object",
    }
)
add(
    {
        "definitions": {
            "Node": {
                "type": "object",
                "properties": {"value": I, "children": {"type": "array", "items": {"$ref": "#/definitions/Node"}}},
                "required": ["value"],
            }
        },
        "$ref": "#/definitions/Node",
    }
)
add(
    {
        "$defs": {
            "A": {"type": "object", "properties": {"b": {"$ref": "#/$defs/B"}}},
            "B": {"type": "object", "properties": {"a": {"$ref": "#/$defs/A"}, "n": I}, "required": ["n"]},
        },
        "$ref": "#/$defs/A",
    }
)
add(
    {
        "type": "object",
        "properties": {
            "name": S,
            "age": {"type": "integer", "minimum": 0, "maximum": 150},
            "score": {"type": "number", "minimum": 0, "maximum": 1},
        },
        "required": ["name", "age", "score"],
        "additionalProperties": False,
    }
)
add(_obj({"status": {"const": "ok"}, "data": {"type": "object"}}, ["status"]))
add(
    _obj(
        {
            "kind": {"type": "string", "enum": ["a", "b"]},
            "payload": {"oneOf": [_obj({"x": I}, ["x"]), _obj({"y": S}, ["y"])]},
        },
        ["kind", "payload"],
    )
)
add({"type": "object", "properties": {"a": S, "b": I, "c": B, "d": N}, "required": ["b", "d"]})
add({"type": "object", "properties": {"a": S, "b": I, "c": B}})
add({"type": "object", "properties": {"a": S}, "additionalProperties": True})
add({"type": "object", "properties": {"a": S}, "additionalProperties": I, "required": ["a"]})
add({"type": "object", "properties": {"and": S, "also": S, "b": S}, "additionalProperties": {"type": "number"}})
add({"type": "object", "additionalProperties": {"type": "array", "items": I}})
add({"type": "object", "additionalProperties": False})
add({"type": "object", "properties": {}, "additionalProperties": False})
add({"type": "object", "properties": {}})
add({"type": "object", "properties": {"": S, "é": I, "日本": B}, "additionalProperties": S})
add({"type": "object", "properties": {"a b": S, "c.d": I, "e/f": B, 'g"h': N, "i\\j": S, "k\nl": I}})
add({"type": "object", "properties": {"*": S, "x": I}, "additionalProperties": True})
add({"type": "object", "properties": {"*": S, "x": I}, "required": ["*"], "additionalProperties": B})
add({"type": "object", "properties": {"root": S, "string": I, "value": B, "integer": N, "char": S, "space": I}})
add({"type": "object", "properties": {"a-b": S, "a_b": I, "a b": B}})
add(
    {
        "type": "object",
        "properties": {
            "x": {
                "type": "object",
                "properties": {
                    "y": {
                        "type": "object",
                        "properties": {"z": {"type": "array", "items": {"type": "object", "properties": {"w": S}}}},
                    }
                },
            }
        },
    }
)
add({"type": "object", "properties": {"a": {"$ref": "#/properties/b"}, "b": I}})
add({"type": "object", "properties": {"list": {"type": "array", "items": {"$ref": "#"}}}})
add({"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"type": "string"}}})
add({"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}})
add({"$ref": "#/$defs/list/1", "$defs": {"list": [I, S, B]}})
add({"$ref": "#/$defs/list/-0", "$defs": {"list": [I, S, B]}})
add({"$ref": "#/$defs/list/ 2", "$defs": {"list": [I, S, B]}})
add({"$ref": "#/$defs/list/1x", "$defs": {"list": [I, S, B]}})
add(
    {
        "type": "object",
        "properties": {"p": {"$ref": "#/$defs/x"}, "q": {"$ref": "#/$defs/x"}},
        "$defs": {"x": {"type": "string", "maxLength": 3}},
    }
)
add({"type": "object", "properties": {"p": {"$ref": "#/$defs/x~1y"}}, "$defs": {"x~1y": I}})

# --- unions, allOf, const, enum ----------------------------------------------------------------------------
add({"anyOf": [S, I, {"type": "null"}]})
add({"oneOf": [S, I], "anyOf": [B]})
add({"anyOf": [{"anyOf": [S, I]}, {"oneOf": [B, {"type": "null"}]}]})
add({"type": ["string", "null"]})
add({"type": ["integer", "string"], "minimum": 3, "maxLength": 4})
add({"type": ["array", "object"], "items": I, "properties": {"a": S}})
add({"type": ["string", ["integer", "null"]]})
add({"type": ["string", 5], "const": 1})
add({"allOf": [_obj({"a": S}, ["a"]), _obj({"b": I}, ["b"])]})
add({"allOf": [{"$ref": "#/$defs/Base"}, _obj({"extra": B})], "$defs": {"Base": _obj({"id": I}, ["id"])}})
add({"allOf": [{"anyOf": [_obj({"a": S}), _obj({"b": I})]}, _obj({"c": B}, ["c"])]})
add({"allOf": [{"enum": ["a", "b", "c"]}, {"enum": ["b", "c", "d"]}]})
add({"allOf": [{"enum": ["a", "b"]}, {"enum": ["c"]}]})
add({"allOf": [{"enum": [1, 2, 2]}, {"enum": [2]}]})
add({"type": "object", "allOf": [_obj({"a": S}), _obj({"a": I}, ["a"])]})
add({"type": "string", "allOf": [{"enum": ["x", "y"]}, {"anyOf": [{"enum": ["y"]}, {"enum": ["y", "z"]}]}]})
add({"allOf": [S, I]})
add({"const": "hello"})
add({"const": 42})
add({"const": 2.0})
add({"const": [1, "two", None, True, {"k": 3.5}]})
add({"const": {"b": 1, "a": [2.5e-7, 1e100, -0.0, 0.1, 123456.789]}})
add({"const": 'quote " backslash \\ newline \n tab \t ctrl \u0001 del \u007f é 😀'})
add({"const": None})
add({"enum": ["a", 1, 2.5, None, True, [1], {"x": "y"}]})
add({"enum": ["\r\n", "]", "-", '\\"', "日本語"]})
add({"type": "integer", "const": 5, "enum": [1, 2]})
add({"type": "string", "enum": ["x"], "pattern": "^y$"})
add({"enum": [1e15, 1e16, 1e-4, 1e-5, 123456789012345.0, 1.5e300, 5e-324, 0.5]})

# --- integers ---------------------------------------------------------------------------------------------
for lo, hi in [
    (0, None),
    (1, None),
    (3, None),
    (9, None),
    (10, None),
    (25, None),
    (99, None),
    (100, None),
    (123, None),
    (None, 0),
    (None, 1),
    (None, 9),
    (None, 10),
    (None, 99),
    (None, 100),
    (None, 1000),
    (None, -1),
    (None, -10),
    (None, -123),
    (-1, None),
    (-5, None),
    (-10, None),
    (-123, None),
    (0, 9),
    (0, 10),
    (1, 99),
    (5, 30),
    (17, 1234),
    (-5, 5),
    (-123, 456),
    (-1000, -10),
    (-7, -3),
    (0, 0),
    (42, 42),
    (10, 5),
    (-3, -5),
    (100, 5),
    (1, 9223372036854775806),
    (-9223372036854775807, 0),
    (0, 999999999999),
    (987654321, 987654329),
]:
    d = {"type": "integer"}
    if lo is not None:
        d["minimum"] = lo
    if hi is not None:
        d["maximum"] = hi
    add(d)
add({"type": "integer", "exclusiveMinimum": 0})
add({"type": "integer", "exclusiveMaximum": 10})
add({"type": "integer", "exclusiveMinimum": -1, "exclusiveMaximum": 100})
add({"type": "integer", "minimum": 1.5, "maximum": 7.5})
add({"type": "integer", "exclusiveMinimum": 1.5, "exclusiveMaximum": 7.5})
add({"type": "integer", "minimum": -2.5, "maximum": -0.5})
add({"type": "integer", "minimum": 5, "exclusiveMinimum": 10})
add({"type": "integer", "minimum": 1e300})
add({"type": "integer", "maximum": -9223372036854775808})
add({"type": "integer", "minimum": 18446744073709551615})
add({"type": "integer", "exclusiveMaximum": -9223372036854775808})
add({"type": "integer", "exclusiveMinimum": 9223372036854775807})
add({"type": "integer", "minimum": "3"})
add({"type": "integer", "maximum": True})
add({"type": "integer", "exclusiveMinimum": True})
add({"type": "number", "minimum": 3, "maximum": 1})

# --- strings ----------------------------------------------------------------------------------------------
for lo, hi in [
    (0, 0),
    (0, 1),
    (1, None),
    (0, None),
    (2, None),
    (1, 1),
    (3, 5),
    (0, 10),
    (5, 2),
    (None, 2000),
    (None, 100000),
    (4294967301, None),
]:
    d = {"type": "string"}
    if lo is not None:
        d["minLength"] = lo
    if hi is not None:
        d["maxLength"] = hi
    add(d)
add({"type": "string", "minLength": -1})
add({"type": "string", "maxLength": 2.0})
add({"type": "string", "maxLength": "5"})
add({"minLength": 2})
add({"maxLength": 2, "format": "date"})
for fmt in ["date", "time", "date-time", "uuid", "uuid1", "uuid5", "uuid6", "UUID", "email", "uri", "hostname", ""]:
    add({"type": "string", "format": fmt})
add({"format": "date-time"})
add({"format": 5})
add({"type": "string", "format": ["date"]})
add(
    {
        "type": "object",
        "properties": {
            "d": {"type": "string", "format": "date"},
            "t": {"type": "string", "format": "time"},
            "dt": {"type": "string", "format": "date-time"},
            "u": {"type": "string", "format": "uuid"},
        },
    }
)

# --- patterns ---------------------------------------------------------------------------------------------
PATTERNS = [
    "^abc$",
    "^[a-z]+$",
    "^[A-Z][a-z]*$",
    "^\\d+$",
    "^[0-9]{3}-[0-9]{4}$",
    "^(foo|bar)$",
    "^(?:foo|bar)+baz?$",
    "^a{2}b{1,}c{,3}d{2,5}$",
    "^.*$",
    "^.+@.+\\..+$",
    "^\\.\\*\\+\\?\\(\\)\\[\\]\\{\\}\\|\\^\\$$",
    "^a\\-b$",
    "^[\\-a-z]$",
    "^[\\x41-\\x5A]+$",
    "^\\u00e9$",
    "^\\U0001F600$",
    "^\\t\\n\\r$",
    '^"quoted"$',
    '^["]$',
    "^a\\\\b$",
    "^(a(b(c)))$",
    "^(a|b|)$",
    "^()$",
    "^(a)*(b)+(c)?$",
    "^(ab){2,3}$",
    "^(ab){2}(ab){2}$",
    "^[ab]{2}[ab]{2}$",
    "^x{0}$",
    "^x{0,1}$",
    "^x{1}$",
    "^x{, 3}$",
    "^x{ 3}$",
    "^x{3a}$",
    "^x{-1}$",
    "^x{99999999999}$",
    "^x{2147483647}$",
    "^x{0,2147483647}$",
    "^x{1,2,3}$",
    "^x{}$",
    "^x{a}$",
    "^x{5,1}$",
    "^x{3$",
    "^é+$",
    "^日本*$",
    "^[é-ü]$",
    "^a.b$",
    "^a.*b.+c.?$",
    "abc",
    "^abc",
    "abc$",
    "^$",
    "$",
    "^",
    "^(?=a)a$",
    "^(?!a)b$",
    "^(?<n>a)$",
    "^(?i)a$",
    "^a^b$",
    "^a$b$",
    "^\\w+$",
    "^\\s$",
    "^[\\w]$",
    "^[\\d]$",
    "^a\\$",
    "^(a$",
    "^a)$",
    "^[a$",
    "^*a$",
    "^+$",
    "^{2}$",
    "^a]$",
    "^a}$",
    "^a||b$",
    "^|a$",
    "^(|)$",
    "^\\x4$",
    "^\\xZZ$",
    "^[\\x4]$",
    "^\\u12$",
    "^\\/$",
    "^\\b$",
    "^ab*c+d?$",
    "^abc*$",
    "^a.$",
    "^.a$",
    "^(a{2})*$",
    "^[^abc]+$",
    "^[]a]$",
    "^[a-]$",
    "^\\[x\\]$",
    "^(((((((((a)))))))))$",
    "^" + "(" * 100 + "a" + ")" * 100 + "$",
    "^" + "(" * 101 + "a" + ")" * 101 + "$",
    "^" + "(?:" * 50 + "x" + ")" * 50 + "$",
]
for pat in PATTERNS:
    add({"type": "string", "pattern": pat})
add({"pattern": "^[0-9]+$"})
add({"type": "string", "pattern": 5})
add({"type": "string", "pattern": ""})
add({"type": "string", "pattern": "^a$", "format": "date", "minLength": 3})
add(
    {
        "type": "object",
        "properties": {
            "code": {"type": "string", "pattern": "^[A-Z]{2}[0-9]{2}$"},
            "bad": {"type": "string", "pattern": "^\\w+$"},
            "code2": {"type": "string", "pattern": "^[A-Z]{2}[0-9]{2}$"},
        },
    }
)
add(
    {
        "type": "object",
        "properties": {
            "p": {"type": "string", "pattern": "^(ab){2}c$"},
            "q": {"type": "string", "pattern": "^(ab){3}d$"},
        },
    }
)
add(
    {
        "type": "object",
        "properties": {"p": {"type": "string", "pattern": "^.$"}, "dot": {"type": "string", "pattern": "^..$"}},
    }
)

# --- arrays -----------------------------------------------------------------------------------------------
for lo, hi in [(0, 0), (0, 1), (1, None), (0, None), (2, None), (1, 1), (3, 5), (0, 3), (5, 2), (None, 2)]:
    d = {"type": "array", "items": I}
    if lo is not None:
        d["minItems"] = lo
    if hi is not None:
        d["maxItems"] = hi
    add(d)
add({"type": "array"})
add({"type": "array", "minItems": 2})
add({"type": "array", "maxItems": 0})
add({"type": "array", "items": {}})
add({"type": "array", "items": {}, "maxItems": 3})
add({"type": "array", "prefixItems": [S, I, B]})
add({"type": "array", "items": [S, {"type": "array", "items": [I]}]})
add({"type": "array", "items": []})
add({"type": "array", "prefixItems": [S], "items": I, "minItems": 2})
add({"type": "array", "items": True})
add({"type": "array", "items": I, "minItems": -2})
add({"type": "array", "items": I, "maxItems": 2.5})
add({"items": S})
add({"prefixItems": [S, N]})
add({"type": "array", "items": {"type": "array", "items": {"type": "array", "items": S, "maxItems": 2}}})
add({"type": "array", "items": {"anyOf": [S, I]}, "minItems": 1})

# --- refusal paths ----------------------------------------------------------------------------------------
add({"type": "kaboom"})
add({"type": 123})
add({"type": []})
add({"type": {"a": 1}})
add({"$ref": 5})
add({"$ref": "http://example.com/schema"})
add({"$ref": "#foo"})
add({"$ref": "#/$defs/missing"})
add({"$ref": "#/$defs/list/7", "$defs": {"list": [I]}})
add({"$ref": "#/$defs/list/x", "$defs": {"list": [I]}})
add({"$ref": "#/$defs/list/-1", "$defs": {"list": [I]}})
add({"$ref": "#/"})
add({"$ref": "#/$defs/a/b", "$defs": {"a": 5}})
add({"$ref": "#/$defs/a", "$defs": {"a": 5}})
add({"anyOf": []})
add({"anyOf": {"type": "string"}})
add({"oneOf": [S, 5]})
add({"allOf": []})
add({"allOf": "x"})
add({"enum": []})
add({"enum": "abc"})
add({"properties": []})
add({"type": "object", "properties": {"a": 5}})
add({"type": "object", "additionalProperties": 5})
add({"type": "object", "properties": {"a": S}, "additionalProperties": "yes"})
add({"type": "object", "properties": {"x": {"type": "object", "properties": {"y": {"type": "nope"}}}}})
add({"anyOf": [S, {"type": "array", "items": {"$ref": "#/nowhere"}}]})
add({"type": "array", "prefixItems": [S, {"type": "wat"}]})
add({"type": "object", "properties": {"p": {"type": "string", "pattern": "^[a-$"}}})
add(
    {
        "type": "object",
        "properties": {"p": {"type": "string", "pattern": "^(a$"}, "q": {"type": "string", "pattern": "^b)$"}},
    }
)
add({"$ref": "#/$defs/a", "$defs": {"a": {"type": "integer", "maximum": -9223372036854775808}}})

# --- empty and odd-but-valid ------------------------------------------------------------------------------
add({})
add({"type": None})
add({"description": "anything", "title": "Any"})
add({"additionalProperties": True})
add({"additionalProperties": False})
add({"additionalProperties": {"type": "integer"}})
add({"required": ["a"], "properties": {"a": {}}})
add({"type": "null"})
add({"type": "boolean"})
add({"type": "number"})
add({"type": "integer"})
add({"type": "string"})
add({"type": "object"})
add({"type": "array"})
add({"$defs": {"x": {"type": "kaboom"}}, "type": "string"})

# --- schemas given as JSON text (the reader: floats stay floats, duplicate keys, big integers) -------------
TEXTS = [
    '{"const": 2.0}',
    '{"const": 1E2}',
    '{"const": -0}',
    '{"const": -0.0}',
    '{"const": 123456789012345678901234567890}',
    '{"const": 18446744073709551615}',
    '{"const": 9223372036854775808}',
    '{"const": 1e-7}',
    '{"const": 0.000123}',
    '{"const": 1.7976931348623157e308}',
    '{"type": "string", "type": "integer"}',
    '{"properties": {"b": {}, "a": {}, "b": {"type": "integer"}}}',
    '{"type": "integer", "minimum": 2.0, "maximum": 5.0}',
    '{"type": "string", "maxLength": 3.0}',
    '{"type": "array", "items": {"type": "integer"}, "minItems": 1e0}',
    '{"enum": ["\\u00e9", "\\ud83d\\ude00", "\\u0000", "\\/"]}',
    '  {"type" : "boolean"}  ',
]


# --- bigger ones (llama.cpp must finish them too: its optional-property chain is cubic) --------------------
def _chain(n):
    defs = {"d%d" % i: {"anyOf": [{"$ref": "#/$defs/d%d" % (i + 1)}, {"type": "null"}]} for i in range(n)}
    defs["d%d" % n] = {"type": "string"}
    return {"$ref": "#/$defs/d0", "$defs": defs}


def _nested(levels):
    root = cur = {}
    for _ in range(levels):
        cur["properties"] = {"a": {}}
        cur = cur["properties"]["a"]
    return root


add(_chain(300))
add(_nested(200))
add(
    {
        "type": "object",
        "properties": {"p%d" % i: {"type": ["string", "null"]} for i in range(120)},
        "required": ["p%d" % i for i in range(0, 120, 7)],
        "additionalProperties": True,
    }
)
add({"type": "object", "properties": {"k" * 300: {}, "k" * 299 + "j": {}}, "additionalProperties": True})
add({"type": "string", "pattern": "^" + "(a|b)[0-9]{2}\\." * 300 + "$"})
add({"enum": list(range(3000))})

# --- the realistic schemas of the benchmark, when present ---------------------------------------------------
_BENCH = pathlib.Path(__file__).resolve().parent.parent.parent / "bench" / "data" / "schemas.json"
if _BENCH.exists():
    for _entry in json.loads(_BENCH.read_text(encoding="utf-8"))["schemas"]:
        add(_entry["schema"])


def _cases():
    cases = [("schema-%03d" % i, json.dumps(s, ensure_ascii=False)) for i, s in enumerate(SCHEMAS)]
    cases += [("text-%02d" % i, t) for i, t in enumerate(TEXTS)]
    return cases


CASES = _cases()


@pytest.fixture(scope="module")
def converter():
    with Converter() as conv:
        yield conv


def test_enough_schemas():
    assert len(CASES) >= 150


@pytest.mark.parametrize("name,text", CASES, ids=[c[0] for c in CASES])
def test_same_as_llama_cpp(converter, name, text):
    ok, expected, kind, stderr = converter.convert_text(text)
    ORACLE_STATS["json schemas compared with llama.cpp's converter"] += 1
    try:
        grammar, warnings = json_schema_to_grammar(text)
    except SchemaError as e:
        assert not ok, f"bankml refused, llama.cpp gave:\n{expected}\nbankml: {e}"
        assert str(e) == expected
        assert kind == "invalid_argument"
        ORACLE_STATS["json schemas refused identically"] += 1
        return
    assert ok, f"llama.cpp refused ({kind}): {expected}\nbankml gave:\n{grammar}"
    assert grammar == expected
    warning = ("WARNING: JSON schema conversion was incomplete: " + "; ".join(warnings) + "\n") if warnings else ""
    assert warning == stderr
    ORACLE_STATS["json schema grammars byte-identical"] += 1
    try:
        Rules.parse(grammar)
    except GrammarError:
        # a grammar llama.cpp's converter writes but its GBNF parser refuses (huge repetitions)
        ORACLE_STATS["json schema grammars the GBNF parser refuses"] += 1


# --- seeded random schemas: integer ranges, patterns, objects, numbers ------------------------------------
def _random_schemas(seed=20261129):
    import random
    import struct

    rnd = random.Random(seed)
    out = []

    def bound():
        k = rnd.random()
        if k < 0.3:
            v = rnd.randint(-20, 20)
        elif k < 0.6:
            v = rnd.randint(-(10**6), 10**6)
        elif k < 0.8:
            v = rnd.randint(-(10**18), 10**18)
        else:
            v = rnd.choice([2**63 - 1, -(2**63), 2**63 - 2, -(2**63) + 1, 0, 9, 10, 99, 100, 999])
        return v if rnd.random() < 0.8 else v + 0.5

    for _ in range(1500):
        d = {"type": "integer"}
        for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            if rnd.random() < 0.4:
                d[key] = bound()
        out.append(d)
    alphabet = list('ab.|()[]{}*+?^$\\-,0123"é') + [
        "\\d",
        "\\x41",
        "\\u00e9",
        "\\n",
        "(?:",
        "{2}",
        "{1,3}",
        "{,2}",
        "[a-z]",
        "\\.",
        "\\\\",
    ]
    for _ in range(3000):
        body = "".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 12)))
        out.append({"type": "string", "pattern": body if rnd.random() < 0.1 else "^" + body + "$"})
    names = ["a", "b", "ab", "abc", "", "*", "é", "x y", "and", "also", "root", "char"]
    for _ in range(1000):
        props = {}
        for n in rnd.sample(names, rnd.randint(0, 6)):
            props[n] = rnd.choice(
                [
                    {},
                    {"type": "string", "minLength": rnd.randint(0, 3), "maxLength": rnd.randint(0, 4)},
                    {
                        "type": "array",
                        "items": {"type": "integer"},
                        "minItems": rnd.randint(0, 3),
                        "maxItems": rnd.randint(0, 4),
                    },
                    {"type": ["number", "null"]},
                    {"const": rnd.random()},
                    {"enum": ["x", 1, None]},
                ]
            )
        d = {"type": "object", "properties": props, "required": rnd.sample(list(props), rnd.randint(0, len(props)))}
        if rnd.random() < 0.3:
            d["additionalProperties"] = rnd.choice([True, False, {"type": "integer"}])
        if rnd.random() < 0.2:
            d = {"allOf": [d, {"type": "object", "properties": {"zz": {}}}]}
        out.append(d)
    floats = []
    while len(floats) < 20000:
        k = rnd.random()
        if k < 0.4:
            v = struct.unpack("<d", struct.pack("<Q", rnd.getrandbits(64)))[0]
        elif k < 0.6:
            v = rnd.uniform(-1, 1) * 10 ** rnd.randint(-30, 30)
        elif k < 0.7:
            v = struct.unpack("<d", struct.pack("<Q", rnd.getrandbits(52)))[0]
        else:
            v = round(rnd.uniform(-1e6, 1e6), rnd.randint(0, 8))
        if v == v and abs(v) != float("inf"):
            floats.append(v)
    for i in range(0, len(floats), 200):
        out.append({"enum": floats[i : i + 200]})
    return [json.dumps(d, ensure_ascii=False) for d in out]


def test_random_schemas_same_as_llama_cpp(converter):
    texts = _random_schemas()
    mismatches = []
    for text in texts:
        ok, expected, kind, stderr = converter.convert_text(text)
        try:
            grammar, warnings = json_schema_to_grammar(text)
            warning = (
                ("WARNING: JSON schema conversion was incomplete: " + "; ".join(warnings) + "\n") if warnings else ""
            )
            same = ok and grammar == expected and warning == stderr
        except SchemaError as e:
            same = not ok and str(e) == expected
        if not same:
            mismatches.append(text)
    ORACLE_STATS["random json schemas compared with llama.cpp's converter"] += len(texts)
    ORACLE_STATS["random json schemas identical (grammar and warning, or refusal)"] += len(texts) - len(mismatches)
    assert not mismatches, mismatches[:5]


def _random_nested_schemas(count, seed=7):
    """Nested objects, unions, allOf, arrays, tuples, type arrays and $refs into $defs and definitions."""
    import random

    rnd = random.Random(seed)
    defs = ["A", "B", "C", "D"]

    def leaf():
        return rnd.choice(
            [
                {"type": "string"},
                {"type": "integer", "minimum": rnd.randint(-50, 50)},
                {"type": "number"},
                {"type": "boolean"},
                {"type": "null"},
                {},
                {"const": rnd.choice(["k", 1, 2.5, None, [1]])},
                {"enum": rnd.sample(["a", "b", 1, None, 3.5, "c"], rnd.randint(1, 3))},
                {"type": "string", "format": rnd.choice(["date", "time", "date-time", "uuid", "email"])},
                {"type": "string", "pattern": rnd.choice(["^[a-z]+$", "^\\w$", "^(ab|c){2,3}$", "abc", "^a(b$"])},
                {"type": "string", "maxLength": rnd.randint(0, 5)},
                {"$ref": "#/$defs/" + rnd.choice(defs + ["Z"])},
                {"$ref": "#/definitions/" + rnd.choice(defs)},
            ]
        )

    def gen(d):
        if d <= 0 or rnd.random() < 0.25:
            return leaf()
        k = rnd.random()
        if k < 0.3:
            props = {
                rnd.choice(["a", "b", "c", "d", "e", "id", "root", "x-y", "é"]): gen(d - 1)
                for _ in range(rnd.randint(0, 4))
            }
            o = {"type": "object", "properties": props} if rnd.random() < 0.5 else {"properties": props}
            if props and rnd.random() < 0.6:
                o["required"] = rnd.sample(list(props), rnd.randint(0, len(props)))
            if rnd.random() < 0.4:
                o["additionalProperties"] = rnd.choice([True, False, gen(d - 1)])
            return o
        if k < 0.45:
            return {rnd.choice(["anyOf", "oneOf"]): [gen(d - 1) for _ in range(rnd.randint(1, 3))]}
        if k < 0.55:
            return {"allOf": [gen(d - 1) for _ in range(rnd.randint(1, 3))]}
        if k < 0.7:
            a = {"type": "array", "items": gen(d - 1)}
            if rnd.random() < 0.5:
                a["minItems"] = rnd.randint(0, 3)
            if rnd.random() < 0.5:
                a["maxItems"] = rnd.randint(0, 4)
            return a
        if k < 0.75:
            return {"type": "array", "prefixItems": [gen(d - 1) for _ in range(rnd.randint(0, 3))]}
        if k < 0.85:
            t = rnd.sample(["string", "integer", "null", "object", "array", "number"], rnd.randint(1, 3))
            return {"type": t, "minimum": 3, "maxLength": 4, "items": {"type": "string"}}
        return leaf()

    out = []
    for _ in range(count):
        schema = dict(gen(4))
        schema["$defs"] = {name: gen(3) for name in defs if rnd.random() < 0.8}
        if rnd.random() < 0.5:
            schema["definitions"] = {name: gen(2) for name in defs}
        out.append(json.dumps(schema, ensure_ascii=False))
    return out


def test_random_nested_schemas_same_as_llama_cpp(converter):
    texts = _random_nested_schemas(2000)
    mismatches = []
    crashes = 0
    for text in texts:
        try:
            ok, expected, kind, stderr = converter.convert_text(text)
        except RuntimeError:
            # llama.cpp overflowed its stack (allOf recursing through a $ref): bankml must refuse cleanly
            crashes += 1
            with pytest.raises(SchemaError):
                json_schema_to_grammar(text)
            continue
        try:
            grammar, warnings = json_schema_to_grammar(text)
            warning = (
                ("WARNING: JSON schema conversion was incomplete: " + "; ".join(warnings) + "\n") if warnings else ""
            )
            same = ok and grammar == expected and warning == stderr
        except SchemaError as e:
            same = not ok and str(e) == expected
        if not same:
            mismatches.append(text)
    ORACLE_STATS["random nested json schemas compared with llama.cpp's converter"] += len(texts) - crashes
    ORACLE_STATS["random nested json schemas identical"] += len(texts) - crashes - len(mismatches)
    ORACLE_STATS["random nested json schemas that crash llama.cpp (bankml: SchemaError)"] += crashes
    assert not mismatches, mismatches[:3]


CRASHERS = [
    {"allOf": [{"$ref": "#/$defs/A"}], "$defs": {"A": {"$ref": "#/$defs/B"}, "B": {"$ref": "#/$defs/A"}}},
    {"$ref": "#/$defs/A", "$defs": {"A": {"type": "object", "properties": {"b": {"allOf": [{"$ref": "#/$defs/A"}]}}}}},
]


@pytest.mark.parametrize("schema", CRASHERS, ids=["allof-ref-cycle", "allof-through-property"])
def test_schemas_that_crash_llama_cpp(converter, schema):
    # llama.cpp's converter overflows its stack on these (the program dies); bankml refuses them
    with pytest.raises(RuntimeError, match="died"):
        converter.convert(schema)
    with pytest.raises(SchemaError):
        json_schema_to_grammar(schema)
    ORACLE_STATS["json schemas that crash llama.cpp's converter (bankml: SchemaError)"] += 1


def test_the_bench_grammars_are_the_pinned_converter_s(converter):
    """bench/data/schema_grammars.json (the grammars the benches and the matcher oracle walk) is what its recorder,
    tests/oracle/record_schema_grammars.py, gets from the pinned converter now: every grammar, byte for byte."""
    recorded = json.loads(record_schema_grammars.OUTPUT.read_text(encoding="utf-8"))
    live = record_schema_grammars.record(converter)
    assert record_schema_grammars.dump(live) == record_schema_grammars.dump(recorded)
    ORACLE_STATS["bench schema grammars identical to llama.cpp's converter (recorded file vs live)"] += len(
        live["grammars"]
    )
