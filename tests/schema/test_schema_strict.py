"""Strict mode (bankml.schema.strict): every schema compiled exactly or refused with a SchemaError naming the keyword
and its JSON pointer. jsonschema (the validator of the schema's ``$schema``, 2020-12 by default, with the 2020-12
FormatChecker as MaskBench uses it) is the oracle: on every instance the grammar's verdict must be its verdict.

Instances are serialised as MaskBench does (``json.dumps(data, ensure_ascii=False)``) and walked byte by byte
(``Grammar.accept_bytes``, then the end state must be complete); a sample is also walked token by token over
the llama-bpe vocabulary (a greedy split by its pieces), the token allowed by the mask before it is accepted.
"""

import collections
import json
import os
import pathlib
import subprocess
import sys

import jsonschema  # noqa: E402 - the oracle
import pytest
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from bankml import Grammar, Rules, json_schema_to_grammar, json_schema_to_rules  # noqa: E402
from bankml.engine.vocab import Vocab  # noqa: E402
from bankml.errors import SchemaError  # noqa: E402
from bankml.schema import SchemaLimits  # noqa: E402
from bankml.schema.strict import strict_schema_rules, strict_schema_to_grammar  # noqa: E402

from .. import spec_oracle  # noqa: E402
from ..bounded import HANG_SECONDS  # noqa: E402
from ..oracle_support import ORACLE_STATS  # noqa: E402
from . import strict_fuzz  # noqa: E402
from .strict_fuzz import accepts, text_of  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
FORMATS = jsonschema.Draft202012Validator.FORMAT_CHECKER
REFUSALS = collections.Counter()  # keyword -> schemas refused, over the property tests
VERDICTS = collections.Counter()


def oracle(schema, value):
    return spec_oracle.is_valid(schema, value)  # jsonschema as the suite reads the spec (ECMA patterns)


_VOCAB = {}


def real_vocab():
    if "v" not in _VOCAB:
        v = Vocab.from_gguf(str(ROOT / "tests" / "data" / "ggml-vocab-llama-bpe.gguf"))
        by_piece = {}
        for i, p in enumerate(v.pieces):
            if p and p not in by_piece:
                by_piece[bytes(p)] = i
        _VOCAB["v"] = (v, by_piece, max(len(p) for p in by_piece))
    return _VOCAB["v"]


def greedy_tokens(data):
    """Token ids whose pieces concatenate to data: the longest piece at each point."""
    _, by_piece, longest = real_vocab()
    ids, i = [], 0
    while i < len(data):
        for n in range(min(longest, len(data) - i), 0, -1):
            t = by_piece.get(data[i : i + n])
            if t is not None:
                ids.append(t)
                i += n
                break
        else:
            raise AssertionError("no piece for byte %r" % data[i : i + 1])
    return ids


def accepts_tokens(rules, text):
    """The verdict of a token-by-token walk: each token must be allowed by the mask, the end complete."""
    v, _, _ = real_vocab()
    g = Grammar(rules, v)
    for t in greedy_tokens(text.encode("utf-8")):
        if not g.allows(t):
            return False
        g.accept(t)
    return g.complete


def compile_or_refusal(schema):
    try:
        return strict_schema_to_grammar(schema), None
    except SchemaError as e:
        assert e.keyword, "a refusal names its keyword: %s" % e
        assert e.pointer and e.pointer.startswith("#"), "a refusal names its pointer: %s" % e
        assert e.keyword in str(e) and e.pointer in str(e)
        return None, e


def check_instances(schema, values):
    gbnf, err = compile_or_refusal(schema)
    if err is not None:
        REFUSALS[err.keyword] += 1
        return None
    for value in values:
        expected = oracle(schema, value)
        text = text_of(value)
        got = accepts(gbnf, text)
        VERDICTS["valid" if expected else "invalid"] += 1
        assert got == expected, "schema %s\ninstance %s: jsonschema says %s, the grammar %s" % (
            json.dumps(schema),
            text,
            expected,
            got,
        )
    return gbnf


# --- examples by keyword ----------------------------------------------------------------------------

