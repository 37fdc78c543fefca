"""Unit tests of the GBNF engine on small hand-made vocabularies.

Every expected value below is worked out by hand from llama.cpp's
src/llama-grammar.cpp (the copy vendored by llama-cpp-python 0.3.36), not read
off bankml's output; the comments say which part of llama.cpp decides it:

* ``llama_grammar_apply_impl``: end-of-generation tokens are allowed iff some
  stack is empty (whatever their piece); empty or NUL-leading pieces are
  always rejected; every other piece is decoded with ``decode_utf8`` (starting
  from the grammar's partial UTF-8 state) and run through
  ``llama_grammar_reject_candidates``.
* ``llama_grammar_reject_candidates_for_stack``: a token is rejected only if
  every stack rejects it; a token whose code points run out is kept if it
  ended on a whole character, or (on a character-class stack) if
  ``llama_grammar_match_partial_char`` says some completion could match; on a
  token stack (``<[id]>``, ``!<[id]>``) the rest of the token is judged by id.
* ``decode_utf8``: a continuation byte where a lead byte is expected (or a
  non-continuation byte where one is expected) makes the whole piece decode
  to nothing, with ``n_remain = -1``; decoding stops at a NUL byte.
* ``llama_grammar_accept_impl`` / ``llama_grammar_accept_token`` /
  ``llama_grammar_accept_str`` for accepting, and
  ``llama_grammar_trigger_pattern::find`` for lazy grammars.

Each test runs in milliseconds (the hostile-input ones in well under a second);
no GGUF file and no libllama are used. Tests marked BANKML BUG fail on purpose:
they pin behaviour where bankml was found to differ from llama.cpp or from its
own contract (see their comments).
"""

from __future__ import annotations

import pickle
import time

import numpy as np
import pytest

from bankml import Grammar, GrammarError, Rules, Vocab, mask_hash

from ..bounded import HANG_SECONDS

NEG_INF = -np.inf
# llama.cpp's element types (enum llama_gretype)
END, ALT, RULE_REF, CHAR, CHAR_NOT, CHAR_RNG_UPPER, CHAR_ALT, CHAR_ANY, TOKEN, TOKEN_NOT = range(10)


# ---------------------------------------------------------------------------
# helpers


def make_vocab(*pieces, eog=()):
    """A Vocab from str (UTF-8 encoded) or bytes pieces."""
    return Vocab([p.encode("utf-8") if isinstance(p, str) else p for p in pieces], list(eog))


def allowed_everywhere(g):
    """The allowed ids as every public mask entry point reports them, checked to agree."""
    n = g.vocab.n_vocab
    fast = g.allowed_ids().tolist()
    reference = g.allowed_ids(reference=True).tolist()
    assert fast == reference, f"fast path {fast} != reference path {reference}"
    by_allows = [i for i in range(n) if g.allows(i)]
    assert by_allows == reference, f"allows() gives {by_allows}, the reference path {reference}"
    logits = np.arange(1, n + 1, dtype=np.float32)
    out = g.apply(logits)
    assert out is logits
    kept = np.flatnonzero(logits != NEG_INF).tolist()
    assert kept == reference, f"apply() keeps {kept}, the reference path allows {reference}"
    assert np.array_equal(logits[kept], np.arange(1, n + 1, dtype=np.float32)[kept])  # finite logits untouched
    width = (n + 31) // 32
    bitmask = np.full(width, -1, dtype=np.int32)
    g.fill_next_token_bitmask(bitmask)
    bits = np.unpackbits(bitmask.view(np.uint8), bitorder="little")
    assert not bits[n:].any(), "bits past n_vocab must be zero"
    assert np.flatnonzero(bits[:n]).tolist() == reference
    return reference


def assert_allowed(g, expected):
    expected = sorted(expected)
    got = allowed_everywhere(g)
    if got != expected:
        pieces = g.vocab.pieces
        extra = [(i, pieces[i]) for i in got if i not in expected]
        missing = [(i, pieces[i]) for i in expected if i not in got]
        pytest.fail(f"allowed {got}, expected {expected}; wrongly allowed {extra}, wrongly rejected {missing}")


def state_of(g):
    """Everything observable about a matcher's state."""
    return (
        g.allowed_ids(reference=True).tolist(),
        g.stacks,
        g.partial_utf8,
        g.complete,
        g.n_stacks,
        g.awaiting_trigger,
        g.trigger_buffer,
    )


def hang_guard(seconds=HANG_SECONDS):
    """Context manager failing a body that ran past tests/bounded.py's hang guard (120 s, where the bodies take
    about 0.1 s): llama.cpp loops ~2**64 times on some of these inputs, and such a body is reported as stuck.
    A hang guard as tests/bounded.py's, set far above any loaded machine's time: not a speed check."""

    class _Timer:
        def __enter__(self):
            self.start = time.perf_counter()
            return self

        def __exit__(self, *exc):
            self.elapsed = time.perf_counter() - self.start
            if exc[0] is None:
                assert self.elapsed < seconds, f"took {self.elapsed:.2f} s (limit {seconds} s)"
            return False

    return _Timer()


# ---------------------------------------------------------------------------
# end of generation


def test_eog_allowed_only_when_a_stack_is_empty():
    # ids: 0 "a", 1 "b", 2 "</s>" (eog), 3 "a" (eog: its piece is irrelevant), 4 "" (eog, empty piece), 5 "ab"
    v = make_vocab("a", "b", "</s>", "a", b"", "ab", eog=[2, 3, 4])
    g = Grammar('root ::= "a" "b"?', v)
    # One stack, top "a": no empty stack, so no eog id, not even 3 whose piece "a" matches.
    # "ab": "a" then the stacks of "b"? are ["b"] and [] -> "b" matches.
    assert not g.complete
    assert_allowed(g, [0, 5])
    g.accept(0)
    # stacks ["b"] and []: eog allowed by id whatever the piece (4 is empty, checked before the empty test)
    assert g.complete
    assert_allowed(g, [1, 2, 3, 4])
    before = state_of(g)
    g.accept(3)  # an eog token on a complete grammar: llama_grammar_accept_impl returns, nothing changes
    assert state_of(g) == before
    g.accept(1)
    assert g.complete and g.stacks == [[]]
    assert_allowed(g, [2, 3, 4])


def test_eog_rejected_and_refused_before_completion():
    v = make_vocab("a", "</s>", eog=[1])
    g = Grammar('root ::= "a" "a"', v)
    assert_allowed(g, [0])
    before = state_of(g)
    with pytest.raises(GrammarError):
        g.accept(1)  # llama.cpp aborts (GGML_ABORT) here
    assert state_of(g) == before


def test_grammar_complete_at_start_allows_eog_immediately():
    v = make_vocab("a", "aa", "b", "</s>", eog=[3])
    g = Grammar('root ::= "a"*', v)
    assert g.complete
    assert_allowed(g, [0, 1, 3])


