# cython: boundscheck=True, wraparound=True, cdivision=False, annotation_typing=False
"""The format languages: each as its RFC's ABNF reads (JSON Schema 2020-12 section 7.3, as the
JSON-Schema-Test-Suite's optional/format tests read it: ASCII digits, the whole string, no final newline): date,
time and date-time (RFC 3339, leap seconds at 23:59:60 UTC), duration (RFC 3339 appendix A), email (RFC 5321),
ipv4, ipv6, uri/iri and their references (RFC 3986/3987), uuid (RFC 4122), json-pointer (RFC 6901); and, for draft
3's bare checker, what jsonschema reads (``str.lower()`` as a case preimage). tests/schema/test_strict_lang.py
checks them against the suite and an independent reading. Which drafts assert which name: ``formats``.

Owns: the patterns and constructions of the formats (date, time, IP addresses, URIs, duration, uuid, email,
hostname, draft 3's time and color). Builds on ``regex``, ``algebra``, ``automaton``; must not import ``formats`` or ``gbnf``.
"""

from __future__ import annotations

from bankml.schema.strict.lang.algebra import preimage_map
from bankml.schema.strict.lang.automaton import Lang
from bankml.schema.strict.lang.charsets import all_text, pos_to_cp
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


_YEAR_NZ = r"(?:[1-9][0-9]{3}|0[1-9][0-9]{2}|00[1-9][0-9]|000[1-9])"
_LEAP = r"(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)"
_MONTH_DAY = (
    r"(?:(?:0[1-9]|1[0-2])-(?:0[1-9]|1[0-9]|2[0-8])"
    r"|(?:0[13-9]|1[0-2])-(?:29|30)|(?:0[13578]|1[02])-31)"
)
# A real calendar date, years 0001-9999 (date.fromisoformat and calendar.monthrange agree).
DATE = r"(?:%s-%s|%s-02-29)" % (_YEAR_NZ, _MONTH_DAY, _LEAP)
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
    """RFC 3986's URI and URI-reference (or RFC 3987's IRI and IRI-reference), their ABNF as regexes (the
    sets of characters as rfc3987 lists them; dec-octet without a leading zero, as RFC 3986 has it, where
    rfc3987 allows one). Returns (absolute form, reference form)."""
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
    dec_octet = "(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])"  # RFC 3986: no leading zero
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
    ipvfuture = "[vV][0-9A-Fa-f]+\\.[A-Za-z0-9._~!$&'()*+,;=\\-:]+"
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


# --- the formats as their RFCs say (JSON Schema 2020-12 section 7.3, read as the JSON-Schema-Test-Suite reads
# them): ASCII digits, no final newline, the whole string

_DIGIT = "[0-9]"
SECFRAC = r"(?:\.[0-9]+)?"
HH, MM = "(?:[01][0-9]|2[0-3])", "[0-5][0-9]"
OFFSET = r"(?:[zZ]|[+-]%s:%s)" % (HH, MM)


def _leap_times() -> str:
    """RFC 3339 5.7's leap second: ``HH:MM:60`` is a time only where it is 23:59:60 in UTC, i.e. where the
    local HH:MM less the offset is 23:59 (so 15:59:60-08:00, 01:29:60+01:30, 23:59:60Z)."""
    alts = ["23:59:60%s[zZ]" % SECFRAC]
    for minute in range(24 * 60):
        plus = (minute + 1) % 1440  # local = 23:59 + offset
        minus = (23 * 60 + 59 - minute) % 1440  # local = 23:59 - offset
        alts.append(
            "%02d:%02d:60%s(?:\\+%02d:%02d|-%02d:%02d)"
            % (minute // 60, minute % 60, SECFRAC, plus // 60, plus % 60, minus // 60, minus % 60)
        )
    return "(?:%s)" % "|".join(alts)


def rfc3339_time_pattern() -> str:
    """RFC 3339's full-time: partial-time (seconds 00-59, or a leap second) and an offset; T and Z of either
    case (RFC 3339 5.6's note)."""
    return r"(?:%s:%s:[0-5][0-9]%s%s|%s)" % (HH, MM, SECFRAC, OFFSET, _leap_times())


def rfc_duration_pattern() -> str:
    """RFC 3339 appendix A's duration: ``P`` then a date part (day, month[day], year[month[day]]) with an
    optional time part, a time part alone (hour[minute[second]], minute[second], second), or weeks alone; each
    number ASCII digits only (no sign, fraction or exponent)."""
    n = "[0-9]+"
    second = n + "S"
    minute = "%sM(?:%s)?" % (n, second)
    hour = "%sH(?:%s)?" % (n, minute)
    time = "T(?:%s|%s|%s)" % (hour, minute, second)
    day = n + "D"
    month = "%sM(?:%s)?" % (n, day)
    year = "%sY(?:%s)?" % (n, month)
    date = "(?:%s|%s|%s)(?:%s)?" % (day, month, year, time)
    return "P(?:%s|%s|%sW)" % (date, time, n)


def rfc_uuid_pattern() -> str:
    """RFC 4122's string representation: 8-4-4-4-12 hex digits, of either case."""
    h = "[0-9a-fA-F]"
    return "%s{8}-%s{4}-%s{4}-%s{4}-%s{12}" % (h, h, h, h, h)


def rfc_ipv4_pattern() -> str:
    """RFC 3986's IPv4address (dec-octet: no leading zero), RFC 2673 2.1's dotted-quad as JSON Schema names it."""
    octet = "(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])"
    return r"(?:%s\.){3}%s" % (octet, octet)


def rfc_email_pattern(idn: bool = False) -> str:
    """RFC 5321 4.1.2's Mailbox: a dot-string or quoted-string local part, ``@``, a domain of LDH labels or an
    IPv4 or ``IPv6:`` address literal (RFC 5321 4.1.3; the general address literal needs a tag registered with
    IANA, and none is but IPv6). ``idn``: RFC 6531's additions, UTF-8 non-ASCII in atext and qtext (the
    domain's U-labels are not built: the caller refuses idn-email)."""
    non_ascii = "\\x80-\\U0010ffff" if idn else ""
    atext = "[A-Za-z0-9!#$%%&'*+/=?^_`{|}~\\-%s]" % non_ascii
    atom = atext + "+"
    dot_string = r"%s(?:\.%s)*" % (atom, atom)
    qtext = "[\\x20\\x21\\x23-\\x5b\\x5d-\\x7e%s]" % non_ascii
    quoted = r'"(?:%s|\\[\x20-\x7e])*"' % qtext
    label = "[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
    domain = r"%s(?:\.%s)*" % (label, label)
    literal = r"\[(?:%s|[Ii][Pp][Vv]6:(?:%s))\]" % (rfc_ipv4_pattern(), ipv6_pattern())
    return "(?:%s|%s)@(?:%s|%s)" % (dot_string, quoted, domain, literal)
