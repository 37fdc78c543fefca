"""Strict mode's canonical style (``style="canonical"``, bankml.schema.strict): the language a model writes in.

Every text a canonical grammar lets through is (a) a text of the exact grammar of the same schema (canonical is
a subset of exact), (b) valid for the schema (the spec oracle, jsonschema as the JSON-Schema-Test-Suite reads
it), (c) canonical: no whitespace, each string as ``json.dumps(s, ensure_ascii=False)`` writes it (raw but for
the escapes JSON requires), numbers with no exponent (integers with no fraction), and the listed keys of an
object in its schema's ``properties`` order before any other key. The texts come from random walks over the
grammars (tests/grammar_walk.py) of bench/data's schemas and of hypothesis-drawn ones.
"""

import json
import pathlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bankml import json_schema_to_grammar
from bankml.errors import SchemaError
from bankml.schema.grammar import StrictGrammarBuilder
from bankml.schema.strict import strict_schema_rules, strict_schema_to_grammar

from .. import spec_oracle
from ..grammar_walk import random_texts
from ..oracle_support import ORACLE_STATS
from .strict_fuzz import accepts

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
BENCH = json.loads((ROOT / "bench" / "data" / "schemas.json").read_text())["schemas"]


class _Num:
    """A number as written (parse_float/parse_int keep the text)."""

    def __init__(self, text):
        self.text = text


class _Obj(list):
    """An object's members in order."""


def _dump(v):
    """The canonical text of a value parsed with _Num numbers and ordered pairs (no whitespace, json.dumps's
    strings, the numbers as written)."""
    if isinstance(v, _Num):
        return v.text
    if isinstance(v, _Obj):
        return "{" + ",".join(json.dumps(k, ensure_ascii=False) + ":" + _dump(x) for k, x in v) + "}"
    if isinstance(v, list):
        return "[" + ",".join(_dump(x) for x in v) + "]"
    return json.dumps(v, ensure_ascii=False)


def _parse_keeping_text(text):
    return json.loads(
        text,
        parse_float=_Num,
        parse_int=_Num,
        parse_constant=lambda c: pytest.fail("not JSON: %s" % c),
        object_pairs_hook=_Obj,
    )


def _resolve(schema, root):
    """A schema object, its local ``$ref``s followed (``#/...`` pointers only)."""
    seen = 0
    while isinstance(schema, dict) and isinstance(schema.get("$ref"), str) and schema["$ref"].startswith("#"):
        node = root
        for part in schema["$ref"][1:].split("/")[1:]:
            node = node[part.replace("~1", "/").replace("~0", "~")]
        schema, seen = node, seen + 1
        assert seen < 50
    return schema


def check_key_order(value, schema, root, path="$"):
    """The listed keys of each object whose schema is a plain object schema come in ``properties`` order, before
    any other key (objects under anyOf/oneOf/allOf are not followed)."""
    schema = _resolve(schema, root)
    if not isinstance(schema, dict):
        return
    if isinstance(value, _Obj):
        props = schema.get("properties")
        if isinstance(props, dict) and not any(k in schema for k in ("allOf", "anyOf", "oneOf", "$ref")):
            order = list(props)
            keys = [k for k, _ in value]
            listed = [k for k in keys if k in props]
            assert listed == sorted(listed, key=order.index), (path, keys, order)
            assert keys[: len(listed)] == listed, ("an extra key before a listed one", path, keys)
            for k, x in value:
                if k in props:
                    check_key_order(x, props[k], root, path + "." + k)
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            for i, x in enumerate(value):
                check_key_order(x, items, root, "%s[%d]" % (path, i))


def check_canonical(text, schema, exact):
    """(a)-(c) of the module docstring for one text of the canonical grammar of schema (exact: its exact grammar)."""
    assert accepts(exact, text), ("a canonical text the exact grammar refuses", text)
    value = json.loads(text)
    assert spec_oracle.is_valid(schema, value), ("a canonical text the schema refuses", schema, text)
    kept = _parse_keeping_text(text)
    assert _dump(kept) == text, ("not canonical (whitespace or string escapes)", text)
    for token in _numbers(kept):
        assert "e" not in token.lower(), ("a number with an exponent", text)
    check_key_order(kept, schema, schema)


def _numbers(v):
    if isinstance(v, _Num):
        yield v.text
    elif isinstance(v, _Obj):
        for _, x in v:
            yield from _numbers(x)
    elif isinstance(v, list):
        for x in v:
            yield from _numbers(x)


def canonical_texts(schema, n, seed=0, lenient=()):
    """Up to n random texts of the canonical grammar of schema, each checked (check_canonical) against the exact
    grammar (with ``lenient``, for a schema exact mode refuses)."""
    canonical = strict_schema_to_grammar(schema, style="canonical")
    exact = strict_schema_to_grammar(schema, style="exact", lenient=lenient)
    texts = [t.decode("utf-8") for t in random_texts(canonical, n, seed=seed, max_bytes=1500)]
    for text in texts:
        check_canonical(text, schema, exact)
    ORACLE_STATS["strict canonical style: random texts exact, valid and canonical"] += len(texts)
    return texts