CASES = [
    (
        # two objects whose key tries share the chains of their names' rests ("ersion" below "apiV", and "ind"
        # below "k" in one and "kk" in the other), written once per conversion: extra keys that equal a listed
        # name, or stop or go on one character short of or past it, in either object
        {
            "type": "object",
            "properties": {
                "x": {"type": "object", "properties": {"apiVersion": {"type": "integer"}, "kind": {"type": "string"}}},
                "y": {
                    "type": "object",
                    "properties": {
                        "apiVersion": {"type": "boolean"},
                        "api": {"type": "integer"},
                        "kkind": {"type": "null"},
                    },
                },
            },
        },
        [
            {"x": {"apiVersion": 1, "kind": "k"}, "y": {"apiVersion": True, "api": 2, "kkind": None}},
            {"x": {"apiVersion": "1"}},
            {"x": {"apiVersio": "1", "apiVersionn": "2", "kin": 3, "kindd": 4, "api": "5"}},
            {"x": {"kind": 5}},
            {"y": {"apiVersion": 1}},
            {"y": {"api": "a"}},
            {"y": {"apiVersio": 1, "kkin": 2, "kkindd": 3, "kind": 4, "ap": 5}},
            {"y": {"kkind": 1}},
        ],
    ),
    (
        {
            "type": "object",
            "properties": {
                "a": {"type": "integer", "minimum": 3, "maximum": 120},
                "b": {"type": "string", "maxLength": 3},
            },
            "required": ["a"],
        },
        [
            {"a": 3},
            {"a": 2},
            {"a": 120, "b": "xyz"},
            {"b": "x", "a": 7},
            {"a": 121},
            {"a": 5, "b": "abcd"},
            {"b": "x"},
            {"a": 5, "c": [1, 2]},
            {},
            {"a": 1.5},
            {"a": 5.0},
            [],
            "x",
        ],
    ),
    (
        {"type": "number", "minimum": -1.5, "exclusiveMaximum": 1e20},
        [-1.5, -1.6, 0, 1e19, 1e20, 1.5e20, 99999999999999999999, 10**20, 0.00001, -0.0, -1.4999, 1.25e-7],
    ),
    (
        {
            "$schema": "http://json-schema.org/draft-04/schema#",
            "type": "number",
            "minimum": 0,
            "exclusiveMinimum": True,
            "maximum": 0.5,
        },
        [0, 0.5, 0.25, 1e-05, 0.51, -0.0, 5e-324, 1],
    ),
    ({"type": "integer", "multipleOf": 3, "minimum": -10, "maximum": 10}, list(range(-13, 14))),
    # float bounds past 2^53 and past Decimal's 28 digits: an int instance compared with the exact binary value
    (
        {"type": "number", "maximum": 3.0392182203157212e186},
        [int(3.0392182203157212e186), int(3.0392182203157212e186) + 1, 3.0392182203157212e186, 3.04e186, -1],
    ),
    (
        {"type": "number", "minimum": -1.7976931348623157e308},
        [-int(1.7976931348623157e308) - 1, -1.7976931348623157e308, 0],
    ),
    ({"type": "number", "multipleOf": 5}, [0, 5, 5.0, 10.5, -15, 7, 1e3]),
    (
        {"enum": [1, "a", {"x": 1, "y": [True, None]}, [1, 2]]},
        [1, 1.0, "a", "b", {"y": [True, None], "x": 1}, {"x": 1}, 2, True, [1, 2], [1.0, 2], [2, 1]],
    ),
    ({"const": 0}, [0, 0.0, -0.0, False, 1, "0"]),
    ({"$schema": "http://json-schema.org/draft-04/schema#", "type": "integer", "enum": [1.0, 2.5]}, [1, 1.0, 2.5, 2]),
    (
        {
            "$schema": "http://json-schema.org/draft-04/schema#",
            "type": "number",
            "not": {"type": "integer"},
            "enum": [1, 2.5],
        },
        [1, 1.0, 2.5, 2],
    ),
    ({"type": "integer", "enum": [1.0, 2.5, 3]}, [1, 1.0, 2.5, 3, 3.0]),
    (
        {
            "$schema": "http://json-schema.org/draft-04/schema#",
            "oneOf": [{"type": "integer", "enum": [1.0]}, {"type": "integer"}],
        },
        [1, 1.0, 2, "a"],
    ),
    (
        {"type": "string", "not": {"enum": ["ab", "abc"]}, "minLength": 2, "maxLength": 3},
        ["a", "ab", "abc", "abd", "ac", "zzz", "abcd", "é😀", "\n\t"],
    ),
    (
        {"type": "array", "items": {"type": "boolean"}, "minItems": 1, "maxItems": 3, "contains": {"const": True}},
        [[], [True], [False], [False, True], [1], [True] * 4, [False, False, True]],
    ),
    (
        {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}], "items": False},
        [[], [1], [1, "a"], [1, "a", 2], ["a"], [1, 2]],
    ),
    (
        {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "array",
            "items": [{"type": "integer"}],
            "additionalItems": {"type": "string"},
        },
        [[], [1], [1, "a", "b"], [1, 2], ["a"]],
    ),
    (
        {"type": "array", "contains": {"type": "integer"}, "minContains": 2, "maxContains": 3},
        [[], [1], [1, 2], [1, "a", 2, 3], [1, 2, 3, 4], ["a", "b"]],
    ),
    (
        {
            "oneOf": [
                {"type": "object", "properties": {"k": {"const": "a"}, "x": {"type": "integer"}}, "required": ["k"]},
                {"type": "object", "properties": {"k": {"const": "b"}, "x": {"type": "string"}}, "required": ["k"]},
            ]
        },
        [{"k": "a", "x": 1}, {"k": "a", "x": "s"}, {"k": "b", "x": "s"}, {"k": "c"}, {}, {"x": 1, "k": "a"}],
    ),
    ({"oneOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]}, ["a", 1, None, 1.5, True]),
    ({"oneOf": [{"required": ["a"]}, {"required": ["b"]}]}, [{}, {"a": 1}, {"b": 1}, {"a": 1, "b": 2}, 3]),
    ({"oneOf": [{"type": "integer"}, {"minimum": 2}]}, [0, 1, 2, 3, 2.5, 1.5, "a"]),
    (
        {"oneOf": [{"type": "array", "items": {"type": "integer"}}, {"maxItems": 2}]},
        [[], [1], [1, 2, 3], ["a"], ["a", "b", "c"], [1, "a"], 5],
    ),
    (
        {
            "oneOf": [
                {"properties": {"t": {"enum": ["x"]}, "v": {"type": "string"}}},
                {"properties": {"t": {"enum": ["y", "z"]}, "v": {"type": ["string", "null"]}}},
            ]
        },
        [{}, {"t": "x"}, {"t": "y", "v": None}, {"t": "x", "v": "s"}, {"v": "s"}, {"v": None}, {"t": "q"}],
    ),
    (
        {"if": {"properties": {"t": {"const": 1}}}, "then": {"required": ["a"]}, "else": {"required": ["b"]}},
        [{"t": 1, "a": 1}, {"t": 1, "b": 1}, {"t": 2, "b": 1}, {"b": 1}, {}, 5],
    ),
    (
        {
            "type": "object",
            "dependentRequired": {"b": ["a"]},
            "properties": {"a": {}, "b": {}},
            "minProperties": 1,
            "maxProperties": 2,
        },
        [
            {},
            {"a": 1},
            {"b": 1},
            {"a": 1, "b": 1},
            {"b": 1, "a": 1},
            {"a": 1, "b": 1, "c": 1},
            {"c": 1},
            {"c": 1, "b": 2},
        ],
    ),
    (
        {"$schema": "http://json-schema.org/draft-07/schema#", "dependencies": {"b": ["a"]}},
        [{}, {"b": 1}, {"a": 1, "b": 2}, 3],
    ),
    # schema dependencies: the key present, the whole schema applies (to objects only)
    (
        {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
            "dependencies": {"a": {"required": ["b"]}, "c": False, "d": ["a"]},
        },
        [{}, {"a": 1}, {"a": 1, "b": "x"}, {"b": "x", "a": 1}, {"c": 1}, {"b": 2}, {"d": 1, "a": 1, "b": ""}, 3, []],
    ),
    (
        {
            "type": ["object", "integer"],
            "dependentSchemas": {
                "a": {"properties": {"b": {"const": 1}}, "required": ["b"]},
                "b": {"maxProperties": 2},
            },
        },
        [{}, {"a": 0}, {"a": 0, "b": 1}, {"a": 0, "b": 2}, {"b": 5, "c": 1}, {"a": 0, "b": 1, "c": 1}, 7, "s"],
    ),
    (
        {"not": {"dependentSchemas": {"a": {"required": ["b"]}}}},
        [{}, {"a": 1}, {"a": 1, "b": 2}, {"b": 1}, 3, None],
    ),
    # schemas equal under Python's == but not as JSON (0 == False): neither is dropped from a conjunction
    ({"allOf": [{"enum": [0]}, {"enum": [False]}]}, [0, False, 0.0, 1, True, None]),
    ({"oneOf": [{"enum": [False]}, True, {"enum": [0]}]}, [0, False, 1, "x"]),
    (
        {"allOf": [{"const": [1, {"a": True}]}, {"const": [True, {"a": 1}]}]},
        [[1, {"a": True}], [True, {"a": 1}], [1, {"a": 1}]],
    ),
    # negated closed objects: failing on a key the object does not list
    (
        {"not": {"properties": {"a": {"type": "integer"}}, "additionalProperties": False}},
        [{}, {"a": 1}, {"a": "x"}, {"b": 1}, {"a": 1, "b": 2}, 3, []],
    ),
    ({"type": "object", "not": {"additionalProperties": False}}, [{}, {"a": 1}, {"a": 1, "b": 2}]),
    # negated multipleOf: an integer of a nonzero remainder, or a value with a fraction (exponent texts only below 1)
    ({"not": {"multipleOf": 3}}, [0, 1, 3, -3, 4, 4.0, 6.0, 4.5, -0.5, 1e-05, "s", None]),
    ({"type": "number", "multipleOf": 2, "not": {"multipleOf": 4}}, [0, 2, 4, 6, 6.0, 8.0, 3, 2.5, -2, -12]),
    (
        {"$schema": "http://json-schema.org/draft-04/schema#", "minimum": -7, "not": {"multipleOf": 2}},
        [-8, -7, -6, 0, 1, 2.0, 3.0, 2.5, 1e-05],
    ),
    ({"oneOf": [{"multipleOf": 2}, {"multipleOf": 3}]}, [0, 2, 3, 4, 6, 9, 12, 5, 1.5, "x"]),
    # uniqueItems over a small finite item language: each value at most once, in any order (1 == 1.0, true != 1)
    (
        {"type": "array", "uniqueItems": True, "items": {"enum": [1, 1.0, 2, True, None]}, "maxItems": 3},
        [[], [1], [1, 1.0], [1, True], [True, 1, None], [2, 2], [None, 2, 1, True], [3], [1.0, 2.0]],
    ),
    (
        {
            "uniqueItems": True,
            "items": {"anyOf": [{"const": [1, 2]}, {"const": {"a": 1, "b": 2}}, {"type": "boolean"}]},
        },
        [
            [[1, 2], {"b": 2, "a": 1}],
            [{"a": 1, "b": 2}, {"b": 2, "a": 1}],
            [True, False, [1, 2]],
            [[2, 1]],
            [True, True],
        ],
    ),
    # several contains schemas on one array: items split by which of them they satisfy, one counter each
    (
        {"allOf": [{"contains": {"const": 1}, "minContains": 2}, {"contains": {"type": "string"}, "maxContains": 1}]},
        [[], [1], [1, 1], [1, 1, "s"], [1, "s", 1, "t"], ["s", 1, 2, 1], [2, 2], 5],
    ),
    (
        {"type": "array", "not": {"contains": {"const": 1}}, "contains": {"const": 2}},
        [[], [2], [1, 2], [2, 3, 2], [3]],
    ),
    # negated propertyNames: a key that fails the names' schema
    (
        {"not": {"propertyNames": {"pattern": "^x", "maxLength": 2}}},
        [{}, {"xa": 1}, {"a": 1}, {"xyz": 1}, {"xa": 1, "b": 2}, 5],
    ),
    (
        {"oneOf": [{"propertyNames": {"maxLength": 1}}, {"required": ["ab"]}]},
        [{}, {"a": 1}, {"ab": 1}, {"ab": 1, "c": 2}, {"abc": 1}, 5],
    ),
    # negated patternProperties / additionalProperties: a member the keyword names whose value fails it
    (
        {"not": {"properties": {"xa": {"type": "string"}}, "patternProperties": {"^x": {"type": "integer"}}}},
        [{}, {"xa": 1}, {"xa": "s"}, {"xb": 1}, {"xb": "s"}, {"a": "s"}, {"a": 1, "xb": True}, 3],
    ),
    (
        {
            "not": {
                "properties": {"a": {"type": "integer"}},
                "patternProperties": {"b": {"type": "string"}},
                "additionalProperties": {"type": "boolean"},
            }
        },
        [{}, {"a": 1}, {"a": "s"}, {"b": "s"}, {"ab": 1}, {"c": True}, {"c": 1}, {"a": 1, "c": 1}, {"cb": "s"}, []],
    ),
    (
        {
            "type": "object",
            "properties": {"a": {}, "xb": {}},
            "not": {"patternProperties": {"^x": {"type": "integer"}}},
            "maxProperties": 2,
        },
        [{}, {"xb": 1}, {"xb": "s"}, {"a": 1, "xb": "s"}, {"xc": "s"}, {"a": 1, "xb": 1, "xc": "s"}],
    ),
    (
        {
            "oneOf": [
                {"properties": {"a": {"type": "integer"}}, "additionalProperties": False, "minProperties": 1},
                {"properties": {"a": {"type": "string"}, "b": {}}, "additionalProperties": False},
            ]
        },
        [{}, {"a": 1}, {"a": "x"}, {"b": 1}, {"a": 1, "b": 2}, {"a": "x", "b": 2}, {"c": 1}, 3, "s"],
    ),
    # oneOf beside "type": "object": branches that overlap only on non-objects are disjoint there (no negation)
    (
        {
            "type": "object",
            "oneOf": [
                {"properties": {"a": {}, "mode": {"enum": ["custom"]}}, "additionalProperties": False},
                {
                    "properties": {"mode": {"enum": ["reference"]}, "id": {"type": "string"}},
                    "required": ["id", "mode"],
                    "additionalProperties": False,
                },
            ],
        },
        [
            {},
            {"a": 1},
            {"mode": "custom"},
            {"mode": "reference", "id": "x"},
            {"id": "x", "mode": "reference"},
            {"mode": "reference"},
            {"id": "x", "mode": "custom"},
            {"a": 1, "id": "x", "mode": "reference"},
            5,
            "s",
        ],
    ),
    (
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "ab": {"type": "string"}},
            "additionalProperties": {"type": "boolean"},
        },
        [
            {"a": 1},
            {"a": "x"},
            {"ab": "x"},
            {"abc": True},
            {"abc": 1},
            {"b": True},
            {"": True},
            {"": 1},
            {"\n": True},
            {"é": 1},
            {"😀": True},
            {"😀": 1},
        ],
    ),
    (
        {
            "type": "object",
            "patternProperties": {"^x-": {"type": "integer"}, "y$": {"type": "string"}},
            "additionalProperties": False,
            "properties": {"x-a": {"const": 1}},
        },
        [{}, {"x-a": 1}, {"x-a": 2}, {"x-b": 2}, {"x-y": 2}, {"x-y": "s"}, {"ay": "s"}, {"ay": 1}, {"b": 1}],
    ),
    (
        {"type": "object", "propertyNames": {"pattern": "^[a-z]+$", "maxLength": 3}, "properties": {"abcd": {}}},
        [{}, {"abc": 1}, {"abcd": 1}, {"ABC": 1}, {"ab1": 2}],
    ),
    ({"type": "string", "pattern": "^[0-9]{3}-x$", "minLength": 5}, ["123-x", "12-x", "1234-x", "123-x\n"]),
    (
        {
            "$defs": {
                "node": {
                    "type": "object",
                    "properties": {"v": {"type": "integer"}, "next": {"$ref": "#/$defs/node"}},
                    "additionalProperties": False,
                }
            },
            "$ref": "#/$defs/node",
        },
        [{}, {"v": 1}, {"v": 1, "next": {"v": 2, "next": {}}}, {"next": {"v": "x"}}, {"w": 1}],
    ),
    (
        {"type": "object", "properties": {"child": {"$ref": "#"}, "n": {"type": "integer"}}, "required": ["n"]},
        [{"n": 1}, {"n": 1, "child": {"n": 2}}, {"n": 1, "child": {}}, {}],
    ),
    (
        {
            "$id": "https://example.com/root.json",
            "$defs": {"a": {"$anchor": "pos", "minimum": 0}},
            "properties": {"x": {"$ref": "#pos"}, "y": {"$ref": "root.json#/$defs/a"}},
        },
        [{"x": 1}, {"x": -1}, {"y": -1}, {"y": 0.5}],
    ),
    (
        {
            "allOf": [
                {"properties": {"a": {"type": "integer"}}},
                {"properties": {"a": {"minimum": 5}}, "required": ["a"]},
            ]
        },
        [{"a": 5}, {"a": 4}, {}, {"a": "x"}, {"a": 6, "b": 1}],
    ),
    (
        {"anyOf": [{"type": "string", "maxLength": 1}, {"type": "integer", "maximum": 0}]},
        ["", "a", "ab", 0, 1, -5, None],
    ),
    ({"not": {"type": ["string", "object"]}}, ["a", {}, 1, None, [], True]),
    ({"not": {"minLength": 2}}, ["", "a", "ab", 1, None]),
    ({"not": {"required": ["a"]}}, [{}, {"a": 1}, {"b": 1}, 3, "a"]),
    ({"not": {"minimum": 2}}, [1, 2, 1.5, "a", None]),
    ({"not": {"pattern": "^a"}}, ["a", "ba", 3, []]),
    ({"not": {"properties": {"a": {"type": "integer"}}}}, [{}, {"a": 1}, {"a": "x"}, 3]),
    ({"not": {"maxItems": 1}}, [[], [1], [1, 2], "ab"]),
    ({"not": {"items": {"type": "integer"}}}, [[], [1], [1, "a"], ["a"], "ab"]),
    ({"not": {"contains": {"type": "integer"}}}, [[], [1], [1, "a"], ["a"], "ab"]),
    ({"type": ["integer", "null"], "not": {"const": 3}}, [1, 3, None, 3.0, "3"]),
    (True, [1, "a", None, {"a": [1]}]),
    ({"type": "object", "properties": {"a": False}}, [{}, {"a": 1}, {"b": 1}]),
    # no instance on a path: the grammar's "never" must match nothing (the parser reads "[]" as empty)
    (
        {"type": "array", "prefixItems": [{"type": "integer", "minimum": 0, "maximum": -1}], "contains": True},
        [[], [1], 1],
    ),
    (False, [1, None, {}]),
    ({"type": "string", "format": "unknown-format", "maxLength": 2}, ["ab", "abc"]),
    # counts past the GBNF parser's 2000 repetitions (it would read a larger maximum as none)
    (
        {"type": "string", "minLength": 1500, "maxLength": 3000},
        ["a" * 1499, "a" * 1500, "a" * 2999, "a" * 3000, "a" * 3001],
    ),
    ({"type": "array", "maxItems": 2100}, [[1] * 2100, [1] * 2101, [], [1] * 1000]),
    ({"type": "object", "maxProperties": 2050}, [{str(i): 1 for i in range(2050)}, {str(i): 1 for i in range(2051)}]),
    (
        {"type": "object", "properties": {k: {"type": "integer"} for k in "abcdefghij"}, "required": ["a", "j"]},
        [{"a": 1, "j": 2}, {"a": 1, "b": 2, "j": 3}, {"a": 1}, {"a": 1, "j": 2, "z": 3}],
    ),
    # unevaluated*: the annotations of each term (unevaluated.py). anyOf: every set of branches the instance
    # passes counts ({"a", "b"} passes both, so both keys are evaluated)
    (
        {
            "anyOf": [{"properties": {"a": {"type": "integer"}}}, {"properties": {"b": True}}],
            "unevaluatedProperties": False,
        },
        [{}, {"a": 1}, {"b": 1}, {"a": 1, "b": 2}, {"a": "x", "b": 2}, {"a": 1, "c": 2}, {"c": 1}, 3],
    ),
    (
        {
            "anyOf": [{"patternProperties": {"^x": True}}, {"required": ["a"], "properties": {"a": True}}],
            "unevaluatedProperties": {"type": "string"},
        },
        [{"xa": 1, "b": "s"}, {"xa": 1, "b": 2}, {"a": 1, "b": "s"}, {"a": 1, "xb": 2}, {"b": 1}],
    ),
    (
        {
            "oneOf": [{"properties": {"a": {"const": 1}}}, {"properties": {"b": True}, "required": ["b"]}],
            "unevaluatedProperties": False,
        },
        [{"a": 1}, {"b": 1}, {"a": 1, "b": 1}, {"a": 2, "b": 1}, {"c": 1}, {}],
    ),
    (
        {
            "if": {"properties": {"k": {"const": "x"}}, "required": ["k"]},
            "then": {"properties": {"t": True}},
            "else": {"properties": {"e": True}},
            "unevaluatedProperties": False,
        },
        [{"k": "x", "t": 1}, {"k": "x", "e": 1}, {"k": "y", "e": 1}, {"k": "y"}, {"e": 1}, {"t": 1}],
    ),
    (
        {"if": {"properties": {"a": {"type": "integer"}}}, "unevaluatedProperties": False},
        [{}, {"a": 1}, {"a": "x"}, {"b": 1}],
    ),
    (
        {"not": {"not": {"properties": {"a": True}}}, "unevaluatedProperties": False},
        [{}, {"a": 1}],
    ),
    (
        {
            "dependentSchemas": {"a": {"properties": {"b": True}}},
            "properties": {"a": True},
            "unevaluatedProperties": False,
        },
        [{"a": 1, "b": 2}, {"b": 2}, {"a": 1}, {"a": 1, "c": 1}],
    ),
    (
        {
            "allOf": [{"properties": {"a": True}, "unevaluatedProperties": {"type": "integer"}}],
            "unevaluatedProperties": False,
        },
        [{"a": "x", "b": 1}, {"b": "x"}, {}],
    ),
    (
        {
            "$defs": {"d": {"properties": {"a": True}}},
            "$ref": "#/$defs/d",
            "properties": {"b": True},
            "unevaluatedProperties": False,
        },
        [{"a": 1, "b": 1}, {"c": 1}],
    ),
    (
        {"prefixItems": [True], "allOf": [{"prefixItems": [True, {"type": "string"}]}], "unevaluatedItems": False},
        [[], [1], [1, "a"], [1, 2], [1, "a", 3]],
    ),
    (
        {"contains": {"type": "string"}, "unevaluatedItems": {"type": "integer"}},
        [["a"], ["a", 1], ["a", None], [1, "b", 2], [1]],
    ),
    (
        {"anyOf": [{"prefixItems": [True]}, {"prefixItems": [True, True, True]}], "unevaluatedItems": False},
        [[1], [1, 2], [1, 2, 3], [1, 2, 3, 4]],
    ),
    (
        {
            "if": {"prefixItems": [{"const": 1}]},
            "then": {"prefixItems": [True, True]},
            "else": {"maxItems": 1},
            "unevaluatedItems": False,
        },
        [[1], [1, 2], [1, 2, 3], [2], [2, 3]],
    ),
    (
        # $dynamicRef: the root resource defines the anchor, so every path resolves to it (the strict tree)
        {
            "$id": "https://example.com/strict-tree",
            "$dynamicAnchor": "node",
            "$ref": "tree",
            "unevaluatedProperties": False,
            "$defs": {
                "tree": {
                    "$id": "tree",
                    "$dynamicAnchor": "node",
                    "type": "object",
                    "properties": {"data": True, "children": {"type": "array", "items": {"$dynamicRef": "#node"}}},
                }
            },
        },
        [
            {"children": [{"data": 1}]},
            {"children": [{"daat": 1}]},
            {"data": 1, "x": 2},
            {"children": [{"children": []}]},
        ],
    ),
    (
        # one resource defines it: a $ref; a pointer fragment: a $ref
        {
            "$defs": {"s": {"$dynamicAnchor": "s", "type": "string"}},
            "items": {"$dynamicRef": "#s"},
            "properties": {"n": {"$dynamicRef": "#/$defs/s"}},
        },
        [["a"], [1], {"n": "x"}, {"n": 1}],
    ),
    (
        # the root does not define "c": "item" is on every path to the reference before "bar", never entered
        {
            "$id": "https://example.com/main",
            "type": "object",
            "properties": {"x": {"$ref": "item"}},
            "$defs": {
                "bar": {
                    "$id": "bar",
                    "items": {"$ref": "item"},
                    "$defs": {
                        "item": {
                            "$id": "item",
                            "properties": {"c": {"$dynamicRef": "#c"}},
                            "$defs": {"d": {"$dynamicAnchor": "c", "type": "integer"}},
                        },
                        "c": {"$dynamicAnchor": "c", "type": "string"},
                    },
                }
            },
        },
        [{"x": {"c": 1}}, {"x": {"c": "s"}}, {"x": {}}],
    ),
    ({"not": {"prefixItems": [{"type": "integer"}, {"type": "string"}]}}, [[], [1], ["a"], [1, "a"], [1, 2], "x"]),
    (
        # a and b define the dynamic anchor and lead to c: which one is outermost depends on the anyOf branch, so
        # c is compiled once per scope (document.Document.scoped)
        {
            "$id": "https://example.com/r",
            "anyOf": [{"$ref": "a"}, {"$ref": "b"}],
            "$defs": {
                "a": {"$id": "a", "$ref": "c", "$defs": {"x": {"$dynamicAnchor": "x", "type": "integer"}}},
                "b": {"$id": "b", "$ref": "c", "$defs": {"x": {"$dynamicAnchor": "x", "type": "string"}}},
                "c": {"$id": "c", "items": {"$dynamicRef": "#x"}, "$defs": {"x": {"$dynamicAnchor": "x"}}},
            },
        },
        [[1, 2], ["a"], [1, "a"], [None], [], {"k": 1}],
    ),
]


