"""bankml.schema.strict.lang: regular languages of JSON-Schema strings, checked against their oracles.

The oracles are Python's ``re.search`` (``pattern``), ``len()`` (``minLength``/``maxLength``) and
the ``jsonschema`` format checkers themselves; the GBNF is checked end to end through bankml's
parser and matcher on JSON texts written in every encoding JSON allows.
"""

import importlib
import json
import random
import re
import subprocess
import sys
import textwrap
import uuid as uuidlib
from datetime import timezone

import jsonschema  # the oracle (the test extra installs it)
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bankml import Grammar, GrammarError, Rules, Vocab
from bankml.schema.strict.lang import Lang, LangError, intersect_all, is_known_format, string_gbnf

from .. import spec_oracle

FC_2020 = jsonschema.Draft202012Validator.FORMAT_CHECKER
FC_CLASS = jsonschema.FormatChecker()

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

ALPHABET = list('ab1_- \n\t"\\/@.:éK\u212aß😀')


def search(p, s):
    return re.search(p, s) is not None


def mutations(s, rnd, alphabet=ALPHABET, n=6):
    """Strings one or two edits away from s (insert, delete, replace, swap)."""
    out = []
    for _ in range(n):
        t = list(s)
        for _ in range(rnd.randint(1, 2)):
            op = rnd.randrange(4)
            i = rnd.randrange(len(t) + 1)
            if op == 0:
                t.insert(i, rnd.choice(alphabet))
            elif t and op == 1:
                del t[min(i, len(t) - 1)]
            elif t and op == 2:
                t[min(i, len(t) - 1)] = rnd.choice(alphabet)
            elif len(t) > 1:
                j = min(i, len(t) - 2)
                t[j], t[j + 1] = t[j + 1], t[j]
        out.append("".join(t))
    return out


# ----------------------------------------------------------------------------------- algebra

PATTERNS = [
    r"^[a-z0-9_-]{3,16}$",
    r"^\d{3}-\d{4}$",
    r"^(\([0-9]{3}\))?[0-9]{3}-[0-9]{4}$",
    r"^[A-Z][a-z]+(?: [A-Z][a-z]+)*$",
    r"^[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\.[a-zA-Z]{2,}$",
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)"
    r"(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$",
    r"^#?([a-fA-F0-9]{6}|[a-fA-F0-9]{3})$",
    r"^https?://",
    r"\.json$",
    r"^\S+$",
    r"^[^\s@]+@[^\s@]+$",
    r"^\+?[1-9]\d{1,14}$",
    r"^[A-Z]{2}$",
    r"^(?!)",
    r"ab|ba",
    r"\bword\b",
    r"\Bx",
    r"(?m)^a$",
    r"(?i)^[a-k]+$",
    r"(?s)a.b",
    r"a.b",
    r"^$",
    r"\Aa\Z",
    r"(?a)^\w+$",
    r"^\w+$",
    r"x*?y+?",
    r"(?x) a  b # comment",
    r"[\u00e9-\u00ff]{2}",
    r"\U0001F600",
    r"[^\x00-\x7f]",
]


def test_refinements_are_the_languages_of_re():
    rnd = random.Random(1)
    for p in PATTERNS:
        if "(?!" in p:
            continue
        lang = Lang.regex(p)
        for _ in range(300):
            s = "".join(rnd.choice(ALPHABET + list("xyzAZ09#")) for _ in range(rnd.randint(0, 7)))
            assert lang.matches(s) == search(p, s), (p, s)


def test_boolean_laws_against_re():
    rnd = random.Random(2)
    pairs = [(r"^[ab]+$", r"a"), (r"\d", r"^.{2,4}$"), (r"^a", r"b$"), (r"\bab", r"(?m)^b")]
    for p, q in pairs:
        a, b = Lang.regex(p), Lang.regex(q)
        both, either, diff, neg = a & b, a | b, a - b, a.complement()
        assert neg.complement() == a
        assert (a | neg).is_universal() and (a & neg).is_empty()
        assert (a & b).complement() == (a.complement() | b.complement())  # De Morgan
        for _ in range(400):
            s = "".join(rnd.choice("ab1 \n") for _ in range(rnd.randint(0, 6)))
            x, y = search(p, s), search(q, s)
            assert both.matches(s) == (x and y)
            assert either.matches(s) == (x or y)
            assert diff.matches(s) == (x and not y)
            assert neg.matches(s) == (not x)


