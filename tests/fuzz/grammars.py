"""Hypothesis strategies and checks for the GBNF engine, shared by the suite's property tests
(tests/engine/test_reliability_engine.py, a fixed example budget) and the long harness (tests/fuzz/run_engine.py).

* ``gbnf_text()``: text made of GBNF fragments, valid or not -- the parser must parse it or raise
  GrammarError, never anything else.
* ``grammar_and_walk()``: small well-formed grammars (rules, alternatives, classes, groups, repetitions,
  references that may recurse) with a seed for a random walk -- along the walk the fast path's mask must
  equal the reference path's (and libllama's when an oracle vocabulary is given).
* ``replay(entry)``: one input of tests/fuzz/corpus/.
"""

import functools
import random

import numpy as np
from hypothesis import strategies as st

from bankml import Grammar, GrammarError, Rules, Vocab

FRAGMENTS = [
    "root",
    "r1",
    "r2",
    " ::= ",
    "::=",
    " ::= ",
    "\n",
    "\r",
    "\r\n",
    " ",
    "\t",
    "|",
    " | ",
    "(",
    ")",
    "*",
    "+",
    "?",
    "{2}",
    "{0,3}",
    "{1,}",
    "{3,1}",
    "{0,2000}",
    "{99999999999999999999}",
    "{,2}",
    '"a"',
    '"b"',
    '"é"',
    '"\\n"',
    '"\\x41"',
    '"\\u00e9"',
    '"\\U0001F600"',
    '"\\q"',
    '"\\',
    '"',
    "[a-c]",
    "[^a]",
    "[^\\n]",
    "[a-",
    "[]",
    "[\\]]",
    ".",
    "<[1]>",
    "!<[2]>",
    "<[99999999999]>",
    "<[x]>",
    "<zz>",
    "<",
    ">",
    "#c\n",
    "# x",
    "x",
    "ws",
    "-",
    "é",
    "\x00",
    "\\",
    "{",
    "}",
    ",",
    "a",
    "0",
    "9",
]


@st.composite
def gbnf_text(draw):
    parts = draw(st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=3)), max_size=24))
    prefix = draw(st.sampled_from(["", "root ::= ", "root ::= r1\nr1 ::= "]))
    return prefix + "".join(parts)


def check_parse(text):
    """Parse (and build a matcher and its first mask) or raise GrammarError; nothing else."""
    try:
        rules = Rules.parse(text, vocab=small_vocab())
    except GrammarError:
        return
    try:
        g = Grammar(rules, small_vocab())
    except GrammarError:
        return
    check_masks(g)


# -- well-formed grammars and walks ----------------------------------------------------------------------

NAMES = ["root", "r1", "r2", "r3"]
LITERALS = ['"a"', '"b"', '"ab"', '"é"', '"\\n"', '"aé"', '""', '"ba"']
CLASSES = ["[ab]", "[^a]", "[a-c]", "[é]", "[^\\n]", ".", "[a-bé]", "[^ab\\n]"]
SUFFIXES = ["", "", "", "*", "+", "?", "{0,2}", "{2}", "{1,3}", "{0,1}", "{3}"]


@st.composite
def _item(draw, depth):
    kind = draw(st.sampled_from(["literal", "class", "ref", "group"] if depth < 2 else ["literal", "class", "ref"]))
    if kind == "literal":
        text = draw(st.sampled_from(LITERALS))
    elif kind == "class":
        text = draw(st.sampled_from(CLASSES))
    elif kind == "ref":
        text = draw(st.sampled_from(NAMES))
    else:
        text = "(" + draw(_alternatives(depth + 1)) + ")"
    return text + draw(st.sampled_from(SUFFIXES))


@st.composite
def _alternatives(draw, depth=0):
    alternatives = draw(st.lists(st.lists(_item(depth), max_size=4), min_size=1, max_size=3))
    return " | ".join(" ".join(items) for items in alternatives)


@st.composite
def grammar_and_walk(draw, max_steps=8):
    n_rules = draw(st.integers(1, len(NAMES)))
    lines = [f"{name} ::= {draw(_alternatives())}" for name in NAMES[:n_rules]]
    # references past the defined rules are left in: the parser refuses them (an error, not a crash)
    text = "\n".join(lines)
    seed = draw(st.integers(0, 2**32 - 1))
    return text, seed, max_steps


