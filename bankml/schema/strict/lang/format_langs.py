# cython: boundscheck=True, wraparound=True, cdivision=False, annotation_typing=False
"""The format languages: each is what jsonschema's checker (jsonschema/_format.py with its format extras) accepts,
derived from what that code actually does (its regexes, ``str.upper()``/``str.lower()`` read as case preimages,
``str.replace``/``str.strip`` as transducers); tests/schema/test_strict_lang.py checks each one against the
checker itself on generated and mutated strings. Which checker asserts which name: ``formats``.

Owns: the patterns and constructions of the formats (date, time, IP addresses, URIs, duration, uuid, hostname,
draft 3's time and color). Builds on ``regex``, ``algebra``, ``automaton``; must not import ``formats`` or ``gbnf``.
"""

from __future__ import annotations

import re

from bankml.schema.strict.lang import bounds
from bankml.schema.strict.lang.algebra import preimage_map
from bankml.schema.strict.lang.automaton import Lang, finish
from bankml.schema.strict.lang.bounds import LangError
from bankml.schema.strict.lang.charsets import all_text, category, clip, cs_diff, cs_neg, cs_union, norm, pos_to_cp
from bankml.schema.strict.lang.regex import regex_lang


def _cls(cs) -> str:
    """A regex class for a charset (for building format patterns from computed sets)."""
    return "[" + "".join("\\U%08x-\\U%08x" % (lo, hi) for lo, hi in cs) + "]"


_CASE_MAPS: dict = {}


def case_map(kind: str) -> dict:
    """{code point: its str.upper() / str.lower()} for the code points that map elsewhere."""
    got = _CASE_MAPS.get(kind)
    if got is None:
        got = {}
        text = all_text()
        conv = str.upper if kind == "upper" else str.lower
        # Most 256-character blocks map to themselves: compare whole blocks first (in C).
        for start in range(0, len(text), 256):
            block = text[start : start + 256]
            if conv(block) == block:
                continue
            for i, ch in enumerate(block):
                m = conv(ch)
                if m != ch:
                    got[pos_to_cp(start + i)] = m
        _CASE_MAPS[kind] = got
    return got


def full(p: str) -> Lang:
    """The strings that fully match ``p`` (``\\A(?:p)\\Z``)."""
    return regex_lang(r"\A(?:%s)\Z" % p, "format")


def _preimage_replace(d: Lang, needle: str) -> Lang:
    """{s : s.replace(needle, "") in d} — str.replace's leftmost, non-overlapping deletion,
    run as a transducer whose state is the pending prefix of ``needle``."""
    specials = sorted(set(needle))
    others = cs_neg(norm((ord(c), ord(c)) for c in specials))

    run = d.run

    def feed(buf, ch):
        s = buf + ch
        out = ""
        while True:
            if s == needle:
                return "", out
            if needle.startswith(s):
                return s, out
            out += s[0]
            s = s[1:]

    index = {("", 0): 0}
    keys = [("", 0)]
    trans = []
    acc = []
    for buf, q in keys:
        row = []

        def target(key):
            t = index.get(key)
            if t is None:
                t = index[key] = len(keys)
                keys.append(key)
                if len(keys) > bounds.state_limit():
                    raise LangError("format", f"the automaton exceeds {bounds.state_limit()} states")
            return t

        for ch in specials:
            nb, out = feed(buf, ch)
            q2 = run(q, out)
            if q2 >= 0:
                row.append((ord(ch), ord(ch), target((nb, q2))))
        q1 = run(q, buf)  # any other character flushes the pending prefix and passes
        if q1 >= 0:
            for lo, hi, t in d._trans[q1]:
                for a, b in clip(lo, hi, others):
                    row.append((a, b, target(("", t))))
        row.sort()
        trans.append(row)
        qf = run(q, buf)
        acc.append(qf >= 0 and d._acc[qf])
    return finish(trans, acc, "format")


