# cython: boundscheck=True, wraparound=True, cdivision=False, annotation_typing=False
"""The const/enum emitter: the GBNF of one JSON value in every text jsonschema finds equal to it: its strings in
every spelling, its numbers as ``numbers.number_value`` writes them, its objects' members in every key order (up
to MAX_ENUM_OBJECT_KEYS keys); in the canonical style (the strings' and numbers' ``canonical``), one text, its
members in the value's order.

Owns: ``value_expr``, ``object_value``. Builds on the string and number emitters.
"""

from __future__ import annotations

from bankml.schema._cstack import check_stack as _check_stack
from bankml.schema.strict.bounds import MAX_ENUM_OBJECT_KEYS
from bankml.schema.strict.gbnf import alternatives
from bankml.schema.strict.vocabulary import refuse


class Consts:
    """The const/enum values of one conversion (through ``strings`` and ``numbers``, into ``rules``)."""

    def __init__(self, rules, strings, numbers):
        self.rules = rules
        self.strings = strings
        self.numbers = numbers

    def value_expr(self, x, ptr):
        _check_stack()
        if x is None:
            return '"null"'
        if x is True:
            return '"true"'
        if x is False:
            return '"false"'
        if isinstance(x, (int, float)):
            return self.numbers.number_value(x, ptr)
        if isinstance(x, str):
            return self.strings.str_literal(x)
        if isinstance(x, list):
            if not x:
                return '"[" space "]"'
            return '"[" space ' + ' "," space '.join(self.value_expr(y, ptr) + " space" for y in x) + ' "]"'
        if isinstance(x, dict):
            return self.object_value(x, ptr)
        refuse("enum", ptr, "a value that is not JSON")

    def object_value(self, x, ptr):
        keys = list(x)
        if len(keys) > MAX_ENUM_OBJECT_KEYS and not self.strings.canonical:
            refuse(
                "enum", ptr, "an object const/enum value of more than %d keys (every key order)" % MAX_ENUM_OBJECT_KEYS
            )
        if not keys:
            return '"{" space "}"'
        kv = [self.strings.str_literal(k) + ' space ":" space ' + self.value_expr(x[k], ptr) + " space" for k in keys]
        if self.strings.canonical:
            # the canonical style: the members in the value's own order (the schema's), one text
            return '"{" space ' + ' "," space '.join(kv) + ' "}"'
        memo = {}

        def rest(mask):
            # the members not yet written (bits of mask), each after a comma
            _check_stack()
            if mask == 0:
                return '"}"'
            if mask in memo:
                return memo[mask]
            alts = ['"," space ' + kv[i] + " " + rest(mask & ~(1 << i)) for i in range(len(keys)) if mask >> i & 1]
            name = self.rules.add_rule("const-obj", " | ".join(alts))
            memo[mask] = name
            return name

        full = (1 << len(keys)) - 1
        out = '"{" space ' + alternatives([kv[i] + " " + rest(full & ~(1 << i)) for i in range(len(keys))])
        # a recursive closure refers to itself: freed now, not by the collector
        rest = None  # noqa: F841
        return out
