# cython: boundscheck=True, wraparound=True, cdivision=False, annotation_typing=False
"""Numbers as a digit-wise automaton over the number's text: ``Bound`` compares a text's exact decimal value with
a bound digit by digit, and ``number_dfa`` explores the texts whose value satisfies every bound and divisibility
(a remainder kept per state), minimized (``lang.automaton.finish``). The automata depend on the numbers alone:
kept per process (``NUMBER_DFAS``, bounded).

Owns: the comparison and the automaton. Imports the Lang machinery only.
"""

from __future__ import annotations

from decimal import localcontext

from bankml.schema.strict.bounds import MAX_STATES
from bankml.schema.strict.lang.automaton import finish
from bankml.schema.strict.vocabulary import Refuse


def _sgn(x):
    return (x > 0) - (x < 0)


class Bound:
    """A comparison of a number text's value with the decimal B, kept digit by digit."""

    def __init__(self, value, accept, texts="all"):
        self.texts = texts  # "all", or "int" (integer texts only) or "float" (texts with fraction/exponent)
        self.neg = value < 0
        self.zero = value == 0
        a = value.copy_abs()  # abs() would round to the context's 28 digits
        with localcontext() as ctx:
            ctx.prec = 1000
            s = format(a, "f")
        ip, _, fp = s.partition(".")
        self.ib = ip.lstrip("0") or "0"
        self.fb = fp.rstrip("0")
        if self.zero:
            self.mb, self.f = "", 0
        else:
            with localcontext() as ctx:
                ctx.prec = 1000  # normalize() rounds to the context's precision too
                t = a.normalize().as_tuple()
            ds = "".join(map(str, t.digits))
            self.f = len(ds) - 1 + t.exponent
            self.mb = ds.rstrip("0")
        self.fd = str(abs(self.f)) if self.f else ""
        self.accept = accept  # a predicate on the comparison's result in {-1, 0, 1}

    # the state: (n, cmp) of the integer part against ib; (decided, j) of fraction digits against fb;
    # (decided, j) of mantissa digits against mb; (esign, k, cmp) of the exponent against |f|
    def start(self):
        # an integer-texts-only comparison needs no mantissa comparator (exponent texts are not its business)
        return ((0, 0), None, None if self.texts == "int" else (None, 0), None)

    def int_digit(self, st, d):
        (n, c), fc, mc, ec = st
        if n < len(self.ib):
            if c == 0:
                c = _sgn(d - int(self.ib[n]))
            n += 1
        else:
            n, c = len(self.ib) + 1, 0  # more digits than B's integer part: c is read no more
        if mc is not None:
            mc = self._seq(mc, d, self.mb) if n == 1 and d != 0 else None
        return ((n, c), fc, mc, ec)

    def _ires(self, ic):
        n, c = ic
        if n < len(self.ib):
            return -1
        if n > len(self.ib):
            return 1
        return c

    @staticmethod
    def _seq(sc, d, ref):
        dec, j = sc
        if dec is not None:
            return sc
        bd = int(ref[j]) if j < len(ref) else 0
        if d != bd:
            return (_sgn(d - bd), 0)  # decided: j is read no more
        return (None, min(j + 1, len(ref)))

    def dot(self, st):
        if st is None:
            return None
        ic, _, mc, ec = st
        r = self._ires(ic)
        return (ic, (r if r != 0 else None, 0), mc, ec)

    def frac_digit(self, st, d):
        if st is None:
            return None
        ic, fc, mc, ec = st
        return (ic, self._seq(fc, d, self.fb), None if mc is None else self._seq(mc, d, self.mb), ec)

    def exp_start(self, st, sign):
        if st is None:
            return None
        ic, fc, mc, _ = st
        return (ic, fc, mc, (sign, 0, 0))

    def exp_digit(self, st, d):
        if st is None:
            return None
        ic, fc, mc, (s, k, c) = st
        if k == 0 and d == 0:
            return st
        if k < len(self.fd):
            if c == 0:
                c = _sgn(d - int(self.fd[k]))
            k += 1
        else:
            k, c = len(self.fd) + 1, 0  # more exponent digits than |f| has: c is read no more
        return (ic, fc, mc, (s, k, c))

    @staticmethod
    def _seq_end(sc, ref):
        dec, j = sc
        if dec is not None:
            return dec
        return -1 if j < len(ref) else 0

    def result(self, st, phase, xneg):
        if self.texts != "all" and (self.texts == "int") != (phase in ("Z", "I")):
            return True  # this comparison is for the other kind of text
        ic, fc, mc, ec = st
        if phase in ("Z", "I"):
            c = self._ires(ic)
            if c == 0:
                c = -1 if self.fb else 0
        elif phase == "F":
            c = self._seq_end(fc, self.fb)
        else:  # exponent form with a normalised mantissa
            if self.zero:
                c = 1
            else:
                s, k, cc = ec
                cabs = -1 if k < len(self.fd) else (1 if k > len(self.fd) else cc)
                se = 0 if k == 0 else s
                sf = _sgn(self.f)
                if se != sf:
                    ce = _sgn(se - sf)
                else:
                    ce = 0 if se == 0 else (cabs if se > 0 else -cabs)
                c = ce if ce != 0 else self._seq_end(mc, self.mb)
        if not xneg and not self.neg:
            r = c
        elif xneg and self.neg:
            r = -c
        elif xneg:
            r = 0 if (c == 0 and self.zero) else -1
        else:
            r = 1
        return self.accept(r)


