# cython: boundscheck=True, wraparound=True, cdivision=False, annotation_typing=False
"""Formats: which names jsonschema's checkers assert in which drafts, and ``format_lang`` (the builder of
``Lang.format``): a format's language from the tables bankml.schema.format_data ships, else built now
(``build_format_lang``, from ``format_langs``) and remembered, a refusal included.

Owns: the known names and drafts, the per-process format cache, writing the shipped tables. Builds on
``format_langs``; must not import ``gbnf``.
"""

from __future__ import annotations

from bankml.schema import format_data
from bankml.schema.strict.lang import bounds
from bankml.schema.strict.lang.automaton import BUILDERS, Lang
from bankml.schema.strict.lang.bounds import LangError
from bankml.schema.strict.lang.format_langs import (
    DATE,
    IPV4,
    color_lang,
    draft3_time_lang,
    full,
    hostname_lang,
    ipv6_pattern,
    rfc3339_time_pattern,
    rfc_duration_pattern,
    rfc_email_pattern,
    rfc_uuid_pattern,
    uri_patterns,
)

KNOWN_FORMATS = frozenset(
    (
        "date",
        "time",
        "date-time",
        "duration",
        "email",
        "idn-email",
        "hostname",
        "ipv4",
        "ipv6",
        "uri",
        "uri-reference",
        "iri",
        "iri-reference",
        "json-pointer",
        "uuid",
        # known to jsonschema, not built here (LangError): too large, not regular, or not modelled
        "idn-hostname",
        "relative-json-pointer",
        "regex",
        "uri-template",
        "color",
    )
)


_D4_ON = ("draft4", "draft6", "draft7", "draft2019-09", "draft2020-12")
#: Which drafts' format checkers (``jsonschema``'s ``DraftNValidator.FORMAT_CHECKER``) assert each
#: format name (draft 3 is not listed: its checker has other names).  Elsewhere jsonschema treats
#: the name as an annotation.
FORMAT_DRAFTS = {
    "email": _D4_ON,
    "idn-email": _D4_ON,
    "ipv4": _D4_ON,
    "ipv6": _D4_ON,
    "hostname": _D4_ON,
    "uri": _D4_ON,
    "date-time": _D4_ON,
    "regex": _D4_ON,
    "uri-reference": _D4_ON[1:],
    "json-pointer": _D4_ON[1:],
    "uri-template": _D4_ON[1:],
    "idn-hostname": _D4_ON[2:],
    "iri": _D4_ON[2:],
    "iri-reference": _D4_ON[2:],
    "date": _D4_ON[2:],
    "time": _D4_ON[2:],
    "relative-json-pointer": _D4_ON[2:],
    "duration": _D4_ON[3:],
    "uuid": _D4_ON[3:],
}


def draft_checks_format(draft: str, name: str) -> bool:
    """True when jsonschema's checker for ``draft`` ("draft4" ... "draft2020-12") asserts the
    format ``name``; False means the keyword is only an annotation there."""
    return draft in FORMAT_DRAFTS.get(name, ())


def is_known_format(name: str) -> bool:
    """True for the format names ``jsonschema``'s checker validates (built here or refused);
    a ``LangError`` for any other name may be read as "annotation only", as jsonschema does."""
    return name in KNOWN_FORMATS


_FORMAT_CACHE: dict = {}


def format_lang(name: str, bare_checker: bool) -> Lang:
    bare_checker = bool(bare_checker and name in ("time", "color"))
    key = (name, bare_checker)
    got = _FORMAT_CACHE.get(key)
    if got is None:
        shipped = format_data.load(name, bare_checker) if key in _SHIPPED else None
        if shipped is not None:
            got = _FORMAT_CACHE[key] = Lang(*shipped)  # built by build_format_lang, checked by the tests
        else:
            try:
                got = build_format_lang(name, bare_checker)
            except LangError as e:
                # a format that cannot be built fails the same way every time: remembered (hostname took
                # 40 ms to reach the state bound, in every schema that has it)
                got = (e.keyword, e.reason)
            _FORMAT_CACHE[key] = got
    if isinstance(got, tuple):
        raise LangError(*got)
    return got


_SHIPPED = frozenset(format_data.FORMATS)


def build_format_lang(name: str, bare_checker: bool = False) -> Lang:
    """A format's language built now from the checker's reading (the slow way; bankml.schema.format_data
    ships the result)."""
    bounds.set_scale(bounds.FORMAT_SCALE)
    try:
        return _build_format(name, bare_checker)
    finally:
        bounds.set_scale(1)


def write_format_data() -> None:
    """Rebuild bankml/schema/formats.npz from build_format_lang."""
    langs = {}
    for name, bare in format_data.FORMATS:
        lang = build_format_lang(name, bare)
        langs[(name, bare)] = (lang._trans, lang._acc)
    format_data.write(langs)


def _build_format(name: str, bare_checker: bool) -> Lang:
    if name == "email":
        got = full(rfc_email_pattern())
    elif name == "idn-email":
        raise LangError(
            "format",
            "idn-email: RFC 6531's domain is made of IDNA2008 U-labels, whose validity is not built here",
        )
    elif name == "date":
        got = full(DATE)
    elif name == "date-time":
        got = full(r"%s[tT]%s" % (DATE, rfc3339_time_pattern()))
    elif name == "time" and bare_checker:
        got = draft3_time_lang()
    elif name == "color" and bare_checker:
        got = color_lang()
    elif name == "time":
        got = full(rfc3339_time_pattern())
    elif name == "ipv4":
        got = full(IPV4)
    elif name == "ipv6":
        got = full(ipv6_pattern())
    elif name == "hostname":
        bounds.set_scale(1)  # its exact automaton is far too large: fail fast at the plain bound
        try:
            got = hostname_lang()
        except LangError:
            raise LangError(
                "format",
                "hostname: labels of at most 63 characters inside a name of at "
                f"most 253 need far more than {bounds.MAX_STATES} DFA states",
            ) from None
    elif name == "duration":
        got = full(rfc_duration_pattern())
    elif name == "uuid":
        got = full(rfc_uuid_pattern())
    elif name in ("uri", "uri-reference", "iri", "iri-reference"):
        absolute, ref = uri_patterns(iri=name.startswith("iri"))
        got = full(ref if name.endswith("reference") else absolute)
    elif name == "json-pointer":
        # RFC 6901: *( "/" reference-token ), a token's "~" only in "~0" and "~1"
        got = full(r"(?s:(?:/(?:[^/~]|~[01])*)*)")
    elif name == "color":
        raise LangError(
            "format",
            "'color' is checked only by the bare FormatChecker() (draft 3's "
            "checker; an annotation in later drafts): Lang.format('color', "
            "bare_checker=True) builds it",
        )
    elif name in KNOWN_FORMATS:
        raise LangError("format", f"format {name!r} is not built exactly (not regular, or its checker is not modelled)")
    else:
        raise LangError("format", f"unknown format {name!r} (jsonschema treats it as an annotation)")
    return got


BUILDERS["format"] = format_lang
