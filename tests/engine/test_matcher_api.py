"""The engines' matcher API on Grammar (issue 17): rollback, accept_tokens, validate_tokens,
is_terminated, fork, reset, bitmask rows in numpy arrays and torch tensors, jump-forward.

Small hand-made vocabularies, so each test runs in milliseconds; the expected values are worked out
by hand from llama.cpp's accept and mask rules (tests/engine/test_engine.py's header lists them). The same
API against libllama on real vocabularies is tests/engine/test_matcher_oracle.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bankml import Grammar, GrammarError, Rules, Vocab

JSON_GRAMMAR = r"""
root ::= "{" ws "\"name\"" ws ":" ws string ws ("," ws "\"tags\"" ws ":" ws "[" ws (string ws ("," ws string ws)*)? "]" ws)? "}"
string ::= "\"" char* "\""
char ::= [^"\\] | "\\" ["\\n]
ws ::= [ ]?
"""

PIECES = [
    "{",
    "}",
    '"',
    '"name"',
    ":",
    " ",
    ",",
    "[",
    "]",
    "a",
    "b",
    "ab",
    "é",
    b"\xc3",
    b"\xa9",
    b"\xa8",
    "\\",
    "n",
    '"tags"',
    '":',
    "</s>",
    "<ctl>",
]
EOS = PIECES.index("</s>")


def make_vocab(pieces=PIECES, eog=(EOS,)):
    return Vocab([p.encode("utf-8") if isinstance(p, str) else p for p in pieces], list(eog))


VOCAB = make_vocab()
RULES = Rules.parse(JSON_GRAMMAR, vocab=VOCAB)


def token(piece):
    return PIECES.index(piece)


def state(g):
    """What identifies a matcher's state: its stacks, partial character, mask and termination."""
    return (g.stacks, g.partial_utf8, g.allowed_ids().tolist(), g.is_terminated(), g.awaiting_trigger, g.trigger_buffer)


DOCUMENT = [
    token(p)
    for p in [
        "{",
        '"name"',
        ":",
        " ",
        '"',
        "a",
        b"\xc3",
        b"\xa9",
        "\\",
        "n",
        '"',
        ",",
        '"tags"',
        ":",
        "[",
        '"',
        "b",
        '"',
        "]",
        "}",
    ]
]


# -- rollback ----------------------------------------------------------------------------------------


def test_rollback_restores_every_earlier_state():
    g = Grammar(RULES, VOCAB)
    states = [state(g)]
    for t in DOCUMENT:
        g.accept(t)
        states.append(state(g))
    assert g.rollback_depth == len(DOCUMENT)
    for k in range(1, len(DOCUMENT) + 1):
        g.rollback(1)
        assert state(g) == states[-1 - k]
    assert g.rollback_depth == 0


def test_rollback_then_other_tokens():
    g = Grammar(RULES, VOCAB)
    for t in DOCUMENT[:6]:  # {"name": "a
        g.accept(t)
    g.rollback(1)  # {"name": "
    g.accept(token("b"))
    g.accept(token('"'))
    g.accept(token("}"))
    assert g.complete
    fresh = Grammar(RULES, VOCAB)
    for t in DOCUMENT[:5] + [token("b"), token('"'), token("}")]:
        fresh.accept(t)
    assert state(g) == state(fresh)


def test_rollback_inside_a_partial_character():
    g = Grammar(RULES, VOCAB)
    for t in DOCUMENT[:7]:  # ... "a\xc3
        g.accept(t)
    assert g.partial_utf8 == (0x03, 1)
    g.accept(token(b"\xa9"))
    assert g.partial_utf8[1] == 0
    g.rollback(1)
    assert g.partial_utf8 == (0x03, 1)
    assert g.allowed_ids().tolist() == sorted([token(b"\xa9"), token(b"\xa8")])


