# cython: boundscheck=True, wraparound=True, cdivision=False, annotation_typing=False
"""The string emitter: the GBNF of the JSON strings (quotes included, every spelling of every code point) a
StringConstraint leaves: a finite set as its literals; any string of a length; any string but some (the keys of
``additionalProperties``) as a trie; one pattern that is a character class repeated as a repetition; anything
else through its string language (``patterns.str_lang``, ``lang.string_gbnf``, cached per process).

Owns: ``string_expr``, the literal of one string (``str_literal``, one rule per code point spelled), the trie of
excluded strings (its shape kept per process, its rules written per conversion). Must not import the other
emitters.
"""

from __future__ import annotations

from bankml.schema._cstack import check_stack as _check_stack
from bankml.schema.strict.gbnf import (
    SHORT_ESC,
    alternatives,
    canonical_spelling,
    char_class,
    hex_except_steps,
    lit,
    spell_char,
)
from bankml.schema.strict.lang.charsets import UNIVERSE, cs_diff, norm
from bankml.schema.strict.lang.gbnf import charset_gbnf, string_gbnf
from bankml.schema.strict.patterns import (
    GBNF_CACHE,
    PLACEHOLDER,
    cache_put,
    format_alone,
    pattern_run,
    renamed,
    shipped_format_gbnf,
    str_lang,
)
from bankml.schema.strict.vocabulary import Refuse

_QUOTE = '"\\""'


