"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

``common_peg_parser_builder`` of ``common/peg-parser.cpp`` over ``bankml.chat.peg``'s arena: one parser per call,
ids in creation order, sequences and choices flattened, rules (placeholders for recursion) and refs, the
JSON / Python value and string parsers.
"""

import re

from bankml.chat.peg import (
    Ac,
    And,
    Any,
    Arena,
    Atomic,
    Chars,
    Choice,
    End,
    Epsilon,
    Gbnf,
    Literal,
    Not,
    Ref,
    Repetition,
    Rule,
    Schema,
    Sequence,
    Space,
    Start,
    String,
    Tag,
    Until,
)
from bankml.schema.reader import SchemaDocument

# -- the builder ---------------------------------------------------------------------------------------------

_INVALID_RULE_CHARS = re.compile(r"[^a-zA-Z0-9-]+")


def _lit(b, x):
    return x if x.__class__ is P else b.literal(x)


class P:
    """common_peg_parser: an id in a builder's arena. ``a + b`` sequence, ``a | b`` choice, ``a << b``
    sequence with optional space between; strings are literals."""

    __slots__ = ("id", "b")

    def __init__(self, id_, builder):
        self.id, self.b = id_, builder

    def __add__(self, other):
        b = self.b
        return b._join(Sequence, self.id, (other if other.__class__ is P else b.literal(other)).id)

    def __radd__(self, other):
        b = self.b
        return b._join(Sequence, b.literal(other).id, self.id)

    def __or__(self, other):
        b = self.b
        return b._join(Choice, self.id, (other if other.__class__ is P else b.literal(other)).id)

    def __ror__(self, other):
        b = self.b
        return b._join(Choice, b.literal(other).id, self.id)

    def __lshift__(self, other):
        other = _lit(self.b, other)
        return self.b.sequence([self, self.b.space(), other])

    def __rlshift__(self, other):
        lit = self.b.literal(other)
        return self.b.sequence([lit, self.b.space(), self])


class Builder:
    """common_peg_parser_builder."""

    def __init__(self):
        self.arena = Arena()
        self._parsers = self.arena.parsers

    def add(self, parser):
        parsers = self._parsers
        parsers.append(parser)
        return P(len(parsers) - 1, self)

    def _join(self, kind, left, right):
        """A two-operand sequence or choice (``kind``), flattened as ``sequence`` / ``choice`` flatten."""
        parsers = self._parsers
        a, b = parsers[left], parsers[right]
        if a.__class__ is kind:
            flat = a.children + b.children if b.__class__ is kind else a.children + [right]
        else:
            flat = [left] + b.children if b.__class__ is kind else [left, right]
        parsers.append(kind(flat))
        return P(len(parsers) - 1, self)

    def eps(self):
        return self.add(Epsilon())

    def start(self):
        return self.add(Start())

    def end(self):
        return self.add(End())

    def literal(self, text):
        return self.add(Literal(text.encode("utf-8") if isinstance(text, str) else bytes(text)))

    def _ids(self, parsers):
        return [p.id if p.__class__ is P else p for p in parsers]

    def _flat(self, kind, parsers):
        arena_parsers = self._parsers
        flat = []
        for p in parsers:
            pid = p.id if p.__class__ is P else p
            q = arena_parsers[pid]
            if q.__class__ is kind:
                flat += q.children
            else:
                flat.append(pid)
        arena_parsers.append(kind(flat))
        return P(len(arena_parsers) - 1, self)

    def sequence(self, parsers=()):
        return self._flat(Sequence, parsers)

    def choice(self, parsers=()):
        return self._flat(Choice, parsers)

    def repeat(self, p, lo, hi=None):
        return self.add(Repetition(p.id, lo, lo if hi is None else hi))

    def one_or_more(self, p):
        return self.repeat(p, 1, -1)

    def zero_or_more(self, p):
        return self.repeat(p, 0, -1)

    def optional(self, p):
        return self.repeat(p, 0, 1)

    def peek(self, p):
        return self.add(And(p.id))

    def negate(self, p):
        return self.add(Not(p.id))

    def any(self):
        return self.add(Any())

    def chars(self, classes, lo=1, hi=-1):
        return self.add(Chars(classes, lo, hi))

    def ref(self, name):
        return self.add(Ref(name))

    def space(self):
        return self.add(Space())

    def until(self, delimiter):
        return self.add(Until([delimiter]))

    def until_one_of(self, delimiters):
        return self.add(Until(delimiters))

    def rest(self):
        return self.until_one_of([])

    def string_content(self, delimiter):
        return self.add(String(delimiter))

    def atomic(self, p):
        return self.add(Atomic(p.id))

    def tag(self, tag, p):
        return self.add(Tag(p.id, tag))

    def gbnf(self, p, grammar):
        return self.add(Gbnf(p.id, grammar))

    def ac(self, p, delimiters):
        if isinstance(delimiters, str):
            delimiters = [delimiters]
        if not delimiters:
            raise RuntimeError("ac parser requires at least one delimiter")
        return self.add(Ac(p.id, delimiters))

    def schema(self, p, name, schema, raw=False, node=None, source=None):
        """The schema parser: ``schema`` a JSON schema (read into a bankml.schema.reader document here, as
        common_chat_schema_from_json) unless ``node`` (a node of a document) is given; then ``source`` is
        ``(document, pointer)``: the schema document the node belongs to and its JSON pointer there (what
        strict mode compiles: ``bankml.chat.chat_peg.parameter_source``)."""
        if node is None:
            node = SchemaDocument(schema).root
            source = (schema, "#")
        return self.add(Schema(p.id, name, node, raw, source))

    def rule(self, name, p, trigger=False):
        """``p`` a parser, or a function building one (then the rule may recurse, and a rule of that name
        already made is reused)."""
        clean = _INVALID_RULE_CHARS.sub("-", name)
        a = self.arena
        if p.__class__ is P:
            rid = a.add_parser(Rule(clean, p.id, trigger))
            a.rules[clean] = rid
            return self.ref(clean)
        if clean in a.rules:
            return self.ref(clean)
        placeholder = self.any()
        a.rules[clean] = a.add_parser(Rule(clean, placeholder.id, trigger))
        built = p()
        a.rules[clean] = a.add_parser(Rule(clean, built.id, trigger))
        return self.ref(clean)

    def trigger_rule(self, name, p):
        return self.rule(name, p, True)

    def set_root(self, p):
        self.arena.root = p.id

    def build(self):
        self.arena.resolve_refs()
        return self.arena

    # strings, JSON, Python values

    def double_quoted_string(self):
        return self.rule(
            "double-quoted-string",
            lambda: self.sequence([self.literal('"'), self.string_content('"'), self.literal('"')]),
        )

    def single_quoted_string(self):
        return self.rule(
            "single-quoted-string",
            lambda: self.sequence([self.literal("'"), self.string_content("'"), self.literal("'")]),
        )

    def quoted_string(self):
        return self.rule(
            "quoted-string", lambda: self.choice([self.double_quoted_string(), self.single_quoted_string()])
        )

    def json_number(self):
        def build():
            digit1_9 = self.chars("[1-9]", 1, 1)
            digits = self.chars("[0-9]")
            int_part = self.choice([self.literal("0"), self.sequence([digit1_9, self.chars("[0-9]", 0, -1)])])
            frac = self.sequence([self.literal("."), digits])
            exp = self.sequence(
                [self.choice([self.literal("e"), self.literal("E")]), self.optional(self.chars("[+-]", 1, 1)), digits]
            )
            not_cont = self.negate(self.chars("[0-9.eE+-]", 1, 1))
            return self.sequence(
                [self.optional(self.literal("-")), int_part, self.optional(frac), self.optional(exp), not_cont]
            )

        return self.rule("json-number", build)

    def json_string(self):
        return self.rule(
            "json-string", lambda: self.sequence([self.literal('"'), self.string_content('"'), self.literal('"')])
        )

    def json_bool(self):
        return self.rule("json-bool", lambda: self.choice([self.literal("true"), self.literal("false")]))

    def json_null(self):
        return self.rule("json-null", lambda: self.literal("null"))

    def json_object(self):
        def build():
            ws = self.space()
            member = self.sequence([self.json_string(), ws, self.literal(":"), ws, self.json()])
            members = self.sequence([member, self.zero_or_more(self.sequence([ws, self.literal(","), ws, member]))])
            return self.sequence(
                [
                    self.literal("{"),
                    ws,
                    self.choice([self.literal("}"), self.sequence([members, ws, self.literal("}")])]),
                ]
            )

        return self.rule("json-object", build)

    def json_array(self):
        def build():
            ws = self.space()
            elements = self.sequence(
                [self.json(), self.zero_or_more(self.sequence([ws, self.literal(","), ws, self.json()]))]
            )
            return self.sequence(
                [
                    self.literal("["),
                    ws,
                    self.choice([self.literal("]"), self.sequence([elements, ws, self.literal("]")])]),
                ]
            )

        return self.rule("json-array", build)

    def json(self):
        return self.rule(
            "json-value",
            lambda: self.choice(
                [
                    self.json_object(),
                    self.json_array(),
                    self.json_string(),
                    self.json_number(),
                    self.json_bool(),
                    self.json_null(),
                ]
            ),
        )

    def python_string(self):
        return self.rule(
            "python-string", lambda: self.choice([self.double_quoted_string(), self.single_quoted_string()])
        )

    def python_number(self):
        return self.json_number()

    def python_bool(self):
        return self.rule("python-bool", lambda: self.choice([self.literal("True"), self.literal("False")]))

    def python_null(self):
        return self.rule("python-none", lambda: self.literal("None"))

    def python_dict(self):
        def build():
            ws = self.space()
            member = self.sequence([self.python_string(), ws, self.literal(":"), ws, self.python_value()])
            members = self.sequence([member, self.zero_or_more(self.sequence([ws, self.literal(","), ws, member]))])
            return self.sequence(
                [
                    self.literal("{"),
                    ws,
                    self.choice([self.literal("}"), self.sequence([members, ws, self.literal("}")])]),
                    ws,
                ]
            )

        return self.rule("python-dict", build)

    def python_array(self):
        def build():
            ws = self.space()
            elements = self.sequence(
                [self.python_value(), self.zero_or_more(self.sequence([self.literal(","), ws, self.python_value()]))]
            )
            return self.sequence(
                [
                    self.literal("["),
                    ws,
                    self.choice([self.literal("]"), self.sequence([elements, ws, self.literal("]")])]),
                    ws,
                ]
            )

        return self.rule("python-array", build)

    def python_value(self):
        return self.rule(
            "python-value",
            lambda: self.choice(
                [
                    self.python_dict(),
                    self.python_array(),
                    self.python_string(),
                    self.python_number(),
                    self.python_bool(),
                    self.python_null(),
                ]
            ),
        )

    def marker(self):
        sharp = self.literal("<") + self.until(">") + self.literal(">")
        square = self.literal("[") + self.until("]") + self.literal("]")
        return self.choice([sharp, square])

    def json_member(self, key, p):
        ws = self.space()
        return self.sequence([self.literal('"' + key + '"'), ws, self.literal(":"), ws, p])