def test_rollback_bad_arguments():
    g = Grammar(RULES, VOCAB)
    g.accept(token("{"))
    before = state(g)
    with pytest.raises(ValueError, match="must be >= 0"):
        g.rollback(-1)
    with pytest.raises(TypeError, match="must be an int"):
        g.rollback(1.0)
    with pytest.raises(TypeError, match="must be an int"):
        g.rollback(True)
    with pytest.raises(TypeError, match="must be an int"):
        g.rollback("1")
    with pytest.raises(ValueError, match=r"cannot roll back 2 steps: this matcher keeps the last 1 \(max_rollback=200"):
        g.rollback(2)
    assert state(g) == before
    g.rollback(0)
    assert state(g) == before
    g.rollback(np.int64(1))
    assert g.rollback_depth == 0


def test_max_rollback_bounds_the_history():
    g = Grammar(RULES, VOCAB, max_rollback=3)
    states = [state(g)]
    for t in DOCUMENT[:6]:
        g.accept(t)
        states.append(state(g))
    assert g.max_rollback == 3 and g.rollback_depth == 3
    with pytest.raises(ValueError, match=r"cannot roll back 4 steps: this matcher keeps the last 3 \(max_rollback=3"):
        g.rollback(4)
    assert state(g) == states[-1]
    g.rollback(3)
    assert state(g) == states[-4]
    with pytest.raises(ValueError, match="keeps the last 0"):
        g.rollback(1)
    # the ring goes on from there
    g.accept(DOCUMENT[3])
    assert g.rollback_depth == 1
    g.rollback(1)
    assert state(g) == states[-4]


def test_max_rollback_zero_and_bad_values():
    g = Grammar(RULES, VOCAB, max_rollback=0)
    g.accept(token("{"))
    g.rollback(0)
    with pytest.raises(ValueError, match=r"keeps the last 0 \(max_rollback=0"):
        g.rollback(1)
    assert g.accept_tokens([token('"name"'), token(":")])
    assert not g.accept_tokens([token(" "), token("}")])
    ref = Grammar(RULES, VOCAB)
    for t in [token("{"), token('"name"'), token(":")]:
        ref.accept(t)
    assert state(g) == state(ref)
    for bad, error in ((-1, ValueError), (1.5, TypeError), (True, TypeError), ("3", TypeError), (1 << 21, ValueError)):
        with pytest.raises(error, match="max_rollback"):
            Grammar(RULES, VOCAB, max_rollback=bad)


def test_accept_bytes_and_accept_token_are_one_step_each():
    g = Grammar(RULES, VOCAB)
    start = state(g)
    g.accept_bytes(b'{"name": "ab')
    g.accept_token(token('"'), b'"')
    assert g.rollback_depth == 2
    g.rollback(1)
    g.rollback(1)
    assert state(g) == start


def test_refused_accepts_leave_no_history():
    g = Grammar(RULES, VOCAB)
    g.accept(token("{"))
    with pytest.raises(GrammarError):
        g.accept(token("}"))
    with pytest.raises(GrammarError):
        g.accept_bytes(b"x")
    with pytest.raises(GrammarError):
        g.accept(EOS)  # end of generation before the grammar is complete
    with pytest.raises(ValueError):
        g.accept(len(PIECES))
    assert g.rollback_depth == 1


def test_reset_clears_history_and_termination():
    g = Grammar(RULES, VOCAB)
    for t in DOCUMENT:
        g.accept(t)
    g.accept(EOS)
    assert g.is_terminated()
    g.reset()
    assert g.rollback_depth == 0 and not g.is_terminated()
    assert state(g) == state(Grammar(RULES, VOCAB))
    with pytest.raises(ValueError, match="keeps the last 0"):
        g.rollback(1)