def test_canonical_equality_and_queries():
    assert Lang.regex("^(a|b)$") == Lang.regex("^[ab]$")
    assert Lang.regex("^a*$") != Lang.regex("^a+$")
    assert Lang.regex("x^").is_empty()
    assert Lang.regex("").is_universal()
    assert Lang.regex("^(abc|de)$").is_finite()
    assert not Lang.regex("^a+$").is_finite()
    assert Lang.literal("héllo😀").matches("héllo😀")
    assert not Lang.literal("ab").matches("abc")
    lit = Lang.literal("k1") | Lang.literal("k2")
    assert lit.is_finite() and lit.matches("k2") and not lit.matches("k3")
    assert (Lang.regex("^[a-z]{2,}$") & Lang.length(0, 3)).example() == "aa"
    keys = (Lang.literal("a") | Lang.literal("b") | Lang.regex("^x-")).complement()
    assert keys.matches("c") and not keys.matches("a") and not keys.matches("x-y")
    assert Lang.literal("ab").concat(Lang.regex(r"^\d+$")).matches("ab12")
    assert not Lang.literal("ab").concat(Lang.regex(r"^\d+$")).matches("ab")


def test_length_counts_code_points():
    lang = Lang.length(2, 3)
    for s, ok in [("a", False), ("ab", True), ("😀😀", True), ("😀😀😀", True), ("abcd", False)]:
        assert lang.matches(s) == ok
    assert Lang.length(2).matches("x" * 50) and not Lang.length(2).matches("x")
    assert Lang.length(3, 2).is_empty()


def test_refusals_name_the_feature():
    for p, word in [
        (r"a(?=b)", "lookahead"),
        (r"(?<=a)b", "lookbehind"),
        (r"(a)\1", "backreference"),
        (r"(a)?(?(1)b|c)", "conditional"),
        (r"(?>a)", "atomic"),
        (r"a*+", "possessive"),
        (r"(", "rejects"),
        (r"a{2,1}", "rejects"),
    ]:
        with pytest.raises(LangError) as e:
            Lang.regex(p)
        assert e.value.keyword == "pattern" and word in e.value.reason, (p, e.value.reason)


# ----------------------------------------------------------------------------------- hypothesis

ATOMS = ["a", "b", "1", "[ab]", "[^a]", r"\d", r"\w", r"\s", r"\W", ".", "é", "K", "(?:)", r"\n"]
ANCHORS = ["^", "$", r"\b", r"\B", r"\A", r"\Z"]
QUANTS = ["*", "+", "?", "{2}", "{0,2}", "{1,}", "*?", "+?", "??"]


def regexes():
    leaf = st.sampled_from(ATOMS) | st.sampled_from(ANCHORS)

    def extend(inner):
        return (
            st.lists(inner, min_size=1, max_size=3).map("".join)
            | st.tuples(inner, inner).map(lambda t: "(?:%s|%s)" % t)
            | st.tuples(inner, st.sampled_from(QUANTS)).map(lambda t: "(?:%s)%s" % t)
            | inner.map(lambda x: "(%s)" % x)
        )

    body = st.recursive(leaf, extend, max_leaves=6)
    return st.tuples(st.sampled_from(["", "(?i)", "(?m)", "(?s)", "(?a)"]), body).map("".join)


@SETTINGS
@given(regexes(), st.lists(st.text(alphabet="ab1 é\nK_-", max_size=6), min_size=30, max_size=30))
def test_random_patterns_match_re(pattern, strings):
    lang = Lang.regex(pattern)
    for s in strings:
        assert lang.matches(s) == search(pattern, s), (pattern, s)


@SETTINGS
@given(
    st.lists(st.tuples(regexes(), st.booleans()), min_size=2, max_size=4), st.sampled_from([None, (0, 4), (2, None)])
)
def test_intersect_all_is_the_pairwise_intersection(parts, bounds):
    """One product over every part (``intersect_all``) gives the canonical DFA of the pairwise products and
    complements in the same order, identical tables: the strict compiler's string keywords meet there."""
    langs = [(Lang.regex(p), neg) for p, neg in parts]
    if bounds is not None:
        langs.insert(0, (Lang.length(*bounds), False))
    want = None
    for lang, neg in langs:
        lang = lang.complement() if neg else lang
        want = lang if want is None else want & lang
    got = intersect_all(langs)
    assert got == want and got._trans == want._trans and got._acc == want._acc


@SETTINGS
@given(regexes(), st.integers(0, 6), st.one_of(st.none(), st.integers(0, 12)))
def test_bounded_is_the_product_with_a_length(pattern, lo, hi):
    """``bounded`` (a state counted only while the bound can cut its continuations) is the product with the
    length language: the same canonical DFA."""
    from bankml.schema.strict.lang.algebra import bounded

    lang = Lang.regex(pattern)
    got = bounded(lang, lo, hi)
    want = lang & Lang.length(lo, hi)
    assert got == want and got._trans == want._trans and got._acc == want._acc