@functools.lru_cache(maxsize=None)
def small_vocab():
    """Single bytes (so text can always be spelled, characters split across tokens), multi-character
    pieces, an é cut in two, and one end-of-generation token."""
    pieces = [
        b"a",
        b"b",
        b"c",
        b"\n",
        b" ",
        b"ab",
        b"ba",
        b"aa",
        b"abc",
        b"bbb",
        b"a\n",
        b"\xc3",
        b"\xa9",
        "é".encode(),
        "aé".encode(),
        "éa".encode(),
        "éé".encode(),
        b"\xc3\xa9\xc3",
        b"\xa9b",
        b"x",
        b"\x00",
        b"",
        b"A",
        b"\xf0\x9f",
        b"\x98\x80",
        b"</s>",
    ]
    return Vocab(pieces, [len(pieces) - 1])


def check_masks(g):
    """The fast path's mask (allowed_ids and fill_next_token_bitmask) equals the reference path's; the
    allowed ids, or None when both paths refuse the state with a GrammarError."""
    try:
        fast = g.allowed_ids()
    except GrammarError:
        try:
            g.allowed_ids(reference=True)
        except GrammarError:
            return None
        raise AssertionError("the fast path raised where the reference path answers")
    reference = g.allowed_ids(reference=True)
    assert np.array_equal(fast, reference), (
        f"fast {fast.tolist()[:20]} != reference {reference.tolist()[:20]} ({len(fast)} vs {len(reference)})"
    )
    n = g.vocab.n_vocab
    bitmask = np.zeros((n + 31) // 32, dtype=np.int32)
    g.fill_next_token_bitmask(bitmask)
    bits = np.flatnonzero(np.unpackbits(bitmask.view(np.uint8), bitorder="little")[:n])
    assert np.array_equal(bits, fast)
    return fast


def check_walk(case, vocab, oracle_vocab=None):
    text, seed, steps = case
    try:
        g = Grammar(text, vocab)
    except GrammarError:
        return
    oracle = None
    if oracle_vocab is not None:
        from ..oracle import libllama

        oracle = libllama.OracleGrammar(oracle_vocab, text)
    rng = random.Random(seed)
    for step in range(steps):
        allowed = check_masks(g)
        if allowed is None:
            return
        if oracle is not None:
            assert np.array_equal(allowed, oracle.allowed_ids()), f"bankml != libllama at step {step}: {text!r}"
        if len(allowed) == 0:
            return
        token = int(allowed[rng.randrange(len(allowed))])
        if vocab.is_eog(token):
            return
        try:
            g.accept(token)
        except GrammarError as err:
            # an allowed token may still leave more stacks than max_stacks (llama.cpp keeps growing): a
            # bound, named in the error, never another exception
            assert "max_stacks" in str(err) or "BUDGET" in str(err) or "MAX_" in str(err), err
            return
        if oracle is not None:
            oracle.accept(token)


# -- the corpus -----------------------------------------------------------------------------------------


def replay(entry):
    """One corpus entry: {"text": GBNF, "expect": "error" | "ok", "match": substring of the error,
    "vocab": "small" | "qwen2" | null, "prefix": text accepted before the masks are compared,
    "walk": seed of a random walk of "steps" steps}."""
    vocab = None
    if entry.get("vocab") == "small":
        vocab = small_vocab()
    elif entry.get("vocab") == "qwen2":
        from ..oracle_support import load_bankml_vocab

        vocab = load_bankml_vocab("qwen2")
    if entry["expect"] == "error":
        try:
            Grammar(entry["text"], vocab)
        except GrammarError as err:
            assert entry.get("match", "") in str(err), (entry, str(err))
            return
        raise AssertionError(f"no GrammarError for {entry['text'][:200]!r}")
    g = Grammar(entry["text"], vocab)
    if entry.get("prefix"):
        g.accept_bytes(entry["prefix"].encode("utf-8"))
    if vocab is not None:
        check_masks(g)
        if "walk" in entry:
            check_walk((entry["text"], entry["walk"], entry.get("steps", 8)), vocab)