def _preimage_strip(d: Lang, chars: str) -> Lang:
    """{s : s.strip(chars) in d}: s = B m B' with B, B' runs of ``chars`` and m neither
    starting nor ending with one of them (or s all ``chars`` and "" in d)."""
    cls = _cls(norm((ord(c), ord(c)) for c in chars))
    runs = full(cls + "*")
    not_edge = full(r"(?s:(?:[^%s](?:.*[^%s])?)?)" % (re.escape(chars), re.escape(chars)))
    out = runs.concat((d & not_edge).concat(runs, "format"), "format")
    if d.matches(""):
        out = out | runs
    return out


_YEAR_NZ = r"(?:[1-9][0-9]{3}|0[1-9][0-9]{2}|00[1-9][0-9]|000[1-9])"
_LEAP = r"(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)"
_MONTH_DAY = (
    r"(?:(?:0[1-9]|1[0-2])-(?:0[1-9]|1[0-9]|2[0-8])"
    r"|(?:0[13-9]|1[0-2])-(?:29|30)|(?:0[13578]|1[02])-31)"
)
# A real calendar date, years 0001-9999 (date.fromisoformat and calendar.monthrange agree).
DATE = r"(?:%s-%s|%s-02-29)" % (_YEAR_NZ, _MONTH_DAY, _LEAP)
# rfc3339_validator's time part (re.ASCII, so [0-9]).
TIME = (
    r"(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]+)?"
    r"(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
)
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])"
IPV4 = r"(?:%s\.){3}%s" % (_OCTET, _OCTET)


def ipv6_pattern() -> str:
    """ipaddress.IPv6Address's grammar: 8 hextets, or "::" standing for at least one, an IPv4
    tail counting as two hextets, no scope id (jsonschema rejects a non-empty one)."""
    h = "[0-9a-fA-F]{1,4}"

    def hextets(k):
        return "(?:%s:){%d}%s" % (h, k - 1, h) if k else ""

    alts = ["(?:%s:){7}%s" % (h, h), "(?:%s:){6}%s" % (h, IPV4)]
    for k1 in range(8):
        for k2 in range(8 - k1):
            tails = [hextets(k2)]
            if k2 >= 2:
                tails.append("(?:%s:){%d}%s" % (h, k2 - 2, IPV4))
            for tail in tails:
                alts.append(hextets(k1) + "::" + tail)
    return "|".join(alts)


def uri_patterns(iri: bool = False) -> tuple[str, str]:
    """RFC 3986's URI and URI-reference (or RFC 3987's IRI and IRI-reference) as rfc3987 —
    jsonschema's uri/iri checker — writes them; note its dec-octet accepts leading zeros
    inside IP literals.  Returns (absolute form, reference form)."""
    # RFC 3987 ucschar and iprivate, as rfc3987 lists them.
    ucs = (
        (
            "\\xA0-\\uD7FF\\uF900-\\uFDCF\\uFDF0-\\uFFEF"
            + "".join("\\U%08X-\\U%08X" % (p << 16, (p << 16) + 0xFFFD) for p in range(1, 14))
            + "\\U000E1000-\\U000EFFFD"
        )
        if iri
        else ""
    )
    private = "\\uE000-\\uF8FF\\U000F0000-\\U000FFFFD\\U00100000-\\U0010FFFD"
    pct = "%[0-9A-Fa-f]{2}"
    unres_sub = "A-Za-z0-9._~!$&'()*+,;=\\-" + ucs
    pchar = "(?:[%s:@]|%s)" % (unres_sub, pct)
    scheme = "[A-Za-z][A-Za-z0-9+.\\-]*"
    userinfo = "(?:[%s:]|%s)*" % (unres_sub, pct)
    reg_name = "(?:[%s]|%s)*" % (unres_sub, pct)
    dec_octet = "(?:25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)"
    ipv4 = "(?:%s\\.){3}%s" % (dec_octet, dec_octet)
    h16 = "[0-9A-Fa-f]{1,4}"
    ls32 = "(?:%s:%s|%s)" % (h16, h16, ipv4)
    v6 = "|".join(
        [
            "(?:%s:){6}%s" % (h16, ls32),
            "::(?:%s:){5}%s" % (h16, ls32),
            "(?:%s)?::(?:%s:){4}%s" % (h16, h16, ls32),
            "(?:(?:%s:)?%s)?::(?:%s:){3}%s" % (h16, h16, h16, ls32),
            "(?:(?:%s:){0,2}%s)?::(?:%s:){2}%s" % (h16, h16, h16, ls32),
            "(?:(?:%s:){0,3}%s)?::%s:%s" % (h16, h16, h16, ls32),
            "(?:(?:%s:){0,4}%s)?::%s" % (h16, h16, ls32),
            "(?:(?:%s:){0,5}%s)?::%s" % (h16, h16, h16),
            "(?:(?:%s:){0,6}%s)?::" % (h16, h16),
        ]
    )
    # IPvFuture keeps the ASCII unreserved set even in IRIs (rfc3987 shares the rule).
    ipvfuture = "v[0-9A-Fa-f]+\\.[A-Za-z0-9._~!$&'()*+,;=\\-:]+"
    host = "(?:\\[(?:%s|%s)\\]|%s|%s)" % (v6, ipvfuture, ipv4, reg_name)
    authority = "(?:%s@)?%s(?::[0-9]*)?" % (userinfo, host)
    segment = pchar + "*"
    seg_nz = pchar + "+"
    seg_nz_nc = "(?:[%s@]|%s)+" % (unres_sub, pct)
    abempty = "(?:/%s)*" % segment
    absolute = "/(?:%s(?:/%s)*)?" % (seg_nz, segment)
    rootless = "%s(?:/%s)*" % (seg_nz, segment)
    noscheme = "%s(?:/%s)*" % (seg_nz_nc, segment)
    query = "(?:%s|[/?%s])*" % (pchar, private if iri else "")
    fragment = "(?:%s|[/?])*" % pchar
    hier = "(?://%s%s|%s|%s|)" % (authority, abempty, absolute, rootless)
    rel = "(?://%s%s|%s|%s|)" % (authority, abempty, absolute, noscheme)
    uri = "%s:%s(?:\\?%s)?(?:#%s)?" % (scheme, hier, query, fragment)
    relref = "%s(?:\\?%s)?(?:#%s)?" % (rel, query, fragment)
    return uri, "(?:%s|%s)" % (uri, relref)