@pytest.mark.parametrize("fmt,lo,hi", [("email", 0, 64), ("email", 3, 40), ("uri", 0, 30), ("date-time", 1, None)])
def test_bounded_formats(fmt, lo, hi):
    """A format beside length bounds: the product's language, with fewer states made (the email address
    language of 172 states beside maxLength 64 made 11,000 product states before minimizing)."""
    from bankml.schema.strict.lang import bounds
    from bankml.schema.strict.lang.algebra import bounded

    lang = Lang.format(fmt)
    bounds.set_scale(bounds.FORMAT_SCALE)
    try:
        got = bounded(lang, lo, hi)
        want = intersect_all([(Lang.length(lo, hi), False), (lang, False)]) if hi is not None else lang
    finally:
        bounds.set_scale(1)
    assert got == want


@pytest.mark.parametrize(
    "limit", [12, 25, 30, 40, 200]
)  # 30: past the bound for the one product, not for the pairwise ones
def test_intersect_all_past_the_state_bound_goes_pairwise(monkeypatch, limit):
    """A product past the state bound is done again pairwise, in order: the same language, or the same refusal
    as the pairwise products give (the strict compiler's verdicts do not depend on the one product)."""
    from bankml.schema.strict.lang import bounds

    parts = [
        (Lang.length(0, 9), False),
        (Lang.regex(r"\A[a-c0-9]*\Z"), False),
        (Lang.regex("ab"), True),
        (Lang.literals(["a1", "b22", "c333"]), True),
    ]
    monkeypatch.setattr(bounds, "MAX_STATES", limit)

    def outcome(fn):
        try:
            return fn()
        except LangError as e:
            return str(e)

    def pairwise():
        lang = None
        for part, neg in parts:
            part = part.complement() if neg else part
            lang = part if lang is None else lang & part
        return lang

    assert outcome(lambda: intersect_all(parts)) == outcome(pairwise)


BOUNDS = [(0, None), (0, 5), (3, 8), (4, 4), (10, 40)]


@SETTINGS
@given(st.sampled_from(PATTERNS[:13]), st.sampled_from(BOUNDS), st.data())
def test_patterns_with_length_bounds(pattern, bounds, data):
    lo, hi = bounds
    lang = Lang.regex(pattern) & Lang.length(lo, hi)
    rnd = random.Random(data.draw(st.integers(0, 10**6)))
    for _ in range(8):
        s = data.draw(st.from_regex(pattern))
        for t in [s] + mutations(s, rnd):
            want = search(pattern, t) and lo <= len(t) <= (hi if hi is not None else 10**9)
            assert lang.matches(t) == want, (pattern, bounds, t)


# ----------------------------------------------------------------------------------- GBNF

SHORT = {'"': '\\"', "\\": "\\\\", "/": "\\/", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def json_text(s, rnd):
    """One of the many JSON texts of the string s, each character written a random legal way."""
    out = ['"']
    for ch in s:
        c = ord(ch)
        ways = []
        if ch not in '"\\' and c >= 0x20:
            ways.append(ch)
        if ch in SHORT:
            ways.append(SHORT[ch])
        if c <= 0xFFFF:
            ways.append("\\u%04x" % c)
            ways.append("\\u%04X" % c)
        else:
            v = c - 0x10000
            hi, lo = 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF)
            ways.append("\\u%04x\\u%04X" % (hi, lo))
            ways.append("\\u%04X\\u%04x" % (hi, lo))
        out.append(rnd.choice(ways))
    out.append('"')
    text = "".join(out)
    assert json.loads(text) == s
    return text


def rules_for(lang, admit_surrogates=False):
    expr, rules = string_gbnf(lang, "str", admit_surrogates=admit_surrogates)
    assert all(k.startswith("str-") and re.fullmatch(r"[a-zA-Z0-9-]+", k) for k in rules)
    text = "root ::= " + expr + "\n" + "".join(f"{k} ::= {v}\n" for k, v in rules.items())
    return Rules.parse(text)


def grammar_accepts(rules, text: str) -> bool:
    g = Grammar(rules)
    try:
        g.accept_bytes(text.encode("utf-8"))
    except GrammarError:
        return False
    return g.complete


GBNF_CASES = [
    (r"^[a-z0-9_-]{3,16}$", 0, None),
    (r"^\d{3}-\d{4}$", 0, None),
    (r"^\S+$", 0, 6),
    (r"é|😀|\"|\\|/", 0, None),
    (r"^[^a]*$", 2, 4),
    (r"(?i)^k+$", 0, None),
    (r"\n$", 0, None),
]