NUMBER_DFAS: dict = {}  # number automata by their bounds (Numbers.number_rules), bounded
NUMBER_DFAS_MAX = 1024


def number_dfa(
    integer_only, bounds, modulus, zero_fraction_only, no_exponent=False, frac_only=None, must=None, notmods=()
):
    """The DFA (transitions, accepting) of number texts whose value satisfies every bound and is divisible by
    modulus (an int or None). ``frac_only``: only texts of non-integral values, 4 (draft 4: every text with a
    fraction or exponent, a Python float) or 6 (a nonzero fraction digit, or a negative nonzero exponent).
    ``notmods`` (negated multipleOf): the value is a multiple of none of these; modulus is then only the
    remainder kept (a multiple of each, and of ``must``, the divisor it must have, or None). A value with a
    fraction is a multiple of no integer; an exponent text is taken only with a negative exponent (a value
    below 1), as ``frac_only`` 6 takes it. States are tuples; the alphabet is "-0123456789.eE+"."""
    texts = _NumberTexts(integer_only, bounds, modulus, zero_fraction_only, no_exponent, frac_only, must, notmods)
    trans, acc = texts.explore()
    # minimized (the comparisons keep more than the language needs: 560 states for "maximum": 512, 32 after)
    small = finish([sorted([(ord(c), ord(c), t) for c, t in row.items()]) for row in trans], acc, "minimum")
    return [{chr(c): t for lo, hi, t in row for c in range(lo, hi + 1)} for row in small._trans], list(small._acc)


# the characters step can take in each phase (the others lead nowhere), in the alphabet's order
_CHARS = {"S": "-0123456789", "Z": ".", "I": "0123456789.eE", "F": "0123456789eE", "X": "-0123456789+"}
_KINDS = {"S": 0, "M": 0, "I": 0, "D": 1, "F": 1, "X": 2, "XS": 2, "E": 2}  # move's kind for a digit


