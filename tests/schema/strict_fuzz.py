"""The strict compiler's property run: random schemas over every keyword strict mode enforces, random instances
shaped after them (and mutated), each instance's verdict by the compiled grammar against jsonschema's.

Drawn: types, integer and number bounds (exclusive too), ``multipleOf`` on integers and numbers (integral and
fractional divisors: the fractional ones are refused), string lengths, ``pattern``, ``format`` (every format
jsonschema's 2020-12 checker knows: the ones strict mode builds and the ones it refuses), ``enum``, ``const``,
objects with ``properties``, ``required``, ``additionalProperties``, ``patternProperties``, ``propertyNames``,
``minProperties``/``maxProperties``, ``dependentRequired`` and ``dependentSchemas``; arrays with ``items``,
``prefixItems``, ``minItems``/``maxItems``, ``uniqueItems`` (over small finite item sets, compiled, and over
others, refused), ``contains`` with ``minContains``/``maxContains``; ``anyOf``, ``allOf``, ``oneOf``, ``not``,
``if``/``then``/``else``; ``unevaluatedProperties`` and ``unevaluatedItems`` beside those; roots with ``$defs``
named by ``$ref`` through a JSON pointer, an ``$anchor`` or an ``$id``, and a ``$schema`` of draft 7, 2019-09 or
2020-12 (draft 4 and 6 on schemas whose keywords mean the same there).

``run(seed, examples)`` runs it (hypothesis, generation phase only, ``@seed``) and returns the counts: examples,
schemas compiled, refusals by keyword, verdicts (valid / invalid) equal to jsonschema's, token walks on the
llama-bpe vocabulary, and the disagreements (none expected; each with its schema and instance). The suite runs
a slice (tests/schema/test_schema_strict.py: seed 0, 250 examples); ``bench/strict_fuzz.py --seed S
--examples N`` runs a nightly-sized one and prints the counts.

Instances are serialised as MaskBench does (``json.dumps(data, ensure_ascii=False)``). Texts that strict mode's
spelling policy rejects on purpose are not drawn: a float written with an exponent beside ``integer`` or
``multipleOf`` (``json.dumps(1e16)`` is ``1e+16``; bankml.schema.strict's docstring).
"""

from __future__ import annotations

import collections
import json
import pathlib

import jsonschema
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from bankml import Grammar, Rules
from bankml.engine.vocab import Vocab
from bankml.errors import GrammarError, SchemaError
from bankml.schema.strict import strict_schema_to_grammar

from .. import spec_oracle

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
TINY = Vocab([b"x"], [])
FORMAT_CHECKER = jsonschema.Draft202012Validator.FORMAT_CHECKER
PATTERNS = ["^[a-z]+$", "^[0-9]{2,4}$", "x", "^(ab|cd)*$", "[A-Z]", "^\\w+@\\w+$"]
NAMES = ["a", "b", "c", "id", "x-y", "é"]
FORMATS = sorted(FORMAT_CHECKER.checkers)
FORMAT_VALUES = [
    "2024-02-29",
    "2023-02-29",
    "12:30:00Z",
    "12:30:00+01:00",
    "25:00:00Z",
    "2024-02-29T12:30:00Z",
    "2024-02-29 12:30:00",
    "P1D",
    "PT1H30M",
    "P",
    "a@b.c",
    "a@@b",
    "example.com",
    "-bad-.com",
    "192.168.0.1",
    "256.1.1.1",
    "::1",
    "1::2::3",
    "https://example.com/a?b#c",
    "/relative/path",
    "http://ex ample.com",
    "/a/b~0c",
    "a/b",
    "0/a",
    "550e8400-e29b-41d4-a716-446655440000",
    "550e8400e29b41d4a716446655440000",
    "^a+$",
    "(",
    "{x}",
    "",
]
DRAFTS = {
    4: "http://json-schema.org/draft-04/schema#",
    6: "http://json-schema.org/draft-06/schema#",
    7: "http://json-schema.org/draft-07/schema#",
    2019: "https://json-schema.org/draft/2019-09/schema",
    2020: "https://json-schema.org/draft/2020-12/schema",
}


def oracle(schema, value):
    return spec_oracle.is_valid(schema, value)  # jsonschema as the suite reads the spec (ECMA patterns)


