"""The matcher API against the pinned llama.cpp: masks after any sequence of accepts and rollbacks.

libllama has no rollback, so its side keeps a clone of its grammar sampler after every accepted
prefix (llama_sampler_clone) and rolling back k is taking the clone of the prefix k tokens shorter:
the replayed state of the same accepted tokens. bankml's side is one matcher that accepts (accept,
accept_tokens), rolls back (rollback) and jumps forward (jump_forward_tokens), its mask filled into a
row of a batch bitmask (fill_next_token_bitmask at an index). At every step the whole-vocabulary
masks are compared by count and FNV-1a hash.

Walks: the grammars of tests/data/oracle_walks.json (their documents) and the 22 JSON schemas of
the benchmark (llama.cpp's GBNF of each, bench/data/schema_grammars.json, along its instance), on
SmolLM2 and Qwen2. Each walk follows its document; at random steps it rolls back 1-8 tokens and
accepts a different allowed token there, then goes on among the allowed tokens; at the end of the
document it accepts an end-of-generation token (is_terminated) and rolls it back. Lazy grammars
only take their document's tokens while waiting for the trigger (libllama aborts when buffered text
that completes a trigger is refused by the grammar).

BANKML_MATCHER_ORACLE_STEPS sets the steps per walk (default 40).
"""

import json
import os
import pathlib
import zlib

import numpy as np
import pytest

from bankml import Grammar, GrammarError, Rules, mask_hash

from ..oracle import libllama
from ..oracle.mask_recording import RECORD, Recording, fingerprint
from ..oracle_support import ORACLE_STATS, load_pair
from . import test_grammar_oracle
from .test_grammar_oracle import ORACLE_INPUTS, WALKS, allows, describe, document_text, make_pair, piece_lengths

pytestmark = pytest.mark.oracle

STEPS = int(os.environ.get("BANKML_MATCHER_ORACLE_STEPS", "40"))
MAX_ROLLBACK = 8
BENCH = pathlib.Path(__file__).resolve().parent.parent.parent / "bench" / "data"
SCHEMAS = {e["name"]: e for e in json.loads((BENCH / "schemas.json").read_text(encoding="utf-8"))["schemas"]}
SCHEMA_GRAMMARS = json.loads((BENCH / "schema_grammars.json").read_text(encoding="utf-8"))["grammars"]
VOCABS = ("smollm2", "qwen2")
# libllama's masks of the Qwen2 walks come from the recording (tests/oracle/mask_recording.py)
RECORDING = Recording(
    "matcher",
    fingerprint(
        __file__,
        [
            pathlib.Path(test_grammar_oracle.__file__),
            *ORACLE_INPUTS,
            BENCH / "schemas.json",
            BENCH / "schema_grammars.json",
        ],
        {"steps": STEPS, "max rollback": MAX_ROLLBACK},
    ),
)


@pytest.fixture(scope="module", autouse=True)
def _write_recording():
    yield
    if RECORD:
        RECORDING.write()


def compare(ours, theirs, src, batch, row, vocab, where):
    """bankml's mask (filled into batch[row]) against libllama's (``src``: its digest, live or recorded); returns
    the allowed ids."""
    ours.fill_next_token_bitmask(batch, row)
    bits = np.unpackbits(batch[row].view(np.uint8), bitorder="little")[: len(vocab)]
    mine = np.flatnonzero(bits).astype(np.int32)
    ORACLE_STATS["matcher masks compared (accept/rollback walks)"] += 1
    got = (int(mine.size), *mask_hash(mine))
    if got != src.digest(theirs):
        reference = theirs.allowed_ids()  # live: the message names the tokens
        if not src.live and (int(reference.size), *mask_hash(reference)) == got:
            pytest.fail(f"{where}: libllama gives bankml's mask, the recording another: {RECORDING.path.name} is stale")
        ORACLE_STATS["matcher masks different"] += 1
        pytest.fail(
            f"{where}: bankml allows {len(mine)} tokens, libllama {len(reference)}; "
            f"only bankml: [{describe(vocab, np.setdiff1d(mine, reference))}]; "
            f"only libllama: [{describe(vocab, np.setdiff1d(reference, mine))}]"
        )
    return mine