# ---------------------------------------------------------------------------
# empty and NUL pieces


def test_empty_and_nul_leading_pieces_never_allowed():
    # 0 "a", 1 "", 2 "\0", 3 "\0a", 4 "a\0b" (decode stops at the NUL: just "a"), 5 "b"
    v = make_vocab("a", b"", b"\x00", b"\x00a", b"a\x00b", "b")
    g = Grammar('root ::= "a"*', v)
    # The empty stack would keep an empty piece (no code points, n_remain 0), but
    # llama_grammar_apply_impl rejects `piece.empty() || piece[0] == 0` before matching.
    assert_allowed(g, [0, 4])
    g2 = Grammar("root ::= .*", v)
    assert_allowed(g2, [0, 4, 5])
    g2.accept(4)  # consumes "a" only
    assert g2.complete
    assert_allowed(g2, [0, 4, 5])


def test_accepting_an_empty_piece_drops_the_empty_stacks():
    # llama_grammar_accept_token skips empty stacks (`continue`) and keeps every character
    # stack, since an empty piece has no code point to match: the grammar stops being complete.
    v = make_vocab("a", b"", "</s>", eog=[2])
    g = Grammar('root ::= "a"*', v)
    assert g.complete
    assert_allowed(g, [0, 2])
    g.accept(1)
    assert not g.complete
    assert_allowed(g, [0])


# ---------------------------------------------------------------------------
# partial UTF-8 across tokens

ZHONG = "中"  # U+4E2D = e4 b8 ad


def zhong_vocab():
    # 0 e4 b8 (first two bytes of U+4E2D), 1 ad (completes U+4E2D), 2 ae (would complete U+4E2E),
    # 3 e4 (lead byte alone), 4 "a", 5 ad "!", 6 "中", 7 e3 81 (first two bytes of U+3041), 8 "!"
    return make_vocab(b"\xe4\xb8", b"\xad", b"\xae", b"\xe4", "a", b"\xad!", ZHONG, b"\xe3\x81", "!")


def test_partial_utf8_carried_across_tokens():
    v = zhong_vocab()
    g = Grammar('root ::= [一-鿿] "!"', v)  # U+4E00-U+9FFF
    # e4 b8: n_remain 1, value 0x138 -> completions U+4E00..U+4E3F overlap the class: allowed.
    # e4: n_remain 2, value 4 -> U+4000..U+4FFF: allowed. e3 81 -> U+3040..U+307F: rejected.
    # ad / ae / ad! alone: a continuation byte where a lead is expected -> invalid -> rejected.
    assert_allowed(g, [0, 3, 6])
    g.accept(0)
    assert g.partial_utf8 == (0x138, 1)
    # From (0x138, 1): ad -> U+4E2D, ae -> U+4E2E, "ad!" -> U+4E2D "!" (both in the grammar).
    # Any piece starting with a non-continuation byte now decodes as invalid.
    assert_allowed(g, [1, 2, 5])
    g.accept(1)
    assert g.partial_utf8 == (0x4E2D, 0)  # decode_utf8 returns {value, n_remain} as left
    assert_allowed(g, [8])


def test_partial_utf8_single_character_class():
    v = zhong_vocab()
    g = Grammar('root ::= [中] "!"', v)
    assert_allowed(g, [0, 3, 6])  # U+4E2D lies in U+4E00..U+4E3F and in U+4000..U+4FFF
    g.accept(0)
    assert_allowed(g, [1, 5])  # U+4E2E (ae) is not U+4E2D


def test_partial_utf8_negated_class_quirk():
    # llama_grammar_match_partial_char returns `is_positive_char` (false for [^...]) as soon
    # as the completion range overlaps an excluded character, even though other completions
    # (U+4E00, say) would satisfy [^中]: the partial e4 b8 and the lead e4 are rejected.
    v = zhong_vocab()
    g = Grammar('root ::= [^中] "!"', v)
    assert_allowed(g, [4, 7, 8])  # "a", e3 81 (U+3040..U+307F excludes U+4E2D), "!"


def test_partial_utf8_hiragana_range():
    v = zhong_vocab()
    g = Grammar("root ::= [ぁ-ゟ]", v)  # U+3041-U+309F
    assert_allowed(g, [7])  # only e3 81 can still become a hiragana


def test_stray_continuation_byte():
    # 0 80, 1 "a" 80, 2 "a", 3 bf, 4 c3 (lead of é = c3 a9), 5 a9, 6 "</s>" (eog)
    v = make_vocab(b"\x80", b"a\x80", "a", b"\xbf", b"\xc3", b"\xa9", "</s>", eog=[6])
    g = Grammar("root ::= .*", v)
    # A stray continuation byte decodes to [0] with n_remain -1: every stack rejects it
    # (match_partial_char refuses n_remain < 0; the empty stack refuses n_remain != 0).
    # "a" 80: the invalid byte clears the code points decoded so far -> rejected too.
    assert_allowed(g, [2, 4, 6])
    g.accept(4)
    assert g.partial_utf8 == (3, 1)
    # Completions of c3: 80 -> U+C0, bf -> U+FF, a9 -> U+E9. llama_grammar_accept_token skipped
    # the empty stack (`if (stack.empty()) continue;`) and kept the "." stack as it was (no whole
    # code point to match), so the grammar is no longer complete: no eog mid-character.
    assert not g.complete
    assert_allowed(g, [0, 3, 5])
    g.accept(5)  # U+E9 matched by ".": the repetition offers "." and the empty stack again
    assert g.complete
    assert g.partial_utf8 == (0xE9, 0)
    assert_allowed(g, [2, 4, 6])


def test_accept_bytes_stray_continuation_leaves_invalid_state():
    v = make_vocab(b"\x80", b"a\x80", "a", b"\xbf", b"\xc3", b"\xa9", "</s>", eog=[6])
    g = Grammar('root ::= "a"', v)
    stacks = g.stacks
    # llama_grammar_accept_str: the decode yields no code point, the stacks are kept, partial = {0, -1}
    g.accept_bytes(b"\x80")
    assert g.partial_utf8 == (0, -1)
    assert g.stacks == stacks
    assert_allowed(g, [2])  # a fresh decode from n_remain -1 behaves like n_remain 0


def test_accepting_a_stray_byte_token_drops_empty_stacks():
    # The mask rejects 80, but llama_grammar_accept_token takes it: no code point to match, so
    # every character stack survives while the empty stack is skipped.
    v = make_vocab(b"\x80", b"a\x80", "a", b"\xbf", b"\xc3", b"\xa9", "</s>", eog=[6])
    g = Grammar("root ::= .*", v)
    assert g.complete
    g.accept(0)
    assert g.partial_utf8 == (0, -1)
    assert not g.complete
    assert_allowed(g, [2, 4])


