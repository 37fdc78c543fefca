"""Strict mode's references beyond one document: the caller's ``registry`` of other documents (remote ``$ref``,
never fetched) and the dynamic scope (``$dynamicRef`` whose target depends on the path, 2019-09's
``$recursiveRef``), each verdict checked against python-jsonschema given the same documents.

The suite's own groups (tests/schema/test_jsts.py) cover the specification's cases; these are hand-made ones the
suite does not hold: a registry document that refers back into the registry, a scope that changes twice on one
path, and the errors of a bad registry.
"""

from __future__ import annotations

import json

import jsonschema
import pytest
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from bankml import json_schema_to_grammar
from bankml.errors import SchemaError
from bankml.schema.strict import strict_schema_rules

from .strict_fuzz import accepts

LIST = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://example.com/list",
    "type": "array",
    "items": {"$dynamicRef": "#leaf"},
    "$defs": {"leaf": {"$dynamicAnchor": "leaf"}},
}
DOCS = {
    "https://example.com/list": LIST,
    "https://example.com/defs.json": {
        "$defs": {
            "small": {"type": "integer", "maximum": 9},
            "pair": {"type": "array", "items": {"$ref": "#/$defs/small"}},
        }
    },
}


def _accepts(grammar, value):
    return accepts(grammar, json.dumps(value))


def _oracle(schema, docs, value):
    registry = Registry().with_resources(
        (uri, Resource.from_contents(doc, default_specification=DRAFT202012)) for uri, doc in docs.items()
    )
    cls = jsonschema.validators.validator_for(schema)
    return cls(schema, registry=registry).is_valid(value)


def _agree(schema, docs, values):
    grammar, _ = json_schema_to_grammar(schema, mode="strict", strict_style="exact", registry=docs)
    for value in values:
        assert _accepts(grammar, value) == _oracle(schema, docs, value), value


def test_remote_ref_into_a_registry_document_that_refers_inside_itself():
    schema = {"type": "object", "properties": {"p": {"$ref": "https://example.com/defs.json#/$defs/pair"}}}
    _agree(schema, DOCS, [{"p": [1, 9]}, {"p": [10]}, {"p": ["a"]}, {}, {"p": 3}])


def test_the_dynamic_scope_decides_per_path():
    # two paths reach the same $dynamicRef: through "ints" the leaf is an integer, through "strs" a string, and
    # the list document's own leaf (anything) where neither wraps it
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://example.com/main",
        "type": "object",
        "properties": {"i": {"$ref": "ints"}, "s": {"$ref": "strs"}, "any": {"$ref": "list"}},
        "$defs": {
            "ints": {"$id": "ints", "$ref": "list", "$defs": {"leaf": {"$dynamicAnchor": "leaf", "type": "integer"}}},
            "strs": {"$id": "strs", "$ref": "list", "$defs": {"leaf": {"$dynamicAnchor": "leaf", "type": "string"}}},
        },
    }
    values = [
        {"i": [1, 2], "s": ["a"]},
        {"i": ["a"]},
        {"s": [1]},
        {"any": [1, "a", None]},
        {"i": [1], "s": ["b"], "any": [[]]},
    ]
    _agree(schema, DOCS, values)


def test_recursive_ref_follows_the_outermost_anchor():
    tree = {
        "$schema": "https://json-schema.org/draft/2019-09/schema",
        "$id": "https://example.com/tree",
        "$recursiveAnchor": True,
        "type": "object",
        "properties": {"kids": {"type": "array", "items": {"$recursiveRef": "#"}}},
    }
    strict_tree = {
        "$schema": "https://json-schema.org/draft/2019-09/schema",
        "$id": "https://example.com/strict",
        "$recursiveAnchor": True,
        "$ref": "tree",
        "unevaluatedProperties": False,
    }
    docs = {"https://example.com/tree": tree}
    grammar, _ = json_schema_to_grammar(strict_tree, mode="strict", strict_style="exact", registry=docs)
    for value in [{"kids": [{"kids": []}]}, {"kids": [{"x": 1}]}, {"x": 1}, {"kids": [{"kids": [{"y": 2}]}]}]:
        registry = Registry().with_resource("https://example.com/tree", Resource.from_contents(tree))
        expected = jsonschema.Draft201909Validator(strict_tree, registry=registry).is_valid(value)
        assert _accepts(grammar, value) == expected, value


def test_an_unknown_remote_is_refused_naming_keyword_and_pointer():
    schema = {"properties": {"a": {"$ref": "https://example.com/nowhere.json"}}}
    with pytest.raises(SchemaError) as e:
        json_schema_to_grammar(schema, mode="strict", registry=DOCS)
    assert (e.value.keyword, e.value.pointer) == ("$ref", "#/properties/a/$ref")
    assert "nothing is fetched" in str(e.value)


def test_a_registry_document_is_read_when_a_reference_names_it():
    docs = {"https://example.com/p": {"type": "string", "pattern": "(?<=a)b"}, **DOCS}
    grammar, _ = json_schema_to_grammar(
        {"$ref": "https://example.com/defs.json#/$defs/small"}, mode="strict", registry=docs
    )
    assert _accepts(grammar, 3)  # the unnamed document's pattern (a lookbehind, refused) is never read
    with pytest.raises(SchemaError) as e:
        json_schema_to_grammar({"$ref": "https://example.com/p"}, mode="strict", registry=docs)
    assert (e.value.keyword, e.value.pointer) == ("pattern", "https://example.com/p#/pattern")


def test_a_registry_document_of_another_draft_is_refused():
    docs = {"https://example.com/old": {"$schema": "http://json-schema.org/draft-07/schema#", "type": "string"}}
    with pytest.raises(SchemaError) as e:
        json_schema_to_grammar({"$ref": "https://example.com/old"}, mode="strict", registry=docs)
    assert (e.value.keyword, e.value.pointer) == ("$ref", "#/$ref")


@pytest.mark.parametrize(
    "registry,message",
    [
        ([("https://example.com/a", {})], "must map URIs"),
        ({"a.json": {}}, "not an absolute URI"),
        ({"https://example.com/a#x": {}}, "has a fragment"),
        ({"https://example.com/a": 3}, "not an object or a boolean"),
    ],
)
def test_a_bad_registry_is_a_value_error(registry, message):
    with pytest.raises(ValueError, match=message):
        json_schema_to_grammar({"type": "string"}, mode="strict", registry=registry)


def test_the_registry_is_strict_mode_s():
    with pytest.raises(ValueError, match="registry"):
        json_schema_to_grammar({"type": "string"}, registry=DOCS)


def test_strict_schema_rules_take_the_registry():
    rules = strict_schema_rules(
        {"$ref": "https://example.com/defs.json#/$defs/small"}, "small", registry=DOCS, style="exact"
    )
    grammar = "root ::= small\n" + "\n".join("%s ::= %s" % kv for kv in rules.items()) + "\n"
    assert _accepts(grammar, 9) and not _accepts(grammar, 10)