def test_fork_and_clone_keep_history_and_are_independent():
    g = Grammar(RULES, VOCAB, max_rollback=5)
    states = [state(g)]
    for t in DOCUMENT[:4]:
        g.accept(t)
        states.append(state(g))
    for copy in (g.fork(), g.clone()):
        assert copy.rollback_depth == 4 and copy.max_rollback == 5
        copy.rollback(3)
        assert state(copy) == states[1]
        copy.accept(DOCUMENT[1])
        assert state(g) == states[-1] and g.rollback_depth == 4
    g.rollback(4)
    assert state(g) == states[0]


# -- accept_tokens / validate_tokens --------------------------------------------------------------------


@pytest.mark.parametrize("max_rollback", [0, 1, 2, 200])
def test_accept_tokens_all_or_nothing(max_rollback):
    g = Grammar(RULES, VOCAB, max_rollback=max_rollback)
    assert g.accept_tokens(DOCUMENT[:3])
    depth = g.rollback_depth
    before = state(g)
    # the seventh token is refused (an escape takes only " \\ n): nothing of the call stays, the
    # rollback ring included
    assert not g.accept_tokens(DOCUMENT[3:9] + [token("a")] + DOCUMENT[9:])
    assert state(g) == before and g.rollback_depth == depth
    g.rollback(depth)
    ref = Grammar(RULES, VOCAB)
    for t in DOCUMENT[: 3 - depth]:
        ref.accept(t)
    assert state(g) == state(ref)
    g = Grammar(RULES, VOCAB, max_rollback=max_rollback)
    assert g.accept_tokens(DOCUMENT)
    assert g.rollback_depth == min(max_rollback, len(DOCUMENT))
    ref = Grammar(RULES, VOCAB)
    for t in DOCUMENT:
        ref.accept(t)
    assert state(g) == state(ref)


def test_accept_tokens_refused_keeps_the_ring_when_it_wraps():
    # a ring of 2, full, and a call of 7 tokens refused at the last (after an escape): the two entries
    # must come back, though the call overwrote each slot three times
    g = Grammar(RULES, VOCAB, max_rollback=2)
    states = [state(g)]
    for t in DOCUMENT[:3]:
        g.accept(t)
        states.append(state(g))
    assert not g.accept_tokens(DOCUMENT[3:9] + [token("a")])
    assert state(g) == states[3]
    g.rollback(2)
    assert state(g) == states[1]


def test_accept_tokens_single_refused_and_empty():
    g = Grammar(RULES, VOCAB)
    assert g.accept_tokens([])
    assert not g.accept_tokens([token("}")])
    assert g.rollback_depth == 0
    assert g.accept_tokens(np.array([token("{")], dtype=np.int64))
    assert g.rollback_depth == 1


def test_accept_tokens_bad_ids():
    g = Grammar(RULES, VOCAB)
    g.accept(token("{"))
    before = state(g)
    for ids, error, match in (
        ([len(PIECES)], ValueError, r"outside \[0, 22\)"),
        ([token('"name"'), -1], ValueError, r"-1 is outside"),
        ([1.0], TypeError, "must be an int"),
        ([True], TypeError, "must be an int"),
        ("ab", TypeError, "sequence of token ids"),
        (5, TypeError, "sequence of token ids"),
        (np.array([[1]]), ValueError, "1-D integer array"),
        (np.array([1.0]), ValueError, "1-D integer array"),
    ):
        with pytest.raises(error, match=match):
            g.accept_tokens(ids)
        with pytest.raises(error, match=match):
            g.validate_tokens(ids)
        assert state(g) == before and g.rollback_depth == 1


def test_validate_tokens_counts_the_accepted_prefix_and_changes_nothing():
    g = Grammar(RULES, VOCAB, max_rollback=2)
    g.accept(DOCUMENT[0])
    before = state(g)
    assert g.validate_tokens(DOCUMENT[1:]) == len(DOCUMENT) - 1
    assert g.validate_tokens(DOCUMENT[1:4] + [token("}")] + DOCUMENT[4:]) == 3
    assert g.validate_tokens([token("}")]) == 0
    assert g.validate_tokens([]) == 0
    assert state(g) == before and g.rollback_depth == 1
    # an end-of-generation token counts, and nothing after it does
    assert g.validate_tokens(DOCUMENT[1:] + [EOS, EOS]) == len(DOCUMENT)
    assert state(g) == before


