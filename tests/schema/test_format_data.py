"""The shipped format languages (bankml/schema/formats.npz) and their GBNF (formats-gbnf.json.gz) are the ones
bankml.schema.strict.lang builds now, and strict mode uses them. ``python -m tests.schema.test_format_data --write``
(from the checkout's root) rebuilds both files after a format changes."""

import json
import random
import sys

import pytest

from bankml import Grammar, GrammarError, Rules, Vocab
from bankml.schema import format_data
from bankml.schema.strict import lang, patterns, strict_schema_to_grammar, strings
from bankml.schema.strict.lang import formats

GBNF_FORMATS = [n for n, bare in format_data.FORMATS if not bare]


@pytest.mark.parametrize(
    "name,bare", format_data.FORMATS, ids=[n + ("@bare" if b else "") for n, b in format_data.FORMATS]
)
def test_shipped_format_equals_the_built_one(name, bare):
    shipped = format_data.load(name, bare)
    assert shipped is not None, f"formats.npz lacks {name}: python -m tests.schema.test_format_data --write"
    built = lang.build_format_lang(name, bare)
    assert lang.Lang(*shipped) == built
    assert tuple(tuple(r) for r in shipped[0]) == built._trans and tuple(shipped[1]) == built._acc


def test_strict_mode_reads_the_shipped_file(monkeypatch):
    calls = []
    monkeypatch.setattr(formats, "_FORMAT_CACHE", {})
    monkeypatch.setattr(formats, "build_format_lang", lambda *a: calls.append(a))
    uuid = lang.Lang.format("uuid")
    assert not calls
    assert uuid.matches("12345678-1234-5678-1234-567812345678") and not uuid.matches("1234")


def test_a_format_the_file_lacks_is_built(monkeypatch):
    monkeypatch.setattr(formats, "_FORMAT_CACHE", {})
    monkeypatch.setattr(format_data, "PATH", format_data.PATH.with_name("missing.npz"))
    assert format_data.load("uuid", False) is None
    assert lang.Lang.format("date").matches("2024-02-29") and not lang.Lang.format("date").matches("2023-02-29")


@pytest.mark.parametrize("name", GBNF_FORMATS)
def test_shipped_gbnf_equals_the_built_one(name):
    shipped = format_data.load_gbnf(name)
    assert shipped is not None, f"formats-gbnf.json.gz lacks {name}: python -m tests.schema.test_format_data --write"
    built = lang.build_format_lang(name)

    def ordered(gbnf):  # the rules' order is the grammar's: compared too
        return gbnf[0], list(gbnf[1].items())

    assert ordered(shipped) == ordered(patterns.format_gbnf(name, format_data.GBNF_NAME))
    if name not in ("time", "date-time"):  # those two are written of parts (test_time_gbnf_is_the_format)
        assert ordered(shipped) == ordered(lang.string_gbnf(built, format_data.GBNF_NAME))
    # the reader renames the rules by replacing the name in the text: that gives the writer's output under the
    # new name, so the name stands nowhere in the rules but as their names
    assert ordered(patterns.shipped_format_gbnf(name)) == ordered(patterns.format_gbnf(name, patterns.PLACEHOLDER))


def _grammar(expr, rules):
    return Rules.parse("root ::= " + expr + "\n" + "\n".join("%s ::= %s" % kv for kv in rules.items()))


def _accepts(rules, text):
    g = Grammar(rules, Vocab([b"x"], []))
    try:
        g.accept_bytes(text.encode("utf-8"))
    except GrammarError:
        return False
    return g.complete


@pytest.mark.parametrize("name", ["time", "date-time"])
def test_time_gbnf_is_the_format(name):
    """time and date-time written of parts (the leap second as alternatives, ``patterns.time_gbnf``) take the
    strings of their language and no other: every local minute with a leap second beside the offsets that make
    it 23:59:60 UTC, a random offset and Z; seconds 59 and 60 with and without a fraction; escaped spellings."""
    rng = random.Random(47)
    fmt = lang.Lang.format(name)
    grammar = _grammar(*patterns.time_gbnf("t", name == "date-time"))
    day = "2016-12-31T" if name == "date-time" else ""
    checked = 0
    for minute in range(1440):
        hh, mm = divmod(minute, 60)
        plus, minus = (minute + 1) % 1440, 1439 - minute
        offsets = ["+%02d:%02d" % divmod(plus, 60), "-%02d:%02d" % divmod(minus, 60)]
        offsets.append(rng.choice(["Z", "z", "%s%02d:%02d" % (rng.choice("+-"), rng.randrange(24), rng.randrange(60))]))
        for off in offsets:
            sec = rng.choice(("59", "60", "60.25", "61", "6", "60.", "00"))
            for s in ("%s%02d:%02d:60%s" % (day, hh, mm, off), "%s%02d:%02d:%s%s" % (day, hh, mm, sec, off)):
                assert _accepts(grammar, json.dumps(s)) == fmt.matches(s), s
                checked += 1
    for s in ("23:59:60Z", "15:59:60-08:00", "23:59:60+00:00", "00:00:60+00:01", "12:00:00.5+05:30"):
        s = day + s
        assert fmt.matches(s)
        escaped = json.dumps(s).replace("6", "\\u0036").replace(":", "\\u003A")
        assert _accepts(grammar, escaped), escaped
        assert not _accepts(grammar, json.dumps(s + "\n")) and not _accepts(grammar, json.dumps(s[:-1]))
    assert checked == 1440 * 3 * 2


def test_strict_mode_takes_a_bare_format_from_the_gbnf_file(monkeypatch):
    patterns.GBNF_CACHE.clear()  # the process cache (refilled by the conversions that follow)

    def refuse(*args, **kwargs):
        raise AssertionError("string_gbnf called for a format the file holds")

    monkeypatch.setattr(strings, "string_gbnf", refuse)
    grammar = strict_schema_to_grammar({"type": "string", "format": "date-time"})
    assert len(grammar) < 150_000  # the leap second as alternatives (its DFA: 11,049 states, 434 kB)
    # a format beside other keywords is a language of its own: written now
    with pytest.raises(AssertionError, match="string_gbnf called"):
        strict_schema_to_grammar({"type": "string", "format": "date", "pattern": "^2"})
    # unless the other keywords leave the format's whole language (every date-time is longer than one)
    assert strict_schema_to_grammar({"type": "string", "format": "date-time", "minLength": 1}) == grammar


def test_the_gbnf_file_missing_writes_the_format_now(monkeypatch):
    path = format_data.GBNF_PATH
    patterns.GBNF_CACHE.clear()
    monkeypatch.setattr(format_data, "_GBNF", None)
    monkeypatch.setattr(format_data, "GBNF_PATH", path.with_name("missing.json.gz"))
    assert format_data.load_gbnf("uuid") is None
    written_now = strict_schema_to_grammar({"type": "string", "format": "date"})
    patterns.GBNF_CACHE.clear()
    monkeypatch.setattr(format_data, "_GBNF", None)
    monkeypatch.setattr(format_data, "GBNF_PATH", path)
    assert format_data.load_gbnf("date") is not None
    assert strict_schema_to_grammar({"type": "string", "format": "date"}) == written_now


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        raise SystemExit("usage: python -m tests.schema.test_format_data --write (from the checkout's root)")
    lang.write_format_data()
    print(f"wrote {format_data.PATH} ({format_data.PATH.stat().st_size:,} bytes)", file=sys.stderr)
    patterns.write_format_gbnf()
    print(f"wrote {format_data.GBNF_PATH} ({format_data.GBNF_PATH.stat().st_size:,} bytes)", file=sys.stderr)
