# cython: boundscheck=True, wraparound=True, cdivision=False, annotation_typing=False
"""One conversion's parts, and the dispatch between them: the rule of a conjunction of schemas (``rule``: its
terms, then per term the emitter of each JSON type it leaves).

The pipeline: the document is indexed (``document``); a schema is read into its disjunctive normal form
(``terms``, with ``negation`` and ``oneof``), each term merged into per-type constraints (``merge``, the
intermediate representation, through ``readers``); the emitters write each type's rules from them (``numbers``
with ``numeric``, ``strings`` with ``patterns`` and ``lang``, ``consts``, ``arrays``, ``objects`` with ``keys``)
into ``rules.Rules``, asking ``rule`` for the rules of their items and values. ``validate`` answers for the values
a grammar is built from.

The parts call each other (a value's rule comes back here): ``close`` lets them go when the conversion ends, so
that its tables are freed by reference counting, not by the cyclic collector.

Owns: ``Compiler`` (the parts, the rule of each conjunction met). Imports every part; no part imports it.
"""

from __future__ import annotations

from bankml.schema._cstack import check_stack as _check_stack
from bankml.schema.strict.arrays import Arrays
from bankml.schema.strict.consts import Consts
from bankml.schema.strict.document import Document
from bankml.schema.strict.gbnf import NEVER, alternatives
from bankml.schema.strict.keys import Keys
from bankml.schema.strict.merge import Merger
from bankml.schema.strict.negation import Negation
from bankml.schema.strict.numbers import Numbers
from bankml.schema.strict.objects import Objects
from bankml.schema.strict.oneof import OneOf
from bankml.schema.strict.readers import Readers
from bankml.schema.strict.rules import Budget, Rules
from bankml.schema.strict.strings import Strings
from bankml.schema.strict.terms import Terms
from bankml.schema.strict.unevaluated import Unevaluated
from bankml.schema.strict.validate import Validator
from bankml.schema.strict.values import is_num, spellings
from bankml.schema.strict.vocabulary import refuse


class Compiler:
    """The parts of the conversion of ``schema`` (its document, as read) with ``lenient`` (keywords) and
    ``limits`` (a SchemaLimits), in ``style`` (``"exact"`` or ``"canonical"``: ``convert.STYLES``). Raises Refuse
    as the document is indexed. ``registry``, ``prepare``: the other documents references may name, and how one
    is read (``document.Document``)."""

    def __init__(self, schema, lenient, limits, style="exact", registry=None, prepare=None):
        lenient = frozenset(lenient or ())
        canonical = style == "canonical"
        self.budget = Budget(limits)
        self.rules = Rules(limits)
        self.doc = doc = Document(schema, self.budget, registry, prepare)
        self.readers = Readers(doc)
        self.merger = Merger(doc, self.readers, lenient)
        self.terms = Terms(doc, self.budget)
        self.negation = Negation(doc, self.budget, lenient)
        self.oneof = OneOf(doc)
        self.unevaluated = Unevaluated(doc, self.budget)
        self.validator = Validator(doc)
        self.numbers = Numbers(doc, self.rules, canonical)
        self.strings = Strings(self.rules, canonical)
        self.consts = Consts(self.rules, self.strings, self.numbers)
        self.arrays = Arrays(doc, self.rules)
        self.keys = Keys(doc, self.rules)
        self.objects = Objects(doc, self.rules, lenient, canonical)
        self.linked = (
            self.terms,
            self.negation,
            self.oneof,
            self.unevaluated,
            self.validator,
            self.strings,
            self.arrays,
            self.keys,
            self.objects,
        )
        for part in self.linked:
            part.link(self)
        self.conj_rules = {}  # frozenset of the conjunction's schema ids -> its rule name (or None, or "value")

    def close(self):
        """Let the parts go (they refer to each other, and to this object)."""
        for part in self.linked:
            part.__dict__.clear()
        self.__dict__.clear()

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
        terms = self.terms.product([self.terms.expand(s) for s in conj], pointer)
        if not terms:
            self.conj_rules[key] = None
            return None
        name = self.rules.new_name("v")
        self.conj_rules[key] = name  # before the body: recursive schemas refer to it
        body = alternatives([self.term_expr(t) for t in terms])
        if body is None:
            body = NEVER  # no instance (reached through recursion)
        self.rules.set_rule(name, body)
        return name

    def term_expr(self, term):
        m = self.merger.merge(term)
        if m is None:
            return None
        ptr = self.doc.p(term[0]) if term else "#"
        self.budget.tick(ptr)
        types = m.types
        if m.enum is not None:
            vals = [x for x in m.enum if any(self.validator.valid_term(y, term) for y in spellings(x))]
            return alternatives(
                [
                    self.numbers.number_value(x, ptr, types) if is_num(x) else self.consts.value_expr(x, ptr)
                    for x in vals
                ]
            )
        nv = m.notvalues
        out = []
        if "null" in types and not any(x is None for x in nv):
            out.append('"null"')
        if "boolean" in types:
            for b in (True, False):
                if not any(isinstance(x, bool) and x is b for x in nv):
                    out.append('"true"' if b else '"false"')
        if "int" in types or "frac" in types:
            out.append(self.numbers.number_expr(m, ptr))
        if "string" in types:
            st = m.string.copy()
            st.exclude |= {x for x in nv if isinstance(x, str)}
            out.append(self.strings.string_expr(st, ptr))
        if "array" in types:
            if any(isinstance(x, list) for x in nv):
                refuse("not", ptr, "excluding array values")
            out.append(self.arrays.array_expr(m, term, ptr))
        if "object" in types:
            if any(isinstance(x, dict) for x in nv):
                refuse("not", ptr, "excluding object values")
            out.append(self.objects.object_expr(m, term, ptr))
        return alternatives(out)
