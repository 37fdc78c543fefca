"""Fuzzing the JSON schema converter: strategies, the properties, and a long-running harness.

Properties (each example ends in a grammar or a ``SchemaError``, never another exception, a hang or a
blow-up; the conversion limits of ``bankml.schema.limits.SchemaLimits`` keep every example bounded):

* ``check_convert(schema)``: ``json_schema_to_grammar`` gives a grammar (str) and warnings, or SchemaError;
  the same schema as JSON text gives the same answer; a grammar it gives is one llama.cpp's GBNF parser
  reads (``Rules.parse``) or refuses with a GrammarError (repetition caps), never anything else;
* ``check_chat(schema)``: the chat template's grammar (``chat_grammar``) likewise.

The suite runs these with a fixed example budget (tests/schema/test_fuzz_schema.py). For minutes of fuzzing:

    PYTHONPATH=. python -m tests.fuzz.fuzz_schema --minutes 5

replays tests/fuzz/corpus/schema/*.json, then draws examples until the time is up; a failing example is
written to the corpus directory (and printed) so the suite replays it from then on.
"""

import argparse
import json
import pathlib
import sys
import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bankml import GrammarError, Rules, SchemaError, json_schema_to_grammar
from bankml.chat.constraint import chat_grammar

CORPUS = pathlib.Path(__file__).parent / "corpus"

# -- strategies

_NAMES = st.sampled_from(["a", "b", "name", "x-y", "*", "", "é", "k" * 30, "root", "space", "0", "$ref"])
_TYPES = st.sampled_from(["string", "integer", "number", "boolean", "null", "object", "array", "nope"])
_PATTERNS = st.one_of(
    st.sampled_from(
        [
            "^a$",
            "^[a-z]+$",
            "^(ab|c)*$",
            "^a{2,3}$",
            "^\\d{4}-\\d{2}$",
            "^.$",
            "^(?:x|y)?z$",
            "^(a$",
            '^[^"]*$',
            "^a{,}$",
            "^\\w+@\\w+$",
            "a",
            "^é*$",
            "^a{1000000}$",
        ]
    ),
    st.text(alphabet="^$()[]{}|*+?.\\azé0-9,:", max_size=12),
)
_NUMBERS = st.one_of(st.integers(-(2**65), 2**65), st.floats(allow_nan=False, allow_infinity=False))
_JSON = st.recursive(
    st.none() | st.booleans() | _NUMBERS | st.text(max_size=8),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4), c, max_size=3),
    max_leaves=8,
)
_COUNTS = st.one_of(st.integers(0, 5), st.sampled_from([-1, 2**31, 2001, 1.5, "3"]))


def _keyword(child):
    """One schema keyword and its value (child: a strategy for sub-schemas)."""
    return st.one_of(
        st.tuples(st.just("type"), _TYPES | st.lists(_TYPES, max_size=3)),
        st.tuples(st.just("properties"), st.dictionaries(_NAMES, child, max_size=3)),
        st.tuples(st.just("required"), st.lists(_NAMES, max_size=3)),
        st.tuples(st.just("additionalProperties"), st.booleans() | child),
        st.tuples(st.just("items"), child | st.lists(child, max_size=3)),
        st.tuples(st.just("prefixItems"), st.lists(child, max_size=3)),
        st.tuples(st.sampled_from(["minItems", "maxItems", "minLength", "maxLength"]), _COUNTS),
        st.tuples(st.just("pattern"), _PATTERNS),
        st.tuples(st.just("format"), st.sampled_from(["date", "time", "date-time", "uuid", "uuid4", "email", 5])),
        st.tuples(st.just("enum"), st.lists(_JSON, max_size=4)),
        st.tuples(st.just("const"), _JSON),
        st.tuples(st.sampled_from(["anyOf", "oneOf", "allOf"]), st.lists(child, max_size=3)),
        st.tuples(st.sampled_from(["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"]), _NUMBERS),
        st.tuples(
            st.just("$ref"),
            st.sampled_from(["#/$defs/a", "#/$defs/b", "#/properties/a", "#", "#/x/0", "other.json#/a", 5]),
        ),
    )


def _schema_object(child):
    return st.lists(_keyword(child), max_size=4).map(dict)


SCHEMAS = st.recursive(_schema_object(st.just({})), _schema_object, max_leaves=12)
# a document: a schema, maybe with $defs its $refs can reach
DOCUMENTS = st.tuples(SCHEMAS, st.dictionaries(st.sampled_from(["a", "b"]), SCHEMAS, max_size=2)).map(
    lambda sd: dict(sd[0], **({"$defs": sd[1]} if sd[1] else {}))
)


# -- properties


def _parse_or_refuse(grammar):
    try:
        Rules.parse(grammar)
    except GrammarError:
        pass  # llama.cpp's parser refuses some converted grammars too (repetition caps)


def check_convert(schema):
    try:
        grammar, warnings = json_schema_to_grammar(schema)
    except SchemaError as e:
        assert isinstance(e.pointer, str) and e.pointer.startswith("#"), e.pointer
        outcome = ("error", str(e))
    else:
        assert isinstance(grammar, str) and isinstance(warnings, list)
        assert "root ::= " in grammar
        _parse_or_refuse(grammar)
        outcome = ("grammar", grammar, warnings)
    try:
        text = json.dumps(schema, ensure_ascii=False)
    except ValueError:
        return outcome
    try:
        again = json_schema_to_grammar(text)
        assert outcome[0] == "grammar" and again == (outcome[1], outcome[2]), (outcome, again)
    except SchemaError as e:
        assert outcome == ("error", str(e)), (outcome, str(e))
    return outcome


def check_chat(schema):
    if not isinstance(schema, dict) or not schema:
        return None
    try:
        grammar, prompt = chat_grammar(schema, "chatml")
    except SchemaError as e:
        assert str(e).startswith("Unable to generate parser for this template."), str(e)
        return None
    assert prompt == "<|im_start|>assistant\n"
    _parse_or_refuse(grammar)
    return grammar


def corpus_examples():
    for path in sorted((CORPUS / "schema").glob("*.json")):
        yield path.name, path.read_text("utf-8")


def replay_corpus():
    for _name, text in corpus_examples():
        try:
            schema = json.loads(text)
        except ValueError:
            schema = text
        check_convert(schema)
        check_chat(schema)


# -- the long harness


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)
    replay_corpus()
    print(f"corpus: {len(list(corpus_examples()))} schemas replayed", flush=True)
    end = time.monotonic() + 60 * args.minutes
    rounds = 0
    while time.monotonic() < end:

        @settings(
            max_examples=2000, deadline=None, database=None, derandomize=False, suppress_health_check=list(HealthCheck)
        )
        @given(DOCUMENTS)
        def run(schema):
            try:
                check_convert(schema)
                check_chat(schema)
            except BaseException:
                name = "found-%d.json" % (abs(hash(json.dumps(schema, default=str))) % 10**8)
                (CORPUS / "schema" / name).write_text(json.dumps(schema, ensure_ascii=False), "utf-8")
                print(f"failing example saved as tests/fuzz/corpus/schema/{name}", file=sys.stderr)
                raise

        run()
        rounds += 1
        print(f"{rounds * 2000} examples, no failure", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