def test_key_order_policy():
    """Up to 8 listed keys: any order, each key once. Past 8: any order of up to 12 required keys, optional ones
    repeatable; past that, refused (lenient "properties": schema order). The module docstring's policy."""
    few = strict_schema_to_grammar({"properties": {k: {} for k in "abc"}, "required": ["c"]})
    assert accepts(few, '{"c": 1, "a": 2}') and accepts(few, '{"b": 1, "z": 0, "c": 2}')
    assert not accepts(few, '{"c": 1, "c": 2}') and not accepts(few, '{"a": 1}')
    many = strict_schema_to_grammar(
        {"properties": {k: {"type": "integer"} for k in "abcdefghij"}, "required": ["b", "c"]}
    )
    assert accepts(many, '{"b": 1, "j": 2, "c": 3}') and accepts(many, '{"j": 1, "c": 2, "b": 3}')
    assert not accepts(many, '{"j": 1, "c": 2}') and not accepts(many, '{"j": "x", "c": 2, "b": 3}')
    assert accepts(many, '{"j": 1, "c": 2, "b": 3, "j": 4}')  # a repeated optional key: every value passes
    # past that, every key order cannot be built: refused, or schema order by the user's explicit leniency
    counted_schema = {"properties": {k: {} for k in "abcdefghij"}, "maxProperties": 3}
    with pytest.raises(SchemaError, match="cannot be taken in every order") as refusal:
        strict_schema_to_grammar(counted_schema)
    assert refusal.value.keyword == "properties" and refusal.value.pointer == "#"
    # up to 12 required keys in any order (one rule per set of them written), 13 refused
    ten = strict_schema_to_grammar({"properties": {k: {} for k in "abcdefghij"}, "required": list("abcdefghij")})
    texts = ['"%s": %d' % (k, i) for i, k in enumerate("abcdefghij")]
    assert accepts(ten, "{" + ", ".join(texts) + "}") and accepts(ten, "{" + ", ".join(reversed(texts)) + "}")
    assert not accepts(ten, "{" + ", ".join(texts[1:]) + "}")
    keys = "abcdefghijklm"
    required = {"type": "object", "properties": {k: {} for k in keys}, "required": list(keys)}
    with pytest.raises(SchemaError, match="13 listed keys [(]13 required[)]") as refusal:
        strict_schema_to_grammar({"properties": {"x": required}})
    assert refusal.value.keyword == "properties" and refusal.value.pointer == "#/properties/x"
    counted = strict_schema_to_grammar(counted_schema, lenient={"properties"})
    assert accepts(counted, '{"a": 1, "j": 2}') and not accepts(counted, '{"j": 1, "a": 2}')