def duration_lang() -> Lang:
    """isoduration.parse_duration plus jsonschema's "ends with one of DMYWHMS"."""
    num = r"[+\-0-9.,eE]"
    # Decimal() of the run (',' read as '.'): sign, digits with one point, optional exponent.
    dec = r"[+-]?(?:[0-9]+(?:[.,][0-9]*)?|[.,][0-9]+)(?:[eE][+-]?[0-9]+)?"
    zero = r"[+-]?(?:0+(?:[.,]0*)?|[.,]0+)(?:[eE][+-]?[0-9]+)?"
    # Designators in order (parse_designator pops the ones it passes); W only after zero values
    # (the parser compares the DateDuration so far with an all-zero one).
    date_ne = "(?:{d}Y(?:{d}M)?(?:{d}D)?|{d}M(?:{d}D)?|{d}D|(?:{z}Y)?(?:{z}M)?(?:{z}D)?{d}W)".format(d=dec, z=zero)
    time_ne = "(?:{d}H(?:{d}M)?(?:{d}S)?|{d}M(?:{d}S)?|{d}S)".format(d=dec)
    # After the last date designator, number characters before 'T' are collected and dropped;
    # with no designator at all a run without ',' sends the string to arrow's datetime parser,
    # which never yields a value ending in a designator letter (so: rejected).
    body = "(?:{dn}|{dn}{n}*T{tn}|(?:{n}*,{n}*)?T{tn})".format(dn=date_ne, n=num, tn=time_ne)
    return full(r"[+-]?P" + body)


def uuid_lang() -> Lang:
    """uuid.UUID(s) then jsonschema's "s[8], s[13], s[18], s[23] are '-'".

    UUID: h = s.replace('urn:', '').replace('uuid:', '').strip('{}').replace('-', ''), then
    len(h) == 32 and int(h, 16) — which allows surrounding whitespace, a sign, a 0x prefix,
    single underscores between digits, and any Unicode decimal digit as a digit."""
    space = cs_union(((9, 13), (32, 32)), cs_diff(category("s", False), ((0, 127),)))
    digit = cs_union(((0x30, 0x39), (0x41, 0x46), (0x61, 0x66)), category("d", False))
    ws, dg = _cls(space), _cls(digit)
    h = full(r"{w}*[+\-]?(?:0[xX]_?)?{d}(?:_?{d})*{w}*".format(w=ws, d=dg)) & Lang.length(32, 32)
    t3 = preimage_map(h, {0x2D: ""}, "format")
    t2 = _preimage_strip(t3, "{}")
    t1 = _preimage_replace(t2, "uuid:")
    s = _preimage_replace(t1, "urn:")
    return s & full(r"(?s:.{8}-.{4}-.{4}-.{4}-.*)")