def test_overlong_two_byte_leads_rejected():
    # 0 c0, 1 c1, 2 c2, 3 df, 4 c0 80, 5 c1 bf, 6 "a", 7 e0, 8 f0
    v = make_vocab(b"\xc0", b"\xc1", b"\xc2", b"\xdf", b"\xc0\x80", b"\xc1\xbf", "a", b"\xe0", b"\xf0")
    g = Grammar("root ::= .", v)
    # c0 / c1 leave value 0 / 1 with n_remain 1: "7-bit char split across 2 bytes (overlong)" -> rejected
    # even by ".". c2 / df: U+80..U+BF / U+7C0..U+7FF. e0: low 0 becomes 1 << 11 -> U+800..U+FFF.
    # f0: low 0 becomes 1 << 16. c1 bf decodes to U+7F (matched by "."). c0 80 decodes to code
    # point 0, which the matcher reads as the end of the token: no stack rejects it.
    assert_allowed(g, [2, 3, 4, 5, 6, 7, 8])
    g2 = Grammar("root ::= [a-z]", v)
    assert_allowed(g2, [4, 6])


def test_overlong_nul_token_accept_feeds_code_point_zero():
    # BANKML BUG (reported to the lead): llama_grammar_accept_token iterates over every decoded
    # code point (`for (it = begin; it != end - 1; ++it)`), so a piece that decodes to an embedded
    # code point 0 (the overlong NUL c0 80) feeds chr 0 to the stacks. bankml's
    # accept_token_stacks stops at the first 0 instead. Confirmed against libllama 0.3.36 with a
    # synthetic SPM vocabulary holding the normal token c0 80:
    #   root ::= [a-z]   accept(c0 80) -> libllama throws "Unexpected empty grammar stack"
    #   root ::= .       accept(c0 80) -> libllama: complete, only eog (and c0 80) allowed
    v = make_vocab(b"\xc0\x80", "a", "b", "</s>", eog=[3])
    g = Grammar("root ::= .", v)
    g.accept(0)  # chr 0 is matched by "."
    assert g.complete
    assert_allowed(g, [0, 3])
    g2 = Grammar("root ::= [a-z]", v)
    assert g2.allows(0)  # the mask allows it (code point 0 ends the candidate) ...
    with pytest.raises(GrammarError):
        g2.accept(0)  # ... but accepting it feeds chr 0, which [a-z] does not match


# ---------------------------------------------------------------------------
# token terminals


def token_vocab():
    # 0 "a", 1 "zz", 2 "zz" (same piece, other id), 3 e4, 4 "a" e4, 5 "", 6 "</s>" (eog),
    # 7 "<zz>", 8 "<zz>" (duplicate), 9 80
    return make_vocab("a", "zz", "zz", b"\xe4", b"a\xe4", b"", "</s>", "<zz>", "<zz>", b"\x80", eog=[6])


def test_token_terminal_by_id():
    v = token_vocab()
    g = Grammar('root ::= <[1]> "a"', v)
    assert_allowed(g, [1])  # by id: 2 has the same piece and is rejected
    before = state_of(g)
    with pytest.raises(GrammarError):
        g.accept(2)
    assert state_of(g) == before
    g.accept(1)
    assert_allowed(g, [0])
    g.accept(0)
    assert_allowed(g, [6])


def test_token_terminal_piece_is_irrelevant():
    # <[7]> matches token 7 by id; 8 spells the same "<zz>" and is rejected, and no character
    # rule is involved: the piece is never looked at.
    v = token_vocab()
    g = Grammar("root ::= <[7]>", v)
    assert_allowed(g, [7])
    g.accept(7)
    assert g.complete


def test_negated_token_terminal():
    v = token_vocab()
    g = Grammar("root ::= !<[1]>", v)
    # Any id but 1 ... except: e4 has no whole code point and ends mid-character (rejected at a
    # token stack: "reject iff it ended in a partial response"); 80 is invalid; "" is empty;
    # eog needs an empty stack. "a" e4 has a code point, so only its id is checked.
    assert_allowed(g, [0, 2, 4, 7, 8])
    g.accept(4)
    # accept_token sets partial_utf8 from the piece even when a token terminal took it
    assert g.partial_utf8 == (4, 2)
    assert g.complete
    # Only the empty stack is left and it needs whole characters: every piece now either
    # decodes invalid or leaves the character open; only eog survives.
    assert_allowed(g, [6])


def test_token_terminal_by_text():
    v = token_vocab()
    rules = Rules.parse("root ::= <zz> !<zz>", vocab=v)
    assert rules.rules[0] == [(TOKEN, 7), (TOKEN_NOT, 7), (END, 0)]  # the lowest id with piece "<zz>"
    g = Grammar("root ::= <zz>", v)
    assert_allowed(g, [7])
    with pytest.raises(GrammarError) as info:
        Rules.parse("root ::= <nope>", vocab=v)
    assert info.value.reason == "invalid token '<nope>'"
    assert (info.value.line, info.value.column) == (1, 10)
    with pytest.raises(GrammarError) as info:
        Rules.parse("root ::= <zz>")
    assert info.value.reason == "no vocab to parse token"
    assert Rules.parse("root ::= <[7]>").rules[0] == [(TOKEN, 7), (END, 0)]  # ids need no vocab


def test_token_terminal_mask_allows_what_accept_refuses():
    # root ::= "\n" (!<[5]>)* <[5]>: "\n\n" matches "\n" with its first character, then meets a
    # token stack (!<[5]>) with code points left, where reject_candidates_for_stack only checks
    # the id -> allowed. llama_grammar_accept_token instead feeds the second "\n" to the token
    # stacks, which ignore characters (accept_chr returns) -> no stack -> it throws.
    # 0 "\n", 1 "\n\n", 2 "x", 3 "\nx", 4 "</s>" (eog), 5 "<end>"
    v = make_vocab("\n", "\n\n", "x", "\nx", "</s>", "<end>", eog=[4])
    g = Grammar('root ::= "\\n" (!<[5]>)* <[5]>', v)
    assert_allowed(g, [0, 1, 3])
    before = state_of(g)
    with pytest.raises(GrammarError):
        g.accept(1)
    assert state_of(g) == before
    g.accept(0)
    assert_allowed(g, [0, 1, 2, 3, 5])  # !<[5]> takes any id but 5, <[5]> takes 5
    g.accept(1)  # now by id through !<[5]>
    g.accept(5)
    assert g.complete
    assert_allowed(g, [4])


# ---------------------------------------------------------------------------
# ".", negated classes, astral ranges