@pytest.mark.parametrize("pattern,lo,hi", GBNF_CASES)
def test_gbnf_accepts_exactly_the_json_texts(pattern, lo, hi):
    lang = Lang.regex(pattern) & Lang.length(lo, hi)
    rules = rules_for(lang)
    rnd = random.Random(pattern)
    strings = ["", "abc", "123-4567", "é", "😀", '"', "\\", "/", "a b", "x" * 17, "\n", "\b\f\r\t", "K\u212ak"]
    for s in list(strings):
        strings += mutations(s, rnd, n=3)
    for s in strings:
        want = lang.matches(s)
        assert want == (search(pattern, s) and lo <= len(s) <= (hi or 10**9))
        texts = {json.dumps(s), json.dumps(s, ensure_ascii=False)} | {json_text(s, rnd) for _ in range(3)}
        for text in texts:
            assert grammar_accepts(rules, text) == want, (pattern, s, text)


def test_gbnf_rejects_malformed_escapes_and_lone_surrogates():
    rules = rules_for(Lang.any_string())
    for text in [
        '"\\x41"',
        '"\\u12"',
        '"\\ud800"',
        '"\\udc00"',
        '"\\ud83d\\u0041"',
        '"\\U0001F600"',
        '"\x01"',
        '"a',
        '"\\"',
        '"\\a"',
    ]:
        assert not grammar_accepts(rules, text), text
    for text in ['"\\ud83d\\ude00"', '"\\uD83D\\uDE00"', '"\\u0000"', '"\x7f"', '"\u2028"']:
        assert grammar_accepts(rules, text), text
    none = rules_for(Lang.empty())
    assert not grammar_accepts(none, '""')


@SETTINGS
@given(
    regexes(), st.lists(st.text(alphabet='ab1 é\nK"\\😀', max_size=5), min_size=10, max_size=10), st.integers(0, 1000)
)
def test_gbnf_random_patterns(pattern, strings, seed):
    lang = Lang.regex(pattern)
    rules = rules_for(lang)
    rnd = random.Random(seed)
    for s in strings:
        assert grammar_accepts(rules, json_text(s, rnd)) == search(pattern, s), (pattern, s)


def test_gbnf_masks_with_a_real_vocabulary():
    vocab = Vocab.from_gguf("tests/data/ggml-vocab-llama-bpe.gguf")
    lang = Lang.regex(r"^[a-z0-9_-]{3,16}$") & Lang.format("date").complement()
    expr, rules = string_gbnf(lang, "s")
    text = "root ::= " + expr + "\n" + "".join(f"{k} ::= {v}\n" for k, v in rules.items())
    parsed = Rules.parse(text, vocab=vocab)
    width = (len(vocab) + 31) // 32
    rnd = random.Random(5)
    for prefix in [b"", b'"', b'"ab', b'"abc', b'"abcdefghijklmnop', b'"a\\u0062']:
        g = Grammar(parsed, vocab)
        g.accept_bytes(prefix)
        mask = np.zeros(width, dtype=np.int32)
        g.fill_next_token_bitmask(mask)
        bits = np.unpackbits(mask.view(np.uint8), bitorder="little")[: len(vocab)].astype(bool)
        assert bits.any()
        ids = list(range(len(vocab)))
        for tid in rnd.sample(ids, 400) + [int(i) for i in np.flatnonzero(bits)[:50]]:
            piece = vocab.piece(tid)
            if not piece or vocab.is_eog(tid):
                continue
            try:
                piece.decode("utf-8")
            except UnicodeDecodeError:
                continue  # a partial character: the matcher may hold it pending, not a verdict
            h = Grammar(parsed, vocab)
            try:
                h.accept_bytes(prefix + piece)
                ok = True
            except GrammarError:
                ok = False
            assert ok == bool(bits[tid]), (prefix, piece)


# ----------------------------------------------------------------------------------- formats


def oracle(fmt, s):
    """The format as the suite reads its RFC (tests/spec_oracle.py's procedures), else jsonschema's checker."""
    return spec_oracle.format_conforms(fmt, s)


def require_checker(fmt):
    """Fail unless jsonschema checks fmt the way bankml models it (the [format] extras installed;
    uri/iri through rfc3987, as jsonschema prefers when it is importable): the oracle must be there."""
    assert fmt in FC_2020.checkers, f"jsonschema has no {fmt!r} checker here (install jsonschema[format])"
    if fmt in ("uri", "uri-reference", "iri", "iri-reference"):
        importlib.import_module("rfc3987")


FORMAT_ALPHABETS = {
    "date": "0123456789-T\n ٣",
    "date-time": "0123456789-:TtZz.+\n ٣",
    "time": "0123456789-:Zz.+\n",
    "duration": "0123456789PYMWDTHS.,eE+-ty \n",
    "email": "ab@.\n",
    "idn-email": "ab@.é",
    "ipv4": "0123456789.\n /",
    "ipv6": "0123456789abcdefABCDEFg:.%/ \n",
    "uri": "ab09:/?#[]@!$&'()*+,;=%-._~ \né\n",
    "uri-reference": "ab09:/?#[]@%-._ \n",
    "uuid": "0123456789abcdefABCDEF-{}urn:id_xX +\t٣",
    "iri": "ab09:/?#[]@%-._ é\ue000\U000e1000\U000e0fff\ufdd0\n",
    "iri-reference": "ab09:/?#[]@%-._ é\ue000\U000e1000\ufffe\n",
    "json-pointer": "ab/~01\n2",
}