def test_format_beside_length_bounds():
    """A format beside maxLength (bench/tool_reliability.py's send_email tool: email, maxLength 64) compiles to
    the product's language; a bound too large to count is refused naming format, the bounds and the pointer."""
    schema = {"type": "object", "properties": {"to": {"type": "string", "format": "email", "maxLength": 64}}}
    gbnf = strict_schema_to_grammar(schema)
    local = "a" * 30
    for to in [
        "joe@example.com",
        local + "@" + "b" * 33,
        local + "@" + "b" * 34,
        '"joe bloggs"@example.com',
        "joe@[IPv6:::1]",
        "x" * 40 + "@[IPv6:ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255]",
        "x" * 10 + "@[IPv6:ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255]",
        "joe@",
        "joe..bloggs@example.com",
    ]:
        value = {"to": to}
        assert accepts(gbnf, text_of(value)) == oracle(schema, value), to
    with pytest.raises(SchemaError, match="format 'email' beside minLength 0 / maxLength 100000") as refusal:
        strict_schema_to_grammar({"properties": {"to": {"format": "email", "maxLength": 100000}}})
    assert refusal.value.keyword == "format" and refusal.value.pointer == "#/properties/to/format"


def test_dependencies_in_the_repeating_form():
    """Past 8 listed keys, a dependency's keys are tracked as the required ones are (one rule per set of them
    written), the other keys free to come again: docker-compose's memswap_limit needs mem_limit among 45 keys,
    a calculate_area tool's shape needs three keys besides five required ones (MaskBench)."""
    keys = "abcdefghij"
    schema = {
        "properties": {k: {"type": "integer"} for k in keys},
        "required": ["a"],
        "dependencies": {"b": ["c", "d"], "e": ["a"]},
        "additionalProperties": False,
    }
    gbnf = strict_schema_to_grammar(schema)
    values = [
        {"a": 1},
        {"b": 1, "a": 2},
        {"d": 1, "b": 2, "a": 3, "c": 4},
        {"c": 1, "d": 2, "a": 3, "b": 4, "j": 5},
        {"e": 1, "a": 2, "j": 3, "i": 4},
        {"j": 1, "b": 2, "a": 3, "c": 4},
        {"c": 1},
        {"a": 1, "k": 2},
        {"a": "x", "c": 1},
    ]
    for value in values:
        assert accepts(gbnf, text_of(value)) == oracle(schema, value), value
    assert accepts(gbnf, '{"a": 1, "j": 2, "j": 3}')  # an untracked key may come again
    assert not accepts(gbnf, '{"a": 1, "b": 2, "b": 3, "c": 4, "d": 5}')  # a tracked key comes once
    # thirteen keys named by required and dependencies: no rule per set of them, refused naming properties
    many = {"properties": {k: {} for k in "abcdefghijklm"}, "dependencies": {"a": list("bcdefghijklm")}}
    with pytest.raises(SchemaError, match="13 listed keys") as refusal:
        strict_schema_to_grammar(many)
    assert refusal.value.keyword == "properties" and refusal.value.pointer == "#"


