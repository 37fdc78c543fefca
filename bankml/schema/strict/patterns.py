# cython: boundscheck=True, wraparound=True, cdivision=False, annotation_typing=False
"""String languages across conversions: a pattern's or a format's Lang, a string constraint's GBNF, and the
formats' GBNF as shipped, kept per process (a server sees the same date-time and uuid formats in schema after
schema); and the Lang of one StringConstraint (``str_lang``), each refusal naming the keyword.

Owns: the process caches of languages and their GBNF (bounded, oldest dropped first), the placeholder rule name
their GBNF is cached under, the shortcut of a pattern that is one character class repeated (``pattern_run``).
Builds on ``lang``; must not import the compiler's parts.
"""

from __future__ import annotations

import uuid
import warnings

from bankml.schema import format_data
from bankml.schema.strict.lang import Lang, LangError, bounds, intersect_all, string_gbnf
from bankml.schema.strict.lang.algebra import bounded
from bankml.schema.strict.lang.format_langs import DATE, HH, MM, OFFSET, SECFRAC, full
from bankml.schema.strict.lang.gbnf import charset_gbnf, piece_gbnf
from bankml.schema.strict.vocabulary import refuse

# Languages and their GBNF are pure functions of the pattern, format or constraint: kept across conversions
# (a server sees the same date-time and uuid formats in schema after schema). Bounded, oldest dropped first.
LANG_CACHE: dict = {}
GBNF_CACHE: dict = {}
_CACHE_MAX = 512
# a name no schema can guess: the replacement below must not touch text inside the rules' literals
PLACEHOLDER = "strc" + uuid.uuid4().hex


def cache_put(cache, key, value):
    if len(cache) >= _CACHE_MAX:
        cache.pop(next(iter(cache)))
    cache[key] = value


def cached_lang(kind, arg):
    key = (kind, arg)
    lang = LANG_CACHE.get(key)
    if lang is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # Python's notes on future regex syntax
            lang = Lang.regex(arg) if kind == "regex" else Lang.format(arg)
        cache_put(LANG_CACHE, key, lang)
    return lang


def pattern_run(st):
    """(cs, a, b, nl) when st's one constraint besides its length is one pattern whose strings are exactly those
    of a..b characters (b None: no bound) of the character set cs, each followed or not by one newline when nl
    (Python's ``$`` matches before a final newline): ``^[\\w.-]+$``, ``^\\d{4}$``. Else None."""
    if len(st.patterns) != 1 or st.notpatterns or st.formats or st.notformats or st.exclude:
        return None
    try:
        lang = cached_lang("regex", st.patterns[0][0])
    except LangError:
        return None  # the general path refuses it, naming the keyword
    trans, acc = lang._trans, lang._acc
    # the state a final newline leads to: accepting, nothing after it
    final = {t for row in trans for lo, hi, t in row if lo == hi == 10 and not trans[t] and acc[t]}
    if len(final) > 1:
        return None
    nl_to = final.pop() if final else -1
    chain = []
    cs = None
    s, loops = 0, False
    while True:
        chain.append(s)
        row = [(lo, hi, t) for lo, hi, t in trans[s] if t != nl_to]
        if acc[s] != (len(row) < len(trans[s])) and nl_to >= 0:
            return None  # the newline must follow exactly the accepted runs
        if len(row) + 1 < len(trans[s]):
            return None
        if not row:
            break
        target = row[0][2]
        ranges = []
        for lo, hi, t in row:
            if t != target:
                return None
            if ranges and ranges[-1][1] + 1 == lo:
                ranges[-1] = (ranges[-1][0], hi)
            else:
                ranges.append((lo, hi))
        ranges = tuple(ranges)
        if cs is None:
            cs = ranges
        elif ranges != cs:
            return None
        if target == s:
            loops = True
            break
        if target in chain:
            return None
        s = target
    if cs is None or len(chain) + (nl_to >= 0) != len(trans):
        return None
    accepting = [acc[x] for x in chain]
    first = accepting.index(True) if True in accepting else None
    if first is None or not all(accepting[first:]):
        return None
    return cs, first, None if loops else len(chain) - 1, nl_to >= 0


