"""The GBNF engine under hostile input and shared use (issue 11): no hang, no crash, bounded time and memory.

Each reproducer that used to hang, blow up or crash runs in a child process with a time limit and an
address-space limit (RLIMIT_AS), so a regression fails the test instead of taking the suite down: it must
end with its result or a clear GrammarError within CHILD_SECONDS and CHILD_MEMORY. Masks where the engine
falls back from the fast path are compared with the reference path (and, in test_grammar_oracle-style
oracle tests at the end, with libllama itself).
"""

import json
import os
import pathlib
import pickle
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

from bankml import Grammar, GrammarError, Rules, Vocab
from bankml.engine import parser as gbnf_parser

from ..bounded import HANG_SECONDS
from ..oracle_support import load_bankml_vocab

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
CHILD_SECONDS = HANG_SECONDS  # a hang guard, not a speed check (tests/bounded.py)
CHILD_MEMORY = 4 << 30

# the reproducers of issue 11 (also kept in tests/fuzz/corpus/)
INDIRECT_LEFT_RECURSION = 'root ::= ("x" | b)+ root*\nb ::= '
DEEP_SEGMENT = 'root ::= r\nr ::= "a" r s | "a"\ns ::= "b" | ""'
REPETITION_AMPLIFICATION = 'root ::= "' + "a" * 100000 + '"{0,2000}'
AMBIGUOUS_FAST_PATH = 'root ::= ("x" b)+\nb ::= c{2} [^x] ("x" | b){2}\nc ::= [0-9]? | . c{2} "\\n"{0,2}'


def run_child(code, seconds=CHILD_SECONDS, memory=CHILD_MEMORY):
    """Run code in a fresh interpreter under an address-space limit; its stdout, once it exits 0 in time."""
    prelude = textwrap.dedent(f"""
        import resource, sys
        resource.setrlimit(resource.RLIMIT_AS, ({memory}, {memory}))
        sys.path.insert(0, {str(ROOT)!r})
        from bankml import Grammar, GrammarError, Rules, Vocab
        def qwen2():
            return Vocab.from_gguf({str(ROOT / "tests" / "data" / "ggml-vocab-qwen2.gguf")!r})
    """)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    try:
        proc = subprocess.run(
            [sys.executable, "-"],
            input=prelude + textwrap.dedent(code),
            capture_output=True,
            text=True,
            timeout=seconds,
            env=env,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"the child did not finish within {seconds} s (a hang)")
    assert proc.returncode == 0, f"child exited with {proc.returncode} (signal if negative):\n{proc.stderr[-3000:]}"
    return proc.stdout


def make_vocab(*pieces, eog=()):
    return Vocab([p.encode("utf-8") if isinstance(p, str) else p for p in pieces], list(eog))


@pytest.fixture(scope="module")
def qwen2():
    return load_bankml_vocab("qwen2")


# -- 1. infinite loops: left recursion through indirectly empty rules, and the advance budget ----------------


def test_indirect_left_recursion_is_refused_in_bounded_time():
    out = run_child(f"""
        try:
            Grammar({INDIRECT_LEFT_RECURSION!r})
        except GrammarError as err:
            print("refused:", err.reason)
    """)
    assert "refused: unsupported grammar, left recursion detected for nonterminal at index 0 (root)" in out


@pytest.mark.parametrize(
    "text",
    [
        INDIRECT_LEFT_RECURSION,
        'root ::= c root "y" | "x"\nc ::= b\nb ::= ""',  # b is empty as written, c only through b
        'root ::= a "z" | "x"\na ::= n root "q"\nn ::= m m\nm ::= [a]*',  # through a rule and a repetition
    ],
)
def test_growing_left_recursion_named(text):
    with pytest.raises(GrammarError) as info:
        Rules.parse(text)
    assert info.value.reason.startswith("unsupported grammar, left recursion detected for nonterminal at index ")
    assert "llama.cpp's check misses it" in info.value.reason