class Strings:
    """The string rules of one conversion (written into ``rules``; ``validator`` says which strings of a finite
    set pass). ``canonical``: each code point in its one canonical spelling (``gbnf.canonical_spelling``), not in
    every spelling."""

    def __init__(self, rules, canonical=False):
        self.rules = rules
        self.canonical = canonical
        self.string_cache = {}  # a StringConstraint's key -> its expression
        self.spell_cache = {}  # code point -> the rule of its spellings
        self.except_cache = {}  # code points -> the rule of one code point but those
        self.key_chains = {}  # the rest of an excluded key -> its trie chain's rule (unbounded keys)
        self.lang_exprs = {}  # a string language's key (GBNF_CACHE's) -> its expression in this grammar

    def link(self, c):
        self.validator = c.validator

    def string_expr(self, st, pointer, keyword=None):
        """A GBNF expression of the JSON strings (quotes included) satisfying st, or None when there is none.
        ``keyword`` names the keyword a refusal of the string language blames (patternProperties for keys)."""
        if st.max is not None and st.min > st.max:
            return None
        if st.include is not None:
            vals = sorted(s for s in st.include if self.validator.str_ok(s, st, pointer))
            if not vals:
                return None
            return alternatives([self.str_literal(s) for s in vals])
        if not st.needs_lang() and not st.exclude:
            inner = self.chars(st.min, st.max, pointer)
            return '"\\"" ' + (inner + " " if inner else "") + '"\\""'
        key = (
            st.min,
            st.max,
            tuple(st.patterns),
            tuple(st.notpatterns),
            tuple(st.formats),
            tuple(st.notformats),
            frozenset(st.exclude),
        )
        cache = self.string_cache
        if key in cache:
            return cache[key]
        if not st.needs_lang() and all(ord(c) <= 0xFFFF for x in st.exclude for c in x):
            # the commonest case (the keys of additionalProperties: any string but the listed names) built
            # here as a trie, much smaller and faster than through the general DFA emitter
            cache[key] = self.excluding_string(st.min, st.max, st.exclude)
            return cache[key]
        # across conversions: the constraint's strings only (no pointers) name it
        gkey = (
            st.min,
            st.max,
            tuple(p for p, _ in st.patterns),
            tuple(p for p, _ in st.notpatterns),
            tuple(f for f, _ in st.formats),
            tuple(f for f, _ in st.notformats),
            frozenset(st.exclude),
            self.canonical,
        )
        if (
            not self.canonical
            and gkey not in GBNF_CACHE
            and gkey[:4] == (0, None, (), ())
            and len(gkey[4]) == 1
            and gkey[5:] == ((), frozenset())
        ):
            # a format and nothing else: its GBNF as shipped, where the file has it
            shipped = shipped_format_gbnf(gkey[4][0])
            if shipped is not None:
                cache_put(GBNF_CACHE, gkey, shipped)
        run = pattern_run(st)
        if run is not None:
            cache[key] = self._run_expr(st, run, pointer)
        else:
            cache[key] = self._lang_expr(st, gkey, pointer, keyword)
        return cache[key]

    def _run_expr(self, st, run, pointer):
        """One pattern whose strings are the runs of one character class (``patterns.pattern_run``): the length
        bounds as a repetition of that class, not as a product automaton of one state per length (the same
        language)."""
        cs, a, b, nl = run
        cls = self.rules.add_rule("strc", charset_gbnf(cs, canonical=self.canonical))
        alts = []
        for extra in range(2 if nl else 1):  # the run alone, then the run and its newline (one more char)
            lo = max(a, st.min - extra)
            hi = b if st.max is None else st.max - extra if b is None else min(b, st.max - extra)
            if hi is not None and lo > hi:
                continue
            parts = [] if hi == 0 else [self.rules.repeat(cls, lo, hi, "maxLength", pointer)]
            if extra:
                parts.append(self.spell("\n"))
            alts.append(" ".join(parts))
        if not alts:
            return None
        body = alts[0] if len(alts) == 1 else "( " + " | ".join(x or '""' for x in alts) + " )"
        return '"\\"" ' + (body + " " if body else "") + '"\\""'

    def _lang_expr(self, st, gkey, pointer, keyword):
        """st through its string language, whose GBNF is cached per process under ``gkey`` (the placeholder
        rule name then renamed for this grammar)."""
        if gkey not in GBNF_CACHE:
            try:
                lang = str_lang(st, pointer)
            except Refuse as e:
                if keyword is not None:
                    raise Refuse(keyword, e.pointer, e.reason) from None
                raise
            alone = None if lang.is_empty() else format_alone(st, lang)
            if lang.is_empty():
                cache_put(GBNF_CACHE, gkey, None)
            elif not self.canonical and alone is not None and shipped_format_gbnf(alone) is not None:
                # the shipped GBNF spells every escape: the exact style's only
                cache_put(GBNF_CACHE, gkey, shipped_format_gbnf(alone))
            else:
                expr, rules = string_gbnf(lang, PLACEHOLDER, canonical=self.canonical)
                cache_put(GBNF_CACHE, gkey, (expr, dict(rules)))
        hit = GBNF_CACHE[gkey]
        if hit is None:
            return None
        # the same language met again in this grammar (date-time in ten places): its rules written once
        expr = self.lang_exprs.get(gkey)
        if expr is None:
            expr, rules = renamed(hit, self.rules.new_name("str"))
            for name, body in rules.items():
                self.rules.set_rule(name, body)
            self.lang_exprs[gkey] = expr
        return expr

    def spell(self, c):
        """The rule of every spelling of the code point c (one rule per code point: keys and enum strings name
        it instead of repeating its escapes)."""
        cache = self.spell_cache
        if c not in cache:
            o = ord(c)
            cache[c] = self.rules.add_rule("c%x" % o, spell_char(c, self.canonical)[2:-2])
        return cache[c]

    def str_literal(self, s):
        """GBNF of the JSON string s (quotes included), every spelling of each of its code points (canonical: its
        one spelling, one literal)."""
        if not s or self.canonical:
            return lit('"' + "".join(map(canonical_spelling, s)) + '"')
        return '"\\"" ' + " ".join(self.spell(c) for c in s) + ' "\\""'

    def excluding_string(self, lo, hi, exclude):
        """JSON strings of lo..hi code points (hi None: unbounded) other than those in exclude (BMP code points
        only): a trie of the excluded strings, each node letting any other code point leave into a free tail."""
        if hi is not None and lo > hi:
            return None
        if hi == 0 and "" in exclude:
            return None
        root = _key_trie(exclude)
        # Unbounded keys: a node that one excluded string passes through is the chain of that string's rest,
        # whose rule depends on the rest alone (not on the depth): made once per compiler, then named. Kubernetes
        # objects' tries share such chains ("piVersion", "etadata"): 3,948 nodes in 88 tries, 1,770 distinct.
        chains = self.key_chains if lo == 0 and hi is None else None
        start = _KeyTrie(self, lo, hi, chains).node(root, 0)
        return None if start is None else _QUOTE + " " + start

    def char_except(self, cs):
        """GBNF of one string code point, in any spelling, other than those of cs (BMP code points)."""
        if not cs:
            return "char"
        cache = self.except_cache
        key = tuple(cs)
        if key in cache:
            return cache[key]
        if self.canonical:
            others = cs_diff(UNIVERSE, norm([(ord(c), ord(c)) for c in cs]))
            cache[key] = self.rules.add_rule("char-except", charset_gbnf(others, canonical=True))
            return cache[key]
        raw = {ord(c) for c in cs if ord(c) >= 0x20 and c not in '"\\'}
        alts = [char_class(raw | {0x22, 0x5C} | set(range(0x20)), negate=True)]
        short = [esc[1] for c, esc in SHORT_ESC.items() if c not in cs]
        alts.append('"\\\\" ' + char_class({ord(x) for x in short}))
        alts.append('"\\\\u" ' + self.hex_except({"%04x" % ord(c) for c in cs}))
        alts.append('"\\\\u" [dD] [89abAB] hex hex "\\\\u" [dD] [c-fC-F] hex hex')
        name = self.rules.add_rule("char-except", " | ".join(alts))
        cache[key] = name
        return name

    def hex_except(self, ex):
        """GBNF of the 4 hex digits (either case) of a code point that is no surrogate and not in ex (a set of
        4-digit lowercase hex strings): a trie over the excluded digits (``hex_except_steps``, its rules made
        here in the order it gives)."""
        steps, root = hex_except_steps(frozenset(ex))
        names = []
        for parts in steps:
            names.append(
                self.rules.add_rule("hex-except", "".join(x if x.__class__ is str else names[x] for x in parts))
            )
        return root if root is None or root.__class__ is str else names[root]

    def chars(self, lo, hi, pointer="#"):
        if hi is not None and hi == 0:
            return None
        return self.rules.repeat("char", lo, hi, "maxLength", pointer)