# -- is_terminated ---------------------------------------------------------------------------------------


def test_is_terminated_after_end_of_generation():
    g = Grammar('root ::= "a" "b"*', make_vocab(["a", "b", "</s>"], eog=(2,)))
    assert not g.is_terminated()
    g.accept(0)
    assert g.complete and not g.is_terminated()  # complete, but "b" can still follow
    g.accept(2)
    assert g.is_terminated()
    assert not g.accept_tokens([1])  # nothing after the end (XGrammar's rule)
    assert g.validate_tokens([1]) == 0
    g.rollback(1)
    assert not g.is_terminated()
    assert g.accept_tokens([1, 2]) and g.is_terminated()
    assert g.rollback_depth == 3


def test_is_terminated_when_nothing_else_can_follow():
    g = Grammar('root ::= "a" "b"', make_vocab(["a", "b", "</s>", "ab"], eog=(2,)))
    g.accept(3)
    assert g.complete and g.allowed_ids().tolist() == [2]
    assert g.is_terminated()  # only the end-of-generation token is left
    assert g.accept_tokens([2]) and g.is_terminated()
    g.rollback(2)
    assert not g.is_terminated()


def test_is_terminated_on_a_lazy_grammar():
    vocab = make_vocab(["x", "<t>", "a", "</s>"], eog=(3,))
    g = Grammar('root ::= "<t>" "a"', vocab, trigger_patterns=["[\\s\\S]*?(<t>)[\\s\\S]*"])
    g.accept(0)
    assert not g.is_terminated()
    g.accept(1)
    assert not g.awaiting_trigger
    g.accept(2)
    assert g.is_terminated()
    g.rollback(2)
    assert g.awaiting_trigger and g.trigger_buffer == b"x"
    g.accept(3)  # an end-of-generation token before the trigger
    assert g.is_terminated()


def test_rollback_across_a_lazy_trigger():
    vocab = make_vocab(["x", "<t", ">", "a", "</s>"], eog=(4,))
    g = Grammar('root ::= "<t>" "a"', vocab, trigger_patterns=["[\\s\\S]*?(<t>)[\\s\\S]*"])
    states = [state(g)]
    for t in (0, 1, 2, 3):
        g.accept(t)
        states.append(state(g))
    assert not g.awaiting_trigger and g.complete
    for k in range(1, 5):
        g.rollback(1)
        assert state(g) == states[-1 - k]
    assert g.awaiting_trigger and g.trigger_buffer == b""
    assert g.accept_tokens([0, 1, 2, 3])
    assert state(g) == states[-1]
    assert not g.accept_tokens([0, 1, 2, 2])
    assert state(g) == states[-1]


# -- bitmask rows ----------------------------------------------------------------------------------------


def allowed_from_row(row, n_vocab):
    bits = np.unpackbits(np.ascontiguousarray(row).view(np.uint8), bitorder="little")[:n_vocab]
    return np.flatnonzero(bits).tolist()


def test_fill_rows_of_a_numpy_batch_in_place():
    g = Grammar(RULES, VOCAB)
    batch = np.full((4, 1), -1, dtype=np.int32)
    address = batch.ctypes.data
    for i, t in enumerate(DOCUMENT[:4]):
        assert g.fill_next_token_bitmask(batch, i) is batch
        assert allowed_from_row(batch[i], len(PIECES)) == g.allowed_ids().tolist()
        g.accept(t)
    assert batch.ctypes.data == address