def astral_vocab():
    # 0 "a", 1 "d", 2 "é", 3 U+1F600, 4 U+1F64F, 5 U+1F650, 6 U+1F300, 7 "\n", 8 "ab",
    # 9 f0 9f, 10 f0 9f 98, 11 f0 9f 8c, 12 f0 90, 13 "中", 14 80, 15 bf, 16 "</s>" (eog)
    return make_vocab(
        "a",
        "d",
        "é",
        "\U0001f600",
        "\U0001f64f",
        "\U0001f650",
        "\U0001f300",
        "\n",
        "ab",
        b"\xf0\x9f",
        b"\xf0\x9f\x98",
        b"\xf0\x9f\x8c",
        b"\xf0\x90",
        "中",
        b"\x80",
        b"\xbf",
        "</s>",
        eog=[16],
    )


def test_any_character():
    v = astral_vocab()
    g = Grammar("root ::= .", v)
    # every single character and every open lead sequence; "ab" leaves "b" for the empty stack
    assert_allowed(g, [0, 1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13])


def test_negated_class():
    v = astral_vocab()
    g = Grammar("root ::= [^a-c\\n]", v)
    # partial sequences: no excluded character in their completion range -> `!is_positive_char`
    assert_allowed(g, [1, 2, 3, 4, 5, 6, 9, 10, 11, 12, 13])


def test_astral_range():
    v = astral_vocab()
    g = Grammar("root ::= [\\U0001F600-\\U0001F64F]", v)
    # f0 9f -> U+1F000..U+1FFFF and f0 9f 98 -> U+1F600..U+1F63F overlap the range;
    # f0 9f 8c -> U+1F300..U+1F33F and f0 90 -> U+10000..U+10FFF do not.
    assert_allowed(g, [3, 4, 9, 10])
    g.accept(10)
    assert g.partial_utf8 == (0x7D8, 1)
    assert_allowed(g, [14, 15])  # 80 -> U+1F600, bf -> U+1F63F
    g.accept(15)
    assert g.complete
    assert_allowed(g, [16])


def test_negated_astral_range():
    v = astral_vocab()
    g = Grammar("root ::= [^\\U0001F600-\\U0001F64F]", v)
    # f0 9f and f0 9f 98 overlap the excluded range -> rejected (the negated-class quirk);
    # f0 9f 8c and f0 90 do not -> allowed.
    assert_allowed(g, [0, 1, 2, 5, 6, 7, 11, 12, 13])


# ---------------------------------------------------------------------------
# apply, apply_candidates, fill_next_token_bitmask, allows


def abc_vocab():
    return make_vocab("a", "b", "c", b"", "</s>", eog=[4])


def test_apply_sets_rejected_logits_to_minus_inf_in_place():
    g = Grammar("root ::= [ab]", abc_vocab())
    logits = np.array([0.5, 1.5, 2.5, 3.5, 4.5], dtype=np.float32)
    assert g.apply(logits) is logits
    assert logits.tolist() == [0.5, 1.5, NEG_INF, NEG_INF, NEG_INF]


@pytest.mark.parametrize(
    "bad",
    [
        np.zeros(5, dtype=np.float64),
        np.zeros(6, dtype=np.float32),
        np.zeros(4, dtype=np.float32),
        np.zeros((1, 5), dtype=np.float32),
        [0.0] * 5,
    ],
)
def test_apply_validates_logits(bad):
    g = Grammar("root ::= [ab]", abc_vocab())
    with pytest.raises(ValueError, match=r"\(5,\)"):
        g.apply(bad)


def test_apply_refuses_read_only_and_strided_logits():
    g = Grammar("root ::= [ab]", abc_vocab())
    ro = np.zeros(5, dtype=np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match=r"\(5,\)"):
        g.apply(ro)
    strided = np.zeros(10, dtype=np.float32)[::2]
    with pytest.raises(ValueError):
        g.apply(strided)
    assert not np.isinf(strided).any()


def test_apply_candidates():
    g = Grammar("root ::= [ab]", abc_vocab())
    ids = np.array([4, 0, 2, 1, 3], dtype=np.int64)
    logits = np.array([1, 2, 3, 4, 5], dtype=np.float32)
    g.apply_candidates(ids, logits)
    assert logits.tolist() == [NEG_INF, 2.0, NEG_INF, 4.0, NEG_INF]
    sub = np.array([1, 2], dtype=np.int32)
    logits = np.zeros(2, dtype=np.float32)
    g.apply_candidates(sub, logits)
    assert logits.tolist() == [0.0, NEG_INF]
    with pytest.raises(ValueError, match=r"\(2,\)"):
        g.apply_candidates(sub, np.zeros(3, dtype=np.float32))
    with pytest.raises(ValueError):
        g.apply_candidates(np.array([5]), np.zeros(1, dtype=np.float32))
    with pytest.raises(ValueError):
        g.apply_candidates(np.array([-1]), np.zeros(1, dtype=np.float32))


def test_allows():
    g = Grammar("root ::= [ab]", abc_vocab())
    assert [g.allows(i) for i in range(5)] == [True, True, False, False, False]
    assert g.allows(np.int64(1))
    with pytest.raises(ValueError):
        g.allows(5)
    with pytest.raises(ValueError):
        g.allows(-1)


def bitmask_vocab():
    # 40 tokens: "a" at 0, 31 and 33, c3 (lead of é) at 35, a9 at 39, "é" at 36, "</s>" (eog) at 37
    pieces = [f"w{i}" for i in range(40)]
    for i in (0, 31, 33):
        pieces[i] = "a"
    pieces[35] = b"\xc3"
    pieces[36] = "é"
    pieces[37] = "</s>"
    pieces[39] = b"\xa9"
    return make_vocab(*pieces, eog=[37])


def bits_of(words):
    return np.flatnonzero(np.unpackbits(np.asarray(words, dtype=np.int32).view(np.uint8), bitorder="little")).tolist()


def test_fill_next_token_bitmask_1d():
    v = bitmask_vocab()
    g = Grammar("root ::= [a]", v)
    bitmask = np.full(2, -1, dtype=np.int32)
    assert g.fill_next_token_bitmask(bitmask) is bitmask
    # bit 31 of word 0 is the int32 sign bit; bits 40..63 (past n_vocab) are zero
    assert bitmask.tolist() == [1 | -(1 << 31), 1 << 1]
    assert bits_of(bitmask) == [0, 31, 33]


def test_fill_next_token_bitmask_partial_state_and_2d():
    v = bitmask_vocab()
    g = Grammar('root ::= "é"', v)
    assert bits_of(g.fill_next_token_bitmask(np.zeros(2, dtype=np.int32))) == [35, 36]
    g.accept(35)  # c3: partial (3, 1); the mask now goes through the reference path
    batch = np.full((3, 2), 7, dtype=np.int32)
    g.fill_next_token_bitmask(batch, 1)
    assert batch[0].tolist() == [7, 7] and batch[2].tolist() == [7, 7]
    assert batch[1].tolist() == [0, 1 << 7]  # only a9 (id 39); bits 40..63 zero
    g.fill_next_token_bitmask(batch, index=2)
    assert batch[2].tolist() == [0, 1 << 7]