FORMAT_EXAMPLES = {
    "date": [
        "2020-02-29",
        "2019-02-29",
        "1900-02-29",
        "2000-02-29",
        "0000-01-01",
        "0001-01-01",
        "2020-13-01",
        "2020-04-31",
        "2020-04-30\n",
        "٢٠٢٠-01-01",
    ],
    "date-time": [
        "2020-02-29T12:00:00Z",
        "2020-02-29t12:00:00z",
        "2020-02-29T12:00:00.5+01:00",
        "2020-02-29T12:00:00Z\n",
        "2019-02-29T12:00:00Z",
        "2020-02-29T24:00:00Z",
        "0000-01-01T00:00:00Z",
        "2020-01-01 00:00:00Z",
        "2020-01-01T00:00:60Z",
    ],
    "time": ["12:00:00Z", "12:00:00z", "12:00:00", "23:59:60Z", "12:00:00.123-05:30\n", "24:00:00Z"],
    "duration": [
        "P1D",
        "PT1H",
        "P1Y2M3DT4H5M6S",
        "P1W",
        "P0D1W",
        "P1D1W",
        "P",
        "PT",
        "P1DT",
        "-P1D",
        "P1.5D",
        "P1,5D",
        "P1D5T1H",
        "P5T1H",
        "P,T1H",
        "P1E3D",
        "PT1H1H",
        "P1M1Y",
        "P0.0e5Y2W",
        "+PT0S",
    ],
    "email": ["a@b", "ab", "", "@"],
    "idn-email": ["é@x", "x"],
    "ipv4": ["1.2.3.4", "01.2.3.4", "256.1.1.1", "1.2.3", "1.2.3.4\n", "0.0.0.0", "255.255.255.255"],
    "ipv6": [
        "::",
        "::1",
        "1::",
        "1:2:3:4:5:6:7:8",
        "1:2:3:4:5:6:7::",
        "::1.2.3.4",
        "1::2:3:4:5:6:7:8",
        ":::",
        "fe80::1%eth0",
        "1:2:3:4:5:6:1.2.3.4",
        "::ffff:01.2.3.4",
        "::1\n",
        "1:2:3:4:5:6:7:8:9",
    ],
    "uri": [
        "http://a/b?c#d",
        "a:",
        "1a:b",
        "http://[::1]/",
        "http://[::01.2.3.4]/",
        "//a",
        "http://a b",
        "mailto:x@y.z\n",
        "urn:isbn:1",
        "http://[v1.x]/",
        "http://é",
    ],
    "uri-reference": ["//a", "a/b", "#f", "?q", "a:b:c", "", "%zz", "%41", ":a", "a b"],
    "iri": ["http://é.com/ü?q=\ue000#f", "http://a/\ue000", "a:", "http://[::1]/é", "http://a b", "x:\ufdd0"],
    "iri-reference": ["é/ü", "//é", "#\ue000", "?\ue000", "\U000e1000", "\U000e0fff", ""],
    "json-pointer": ["", "/", "/a~0", "~", "/~2", "/a~", "a", "/a~\n", "/a\n", "/~1/x~"],
    "uuid": [
        "12345678-1234-1234-1234-123456789abc",
        "12345678-1234-1234-1234-123456789ABC",
        "12345678123412341234123456789abc",
        "{12345678-1234-1234-1234-123456789abc}",
        "urn:uuid:12345678-1234-1234-1234-123456789abc",
        "12345678-1234-1234-1234-1234567_89ab",
        "1234567--1234-1234-1234-123456789abc",
        "12345678-1234-1234-1234-123456789abcd",
        "0x345678-1234-1234-1234-123456789abc",
        "+2345678-1234-1234-1234-123456789abc",
        " 2345678-1234-1234-1234-123456789abc",
        "12345678-1234-1234-1234-12345678٩abc",
    ],
}