def test_fill_rows_of_a_torch_tensor_in_place():
    import torch  # the test extra installs it

    g = Grammar(RULES, VOCAB)
    batch = torch.full((3, 1), -1, dtype=torch.int32)
    address = batch.data_ptr()
    g.fill_next_token_bitmask(batch, 2)
    assert batch.data_ptr() == address
    assert batch[0, 0].item() == -1 and batch[1, 0].item() == -1
    assert allowed_from_row(batch[2].numpy(), len(PIECES)) == g.allowed_ids().tolist() == [token("{")]
    # inside a character (answered on the reference path) the row is filled in place too
    for t in DOCUMENT[:7]:
        g.accept(t)
    g.fill_next_token_bitmask(batch, 0)
    assert allowed_from_row(batch[0].numpy(), len(PIECES)) == sorted([token(b"\xa9"), token(b"\xa8")])
    row = torch.zeros(1, dtype=torch.int32)
    g.fill_next_token_bitmask(row)
    assert allowed_from_row(row.numpy(), len(PIECES)) == sorted([token(b"\xa9"), token(b"\xa8")])


def test_fill_bitmask_bad_arguments():
    import torch  # the test extra installs it

    g = Grammar(RULES, VOCAB)
    good = np.zeros((2, 1), dtype=np.int32)
    readonly = np.zeros((2, 1), dtype=np.int32)
    readonly.flags.writeable = False
    for bad in (
        np.zeros((2, 1), dtype=np.int64),
        np.zeros((2, 2), dtype=np.int32),
        np.zeros((2, 1, 1), np.int32),
        readonly,
        torch.zeros((2, 1), dtype=torch.int64),
        torch.zeros((2, 1), dtype=torch.float32),
        [[0]],
        None,
    ):
        with pytest.raises(ValueError, match="Invalid bitmask"):
            g.fill_next_token_bitmask(bad)
    for index, error, match in (
        (2, ValueError, r"Invalid index: 2 is outside \[0, 2\)"),
        (-1, ValueError, r"Invalid index: -1"),
        (1.0, TypeError, "index must be an int"),
    ):
        with pytest.raises(error, match=match):
            g.fill_next_token_bitmask(good, index)
    with pytest.raises(ValueError, match="Invalid index: 1"):
        g.fill_next_token_bitmask(np.zeros(1, dtype=np.int32), 1)
    assert good.tolist() == [[0], [0]]
    wide = Grammar('root ::= "a"', make_vocab(["a"] + [f"t{i}" for i in range(40)], eog=()))
    with pytest.raises(ValueError, match="contiguous rows"):
        wide.fill_next_token_bitmask(np.zeros((2, 4), dtype=np.int32)[:, ::2])
    wide.fill_next_token_bitmask(np.zeros((2, 4), dtype=np.int32)[:, :2], 1)  # rows contiguous: fine


# -- jump-forward ---------------------------------------------------------------------------------------


def test_jump_forward_forced_text():
    g = Grammar(RULES, VOCAB)
    assert g.jump_forward() == b"{"
    g.accept(token("{"))
    assert g.jump_forward() == b""  # ws ::= [ ]? : a space or the key's quote
    g.accept(token(" "))
    assert g.jump_forward() == b'"name"'
    assert g.jump_forward_tokens() == [token('"name"')]
    g.accept_bytes(b'"na')
    assert g.jump_forward() == b'me"'
    assert g.jump_forward(max_bytes=2) == b"me"
    assert g.jump_forward(max_bytes=0) == b""
    g.accept_bytes(b'me":"ab"}')
    assert g.complete and g.jump_forward() == b""  # the grammar may end here