def text_of(value):
    return json.dumps(value, ensure_ascii=False)


def accepts(gbnf, text):
    g = Grammar(Rules.parse(gbnf), TINY)
    try:
        g.accept_bytes(text.encode("utf-8"))
    except GrammarError:
        return False
    return g.complete


_VOCAB: dict = {}


def real_vocab():
    if "v" not in _VOCAB:
        v = Vocab.from_gguf(str(ROOT / "tests" / "data" / "ggml-vocab-llama-bpe.gguf"))
        by_piece = {}
        for i, p in enumerate(v.pieces):
            if p and p not in by_piece:
                by_piece[bytes(p)] = i
        _VOCAB["v"] = (v, by_piece, max(len(p) for p in by_piece))
    return _VOCAB["v"]


def accepts_tokens(rules, text):
    """The verdict of a token-by-token walk (the longest piece at each point), each token allowed by the mask."""
    v, by_piece, longest = real_vocab()
    data = text.encode("utf-8")
    g = Grammar(rules, v)
    i = 0
    while i < len(data):
        for n in range(min(longest, len(data) - i), 0, -1):
            t = by_piece.get(data[i : i + n])
            if t is not None:
                break
        else:
            raise AssertionError("no piece for byte %r" % data[i : i + 1])
        if not g.allows(t):
            return False
        g.accept(t)
        i += n
    return g.complete


# --- schemas ----------------------------------------------------------------------------------------------------


def _as_dict(s):
    return s if isinstance(s, dict) else {"allOf": [s]}


def scalars():
    return st.one_of(
        st.builds(lambda t: {"type": t}, st.sampled_from(["null", "boolean", "integer", "number", "string"])),
        st.builds(
            lambda lo, hi: {"type": "integer", "minimum": lo, "maximum": hi}, st.integers(-20, 20), st.integers(-20, 40)
        ),
        st.builds(
            lambda lo, ex: {"type": "number", "exclusiveMinimum": lo, "maximum": ex},
            st.sampled_from([-1.5, 0, 0.25, 3]),
            st.sampled_from([0.5, 10, 1e3]),
        ),
        st.builds(lambda m: {"type": "integer", "multipleOf": m}, st.integers(2, 7)),
        st.builds(
            lambda m, b: dict({"type": "number", "multipleOf": m}, **b),
            st.sampled_from([1, 2, 3, 0.5, 0.25]),
            st.sampled_from([{}, {"minimum": -10}, {"maximum": 30}, {"exclusiveMinimum": 0, "maximum": 20}]),
        ),
        st.builds(
            lambda lo, hi: {"type": "string", "minLength": lo, "maxLength": hi}, st.integers(0, 3), st.integers(0, 6)
        ),
        st.builds(lambda p: {"type": "string", "pattern": p}, st.sampled_from(PATTERNS)),
        st.builds(lambda f: {"type": "string", "format": f}, st.sampled_from(FORMATS)),
        st.builds(lambda f: {"format": f}, st.sampled_from(["date", "ipv4", "uuid", "email"])),
        st.builds(
            lambda vs: {"enum": vs},
            st.lists(
                st.one_of(st.integers(-3, 3), st.sampled_from(["a", "b", ""]), st.booleans(), st.none()),
                min_size=1,
                max_size=4,
            ),
        ),
        st.builds(lambda v: {"const": v}, st.one_of(st.integers(-2, 2), st.sampled_from(["a", "ab"]))),
        st.just(True),
    )