@pytest.mark.parametrize("entry", BENCH, ids=[e["name"] for e in BENCH])
def test_bench_schemas_canonical_texts(entry):
    texts = canonical_texts(entry["schema"], 12, seed=len(entry["name"]))
    assert texts, "no walk of %s ended" % entry["name"]


@pytest.mark.parametrize("entry", BENCH, ids=[e["name"] for e in BENCH])
def test_bench_instances_in_canonical_form(entry):
    """Each bench instance, written canonically (its keys in schema order: it was written so), is a text of the
    canonical grammar; its llama.cpp-style spelling (json.dumps's spaces) is not, and is a text of the exact one."""
    canonical = strict_schema_to_grammar(entry["schema"], style="canonical")
    exact = strict_schema_to_grammar(entry["schema"])
    instance = json.loads(entry["instance"]) if isinstance(entry["instance"], str) else entry["instance"]
    compact = json.dumps(instance, ensure_ascii=False, separators=(",", ":"))
    spaced = json.dumps(instance, ensure_ascii=False)
    assert accepts(exact, spaced) and accepts(exact, compact)
    if not _has_float_exponent(compact):
        assert accepts(canonical, compact), compact
    assert not accepts(canonical, spaced)


def _has_float_exponent(text):
    return any("e" in t.lower() for t in _numbers(_parse_keeping_text(text)))


KEYED = {
    "type": "object",
    "properties": {
        "b": {"type": "string"},
        "a": {"type": "integer"},
        "c": {"type": "boolean"},
    },
    "required": ["a"],
    "additionalProperties": {"type": "number"},
}


@pytest.mark.parametrize(
    "text, exact, canonical",
    [
        ('{"a":1}', True, True),
        ('{"b":"x","a":1}', True, True),
        ('{"a":1,"b":"x"}', True, False),  # out of schema order
        ('{"b":"x","a":1,"c":true,"z":1.5}', True, True),
        ('{"z":1.5,"a":1}', True, False),  # an extra key before a listed one
        ('{"\\u0061":1}', True, False),  # an escaped key
        ('{"a": 1}', True, False),  # whitespace
        ('{"a":1.0}', True, False),  # an integer with a fraction
        ('{"a":1,"z":1e2}', True, False),  # an exponent
        ('{"a":1,"z":100}', True, True),
        ('{"b":"\\u002d","a":1}', True, False),  # an escape JSON does not require
        ('{"b":"\\/","a":1}', True, False),
        ('{"b":"-\\"\\\\\\n\\u0001","a":1}', True, True),  # the escapes JSON requires, as json.dumps writes them
        ('{"b":"\\u000A","a":1}', True, False),  # \n has a short escape
        ('{"b":"\\u001F","a":1}', True, False),  # lowercase hex
        ('{"b":"\\u001f","a":1}', True, True),
        ('{"b":"é😀","a":1}', True, True),
        ('{"b":"\\u00e9","a":1}', True, False),
        ('{"a":1,"a":2}', False, False),
    ],
)
def test_canonical_spelling(text, exact, canonical):
    assert accepts(strict_schema_to_grammar(KEYED), text) is exact
    assert accepts(strict_schema_to_grammar(KEYED, style="canonical"), text) is canonical
    if canonical:
        check_canonical(text, KEYED, strict_schema_to_grammar(KEYED))


def test_canonical_objects_need_no_key_sets():
    """Twenty optional keys: exact mode writes one rule per set of keys written (or refuses), the canonical
    style one rule per key."""
    schema = {"type": "object", "properties": {"k%d" % i: {"type": "integer"} for i in range(20)}, "minProperties": 1}
    with pytest.raises(SchemaError) as e:
        strict_schema_to_grammar(schema)
    assert e.value.keyword == "properties"
    canonical = strict_schema_to_grammar(schema, style="canonical")
    assert canonical.count("\n") < 200
    assert accepts(canonical, '{"k3":1,"k19":2}') and not accepts(canonical, '{"k19":2,"k3":1}')
    assert not accepts(canonical, "{}")  # minProperties
    # exact mode takes them in the schema's order only when told (lenient), every spelling of each
    assert len(canonical_texts(schema, 10, lenient=["properties"])) >= 5


