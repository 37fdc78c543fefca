"""Masks and accepts compared with the pinned llama.cpp (libllama of llama-cpp-python 0.3.36).

Every grammar of tests/data/grammars walks its documents on three real
vocabularies (Qwen2, Llama 3, SmolLM2): tokenized as libllama tokenizes them,
one token per byte (so partial UTF-8 crosses token boundaries), and seeded
random walks that pick among the allowed tokens. At every step the whole
vocabulary mask of bankml and of libllama's grammar sampler are compared by
count and FNV-1a hash; then both accept the same token.
"""

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from bankml import Grammar, GrammarError, Rules, mask_hash

from ..oracle import libllama
from ..oracle.mask_recording import RECORD, Recording, fingerprint
from ..oracle_support import DATA, ORACLE_STATS, VOCAB_NAMES, chat_turn_tokens, load_pair, vocab_path

pytestmark = pytest.mark.oracle

GRAMMARS = DATA / "grammars"
WALKS = json.loads((DATA / "oracle_walks.json").read_text(encoding="utf-8"))["walks"]
RANDOM_WALK_STEPS = int(os.environ.get("BANKML_ORACLE_RANDOM_STEPS", "24"))
# libllama's masks of the Qwen2 and Llama 3 walks come from the recording (tests/oracle/mask_recording.py)
ORACLE_INPUTS = [
    DATA / "oracle_walks.json",
    *sorted(GRAMMARS.iterdir()),
    pathlib.Path(libllama.__file__),
    vocab_path("qwen2"),
    vocab_path("llama3"),
]
RECORDING = Recording("grammar", fingerprint(__file__, ORACLE_INPUTS, {"random steps": RANDOM_WALK_STEPS}))


@pytest.fixture(scope="module", autouse=True)
def _write_recording():
    yield
    if RECORD:
        RECORDING.write()


def grammar_text(name, vocab, oracle_vocab):
    text = (GRAMMARS / name).read_bytes().decode("utf-8")
    if name.endswith(".in"):
        start, end = chat_turn_tokens(vocab)
        text = (
            text.replace("{START_ID}", str(start))
            .replace("{END_ID}", str(end))
            .replace("{START}", vocab.piece(start).decode())
        )
    return text


def document_text(document, vocab):
    if "{START}" in document:
        start, end = chat_turn_tokens(vocab)
        document = document.replace("{START}", vocab.piece(start).decode()).replace("{END}", vocab.piece(end).decode())
    return document


_SINGLE_BYTE_TOKENS = {}


def single_byte_tokens(vocab):
    """For each byte value, the lowest token id whose piece is that one byte (once per vocabulary: the
    vocabularies are loaded once for the run)."""
    if id(vocab) not in _SINGLE_BYTE_TOKENS:
        table = {}
        for token_id in range(len(vocab)):
            piece = vocab.piece(token_id)
            if len(piece) == 1 and piece[0] not in table and not vocab.is_eog(token_id):
                table[piece[0]] = token_id
        _SINGLE_BYTE_TOKENS[id(vocab)] = (vocab, table)
    return _SINGLE_BYTE_TOKENS[id(vocab)][1]


_PIECE_LENGTHS = {}


def piece_lengths(vocab):
    """Each token's piece length in bytes, as an array (once per vocabulary, not a Python loop per step)."""
    if id(vocab) not in _PIECE_LENGTHS:
        lengths = np.fromiter((len(p) for p in vocab.pieces), dtype=np.int64, count=len(vocab))
        _PIECE_LENGTHS[id(vocab)] = (vocab, lengths)
    return _PIECE_LENGTHS[id(vocab)][1]


def allows(allowed, token):
    """Whether ``token`` is among the ``allowed`` ids (an array; no set of up to n_vocab ids built per step)."""
    return bool(np.any(allowed == token))


def describe(vocab, ids):
    return ", ".join(f"{int(i)}={vocab.piece(int(i))!r}" for i in ids[:8])


def compare_masks(ours, theirs, src, vocab, where):
    """bankml's mask against libllama's (``src``: its digest, live or recorded); returns the allowed ids."""
    mine = ours.allowed_ids()
    ORACLE_STATS["masks compared"] += 1
    got = (int(mine.size), *mask_hash(mine))
    if got != src.digest(theirs):
        reference = theirs.allowed_ids()  # live: the message names the tokens
        if not src.live and (int(reference.size), *mask_hash(reference)) == got:
            pytest.fail(f"{where}: libllama gives bankml's mask, the recording another: {RECORDING.path.name} is stale")
        ORACLE_STATS["masks different"] += 1
        only_ours = np.setdiff1d(mine, reference)
        only_theirs = np.setdiff1d(reference, mine)
        pytest.fail(
            f"{where}: bankml allows {len(mine)} tokens, libllama {len(reference)}; "
            f"only bankml: [{describe(vocab, only_ours)}]; only libllama: [{describe(vocab, only_theirs)}]"
        )
    return mine