def check_jump_forward(ours, allowed, vocab):
    """Every token libllama's mask allows spells text consistent with bankml's forced bytes, and the
    grammar cannot end before them (no end-of-generation token allowed)."""
    forced = ours.jump_forward()
    if not forced:
        return forced
    ORACLE_STATS["jump-forward strings checked against libllama's mask"] += 1
    for t in allowed.tolist():
        assert not vocab.is_eog(t), f"forced {forced!r} but end of generation is allowed"
        piece = vocab.piece(t)
        n = min(len(piece), len(forced))
        assert piece[:n] == forced[:n], f"forced {forced!r} but libllama allows {t}={piece!r}"
    return forced


def rollback_walk(ours, theirs, src, vocab, tokens, seed, label, lazy=False):
    rng = np.random.default_rng(seed)
    eog = np.asarray(vocab.eog_mask, dtype=bool)
    batch = np.zeros((3, (len(vocab) + 31) // 32), dtype=np.int32)
    oracle_states = [theirs]  # oracle_states[i]: libllama after the first i accepted tokens
    accepted = []
    on_document = True
    rollbacks = 0
    depth = [0]  # what bankml's ring holds: rollback_depth must say the same
    piece_length = piece_lengths(vocab)

    def take(token):
        """Accept on both sides (bankml through accept_tokens or accept, alternately)."""
        if len(accepted) % 2:
            assert ours.accept_tokens([token])
        else:
            ours.accept(token)
        state = oracle_states[-1].clone()
        state.accept_unchecked(token)
        oracle_states.append(state)
        accepted.append(token)
        depth[0] = min(depth[0] + 1, MAX_ROLLBACK)
        ORACLE_STATS["matcher tokens accepted"] += 1

    def random_choice(allowed, avoid=None):
        choices = allowed[~eog[allowed]]
        if avoid is not None:
            choices = choices[choices != avoid]
        short = choices[piece_length[choices] <= 2]
        if short.size and rng.random() < 0.5:
            choices = short
        rng.shuffle(choices)
        for token in choices[:16].tolist():
            try:
                ours.clone().accept(token)
            except GrammarError:
                # llama.cpp's mask can allow a token its accept throws on (a token terminal met
                # mid-token); libllama would end the process
                continue
            return token
        return None

    for step in range(STEPS):
        where = f"{label} step {step} ({len(accepted)} accepted, {rollbacks} rollbacks)"
        allowed = compare(ours, oracle_states[-1], src, batch, step % 3, vocab, where)
        if not (lazy and ours.awaiting_trigger):
            check_jump_forward(ours, allowed, vocab)
        assert ours.rollback_depth == depth[0]
        waiting = lazy and ours.awaiting_trigger
        if depth[0] and rng.random() < 0.3:
            k = int(rng.integers(1, depth[0] + 1))
            replaced = accepted[-k]
            ours.rollback(k)
            del accepted[-k:]
            del oracle_states[-k:]
            depth[0] -= k
            rollbacks += 1
            ORACLE_STATS["matcher rollbacks"] += 1
            allowed = compare(ours, oracle_states[-1], src, batch, step % 3, vocab, where + " after rollback")
            if lazy and ours.awaiting_trigger:
                # waiting for the trigger: only the document's own tokens are safe for libllama
                on_document = accepted == list(tokens[: len(accepted)])
                if on_document:
                    take(tokens[len(accepted)])
                continue
            on_document = accepted == list(tokens[: len(accepted)]) and len(accepted) < len(tokens)
            if on_document and rng.random() < 0.5:
                take(tokens[len(accepted)])  # back onto the document
                continue
            token = random_choice(allowed, avoid=replaced)  # another token where the rolled-back one was
            if token is None:
                continue
            on_document = on_document and token == tokens[len(accepted)]
            take(token)
            continue
        if on_document and accepted == list(tokens[: len(accepted)]):
            if len(accepted) < len(tokens):
                if rng.random() < 0.2 and len(accepted) + 3 <= len(tokens):
                    # several of the document's tokens at once; validate_tokens first
                    chunk = list(tokens[len(accepted) : len(accepted) + 3])
                    assert ours.validate_tokens(chunk) == 3
                    assert ours.accept_tokens(chunk)
                    for t in chunk:
                        state = oracle_states[-1].clone()
                        state.accept_unchecked(t)
                        oracle_states.append(state)
                        accepted.append(t)
                        depth[0] = min(depth[0] + 1, MAX_ROLLBACK)
                        ORACLE_STATS["matcher tokens accepted"] += 1
                    continue
                take(tokens[len(accepted)])
                continue
            # the end of the document: end of generation, terminated, then rolled back
            if ours.complete and not waiting and vocab.eog_ids:
                eos = int(vocab.eog_ids[0])
                assert eog[allowed].any()
                assert ours.accept_tokens([eos]) and ours.is_terminated()
                assert not ours.accept_tokens([int(allowed[0])])
                oracle_states[-1].clone().accept_unchecked(eos)  # libllama takes it too
                ours.rollback(1)
                assert not ours.is_terminated() or not allowed[~eog[allowed]].size
                ORACLE_STATS["matcher end-of-generation accepted and rolled back"] += 1
            on_document = False
        if waiting:
            break
        forced_tokens = ours.jump_forward_tokens() if rng.random() < 0.3 else []
        if forced_tokens:
            ORACLE_STATS["matcher jump-forward token runs accepted"] += 1
            for i, t in enumerate(forced_tokens):
                if i:
                    allowed = compare(ours, oracle_states[-1], src, batch, 0, vocab, where + f" jump-forward {i}")
                assert allows(allowed, t), f"{where}: jump-forward token {t}={vocab.piece(t)!r} not allowed"
                take(t)
            continue
        token = random_choice(allowed)
        if token is None:
            break
        take(token)
    compare(ours, oracle_states[-1], src, batch, 0, vocab, f"{label} end")
    src.finish()


GRAMMAR_CASES = [(vocab_name, index) for vocab_name in VOCABS for index in range(len(WALKS))]


@pytest.mark.parametrize("case", GRAMMAR_CASES, ids=lambda c: f"{c[0]}-{WALKS[c[1]]['grammar']}-{c[1]}")
def test_rollback_walk_grammars(case):
    vocab_name, index = case
    vocab, oracle_vocab = load_pair(vocab_name)
    walk = WALKS[index]
    document = document_text(walk["documents"][0], vocab)
    tokens = oracle_vocab.tokenize(document.encode("utf-8"), add_special=False, parse_special=True)
    ours, theirs = make_pair(walk, vocab, oracle_vocab)
    ours = _with_rollback(ours)
    label = f"{vocab_name} {walk['grammar']} {index}"
    src = RECORDING.source(label, vocab_name)
    rollback_walk(ours, theirs, src, vocab, tokens, 7000 + index, label, lazy=bool(walk.get("lazy")))


SCHEMA_CASES = [(vocab_name, name) for vocab_name in VOCABS for name in SCHEMAS]


@pytest.mark.parametrize("case", SCHEMA_CASES, ids=lambda c: f"{c[0]}-{c[1]}")
def test_rollback_walk_schemas(case):
    vocab_name, name = case
    vocab, oracle_vocab = load_pair(vocab_name)
    text = SCHEMA_GRAMMARS[name]
    tokens = oracle_vocab.tokenize(SCHEMAS[name]["instance"].encode("utf-8"), add_special=False, parse_special=True)
    ours = Grammar(Rules.parse(text, vocab=vocab), vocab, max_rollback=MAX_ROLLBACK)
    theirs = libllama.OracleGrammar(oracle_vocab, text)
    label = f"{vocab_name} {name}"
    src = RECORDING.source(label, vocab_name)
    rollback_walk(ours, theirs, src, vocab, tokens, zlib.crc32(label.encode()), label)


def _with_rollback(grammar):
    """The same matcher with a ring of MAX_ROLLBACK (make_pair builds it with the default)."""
    assert grammar.rollback_depth == 0
    return Grammar(
        grammar.rules,
        grammar.vocab,
        trigger_tokens=grammar.trigger_tokens,
        trigger_patterns=grammar.trigger_patterns,
        lazy=grammar.lazy,
        max_rollback=MAX_ROLLBACK,
    )