def test_left_recursion_llama_detects_keeps_its_message():
    with pytest.raises(GrammarError) as info:
        Rules.parse('root ::= b root "y" | "x"\nb ::= ""')
    assert info.value.reason == "unsupported grammar, left recursion detected for nonterminal at index 0 (root)"


@pytest.mark.parametrize(
    "text,good,bad",
    [
        # llama.cpp's own integration case: a cycle of tail references that leaves the same stacks
        ("root ::= ( [x]* )*", [b"", b"x", b"xx"], [b"y"]),
        # left recursion in tail position through an indirectly empty rule: advance_stack meets its stacks again
        ('root ::= c root | "x"\nc ::= b\nb ::= ""', [b"x"], [b"", b"y"]),
        # nullable rules that are not on a cycle
        ('root ::= b "x" root | "y"\nb ::= c\nc ::= ""', [b"y", b"xy", b"xxy"], [b"x"]),
    ],
)
def test_nullable_cycles_that_llama_handles_still_work(text, good, bad):
    v = make_vocab("x", "y", "</s>", eog=[2])
    for accepted in good:
        g = Grammar(text, v)
        g.accept_bytes(accepted)
        assert g.complete, accepted
    for refused in bad:
        g = Grammar(text, v)
        try:
            g.accept_bytes(refused)
        except GrammarError:
            continue
        assert not g.complete, refused


def test_advance_stack_budget_stops_unchecked_rules():
    """Rules that skip the left-recursion check (an unpickled tuple built by hand) still cannot loop:
    advance_stack stops at MAX_ADVANCE_STEPS with a GrammarError naming the budget."""
    # root ::= b root "y" (no way out, so no terminal stack ever reaches max_stacks); b ::= c; c ::= ""
    rules = [[(2, 1), (2, 0), (3, ord("y")), (0, 0)], [(2, 2), (0, 0)], [(0, 0)]]
    payload = pickle.dumps(Rules.parse('root ::= "x"'))
    crafted = pickle.loads(payload).__reduce__()
    data = pickle.dumps((crafted[0], ({"root": 0, "b": 1, "c": 2}, rules, "root", None)))
    out = run_child(f"""
        import pickle
        func, args = pickle.loads({data!r})
        rules = func(*args)
        try:
            Grammar(rules)
        except GrammarError as err:
            print("refused:", err.reason)
    """)
    assert "MAX_ADVANCE_STEPS" in out, out


def test_wide_rule_expands_in_linear_time():
    """advance_stack's seen set moves to hashing when it grows: a rule of 20,000 alternatives in one step."""
    text = "root ::= x\nx ::= " + " | ".join(f'"a{i}"' for i in range(20000))
    out = run_child(f"""
        g = Grammar({text!r}, max_stacks=100000)
        print("stacks", g.n_stacks)
    """)
    assert "stacks 20000" in out


# -- 2. the segment cache on deep stacks ----------------------------------------------------------------


def test_deep_stack_segments_end_and_match_reference():
    """Past 64 frames, where find_entry used to loop forever: every mask ends and equals the reference
    path's. (The reference path itself slows with the depth, as llama.cpp does: each of the n stacks pops
    up to n nullable frames per candidate.)"""
    out = run_child(f"""
        import numpy as np
        small = Vocab([b"a", b"b", b"ab", b"bb", b"bbb", b"abba", b"", b"</s>"], [7])
        for vocab, n in ((qwen2(), 70), (qwen2(), 150), (small, 151)):
            g = Grammar({DEEP_SEGMENT!r}, vocab)
            g.accept_bytes(b"a" * n)
            fast = g.allowed_ids()
            reference = g.allowed_ids(reference=True)
            print(n, len(fast), len(reference), np.array_equal(fast, reference))
    """)
    lines = out.split()
    for n in ("70", "150", "151"):
        at = lines.index(n)
        assert lines[at + 3] == "True", out
        assert int(lines[at + 1]) > 0