def schemas(depth):
    scalar = scalars()
    if depth <= 0:
        return scalar
    sub = schemas(depth - 1)

    def obj(props, req, add, minp, maxp, pp, deps, names, dreq):
        s = {"type": "object", "properties": props}
        if req:
            s["required"] = req
        if deps:
            s["dependentSchemas"] = deps
        if dreq:
            s["dependentRequired"] = dreq
        if names is not None:
            s["propertyNames"] = names
        if add is not None:
            s["additionalProperties"] = add
        if minp is not None:
            s["minProperties"] = minp
        if maxp is not None:
            s["maxProperties"] = maxp
        if pp:
            s["patternProperties"] = pp
        return s

    objects = st.builds(
        obj,
        st.dictionaries(st.sampled_from(NAMES), sub, max_size=4),
        st.lists(st.sampled_from(NAMES), max_size=2, unique=True),
        st.one_of(st.none(), st.booleans(), sub),
        st.one_of(st.none(), st.integers(0, 2)),
        st.one_of(st.none(), st.integers(1, 4)),
        st.dictionaries(st.sampled_from(["^x", "[0-9]"]), sub, max_size=1),
        st.dictionaries(st.sampled_from(NAMES), sub, max_size=2),
        st.one_of(st.none(), st.sampled_from([{"maxLength": 1}, {"pattern": "^x"}, {"enum": ["a", "b", "x-y"]}])),
        st.dictionaries(st.sampled_from(NAMES), st.lists(st.sampled_from(NAMES), max_size=2, unique=True), max_size=2),
    )

    def arr(items, lo, hi, prefix, contains, bounds, unique):
        s = {"type": "array"}
        if items is not None:
            s["items"] = items
        if lo is not None:
            s["minItems"] = lo
        if hi is not None:
            s["maxItems"] = hi
        if prefix:
            s["prefixItems"] = prefix
        if contains is not None:
            s["contains"] = contains
            s.update(bounds)
        if unique:
            s["uniqueItems"] = True
        return s

    arrays = st.builds(
        arr,
        st.one_of(st.none(), sub, st.just(False)),
        st.one_of(st.none(), st.integers(0, 2)),
        st.one_of(st.none(), st.integers(0, 4)),
        st.lists(sub, max_size=2),
        st.one_of(st.none(), sub),
        st.sampled_from(
            [{}, {"minContains": 2}, {"maxContains": 1}, {"minContains": 0}, {"minContains": 1, "maxContains": 2}]
        ),
        st.booleans(),
    )
    # uniqueItems over a small finite item set: compiled (a rule per set of values taken)
    unique = st.builds(
        lambda vs, hi: {"type": "array", "items": {"enum": vs}, "uniqueItems": True, "maxItems": hi},
        st.lists(
            st.one_of(st.integers(0, 3), st.sampled_from(["a", "b"]), st.booleans()),
            min_size=1,
            max_size=4,
            unique=True,
        ),
        st.integers(0, 4),
    )
    combos = st.one_of(
        st.builds(lambda xs: {"anyOf": xs}, st.lists(sub, min_size=1, max_size=3)),
        st.builds(lambda xs: {"allOf": xs}, st.lists(sub, min_size=1, max_size=2)),
        st.builds(lambda xs: {"oneOf": xs}, st.lists(sub, min_size=1, max_size=3)),
        st.builds(lambda x: {"not": x}, sub),
        st.builds(lambda i, t, e: {"if": i, "then": t, "else": e}, sub, sub, sub),
    )
    return st.one_of(scalar, objects, arrays, unique, combos)


