"""Strict mode against the official JSON-Schema-Test-Suite (draft 2020-12, required and optional tests, the copy in
tests/data/jsts at commit 44401e0; ``bench/jsts.py`` runs it through the other engines too).

Every group (a schema and its tests) is compiled with ``json_schema_to_grammar(schema, mode="strict",
strict_style="exact", registry=REMOTES)`` (the suite's remote documents, under the ``http://localhost:1234/`` the
suite serves them at; nothing is fetched); each
test's text, ``json.dumps(data)``, is walked through the grammar byte by byte and must end it exactly when the
suite's label says valid. A group strict mode refuses must be listed in ``EXPECTED_REFUSALS`` with the keyword its
SchemaError names (and the refusal names a pointer); a group that compiles must agree with every label. No group
is allowed a wrong verdict: what strict mode cannot enforce, it refuses.

The counts go to the oracle gate (tests/oracle_minimums.json), so that they cannot shrink.
"""

from __future__ import annotations

import json
import pathlib

import pytest

from bankml import Grammar, Rules, Vocab, json_schema_to_grammar
from bankml.errors import GrammarError, SchemaError

from ..oracle_support import ORACLE_STATS

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
SUITE = ROOT / "tests" / "data" / "jsts" / "tests" / "draft2020-12"
TINY = Vocab([b"x"], [])


def remotes(root=SUITE.parent.parent / "remotes"):
    """``{URI: schema}``: the suite's remote documents, each under ``http://localhost:1234/`` and its path."""
    return {
        "http://localhost:1234/" + path.relative_to(root).as_posix(): json.loads(path.read_text(encoding="utf-8"))
        for path in sorted(root.rglob("*.json"))
    }


REMOTES = remotes()


def _groups():
    out = []
    for path in sorted(SUITE.rglob("*.json")):
        rel = path.relative_to(SUITE).as_posix()
        for i, group in enumerate(json.loads(path.read_text(encoding="utf-8"))):
            out.append((rel, i, group))
    return out


GROUPS = _groups()


def _expected_refusals():
    """``{"file#index": keyword}`` from tests/schema/jsts_refusals.json: the groups strict mode refuses today and
    the keyword each refusal names. The keywords: ``unevaluatedProperties`` (its negation); ``oneOf``
    (overlapping branches one of which cannot be negated); ``$ref`` (a remote document of another draft);
    ``uniqueItems`` (over strings: the shipped metaschema's own); ``format`` (not regular or too large: hostname,
    idn-hostname, idn-email, regex, uri-template, relative-json-pointer); ``pattern``/``patternProperties``
    (ECMA-262 constructs not built: ``\\p{...}``); ``multipleOf`` (a non-integral divisor); ``$schema`` (a custom
    metaschema, whose vocabularies are not read)."""
    return json.loads((pathlib.Path(__file__).with_name("jsts_refusals.json")).read_text(encoding="utf-8"))


EXPECTED_REFUSALS = _expected_refusals()


def _accepts(rules, text: bytes) -> bool:
    g = Grammar(rules, TINY)
    try:
        g.accept_bytes(text)
    except GrammarError:
        return False
    return bool(g.complete)


def _set_of(rel):
    if rel.startswith("optional/format/"):
        return "optional/format"
    return "optional" if rel.startswith("optional/") else "required"


def test_the_suite_is_there():
    assert len(GROUPS) == 442  # 364 required (less format.json) + 28 optional/format + 50 other optional
    assert (SUITE.parent.parent / "LICENSE").exists()


def test_the_refusal_list_names_groups_of_the_suite():
    names = {f"{rel}#{i}" for rel, i, _ in GROUPS}
    assert set(EXPECTED_REFUSALS) <= names, sorted(set(EXPECTED_REFUSALS) - names)


@pytest.mark.parametrize("rel,index,group", GROUPS, ids=[f"{r}#{i}" for r, i, _ in GROUPS])
def test_group(rel, index, group):
    key = f"{rel}#{index}"
    try:
        text, _ = json_schema_to_grammar(group["schema"], mode="strict", strict_style="exact", registry=REMOTES)
    except SchemaError as e:
        assert key in EXPECTED_REFUSALS, f"{key} ({group['description']}) refused, not listed: {e}"
        assert e.keyword == EXPECTED_REFUSALS[key], f"{key}: refused naming {e.keyword!r}: {e}"
        # a pointer into the document, or URI#pointer into a shipped metaschema
        assert e.pointer and "#" in e.pointer, f"{key}: the refusal names no pointer: {e}"
        ORACLE_STATS[f"JSTS 2020-12 {_set_of(rel)}: groups refused naming keyword and pointer"] += 1
        return
    assert key not in EXPECTED_REFUSALS, f"{key} now compiles: take it out of jsts_refusals.json"
    rules = Rules.parse(text, vocab=TINY)
    wrong = []
    for test in group["tests"]:
        got = _accepts(rules, json.dumps(test["data"]).encode("utf-8"))
        if got != test["valid"]:
            wrong.append(f"{test['description']!r}: label {test['valid']}, grammar {got}")
    assert not wrong, f"{key} ({group['description']}): " + "; ".join(wrong)
    ORACLE_STATS[f"JSTS 2020-12 {_set_of(rel)}: groups compiled, every label agreed"] += 1
    ORACLE_STATS[f"JSTS 2020-12 {_set_of(rel)}: tests agreeing with the suite's label"] += len(group["tests"])


RECURSIVE = json.loads((SUITE.parent / "draft2019-09" / "recursiveRef.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("index", range(len(RECURSIVE)))
def test_recursive_ref_2019_09(index):
    """2019-09's ``$recursiveRef``/``$recursiveAnchor`` (the suite's recursiveRef.json): every group compiles,
    those whose target depends on the path too (each reference specialised per dynamic scope), and agrees with
    every label."""
    group = RECURSIVE[index]
    text, _ = json_schema_to_grammar(group["schema"], mode="strict", strict_style="exact", registry=REMOTES)
    rules = Rules.parse(text, vocab=TINY)
    wrong = [
        f"{test['description']!r}: label {test['valid']}"
        for test in group["tests"]
        if _accepts(rules, json.dumps(test["data"]).encode("utf-8")) != test["valid"]
    ]
    assert not wrong, f"recursiveRef.json#{index} ({group['description']}): " + "; ".join(wrong)
    ORACLE_STATS["JSTS 2019-09 recursiveRef: groups compiled, every label agreed"] += 1