def test_stack_deeper_than_a_whole_segment_goes_to_the_reference_path():
    """A stack of 1,100 frames whose segments all pop out (a token of 40 b's pops 40 frames, and no
    continuation is allowed): past MAX_WHOLE_SEGMENT_FRAMES the mask comes from the reference path, the
    same as it, mask after mask."""
    v = make_vocab("a", "b", "ab", "bb", "bbb", "abba", "b" * 40, "</s>", eog=[7])
    for n, fallbacks in ((70, 0), (1100, 1)):
        g = Grammar(Rules.parse('root ::= r\nr ::= "a" r "b" | "a"', vocab=v), v, precompute=0)
        g.context._configure_segments(max_continuations=0)
        g.accept_bytes(b"a" * n)
        for step in range(6):
            assert np.array_equal(g.allowed_ids(), g.allowed_ids(reference=True)), (n, step)
            g.accept_bytes(b"b")
        assert (g.context.fallback_masks > 0) == bool(fallbacks), n


def test_deep_stack_reference_budget_is_a_clear_error():
    """1,100 frames deep on Qwen2: llama.cpp's way takes minutes per mask; bankml's reference path stops
    at REFERENCE_WORK_BUDGET with a GrammarError naming it, within the time limit."""
    out = run_child(
        f"""
        g = Grammar({DEEP_SEGMENT!r}, qwen2())
        g.accept_bytes(b"a" * 1100)
        try:
            print("allowed", len(g.allowed_ids()))
        except GrammarError as err:
            print("refused:", err.reason)
    """
    )
    assert "REFERENCE_WORK_BUDGET" in out, out


def test_deep_stack_walk_matches_reference(qwen2):
    """A walk down and up a deep right-recursive stack: every mask is the reference path's."""
    g = Grammar(DEEP_SEGMENT, qwen2)
    rng = np.random.default_rng(11)
    for step in range(40):
        fast = g.allowed_ids()
        reference = g.allowed_ids(reference=True)
        assert np.array_equal(fast, reference), f"step {step}"
        # mostly "a" (deeper), then a run of b-tokens
        a_tokens = [t for t in fast if qwen2.piece(int(t)) in (b"a", b"aa", b"aaa")]
        token = int(rng.choice(a_tokens)) if step < 30 and a_tokens else int(rng.choice(fast))
        if qwen2.is_eog(token):
            break
        g.accept(token)


# -- 3. repetition amplification: budgets checked while the rules are built ----------------------------


def test_repetition_amplification_refused_before_building():
    out = run_child(
        f"""
        try:
            Rules.parse({REPETITION_AMPLIFICATION!r})
        except GrammarError as err:
            print("refused:", err.reason, err.line, err.column)
    """,
        memory=1 << 30,
    )
    assert "refused: grammar exceeds bankml's element budget" in out and "MAX_ELEMENTS" in out, out
    assert out.strip().endswith("1 100012"), out


def test_cumulative_repetition_amplification_refused():
    # each repetition within the budget, the grammar past it: the budget counts every rule built so far
    text = 'root ::= "' + "b" * 5000 + '"{0,1000} x\nx ::= "' + "c" * 5000 + '"{0,1000}'
    out = run_child(
        f"""
        try:
            Rules.parse({text!r})
        except GrammarError as err:
            print("refused:", err.reason)
    """,
        memory=1 << 30,
    )
    assert "MAX_ELEMENTS" in out, out