def families(depth):
    """The root strategies the run takes in turn (example i draws from family i mod n), so that every keyword is
    drawn in any slice of a few dozen examples: a general schema, then one family per keyword strict mode
    enforces, the keyword at the root over random subschemas."""
    sub = schemas(depth - 1)
    general = schemas(depth)
    fams = {
        "general": general,
        "format": st.builds(lambda f: {"type": "string", "format": f}, st.sampled_from(FORMATS)),
        "multipleOf": st.builds(
            lambda m, k, b: dict({"type": k, "multipleOf": m}, **b),
            st.sampled_from([1, 2, 3, 7, 0.5, 0.1]),
            st.sampled_from(["integer", "number"]),
            st.sampled_from([{}, {"minimum": -10}, {"maximum": 30}, {"exclusiveMinimum": 0, "maximum": 20}]),
        ),
        "dependentRequired": st.builds(
            lambda props, dreq: {"type": "object", "properties": props, "dependentRequired": dreq},
            st.dictionaries(st.sampled_from(NAMES), sub, max_size=3),
            st.dictionaries(
                st.sampled_from(NAMES),
                st.lists(st.sampled_from(NAMES), min_size=1, max_size=2, unique=True),
                min_size=1,
                max_size=2,
            ),
        ),
        "dependentSchemas": st.builds(
            lambda props, deps: {"type": "object", "properties": props, "dependentSchemas": deps},
            st.dictionaries(st.sampled_from(NAMES), sub, max_size=3),
            st.dictionaries(st.sampled_from(NAMES), sub, min_size=1, max_size=2),
        ),
        "contains": st.builds(
            lambda c, items, b: dict(
                {"type": "array", "contains": c, "maxItems": 5}, **({} if items is None else {"items": items}), **b
            ),
            sub,
            st.one_of(st.none(), sub),
            st.sampled_from(
                [{}, {"minContains": 2}, {"maxContains": 1}, {"minContains": 0}, {"minContains": 1, "maxContains": 2}]
            ),
        ),
        "uniqueItems": st.one_of(
            st.builds(
                lambda vs, hi: {"type": "array", "items": {"enum": vs}, "uniqueItems": True, "maxItems": hi},
                st.lists(
                    st.one_of(st.integers(0, 3), st.sampled_from(["a", "b"]), st.booleans()),
                    min_size=1,
                    max_size=4,
                    unique=True,
                ),
                st.integers(0, 4),
            ),
            st.builds(lambda items: {"type": "array", "items": items, "uniqueItems": True}, sub),
        ),
        "if": st.builds(lambda i, t, e: {"if": i, "then": t, "else": e}, sub, sub, sub),
        "not": st.builds(lambda x: {"not": x}, sub),
        "$ref": st.builds(lambda x, y: {"$defs": {"d": x}, "anyOf": [{"$ref": "#/$defs/d"}, y]}, sub, sub),
        "$anchor": st.builds(
            lambda x, y: {"$defs": {"d": dict(_as_dict(x), **{"$anchor": "dee"})}, "anyOf": [{"$ref": "#dee"}, y]},
            sub,
            sub,
        ),
        "$id": st.builds(
            lambda x, y: {
                "$id": "https://example.com/root.json",
                "$defs": {"d": dict(_as_dict(x), **{"$id": "https://example.com/d.json"})},
                "anyOf": [{"$ref": "d.json"}, y],
            },
            sub,
            sub,
        ),
        "$schema": drafted_schemas(depth),
    }
    fams.update(unevaluated_families(depth))
    return fams


def unevaluated_families(depth):
    """``unevaluatedProperties`` and ``unevaluatedItems`` beside the applicators whose annotations they read: an
    object's or an array's own keywords, then one of anyOf, allOf, oneOf, if (with or without then/else), not,
    dependentSchemas, $ref over random schemas."""
    sub = schemas(depth - 1)
    whole = schemas(depth)
    beside = st.one_of(
        st.builds(lambda xs: {"anyOf": xs}, st.lists(whole, min_size=1, max_size=3)),
        st.builds(lambda xs: {"allOf": xs}, st.lists(whole, min_size=1, max_size=2)),
        st.builds(lambda xs: {"oneOf": xs}, st.lists(whole, min_size=1, max_size=3)),
        st.builds(lambda i, t, e: {"if": i, "then": t, "else": e}, whole, whole, whole),
        st.builds(lambda i, t: {"if": i, "then": t}, whole, whole),
        st.builds(lambda i: {"if": i}, whole),
        st.builds(lambda x: {"not": x}, whole),
        st.builds(
            lambda d: {"dependentSchemas": d}, st.dictionaries(st.sampled_from(NAMES), whole, min_size=1, max_size=2)
        ),
        st.builds(lambda x: {"$defs": {"d": x}, "$ref": "#/$defs/d"}, whole),
    )

    def props(p, pp, b, u, t):
        s = dict({"properties": p, "unevaluatedProperties": u}, **b, **t)
        if pp:
            s["patternProperties"] = pp
        return s

    def items(p, b, u, c, t):
        s = dict({"prefixItems": p, "unevaluatedItems": u}, **b, **t)
        if c is not None:
            s["contains"] = c
        return s

    kind = st.sampled_from([{}, {"type": "object"}, {"type": "array"}])
    return {
        "unevaluatedProperties": st.builds(
            props,
            st.dictionaries(st.sampled_from(NAMES), sub, max_size=2),
            st.dictionaries(st.sampled_from(["^x", "[0-9]"]), sub, max_size=1),
            beside,
            st.one_of(st.just(False), sub),
            kind,
        ),
        "unevaluatedItems": st.builds(
            items, st.lists(sub, max_size=2), beside, st.one_of(st.just(False), sub), st.one_of(st.none(), sub), kind
        ),
    }