def make_pair(walk, vocab, oracle_vocab):
    text = grammar_text(walk["grammar"], vocab, oracle_vocab)
    lazy = walk.get("lazy")
    if lazy:
        patterns = lazy.get("trigger_patterns", [])
        tokens = [chat_turn_tokens(vocab)[0] if t == "{START_ID}" else int(t) for t in lazy.get("trigger_tokens", [])]
        ours = Grammar(
            Rules.parse(text, vocab=vocab), vocab, trigger_patterns=patterns, trigger_tokens=tokens, lazy=True
        )
        theirs = libllama.OracleGrammar(oracle_vocab, text, lazy=True, trigger_patterns=patterns, trigger_tokens=tokens)
    else:
        ours = Grammar(Rules.parse(text, vocab=vocab), vocab)
        theirs = libllama.OracleGrammar(oracle_vocab, text)
    return ours, theirs


def walk_tokens(walk, vocab, oracle_vocab, tokens, label, src, stop_where_rejected=False):
    """Walk both matchers through tokens; returns bankml's matcher, or None if the walk stopped early."""
    ours, theirs = make_pair(walk, vocab, oracle_vocab)
    for step, token in enumerate(tokens):
        allowed = compare_masks(ours, theirs, src, vocab, f"{label} step {step}")
        if not ours.awaiting_trigger and not allows(allowed, token):
            if stop_where_rejected:
                # Both engines agree (the masks matched) that this byte cannot come next: llama.cpp
                # rejects a partial UTF-8 byte whose completions meet a negated class's exclusions.
                ORACLE_STATS["byte walks stopped where both reject"] += 1
                src.finish()
                return None
            pytest.fail(f"{label} step {step}: the document's token {token}={vocab.piece(token)!r} is not allowed")
        ours.accept(token)
        theirs.accept_unchecked(token)
        ORACLE_STATS["tokens accepted"] += 1
    compare_masks(ours, theirs, src, vocab, f"{label} end")
    src.finish()
    return ours


CASES = [
    (vocab_name, index, doc_index)
    for vocab_name in VOCAB_NAMES
    for index, walk in enumerate(WALKS)
    for doc_index in range(len(walk["documents"]))
]


def case_id(case):
    vocab_name, index, doc_index = case
    walk = WALKS[index]
    suffix = "-lazy" if walk.get("lazy") else ""
    return f"{vocab_name}-{walk['grammar']}{suffix}-{index}-{doc_index}"


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_tokenized_walk(case):
    vocab_name, index, doc_index = case
    vocab, oracle_vocab = load_pair(vocab_name)
    walk = WALKS[index]
    document = document_text(walk["documents"][doc_index], vocab)
    tokens = oracle_vocab.tokenize(document.encode("utf-8"), add_special=False, parse_special=True)
    label = f"{case_id(case)} tokenized"
    final = walk_tokens(walk, vocab, oracle_vocab, tokens, label, RECORDING.source(label, vocab_name))
    if not walk.get("lazy"):
        assert final.complete


@pytest.mark.parametrize("case", [c for c in CASES if "{START}" not in WALKS[c[1]]["documents"][c[2]]], ids=case_id)
def test_byte_walk(case):
    vocab_name, index, doc_index = case
    vocab, oracle_vocab = load_pair(vocab_name)
    walk = WALKS[index]
    document = document_text(walk["documents"][doc_index], vocab).encode("utf-8")
    table = single_byte_tokens(vocab)
    missing = sorted(set(document) - set(table))
    assert not missing, f"{vocab_name} has no single-byte token for bytes {missing}"
    label = f"{case_id(case)} bytes"
    src = RECORDING.source(label, vocab_name)
    final = walk_tokens(walk, vocab, oracle_vocab, [table[b] for b in document], label, src, stop_where_rejected=True)
    if final is not None and not walk.get("lazy"):
        assert final.complete


RANDOM_CASES = [
    (vocab_name, index, seed)
    for vocab_name in VOCAB_NAMES
    for index, walk in enumerate(WALKS)
    if not walk.get("lazy")
    for seed in (1, 2)
]