def test_jump_forward_inside_a_character():
    vocab = make_vocab(["a", b"\xc3", b"\xa9", b"\xa8", "é", "b", b"\xe4", b"\xb8", b"\xad", "</s>"], eog=(9,))
    one = Grammar('root ::= "a" "é" "b"', vocab)
    one.accept(0)
    assert one.jump_forward() == "éb".encode()
    assert one.jump_forward_tokens() == [4, 5]
    one.accept(1)  # \xc3: inside é
    assert one.partial_utf8 == (0x03, 1)
    assert one.jump_forward() == b"\xa9b"
    assert one.jump_forward_tokens() == [2, 5]
    two = Grammar('root ::= "a" ("é" | "è") "b"', vocab)
    two.accept(0)
    assert two.jump_forward() == b""  # only whole characters at a boundary
    two.accept(1)
    assert two.jump_forward() == b""  # \xa9 or \xa8
    # a three-byte character whose candidates share their first continuation byte
    three = Grammar('root ::= [\u4e2d-\u4e2f] "b"', vocab)
    three.accept(6)
    assert three.jump_forward() == b"\xb8"
    three.accept(7)
    assert three.jump_forward() == b""
    single = Grammar('root ::= "\u4e2d" "b"', vocab)
    single.accept(6)
    assert single.jump_forward() == b"\xb8\xadb"


def test_jump_forward_stops_where_nothing_is_forced():
    vocab = make_vocab(["a", "b", "</s>", "<x>"], eog=(2,))
    assert Grammar('root ::= "a" <[3]> "b"', vocab).jump_forward() == b"a"  # a token terminal takes an id
    assert Grammar('root ::= "a"?', vocab).jump_forward() == b""
    assert Grammar("root ::= [^a]", vocab).jump_forward() == b""
    assert Grammar('root ::= "\\x00" "a"', vocab).jump_forward() == b""  # no piece spells NUL
    assert len(Grammar('root ::= "a" root', vocab).jump_forward()) == 4096  # forced forever: bounded
    lazy = Grammar('root ::= "<x>" "a"', vocab, trigger_tokens=[3])
    assert lazy.jump_forward() == b""  # waiting for the trigger: anything goes
    lazy.accept(3)
    assert lazy.jump_forward() == b"a"
    g = Grammar('root ::= "ab"', vocab)
    g.accept_bytes(b"ab")
    g.accept(2)
    assert g.is_terminated() and g.jump_forward() == b""
    for bad, error in ((-1, ValueError), (1.5, TypeError)):
        with pytest.raises(error, match="max_bytes"):
            g.jump_forward(bad)


def test_jump_forward_tokens_drops_a_tail_a_longer_piece_extends():
    vocab = make_vocab(["{", '"', "ke", "key", "y", '":', "</s>"], eog=(6,))
    g = Grammar('root ::= "{\\"key\\":" [0-9]', vocab)
    assert g.jump_forward() == b'{"key":'
    # greedy: { " key ": ; the last, '":', is no prefix of a longer piece: kept
    assert g.jump_forward_tokens() == [0, 1, 3, 5]
    h = Grammar('root ::= "{\\"ke" [0-9]', vocab)
    assert h.jump_forward_tokens() == [0, 1]  # "ke" is a prefix of "key": dropped
    for t in g.jump_forward_tokens():
        g.accept(t)
    assert g.jump_forward() == b""


# -- property: accept k, roll back k, same state ---------------------------------------------------------


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_accept_then_rollback_is_the_identity(data):
    g = Grammar(RULES, VOCAB, max_rollback=data.draw(st.integers(0, 12)))
    prefix = data.draw(st.integers(0, len(DOCUMENT)))
    for t in DOCUMENT[:prefix]:
        g.accept(t)
    original = state(g)
    depth = g.rollback_depth
    walked = []
    for _ in range(data.draw(st.integers(0, 10))):
        allowed = g.allowed_ids().tolist()
        if not allowed:
            break
        t = data.draw(st.sampled_from(allowed))
        if not g.accept_tokens([t]):
            break
        walked.append(t)
    k = len(walked)
    if k > g.max_rollback:
        with pytest.raises(ValueError):
            g.rollback(k)
        return
    g.rollback(k)
    assert state(g) == original
    assert g.rollback_depth == min(depth + k, g.max_rollback) - k