def hostname_lang() -> Lang:
    """fqdn.FQDN(s, min_labels=1).is_valid: s.lower() matched (re.IGNORECASE) against labels
    of 1-63 of [-A-Z\\d] not starting/ending with '-', dot-separated, optional final dot, and
    `$` (so a final '\\n' passes); length <= 253 not counting a final dot."""
    label = r"[A-Z\d](?:[-A-Z\d]{0,61}[A-Z\d])?"
    names = regex_lang(r"(?i)\A(?:%s\.)*%s\.?\n?\Z" % (label, label), "format")
    length = full(r"(?s:.{0,253})") | full(r"(?s:.{0,253}\.)")
    return preimage_map(names & length, case_map("lower"), "format")


def draft3_time_lang() -> Lang:
    """datetime.strptime(s, '%H:%M:%S'): _strptime's IGNORECASE regex (Unicode \\d, read by
    int()) must span s; seconds 60 and 61 pass the regex but datetime() refuses them."""
    rx = regex_lang(r"(?i)\A(?:2[0-3]|[0-1]\d|\d):(?:[0-5]\d|\d):(?:[0-5]\d|\d)\Z", "format")
    return rx


# The CSS3 colour keywords (CSS Color Module Level 3, section 4.3), the names webcolors' default
# spec knows: the draft-3 "color" checker looks the lower-cased instance up among them.
_CSS3_COLOR_NAMES = """
aliceblue antiquewhite aqua aquamarine azure beige bisque black blanchedalmond blue blueviolet brown
burlywood cadetblue chartreuse chocolate coral cornflowerblue cornsilk crimson cyan darkblue darkcyan
darkgoldenrod darkgray darkgreen darkgrey darkkhaki darkmagenta darkolivegreen darkorange darkorchid
darkred darksalmon darkseagreen darkslateblue darkslategray darkslategrey darkturquoise darkviolet
deeppink deepskyblue dimgray dimgrey dodgerblue firebrick floralwhite forestgreen fuchsia gainsboro
ghostwhite gold goldenrod gray green greenyellow grey honeydew hotpink indianred indigo ivory khaki
lavender lavenderblush lawngreen lemonchiffon lightblue lightcoral lightcyan lightgoldenrodyellow
lightgray lightgreen lightgrey lightpink lightsalmon lightseagreen lightskyblue lightslategray
lightslategrey lightsteelblue lightyellow lime limegreen linen magenta maroon mediumaquamarine
mediumblue mediumorchid mediumpurple mediumseagreen mediumslateblue mediumspringgreen
mediumturquoise mediumvioletred midnightblue mintcream mistyrose moccasin navajowhite navy oldlace
olive olivedrab orange orangered orchid palegoldenrod palegreen paleturquoise palevioletred
papayawhip peachpuff peru pink plum powderblue purple red rosybrown royalblue saddlebrown salmon
sandybrown seagreen seashell sienna silver skyblue slateblue slategray slategrey snow springgreen
steelblue tan teal thistle tomato turquoise violet wheat white whitesmoke yellow yellowgreen
""".split()


def color_lang() -> Lang:
    """The bare FormatChecker()'s draft-3 "color": webcolors.name_to_hex(s) (s.lower() among the
    CSS3 keywords) or else normalize_hex(s.lower()) (^#(3 or 6 hex digits)$, so a final '\\n'
    passes)."""
    names = Lang.empty()
    for n in _CSS3_COLOR_NAMES:
        names = names | Lang.literal(n)
    hexes = full(r"#(?:[a-fA-F0-9]{3}|[a-fA-F0-9]{6})\n?")
    return preimage_map(names | hexes, case_map("lower"), "format")
