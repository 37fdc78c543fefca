"""fill_next_token_bitmasks and apply_token_bitmask_inplace: a batch's rows in one call, across threads, each
row equal to its matcher's own mask (fast path, inside a character, awaiting a lazy trigger, past a bound of
the fast path), written where indices say; the bitmask applied to logits as XGrammar's kernel applies it."""

import threading

import numpy as np
import pytest

from bankml import Grammar, Rules, Vocab, fill_next_token_bitmasks
from bankml.engine import apply_token_bitmask_inplace


def small_vocab():
    pieces = [bytes([c]) for c in range(32, 127)] + [b'{"', b'":', b'", "', b"true", b"null", b"\xe4\xb8", b"\xad"]
    return Vocab(pieces, eog_ids=[])


JSON = r"""root ::= "{" ( pair ( ", " pair )* )? "}"
pair ::= "\"" [a-z]+ "\": " ( [0-9]+ | "true" | "null" | "\"" [^"]* "\"" )
"""


def single_row(g, width):
    row = np.zeros(width, dtype=np.int32)
    g.fill_next_token_bitmask(row)
    return row


def walked(rules, vocab, n, seed):
    rng = np.random.default_rng(seed)
    grammars = []
    for walk in range(n):
        g = Grammar(rules, vocab)
        for _ in range(walk % 13):
            allowed = g.allowed_ids()
            if allowed.size == 0:
                break
            g.accept(int(rng.choice(allowed)))
        grammars.append(g)
    return grammars


def test_batch_rows_equal_single_masks():
    vocab = small_vocab()
    rules = Rules.parse(JSON, vocab=vocab)
    grammars = walked(rules, vocab, 40, 3)
    # a state inside a character (the piece "\xe4\xb8" opens a 3-byte one), and a lazy grammar still waiting
    inside = Grammar(rules, vocab)
    inside.accept_bytes(b'{"a": "')
    inside.accept(vocab.pieces.index(b"\xe4\xb8"))
    assert inside.partial_utf8[1] > 0
    lazy = Grammar(rules, vocab, trigger_words=["{"])
    assert lazy.awaiting_trigger
    grammars += [inside, lazy]
    width = (len(vocab) + 31) // 32
    for workers in (None, 1, 2, 3):
        batch = np.zeros((len(grammars), width), dtype=np.int32)
        assert fill_next_token_bitmasks(grammars, batch, max_workers=workers) is batch
        for index, g in enumerate(grammars):
            assert np.array_equal(batch[index], single_row(g, width)), f"row {index} differs ({workers} workers)"
    # indices put each row where the caller wants it; other rows are not touched
    rows = np.random.default_rng(5).permutation(len(grammars) + 7)[: len(grammars)]
    batch = np.full((len(grammars) + 7, width), 12345, dtype=np.int32)
    fill_next_token_bitmasks(grammars, batch, max_workers=2, indices=rows)
    for index, g in enumerate(grammars):
        assert np.array_equal(batch[rows[index]], single_row(g, width))
    untouched = sorted(set(range(len(grammars) + 7)) - set(rows.tolist()))
    assert (batch[untouched] == 12345).all()


def test_batch_rows_past_the_fast_paths_bound_take_the_reference_path():
    vocab = small_vocab()
    rules = Rules.parse(JSON, vocab=vocab)
    grammars = walked(rules, vocab, 8, 11)
    width = (len(vocab) + 31) // 32
    want = [g.allowed_ids(reference=True) for g in grammars]
    # every fast mask now runs past its work budget inside a pool thread (a GrammarError raised there)
    grammars[0].context._configure_budget(fast_work=1)
    try:
        before = grammars[0].context.reference_masks
        batch = np.zeros((len(grammars), width), dtype=np.int32)
        fill_next_token_bitmasks(grammars, batch, max_workers=2)
        assert grammars[0].context.reference_masks > before
    finally:
        grammars[0].context._configure_budget(fast_work=1 << 24)
    for index, ids in enumerate(want):
        bits = np.unpackbits(batch[index].view(np.uint8), bitorder="little")[: len(vocab)]
        assert np.array_equal(np.flatnonzero(bits), ids), f"row {index}"


def test_batch_from_many_threads_at_once():
    """Batches from several Python threads at once, sharing matchers: every row is right, nothing hangs."""
    vocab = small_vocab()
    rules = Rules.parse(JSON, vocab=vocab)
    grammars = walked(rules, vocab, 26, 7)
    width = (len(vocab) + 31) // 32
    want = np.stack([single_row(g, width) for g in grammars])
    errors = []

    def worker(seed):
        rng = np.random.default_rng(seed)
        for _ in range(30):
            pick = rng.permutation(len(grammars))[:10]
            batch = np.zeros((10, width), dtype=np.int32)
            fill_next_token_bitmasks([grammars[i] for i in pick], batch, max_workers=int(rng.integers(1, 4)))
            if not np.array_equal(batch, want[pick]):
                errors.append(seed)

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads) and not errors


