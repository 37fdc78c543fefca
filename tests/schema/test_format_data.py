"""The shipped format languages (bankml/schema/formats.npz) are the ones strict_lang builds now, and strict mode
uses them. ``python tests/schema/test_format_data.py --write`` rebuilds the file after a format changes."""

import sys

import pytest

from bankml.schema import format_data, strict_lang


@pytest.mark.parametrize(
    "name,bare", format_data.FORMATS, ids=[n + ("@bare" if b else "") for n, b in format_data.FORMATS]
)
def test_shipped_format_equals_the_built_one(name, bare):
    shipped = format_data.load(name, bare)
    assert shipped is not None, f"formats.npz lacks {name}: python tests/schema/test_format_data.py --write"
    built = strict_lang.build_format_lang(name, bare)
    assert strict_lang.Lang(*shipped) == built
    assert tuple(tuple(r) for r in shipped[0]) == built._trans and tuple(shipped[1]) == built._acc


def test_strict_mode_reads_the_shipped_file(monkeypatch):
    calls = []
    monkeypatch.setattr(strict_lang, "_FORMAT_CACHE", {})
    monkeypatch.setattr(strict_lang, "build_format_lang", lambda *a: calls.append(a))
    lang = strict_lang.Lang.format("uuid")
    assert not calls
    assert lang.matches("12345678-1234-5678-1234-567812345678") and not lang.matches("1234")


def test_a_format_the_file_lacks_is_built(monkeypatch):
    monkeypatch.setattr(strict_lang, "_FORMAT_CACHE", {})
    monkeypatch.setattr(format_data, "PATH", format_data.PATH.with_name("missing.npz"))
    assert format_data.load("uuid", False) is None
    assert strict_lang.Lang.format("date").matches("2024-02-29") and not strict_lang.Lang.format("date").matches(
        "2023-02-29"
    )


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        raise SystemExit("usage: python tests/schema/test_format_data.py --write")
    strict_lang.write_format_data()
    print(f"wrote {format_data.PATH} ({format_data.PATH.stat().st_size:,} bytes)", file=sys.stderr)
