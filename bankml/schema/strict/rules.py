# cython: boundscheck=True, wraparound=True, cdivision=False, annotation_typing=False
"""The grammar one conversion writes (``Rules``: names, bodies, the byte bound, repetitions the GBNF parser takes)
and its budget of schema nodes and seconds (``Budget``), both from the conversion's SchemaLimits.

Owns: rule names (``new_name``: ``prefix-N``, one counter per conversion), one rule per distinct body
(``add_rule``), the grammar's size. Must not import the compiler's other parts.
"""

from __future__ import annotations

import time

from bankml.schema.strict.bounds import ENGINE_MAX_GRAMMAR_BYTES, MAX_REPETITION
from bankml.schema.strict.vocabulary import Refuse, refuse


class Budget:
    """The schema nodes a conversion visits, against SchemaLimits.max_nodes, and its deadline (max_seconds)."""

    def __init__(self, limits):
        self.deadline = None
        if limits is not None and limits.max_seconds is not None:
            self.deadline = time.monotonic() + limits.max_seconds
        self.max_nodes = limits.max_nodes if limits is not None else 1_000_000
        self.nodes = 0

    def tick(self, pointer):
        self.nodes += 1
        if self.nodes > self.max_nodes:
            raise Refuse("SchemaLimits.max_nodes", pointer, "the schema expands to more than %d nodes" % self.max_nodes)
        if self.deadline is not None and self.nodes & 63 == 0 and time.monotonic() > self.deadline:
            raise Refuse("SchemaLimits.max_seconds", pointer, "the conversion takes longer than its time budget")


class Rules:
    """The rules written so far ({name: body}, in the order written) and their size in bytes."""

    def __init__(self, limits):
        # no more than the engine takes (a longer grammar would be refused there, by a GrammarError)
        self.max_bytes = min(limits.max_grammar_bytes if limits is not None else 8 << 20, ENGINE_MAX_GRAMMAR_BYTES)
        self.rules = {}  # name -> body
        self.body_names = {}
        self.counter = 0
        self.bytes = 0

    def new_name(self, prefix):
        self.counter += 1
        return "%s-%d" % (prefix, self.counter)

    def add_rule(self, prefix, body):
        """A rule for body (one rule per distinct body). The hottest call of a conversion (4,600 a Kubernetes
        schema): new_name and set_rule written out, one look-up of the body."""
        names = self.body_names
        name = names.get(body)
        if name is not None:
            return name
        self.counter += 1
        name = prefix + "-" + str(self.counter)
        self.rules[name] = body
        self.bytes += len(name) + len(body) + 6  # " ::= " and the newline
        if self.bytes > self.max_bytes:
            raise Refuse("SchemaLimits.max_grammar_bytes", "#", "the grammar grows past %d bytes" % self.max_bytes)
        names[body] = name
        return name

    def set_rule(self, name, body):
        self.rules[name] = body
        self.bytes += len(name) + len(body) + 6  # " ::= " and the newline
        if self.bytes > self.max_bytes:
            raise Refuse("SchemaLimits.max_grammar_bytes", "#", "the grammar grows past %d bytes" % self.max_bytes)

    def rep(self, item, a, b, keyword="maxItems", pointer="#"):
        """item repeated a..b times (b None: unbounded) as GBNF, or "" for exactly zero."""
        if b is not None and b == 0:
            return ""
        return self.repeat(self.add_rule("item", item), a, b, keyword, pointer)

    def repeat(self, name, a, b, keyword, pointer):
        """The rule name repeated a..b times (b None: unbounded). The GBNF parser refuses a minimum past
        MAX_REPETITION (llama.cpp's 2000) and reads a maximum past it as no maximum: a larger maximum is
        spelled as blocks of 1000 (counts 1000j + t: j < k full blocks then up to 999, or k blocks then up to
        the remainder); a larger minimum is refused naming the keyword."""
        if a > MAX_REPETITION:
            refuse(keyword.replace("max", "min"), pointer, "a minimum count past %d" % MAX_REPETITION)
        if b is None:
            return "%s*" % name if a == 0 else "%s{%d,}" % (name, a)
        if b <= MAX_REPETITION:
            return "%s{%d}" % (name, a) if a == b else "%s{%d,%d}" % (name, a, b)
        k, r = divmod(b - a, 1000)
        if k > MAX_REPETITION:
            refuse(keyword, pointer, "a maximum count past %d" % (MAX_REPETITION * 1000))
        block = self.add_rule("block", "%s{1000}" % name)
        fewer = (block + "{0,%d} " % (k - 1) if k > 1 else "") + name + "{0,999}"
        full = block + ("{%d}" % k if k > 1 else "") + (" %s{0,%d}" % (name, r) if r else "")
        tail = self.add_rule("upto", fewer + " | " + full)
        return ("%s{%d} " % (name, a) if a else "") + tail