def test_text_budget():
    with pytest.raises(GrammarError, match="MAX_GRAMMAR_BYTES"):
        Rules.parse(b"root ::= " + b'"a" ' * (gbnf_parser.MAX_GRAMMAR_BYTES // 4 + 1))


def test_repetition_within_budget_still_builds():
    rules = Rules.parse('root ::= "' + "a" * 1000 + '"{0,2000}')
    assert rules.n_elements > 2_000_000


# -- 4. one Grammar from several threads ----------------------------------------------------------------


def test_one_grammar_two_threads_no_crash():
    """One thread fills masks while another accepts and resets: no crash (a child process, so a segfault
    is a failure, not the end of the run), and every mask is the mask of one of the two states."""
    out = run_child("""
        import threading, time
        import numpy as np
        v = Vocab([b"a", b"b", b"ab", b"c", b"</s>"], [4])
        g = Grammar('root ::= ("a" "b")* "c"?', v)
        start = g.allowed_ids(reference=True).tolist()
        g.accept_bytes(b"a")
        after_a = g.allowed_ids(reference=True).tolist()
        g.reset()
        stop = time.monotonic() + 1.0
        bad = []
        counts = [0, 0]
        def masks():
            bitmask = np.zeros((1, 1), dtype=np.int32)
            while time.monotonic() < stop:
                ids = g.allowed_ids().tolist()
                g.fill_next_token_bitmask(bitmask)
                if ids not in (start, after_a):
                    bad.append(ids)
                counts[0] += 1
        def changes():
            while time.monotonic() < stop:
                g.accept_bytes(b"a")
                g.accept_bytes(b"b")
                g.accept_bytes(b"a")
                g.reset()
                g.accept(0)
                g.clone().reset()
                g.reset()
                counts[1] += 1
        threads = [threading.Thread(target=masks), threading.Thread(target=masks), threading.Thread(target=changes)]
        for t in threads: t.start()
        for t in threads: t.join()
        print("bad", len(bad), "masks", counts[0], "changes", counts[1])
    """)
    words = out.split()
    assert words[1] == "0", out
    assert int(words[3]) > 10 and int(words[5]) > 10, out


def test_shared_rules_concurrent_masks_correct(qwen2):
    """Separate matchers of one Rules (one shared context) in different states, masks filled from many
    threads at once (fill_next_token_bitmasks) for about a second: every row equals the reference path."""
    text = (ROOT / "tests" / "data" / "grammars" / "json.gbnf").read_text()
    rules = Rules.parse(text, vocab=qwen2)
    prefixes = [b"", b"{", b'{"a', b'{"a": [1, ', b'{"a": {"b": "x', b'{"\\u00', b'{"k": tr', b'{"k": -1.5e']
    grammars = []
    for prefix in prefixes:
        g = Grammar(rules, qwen2)
        g.accept_bytes(prefix)
        grammars.append(g)
    expected = [g.allowed_ids(reference=True) for g in grammars]
    width = (qwen2.n_vocab + 31) // 32
    from bankml import fill_next_token_bitmasks

    stop = time.monotonic() + 1.0
    rounds = 0
    while time.monotonic() < stop:
        bitmask = np.zeros((len(grammars), width), dtype=np.int32)
        fill_next_token_bitmasks(grammars, bitmask, max_workers=4)
        for row, want in zip(bitmask, expected):
            bits = np.unpackbits(row.view(np.uint8), bitorder="little")[: qwen2.n_vocab]
            assert np.array_equal(np.flatnonzero(bits), want)
        rounds += 1
    assert rounds >= 1


def test_threads_hammer_shared_context_with_accepts(qwen2):
    """Four threads, each with its own matcher of one shared Rules, accept and mask at once: each thread's
    masks equal what a private single-threaded matcher of the same Rules computes."""
    text = (ROOT / "tests" / "data" / "grammars" / "json.gbnf").read_text()
    rules = Rules.parse(text, vocab=qwen2)
    docs = [
        b'{"a": [1, 2, {"b": null}], "c": "d"}',
        b'{"t": [true, false, "x\\ny", -1.5e3]}',
        b'{"k": {"k": {"k": 1}}}',
        b'{"\\u00e9 plain": ""}',
    ]
    expected = {}
    for doc in docs:
        private = Grammar(Rules.parse(text, vocab=qwen2), qwen2)
        masks = []
        for i in range(0, len(doc), 3):
            private.accept_bytes(doc[i : i + 3])
            masks.append(private.allowed_ids(reference=True))
        expected[doc] = masks
    failures = []
    stop = time.monotonic() + 1.0

    def worker(doc):
        while time.monotonic() < stop:
            g = Grammar(rules, qwen2)
            for k, i in enumerate(range(0, len(doc), 3)):
                g.accept_bytes(doc[i : i + 3])
                if not np.array_equal(g.allowed_ids(), expected[doc][k]):
                    failures.append((doc, k))
                    return

    threads = [threading.Thread(target=worker, args=(doc,)) for doc in docs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures


# -- 5. the fast path falls back to the reference path past its bounds ---------------------------------


def test_fast_path_falls_back_where_sets_exceed_max_stacks(qwen2):
    g = Grammar(AMBIGUOUS_FAST_PATH, qwen2)
    before = g.context.fallback_masks
    fast = g.allowed_ids()
    assert np.array_equal(fast, g.allowed_ids(reference=True))
    assert len(fast) == 143  # libllama's count (see test_oracle_fallback_masks)
    assert g.context.fallback_masks == before + 1
    bitmask = np.zeros((qwen2.n_vocab + 31) // 32, dtype=np.int32)
    g.fill_next_token_bitmask(bitmask)
    bits = np.unpackbits(bitmask.view(np.uint8), bitorder="little")[: qwen2.n_vocab]
    assert np.array_equal(np.flatnonzero(bits), fast)
    assert g.context.fallback_masks == before + 1  # the set is remembered: no second try


def test_fast_path_work_budget_falls_back_and_masks_stay_identical(qwen2):
    """A work budget far below what the masks need: every fresh mask goes to the reference path, and a
    walk's masks are the same as with the full budget."""
    text = (ROOT / "tests" / "data" / "grammars" / "json.gbnf").read_text()
    doc = b'{"name": "x\\u00e9", "list": [1, -2.5e3, true, null, {"a": []}]}'
    tight = Grammar(Rules.parse(text, vocab=qwen2), qwen2, precompute=0)
    tight.context._configure_budget(fast_work=50)
    normal = Grammar(Rules.parse(text, vocab=qwen2), qwen2)
    for i in range(0, len(doc), 4):
        a, b = tight.allowed_ids(), normal.allowed_ids()
        assert np.array_equal(a, b), f"after {doc[:i]!r}"
        tight.accept_bytes(doc[i : i + 4])
        normal.accept_bytes(doc[i : i + 4])
    assert tight.context.fallback_masks > 5
    assert normal.context.fallback_masks == 0


def test_reference_budget_error_is_clear():
    """Where even the reference path would pass max_stacks, the error is a GrammarError naming the bound."""
    v = make_vocab("a", "b", "</s>", eog=[2])
    text = 'root ::= "a" y\ny ::= x x x x x x\nx ::= "a" | "b" | ""'
    g = Grammar(text, v, max_stacks=8)  # one stack; after "a", 13
    with pytest.raises(GrammarError, match="max_stacks"):
        g.allowed_ids()
    with pytest.raises(GrammarError, match="max_stacks"):
        g.allowed_ids(reference=True)


# -- 6. smaller ones -------------------------------------------------------------------------------------


@pytest.mark.parametrize("newline", ["\r", "\r\n", "\n"])
def test_error_line_with_any_line_end(newline):
    text = newline.join(['root ::= "a" x', 'x ::= "b"', "y ::= [a-", "z ::= 'c'"])
    with pytest.raises(GrammarError) as info:
        Rules.parse(text)
    # the class [a- runs on over the line end to the end of the text: line 4, after "z ::= 'c'"
    assert (info.value.line, info.value.column) == (4, 10), info.value


def test_deep_group_nesting_has_line_and_column():
    depth = gbnf_parser.MAX_GROUP_NESTING + 1
    text = 'root ::= "a"\nx ::= ' + "(" * depth + '"a"' + ")" * depth
    with pytest.raises(GrammarError) as info:
        Rules.parse(text)
    assert "MAX_GROUP_NESTING" in info.value.reason
    assert (info.value.line, info.value.column) == (2, 6 + depth)
    ok = "root ::= " + "(" * gbnf_parser.MAX_GROUP_NESTING + '"a"' + ")" * gbnf_parser.MAX_GROUP_NESTING
    assert Rules.parse(ok)


def test_deep_group_nesting_in_a_deep_caller():
    """Even when the caller has used most of Python's recursion limit, groups nested to MAX_GROUP_NESTING
    parse to the same rules as from the top level: the parser recurses in C, taking no Python frames, so
    there is no RecursionError to meet."""
    text = "root ::= " + "(" * gbnf_parser.MAX_GROUP_NESTING + '"a"' + ")" * gbnf_parser.MAX_GROUP_NESTING

    def nested(n):
        if n:
            return nested(n - 1)
        return Rules.parse(text)

    deep = nested(sys.getrecursionlimit() - 300)  # 300 frames left: fewer than 400 levels would take in Python
    assert deep.rules == Rules.parse(text).rules
    assert len(deep) == gbnf_parser.MAX_GROUP_NESTING + 1


@pytest.mark.parametrize("bad", [1.5, "5", True, False, None, np.float32(1.0), np.bool_(True), b"1"])
def test_accept_refuses_non_integers(bad):
    v = make_vocab("a", "b", "</s>", eog=[2])
    g = Grammar("root ::= [ab]*", v)
    with pytest.raises(TypeError, match="token id must be an int"):
        g.accept(bad)
    with pytest.raises(TypeError, match="token id must be an int"):
        g.accept_token(bad, b"a")
    with pytest.raises(TypeError, match="token id must be an int"):
        g.allows(bad)
    assert g.allowed_ids().tolist() == [0, 1, 2]  # unchanged


@pytest.mark.parametrize("good", [1, np.int32(1), np.int64(1), np.uint8(1)])
def test_accept_takes_integers(good):
    v = make_vocab("a", "b", "</s>", eog=[2])
    g = Grammar("root ::= [ab]*", v)
    assert g.allows(good)
    g.accept(good)
    g.accept_token(good, b"b")
    assert g.complete


# -- 7. grammars that can never match ---------------------------------------------------------------------


def test_out_of_range_token_id_refused_at_construction(qwen2):
    with pytest.raises(GrammarError) as info:
        Grammar("root ::= <[999999]>", qwen2)
    assert info.value.reason == f"token id 999999 is outside the vocabulary [0, {qwen2.n_vocab})"
    assert (info.value.line, info.value.column) == (1, 12)
    with pytest.raises(GrammarError, match="outside the vocabulary"):
        Grammar('root ::= "a" !<[151936]>', qwen2)
    rules = Rules.parse("root ::= <[999999]>")  # no vocabulary yet: fine
    with pytest.raises(GrammarError, match="token id 999999 is outside the vocabulary"):
        Grammar(rules, qwen2)
    assert Grammar(f"root ::= <[{qwen2.n_vocab - 1}]>", qwen2).allowed_ids().tolist() == [qwen2.n_vocab - 1]


def test_is_dead():
    v = make_vocab("a", "b", "</s>", eog=[2])
    assert Grammar('root ::= "c"', v).is_dead()  # no token spells c
    assert Grammar('root ::= "a" "c"', v).is_dead() is False  # a first
    g = Grammar('root ::= "a" "c"', v)
    g.accept(0)
    assert g.is_dead()
    assert not Grammar('root ::= "a"?', v).is_dead()  # complete: end-of-generation is allowed
    assert not Grammar('root ::= "c"', make_vocab("c")).is_dead()
    lazy = Grammar('root ::= "c"', v, trigger_tokens=[1])
    assert not lazy.is_dead()  # awaiting its trigger: anything goes
    no_eog = make_vocab("a", "b")
    g = Grammar('root ::= "a"', no_eog)
    g.accept(0)
    assert g.complete and g.is_dead()  # complete, but no token may follow


# -- 8. property tests: the parser never crashes, the fast path equals the reference path -----------------

from hypothesis import HealthCheck, given, settings  # noqa: E402

from ..fuzz import grammars as fuzz_grammars  # noqa: E402  (the strategies, shared with tests/fuzz/run_engine.py)


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(fuzz_grammars.gbnf_text())
def test_property_parser_never_crashes(text):
    fuzz_grammars.check_parse(text)


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(fuzz_grammars.grammar_and_walk())
def test_property_fast_path_equals_reference(case):
    fuzz_grammars.check_walk(case, fuzz_grammars.small_vocab())


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(fuzz_grammars.grammar_and_walk(max_steps=4))
def test_property_fast_path_equals_reference_qwen2(case):
    fuzz_grammars.check_walk(case, load_bankml_vocab("qwen2"))


def test_corpus_replays():
    """Every input kept in tests/fuzz/corpus/ (the reproducers above and what fuzzing found) still ends
    with a result or a GrammarError, and its masks equal the reference path's."""
    corpus = ROOT / "tests" / "fuzz" / "corpus"
    files = sorted(corpus.glob("*.json"))
    assert len(files) >= 5
    for path in files:
        fuzz_grammars.replay(json.loads(path.read_text(encoding="utf-8")))


# -- oracle: the fallback masks are libllama's --------------------------------------------------------------


@pytest.mark.oracle
def test_oracle_fallback_masks():
    from ..oracle import libllama
    from ..oracle_support import load_oracle_vocab

    vocab = load_bankml_vocab("qwen2")
    oracle_vocab = load_oracle_vocab("qwen2")
    oracle = libllama.OracleGrammar(oracle_vocab, AMBIGUOUS_FAST_PATH)
    g = Grammar(AMBIGUOUS_FAST_PATH, vocab)
    assert np.array_equal(g.allowed_ids(), oracle.allowed_ids())
    assert len(oracle.allowed_ids()) == 143
    deep = libllama.OracleGrammar(oracle_vocab, DEEP_SEGMENT)
    g = Grammar(DEEP_SEGMENT, vocab)
    a = [t for t in range(vocab.n_vocab) if vocab.piece(t) == b"a"][0]
    # bankml's mask at every depth; libllama's (which slows with the depth: 0.4 s at 50, 2.6 s at 80) at the
    # first 20 and on either side of 32 and 64 frames (find_entry once looped forever past 64)
    checked = set(range(20)) | {31, 32, 33, 63, 64, 65, 79}
    for step in range(80):
        mine = g.allowed_ids()
        if step in checked:
            assert np.array_equal(mine, deep.allowed_ids()), f"after {step} a's"
        g.accept(a)
        # (the grammar takes an "a" at any depth; unchecked, libllama's accept skips its own mask)
        deep.accept(a) if step in checked else deep.accept_unchecked(a)


@pytest.mark.oracle
@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(fuzz_grammars.grammar_and_walk(max_steps=3))
def test_property_fast_path_equals_libllama(case):
    from ..oracle_support import load_oracle_vocab

    fuzz_grammars.check_walk(case, load_bankml_vocab("qwen2"), oracle_vocab=load_oracle_vocab("qwen2"))


def test_fork_while_the_cache_is_built_in_the_background():
    """Each new context builds its segment cache in a background thread that takes the context's lock. A fork
    waits for those builds (os.register_at_fork), so the child never starts with a lock held by a thread it
    does not have: its masks are the parent's, and nothing hangs."""
    from ..bounded import run_bounded

    out = run_bounded(
        f"""
        import os, pathlib, sys
        import numpy as np
        from bankml import Grammar, Vocab, json_schema_to_grammar
        vocab = Vocab.from_gguf({str(ROOT / "tests" / "data" / "ggml-vocab-qwen2.gguf")!r})
        texts = [json_schema_to_grammar({{"type": "object", "properties": {{"k%d" % i: {{"type": "string",
                 "maxLength": 40 + i}}}}, "required": ["k%d" % i]}})[0] for i in range(6)]
        grammars = [Grammar(t, vocab, precompute=5.0) for t in texts]   # six builds now running
        pid = os.fork()
        if pid == 0:
            ok = all(int(g.allowed_ids().size) > 0 for g in grammars)
            os._exit(0 if ok else 3)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status), sum(int(g.allowed_ids().size) > 0 for g in grammars))
    """
    )
    assert out == "0 6", out


# -- the hot calls start no garbage collection of the caller's objects -----------------------------------------


def test_masks_allocate_nothing_the_gc_tracks(qwen2):
    """fill_next_token_bitmask, allows and accept -- a matcher's calls per token -- allocate no object the
    cyclic GC tracks (a typed memoryview per mask did): with the gen-0 threshold at 1, any such allocation
    starts a collection inside the call, and a collection of a big process's objects there cost
    MaskBench's masks up to 26 ms. Cold and warm states of a JSON walk, the first calls (lazy set-up) left
    out; a control window with a list made in it must see its collection."""
    import gc

    text = (pathlib.Path(__file__).parent.parent / "data" / "grammars" / "json.gbnf").read_text()
    rules = Rules.parse(text, vocab=qwen2)
    doc = '{"name": "kitchen", "sizes": [3.5, 12, -7e2], "ok": true, "note": "caf\\u00e9 \\"x\\""}'.encode()
    out = np.zeros((len(qwen2) + 31) // 32, dtype=np.int32)
    starts = []
    watching = [False]

    def watch(phase, info):
        if phase == "start" and watching[0]:
            starts.append(info["generation"])

    def window(calls):
        gc.collect()  # (a full one: it empties the free lists, whose reuse would go uncounted)
        gc.set_threshold(1)
        watching[0] = True
        try:
            return calls()
        finally:
            watching[0] = False
            gc.set_threshold(*threshold)

    threshold = gc.get_threshold()
    by_piece = {}
    for t, piece in enumerate(qwen2.pieces):
        if piece:
            by_piece.setdefault(piece, []).append(t)
    longest = max(map(len, by_piece))
    # the tokens: at each step the longest piece the grammar allows that spells the document on from there,
    # planned on a grammar of its own (so the windows below meet the states cold on theirs)
    plan, position = [], 0
    g = Grammar(Rules.parse(text, vocab=qwen2), qwen2)
    while position < len(doc):
        g.fill_next_token_bitmask(out)
        token = next(
            t
            for n in range(min(longest, len(doc) - position), 0, -1)
            for t in by_piece.get(doc[position : position + n], ())
            if (out[t >> 5] >> (t & 31)) & 1
        )
        g.accept(token)
        plan.append(token)
        position += len(qwen2.pieces[token])
    gc.callbacks.append(watch)
    gc.freeze()  # the test process's objects out of the collections' way (each window starts with a full one)
    steps = 0
    try:
        window(lambda: [[] for _ in range(3)])  # the control: lists are tracked
        assert starts, "the control window saw no collection: the check itself is broken"
        starts.clear()
        for rep in range(2):  # cold (new states), then warm (the same states again)
            g = Grammar(rules, qwen2)
            g.fill_next_token_bitmask(out)
            built = g.context.segment_stats["built"]
            for token in plan:

                def step():  # (statements only: a tuple built here would be tracked itself)
                    g.fill_next_token_bitmask(out)
                    ok = g.allows(token)
                    g.accept(token)
                    return ok

                allowed = window(step)
                assert allowed
                steps += 1
            if rep == 0:
                assert g.context.segment_stats["built"] > built  # the windows did build segment entries
    finally:
        watching[0] = False
        gc.set_threshold(*threshold)
        gc.callbacks.remove(watch)
        gc.unfreeze()
    assert steps > 20
    assert starts == [], f"{len(starts)} collections started inside masks over {steps} steps"