def test_exact_key_order_budget():
    """Objects the repeating form also takes get the exact one (each key once) for their first 512 key sets of
    the grammar; later ones repeat optional keys. Objects only the exact form takes still get it past that."""
    keys = "abcdef"  # 64 key sets an object: eight exact, then repeating
    defs = {"o%d" % i: {"type": "object", "properties": {k: {"type": "integer"} for k in keys}} for i in range(10)}
    schema = {
        "$defs": defs,
        "type": "object",
        "properties": {"p%d" % i: {"$ref": "#/$defs/o%d" % i} for i in range(10)},
    }
    # the outer object (10 listed keys) repeats; its members are built in order, o0 first
    schema["properties"]["q"] = {"type": "object", "properties": {k: {} for k in keys}, "maxProperties": 6}
    gbnf = strict_schema_to_grammar(schema)
    first, last = '{"p0": {"a": 1, "a": 2}}', '{"p9": {"a": 1, "a": 2}}'
    assert not accepts(gbnf, first)  # exact: each key once
    assert accepts(gbnf, last) and jsonschema.Draft202012Validator(schema).is_valid(json.loads(last))
    assert not accepts(gbnf, '{"p9": {"a": 1, "a": "x"}}')  # every value still passes
    # maxProperties counts keys: only the exact form takes it, and it does past the 512
    assert accepts(gbnf, '{"q": {"f": 1, "a": 2}}') and not accepts(gbnf, '{"q": {"a": 1, "a": 2}}')
    many = {k: 1 for k in keys}
    for i in (0, 9):
        assert accepts(gbnf, json.dumps({"p%d" % i: dict(reversed(list(many.items())))}))


@pytest.mark.parametrize(
    "value,accept,states",
    [("512", "le", 40), ("128", "ge", 24), ("0.3", "ge", 24), ("-2.25", "lt", 40), ("1e3", "gt", 40)],
)
def test_number_automaton_is_minimal(value, accept, states):
    """The number automaton is minimized before its rules are written ("maximum": 512 explored 560 states and
    wrote a rule for each; 32 are the language's): no two states are equivalent."""
    from decimal import Decimal

    from bankml.schema.strict.lang.automaton import finish
    from bankml.schema.strict.numeric import Bound, number_dfa

    test = {"le": lambda r: r <= 0, "ge": lambda r: r >= 0, "lt": lambda r: r < 0, "gt": lambda r: r > 0}[accept]
    trans, acc = number_dfa(False, [Bound(Decimal(value), test)], None, False)
    rows = [sorted((ord(c), ord(c), t) for c, t in row.items()) for row in trans]
    assert len(finish(rows, acc, "x")._trans) == len(trans) <= states