def drafted_schemas(depth):
    """A schema with a ``$schema``: draft 7, 2019-09 or 2020-12 on random schemas; draft 4 and 6 on schemas whose
    keywords read the same there (no exclusive bound as a number, no ``const``)."""
    return st.one_of(
        st.builds(
            lambda s, d: dict(_as_dict(s), **{"$schema": DRAFTS[d]}), schemas(depth), st.sampled_from([7, 2019, 2020])
        ),
        st.builds(
            lambda s, d: dict(s, **{"$schema": DRAFTS[d]}),
            st.sampled_from(
                [
                    {"type": "integer", "minimum": 1, "maximum": 5},
                    {"type": "number"},
                    {"type": "string", "maxLength": 2},
                    {"type": "string", "format": "ipv4"},
                    {"enum": [1, 1.0, "a", None]},
                    {"type": ["integer", "null"]},
                ]
            ),
            st.sampled_from([4, 6]),
        ),
    )


# --- instances --------------------------------------------------------------------------------------------------


def candidates(schema, draw, depth=0):
    """A value shaped after the schema (often valid, sometimes not: jsonschema decides)."""
    if not isinstance(schema, dict) or depth > 4:
        return draw(st.one_of(st.none(), st.integers(-3, 3), st.text(max_size=3)))
    for k in ("anyOf", "oneOf", "allOf"):
        if k in schema:
            return candidates(draw(st.sampled_from(schema[k])), draw, depth + 1)
    if "enum" in schema:
        return draw(st.sampled_from(schema["enum"]))
    if "const" in schema:
        return schema["const"]
    if "format" in schema:
        return draw(st.sampled_from(FORMAT_VALUES))
    t = schema.get("type")
    if t == "object":
        out = {}
        for k, sub in schema.get("properties", {}).items():
            if draw(st.booleans()) or k in schema.get("required", []):
                out[k] = candidates(sub, draw, depth + 1)
        if draw(st.integers(0, 3)) == 0:
            out[draw(st.sampled_from(["zz", "x1", "9", "a", "b"]))] = draw(st.integers(0, 2))
        return out
    if t == "array":
        lo = schema.get("minItems", 0)
        n = draw(st.integers(lo, lo + 3))
        prefix = schema.get("prefixItems", [])
        item = schema.get("items", True)
        out = []
        for i in range(n):
            sub = prefix[i] if i < len(prefix) else item
            if "contains" in schema and draw(st.booleans()):
                sub = schema["contains"]
            out.append(candidates(sub, draw, depth + 1))
        return out
    if t == "integer":
        lo, hi = schema.get("minimum", -30), schema.get("maximum", 30)
        v = draw(st.integers(min(lo, hi) - 1, max(lo, hi) + 1))
        return v * schema["multipleOf"] if "multipleOf" in schema and draw(st.booleans()) else v
    if t == "number":
        if "multipleOf" in schema:
            m = schema["multipleOf"]
            return draw(st.sampled_from([m * draw(st.integers(-5, 40)), m * 3 + 0.5, 7, 7.5, -0.0, 1.0]))
        return draw(st.one_of(st.floats(-5, 1005, allow_nan=False), st.integers(-5, 1005)))
    if t == "string":
        if "pattern" in schema:
            return draw(st.sampled_from(["abc", "12", "1234", "abcd", "x", "AB", "a@b", ""]))
        return draw(st.text(max_size=schema.get("maxLength", 4) + 1))
    return draw(st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.text(max_size=2)))


def mutate(value, draw):
    """A value near another: a different type, a key dropped or added, a number moved, an item added."""
    choice = draw(st.integers(0, 5))
    if isinstance(value, dict) and value and choice < 2:
        k = draw(st.sampled_from(sorted(value)))
        v = dict(value)
        if choice == 0:
            del v[k]
        else:
            v[k] = mutate(v[k], draw)
        return v
    if isinstance(value, list) and value and choice < 2:
        return value + [value[0]] if choice == 0 else value[1:]
    if isinstance(value, bool) or value is None:
        return draw(st.sampled_from([0, "null", [], {}]))
    if isinstance(value, (int, float)):
        return draw(st.sampled_from([value + 1, value - 1, -value, str(value), value * 2]))
    if isinstance(value, str):
        return draw(st.sampled_from([value + "x", value[1:], 1, None]))
    return draw(st.sampled_from([1, "a", None, [], {}]))