class _NumberTexts:
    """The exploration of number_dfa's automaton. A state: (phase, negative, integer digits 0/1/2, remainder or
    None, comparisons' number, nonzero fraction digit seen, negative exponent, nonzero exponent digit seen).

    The comparisons' states, a tuple per bound, are interned: an automaton state holds the small number of its
    tuple, so that hashing states and moves costs no walk of nested tuples. They move alike in many automaton
    states (which differ in sign, remainder, flags): each move computed once."""

    __slots__ = (
        "integer_only",
        "bounds",
        "modulus",
        "zero_fraction_only",
        "no_exponent",
        "frac_only",
        "must",
        "notmods",
        "comps",
        "comp_ids",
        "moves",
        "int_only",
        "settle",
        "flags",
    )

    def __init__(self, integer_only, bounds, modulus, zero_fraction_only, no_exponent, frac_only, must, notmods):
        self.integer_only, self.bounds, self.modulus = integer_only, bounds, modulus
        self.zero_fraction_only, self.no_exponent, self.frac_only = zero_fraction_only, no_exponent, frac_only
        self.must, self.notmods = must, notmods
        self.comps: list = []
        self.comp_ids: dict = {}
        self.moves: dict = {}
        self.int_only = tuple(b.texts == "int" for b in bounds)
        self.settle = any(self.int_only)
        # the flags (nonzero fraction digit, negative exponent, nonzero exponent digit) are read by acceptance only
        # for frac_only 6 and beside notmods: elsewhere kept False, so that they do not multiply the states
        self.flags = frac_only == 6 or bool(notmods)

    def intern(self, bs):
        got = self.comp_ids.get(bs)
        if got is None:
            got = self.comp_ids[bs] = len(self.comps)
            self.comps.append(bs)
        return got

    def move(self, kind, ci, d):
        key = (kind, ci, d)
        got = self.moves.get(key)
        if got is None:
            bounds = self.bounds
            bs = self.comps[ci]
            if kind == 0:
                nb = tuple([b.int_digit(s, d) for b, s in zip(bounds, bs)])
            elif kind == 1:
                nb = tuple([b.frac_digit(s, d) for b, s in zip(bounds, bs)])
            elif kind == 2:
                nb = tuple([b.exp_digit(s, d) for b, s in zip(bounds, bs)])
            elif kind == 3:
                nb = tuple([b.exp_start(s, d) for b, s in zip(bounds, bs)])
            elif kind == 4:
                nb = tuple([b.dot(s) for b, s in zip(bounds, bs)])
            else:
                nb = tuple([b.exp_start(b.dot(s) if d else s, 1) for b, s in zip(bounds, bs)])
            if self.settle and kind in (4, 5):
                # past the integer part (".", or "e" after the integer part), comparisons kept for integer texts
                # only are settled: forget them so that their states do not multiply the automaton's
                nb = tuple([None if io else x for io, x in zip(self.int_only, nb)])
            got = self.moves[key] = self.intern(nb)
        return got

    def step(self, state, ch):
        """The state after ch, or None."""
        phase, xneg, nint, mod, ci, fnz, eneg, enz = state
        if ch == "-":
            if phase == "S":
                return ("M", True, 0, mod, ci, fnz, eneg, enz)
            if phase == "X":
                return ("XS", xneg, nint, mod, self.move(3, ci, -1), fnz, self.flags, enz)
            return None
        if ch == "+":
            if phase == "X":
                return ("XS", xneg, nint, mod, self.move(3, ci, 1), fnz, eneg, enz)
            return None
        if ch == ".":
            if phase in ("Z", "I") and not self.integer_only:
                return ("D", xneg, nint, mod, self.move(4, ci, 0), fnz, eneg, enz)
            return None
        if ch in "eE":
            # exponents only after a normalised mantissa, and never with multipleOf (the package's docstring)
            if (
                phase in ("I", "F")
                and nint == 1
                and not self.integer_only
                and (self.modulus is None or (self.notmods and self.must is None))
                and not self.no_exponent
            ):
                # past the mantissa nint is read no more
                return ("X", xneg, 0, mod, self.move(5, ci, phase == "I"), fnz, eneg, enz)
            return None
        d = ord(ch) - 48
        if phase in ("S", "M"):
            nmod = None if mod is None else d % self.modulus
            # nint: 1 after a first digit that can start a normalised mantissa, 0 after "0"
            return ("Z" if d == 0 else "I", xneg, 0 if d == 0 else 1, nmod, self.move(0, ci, d), fnz, eneg, enz)
        if phase == "I":
            nmod = None if mod is None else (mod * 10 + d) % self.modulus
            return ("I", xneg, min(nint + 1, 2), nmod, self.move(0, ci, d), fnz, eneg, enz)
        if phase in ("D", "F"):
            if self.zero_fraction_only and d != 0:
                return None
            return ("F", xneg, nint, mod, self.move(1, ci, d), fnz or (self.flags and d != 0), eneg, enz)
        if phase in ("X", "XS", "E"):
            return ("E", xneg, nint, mod, self.move(2, ci, d), fnz, eneg, enz or (self.flags and d != 0))
        return None

    def accepting(self, state):
        phase, xneg, nint, mod, ci, fnz, eneg, enz = state
        bs = self.comps[ci]
        frac_only, notmods, must = self.frac_only, self.notmods, self.must
        if phase not in ("Z", "I", "F", "E"):
            return False
        if frac_only == 4 and phase not in ("F", "E"):
            return False
        if frac_only == 6 and not ((phase == "F" and fnz) or (phase == "E" and eneg and enz)):
            return False
        if notmods:
            if phase == "E" and not (eneg and enz):
                return False  # a positive exponent: maybe an integer, maybe a multiple (not taken)
            if phase in ("Z", "I") or (phase == "F" and not fnz):  # an integral value
                if (must is not None and mod % must) or any(mod % q == 0 for q in notmods):
                    return False
            elif must is not None:
                return False
        elif mod is not None and mod != 0:
            return False
        for b, s in zip(self.bounds, bs):
            if not b.result(s, phase, xneg):
                return False
        return True

    def explore(self):
        """(transitions by character, accepting) of every state reachable from the start."""
        start = (
            "S",
            False,
            0,
            None if self.modulus is None else 0,
            self.intern(tuple(b.start() for b in self.bounds)),
            False,
            False,
            False,
        )
        states = {start: 0}
        order = [start]
        trans = []
        i = 0
        while i < len(order):
            st = order[i]
            row = {}
            # without a remainder, a digit acts through the comparisons' move and whether it is 0 alone: digits
            # alike in both lead to the same state, computed once
            kind = _KINDS.get(st[0]) if st[3] is None else None
            alike = {}
            for ch in _CHARS.get(st[0], "0123456789"):
                if kind is not None and "0" <= ch <= "9":
                    key = (self.move(kind, st[4], ord(ch) - 48), ch == "0")
                    nx = alike.get(key, alike)
                    if nx is alike:
                        nx = alike[key] = self.step(st, ch)
                else:
                    nx = self.step(st, ch)
                if nx is None:
                    continue
                if nx not in states:
                    if len(order) >= MAX_STATES:
                        raise Refuse("SchemaLimits", "#", "the number automaton has more than %d states" % MAX_STATES)
                    states[nx] = len(order)
                    order.append(nx)
                row[ch] = states[nx]
            trans.append(row)
            i += 1
        return trans, [self.accepting(s) for s in order]