@pytest.mark.parametrize("schema,values", CASES, ids=[json.dumps(s)[:60] for s, _ in CASES])
def test_cases(schema, values):
    gbnf, err = compile_or_refusal(schema)
    assert err is None, "refused: %s" % err
    check_instances(schema, values)


def test_escaped_spellings():
    """Keys and strings in other JSON spellings (\\u escapes, \\/, surrogate pairs) decode to the same value:
    verdicts follow the decoded value."""
    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "s": {"enum": ["x/😀"]}},
        "additionalProperties": {"type": "boolean"},
    }
    gbnf = strict_schema_to_grammar(schema)
    for text in [
        '{"\\u0061": 1}',
        '{"\\u0061": true}',
        '{"\\u0062": true}',
        '{"\\u0062": 1}',
        '{"s": "x\\/\\ud83d\\ude00"}',
        '{"s": "\\u0078/😀"}',
        '{"s": "x/\\ud83d"}',
        '{"\\/": true}',
    ]:
        try:
            value = json.loads(text)
        except ValueError:
            continue
        lone = any(0xD800 <= ord(c) <= 0xDFFF for c in json.dumps(value, ensure_ascii=False))
        expected = oracle(schema, value) and not lone  # lone surrogates: never accepted (module docstring)
        assert accepts(gbnf, text) == expected, text


# --- refusals ---------------------------------------------------------------------------------------

REFUSED = [
    ({"type": "array", "uniqueItems": True}, "uniqueItems", "#/uniqueItems"),
    ({"properties": {"a": {"$ref": "https://example.com/x.json"}}}, "$ref", "#/properties/a/$ref"),
    ({"type": "number", "multipleOf": 0.1}, "multipleOf", "#/multipleOf"),
    ({"oneOf": [{"uniqueItems": True}, {"maxItems": 3}]}, "oneOf", "#/oneOf"),
    ({"not": {"patternProperties": {"(": {"type": "integer"}}}}, "patternProperties", "#/not/patternProperties/("),
    ({"enum": ["a"], "not": {"pattern": "("}}, "pattern", "#/not/pattern"),
    ({"type": "string", "pattern": "a{4294967296}"}, "pattern", "#/pattern"),  # re: OverflowError
    ({"properties": {"(": {}}, "not": {"propertyNames": {"pattern": "("}}}, "pattern", "#/not/propertyNames/pattern"),
    ({"not": {"additionalProperties": False, "patternProperties": {"\\p{L}": {}}}}, "patternProperties", None),
    ({"not": {"unevaluatedProperties": False}}, "unevaluatedProperties", "#/not/unevaluatedProperties"),
    (
        {"dependencies": {"a": {"properties": {"b": True}}}, "unevaluatedProperties": False},
        "dependencies",
        "#/dependencies",
    ),
    ({"anyOf": [{"minimum": i} for i in range(9)], "unevaluatedItems": False}, "anyOf", "#/anyOf"),
    ({"type": "string", "pattern": "(?=a)b"}, "pattern", "#/pattern"),
    ({"not": {"uniqueItems": True}}, "not", "#/not/uniqueItems"),
    ({"$schema": "http://json-schema.org/draft-03/schema#"}, "$schema", "#"),
    ({"$ref": "#/$defs/missing"}, "$ref", "#/$ref"),
    ({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}, "$ref", None),
]


@pytest.mark.parametrize("schema,keyword,pointer", REFUSED, ids=[k for _, k, _ in REFUSED])
def test_refusals_name_keyword_and_pointer(schema, keyword, pointer):
    with pytest.raises(SchemaError) as info:
        strict_schema_to_grammar(schema)
    assert info.value.keyword == keyword, str(info.value)
    if pointer is not None:
        assert info.value.pointer == pointer, str(info.value)
    assert keyword in str(info.value)


def test_lenient_turns_a_refusal_into_an_annotation():
    schema = {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}
    with pytest.raises(SchemaError):
        strict_schema_to_grammar(schema)
    gbnf = strict_schema_to_grammar(schema, lenient={"uniqueItems"})
    assert accepts(gbnf, "[1, 1]") and not accepts(gbnf, '["a"]')
    with pytest.raises(ValueError):
        strict_schema_to_grammar(schema, lenient={"required"})


def test_limits():
    wide = {"allOf": [{"anyOf": [{"minimum": i}, {"maximum": -i}, {"type": "string"}]} for i in range(12)]}
    with pytest.raises(SchemaError) as info:
        strict_schema_to_grammar(wide)
    assert info.value.keyword == "anyOf"
    big = {"type": "object", "properties": {"k%d" % i: {"type": "string"} for i in range(300)}}
    with pytest.raises(SchemaError) as info:
        strict_schema_to_grammar(big, limits=SchemaLimits(max_grammar_bytes=10_000))
    assert info.value.keyword == "SchemaLimits.max_grammar_bytes"
    with pytest.raises(SchemaError) as info:
        strict_schema_to_grammar(big, limits=SchemaLimits(max_seconds=0.0))
    assert info.value.keyword == "SchemaLimits.max_seconds"
    deep = {}
    node = deep
    for _ in range(5000):
        node["items"] = {}
        node = node["items"]
    for convert in (strict_schema_to_grammar, lambda x: json_schema_to_grammar(x, mode="strict")):
        with pytest.raises(SchemaError) as info:
            convert(deep)
        assert info.value.keyword == "SchemaLimits.max_depth"
    shared = {"type": "integer"}
    for _ in range(40):  # 2^40 paths through shared sub-dicts: read once each
        shared = {"anyOf": [shared, shared]}
    assert accepts(strict_schema_to_grammar(shared), "5")


def test_grammar_bytes_capped_at_the_engines_limit():
    """Strict mode refuses (a SchemaError naming the limit) a grammar the engine would refuse for its size."""
    from bankml.engine import parser
    from bankml.schema.strict.bounds import ENGINE_MAX_GRAMMAR_BYTES

    assert ENGINE_MAX_GRAMMAR_BYTES == parser.MAX_GRAMMAR_BYTES
    wide = {"enum": ["%06d-abcdefghijklmnopqrstuvwxyzabcdefgh" % i for i in range(30000)]}  # 5 MB of GBNF
    with pytest.raises(SchemaError) as info:
        strict_schema_to_grammar(wide, limits=SchemaLimits(max_grammar_bytes=1 << 30))
    assert info.value.keyword == "SchemaLimits.max_grammar_bytes"


def test_odd_keyword_values_raise_only_schema_errors():
    """Schemas of odd values where the keywords negation, dependencies, contains and uniqueItems meet (wrong types,
    regexes Python's re refuses, zero and fractional divisors): every one compiles or is a SchemaError."""
    import random

    atoms = [5, "x", None, True, False, [], {}, [1, 2], {"type": "integer"}, {"const": 1}, {"enum": []}]
    atoms += [{"enum": ["a", 1]}, {"const": {"a": "b"}}, {"enum": ["a"], "not": {"pattern": "("}}]
    atoms += [{"pattern": "("}, {"multipleOf": 0}, {"multipleOf": 2.5}, {"minimum": "a"}]
    keys = ["dependencies", "dependentSchemas", "propertyNames", "patternProperties", "additionalProperties"]
    keys += ["properties", "uniqueItems", "contains", "items", "multipleOf", "not", "oneOf", "allOf"]
    keys += ["minContains", "maxContains", "maxItems"]
    rnd = random.Random(7)

    def gen(depth):
        if depth == 0:
            return rnd.choice(atoms)
        s = {}
        for _ in range(rnd.randint(1, 3)):
            k = rnd.choice(keys)
            if k in ("dependencies", "dependentSchemas", "patternProperties", "properties"):
                s[k] = {rnd.choice(["a", "b", "(", "^x"]): gen(depth - 1) for _ in range(rnd.randint(0, 2))}
            elif k in ("oneOf", "allOf"):
                s[k] = [gen(depth - 1) for _ in range(rnd.randint(0, 3))]
            elif k == "uniqueItems":
                s[k] = rnd.choice([True, False, 1, "x"])
            elif k in ("minContains", "maxContains", "maxItems"):
                s[k] = rnd.choice([0, 1, 2, -1, 1.5, "x"])
            elif k == "multipleOf":
                s[k] = rnd.choice([1, 2, 3, 0, -2, 2.5, True, "x"])
            else:
                s[k] = gen(depth - 1)
        if rnd.random() < 0.3:
            s["$schema"] = rnd.choice(
                ["http://json-schema.org/draft-04/schema#", "http://json-schema.org/draft-07/schema#"]
            )
        return s

    compiled = refused = 0
    for _ in range(2000):
        try:
            strict_schema_to_grammar(gen(3))
            compiled += 1
        except SchemaError:
            refused += 1
    assert compiled > 100 and refused > 100, (compiled, refused)


