"""fill_next_token_bitmasks: many matchers, one call, across threads, each row equal to its own mask."""

import numpy as np
import pytest

from bankml import Grammar, Rules, Vocab, fill_next_token_bitmasks


def small_vocab():
    pieces = [bytes([c]) for c in range(32, 127)] + [b'{"', b'":', b'", "', b"true", b"null", b"\xe4\xb8", b"\xad"]
    return Vocab(pieces, eog_ids=[])


JSON = r"""root ::= "{" ( pair ( ", " pair )* )? "}"
pair ::= "\"" [a-z]+ "\": " ( [0-9]+ | "true" | "null" | "\"" [^"]* "\"" )
"""


def test_batch_rows_equal_single_masks():
    vocab = small_vocab()
    rules = Rules.parse(JSON, vocab=vocab)
    rng = np.random.default_rng(3)
    grammars = []
    for walk in range(12):
        g = Grammar(rules, vocab)
        for _ in range(walk):
            allowed = g.allowed_ids()
            if allowed.size == 0:
                break
            g.accept(int(rng.choice(allowed)))
        grammars.append(g)
    width = (len(vocab) + 31) // 32
    batch = np.zeros((len(grammars), width), dtype=np.int32)
    fill_next_token_bitmasks(grammars, batch)
    for index, g in enumerate(grammars):
        single = np.zeros(width, dtype=np.int32)
        g.fill_next_token_bitmask(single)
        assert np.array_equal(batch[index], single), f"row {index} differs"
    serial = np.zeros_like(batch)
    fill_next_token_bitmasks(grammars, serial, max_workers=1)
    assert np.array_equal(batch, serial)


def test_batch_refuses_bad_arguments():
    vocab = small_vocab()
    g = Grammar(Rules.parse(JSON, vocab=vocab), vocab)
    with pytest.raises(ValueError, match="Invalid bitmask"):
        fill_next_token_bitmasks([g, g], np.zeros((1, 4), dtype=np.int32))
    with pytest.raises(TypeError):
        fill_next_token_bitmasks([g, "not a grammar"], np.zeros((2, (len(vocab) + 31) // 32), dtype=np.int32))