def test_batch_fills_a_torch_tensor_in_place():
    import torch  # the test extra installs it (a missing torch fails here, it is not skipped)

    vocab = small_vocab()
    rules = Rules.parse(JSON, vocab=vocab)
    grammars = walked(rules, vocab, 5, 2)
    width = (len(vocab) + 31) // 32
    batch = torch.zeros((6, width), dtype=torch.int32)
    fill_next_token_bitmasks(grammars, batch, indices=[5, 4, 3, 2, 1])
    for index, g in enumerate(grammars):
        assert np.array_equal(batch[5 - index].numpy(), single_row(g, width))
    assert not batch[0].any()


def test_batch_refuses_bad_arguments():
    vocab = small_vocab()
    g = Grammar(Rules.parse(JSON, vocab=vocab), vocab)
    width = (len(vocab) + 31) // 32
    with pytest.raises(ValueError, match="Invalid bitmask"):
        fill_next_token_bitmasks([g, g], np.zeros((1, 4), dtype=np.int32))
    with pytest.raises(ValueError, match="Invalid bitmask"):
        fill_next_token_bitmasks([g], np.zeros((1, width), dtype=np.int64))
    with pytest.raises(ValueError, match="Invalid bitmask"):
        fill_next_token_bitmasks([g], np.zeros((1, width + 1), dtype=np.int32))
    with pytest.raises(TypeError):
        fill_next_token_bitmasks([g, "not a grammar"], np.zeros((2, width), dtype=np.int32))
    with pytest.raises(ValueError, match="each bitmask row index may appear once"):
        fill_next_token_bitmasks([g, g], np.zeros((2, width), dtype=np.int32), indices=[1, 1])
    with pytest.raises(ValueError, match=r"must lie in \[0, 2\)"):
        fill_next_token_bitmasks([g], np.zeros((2, width), dtype=np.int32), indices=[2])
    with pytest.raises(ValueError, match="max_workers"):
        fill_next_token_bitmasks([g], np.zeros((1, width), dtype=np.int32), max_workers=0)
    with pytest.raises(ValueError, match="no vocabulary"):
        fill_next_token_bitmasks([Grammar(Rules.parse(JSON))], np.zeros((1, width), dtype=np.int32))
    assert fill_next_token_bitmasks([], np.zeros((0, width), dtype=np.int32)).shape == (0, width)


# -- apply_token_bitmask_inplace


def unpacked(bitmask, n_columns):
    bits = np.unpackbits(bitmask.view(np.uint8), axis=1, bitorder="little").astype(bool)
    out = np.zeros((bitmask.shape[0], n_columns), dtype=bool)
    out[:, : min(n_columns, bits.shape[1])] = bits[:, :n_columns]
    return out


@pytest.mark.parametrize("n_columns", [64, 70, 100, 33])
def test_apply_masks_exactly_the_clear_bits(n_columns):
    rng = np.random.default_rng(n_columns)
    width = 3  # 96 bits: logits wider than that get -inf past it, narrower ones ignore the bits past them
    bitmask = rng.integers(-(2**31), 2**31, size=(5, width), dtype=np.int64).astype(np.int32)
    bitmask[1] = -1
    bitmask[2] = 0
    bitmask[3, 1] = 0
    logits = rng.standard_normal((8, n_columns)).astype(np.float32)
    before = logits.copy()
    rows = [7, 0, 3, 5, 1]
    for workers in (1, 2):
        logits[:] = before
        assert apply_token_bitmask_inplace(logits, bitmask, indices=rows, max_workers=workers) is logits
        keep = unpacked(bitmask, n_columns)
        for k, r in enumerate(rows):
            assert np.array_equal(np.isfinite(logits[r]), keep[k]), (k, r)
            assert np.array_equal(logits[r][keep[k]], before[r][keep[k]])
        for r in (2, 4, 6):
            assert np.array_equal(logits[r], before[r])
    # without indices: row k of the bitmask onto row k of the logits
    logits = before[:5].copy()
    apply_token_bitmask_inplace(logits, bitmask)
    assert np.array_equal(np.isfinite(logits), unpacked(bitmask, n_columns))


def test_apply_refuses_bad_arguments():
    logits = np.zeros((2, 64), dtype=np.float32)
    with pytest.raises(ValueError, match="Invalid logits"):
        apply_token_bitmask_inplace(logits.astype(np.float64), np.zeros((2, 2), dtype=np.int32))
    with pytest.raises(ValueError, match="Invalid bitmask"):
        apply_token_bitmask_inplace(logits, np.zeros((2, 2), dtype=np.uint8))
    with pytest.raises(ValueError, match="give indices"):
        apply_token_bitmask_inplace(logits, np.zeros((1, 2), dtype=np.int32))
    with pytest.raises(ValueError, match="Invalid indices"):
        apply_token_bitmask_inplace(logits, np.zeros((1, 2), dtype=np.int32), indices=[2])