def shipped_format_gbnf(name):
    """A format's GBNF from bankml.schema.format_data's file, under PLACEHOLDER as string_expr caches it: what
    ``string_gbnf(Lang.format(name), PLACEHOLDER)`` gives (tests/schema/test_format_data.py checks it)."""
    hit = format_data.load_gbnf(name)
    if hit is None:
        return None
    return renamed(hit, PLACEHOLDER, format_data.GBNF_NAME)


def format_gbnf(name, rule_name):
    """A shipped format's GBNF as the file holds it: ``time_gbnf`` for ``time`` and ``date-time``, else
    string_gbnf of its language."""
    if name in ("time", "date-time"):
        return time_gbnf(rule_name, name == "date-time")
    return string_gbnf(Lang.format(name), rule_name)


def write_format_gbnf():
    """Rebuild bankml/schema/formats-gbnf.json.gz: each shipped format's GBNF (``format_gbnf``; the formats
    format_data ships for the 2020-12 checker), under format_data.GBNF_NAME."""
    entries = {}
    for name, bare in format_data.FORMATS:
        if not bare:
            entries[name] = format_gbnf(name, format_data.GBNF_NAME)
    format_data.write_gbnf(entries)


def time_gbnf(name, date):
    """RFC 3339's ``full-time`` (with ``date``: ``date-time``) as GBNF of parts, the language of
    ``Lang.format``: the date and the times without a leap second through their automata (``piece_gbnf``), the
    leap second as alternatives. ``HH:MM:60`` is a time only where HH:MM less the offset is 23:59 (UTC): per
    local hour and tens of minutes a rule, per minute its two offsets (``+`` the local time plus a minute, ``-``
    23:59 less it) and ``Z`` at 23:59. Its DFA has 11,049 states (434 kB of GBNF), the product of every local
    time with the fraction of a second read between it and its offset; here ~1,440 short alternatives."""
    rules = {}
    quote = '"\\""'

    def ch(c):  # one character in every JSON spelling, a rule of its own (a digit's rule named by the digit)
        r = "%s-%s" % (name, c if c.isdigit() else "k%x" % ord(c))
        if r not in rules:
            rules[r] = charset_gbnf(((ord(c), ord(c)),))
        return r

    def last(d):  # the offset's last digit and the closing quote
        r = "%s-e%d" % (name, d)
        if r not in rules:
            rules[r] = "%s %s" % (ch(str(d)), quote)
        return r

    def two(n):
        return "%s %s" % (ch(str(n // 10)), ch(str(n % 10)))

    frac = "%s-f" % name
    rules[frac] = "( %s %s-d+ )?" % (ch("."), name)
    rules["%s-d" % name] = charset_gbnf(((0x30, 0x39),))
    sec = "%s-s" % name
    rules[sec] = "%s %s %s %s" % (ch(":"), ch("6"), ch("0"), frac)

    def offset(sign, hour, tens):  # the offset up to its last digit, after the seconds
        r = "%s-%s%d-%d" % (name, "p" if sign == "+" else "m", hour, tens)
        if r not in rules:
            rules[r] = "%s %s %s %s %s" % (sec, ch(sign), two(hour), ch(":"), ch(str(tens)))
        return r

    hours = []
    for h in range(24):
        tens = []
        for a in range(6):
            alts = []
            for b in range(10):
                m = h * 60 + a * 10 + b
                plus, minus = (m + 1) % 1440, 23 * 60 + 59 - m
                p_h, p_m, m_h, m_m = plus // 60, plus % 60, minus // 60, minus % 60
                ways = [
                    "%s %s" % (offset("+", p_h, p_m // 10), last(p_m % 10)),
                    "%s %s" % (offset("-", m_h, m_m // 10), last(m_m % 10)),
                ]
                if m == 23 * 60 + 59:
                    ways.append("%s %s %s" % (sec, "%s-z" % name, quote))
                    rules["%s-z" % name] = charset_gbnf(((0x5A, 0x5A), (0x7A, 0x7A)))
                alts.append("%s ( %s )" % (ch(str(b)), " | ".join(ways)))
            r = "%s-l%d-%d" % (name, h, a)
            rules[r] = " | ".join(alts)
            tens.append("%s %s" % (ch(str(a)), r))
        r = "%s-l%d" % (name, h)
        rules[r] = " | ".join(tens)
        hours.append("%s %s %s" % (two(h), ch(":"), r))
    leap = "%s-leap" % name
    rules[leap] = " | ".join(hours)
    plain_start, plain = piece_gbnf(full(r"%s:%s:[0-5][0-9]%s%s" % (HH, MM, SECFRAC, OFFSET)), name + "-t", quote)
    rules.update(plain)
    time = "%s-time" % name
    rules[time] = "%s | %s" % (plain_start, leap)
    if not date:
        return '"\\"" ' + time, rules
    date_start, date_rules = piece_gbnf(full(DATE + "[tT]"), name + "-date", time)
    rules.update(date_rules)
    return '"\\"" ' + date_start, rules


def renamed(hit, name, old=PLACEHOLDER):
    """A string_gbnf result made under the rule name prefix ``old`` (the cache's placeholder, or the shipped
    formats' name) under the prefix ``name``."""
    expr, rules = hit
    # rule names are the prefix then "-...": nothing else in GBNF text spells it
    return (
        expr.replace(old, name),
        {k.replace(old, name, 1): v.replace(old, name) for k, v in rules.items()},
    )


def format_lang(f, pointer):
    """The Lang of the format f, or a refusal naming it at pointer."""
    try:
        return cached_lang("format", f)
    except LangError as e:
        refuse("format", pointer, "format %r: %s" % (f, getattr(e, "reason", e)))


def str_lang(st, pointer):
    """The Lang of a StringConstraint (through the string-language module). A format's length bounds are applied
    to the intersection of its parts by ``lang.bounded`` (a state counted only while the bound can cut one of its
    continuations), and a format's constructions may use ``bounds.FORMAT_SCALE`` times the state bound: an
    address language of 172 states beside ``maxLength: 1024`` is 11,892 states, not a product of 175,000."""
    kw = (
        (st.patterns and "pattern")
        or (st.formats and "format")
        or (st.notpatterns and "not")
        or (st.notformats and "not")
        or "additionalProperties"
    )
    kp = (st.patterns or st.formats or st.notpatterns or st.notformats or [(None, pointer)])[0][1]
    fmt = bool(st.formats or st.notformats)
    counted = st.min > 0 or st.max is not None
    parts = []  # (language, negated), intersected in one product (lang.intersect_all)
    try:
        if counted and not fmt:
            parts.append((Lang.length(st.min, st.max), False))
        for p, kp in st.patterns:
            parts.append((cached_lang("regex", p), False))
        for p, kp in st.notpatterns:
            parts.append((cached_lang("regex", p), True))
        for f, kp in st.formats:
            parts.append((cached_lang("format", f), False))
        for f, kp in st.notformats:
            parts.append((cached_lang("format", f), True))
        if st.exclude:
            parts.append((Lang.literals(st.exclude), True))
    except LangError as e:
        _refuse_lang(e, kw, kp)
    if not fmt:
        try:
            return intersect_all(parts)
        except LangError as e:
            _refuse_lang(e, kw, kp)
    bounds.set_scale(bounds.FORMAT_SCALE)
    try:
        lang = intersect_all(parts)
    except LangError as e:
        _refuse_lang(e, kw, kp)
    else:
        if counted:
            try:
                lang = bounded(lang, st.min, st.max)
            except LangError as e:
                fp = (st.formats or st.notformats)[0]
                refuse(
                    "format",
                    fp[1],
                    "format %r beside minLength %d / maxLength %s: %s"
                    % (fp[0], st.min, "none" if st.max is None else st.max, e.reason),
                )
    finally:
        bounds.set_scale(1)
    return lang


def format_alone(st, lang):
    """The one format whose language ``lang`` is, when st has exactly one format and ``lang`` (its intersection
    with the other keywords) is that format's whole language (``minLength: 1`` beside ``date-time``): its GBNF
    as shipped then serves. Else None."""
    if len(st.formats) != 1 or st.notformats:
        return None
    name = st.formats[0][0]
    try:
        whole = cached_lang("format", name)
    except LangError:
        return None
    return name if whole == lang else None


def _refuse_lang(e, kw, kp):
    k = getattr(e, "keyword", None) or kw
    if k == "allOf":  # the language module's name for an intersection: here, the string's keywords
        k = kw
    refuse(k, kp, "%s: %s" % (k, getattr(e, "reason", e)))