def format_strategy(fmt):
    loose = {
        "date": r"\A[0-9]{4}-[0-9]{2}-[0-9]{2}\n?\Z",
        "date-time": r"\A[0-9]{4}-[01][0-9]-[0-3][0-9][Tt][0-2][0-9]:[0-5][0-9]:[0-6][0-9](\.[0-9]{1,3})?"
        r"([Zz]|[+-][0-2][0-9]:[0-5][0-9])\n?\Z",
        "time": r"\A[0-2][0-9]:[0-5][0-9]:[0-6][0-9](\.[0-9]{1,3})?([Zz]|[+-][0-2][0-9]:[0-5][0-9])?\n?\Z",
        "duration": r"\A[+-]?P([0-9.,eE+-]{0,3}[YMWD]){0,3}(T([0-9.,eE]{0,3}[HMS]){0,3})?\Z",
        "email": r"\A[a-z@.]{0,6}\Z",
        "idn-email": r"\A[a-zé@.]{0,6}\Z",
        "ipv4": r"\A[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}\Z",
        "ipv6": r"\A([0-9a-f]{0,4}:){2,8}([0-9a-f]{0,4}|[0-9]{1,3}(\.[0-9]{1,3}){3})\Z",
        "uri": r"\A[a-z][a-z0-9+.-]{0,4}:(//[a-z0-9.@:\[\]]{0,8})?(/[a-z0-9%._~!$&'()*+,;=:@-]{0,6}){0,3}"
        r"(\?[a-z0-9=&/?]{0,5})?(#[a-z0-9/?]{0,4})?\Z",
        "iri": r"\A[a-z][a-z0-9+.-]{0,4}:(//[a-zé0-9.@:\[\]]{0,8})?(/[a-zü0-9%._~!$&'()*+,;=:@-]{0,6}){0,3}"
        r"(\?[a-z0-9=&/?\ue000]{0,5})?(#[a-z0-9/?]{0,4})?\Z",
        "iri-reference": r"\A([a-z]{1,3}:)?(//[a-zé0-9.@:]{0,6})?(/?[a-z0-9%.:@\u00e0-\u00ff-]{0,5}){0,3}"
        r"(\?[a-z=&\ue000]{0,4})?(#[a-z]{0,3})?\Z",
        "json-pointer": r"\A(/([a-z]|~[0-2])*){0,3}~?\n?\Z",
        "uri-reference": r"\A([a-z]{1,3}:)?(//[a-z0-9.@:]{0,6})?(/?[a-z0-9%.:@-]{0,5}){0,3}(\?[a-z=&]{0,4})?"
        r"(#[a-z]{0,3})?\Z",
    }
    if fmt == "uuid":

        def dress(t):
            u, how = t
            s = str(u)
            if how & 1:
                s = s.upper()
            if how & 2:
                s = "{" + s + "}"
            if how & 4:
                s = "urn:uuid:" + s
            if how & 8:
                s = s[:30] + "_" + s[30:-1]
            return s

        return st.tuples(st.uuids(), st.integers(0, 15)).map(dress)
    if fmt == "date-time":
        return st.datetimes(timezones=st.just(timezone.utc)).map(lambda d: d.isoformat()) | st.from_regex(loose[fmt])
    if fmt == "date":
        return st.dates().map(lambda d: d.isoformat()) | st.from_regex(loose[fmt])
    if fmt == "ipv4":
        return st.ip_addresses(v=4).map(str) | st.from_regex(loose[fmt])
    if fmt == "ipv6":
        return (
            st.ip_addresses(v=6).map(str) | st.ip_addresses(v=6).map(lambda a: a.exploded) | st.from_regex(loose[fmt])
        )
    return st.from_regex(loose[fmt])


FORMATS = [
    "date",
    "date-time",
    "time",
    "duration",
    "email",
    "ipv4",
    "ipv6",
    "uri",
    "uri-reference",
    "iri",
    "iri-reference",
    "json-pointer",
    "uuid",
]


@pytest.mark.parametrize("fmt", FORMATS)
def test_format_examples(fmt):
    require_checker(fmt)
    lang = Lang.format(fmt)
    assert is_known_format(fmt)
    for s in FORMAT_EXAMPLES[fmt]:
        assert lang.matches(s) == oracle(fmt, s), (fmt, s)