@pytest.mark.parametrize("case", RANDOM_CASES, ids=lambda c: f"{c[0]}-{WALKS[c[1]]['grammar']}-seed{c[2]}")
def test_random_walk(case):
    """Seeded walks among the allowed tokens: reach states no document does (odd bytes, partial UTF-8)."""
    vocab_name, index, seed = case
    vocab, oracle_vocab = load_pair(vocab_name)
    ours, theirs = make_pair(WALKS[index], vocab, oracle_vocab)
    src = RECORDING.source(f"{vocab_name}-{index} random seed {seed}", vocab_name)
    rng = np.random.default_rng(seed * 1000 + index)
    eog = np.asarray(vocab.eog_mask, dtype=bool)
    for step in range(RANDOM_WALK_STEPS):
        allowed = compare_masks(ours, theirs, src, vocab, f"{vocab_name} random seed {seed} step {step}")
        choices = allowed[~eog[allowed]]
        if choices.size == 0:
            break
        # Half the draws favour short pieces, which keeps walks inside structure instead of long free text.
        if step % 2:
            short = choices[piece_lengths(vocab)[choices] <= 2]
            if short.size:
                choices = short
        token = int(rng.choice(choices))
        try:
            ours.clone().accept(token)
        except GrammarError:
            # llama.cpp's mask can allow a token its accept then throws on (a token terminal met
            # mid-token); libllama would end the process, so the walk draws again.
            # test_accept_errors_match_libllama checks that libllama throws on such a token too.
            ORACLE_STATS["allowed tokens whose accept throws (skipped in random walks)"] += 1
            continue
        ours.accept(token)
        theirs.accept_unchecked(token)
        ORACLE_STATS["tokens accepted"] += 1
    src.finish()


# -- accept errors ---------------------------------------------------------------
# Feeding libllama a token its mask rejects throws across the C boundary (or aborts,
# for an end-of-generation token) and ends the process, so each case runs in a child.

ACCEPT_SCRIPT = textwrap.dedent("""
    import sys
    from tests.oracle import libllama
    from tests.oracle_support import load_oracle_vocab
    vocab = load_oracle_vocab(sys.argv[1])
    grammar = libllama.OracleGrammar(vocab, open(sys.argv[2], encoding="utf-8", newline="").read())
    for token in map(int, sys.argv[3].split(",")):
        grammar.accept_unchecked(token)
    print("MASK", ",".join(map(str, grammar.allowed_ids().tolist())), flush=True)
""")

ACCEPT_CASES = [
    # (grammar, prefix text, token's piece (None: an end-of-generation token), whether the mask allows it, what kind)
    ("json.gbnf", '{"a": ', b"}", False, "no stack survives"),
    ("json.gbnf", '{"a": "', "\u00e9".encode()[:1], True, "ends mid-character, prefix viable"),
    ("json.gbnf", "{", b"x", False, "no stack survives"),
    ("unicode.gbnf", "", "😀".encode()[:2], True, "ends mid-character, prefix viable"),
    ("unicode.gbnf", "", b"\x80", False, "stray continuation byte"),
    ("list.gbnf", "- ", b"\xc2", False, "partial character whose completions meet a negated class"),
    ("arithmetic.gbnf", "a", None, False, "end of generation before the grammar is complete"),
    ("tokens.gbnf.in", "{START}user", b"\n\n", True, "mask allows, accept throws: token terminal mid-token"),
]


@pytest.mark.parametrize("case", ACCEPT_CASES, ids=lambda c: f"{c[0]}-{c[4]}")
def test_accept_errors_match_libllama(case, tmp_path):
    grammar_name, prefix, bad_piece, mask_allows, _ = case
    vocab, oracle_vocab = load_pair("qwen2")
    text = grammar_text(grammar_name, vocab, oracle_vocab)
    grammar_file = tmp_path / "g.gbnf"
    grammar_file.write_bytes(text.encode("utf-8"))
    prefix = document_text(prefix, vocab)
    prefix_tokens = oracle_vocab.tokenize(prefix.encode(), add_special=False, parse_special=True) if prefix else []
    if bad_piece is None:
        bad = int(vocab.eog_ids[0])
    else:
        bad = next(t for t in range(len(vocab)) if vocab.piece(t) == bad_piece)
    ours = Grammar(Rules.parse(text, vocab=vocab), vocab)
    for token in prefix_tokens:
        ours.accept(token)
    assert ours.allows(bad) == mask_allows
    before = mask_hash(ours.allowed_ids())
    try:
        ours.accept(bad)
        ours_threw = False
    except GrammarError:
        ours_threw = True
        assert mask_hash(ours.allowed_ids()) == before, "a refused accept must leave the state unchanged"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(DATA.parent.parent)] + sys.path))
    child = subprocess.run(
        [sys.executable, "-c", ACCEPT_SCRIPT, "qwen2", str(grammar_file), ",".join(map(str, prefix_tokens + [bad]))],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    theirs_threw = child.returncode != 0
    if theirs_threw:
        assert "MASK" not in child.stdout
    ORACLE_STATS["accept errors compared"] += 1
    assert ours_threw == theirs_threw, (
        f"bankml {'raised' if ours_threw else 'accepted'}, libllama {'threw' if theirs_threw else 'accepted'} "
        f"(exit {child.returncode}): {child.stderr[-400:]}"
    )
    if not theirs_threw:
        reference = np.array(
            [int(x) for x in child.stdout.split("MASK ", 1)[1].strip().split(",") if x], dtype=np.int32
        )
        assert mask_hash(ours.allowed_ids()) == mask_hash(reference)