@pytest.mark.parametrize(
    "schema, text, canonical",
    [
        ({"type": "integer", "const": 5}, "5", True),
        ({"type": "integer", "const": 5}, "5.0", False),
        ({"type": "number", "const": 1e-05}, "1e-05", True),  # exact mode's one text of it: json.dumps's
        ({"type": "number", "const": 2.5}, "2.5", True),
        ({"type": "number", "const": 2.5}, "2.50", False),
        ({"type": "number", "minimum": 1e20}, "100000000000000000000", True),
        ({"type": "number", "minimum": 1e20}, "1e+20", False),
        ({"type": "number", "multipleOf": 3}, "6", True),
        ({"type": "number", "multipleOf": 3}, "6.0", True),  # a plain form, if not the shortest
        ({"enum": [{"b": 1, "a": 2}]}, '{"b":1,"a":2}', True),
        ({"enum": [{"b": 1, "a": 2}]}, '{"a":2,"b":1}', False),
        ({"type": "string", "format": "date"}, '"2024-02-29"', True),
        ({"type": "string", "format": "date"}, '"2024\\u002d02-29"', False),
        ({"type": "string", "pattern": "^[a-z\\n]+$"}, '"a\\nb"', True),
        ({"type": "string", "pattern": "^[a-z\\n]+$"}, '"a\\u000ab"', False),
        ({"type": "object", "additionalProperties": False, "patternProperties": {"^x": {}}}, '{"x\\"":1}', True),
        ({"type": "object", "additionalProperties": False, "patternProperties": {"^x": {}}}, '{"\\u0078":1}', False),
    ],
)
def test_canonical_forms(schema, text, canonical):
    exact = strict_schema_to_grammar(schema)
    assert accepts(exact, text)
    assert accepts(strict_schema_to_grammar(schema, style="canonical"), text) is canonical


@pytest.mark.parametrize(
    "call",
    [
        lambda: strict_schema_to_grammar({}, style="pretty"),
        lambda: strict_schema_rules({}, "x", style="Canonical"),
        lambda: json_schema_to_grammar({}, mode="strict", strict_style="compact"),
    ],
)
def test_bad_style_names_the_option(call):
    with pytest.raises(ValueError, match=r"(style|strict_style) must be 'canonical' or 'exact', not '"):
        call()


def test_style_outside_strict_mode_is_an_error():
    with pytest.raises(ValueError, match="strict_style applies to mode='strict' only"):
        json_schema_to_grammar({}, strict_style="exact")


def test_generation_surfaces_default_to_canonical():
    """json_schema_to_grammar's strict mode and the chat layer's StrictGrammarBuilder write the canonical style
    unless told ``exact``; the compiler itself (strict_schema_to_grammar) is exact by default."""
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    canonical = strict_schema_to_grammar(schema, style="canonical")
    exact = strict_schema_to_grammar(schema)
    assert json_schema_to_grammar(schema, mode="strict")[0] == canonical
    assert json_schema_to_grammar(schema, mode="strict", strict_style="exact")[0] == exact
    assert StrictGrammarBuilder(None).style == "canonical"


_LEAF = st.one_of(
    st.just({"type": "string"}),
    st.builds(
        lambda a, b: {"type": "string", "minLength": a, "maxLength": a + b}, st.integers(0, 3), st.integers(0, 4)
    ),
    st.sampled_from(
        [
            {"type": "string", "pattern": '^[a-z"\\\\]{1,5}$'},
            {"type": "string", "format": "date"},
            {"type": "string", "enum": ['a"b', "é", "\n"]},
            {"type": "integer", "minimum": -5, "maximum": 1000},
            {"type": "number", "exclusiveMinimum": 0.5, "maximum": 1e3},
            {"type": "number", "multipleOf": 0.5},
            {"type": "number"},
            {"type": "boolean"},
            {"type": "null"},
            {"const": {"y": [1, "z"], "x": None}},
            {"enum": [1.5, 2, "two"]},
            True,
        ]
    ),
)
_KEYS = st.sampled_from(["a", "b", "zeta", "é", 'k"q', "x-y", "\\"])


def _objects(children):
    return st.builds(
        lambda props, req, extra, maxp: {
            "type": "object",
            "properties": dict(props),
            "required": [k for k, _ in props][:req],
            **({"additionalProperties": extra} if extra is not None else {}),
            **({"maxProperties": maxp} if maxp is not None else {}),
        },
        st.lists(st.tuples(_KEYS, children), max_size=5, unique_by=lambda kv: kv[0]),
        st.integers(0, 3),
        st.sampled_from([None, False, {"type": "integer"}]),
        st.sampled_from([None, None, 3]),
    )


_SCHEMAS = st.recursive(
    _LEAF,
    lambda children: st.one_of(
        _objects(children),
        st.builds(
            lambda it, lo: {"type": "array", "items": it, "minItems": lo, "maxItems": lo + 2},
            children,
            st.integers(0, 2),
        ),
        st.builds(lambda a, b: {"anyOf": [a, b]}, children, children),
    ),
    max_leaves=6,
)


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(_SCHEMAS)
def test_random_schemas_canonical_texts(schema):
    try:
        strict_schema_to_grammar(schema, style="canonical")
    except SchemaError as e:
        # the canonical style refuses only what exact mode refuses
        with pytest.raises(SchemaError):
            strict_schema_to_grammar(schema)
        assert e.keyword
        return
    canonical_texts(schema, 6, seed=len(json.dumps(schema)))