class _KeyTrie:
    """The walk of excluding_string's trie: a node's rule takes the end of the string (past lo, where no
    excluded string ends), each child's code point then the child's rule, or any other code point then a free
    tail (one rule per depth)."""

    __slots__ = ("strings", "lo", "hi", "chains", "tails")

    def __init__(self, strings, lo, hi, chains):
        self.strings, self.lo, self.hi, self.chains = strings, lo, hi, chains
        self.tails = {}  # the free tail after leaving at a depth

    def node(self, t, depth):
        # each trie node is met once (its depth is its prefix's length)
        _check_stack()
        strings, lo, hi, chains = self.strings, self.lo, self.hi, self.chains
        kids, chars, excluded, passing, first = t
        rest = first[depth:] if chains is not None and passing == 1 else None
        if rest is not None:
            got = chains.get(rest)
            if got is not None:
                return got
        alts = []
        if depth >= lo and not excluded:
            alts.append(_QUOTE)
        if hi is None or depth < hi:
            spells = strings.spell_cache
            for c, kid in kids:
                sub = self.node(kid, depth + 1)
                if sub is not None:
                    sp = spells.get(c)
                    alts.append((sp if sp is not None else strings.spell(c)) + " " + sub)
            tail = self.tails.get(depth)
            if tail is None:
                tail = strings.chars(max(0, lo - depth - 1), None if hi is None else hi - depth - 1)
                tail = self.tails[depth] = strings.rules.add_rule("key-tail", (tail + " " if tail else "") + _QUOTE)
            alts.append(strings.char_except(chars) + " " + tail)
        name = strings.rules.add_rule("key", " | ".join(alts)) if alts else None
        if rest is not None:
            chains[rest] = name
        return name


# Excluded key sets -> their tries, kept per process (bounded, oldest dropped first): the Kubernetes schemas a worker
# converts exclude the same listed names object after object (80-88 of a later one's 81-88 tries met before).
_KEY_TRIES: dict = {}


def _key_trie(exclude):
    """The trie of the strings exclude, as _KeyTrie walks it: a node is (children as (code point, node) in code
    point order, those code points, whether the string ending here is excluded, how many excluded strings pass
    through it or end there, one of them: the string itself where only one does)."""
    key = frozenset(exclude)
    got = _KEY_TRIES.get(key)
    if got is None:
        root = [{}, False, 0, None]
        for x in key:
            t = root
            for c in x:
                nxt = t[0].get(c)
                if nxt is None:
                    nxt = t[0][c] = [{}, False, 0, x]
                nxt[2] += 1
                t = nxt
            t[1] = True
        got = _frozen_trie(root)
        cache_put(_KEY_TRIES, key, got)
    return got


def _frozen_trie(t):
    _check_stack()
    kids, excluded, passing, first = t
    chars = tuple(sorted(kids))
    return tuple((c, _frozen_trie(kids[c])) for c in chars), chars, excluded, passing, first
