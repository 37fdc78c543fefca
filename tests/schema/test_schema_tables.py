"""Every case of llama.cpp's tests/test-json-schema-to-grammar.cpp (the pinned llama.cpp's), as data.

tests/data/json_schema_to_grammar_cases.json holds each case's schema, the test's own expectation (the
grammar after the C++ test's trim(), or a failure), and the exact output of the pinned llama.cpp's converter
for it (the grammar, byte for byte, with what it printed to stderr, or its exception message), recorded with
tests/oracle/extract_schema_cases.py --record.
"""

import json
import pathlib
import re

import pytest

from bankml import Rules
from bankml.errors import SchemaError
from bankml.schema.converter import json_schema_to_grammar

DATA = pathlib.Path(__file__).parent.parent / "data"
CASES = json.loads((DATA / "json_schema_to_grammar_cases.json").read_text(encoding="utf-8"))["cases"]


def trim(text):
    text = text.strip(" \n\r\t")
    return re.sub(r"(^|\n)[ \t]+", r"\1", text)


def warning_line(warnings):
    return ("WARNING: JSON schema conversion was incomplete: " + "; ".join(warnings) + "\n") if warnings else ""


def test_all_cases_are_there():
    assert len(CASES) == 81
    assert sum(c["status"] == "FAILURE" for c in CASES) == 3


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_case(case):
    if case["status"] == "FAILURE":
        with pytest.raises(SchemaError) as info:
            json_schema_to_grammar(case["schema"])
        assert str(info.value) == case["error"]
        assert info.value.pointer.startswith("#")
        return
    grammar, warnings = json_schema_to_grammar(case["schema"])
    # the C++ test's own comparison
    assert trim(grammar) == case["expected_trimmed"]
    # byte for byte what the pinned converter printed, warnings included
    assert grammar == case["grammar"]
    assert warning_line(warnings) == case["warning_output"]
    rules = Rules.parse(grammar)
    assert "root" in repr(rules)


def test_parsed_document_recursion():
    # the test's "parsed document" check: a recursive $ref converts (the grammar refers to itself)
    grammar, warnings = json_schema_to_grammar(
        {
            "$ref": "#/$defs/node",
            "$defs": {
                "node": {
                    "type": "object",
                    "properties": {"next": {"$ref": "#/$defs/node"}, "leaf": {}},
                    "additionalProperties": False,
                }
            },
        }
    )
    assert "ref-defs-node-next ::= ref-defs-node\n" in grammar
    Rules.parse(grammar)


_INTEGRATION_FILE = DATA / "grammar_integration_cases.json"
INTEGRATION = [
    c for c in json.loads(_INTEGRATION_FILE.read_text(encoding="utf-8"))["match_cases"] if c.get("kind") == "schema"
]


def test_integration_schemas_are_there():
    assert len(INTEGRATION) == 33


@pytest.mark.parametrize("case", INTEGRATION, ids=[c["id"] for c in INTEGRATION])
def test_integration_schema(case):
    # tests/test-grammar-integration.cpp's test_schema() calls: the grammar the pinned converter gave
    grammar, _ = json_schema_to_grammar(case["schema"])
    assert grammar == case["grammar"]


def test_build_grammar_sub_schema_ref():
    # the test file's "sub-schema $ref" check: build_grammar() on a property node of a parsed document
    from bankml.schema.converter import build_grammar
    from bankml.schema.reader import SchemaDocument

    doc = SchemaDocument(
        {
            "type": "object",
            "properties": {"item": {"$ref": "#/$defs/item"}},
            "$defs": {
                "item": {
                    "type": "object",
                    "properties": {"a": {"type": "string"}},
                    "required": ["a"],
                    "additionalProperties": False,
                }
            },
        }
    )
    grammar = build_grammar(lambda b: b.add_schema("root", doc.root.properties[0][1]))
    assert trim(grammar) == trim("""
        char ::= [^"\\\\\\x7F\\x00-\\x1F] | [\\\\] (["\\\\bfnrt] | "u" [0-9a-fA-F]{4})
        ref-defs-item ::= "{" space ref-defs-item-a-kv space "}"
        ref-defs-item-a-kv ::= "\\"a\\"" space ":" space string
        root ::= ref-defs-item
        space ::= | " " | "\\n"{1,2} [ \\t]{0,20}
        string ::= "\\"" char* "\\""
    """)


def test_build_grammar_rules_and_dotall():
    from bankml.schema.converter import build_grammar

    def cb(b):
        assert b.add_rule("x", '"a"') == "x"
        assert b.add_rule("x", '"a"') == "x"
        assert b.add_rule("x", '"b"') == "x0"
        assert b.add_rule("a b", '"c"') == "a-b"
        b.add_schema("root", {"type": "string", "pattern": "^a.b$"})

    grammar = build_grammar(cb, dotall=True)
    assert "dot ::= [\\U00000000-\\U0010FFFF]\n" in grammar
    assert 'root ::= "\\"" ("a" dot "b") "\\""\n' in grammar
    assert "dot ::= [^\\x0A\\x0D]\n" in build_grammar(lambda b: b.add_schema("p", {"pattern": "^.$"}))


@pytest.mark.parametrize("case", [c for c in CASES if c["status"] == "SUCCESS"], ids=lambda c: c["name"])
def test_build_grammar_root_is_json_schema_to_grammar(case):
    from bankml.schema.converter import build_grammar
    from bankml.schema.reader import SchemaDocument

    doc = SchemaDocument(case["schema"])
    assert build_grammar(lambda b: b.add_schema("root", doc.root)) == case["grammar"]