@pytest.mark.parametrize(
    "bad",
    [
        np.zeros(2, dtype=np.uint32),
        np.zeros(2, dtype=np.int64),
        np.zeros(3, dtype=np.int32),
        np.zeros((2, 3), dtype=np.int32),
        np.zeros((1, 1, 2), dtype=np.int32),
        [0, 0],
    ],
)
def test_fill_next_token_bitmask_validates(bad):
    g = Grammar("root ::= [a]", bitmask_vocab())
    with pytest.raises(ValueError, match=r"\(2,\)"):
        g.fill_next_token_bitmask(bad)


# ---------------------------------------------------------------------------
# accepting


def test_accept_error_leaves_state_unchanged():
    # 0 "a", 1 "b", 2 "1", 3 "ab", 4 "</s>" (eog), 5 "x", 6 c3
    v = make_vocab("a", "b", "1", "ab", "</s>", "x", b"\xc3", eog=[4])
    g = Grammar('root ::= "ab" [0-9]', v)
    assert_allowed(g, [0, 3])
    g.accept(0)
    before = state_of(g)
    for bad in (5, 0, 4, 3, 2):
        with pytest.raises(GrammarError):
            g.accept(bad)
        assert state_of(g) == before, f"state changed after refusing token {bad}"
    assert_allowed(g, [1])
    g.accept(1)
    assert_allowed(g, [2])
    with pytest.raises(GrammarError):
        g.accept(4)  # end of generation before the grammar is complete
    g.accept(2)
    assert g.complete
    g.accept(4)
    with pytest.raises(ValueError):
        g.accept(7)  # out of range
    with pytest.raises(ValueError):
        g.accept(-1)


def test_accept_token_with_explicit_piece():
    v = make_vocab("a", "b")
    g = Grammar('root ::= "xy" <[1]>', v)
    g.accept_token(0, b"xy")  # the piece given, not the vocabulary's
    assert_allowed(g, [1])
    with pytest.raises(TypeError):
        g.accept_token(1, "b")
    g.accept_token(1, b"whatever")  # a token terminal matches by id
    assert g.complete


def test_accept_bytes_prefill():
    # 0 "{", 1 "a", 2 "}", 3 "ab}", 4 "1", 5 "</s>" (eog)
    v = make_vocab("{", "a", "}", "ab}", "1", "</s>", eog=[5])
    g = Grammar('root ::= "{" [a-z]+ "}"', v)
    g.accept_bytes("{ab")
    assert_allowed(g, [1, 2, 3])
    before = state_of(g)
    with pytest.raises(GrammarError):
        g.accept_bytes(b"a1")  # fails on its second character: the first is not kept either
    assert state_of(g) == before
    g.accept_bytes(b"}")
    assert g.complete
    assert_allowed(g, [5])
    with pytest.raises(TypeError):
        g.accept_bytes(5)


def test_accept_bytes_leaves_partial_utf8_open():
    # 0 a9, 1 "é", 2 c3, 3 "}", 4 80 (completes c3 to U+C0, which the grammar does not take)
    v = make_vocab(b"\xa9", "é", b"\xc3", "}", b"\x80")
    g = Grammar('root ::= "{" "é" "}"', v)
    g.accept_bytes(b"{\xc3")
    assert g.partial_utf8 == (3, 1)
    assert_allowed(g, [0])
    g.accept_bytes(b"\xa9")
    assert g.partial_utf8 == (0xE9, 0)
    assert_allowed(g, [3])


# ---------------------------------------------------------------------------
# clone and reset


def test_clone_is_independent():
    # 0 "a", 1 "b", 2 ".", 3 c3, 4 a9, 5 "</s>" (eog)
    v = make_vocab("a", "b", ".", b"\xc3", b"\xa9", "</s>", eog=[5])
    g = Grammar('root ::= [abé]+ "."', v)
    g.accept(0)
    c = g.clone()
    assert state_of(c) == state_of(g)
    c.accept(2)
    assert c.complete and not g.complete
    assert_allowed(g, [0, 1, 2, 3])
    assert_allowed(c, [5])
    g.accept(3)  # partial (3, 1) in the original only
    assert g.partial_utf8 == (3, 1) and c.partial_utf8 == (0x2E, 0)
    c2 = g.clone()
    assert c2.partial_utf8 == (3, 1)
    assert_allowed(c2, [4])
    c2.accept(4)
    assert g.partial_utf8 == (3, 1)
    assert_allowed(g, [4])
    assert_allowed(c2, [0, 1, 2, 3])


def test_reset():
    v = make_vocab("a", "b", ".", b"\xc3", b"\xa9", "</s>", eog=[5])
    g = Grammar('root ::= [abé]+ "."', v)
    fresh = state_of(g)
    g.accept(0)
    g.accept(3)
    assert state_of(g) != fresh
    g.reset()
    assert state_of(g) == fresh
    assert g.partial_utf8 == (0, 0)


# ---------------------------------------------------------------------------
# lazy grammars

TOOL_GRAMMAR = 'root ::= "<tool_call>" "{" [a-z]* "}"'


def lazy_vocab():
    # 0 "Hello", 1 " ", 2 "<tool", 3 "_call>", 4 "<tool_call>", 5 "{", 6 "}", 7 "x",
    # 8 "Say<tool", 9 "</s>" (eog), 10 "", 11 "\0"
    return make_vocab(
        "Hello", " ", "<tool", "_call>", "<tool_call>", "{", "}", "x", "Say<tool", "</s>", b"", b"\x00", eog=[9]
    )


def test_lazy_awaiting_allows_everything():
    v = lazy_vocab()
    g = Grammar(TOOL_GRAMMAR, v, trigger_tokens=[4])
    assert g.lazy and g.awaiting_trigger
    # llama_grammar_apply_impl returns at once while awaiting: even eog, "" and "\0" keep their logits
    everything = list(range(12))
    assert g.allowed_ids().tolist() == everything
    assert g.allowed_ids(reference=True).tolist() == everything
    assert all(g.allows(i) for i in everything)
    logits = np.arange(12, dtype=np.float32)
    g.apply(logits)
    assert logits.tolist() == list(map(float, everything))
    bitmask = np.zeros(1, dtype=np.int32)
    g.fill_next_token_bitmask(bitmask)
    assert bitmask.tolist() == [(1 << 12) - 1]
    ids = np.array([9, 10], dtype=np.int32)
    logits = np.zeros(2, dtype=np.float32)
    g.apply_candidates(ids, logits)
    assert logits.tolist() == [0.0, 0.0]


