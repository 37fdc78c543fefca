"""Property test: the fast mask path equals the reference path on many random states.

``Grammar.allowed_ids()`` (and ``fill_next_token_bitmask``) answer from the
segment cache (per top segment of each stack, the tokens accepted whatever lies
below it, and the trie nodes where paths pop out, walked again from the real
stack below) or from one trie walk of the whole stack set;
``allowed_ids(reference=True)`` runs llama.cpp's
``llama_grammar_reject_candidates`` token by token. They must give the same set
of token ids in every state. The states come from seeded random walks (random
allowed tokens; a token whose accept raises on a clone is skipped), so every
run checks the same states.

Every walk runs three matchers in lockstep, each over its own Rules (so its own
shared context), and compares each one's mask with the reference:

* the segment cache built ahead of use (precompute=0.03, in a background thread, as a
  runtime with an idle core asks for it; the default builds nothing ahead), then on first use;
* the segment cache built only on first use, with a continuation limit of 2, so
  that segments grow frame by frame and long segments are exercised;
* the segment cache off: one trie walk per stack set.

Within a vocabulary the three Rules serve every walk of a grammar, so entries
built for one state serve later states whose stacks differ below the segment
(the same string or number rule under another property); the tests count those
reuses and require them.

The states:

(a) a hand-made random vocabulary of several hundred pieces (ASCII, UTF-8
    fragments of 2-4 byte characters split at every point, every single byte
    0x80-0xFF, quotes/backslashes/newlines, overlong sequences, empty and NUL
    pieces, duplicates, a few end-of-generation ids) against every grammar of
    tests/data/grammars plus a few with token terminals, with extra states left
    mid-character by ``accept_bytes`` and states after an invalid byte;
(b) the real Qwen2 vocabulary (tests/data/ggml-vocab-qwen2.gguf) on json.gbnf
    and c.gbnf, about a hundred states (the reference path costs 15-200 ms per
    state there).
"""

from __future__ import annotations

import json
import pathlib
import random
import time

import numpy as np
import pytest

from bankml import Grammar, GrammarError, Rules, Vocab, mask_hash

DATA = pathlib.Path(__file__).parent.parent / "data"
GRAMMAR_DIR = DATA / "grammars"
QWEN2 = DATA / "ggml-vocab-qwen2.gguf"
SEED = 20250601

# ---------------------------------------------------------------------------
# the random vocabulary

