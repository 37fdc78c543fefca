# cython: boundscheck=True, wraparound=True, cdivision=False, annotation_typing=False
"""The number emitter: the GBNF of the number texts a term's constraints leave (bounds, multipleOf and its
negation, integer or not, the draft's integer texts), and of one const/enum number in every spelling
jsonschema finds equal (``5``, ``5.0``, ``5e0``...). Where only the plain rules do (``number``, ``integer``) they
are named; otherwise ``numeric.number_dfa``'s automaton is written as one rule per state.

Owns: ``number_expr``, ``number_value``, writing an automaton's rules (``dfa_rules``). Must not import the other
emitters.
"""

from __future__ import annotations

import json
import math

from bankml.schema.strict.gbnf import alternatives, char_class, lit
from bankml.schema.strict.numeric import NUMBER_DFAS, NUMBER_DFAS_MAX, Bound, number_dfa
from bankml.schema.strict.values import dec, is_num
from bankml.schema.strict.vocabulary import ALL_TYPES


class Numbers:
    """The number rules of one conversion (``rules``, the grammar written; ``doc``, for its draft). ``canonical``:
    numbers in their plain form only, no exponent, an integer with no fraction (each value keeps a text)."""

    def __init__(self, doc, rules, canonical=False):
        self.doc = doc
        self.rules = rules
        self.canonical = canonical

    def number_expr(self, m, ptr):
        types = m.types
        integer_only = "frac" not in types
        # draft 6+: an integral float (5.0) is an integer; its text is the integer's with an all-zero fraction
        # (not in the canonical style: 5)
        plain_int = self.doc.draft <= 4 or self.canonical
        int_rule = "integer" if plain_int else '"-"? ( "0" | [1-9] [0-9]* ) ( "." "0"+ )?'
        zero_frac = integer_only and not plain_int
        frac_only = None
        if "int" not in types:
            # numbers that are no integers: draft 4, every float text; draft 6+, a nonzero fraction digit or a
            # normalised mantissa with a negative exponent (1.25e1 is not taken: module docstring)
            frac_only = 4 if self.doc.draft <= 4 else 6
            if m.mult:
                return None  # a multiple of an integer is an integer
        bounds = []
        for lower, b, excl in m.bounds:
            if lower:
                acc = (lambda r: r > 0) if excl else (lambda r: r >= 0)
            else:
                acc = (lambda r: r < 0) if excl else (lambda r: r <= 0)
            exact = getattr(b, "exact", None)
            if exact is None:
                bounds.append(Bound(b, acc))
            else:
                # a float bound past 2^53 (or with a long binary expansion): integer texts are compared with its
                # exact value, as Python compares an int with a float; other texts with its repr
                bounds.append(Bound(exact, acc, "int"))
                bounds.append(Bound(b, acc, "float"))
        for x in m.notvalues:
            if is_num(x):
                dx = dec(x)
                if dx is not None:
                    bounds.append(Bound(dx, lambda r: r != 0))
        modulus = None
        for q in m.mult:
            modulus = q if modulus is None else modulus * q // math.gcd(modulus, q)
        if m.notmult:
            return self.number_notmult(m, integer_only, zero_frac, frac_only, bounds, modulus)
        if not bounds and modulus is None and frac_only is None:
            return int_rule if integer_only else "number"
        integral = modulus is not None  # a multiple of an integer: no fraction but zeros, no exponent
        if modulus == 1:
            modulus = None
            if not bounds and frac_only is None:
                return int_rule if integer_only or self.canonical else '"-"? ( "0" | [1-9] [0-9]* ) ( "." "0"+ )?'
        return self.number_rules(m, bounds, integer_only, zero_frac, integral, frac_only, modulus)

    def number_rules(self, m, bounds, integer_only, zero_frac, integral, frac_only, modulus, must=None, notmods=()):
        """The rules of number_dfa's automaton. It depends on these alone: shared by every schema of the process
        with the same numbers."""
        key = (
            integer_only,
            zero_frac,
            integral,
            frac_only,
            modulus,
            must,
            notmods,
            self.canonical,
            tuple(
                (lower, type(b).__name__, repr(b), repr(getattr(b, "exact", None)), excl) for lower, b, excl in m.bounds
            ),
            tuple(repr(dec(x)) for x in m.notvalues if is_num(x)),
        )
        got = NUMBER_DFAS.get(key)
        if got is None:
            if len(NUMBER_DFAS) >= NUMBER_DFAS_MAX:
                NUMBER_DFAS.clear()
            got = NUMBER_DFAS[key] = number_dfa(
                integer_only and not zero_frac,
                bounds,
                modulus,
                zero_fraction_only=integral or zero_frac,
                no_exponent=integer_only or integral or self.canonical,
                frac_only=frac_only,
                must=must,
                notmods=notmods,
            )
        trans, acc = got
        return self.dfa_rules(trans, acc, "num")

    def number_notmult(self, m, integer_only, zero_frac, frac_only, bounds, must):
        """number_expr's automaton beside a negated multipleOf: no multiple of any m.notmult divisor (and a
        multiple of must, the multipleOf divisors' lcm, or None)."""
        nots = tuple(sorted(set(m.notmult)))
        if must is not None and any(must % q == 0 for q in nots):
            return None  # every multiple of must is a multiple of one of them
        modulus = must or 1
        for q in nots:
            modulus = modulus * q // math.gcd(modulus, q)
        return self.number_rules(m, bounds, integer_only, zero_frac, must is not None, frac_only, modulus, must, nots)

    def dfa_rules(self, trans, acc, prefix):
        n = len(trans)
        # keep the states from which an accepting state is reachable
        live = [bool(a) for a in acc]
        changed = True
        while changed:
            changed = False
            for i in range(n):
                if not live[i] and any(live[j] for j in trans[i].values()):
                    live[i] = changed = True
        if not live[0]:
            return None
        names = {}
        base = self.rules.new_name(prefix)
        for i in range(n):
            if live[i]:
                names[i] = "%s-%d" % (base, i)
        for i in range(n):
            if not live[i]:
                continue
            by_target = {}
            for ch, j in trans[i].items():
                if live[j]:
                    by_target.setdefault(j, []).append(ch)
            alts = []
            for j, chs in by_target.items():
                cls = lit(chs[0]) if len(chs) == 1 else char_class({ord(c) for c in chs})
                alts.append(cls + " " + names[j])
            body = " | ".join(alts)
            if acc[i]:
                # an accepting state may also end here: an empty alternative
                body = "| " + body if body else '""'
            self.rules.set_rule(names[i], body)
        return names[0]

    def number_value(self, x, ptr, types=ALL_TYPES):
        """The texts of the numbers jsonschema-equal to x whose type is in types (an integral value may be
        written as an int or as a float: "5", "5.0"; a float is an integer from draft 6 on)."""
        if isinstance(x, float) and not math.isfinite(x):
            return None
        if isinstance(x, float) and not x.is_integer():
            if "frac" not in types:
                return None
            t = json.dumps(x)
            if self.canonical:
                # json.dumps's text, the one exact mode takes (1e-05 keeps its exponent there: the package's
                # docstring)
                return lit(t)
            return lit(t) if "e" in t else lit(t) + ' "0"*'
        n = int(x)
        int_ok = "int" in types
        float_ok = ("int" in types) if self.doc.draft >= 6 else ("frac" in types)
        if self.canonical:
            # its one plain text: the integer's where an integer text is of its types, else with ".0"
            if int_ok:
                return lit(str(n))
            return lit(str(n) + ".0") if float_ok else None
        base = '"-"? "0"' if n == 0 else lit(str(n))
        alts = []
        if int_ok and float_ok:
            alts.append(base + ' ( "." "0"+ )?')
        elif int_ok:
            alts.append(base)
        elif float_ok:
            alts.append(base + ' "." "0"+')
        t = json.dumps(float(n)) if abs(n) < 1e308 else ""
        if float_ok and "e" in t and float(t) == n:
            alts.append(lit(t))
        return alternatives(alts)