def test_lazy_trigger_token():
    v = lazy_vocab()
    g = Grammar(TOOL_GRAMMAR, v, trigger_tokens=[4])
    g.accept(0)
    g.accept(1)
    g.accept(9)  # eog while awaiting: llama.cpp checks awaiting_trigger first and buffers it
    g.accept(7)
    assert g.awaiting_trigger
    g.accept(4)  # the trigger token itself is accepted by the grammar
    assert not g.awaiting_trigger
    assert_allowed(g, [5])
    g.accept(5)
    assert_allowed(g, [6, 7])


def test_lazy_trigger_token_rejected_by_grammar():
    # BANKML BUG (reported to the lead; bankml's own contract, since libllama aborts here):
    # accept() promises the state unchanged after a GrammarError, but _accept_awaiting clears
    # trigger_bytes before committing the trigger token and _restore() does not bring it back,
    # so the buffered b"Hello" is lost (awaiting_trigger and the stacks are restored).
    v = lazy_vocab()
    g = Grammar(TOOL_GRAMMAR, v, trigger_tokens=[7])
    g.accept(0)
    assert g.trigger_buffer == b"Hello"
    before = state_of(g)
    with pytest.raises(GrammarError):
        g.accept(7)  # "x" is not "<tool_call>"
    assert g.awaiting_trigger
    assert state_of(g) == before


def test_lazy_trigger_pattern_replay_rejected_by_grammar():
    v = lazy_vocab()
    g = Grammar(TOOL_GRAMMAR, v, trigger_patterns=["[\\s\\S]*?(Say)"])
    g.accept(0)
    before = state_of(g)
    assert before[-1] == b"Hello"
    with pytest.raises(GrammarError):
        g.accept(8)  # "Say<tool": the match starts at 5 and "Say<tool" is not "<tool_call>"
    assert state_of(g) == before
    g.accept(2)  # still awaiting, still buffering
    assert g.awaiting_trigger and g.trigger_buffer == b"Hello<tool"


def test_lazy_trigger_pattern_replays_from_match():
    v = lazy_vocab()
    g = Grammar(TOOL_GRAMMAR, v, trigger_patterns=["<tool_call>"])
    for t in (0, 1, 2):
        g.accept(t)
        assert g.awaiting_trigger
    assert g.trigger_buffer == b"Hello <tool"
    g.accept(3)  # "Hello <tool_call>": no group, so the match starts at 6; "<tool" "_call>" are replayed
    assert not g.awaiting_trigger
    assert g.trigger_buffer == b""
    assert_allowed(g, [5])


def test_lazy_trigger_pattern_replays_part_of_a_token():
    v = lazy_vocab()
    g = Grammar(TOOL_GRAMMAR, v, trigger_patterns=["<tool_call>"])
    g.accept(8)  # "Say<tool"
    g.accept(3)  # the match starts at 3: token 8 is replayed as "<tool"
    assert not g.awaiting_trigger
    assert_allowed(g, [5])


def test_lazy_trigger_pattern_first_capture_group():
    v = lazy_vocab()
    # the match starts at 0 but group 1 at 6: replay "<tool_call>" only
    g = Grammar(TOOL_GRAMMAR, v, trigger_patterns=["Hello (<tool_call>)"])
    for t in (0, 1, 2, 3):
        g.accept(t)
    assert not g.awaiting_trigger
    assert_allowed(g, [5])
    # group 1 matches empty (at 5) and is skipped: group 2 at 6 decides
    g = Grammar(TOOL_GRAMMAR, v, trigger_patterns=["Hello(x*) (<tool_call>)"])
    for t in (0, 1, 2, 3):
        g.accept(t)
    assert not g.awaiting_trigger
    assert_allowed(g, [5])


def test_lazy_trigger_pattern_full_match_form_first():
    # "^(a)|a(b)$" starts with ^ and ends with $: std::regex_match is tried first. On "ab" it
    # must span the input, so the second alternative matches: group 1 is unmatched, group 2
    # starts at 1 -> "b" is replayed. (A search would stop at "a" with group 1 at 0 and replay
    # "ab", which the grammar refuses.)
    v = make_vocab("a", "b", "c", "ab")
    g = Grammar('root ::= "b" "c"', v, trigger_patterns=["^(a)|a(b)$"])
    g.accept(3)
    assert not g.awaiting_trigger
    assert_allowed(g, [2])


def test_lazy_trigger_pattern_search_when_full_match_fails():
    v = make_vocab("a", "b", "c", "ab")
    g = Grammar('root ::= "b" "c"', v, trigger_patterns=["^(a)|a(b)$"])
    g.accept(2)  # "c": no match
    assert g.awaiting_trigger
    g.accept(3)  # "cab": regex_match fails, regex_search finds a(b)$ at 1, group 2 at 2 -> replay "b"
    assert not g.awaiting_trigger
    assert_allowed(g, [2])


def test_lazy_trigger_words():
    v = lazy_vocab()
    g = Grammar(TOOL_GRAMMAR, v, trigger_words=["<tool_call>"])
    # llama_sampler_init_grammar_impl: "[\s\S]*?(" + escaped words joined by "|" + ")[\s\S]*"
    assert g.trigger_patterns == ("[\\s\\S]*?(<tool_call>)[\\s\\S]*",)
    for t in (0, 1, 2):
        g.accept(t)
    assert g.awaiting_trigger
    g.accept(3)
    assert not g.awaiting_trigger
    assert_allowed(g, [5])


def test_lazy_trigger_words_are_escaped():
    v = make_vocab("axb", "a.b", "c")
    g = Grammar('root ::= "a.b" "c"', v, trigger_words=["a.b", "x+"])
    assert g.trigger_patterns == ("[\\s\\S]*?(a\\.b|x\\+)[\\s\\S]*",)
    g.accept(0)  # "axb" does not contain the literal "a.b" (nor "x+")
    assert g.awaiting_trigger
    g.accept(1)  # "axba.b": group 1 at 3
    assert not g.awaiting_trigger
    assert_allowed(g, [2])


def test_lazy_reset_and_clone():
    v = lazy_vocab()
    g = Grammar(TOOL_GRAMMAR, v, trigger_patterns=["<tool_call>"])
    g.accept(0)
    c = g.clone()
    assert c.awaiting_trigger and c.trigger_buffer == b"Hello"
    c.accept(4)
    assert not c.awaiting_trigger
    assert g.awaiting_trigger and g.trigger_buffer == b"Hello"
    c.reset()
    assert c.awaiting_trigger and c.trigger_buffer == b""
    assert c.allowed_ids().tolist() == list(range(12))


