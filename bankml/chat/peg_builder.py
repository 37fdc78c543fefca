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
from bankml.schema.tool_args import JsonStyle

# -- the builder ---------------------------------------------------------------------------------------------

_INVALID_RULE_CHARS = re.compile(r"[^a-zA-Z0-9-]+")


def clean_rule_name(name):
    """A rule name with each run of characters other than ``[a-zA-Z0-9-]`` made one ``-``."""
    if name.isascii():
        if name.replace("-", "a").isalnum():
            return name
        if "__" not in name:  # each underscore a run of its own unless a character beside it is also replaced
            dashed = name.replace("_", "-")
            if dashed.replace("-", "a").isalnum():
                return dashed
    return _INVALID_RULE_CHARS.sub("-", name)


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
        self.strict_tools = False  # strict tool-call mode: a tool's schema is written by bankml.schema.tool_args
        # what ``build`` needs instead of walking the arena to resolve refs: the names of the refs made (one
        # missing from the rules: resolve as llama.cpp does, which reports it), the names of the rules being
        # built by a function (a reference to one is a ref, resolved later), and whether a rule id already
        # handed out was replaced by another of the same name (then every use is rewritten to the last one)
        self._ref_names = set()
        self._building = set()
        self._replaced = False
        # where refs were handed out, to resolve their uses in ``build`` (they parse as their rule, but through
        # one more call per use): the first id after an explicit ``ref``, and the ids made while a recursive
        # rule, referred to inside its own function, was built
        self._refs_from = None
        self._ref_spans = []
        self._inner_refs = 0
        # parsers that hold nothing of their own but a value are shared by the ids that have the same one (one
        # object: fewer to allocate, and for the garbage collector to walk once the arena is kept)
        self._epsilon = Epsilon()
        self._literals = {}
        self._refs = {}

    def add(self, parser):
        parsers = self._parsers
        parsers.append(parser)
        return P(len(parsers) - 1, self)

    def _join(self, kind, left, right):
        """A two-operand sequence or choice (``kind``), flattened as ``sequence`` / ``choice`` flatten."""
        parsers = self._parsers
        a, b = parsers[left], parsers[right]
        if a.__class__ is kind:
            flat = a.children + b.children if b.__class__ is kind else a.children + (right,)
        else:
            flat = (left,) + b.children if b.__class__ is kind else (left, right)
        parsers.append(kind(flat))
        return P(len(parsers) - 1, self)

    def eps(self):
        parsers = self._parsers
        parsers.append(self._epsilon)
        return P(len(parsers) - 1, self)

    def start(self):
        return self.add(Start())

    def end(self):
        return self.add(End())

    def literal(self, text):
        parsers = self._parsers
        parsers.append(self._literal(text))
        return P(len(parsers) - 1, self)

    def _literal(self, text):
        cls = text.__class__
        if cls is str or cls is bytes:
            lit = self._literals.get(text)
            if lit is None:
                lit = self._literals[text] = Literal(text.encode("utf-8") if cls is str else text)
            return lit
        return Literal(text.encode("utf-8") if isinstance(text, str) else bytes(text))

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
        arena_parsers.append(kind(tuple(flat)))
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
        parsers = self._parsers
        parsers.append(self._ref(name))
        if self._refs_from is None:
            self._refs_from = len(parsers)
        return P(len(parsers) - 1, self)

    def _ref(self, name):
        ref = self._refs.get(name)
        if ref is None:
            self._ref_names.add(name)
            ref = self._refs[name] = Ref(name)
        return ref

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
        parsers = self._parsers
        parsers.append(Atomic(p.id))
        return P(len(parsers) - 1, self)

    def tag(self, tag, p):
        parsers = self._parsers
        parsers.append(Tag(p.id, tag))
        return P(len(parsers) - 1, self)

    def atomic_tag(self, tag, p):
        """``atomic(tag(tag, p))``."""
        parsers = self._parsers
        parsers.append(Tag(p.id, tag))
        parsers.append(Atomic(len(parsers) - 1))
        return P(len(parsers) - 1, self)

    def atomic_tag_around(self, tag, prefix, inner_tag, text, suffix):
        """``atomic_tag(tag, prefix + atomic_tag(inner_tag, literal(text)) + suffix)`` (``prefix`` and ``suffix``
        texts), its parsers made in one step, the same ones in the same order as those operators make them:
        an XML-like opening tag with a tagged name, such as ``<parameter=`` name ``>``."""
        parsers = self._parsers
        literal = self._literal
        n = len(parsers)
        parsers.append(literal(text))
        parsers.append(Tag(n, inner_tag))
        parsers.append(Atomic(n + 1))
        parsers.append(literal(prefix))
        parsers.append(Sequence((n + 3, n + 2)))
        parsers.append(literal(suffix))
        parsers.append(Sequence((n + 3, n + 2, n + 5)))
        parsers.append(Tag(n + 6, tag))
        parsers.append(Atomic(n + 7))
        return P(n + 8, self)

    def gbnf(self, p, grammar):
        return self.add(Gbnf(p.id, grammar))

    def ac(self, p, delimiters):
        if isinstance(delimiters, str):
            delimiters = [delimiters]
        if not delimiters:
            raise RuntimeError("ac parser requires at least one delimiter")
        return self.add(Ac(p.id, delimiters))

    def schema(self, p, name, schema, raw=False, node=None, source=None, style=None):
        """The schema parser: ``schema`` a JSON schema (read into a bankml.schema.reader document here, as
        common_chat_schema_from_json) unless ``node`` (a node of a document) is given; then ``source`` is
        ``(document, pointer)``: the schema document the node belongs to and its JSON pointer there (what
        strict mode compiles: ``bankml.chat.chat_peg.parameter_source``). ``style``: how strict tool-call mode
        writes the value (``bankml.schema.tool_args``; the parse is ``p``'s)."""
        if node is None and source is None:
            source = (schema, "#")
            if style is None and self.strict_tools and not name.startswith("response-format"):
                style = JsonStyle()  # strict tool-call mode writes the tool's schema from its JSON
            node = SchemaDocument(schema).root if style is None else None
        return self.add(Schema(p.id, name, node, raw, source, style))

    def rule(self, name, p, trigger=False):
        """``p`` a parser, or a function building one (then the rule may recurse, and a rule of that name
        already made is reused). Like llama.cpp this adds a rule parser and returns a new ref parser to it, but
        the parser given back stands for the rule itself (the ref resolved now, as ``resolve_refs`` would at
        the end), except within the function building that rule (the ref is resolved when the arena is)."""
        clean = clean_rule_name(name)
        a = self.arena
        rules = a.rules
        parsers = self._parsers
        if p.__class__ is P:
            return P(self.rule_id(clean, p.id, trigger), self)
        rid = rules.get(clean)
        if rid is not None:
            parsers.append(self._ref(clean))
            if clean in self._building:
                self._inner_refs += 1
                return P(len(parsers) - 1, self)
            return P(rid, self)
        placeholder = self.any()
        parsers.append(Rule(clean, placeholder.id, trigger))
        placeholder_rid = rules[clean] = len(parsers) - 1
        self._building.add(clean)
        inner, start = self._inner_refs, len(parsers)
        try:
            built = p()
        finally:
            self._building.discard(clean)
        if self._inner_refs != inner:
            self._ref_spans.append((start, len(parsers)))
        if rules[clean] != placeholder_rid:
            self._replaced = True
        parsers.append(Rule(clean, built.id, trigger))
        rid = rules[clean] = len(parsers) - 1
        parsers.append(self._ref(clean))
        return P(rid, self)

    def rule_id(self, clean, body, trigger=False, gbnf=None):
        """``rule(clean, body)`` for a name that needs no cleaning and a body id: the rule's id (``gbnf``: the
        body's GBNF and the rules it names, when known)."""
        rules, parsers = self.arena.rules, self._parsers
        if clean in rules:
            self._replaced = True
        parsers.append(Rule(clean, body, trigger, gbnf))
        rid = rules[clean] = len(parsers) - 1
        parsers.append(self._ref(clean))
        return rid

    def trigger_rule(self, name, p):
        return self.rule(name, p, True)

    def set_root(self, p):
        self.arena.root = p.id

    def build(self):
        a = self.arena
        if not self._ref_names.issubset(a.rules):
            a.resolve_refs()  # a ref to no rule: llama.cpp's resolution, which reports it where it is used
        else:
            if self._replaced:
                a.redirect_replaced_rules()
            spans = self._ref_spans
            if self._refs_from is not None:
                spans = spans + [(self._refs_from, len(a.parsers))]
            for start, end in spans:
                a.resolve_span(start, end)
        a.root = a.resolved(a.root)
        return a

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