def test_modes_of_json_schema_to_grammar():
    schema = {"type": "object", "properties": {"a": {"type": "integer", "minimum": 1}}}
    default, warnings = json_schema_to_grammar(schema)
    assert json_schema_to_grammar(schema, mode="llama.cpp") == (default, warnings)
    strict, w = json_schema_to_grammar(schema, mode="strict", strict_style="exact")
    assert w == [] and strict == strict_schema_to_grammar(schema) and strict != default
    rules, text, _ = json_schema_to_rules(schema, mode="strict", strict_style="exact")
    assert text == strict
    canonical, _ = json_schema_to_grammar(schema, mode="strict")  # the default style: canonical
    assert canonical == strict_schema_to_grammar(schema, style="canonical") != strict
    with pytest.raises(ValueError):
        json_schema_to_grammar(schema, mode="loose")
    with pytest.raises(SchemaError) as info:
        json_schema_to_grammar({"type": "array", "uniqueItems": True}, mode="strict")
    assert info.value.keyword == "uniqueItems"


def test_cli_convert_strict(tmp_path, capsys):
    from bankml.cli import main

    path = tmp_path / "s.json"
    path.write_text(json.dumps({"type": "integer", "minimum": 2}))
    assert main(["convert", "--strict", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("root ::=") and accepts(out, "2") and not accepts(out, "1")
    path.write_text(json.dumps({"type": "array", "uniqueItems": True}))
    assert main(["convert", "--strict", str(path)]) == 1
    assert "uniqueItems" in capsys.readouterr().err
    assert main(["convert", "--strict", "--lenient", "uniqueItems", str(path)]) == 0


# --- numbers: the digit automaton against jsonschema ----------------------------------------------

finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
small_dec = st.decimals(min_value=-1000, max_value=1000, places=3, allow_nan=False).map(float)
bound = st.one_of(st.integers(-(10**6), 10**6), small_dec, finite)
number = st.one_of(st.integers(-(10**7), 10**7), small_dec, finite, st.integers(-(10**25), 10**25))


@settings(
    max_examples=150, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(
    kind=st.sampled_from(["number", "integer"]),
    bounds=st.dictionaries(
        st.sampled_from(["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"]), bound, max_size=2
    ),
    mult=st.one_of(st.none(), st.integers(1, 12)),
    values=st.lists(number, min_size=4, max_size=12),
)
def test_numbers_exact(kind, bounds, mult, values):
    schema = dict(bounds, type=kind)
    if mult is not None:
        schema["multipleOf"] = mult
    near = []
    for b in bounds.values():
        near += [b, b + 1, b - 1]
        if isinstance(b, float) and b == b:
            near += [int(b) if abs(b) < 1e300 else 0]
    # the policy: no exponent texts (json.dumps(1e16) == "1e+16") for integers or beside multipleOf
    vals = [
        v
        for v in values + near
        if isinstance(v, int) or (kind == "number" and mult is None) or abs(v) < 1e16 or "e" not in repr(v)
    ]
    check_instances(schema, vals)


# --- random schemas and instances -----------------------------------------------------------------
# The generator lives in tests/schema/strict_fuzz.py (every keyword strict mode enforces, one hypothesis run per
# keyword family); bench/strict_fuzz.py runs it at any size. The suite runs this slice.

# the keywords the slice must have drawn (the generator's families), and the refusals it must have met
SLICE_KEYWORDS = {
    "format", "multipleOf", "uniqueItems", "contains", "minContains", "maxContains", "dependentRequired",
    "dependentSchemas", "$anchor", "$id", "$ref", "$defs", "$schema", "if", "then", "else", "not", "anyOf", "allOf",
    "oneOf", "prefixItems", "patternProperties", "propertyNames", "pattern", "const", "enum",
    "unevaluatedProperties", "unevaluatedItems",
}  # fmt: skip


def test_random_schemas():
    """The property run's slice (seed 0, 250 examples over the keyword families of strict_fuzz.py): every
    instance's verdict is jsonschema's, by bytes and, on a tenth of the schemas, by tokens. Its counts are asserted
    here and held by the gate (tests/oracle_minimums.json): a generator that drew only refused schemas, only
    valid instances, or no longer drew a keyword, fails."""
    counts, disagreements = strict_fuzz.run(0, 250)
    assert disagreements == [], disagreements[:3]
    drawn = {k[len("keyword: ") :] for k in counts if k.startswith("keyword: ")}
    assert SLICE_KEYWORDS <= drawn, SLICE_KEYWORDS - drawn
    assert counts["examples"] >= 250
    assert counts["compiled"] >= counts["examples"] * 3 // 4, dict(counts)
    assert counts["valid"] >= 500 and counts["invalid"] >= 500, dict(counts)
    assert counts["refused"] > 0 and counts["token walks"] > 0, dict(counts)
    ORACLE_STATS["strict random schemas compiled (hypothesis)"] += counts["compiled"]
    ORACLE_STATS["strict verdicts equal to jsonschema's on random schemas: valid"] += counts["valid"]
    ORACLE_STATS["strict verdicts equal to jsonschema's on random schemas: invalid"] += counts["invalid"]


# --- MaskBench-shaped files ----------------------------------------------------------------------

MASKBENCH = sorted((ROOT / "bench" / "data" / "maskbench").glob("*.json"))
# the MaskBench files strict mode is expected to refuse: file name -> the keyword its refusal names. A refusal
# not listed fails, and so does a listed file that compiles (the list is then out of date).
EXPECTED_REFUSALS: dict = {}


def test_maskbench_files_are_there():
    assert len(MASKBENCH) >= 4, MASKBENCH


@pytest.mark.parametrize("path", MASKBENCH, ids=[p.name for p in MASKBENCH])
def test_maskbench_files(path):
    case = json.loads(path.read_text(encoding="utf-8"))
    schema = case["schema"]
    gbnf, err = compile_or_refusal(schema)
    if err is not None or path.name in EXPECTED_REFUSALS:
        got = None if err is None else err.keyword
        assert got == EXPECTED_REFUSALS.get(path.name), "%s: strict mode refused it (%s), expected %s" % (
            path.name,
            err,
            EXPECTED_REFUSALS.get(path.name, "to compile it"),
        )
        ORACLE_STATS["strict MaskBench files refused as expected"] += 1
        return
    rules = Rules.parse(gbnf, vocab=real_vocab()[0])
    for t in case["tests"]:
        text = text_of(t["data"])
        assert oracle(schema, t["data"]) == t["valid"], "the file's label disagrees with jsonschema"
        assert accepts(gbnf, text) == t["valid"], text
        assert accepts_tokens(rules, text) == t["valid"], text
        ORACLE_STATS["strict verdicts equal to jsonschema's on the project's MaskBench files"] += 1


# -- strict_schema_rules: the rules to embed in a bigger grammar


def test_strict_schema_rules_prefix_pointer_and_refusal():
    schema = {
        "type": "object",
        "properties": {"a/b~c%20": {"$ref": "#/$defs/small"}, "s": {"type": "string", "maxLength": 2}},
        "$defs": {"small": {"type": "integer", "maximum": 3}},
    }
    rules = strict_schema_rules(schema, "tool-x-schema")
    assert rules["tool-x-schema"].endswith(" tool-x-schema-space")
    assert all(name == "tool-x-schema" or name.startswith("tool-x-schema-") for name in rules)
    # embedded beside rules of the same local names (space, string, value...) of another grammar
    other = {"space": '" "', "string": '"s"', "value": '"v"', "root": "tool-x-schema"}
    gbnf = "\n".join("%s ::= %s" % kv for kv in {**other, **rules}.items()) + "\n"
    whole = strict_schema_to_grammar(schema)
    for text in ['{"a/b~c%20": 3}', '{"a/b~c%20": 4}', '{"s": "xyz"}', '{"s": "xy", "z": [1]}', "{}"]:
        assert accepts(gbnf, text) == accepts(whole, text) == oracle(schema, json.loads(text)), text
    # one node of the document (a tool's parameter), its $ref resolved in the whole document
    one = strict_schema_rules(schema, "p", pointer="#/properties/a~1b~0c%20")
    gbnf = "root ::= p\n" + "\n".join("%s ::= %s" % kv for kv in one.items()) + "\n"
    assert accepts(gbnf, "3") and not accepts(gbnf, "4") and not accepts(gbnf, '"x"')
    with pytest.raises(SchemaError) as e:
        strict_schema_rules(schema, "p", pointer="#/properties/missing")
    assert e.value.keyword == "schema" and e.value.pointer == "#/properties/missing"
    with pytest.raises(SchemaError) as e:
        strict_schema_rules(
            {"properties": {"t": {"uniqueItems": True, "type": "array"}}}, "p", pointer="#/properties/t"
        )
    assert e.value.keyword == "uniqueItems" and e.value.pointer == "#/properties/t/uniqueItems"
    with pytest.raises(ValueError, match="rule name"):
        strict_schema_rules(schema, "bad name")


# two oneOf branches, objects with the same five required keys: "b" proves them disjoint (its enums differ), the
# others lead back into the oneOf being expanded (a $ref cycle refusal). Which key is checked first decided the
# outcome while the keys were taken in a set's order: refused under most PYTHONHASHSEED values, converted under
# 2 and 6. The outcome must be the same in every process.
_SEED_SCHEMA = {
    "$defs": {
        "e": {
            "oneOf": [
                {
                    "type": "object",
                    "properties": {**{k: {"$ref": "#/$defs/e"} for k in "aceg"}, "b": {"enum": [v]}},
                    "required": [*"aceg", "b"],
                }
                for v in ("x", "y")
            ]
        }
    },
    "$ref": "#/$defs/e",
}


def test_strict_outcome_does_not_depend_on_the_hash_seed():
    code = (
        "import json, sys\n"
        "from bankml import SchemaError, json_schema_to_grammar\n"
        "try:\n"
        "    print('grammar', len(json_schema_to_grammar(json.loads(sys.argv[1]), mode='strict')[0]))\n"
        "except SchemaError as e:\n"
        "    print('refused', e.keyword, e.pointer)\n"
    )
    outcomes = set()
    for seed in ("0", "2", "5", "6"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        done = subprocess.run(
            [sys.executable, "-c", code, json.dumps(_SEED_SCHEMA)],
            capture_output=True,
            text=True,
            env=env,
            check=True,
            timeout=HANG_SECONDS,
        )
        outcomes.add(done.stdout.strip())
    assert len(outcomes) == 1, outcomes


RUN_PATTERNS = [r"^[\w\-]+$", r"^\d{2,4}$", r"^[a-z]*$", r"^[a-c]?$", r"^[a-z]+$", r"^[\s]+$", r"^[a-z]{3}$"]
RUN_STRINGS = [
    "",
    "a",
    "ab",
    "abc",
    "abcd",
    "abcde",
    "ab\n",
    "abc\n",
    "\n",
    "a-b_",
    "12",
    "1234",
    "12345",
    "\u0663\u0664",
    "x y",
    "ab\n\n",
    " \n",
    "\t\t",
    "é",
    "abc\r",
]


@pytest.mark.parametrize("pattern", RUN_PATTERNS)
@pytest.mark.parametrize("bounds", [(None, None), (2, None), (None, 3), (1, 4), (3, 3), (0, 0)])
def test_pattern_class_runs(pattern, bounds):
    """A pattern that is one character class repeated (its strings are runs of that class, optionally with
    Python's final newline before $) is compiled as a repetition with the length bounds folded in, instead of
    a product automaton: verdicts as jsonschema's, every JSON spelling of each character taken."""
    schema = {"type": "string", "pattern": pattern}
    if bounds[0] is not None:
        schema["minLength"] = bounds[0]
    if bounds[1] is not None:
        schema["maxLength"] = bounds[1]
    gbnf = check_instances(schema, RUN_STRINGS)
    assert gbnf is not None
    if pattern != r"^[a-z]+$":
        assert "strc" in gbnf, "the class-run path was not taken"
    for s in RUN_STRINGS:
        spelled = json.dumps(s)  # ASCII escapes (\n, \u0663): the same decoded value, the same verdict
        assert accepts(gbnf, spelled) == oracle(schema, s), (schema, spelled)


def test_value_keys_match_jsonschema_equality():
    """Enums are intersected, deduplicated and searched through hashed keys (``_vkey``): two values share a key
    exactly when jsonschema's equality holds (1 == 1.0, True != 1, key order irrelevant, NaN equal to nothing)."""
    from jsonschema._utils import equal

    from bankml.schema.strict.values import equal as _equal
    from bankml.schema.strict.values import vkey as _vkey

    nan = float("nan")
    values = [
        0,
        0.0,
        -0.0,
        1,
        1.0,
        True,
        False,
        None,
        "1",
        "",
        2**53,
        2**53 + 1,
        float(2**53),
        1e308,
        float("inf"),
        nan,
        [1],
        [1.0],
        [True],
        [1, 2],
        [2, 1],
        [],
        {},
        {"a": 1},
        {"a": 1.0},
        {"a": True},
        {"b": 1},
        {"a": 1, "b": [1, {"c": None}]},
        {"b": [1.0, {"c": None}], "a": 1.0},
        [nan],
        {"a": nan},
        ["a"],
        "a",
    ]
    for a in values:
        for b in values:
            same = _vkey(a) is not None and _vkey(a) == _vkey(b)
            assert same == _equal(a, b), (a, b)
            if "nan" not in json.dumps([a, b]).lower():  # no NaN can be generated: jsonschema's own equality
                assert same == equal(a, b), (a, b)


def test_conversion_changes_no_process_wide_state():
    """A conversion leaves Python's cyclic collector as the caller set it (on or off, also while it runs) and the
    recursion limit as it was, whether it ends in a grammar or a refusal, through either entry point."""
    import gc
    import sys

    from bankml.schema import json_schema_to_grammar
    from bankml.schema.strict import compiler

    seen = []
    real = compiler.Compiler.__init__

    def spy(self, *a, **k):
        seen.append((gc.isenabled(), sys.getrecursionlimit()))
        real(self, *a, **k)

    was, limit = gc.isenabled(), sys.getrecursionlimit()
    compiler.Compiler.__init__ = spy
    try:
        for enabled in (True, False):
            (gc.enable if enabled else gc.disable)()
            strict_schema_to_grammar({"type": "integer"})
            json_schema_to_grammar({"type": "integer"}, mode="strict")
            with pytest.raises(SchemaError):
                json_schema_to_grammar({"type": "array", "uniqueItems": True}, mode="strict")
            assert seen == [(enabled, limit)] * 3 and gc.isenabled() is enabled, seen
            assert sys.getrecursionlimit() == limit
            seen.clear()
    finally:
        compiler.Compiler.__init__ = real
        (gc.enable if was else gc.disable)()