def test_lazy_trigger_pattern_dollar_is_end_of_input():
    # Fixed: bankml rewrites "$" to Python's "\Z" (_ecmascript_to_python). llama.cpp compiles trigger patterns with std::regex
    # (ECMAScript), where "$" (no multiline) matches only at the end of the input. bankml uses
    # Python's re, where "$" also matches before a trailing "\n". On "x.\n", "^x(\.)$" neither
    # fully matches nor is found by regex_search, so llama.cpp keeps waiting. Confirmed against
    # libllama 0.3.36 (Qwen2 vocabulary, tokens "x" and ".\n").
    v = make_vocab("x", ".\n", "z")
    g = Grammar('root ::= ".\\n" "z"', v, trigger_patterns=["^x(\\.)$"])
    g.accept(0)
    g.accept(1)
    assert g.awaiting_trigger
    assert g.allowed_ids().tolist() == [0, 1, 2]


def test_lazy_trigger_pattern_dot_excludes_carriage_return():
    # Fixed: bankml rewrites "." to "[^\n\r]" (_ecmascript_to_python). In ECMAScript (and libstdc++'s std::regex) "." matches
    # no line terminator, "\r" included; Python's re "." matches "\r". On "a\rb", "a.(b)"
    # finds nothing in llama.cpp. Confirmed against libllama 0.3.36 (Qwen2 vocabulary).
    v = make_vocab("a", "\r", "b", "z")
    g = Grammar('root ::= "b" "z"', v, trigger_patterns=["a.(b)"])
    for t in (0, 1, 2):
        g.accept(t)
    assert g.awaiting_trigger
    assert g.allowed_ids().tolist() == [0, 1, 2, 3]


# ---------------------------------------------------------------------------
# grammar errors: reason, line, column (1-based, in characters)


@pytest.mark.parametrize(
    "text, reason, line, column",
    [
        ('root ::= "a\\qb"', "unknown escape", 1, 12),
        ('root ::= x\nx ::= "\\q"', "unknown escape", 2, 8),
        ('root ::= "é\\q"', "unknown escape", 1, 12),  # columns count characters, not bytes
        ("root ::= a\na b", "expecting ::=", 2, 3),
        ('root ::= "abc', "unexpected end of input", 1, 14),
        ("root ::= [a-z", "unexpected end of input", 1, 14),
        ('root ::= ("a" "b"', "expecting ')'", 1, 18),
        ('root ::= x\nx ::= ("a"\n  | "b"\n', "expecting ')'", 4, 1),
        ('root ::= "a" )', "expecting newline or end", 1, 14),
        ('root ::= "a"{2,', "expecting '}'", 1, 16),
        ('root ::= "a"{x}', "expecting an int", 1, 14),
        ("root ::= *", "expecting preceding item to */+/?/{", 1, 10),
        ('root ::= "\\x4"', "expecting 2 hex chars", 1, 13),
    ],
)
def test_grammar_error_location(text, reason, line, column):
    with pytest.raises(GrammarError) as info:
        Rules.parse(text)
    err = info.value
    assert err.reason == reason
    assert (err.line, err.column) == (line, column)
    assert isinstance(err, ValueError)


def test_grammar_error_undefined_rule():
    with pytest.raises(GrammarError) as info:
        Rules.parse('root ::= "a" foo')
    assert info.value.reason == "Undefined rule identifier 'foo'"
    assert info.value.line is None


def test_grammar_error_left_recursion():
    # llama_grammar_init_impl scans rules in index order; from rule 0 (root) it reaches expr,
    # whose leftmost reference is expr itself, so it reports index 0.
    with pytest.raises(GrammarError) as info:
        Rules.parse('root ::= expr\nexpr ::= expr "+" term | term\nterm ::= [0-9]')
    assert "left recursion detected for nonterminal at index 0" in info.value.reason
    # through a nullable prefix: x ::= y x where y may be empty
    with pytest.raises(GrammarError) as info:
        Rules.parse('root ::= "a" x\nx ::= y x "b" | "c"\ny ::= "d" |')
    assert "left recursion detected for nonterminal at index 1" in info.value.reason


def test_symbol_ids_and_rules_as_llama_cpp_builds_them():
    """Symbol ids in llama.cpp's order (written names as met, generate_symbol_id's base_N as it makes
    them), the repetition rewrite, the table's order kept through pickling, and a generated name as the
    root (the parser records those names without hashing them)."""
    text = 'root ::= x ("a" | "b")* y\nx ::= "c"?\ny ::= [d]{2,3}'
    rules = Rules.parse(text)
    expected_ids = [("root", 0), ("x", 1), ("root_2", 2), ("root_3", 3), ("y", 4), ("x_5", 5), ("y_6", 6)]
    expected_rules = [
        [(2, 1), (2, 3), (2, 4), (0, 0)],
        [(2, 5), (0, 0)],
        [(3, 97), (1, 0), (3, 98), (0, 0)],
        [(2, 2), (2, 3), (1, 0), (0, 0)],
        [(3, 100), (3, 100), (2, 6), (0, 0)],
        [(3, 99), (1, 0), (0, 0)],
        [(3, 100), (1, 0), (0, 0)],
    ]
    assert list(rules.symbol_ids.items()) == expected_ids
    assert rules.rules == expected_rules
    again = pickle.loads(pickle.dumps(rules))
    assert list(again.symbol_ids.items()) == expected_ids and again.rules == expected_rules
    assert Rules.parse(text, root="root_3").root_id == 3
    with pytest.raises(GrammarError, match="does not contain a 'root_7' symbol"):
        Rules.parse(text, root="root_7")


def test_rule_values_are_unsigned():
    # \U takes 8 hex digits (the F after them is a class member of its own): a value past 2**31 is
    # llama.cpp's uint32_t, not a negative one
    assert Rules.parse(r"root ::= [\U0001F600-\UA0001F64F]").rules == [
        [(3, 0x1F600), (5, 0xA0001F64), (6, ord("F")), (0, 0)]
    ]


def test_grammar_error_missing_root():
    with pytest.raises(GrammarError) as info:
        Rules.parse('main ::= "a"')
    assert info.value.reason == "grammar does not contain a 'root' symbol"
    g = Grammar(Rules.parse('main ::= "a"', root="main"), make_vocab("a", "b"))
    assert_allowed(g, [0])
    with pytest.raises(GrammarError):
        Rules.parse("")  # no rules at all


# ---------------------------------------------------------------------------
# hostile input stays bounded


def test_repetition_max_below_min():
    # llama.cpp computes max - min in unsigned arithmetic here and loops ~2**64 times
    with hang_guard():
        with pytest.raises(GrammarError) as info:
            Rules.parse('root ::= "a"{5,3}')
    assert (info.value.line, info.value.column) == (1, 13)


def test_repetition_min_over_threshold():
    with hang_guard():
        with pytest.raises(GrammarError) as info:
            Rules.parse('root ::= "a"{3000}')
    assert info.value.reason == "number of repetitions exceeds sane defaults, please reduce the number of repetitions"
    assert (info.value.line, info.value.column) == (1, 13)
    Rules.parse('root ::= "a"{2000}')  # the threshold itself is fine


