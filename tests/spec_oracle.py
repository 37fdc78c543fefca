"""The oracle of strict mode's verdicts: ``jsonschema`` (the validator of the schema's ``$schema``, 2020-12 by
default, with the 2020-12 FormatChecker, as MaskBench validates), read as the JSON-Schema-Test-Suite reads the
specification where the package departs from it:

* ``pattern`` and ``patternProperties`` are ECMA-262 regexes with the ``u`` flag (``regress``, the Rust crate
  jsonschema-rs uses), not Python's ``re``: ``\\d`` is ``[0-9]``, ``$`` is the end of the string only;
* ``dependencies`` is read in 2019-09 and 2020-12 too (optional/dependencies-compatibility);
* the formats strict mode builds as their RFCs say (``RFC_FORMATS``: time and date-time with leap seconds, duration,
  email, uuid, json-pointer, and the URI family without a final newline or a leading zero in an address literal's
  IPv4) are checked by the procedures below, written apart from bankml's patterns, the rest by jsonschema's
  checkers;

``python_dialect=True`` gives jsonschema's own reading of patterns (Python's ``re``), the oracle of
``regex_dialect="python"``.
"""

from __future__ import annotations

import functools
import ipaddress
import re
import string

import jsonschema
import regress
from jsonschema import validators

_JSONSCHEMA_FORMATS = jsonschema.Draft202012Validator.FORMAT_CHECKER
_HEX = set(string.hexdigits)
_ATEXT = set(string.ascii_letters + string.digits + "!#$%&'*+-/=?^_`{|}~")


def rfc3339_time(s: str) -> bool:
    m = re.fullmatch(r"([0-9]{2}):([0-9]{2}):([0-9]{2})(\.[0-9]+)?(?:([zZ])|([+-])([0-9]{2}):([0-9]{2}))", s)
    if not m:
        return False
    h, mi, sec = int(m.group(1)), int(m.group(2)), int(m.group(3))
    if h > 23 or mi > 59 or sec > 60:
        return False
    off = 0
    if not m.group(5):
        oh, om = int(m.group(7)), int(m.group(8))
        if oh > 23 or om > 59:
            return False
        off = (oh * 60 + om) * (1 if m.group(6) == "+" else -1)
    return sec < 60 or (h * 60 + mi - off) % 1440 == 23 * 60 + 59


def rfc3339_date_time(s: str) -> bool:
    if len(s) < 11 or s[10] not in "tT":
        return False
    return _JSONSCHEMA_FORMATS.conforms(s[:10], "date") and rfc3339_time(s[11:])


def rfc3339_duration(s: str) -> bool:
    if not s.startswith("P") or not re.fullmatch(r"(?:[0-9]+[YMWDHS])*(?:T(?:[0-9]+[YMWDHS])+)?", s[1:]):
        return False
    date, _, time = s[1:].partition("T")
    units_d = "".join(re.findall(r"[A-Z]", date))
    units_t = "".join(re.findall(r"[A-Z]", time))
    if units_d == "W":
        return "T" not in s
    if "T" in s and not units_t:
        return False
    return (
        (units_d or units_t) != ""
        and units_d in ("", "D", "M", "MD", "Y", "YM", "YMD")
        and units_t
        in (
            "",
            "H",
            "HM",
            "HMS",
            "M",
            "MS",
            "S",
        )
    )


def rfc4122_uuid(s: str) -> bool:
    return len(s) == 36 and all(
        (c == "-") if i in (8, 13, 18, 23) else (c in _HEX and c.isascii()) for i, c in enumerate(s)
    )