def _exponent_floats(value):
    if isinstance(value, float):
        return "e" in repr(value)
    if isinstance(value, list):
        return any(_exponent_floats(v) for v in value)
    if isinstance(value, dict):
        return any(_exponent_floats(v) for v in value.values())
    return False


def _policy_excludes(schema, value):
    """An instance whose text strict mode rejects by its spelling policy, on purpose: a float written with an
    exponent where the schema says integer or multipleOf (bankml.schema.strict's docstring)."""
    text = json.dumps(schema)
    return ('"integer"' in text or '"multipleOf"' in text) and _exponent_floats(value)


# --- the run ----------------------------------------------------------------------------------------------------


def check(schema, values, counts, disagreements, walk_tokens):
    """One schema: compiled or refused (a refusal must name its keyword and pointer), each value's verdict."""
    try:
        gbnf = strict_schema_to_grammar(schema)
    except SchemaError as e:
        assert e.keyword and e.pointer and e.pointer.startswith("#"), "a refusal names its keyword and pointer: %s" % e
        counts["refused"] += 1
        counts["refused: " + e.keyword] += 1
        return
    counts["compiled"] += 1
    for value in values:
        expected = oracle(schema, value)
        got = accepts(gbnf, text_of(value))
        counts["valid" if expected else "invalid"] += 1
        if got != expected:
            disagreements.append({"schema": schema, "instance": text_of(value), "jsonschema": expected, "grammar": got})
    if walk_tokens:
        rules = Rules.parse(gbnf, vocab=real_vocab()[0])
        for value in values[:3]:
            counts["token walks"] += 1
            if accepts_tokens(rules, text_of(value)) != oracle(schema, value):
                disagreements.append({"schema": schema, "instance": text_of(value), "walk": "tokens"})


def run(seed, examples):
    """``(counts, disagreements)`` of about ``examples`` random schemas drawn with hypothesis's ``seed``: each
    family of ``families`` gets its own hypothesis run of ``ceil(examples / families)`` examples, so that every
    keyword is drawn whatever the slice."""
    counts = collections.Counter()
    disagreements: list = []
    fams = families(2)
    per_family = -(-examples // len(fams))
    for name, strategy in fams.items():
        one_family(strategy, seed, per_family, counts, disagreements)
        counts["family: " + name] += per_family
    return counts, disagreements


def one_family(strategy, seed, examples, counts, disagreements):
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @hypothesis_seed(seed)
    @given(schema=strategy, data=st.data())
    def example(schema, data):
        values = []
        for _ in range(5):
            v = candidates(schema, data.draw)
            values += [v, mutate(v, data.draw)]
        values += data.draw(
            st.lists(
                st.one_of(
                    st.none(),
                    st.booleans(),
                    st.integers(-5, 5),
                    st.text(max_size=3),
                    st.lists(st.integers(0, 2), max_size=2),
                    st.dictionaries(st.sampled_from(NAMES), st.integers(0, 2), max_size=2),
                ),
                max_size=3,
            )
        )
        values = [v for v in values if not _policy_excludes(schema, v)]
        walk_tokens = data.draw(st.integers(0, 9)) == 0
        # counted once every draw is done (an example hypothesis abandons mid-draw is not one)
        counts["examples"] += 1
        check(schema, values, counts, disagreements, walk_tokens)
        for keyword in _keywords(schema):
            counts["keyword: " + keyword] += 1

    example()


def _keywords(schema, out=None):
    """The keywords a schema uses, at any depth (what the run reports it drew)."""
    out = set() if out is None else out
    if not isinstance(schema, dict):
        return out
    for k, v in schema.items():
        out.add(k)
        if k in ("properties", "$defs", "patternProperties", "dependentSchemas"):
            for sub in v.values():
                _keywords(sub, out)
        elif k in ("anyOf", "allOf", "oneOf", "prefixItems"):
            for sub in v:
                _keywords(sub, out)
        elif k in ("items", "not", "if", "then", "else", "contains", "additionalProperties", "propertyNames") + (
            "unevaluatedProperties",
            "unevaluatedItems",
        ):
            _keywords(v, out)
    return out