# characters of 2, 3 and 4 UTF-8 bytes the grammars care about (classes, ranges, negations)
MULTIBYTE_CHARS = [
    "é",
    "ß",
    "Ü",
    "«",
    "»",
    "\u0085",
    "ö",  # 2 bytes
    "中",
    "一",
    "鿿",
    "ぁ",
    "ゟ",
    "ァ",
    "ヿ",
    "、",
    "〾",  # 3 bytes
    "\u2028",
    "\u2029",
    "❤",
    "\ufe0f",
    "日",
    "本",
    "😀",
    "🙏",
    "🙐",
    "🌀",
    "🗿",
    "𝄞",
    "\U0010ffff",  # 4 bytes
]
SPECIAL_TEXTS = ["<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "<zz>"]


def walk_documents():
    walks = json.loads((DATA / "oracle_walks.json").read_text(encoding="utf-8"))["walks"]
    docs = {}
    for walk in walks:
        for doc in walk["documents"]:
            doc = doc.replace("{START}", "<|im_start|>").replace("{END}", "<|im_end|>")
            docs.setdefault(walk["grammar"], []).append(doc)
    return docs


def utf8_fragments(ch):
    raw = ch.encode("utf-8")
    return [raw[i:j] for i in range(len(raw)) for j in range(i + 1, len(raw) + 1)]


def build_random_vocab(seed):
    """Several hundred pieces and three eog ids, shuffled by a seeded generator."""
    rng = random.Random(seed)
    pieces = []
    pieces += [bytes([c]) for c in range(0x20, 0x7F)] + [b"\t", b"\n", b"\r", b"\x0b", b"\x0c"]
    alphabet = "abcdefghijklmnopqrstuvwxyzABCXYZ0123456789 _-+*/=.,:;!?()[]{}<>\"'\\\n\t#@"
    for _ in range(120):
        pieces.append("".join(rng.choice(alphabet) for _ in range(rng.randint(2, 7))).encode())
    for docs in walk_documents().values():
        for doc in docs:
            raw = doc.encode("utf-8")
            pos = 0
            while pos < len(raw):  # chunks cut at byte boundaries, so characters get split too
                n = rng.randint(1, 6)
                pieces.append(raw[pos : pos + n])
                pos += n
    for ch in MULTIBYTE_CHARS:
        pieces += utf8_fragments(ch)
        pieces.append((ch * 2).encode())
    pieces += [bytes([b]) for b in range(0x80, 0x100)]
    pieces += [
        b'"',
        b"\\",
        b'\\"',
        b'"\\',
        b"\\\\",
        b"\\n",
        b"\\u",
        b"\\u00",
        b'"\n',
        b"\n\n",
        b"\r\n",
        b'":',
        b'", "',
        b'"}',
        b"\\x",
        b"'\"",
        b'\n"',
        b' "\\',
        b'\\t"',
        b'\\"}',
    ]
    for _ in range(40):  # ASCII glued to character fragments
        frag = rng.choice(utf8_fragments(rng.choice(MULTIBYTE_CHARS)))
        word = "".join(rng.choice('abcxyz "{}[]\n') for _ in range(rng.randint(1, 3))).encode()
        pieces.append(word + frag if rng.random() < 0.5 else frag + word)
    pieces += [t.encode() for t in SPECIAL_TEXTS]
    pieces += [
        b"\xc0\x80",
        b"\xc1\xbf",
        b"\xc0",
        b"\xc1",
        b"a\xc0\x80b",
        b"\xe0\x80",
        b"\xf0\x80\x80",
        b"\xf8\x88",
        b"\xff\xfe",
    ]
    pieces += [b"\x00", b"\x00a", b"a\x00", b"a\x00b", b"", b""]
    pieces += [rng.choice(pieces) for _ in range(20)]  # duplicates
    rng.shuffle(pieces)
    # end of generation: a usual one, an empty one, and one spelling "a"
    eog = []
    for p in (b"</s>", b"", b"a"):
        pieces.append(p)
        eog.append(len(pieces) - 1)
    order = list(range(len(pieces)))
    rng.shuffle(order)
    shuffled = [pieces[i] for i in order]
    eog_ids = [order.index(i) for i in eog]
    return Vocab(shuffled, eog_ids)


def grammar_texts(vocab):
    """name -> GBNF text: the data grammars plus a few with token terminals for this vocabulary."""
    start = vocab.token_for_text(b"<|im_start|>")
    end = vocab.token_for_text(b"<|im_end|>")
    texts = {path.name: path.read_text(encoding="utf-8") for path in sorted(GRAMMAR_DIR.glob("*.gbnf"))}
    tokens = (GRAMMAR_DIR / "tokens.gbnf.in").read_text(encoding="utf-8")
    texts["tokens.gbnf.in"] = (
        tokens.replace("{START_ID}", str(start)).replace("{END_ID}", str(end)).replace("{START}", "<|im_start|>")
    )
    texts["token_not_newline"] = f'root ::= "\\n" (!<[{end}]>)* <[{end}]>'
    texts["token_mixed"] = f'root ::= ( <[{start}]> | "x" !<[{end}]> [a-z]* | [0-9]+ <[{end}]> | <zz> . )+ "."?\n'
    texts["token_lines"] = f'root ::= ( [^\\n]* "\\n" | <[{end}]> . | !<[{start}]> "é" )* <[{start}]>'
    texts["token_tool"] = f'root ::= "<tool_call>" ( !<[{end}]> )* "</tool_call>" ws\nws ::= [ \\t\\n]*'
    return texts


# ---------------------------------------------------------------------------
# comparing the two paths


class Checker:
    def __init__(self):
        self.states = 0
        self.partial_states = 0
        self.invalid_states = 0
        self.fresh_fast_masks = 0  # states whose fast mask was computed, not taken from the cache
        self.segment_hits = 0  # segment entries found built (ahead of use or by an earlier state)
        self.continuation_walks = 0
        self.distinct = set()  # distinct masks
        self.distinct_states = set()  # distinct (stacks, partial UTF-8) states
        self.entry_contexts = {}  # (context id, entry id) -> the stacks below it it served, when it has continuations
        self.allows_checked = 0  # tokens whose allows() was compared with the reference mask
        self.partial_path_masks = 0  # masks inside a character answered along the candidates' paths, or shared
        self.partial_shared = 0  # ... copied from the mask of another open character in the same set

    def compare(self, g, where, twins=()):
        """Assert fast == reference in g's current state, and for each twin (a matcher over other Rules,
        in the same state); return the allowed ids."""
        reference = g.allowed_ids(reference=True)
        for matcher in (g, *twins):
            self.compare_fast(matcher, where, reference)
        self.states += 1
        self.distinct.add(mask_hash(reference))
        value, n_remain = g.partial_utf8
        self.distinct_states.add((id(g.vocab), repr(g.stacks), value if n_remain > 0 else 0, n_remain))
        if g.partial_utf8[1] > 0:
            self.partial_states += 1
        elif g.partial_utf8[1] < 0:
            self.invalid_states += 1
        return reference

    def compare_allows(self, g, where, reference):
        """Grammar.allows (the token's own path from the state, or the mask cache) against the reference
        mask: every token of a small vocabulary; on a large one the end-of-generation ids, up to 300 of the
        allowed tokens and 300 others, drawn by a generator seeded with the state."""
        n = g.vocab.n_vocab
        if n <= 4096:
            ids = range(n)
        else:
            rng = random.Random(f"{SEED}/{where}")
            allowed = reference.tolist()
            ids = sorted(
                set(
                    rng.sample(allowed, min(300, len(allowed)))
                    + rng.sample(range(n), 300)
                    + [int(t) for t in g.vocab.eog_ids]
                )
            )
        expected = np.zeros(n, dtype=bool)
        expected[reference] = True
        wrong = [(t, g.vocab.pieces[t]) for t in ids if g.allows(t) != expected[t]]
        assert not wrong, f"allows != reference path at {where} (partial_utf8={g.partial_utf8}): {wrong[:10]}"
        self.allows_checked += len(ids)

    def compare_fast(self, g, where, reference):
        ctx = g.context
        self.compare_allows(g, where, reference)  # before the mask: from the token's path, not the cache
        fast_before = g.fast_masks
        partial_before = ctx.partial_masks + ctx.partial_shared
        shared_before = ctx.partial_shared
        stats_before = ctx.segment_stats
        fast = g.allowed_ids()
        self.fresh_fast_masks += g.fast_masks - fast_before
        self.partial_path_masks += ctx.partial_masks + ctx.partial_shared - partial_before
        self.partial_shared += ctx.partial_shared - shared_before
        stats = ctx.segment_stats
        self.segment_hits += stats["hits"] - stats_before["hits"]
        self.continuation_walks += stats["continuation_walks"] - stats_before["continuation_walks"]
        if stats["entries"] and g.partial_utf8[1] <= 0:
            for served in g._segment_report():
                if served is not None and served[2]:
                    self.entry_contexts.setdefault((id(ctx), served[0]), set()).add(served[3])
        if mask_hash(fast) != mask_hash(reference):
            pieces = g.vocab.pieces
            f, r = set(fast.tolist()), set(reference.tolist())
            extra = sorted(f - r)[:10]
            missing = sorted(r - f)[:10]
            pytest.fail(
                f"fast path != reference path at {where}\n"
                f"  partial_utf8={g.partial_utf8} n_stacks={g.n_stacks} complete={g.complete}\n"
                f"  fast allows {len(f)}, reference allows {len(r)}\n"
                f"  allowed only by the fast path (first ids): {[(i, pieces[i]) for i in extra]}\n"
                f"  allowed only by the reference path (first ids): {[(i, pieces[i]) for i in missing]}"
            )
        n = g.vocab.n_vocab
        bitmask = np.zeros((n + 31) // 32, dtype=np.int32)
        g.fill_next_token_bitmask(bitmask)
        bits = np.unpackbits(bitmask.view(np.uint8), bitorder="little")
        assert not bits[n:].any(), f"bitmask bits past n_vocab set at {where}"
        from_bits = np.flatnonzero(bits[:n])
        assert np.array_equal(from_bits, reference), (
            f"fill_next_token_bitmask != reference path at {where}: "
            f"first differing ids {sorted(set(from_bits.tolist()) ^ set(reference.tolist()))[:10]}"
        )

    @property
    def shared_entries(self):
        """Entries with continuations that served stacks with different stacks below their segment."""
        return sum(len(below) > 1 for below in self.entry_contexts.values())


def try_accept(g, token):
    """Accept token if the grammar takes it (checked on a clone first); return whether it did."""
    probe = g.clone()
    try:
        probe.accept(token)
    except GrammarError:
        return False
    g.accept(token)
    return True


def random_walk(g, rng, checker, label, max_steps, extra_partial=True, twins=()):
    """One seeded random walk from g's state; compares both paths in every state it passes.
    The twins (matchers over other Rules of the same grammar, in the same state) take the same steps."""
    history = []
    pieces = g.vocab.pieces
    eog = set(g.vocab.eog_ids)
    twins = list(twins)
    for step in range(max_steps):
        where = f"{label}, after {[pieces[t] if isinstance(t, int) else t for t in history]}"
        allowed = checker.compare(g, where, twins).tolist()
        if extra_partial and g.partial_utf8[1] <= 0 and rng.random() < 0.08:
            # leave the state mid-character (or after an invalid byte) with accept_bytes, compare, go on
            probe = g.clone()
            raw = rng.choice(
                [b"\x80", b"\xbf"]
                + [
                    f
                    for ch in MULTIBYTE_CHARS
                    for f in utf8_fragments(ch)
                    if f[0] >= 0xC0 and len(f) < len(ch.encode())
                ]
            )
            try:
                probe.accept_bytes(raw)
            except GrammarError:
                pass
            else:
                probe_twins = [twin.clone() for twin in twins]
                for twin in probe_twins:
                    twin.accept_bytes(raw)
                checker.compare(probe, f"{where} + accept_bytes({raw!r})", probe_twins)
                if rng.random() < 0.5:
                    g = probe
                    twins = probe_twins
                    history.append(raw)
                    continue
        choices = [t for t in allowed if t not in eog]
        if not choices or (g.complete and rng.random() < 0.05):
            return
        rng.shuffle(choices)
        if rng.random() < 0.5:
            # half the time prefer short pieces, so that walks also take the rare structural
            # characters (quotes, brackets) instead of staying inside strings and comments
            choices.sort(key=lambda t: len(pieces[t]) > 1)
        for token in choices[:20]:
            if try_accept(g, token):
                for twin in twins:
                    twin.accept(token)
                history.append(token)
                break
        else:
            return


def test_random_vocabulary_is_varied():
    v = build_random_vocab(SEED)
    pieces = v.pieces
    assert 500 <= len(pieces) <= 1200
    assert len(v.eog_ids) == 3
    assert b"" in pieces and b"\x00" in pieces
    assert len(set(pieces)) < len(pieces)  # duplicates
    assert all(bytes([b]) in pieces for b in range(0x80, 0x100))
    assert b"\xe4\xb8" in pieces and b"\xb8\xad" in pieces and b"\xf0\x9f\x98" in pieces


RANDOM_GRAMMARS = sorted(grammar_texts(build_random_vocab(SEED)))
# Three vocabularies (three tries with different shapes), the states split between them.
VOCAB_SEEDS = (SEED, SEED + 1, SEED + 2)
STATES_PER_VOCAB = 50


BUILD_AHEAD_SECONDS = 0.03  # the build-ahead budget the walks' first matcher asks for


@pytest.fixture(scope="module")
def random_vocabs():
    return [build_random_vocab(seed) for seed in VOCAB_SEEDS]


@pytest.fixture(scope="module")
def random_vocab(random_vocabs):
    return random_vocabs[0]


def three_ways(text, vocab):
    """Rules of one grammar three times over, each with its own shared context: the segment cache as
    matchers get it, the segment cache built only on first use with segments grown frame by frame,
    and the whole-set trie walk. Returns a function making one matcher of each, in that order."""
    default, lazy, walk = (Rules.parse(text, vocab=vocab) for _ in range(3))
    Grammar(default, vocab, precompute=BUILD_AHEAD_SECONDS)  # the context's first matcher starts the build
    lazy_first = Grammar(lazy, vocab, precompute=0)
    lazy_first.context._configure_segments(max_continuations=2)
    Grammar(walk, vocab).context._configure_segments(enabled=False)
    return lambda: [Grammar(default, vocab), Grammar(lazy, vocab), Grammar(walk, vocab)]


@pytest.mark.parametrize("name", RANDOM_GRAMMARS)
def test_fast_path_equals_reference_random_vocab(random_vocabs, name):
    docs = walk_documents().get(name, [])
    checker = Checker()
    walks = 0
    for vocab_seed, vocab in zip(VOCAB_SEEDS, random_vocabs):
        text = grammar_texts(vocab)[name]
        rng = random.Random(f"{vocab_seed}/{name}")
        target = checker.states + STATES_PER_VOCAB
        vocab_walks = 0
        matchers = three_ways(text, vocab)
        while checker.states < target and vocab_walks < 100:
            vocab_walks += 1
            g, *twins = matchers()  # the contexts (sets, masks, segment entries) carry over between walks
            label = f"grammar {name}, vocabulary seed {vocab_seed}, walk {vocab_walks}"
            if docs and rng.random() < 0.5:
                # start part-way through a document of the grammar's language (maybe mid-character)
                raw = rng.choice(docs).encode("utf-8")
                prefix = raw[: rng.randint(0, len(raw))]
                probe = g.clone()
                try:
                    probe.accept_bytes(prefix)
                except GrammarError:
                    pass
                else:
                    g = probe
                    for twin in twins:
                        twin.accept_bytes(prefix)
                    label += f", prefilled {prefix!r}"
            random_walk(g, rng, checker, label, max_steps=rng.randint(10, 60), twins=twins)
        walks += vocab_walks
    print(
        f"{name}: {checker.states} states ({checker.partial_states} mid-character, "
        f"{checker.invalid_states} after an invalid byte; {len(checker.distinct_states)} distinct states, "
        f"{len(checker.distinct)} distinct masks, {checker.fresh_fast_masks} fast masks computed afresh, "
        f"{checker.segment_hits} segment entries found built, {checker.continuation_walks} continuation walks, "
        f"{checker.shared_entries} entries serving stacks with different stacks below) in {walks} walks"
    )
    assert checker.states >= STATES_PER_VOCAB * len(VOCAB_SEEDS)
    assert checker.fresh_fast_masks >= 1  # the trie walk itself ran, not only a cache
    assert checker.segment_hits >= 1  # the segment cache answered some state from entries built before
    assert checker.allows_checked >= checker.states  # allows() against the reference in every state


def test_fast_path_after_invalid_and_partial_bytes(random_vocab):
    """States reached by accept_bytes: open sequences of every length, and n_remain -1."""
    rng = random.Random(f"{SEED}/bytes")
    checker = Checker()
    texts = grammar_texts(random_vocab)
    for name in ("unicode.gbnf", "japanese.gbnf", "list.gbnf", "json.gbnf", "comments_crlf.gbnf", "token_lines"):
        g, *twins = three_ways(texts[name], random_vocab)()
        for ch in MULTIBYTE_CHARS:
            raw = ch.encode("utf-8")
            for cut in range(1, len(raw)):
                probe, *probe_twins = (m.clone() for m in (g, *twins))
                for m in (probe, *probe_twins):
                    m.accept_bytes(raw[:cut])  # no whole code point: never raises
                assert probe.partial_utf8[1] == len(raw) - cut
                allowed = checker.compare(probe, f"{name} + accept_bytes({raw[:cut]!r})", probe_twins)
                # and after one completion token chosen at random
                completions = [t for t in allowed.tolist() if t not in random_vocab.eog_ids]
                if completions:
                    t = rng.choice(completions)
                    if try_accept(probe, t):
                        for m in probe_twins:
                            m.accept(t)
                        checker.compare(
                            probe, f"{name} + accept_bytes({raw[:cut]!r}) + {random_vocab.pieces[t]!r}", probe_twins
                        )
        for stray in (b"\x80", b"\xbf", b"\xa0"):
            probe, *probe_twins = (m.clone() for m in (g, *twins))
            for m in (probe, *probe_twins):
                m.accept_bytes(stray)
            assert probe.partial_utf8 == (0, -1)
            checker.compare(probe, f"{name} + accept_bytes({stray!r})", probe_twins)
    assert checker.partial_states >= 6 * 40
    assert checker.invalid_states >= 6 * 3
    # the states inside a character were answered along the candidates' paths (partial_mask_into), not
    # one by one, and compared with the reference above
    assert checker.partial_path_masks >= 6 * 40
    # and many of them share the mask of another open character of the same set (partial_mask_into's key)
    assert checker.partial_shared >= 6 * 10
    print(
        f"accept_bytes states: {checker.states} ({checker.partial_states} mid-character, {checker.partial_shared} shared, "
        f"{checker.invalid_states} after an invalid byte)"
    )


# ---------------------------------------------------------------------------
# (b) the real Qwen2 vocabulary


@pytest.fixture(scope="module")
def qwen2():
    return Vocab.from_gguf(QWEN2)


# A grammar the way llama.cpp's JSON-schema converter writes one: one string rule under several
# properties (so one segment entry serves stacks with different stacks below it), bounded strings
# (chains of nested rules; the one of 300 is longer than Qwen2's longest token, so its far steps share
# canonical entries), a bounded array, integers.
SCHEMA_GBNF = r"""root ::= "{" space title-kv "," space body-kv "," space tags-kv "," space note-kv "," space count-kv "}" space
title-kv ::= "\"title\"" space ":" space title
body-kv ::= "\"body\"" space ":" space body
tags-kv ::= "\"tags\"" space ":" space "[" space (string ("," space string){0,3})? "]" space
note-kv ::= "\"note\"" space ":" space string
count-kv ::= "\"count\"" space ":" space integer
title ::= "\"" char{1,40} "\"" space
body ::= "\"" char{0,300} "\"" space
string ::= "\"" char* "\"" space
integer ::= ("-"? ([0] | [1-9] [0-9]{0,15})) space
char ::= [^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4})
space ::= | " " | "\n"{1,2} [ \t]{0,20}
"""
SCHEMA_DOCUMENTS = [
    '{"title": "Zoë\'s notes, part 2", "body": "' + "All of the measurements were taken twice; "
    'the second set (after calibration) is the one reported below. Values in \\"brackets\\" are '
    "estimates — see § 4.2 for the method and its limits, and the appendix for raw data." + '", '
    '"tags": ["lab", "draft", "v2"], "note": "ok", "count": 1280}',
    '{\n  "title": "x",\n  "body": "",\n  "tags": [],\n  "note": "日本語のテキスト\\n2行目",\n  "count": -7\n}',
]


@pytest.mark.parametrize("name, n_states", [("json.gbnf", 40), ("c.gbnf", 35), ("schema", 45)])
def test_fast_path_equals_reference_qwen2(qwen2, name, n_states):
    if name == "schema":
        text, docs = SCHEMA_GBNF, SCHEMA_DOCUMENTS
    else:
        text, docs = (GRAMMAR_DIR / name).read_text(encoding="utf-8"), walk_documents()[name]
    rng = random.Random(f"{SEED}/qwen2/{name}")
    checker = Checker()
    started = time.perf_counter()
    walks = 0
    matchers = three_ways(text, qwen2)
    while checker.states < n_states and walks < 50:
        walks += 1
        g, *twins = matchers()
        raw = rng.choice(docs).encode("utf-8")
        prefix = raw[: rng.randint(0, len(raw))]
        try:
            g.accept_bytes(prefix)
        except GrammarError:
            g, *twins = matchers()
            prefix = b""
        else:
            for twin in twins:
                twin.accept_bytes(prefix)
        random_walk(
            g,
            rng,
            checker,
            f"qwen2 {name}, walk {walks}, prefilled {prefix!r}",
            max_steps=min(4, n_states - checker.states),
            extra_partial=walks % 4 == 0,
            twins=twins,
        )
    elapsed = time.perf_counter() - started
    print(
        f"qwen2 {name}: {checker.states} states ({checker.partial_states} mid-character; "
        f"{len(checker.distinct_states)} distinct states, {len(checker.distinct)} distinct masks, "
        f"{checker.fresh_fast_masks} fast masks computed afresh, {checker.segment_hits} segment entries found "
        f"built, {checker.shared_entries} entries serving stacks with different stacks below) in {walks} walks, "
        f"{elapsed:.1f} s"
    )
    assert checker.states >= n_states
    if name == "schema":
        assert checker.shared_entries >= 1


# ---------------------------------------------------------------------------
# (c) the segment cache's own corners, on the random vocabulary


def test_segment_entry_serves_different_stacks_below(random_vocab):
    """One string rule under two properties: the entry of its content segment is built once and serves
    both, each time finishing the tokens that run past the closing quote against the stack below."""
    text = (
        'root ::= "{" a "," b "}"\na ::= "\\"a\\":" str "x"\nb ::= "\\"b\\":" str "y"\nstr ::= "\\"" [^"\\\\]* "\\""\n'
    )
    checker = Checker()
    for precompute in (0, 1.0):
        _, *twins = three_ways(text, random_vocab)()
        g = Grammar(Rules.parse(text, vocab=random_vocab), random_vocab, precompute=precompute)
        served = {}
        for prefix in (b'{"a":"', b'{"a":"abc', b'{"a":"abc"x,"b":"', b'{"a":"abc"x,"b":"q'):
            probe, *probe_twins = (m.clone() for m in (g, *twins))
            for m in (probe, *probe_twins):
                m.accept_bytes(prefix)
            checker.compare(probe, f"after {prefix!r}", probe_twins)
            for report in probe._segment_report():
                if report is not None and report[2]:
                    served.setdefault(report[0], set()).add(report[3])
        assert any(len(below) > 1 for below in served.values()), served
    assert checker.segment_hits >= 1


def test_segment_cache_limits_and_growth(random_vocab):
    """Continuation limits from 0 (every segment grows to the whole stack) up, the cache emptied while
    matchers hold states, and precompute budgets from none to all: the masks never change."""
    texts = grammar_texts(random_vocab)
    rng = random.Random(f"{SEED}/limits")
    checker = Checker()
    for name in ("json.gbnf", "repetition.gbnf", "c.gbnf", "token_mixed"):
        for limit in (0, 1, 3, 1000):
            rules = Rules.parse(texts[name], vocab=random_vocab)
            g = Grammar(rules, random_vocab, precompute=0.5 if limit == 3 else 0)
            g.context._configure_segments(max_continuations=limit)
            random_walk(g, rng, checker, f"{name}, continuation limit {limit}", max_steps=25, extra_partial=False)
            g.context._configure_segments()  # forget every entry and mask: the next states are built again
            random_walk(
                Grammar(rules, random_vocab),
                rng,
                checker,
                f"{name}, limit {limit}, after a reset",
                max_steps=15,
                extra_partial=False,
            )
    assert checker.fresh_fast_masks >= 100


def test_precompute_is_bounded_and_exact(random_vocab):
    """precompute builds entries for positions before any mask; a budget of 0 builds none; both give
    the reference masks. Its argument is validated."""
    text = grammar_texts(random_vocab)["repetition.gbnf"]
    eager = Grammar(Rules.parse(text, vocab=random_vocab), random_vocab, precompute=5.0)
    lazy = Grammar(Rules.parse(text, vocab=random_vocab), random_vocab, precompute=0)
    assert eager.context.wait_precompute(60)  # (built in a background thread)
    assert lazy.context.wait_precompute(0)  # (none started)
    assert eager.context.segment_stats["entries"] > 0
    assert lazy.context.segment_stats["entries"] == 0
    assert eager.context.precompute(5.0) == 0  # everything reachable was built already
    checker = Checker()
    random_walk(
        eager, random.Random(f"{SEED}/eager"), checker, "repetition.gbnf, precomputed", max_steps=40, twins=[lazy]
    )
    assert checker.segment_hits >= 1
    with pytest.raises(ValueError, match="precompute"):
        Grammar(text, random_vocab, precompute=-1)


# ---------------------------------------------------------------------------
# (d) length-limited strings (minLength / maxLength): the walk along a bounded run

# Bounded repetitions the way the JSON-schema converter writes them ({0,k}, {1,k}, {k,k}, {m,n}), nested in
# objects and arrays, and a bounded class with multibyte members outside any string. Every position of them
# is its own segment, and the walk takes the subtrees that stay in the class up to the run's end whole.
BOUNDED_GBNF = r"""root ::= "{" space a-kv "," space b-kv "," space c-kv "," space d-kv "}" space
a-kv ::= "\"a\"" space ":" space a
b-kv ::= "\"b\"" space ":" space "[" space (b ("," space b)*)? "]" space
c-kv ::= "\"c\"" space ":" space c
d-kv ::= "\"d\"" space ":" space "{" space "\"e\"" space ":" space e "," space "\"f\"" space ":" space f "}" space
a ::= "\"" char{0,10} "\"" space
b ::= "\"" char{1,7} "\"" space
c ::= "\"" char{13,13} "\"" space
e ::= "\"" char{3,24} "\"" space
f ::= [a-zé中😀]{2,6} space
char ::= [^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4})
space ::= | " " | "\n"{1,2} [ \t]{0,20}
"""
BOUNDED_DOCUMENTS = [
    '{"a": "Zoë é 中!", "b": ["x", "ab cd", "日本語です", "1234567"], "c": "0123456789abc", '
    '"d": {"e": "déjà vu \\"q\\" 😀 \\u00e9", "f": aé中😀}}',
    '{"a": "", "b": [], "c": "ABCDEFGHIJKLM", "d": {"e": "abc", "f": zz}}',
    '{\n  "a": "abcdefghij",\n  "b": ["ü"],\n  "c": "中中中中中中中中中中中中中",\n'
    '  "d": {"e": "the quick brown fox jump", "f": zzzzzz}\n}',
]


def bounded_walk(vocab, checker, label):
    """Each document fed one code point at a time (the first byte of a multibyte character on its own every
    other time), the three matchers compared with the reference path at every position."""
    matchers = three_ways(BOUNDED_GBNF, vocab)
    for n, document in enumerate(BOUNDED_DOCUMENTS):
        g, *twins = matchers()
        for i, ch in enumerate(document):
            checker.compare(g, f"{label}, document {n}, before {document[:i]!r}", twins)
            raw = ch.encode("utf-8")
            if len(raw) > 1 and i % 2:
                for m in (g, *twins):
                    m.accept_bytes(raw[:1])
                checker.compare(g, f"{label}, document {n}, before {document[:i]!r} + {raw[:1]!r}", twins)
                raw = raw[1:]
            for m in (g, *twins):
                m.accept_bytes(raw)
        assert g.complete
    return matchers()


def test_fast_path_equals_reference_bounded_strings(random_vocabs):
    """Length-limited strings on the random vocabularies (short tokens, every UTF-8 fragment)."""
    checker = Checker()
    for vocab_seed, vocab in zip(VOCAB_SEEDS, random_vocabs):
        bounded_walk(vocab, checker, f"vocabulary seed {vocab_seed}")
    assert checker.states >= 3 * 250
    assert checker.partial_states >= 3 * 10


def test_fast_path_equals_reference_bounded_strings_llama3():
    """Length-limited strings on Llama 3's vocabulary, whose long tokens run past the end of the bounded runs:
    the subtrees are taken along the run (counted), and every position's mask equals the reference path's."""
    vocab = Vocab.from_gguf(DATA / "ggml-vocab-llama-bpe.gguf")
    checker = Checker()
    default, lazy, walk = bounded_walk(vocab, checker, "llama3")
    assert checker.states >= 250
    assert lazy.context.run_takes > 0 and walk.context.run_takes > 0
    print(
        f"llama3 bounded strings: {checker.states} states ({checker.partial_states} mid-character), "
        f"run takes {default.context.run_takes} / {lazy.context.run_takes} / {walk.context.run_takes}"
    )


def test_element_ascii_bits_equal_match_char():
    """element_info reads a class's ASCII members from its ranges in one pass; they equal match_char's
    verdicts on all 128 code points, for classes of every shape: positive and negated, single code points,
    ranges crossing 63/64 and 127/128, empty and reversed ranges, the any-character class, escapes and
    classes reaching far above ASCII (200 random classes beside the hand-made ones)."""
    rng = random.Random(7)
    classes = [
        "[a]",
        "[^a]",
        "[a-z]",
        "[^a-z0-9_]",
        "[\\x00-\\x1F]",
        "[^\\x00-\\x7F]",
        "[\\x3F-\\x40]",
        "[\\x7F-\\x80]",
        "[\\x00-\\U0010FFFF]",
        "[^\\x00-\\U0010FFFF]",
        "[z-a]",
        "[^z-a]",
        ".",
        '[^"\\\\\\x7F\\x00-\\x1F]',
        "[\\x40-\\x3F]",
        "[\\u00e9-\\u00ff]",
        "[^\\u00e9]",
        "[\\x00]",
        "[\\x7F]",
    ]
    for _ in range(200):
        parts = []
        for _ in range(rng.randint(1, 5)):
            a = rng.choice([rng.randint(0, 140), rng.randint(0, 0x3000)])
            b = a + rng.choice([0, 0, 1, rng.randint(0, 70), -rng.randint(1, 5)])
            b = max(b, 0)
            parts.append(f"\\u{a:04x}" if rng.random() < 0.5 else f"\\u{a:04x}-\\u{b:04x}")
        classes.append(("[^" if rng.random() < 0.5 else "[") + "".join(parts) + "]")
    text = "root ::= " + " | ".join(classes)
    vocab = Vocab.from_gguf(DATA / "ggml-vocab-llama-bpe.gguf")
    pairs = Grammar(Rules.parse(text, vocab=vocab), vocab).context._element_ascii()
    assert len(pairs) == len(classes)
    for pos, bits, by_match_char in pairs:
        assert bits == by_match_char, (pos, [hex(b) for b in bits], [hex(b) for b in by_match_char])


def test_union_walk_of_continuations_under_many_stacks_below():
    """After `,` in an object of many optional properties, `space`'s entry serves one stack per property that
    may come next, each with its own stack below: their continuations are walked at once with the union of
    those stacks (SegmentCache.union_continuations). Every mask along documents through such objects (and
    with spaces, newlines and every property order) equals the reference path's, on Llama 3 and Qwen2."""
    from bankml import json_schema_to_grammar

    names = (
        "id name type value description title status created url email count data error message key version"
    ).split()
    schema = {
        "type": "object",
        "properties": {n: {"type": ["string", "integer", "null"]} for n in names},
        "additionalProperties": False,
    }
    text, _ = json_schema_to_grammar(schema)
    docs = [
        '{"' + names[0] + '": null, "' + names[3] + '": 12, "' + names[15] + '": "x"}',
        '{ "' + names[1] + '" : "a b",\n  "' + names[2] + '": -3,"' + names[9] + '":null }',
        '{"' + names[14] + '": "end"}',
    ]
    # a vocabulary whose pieces run on past where `space` ends into the next property's name, so that what each
    # stack below accepts there differs (real vocabularies seldom have a ` "name` piece)
    pieces = [bytes([c]) for c in range(0x20, 0x7F)] + [b"\n", b"\t", b"\n\n", b"\n  ", b"null", b'": ']
    for n in names:
        pieces += [
            f' "{n}'.encode(),
            f'\n"{n}'.encode(),
            f'  "{n}":'.encode(),
            f'\n\n"{n[:2]}'.encode(),
            f'"{n}"'.encode(),
            f', "{n}'.encode(),
        ]
    pieces.append(b"</s>")
    vocabularies = [("crafted", Vocab(pieces, [len(pieces) - 1]))]
    vocabularies += [(path.name, Vocab.from_gguf(path)) for path in (DATA / "ggml-vocab-llama-bpe.gguf", QWEN2)]
    checker = Checker()
    unions = 0
    for label, vocab in vocabularies:
        rules = Rules.parse(text, vocab=vocab)
        for doc in docs:
            g = Grammar(rules, vocab)
            raw = doc.encode()
            for i in range(len(raw)):
                checker.compare(g, f"{label}: {raw[:i]!r}")
                g.accept_bytes(raw[i : i + 1])
            assert g.complete
        unions += g.context.segment_stats["union_walks"]
    assert unions >= 3


# ---------------------------------------------------------------------------
# (e) search patterns inside strings: the family walk (compute_family)

# Strict mode's unanchored patterns are search automata: inside the string, every state takes every character
# but the quote and the backslash, and the states change on nearly every one. The walk takes whole the subtrees
# of such characters (a family of sets closed under them); the masks must stay the reference path's.
SEARCH_SCHEMAS = [
    {"type": "string", "pattern": "console"},
    {"type": "string", "pattern": r"\d{2}-\d{2}"},
    {"type": "string", "pattern": r"\w+@"},
    {"type": "string", "pattern": "^(a)|(中b)|(X-[a-z0-9\\-]*)$"},
]
SEARCH_DOCUMENTS = ['"hello console 中😀 x"', '"ab 12-34 日本 é"', '"x \\"q\\" foo@ 😀"', '"zz中b X-ab-9"']
# Pieces decoding to code points no text holds (decode_utf8 reads them unchecked): U+D800 and U+110000. The
# family never takes a subtree holding one (SUBTREE_ODD); the reference path decides them.
ODD_PIECES = [b"\xed\xa0\x80", b"a\xed\xa0\x80", b"\xf4\x90\x80\x80", b"b\xf4\x90\x80\x80c"]


def search_walk(vocab, checker, label, schemas=SEARCH_SCHEMAS, documents=SEARCH_DOCUMENTS, regex_dialect=None):
    """Each strict schema's string fed code point by code point, every mask compared three ways. Returns the walks the
    first matchers' contexts replayed from records (TrieWalk.visit_recorded), in all. ``regex_dialect`` is strict
    mode's (None: ECMA-262; "python": ``re``'s Unicode classes, the long classes of many ranges)."""
    from bankml import json_schema_to_grammar

    replays = 0
    for schema, document in zip(schemas, documents):
        text, _ = json_schema_to_grammar(schema, mode="strict", strict_style="exact", regex_dialect=regex_dialect)
        g, *twins = three_ways(text, vocab)()
        for i, ch in enumerate(document):
            checker.compare(g, f"{label}, {schema.get('pattern', schema)!r}, before {document[:i]!r}", twins)
            for m in (g, *twins):
                m.accept_bytes(ch.encode("utf-8"))
        assert g.complete
        replays += g.context.subtree_replays
    return replays


def test_fast_path_equals_reference_search_patterns(random_vocabs):
    checker = Checker()
    for vocab_seed, vocab in zip(VOCAB_SEEDS, random_vocabs):
        pieces = [vocab.pieces[i] for i in range(vocab.n_vocab)] + ODD_PIECES
        search_walk(Vocab(pieces, list(vocab.eog_ids)), checker, f"vocabulary seed {vocab_seed}")
    assert checker.states >= 3 * sum(len(d) for d in SEARCH_DOCUMENTS)


def test_family_walk_takes_search_strings_whole_llama3():
    """On Llama 3's vocabulary the first mask inside a searched string visits a fraction of the trie (33,877
    nodes before the family walk for "console"), and every mask equals the reference path's."""
    from bankml import json_schema_to_grammar

    vocab = Vocab.from_gguf(DATA / "ggml-vocab-llama-bpe.gguf")
    checker = Checker()
    search_walk(vocab, checker, "llama3")
    text, _ = json_schema_to_grammar({"type": "string", "pattern": "console"}, mode="strict", strict_style="exact")
    g = Grammar(Rules.parse(text, vocab=vocab), vocab)
    g.context._configure_segments(enabled=False)
    g.accept_bytes(b'"hello')
    before = g.context.visited_nodes
    assert np.array_equal(g.allowed_ids(), g.allowed_ids(reference=True))
    assert g.context.visited_nodes - before < 5000


LONG_CLASS_SCHEMAS = [
    {"type": "string", "pattern": "^[A-Fa-f\\d]{4,12}$"},
    {"type": "string", "pattern": "^\\w{2,9}$"},
]
LONG_CLASS_DOCUMENTS = ['"5f\u0663a7b9c"', '"ab\u4e2d\u00e9\u65e5x"']
# Pieces ending inside a character (a 2-byte lead, 2 of 3 bytes, 2 of 4), alone and after a letter.
PARTIAL_PIECES = [b"\xd9", b"a\xd9", b"\xe4\xb8", b"b\xe4\xb8", b"\xf0\x9f", b"\xe6"]


def test_fast_path_equals_reference_long_class_partials(random_vocabs):
    """Unfinished characters against long classes (Unicode classes of many ranges, indexed): set_accepts_partial
    remembers match_partial_char per class position and unfinished character. Every mask equals the reference
    path's, on Llama 3 (thousands of byte tokens) and on the random vocabularies with pieces that end inside a
    character."""
    vocabs = [(Vocab.from_gguf(DATA / "ggml-vocab-llama-bpe.gguf"), "llama3")]
    for vocab_seed, vocab in zip(VOCAB_SEEDS, random_vocabs):
        pieces = [vocab.pieces[i] for i in range(vocab.n_vocab)] + PARTIAL_PIECES
        vocabs.append((Vocab(pieces, list(vocab.eog_ids)), f"vocabulary seed {vocab_seed}"))
    checker = Checker()
    for vocab, label in vocabs:
        search_walk(vocab, checker, label, LONG_CLASS_SCHEMAS, LONG_CLASS_DOCUMENTS, regex_dialect="python")
    assert checker.states >= len(vocabs) * sum(len(d) for d in LONG_CLASS_DOCUMENTS)


# Strings whose class takes only some code points >= 0x80 (Python's Unicode \\w, a negated class of Unicode spaces, a
# Cyrillic range), inside objects so that the segment cache walks them too, with pieces whose non-ASCII code points
# straddle the class (a letter then a no-break space, an ideographic space, a middle dot, a fullwidth comma).
CLASS_ABOVE_SCHEMAS = [
    {"type": "object", "properties": {"w": {"type": "string", "pattern": "^[\\w.:-]+$"}}, "required": ["w"]},
    {"type": "object", "properties": {"t": {"type": "string", "pattern": "^[^:\\s]+:[^:\\s]+$"}}, "required": ["t"]},
    {
        "type": "object",
        "properties": {"r": {"type": "string", "pattern": "^[\u0430-\u044f\u0451]{2,}$"}},
        "required": ["r"],
    },
]
CLASS_ABOVE_DOCUMENTS = [
    '{"w": "ab\u4e2d\u00e9.x\u65e5\u672c"}',
    '{"t": "\u4e2d\u00e9:x\u65e5"}',
    '{"r": "\u043f\u0451\u0436"}',
]
STRADDLING_PIECES = [
    "\u4e2d\u00a0".encode(),
    "\u00e9\u3000".encode(),
    "\u4e2d\u6587".encode(),
    "\u0436\u00b7".encode(),
    "\u0436\u0451".encode(),
    "ab\u4e2d:".encode(),
    "\u65e5\uff0c".encode(),
    "\u00e9\u00e8".encode(),
]


def test_fast_path_equals_reference_classes_above_ascii(random_vocabs):
    """A set whose one class taking code points >= 0x80 takes only some of them (SET_CLASS_ABOVE) takes whole the
    subtrees whose code points >= 0x80 lie in one span of the class (the trie's spans). Every mask equals the
    reference path's, on Llama 3 and on the random vocabularies with pieces straddling the class; on Llama 3 the
    first mask inside such a string visits a fraction of the nodes it did (11,049 for the first, before)."""
    from bankml import json_schema_to_grammar

    llama3 = Vocab.from_gguf(DATA / "ggml-vocab-llama-bpe.gguf")
    vocabs = [(llama3, "llama3")]
    for vocab_seed, vocab in zip(VOCAB_SEEDS, random_vocabs):
        pieces = [vocab.pieces[i] for i in range(vocab.n_vocab)] + STRADDLING_PIECES + ODD_PIECES
        vocabs.append((Vocab(pieces, list(vocab.eog_ids)), f"vocabulary seed {vocab_seed}"))
    checker = Checker()
    for vocab, label in vocabs:
        search_walk(vocab, checker, label, CLASS_ABOVE_SCHEMAS, CLASS_ABOVE_DOCUMENTS, regex_dialect="python")
    assert checker.states >= len(vocabs) * sum(len(d) for d in CLASS_ABOVE_DOCUMENTS)
    for schema, prefix in ((CLASS_ABOVE_SCHEMAS[0], b'{"w": "art'), (CLASS_ABOVE_SCHEMAS[1], b'{"t": "node')):
        text, _ = json_schema_to_grammar(schema, mode="strict", strict_style="exact", regex_dialect="python")
        g = Grammar(Rules.parse(text, vocab=llama3), llama3)
        g.accept_bytes(prefix)
        before = g.context.visited_nodes
        assert np.array_equal(g.allowed_ids(), g.allowed_ids(reference=True))
        assert g.context.visited_nodes - before < 3000


# Objects whose extra keys are any string but the listed names: strict mode writes the names' exclusion as a trie whose
# every node leaves into one shared free tail (`key-tail`), so the walks from that tail under each first code point
# are the same walks again, replayed from their records (TrieWalk.visit_recorded).
EXTRA_KEY_SCHEMAS = [
    {"type": "object", "properties": {"identifier": {"type": "integer"}, "mode": {"type": "string"}, "name": {}}},
    {"type": "object", "properties": {"id": {"type": "string"}, "idx": {"type": "string"}}, "maxProperties": 3},
]
EXTRA_KEY_DOCUMENTS = [
    '{"identifier": 1, "ide": "x", "mo\\u0064e": "a", "nam": 2, "\\"q": [], "name": null}',
    '{"idx": "a", "i\\u0064": "b", "i": "\\u4e2d"}',
]


def test_fast_path_equals_reference_recorded_subtrees(random_vocabs):
    """A big subtree walked from a set is recorded (its marks and pops) and replayed when the same subtree meets the
    same set again. Every mask along keys of extra-key objects, byte by byte, equals the reference path's on
    Llama 3 and the random vocabularies, and on Llama 3 the walks do replay records."""
    llama3 = Vocab.from_gguf(DATA / "ggml-vocab-llama-bpe.gguf")
    vocabs = [(llama3, "llama3")] + [(v, f"vocabulary seed {s}") for s, v in zip(VOCAB_SEEDS, random_vocabs)]
    checker = Checker()
    replays = [search_walk(vocab, checker, label, EXTRA_KEY_SCHEMAS, EXTRA_KEY_DOCUMENTS) for vocab, label in vocabs]
    assert checker.states >= len(vocabs) * sum(len(d) for d in EXTRA_KEY_DOCUMENTS)
    assert replays[0] > 0  # on Llama 3