def rfc5321_email(s: str) -> bool:
    if s.startswith('"'):
        i = 1
        while i < len(s) and s[i] != '"':
            if s[i] == "\\":
                if i + 1 >= len(s) or not 32 <= ord(s[i + 1]) <= 126:
                    return False
                i += 2
            elif 32 <= ord(s[i]) <= 126:
                i += 1
            else:
                return False
        if i >= len(s) or s[i + 1 : i + 2] != "@":
            return False
        domain = s[i + 2 :]
    else:
        local, at, domain = s.partition("@")
        if not at or any(not part or not set(part) <= _ATEXT for part in local.split(".")):
            return False
    if domain.startswith("[") and domain.endswith("]"):
        lit = domain[1:-1]
        try:
            if lit[:5].lower() == "ipv6:":
                ipaddress.IPv6Address(lit[5:])
                return "%" not in lit
            ipaddress.IPv4Address(lit)
            return True
        except ValueError:
            return False
    labels = domain.split(".")
    return all(re.fullmatch(r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?", x) for x in labels)


def rfc6901_json_pointer(s: str) -> bool:
    return (s == "" or s.startswith("/")) and all(t[:1] in ("0", "1") for t in s.split("~")[1:])


def _rfc3986(name):
    """jsonschema's rfc3987 reading, less what RFC 3986 does not allow there: a final newline (rfc3987's
    ``$``), a leading zero in an address literal's IPv4 (rfc3987's dec-octet); and an IPvFuture's ``V`` of either
    case (ABNF strings are case-insensitive)."""

    def check(s):
        if s.endswith("\n"):
            return False
        lit = re.search(r"\[([^\]]*)\]", s)
        if lit and re.search(r"(?:^|[:.])0[0-9]", lit.group(1)) and "." in lit.group(1):
            return False
        return _JSONSCHEMA_FORMATS.conforms(s.replace("[V", "[v"), name)

    return check


RFC_FORMATS = {
    "time": rfc3339_time,
    "date-time": rfc3339_date_time,
    "duration": rfc3339_duration,
    "uuid": rfc4122_uuid,
    "email": rfc5321_email,
    "json-pointer": rfc6901_json_pointer,
    **{n: _rfc3986(n) for n in ("uri", "uri-reference", "iri", "iri-reference")},
}


def _strings_only(fn):
    """A format asserts nothing of a value that is no string."""
    return lambda value: not isinstance(value, str) or fn(value)


def _format_checker():
    fc = jsonschema.FormatChecker(list(_JSONSCHEMA_FORMATS.checkers))
    for name, fn in RFC_FORMATS.items():
        fc.checks(name)(_strings_only(fn))
    return fc


FORMATS = _format_checker()


def format_conforms(name: str, s: str) -> bool:
    """The suite's reading of a format (RFC_FORMATS), else jsonschema's checker."""
    return FORMATS.conforms(s, name)


@functools.lru_cache(maxsize=4096)
def ecma(pattern: str):
    """The compiled ECMA-262 regex (``u`` flag; Annex B where the u flag alone rejects the syntax), or None where
    regress refuses it."""
    try:
        return regress.Regex(pattern, "u")
    except Exception:
        pass
    try:  # Annex B's reading of what the u flag alone rejects (a lone bracket, "\\:"), as strict mode reads it
        return regress.Regex(pattern)
    except Exception:
        return None


def _pattern(validator, patrn, instance, schema):
    if not validator.is_type(instance, "string"):
        return
    rx = ecma(patrn)
    if rx is None:
        yield jsonschema.ValidationError(f"{patrn!r} is no ECMA-262 regex")
    elif rx.find(instance) is None:
        yield jsonschema.ValidationError(f"{instance!r} does not match {patrn!r}")


def _pattern_properties(validator, pattern_properties, instance, schema):
    if not validator.is_type(instance, "object"):
        return
    for patrn, subschema in pattern_properties.items():
        rx = ecma(patrn)
        if rx is None:
            yield jsonschema.ValidationError(f"{patrn!r} is no ECMA-262 regex")
            continue
        for k, v in instance.items():
            if rx.find(k) is not None:
                yield from validator.descend(v, subschema, path=k, schema_path=patrn)


def _additional_properties(validator, aP, instance, schema):
    """additionalProperties with patternProperties read as ECMA-262 regexes."""
    if not validator.is_type(instance, "object"):
        return
    pats = [ecma(p) for p in schema.get("patternProperties", {})]
    extras = [
        k
        for k in instance
        if k not in schema.get("properties", {}) and not any(rx is not None and rx.find(k) is not None for rx in pats)
    ]
    if validator.is_type(aP, "object"):
        for k in extras:
            yield from validator.descend(instance[k], aP, path=k)
    elif not aP and extras:
        yield jsonschema.ValidationError(f"additional properties {extras!r}")


@functools.lru_cache(maxsize=None)
def _spec_class(cls):
    changes = {"pattern": _pattern, "patternProperties": _pattern_properties}
    if "additionalProperties" in cls.VALIDATORS:
        changes["additionalProperties"] = _additional_properties
    if cls in (jsonschema.Draft201909Validator, jsonschema.Draft202012Validator):
        changes["dependencies"] = jsonschema.Draft7Validator.VALIDATORS["dependencies"]
    return validators.extend(cls, changes)


def validator(schema, python_dialect=False):
    cls = validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    if not python_dialect:
        cls = _spec_class(cls)
    return cls(schema, format_checker=FORMATS)


def is_valid(schema, value, python_dialect=False) -> bool:
    return validator(schema, python_dialect).is_valid(value)