@pytest.mark.parametrize("fmt", FORMATS)
def test_format_generated_and_mutated(fmt):
    require_checker(fmt)
    lang = Lang.format(fmt)
    strategy = format_strategy(fmt)

    @settings(
        max_examples=150,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    @given(strategy, st.integers(0, 10**6))
    def check(s, seed):
        rnd = random.Random(seed)
        for t in [s] + mutations(s, rnd, alphabet=FORMAT_ALPHABETS[fmt], n=8):
            assert lang.matches(t) == oracle(fmt, t), (fmt, t)

    check()


def test_format_accepts_as_many_as_it_should():
    """Guard against a vacuous pass: generated valid instances are mostly accepted."""
    for fmt in ("date", "date-time", "ipv6", "uuid", "uri", "duration", "time"):
        require_checker(fmt)
    for fmt, good in [
        ("date", "2024-02-29"),
        ("date-time", "2024-02-29T01:02:03.5Z"),
        ("ipv6", "::ffff:1.2.3.4"),
        ("uuid", str(uuidlib.UUID(int=12345))),
        ("uri", "https://x.org/a?b#c"),
        ("duration", "P3Y6M4DT12H30M5S"),
        ("time", "01:02:03+05:00"),
    ]:
        assert oracle(fmt, good) and Lang.format(fmt).matches(good)


def test_draft3_time_of_the_class_level_checker():
    lang = Lang.format("time", draft3_time=True)
    rnd = random.Random(7)
    base = ["1:2:3", "01:02:03", "23:59:59", "24:00:00", "00:00:60", "٢:00:00", "1٣:00:00", "12:00:00Z", "1:2:3\n"]
    for s in base + [m for b in base for m in mutations(b, rnd, alphabet="0123456789:٣ Z\n", n=20)]:
        assert lang.matches(s) == FC_CLASS.conforms(s, "time"), s


def test_color_of_the_class_level_checker():
    importlib.import_module("webcolors")  # the oracle's color names: jsonschema[format] installs it
    lang = Lang.format("color", bare_checker=True)
    rnd = random.Random(8)
    base = [
        "red",
        "RED",
        "#fff",
        "#FFF",
        "#ffff",
        "#fff\n",
        "red\n",
        "\u212ahaki",
        "grey",
        "Gray",
        "#12345g",
        "",
        "\u0130ndigo",
        "indigo",
        "lightgoldenrodyellow",
        "#A0b1C2",
    ]
    for s in base + [m for b in base for m in mutations(b, rnd, alphabet="abcdefgrKk#0F\n\u212a", n=20)]:
        assert lang.matches(s) == FC_CLASS.conforms(s, "color"), s


def test_format_refusals():
    for fmt in ["hostname", "idn-hostname", "idn-email", "relative-json-pointer", "regex", "uri-template", "color"]:
        with pytest.raises(LangError) as e:
            Lang.format(fmt)
        assert e.value.keyword == "format" and is_known_format(fmt)
    with pytest.raises(LangError):
        Lang.format("no-such-format")
    assert not is_known_format("no-such-format")


@pytest.mark.parametrize("fmt", ["date", "ipv4", "time", "date-time", "uuid", "duration"])
def test_format_gbnf_end_to_end(fmt):
    require_checker(fmt)
    lang = Lang.format(fmt)
    rules = rules_for(lang)
    rnd = random.Random(fmt)
    for s in FORMAT_EXAMPLES[fmt] + ["2020-01-01", "10.0.0.1", "01:02:03Z"]:
        for t in [s] + mutations(s, rnd, alphabet=FORMAT_ALPHABETS[fmt]):
            assert grammar_accepts(rules, json_text(t, rnd)) == oracle(fmt, t), (fmt, t)


# ----------------------------------------------------------------------------------- hostile input

HOSTILE = [
    "Lang.regex('(a{1000}){1000}')",
    "Lang.regex('^(?:' + '|'.join(''.join(random.Random(i).choices('abcdefghijklmnopqrstuvwxyz', k=12))"
    " for i in range(3000)) + ')$')",
    "Lang.length(0, 7000) & Lang.regex(r'^(?:ab|ba)*$')",
    "Lang.regex(r'^(?:a|b)*a(?:a|b){14}$')",
    "Lang.regex('(?:){4000000000}x')",
    "Lang.length(0, 100000)",
    # a real MaskBench pattern: \b splits the big classes in thousands of states
    r"Lang.regex(r'^https?:\/\/(www\.)?[-a-zA-Z0-9@:%._\+~#=]{1,256}\.[a-zA-Z0-9()]{1,6}\b([-a-zA-Z0-9()@:%_\+.~#?&//=]*)')",
]


@pytest.mark.parametrize("expr", HOSTILE)
def test_hostile_inputs_end_in_lang_error(expr):
    code = textwrap.dedent(f"""
        import random, sys
        sys.path.insert(0, ".")
        from bankml.schema.strict.lang import Lang, LangError
        try:
            {expr}
        except LangError as e:
            print("LANGERROR", e.keyword, e.reason)
        else:
            print("BUILT")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("LANGERROR"), out.stdout
    assert "exceeds" in out.stdout or "expands past" in out.stdout or "steps to build" in out.stdout


def test_duration_random_strings():
    """Random strings of P, digits, signs, separators and designators: RFC 3339 appendix A's reading."""
    require_checker("duration")
    lang = Lang.format("duration")
    rnd = random.Random(11)
    for _ in range(3000):
        pre = "".join(rnd.choice("0123456789-.eE+:") for _ in range(rnd.randint(1, 12)))
        post = "".join(rnd.choice("0123456789:.Z+-HMS ") for _ in range(rnd.randint(0, 10))) + rnd.choice("DMYWHS")
        s = rnd.choice(["", "-", "+"]) + "P" + pre + "T" + post
        assert lang.matches(s) == oracle("duration", s), s


def test_string_lang_intersects_the_keywords():
    from bankml.schema.strict.lang import string_lang

    lang = string_lang(pattern=r"^[0-9.]+$", max_length=9, format="ipv4")
    assert lang.matches("1.2.3.4") and not lang.matches("10.20.30.40") and not lang.matches("1.2.3")
    assert string_lang(pattern=r"^\d+$", format="ipv4").is_empty()
    assert string_lang().is_universal()
    with pytest.raises(LangError) as e:
        string_lang(pattern="(a)\\1")
    assert e.value.keyword == "pattern"


def test_format_drafts_table_is_jsonschemas():
    from bankml.schema.strict.lang import FORMAT_DRAFTS, draft_checks_format

    validators = {
        "draft4": jsonschema.Draft4Validator,
        "draft6": jsonschema.Draft6Validator,
        "draft7": jsonschema.Draft7Validator,
        "draft2019-09": jsonschema.Draft201909Validator,
        "draft2020-12": jsonschema.Draft202012Validator,
    }
    names = set(FORMAT_DRAFTS) | {n for v in validators.values() for n in v.FORMAT_CHECKER.checkers}
    for draft, v in validators.items():
        for name in names:
            assert draft_checks_format(draft, name) == (name in v.FORMAT_CHECKER.checkers), (draft, name)


@pytest.mark.parametrize("pattern", [r"^[^a]*$", r"^[\u0100-\U00010000]{1,3}$", r"\S", ""])
def test_gbnf_admitting_surrogates_differs_only_on_invalid_utf8(pattern):
    lang = Lang.regex(pattern)
    exact, fast = rules_for(lang), rules_for(lang, admit_surrogates=True)
    rnd = random.Random(pattern)
    for s in ["", "b", "é", "\u0100\uffff", "😀", "\U00010000", "a", '"x"']:
        for text in (json.dumps(s, ensure_ascii=False), json_text(s, rnd)):
            assert grammar_accepts(exact, text) == grammar_accepts(fast, text) == lang.matches(s)
    # CESU-8 bytes of U+D800: not UTF-8; only the fast grammar takes them (where the class is wide)
    g = Grammar(exact)
    with pytest.raises(GrammarError):
        g.accept_bytes(b'"\xed\xa0\x80')


def test_dates_exhaustively_over_years_and_days():
    """Every year's Feb 29 (and a sweep of month/day pairs) against the checkers: leap-year rules
    are where a hand-written calendar pattern goes wrong."""
    require_checker("date-time")
    date, date_time = Lang.format("date"), Lang.format("date-time")
    for y in range(10000):
        s = "%04d-02-29" % y
        assert date.matches(s) == oracle("date", s), s
        t = s + "T00:00:00Z"
        assert date_time.matches(t) == oracle("date-time", t), t
    for y in (1, 1900, 2000, 2023, 2024, 9999):
        for m in range(0, 14):
            for d in range(0, 33):
                s = "%04d-%02d-%02d" % (y, m, d)
                assert date.matches(s) == oracle("date", s), s


@pytest.mark.parametrize("letter", ["d", "s", "w"])
@pytest.mark.parametrize("ascii_only", [False, True])
def test_shipped_categories_equal_a_scan(letter, ascii_only):
    """The shipped \\d \\s \\w tables (bankml/schema/categories.json.gz) hold this Python's Unicode database and
    equal a scan of every scalar value by Python's re, negations included (lang.charsets.category reads them)."""
    import unicodedata

    from bankml.schema import unicode_categories
    from bankml.schema.strict.lang import charsets

    shipped = unicode_categories.shipped(letter, ascii_only)
    assert shipped is not None, "no table for Unicode %s: run bankml/schema/unicode_categories.py --write" % (
        unicodedata.unidata_version
    )
    flags = re.ASCII if ascii_only else 0
    for name in (letter, letter.upper()):
        charsets._SCAN_CACHE.pop(("\\" + name, flags), None)
        scanned = charsets.scan_class("\\" + name, flags)
        charsets._SCAN_CACHE.pop(("\\" + name, flags), None)
        assert charsets.category(name, ascii_only) == scanned
    assert [list(r) for r in shipped] == unicode_categories.scan(letter, ascii_only)


def test_unreadable_category_table_falls_back_to_a_scan(tmp_path, monkeypatch):
    """A missing or truncated categories.json.gz is no error: no table is shipped, the classes are scanned."""
    from bankml.schema import unicode_categories

    for content in (None, b"\x1f\x8b\x08\x00"):
        path = tmp_path / "categories.json.gz"
        if content is not None:
            path.write_bytes(content)
        monkeypatch.setattr(unicode_categories, "PATH", path)
        monkeypatch.setattr(unicode_categories, "_TABLES", None)
        assert unicode_categories.shipped("d", False) is None