def test_repetition_max_over_threshold_becomes_unbounded():
    # `max_times > MAX_REPETITION_THRESHOLD` -> max_times = UINT64_MAX: {0,100000} is "*"
    with hang_guard():
        rules = Rules.parse('root ::= "a"{0,100000}')
        assert rules.rules == Rules.parse('root ::= "a"*').rules
        assert Rules.parse('root ::= "a"{1,2001}').rules == Rules.parse('root ::= "a"+').rules
        g = Grammar(rules, make_vocab("a", "b", "</s>", eog=[2]))
        g.accept_bytes("a" * 5000)
        assert g.complete
        assert_allowed(g, [0, 2])


def test_nested_repetitions_over_threshold():
    # the group ("a"{0,50}) defines 51 rules (itself + 50 optional ones): 51 * 50 = 2550 > 2000
    with hang_guard():
        with pytest.raises(GrammarError) as info:
            Rules.parse('root ::= ("a"{0,50}){0,50}')
    assert info.value.reason.startswith(
        "number of rules that are going to be repeated multiplied by the new repetition"
    )
    assert (info.value.line, info.value.column) == (1, 21)
    with hang_guard():
        Rules.parse('root ::= ("a"{0,39}){0,50}')  # 40 * 50 = 2000: not above the threshold


def test_groups_nested_deeply():
    v = make_vocab("a", "b", "</s>", eog=[2])
    with hang_guard():
        g = Grammar("root ::= " + "(" * 300 + '"a"' + ")" * 300, v)
        assert_allowed(g, [0])
        g.accept(0)
        assert_allowed(g, [2])
    # 5,000 levels: llama.cpp's recursive-descent parser takes it; bankml may refuse it with a
    # GrammarError (Python recursion) but must answer quickly either way.
    text = "root ::= " + "(" * 5000 + '"a"' + ")" * 5000
    with hang_guard():
        try:
            g = Grammar(text, v)
        except GrammarError as err:
            assert "nest" in err.reason
        else:
            assert_allowed(g, [0])


def test_long_rule_chain():
    chain = "root ::= r0\n" + "".join(f"r{i} ::= r{i + 1}\n" for i in range(20000)) + 'r20000 ::= "a"\n'
    v = make_vocab("a", "b", "</s>", eog=[2])
    with hang_guard():
        g = Grammar(chain, v)
        assert len(g.rules) == 20002
        assert_allowed(g, [0])
        g.accept(0)
        assert_allowed(g, [2])


def test_ambiguous_grammar_hits_max_stacks():
    # BANKML BUG (reported to the lead): max_stacks is only checked inside one
    # advance_stack call, not on the total a token leaves (accept_token_stacks merges the
    # per-stack results with add_unique, unchecked and quadratic). Here every "a" doubles the
    # stacks (each open x may close with "b" or "c"): 6, 12, 24, ... 192 after 5 "a"s, past
    # max_stacks=100 (and past the default 65,536 after 14 "a"s, where one token already takes
    # about a second, growing fourfold per token). Expected: a GrammarError
    # mentioning max_stacks once the stacks would exceed it, with the state left unchanged.
    v = make_vocab("a", "b", "c", "</s>", eog=[3])
    g = Grammar('root ::= x\nx ::= "a" x "b" | "a" x "c" | ""', v, max_stacks=100)
    with hang_guard():
        for _ in range(12):
            before = g.n_stacks
            try:
                g.accept(0)
            except GrammarError as err:
                assert "max_stacks" in str(err)
                assert g.n_stacks == before
                break
            assert g.n_stacks <= 100, f"{g.n_stacks} stacks with max_stacks=100 and no GrammarError"
        else:
            pytest.fail("no GrammarError after 12 tokens")


def test_max_stacks_at_start():
    # bankml's own bound (llama.cpp has none): three alternatives open three stacks at the start
    v = make_vocab("a", "b", "c")
    with pytest.raises(GrammarError, match="max_stacks"):
        Grammar('root ::= "a" | "b" | "c"', v, max_stacks=2)
    assert Grammar('root ::= "a" | "b" | "c"', v, max_stacks=3).n_stacks == 3


def test_very_long_literal():
    n = 100_000
    v = make_vocab("a", "a" * 1000, "b", "</s>", eog=[3])
    with hang_guard():
        g = Grammar('root ::= "' + "a" * n + '"', v)
        assert_allowed(g, [0, 1])
        g.accept_bytes("a" * (n - 1000))
        assert_allowed(g, [0, 1])
        g.accept(1)
        assert g.complete
        assert_allowed(g, [3])


def test_long_character_class():
    chars = "".join(chr(0x4E00 + 2 * i) for i in range(5000))  # every other CJK ideograph
    v = make_vocab(chr(0x4E00), chr(0x4E01), chr(0x4E00 + 9998), "a", b"\xe4\xb8")
    with hang_guard():
        g = Grammar("root ::= [" + chars + "]", v)
        # e4 b8 -> U+4E00..U+4E3F, which holds members of the class
        assert_allowed(g, [0, 2, 4])


def test_mask_hash_of_allowed_ids():
    v = make_vocab("a", "b", "c")
    g = Grammar("root ::= [ac]", v)
    assert mask_hash(g.allowed_ids()) == mask_hash(np.array([0, 2])) == mask_hash([2, 0])
    assert mask_hash(g.allowed_ids())[0] == 2


def test_rule_defined_twice_keeps_the_later_definition():
    """llama.cpp's add_rule replaces a rule defined again; the first definition's repetition rules stay
    (defined, unreferenced). The element array holds the rules and one sentinel END, nothing left over
    from the replaced body, whether or not a rule was defined twice."""
    rules = Rules.parse('root ::= item "!"\nitem ::= [0-9]+ "."\nitem ::= "x" | item "y"', root=None)
    assert list(rules.symbol_ids.items()) == [("root", 0), ("item", 1), ("item_2", 2)]
    assert rules.rules == [
        [(2, 1), (3, 33), (0, 0)],
        [(3, 120), (1, 0), (2, 1), (3, 121), (0, 0)],
        [(3, 48), (5, 57), (2, 2), (1, 0), (0, 0)],
    ]
    for text in ('root ::= item "!"\nitem ::= [0-9]+ "."\nitem ::= "x"', 'root ::= ("a" | "b"){2,4} [c]*'):
        rules = Rules.parse(text)
        assert rules.n_elements == sum(len(rule) for rule in rules.rules) + 1
    g = Grammar('root ::= item "!"\nitem ::= [0-9]+ "."\nitem ::= "x"', make_vocab("x", "!", "1"))
    g.accept_bytes(b"x!")
    assert g.complete
    with pytest.raises(GrammarError):
        Grammar('root ::= item "!"\nitem ::= [0-9]+ "."\nitem ::= "x"', make_vocab("x", "!", "1")).accept_bytes(b"1")
