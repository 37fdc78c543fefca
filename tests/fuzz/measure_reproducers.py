"""The issue 11 reproducers of the GBNF engine (and the 2,000,000-deep groups of the C parser), each in a child
process under a 4 GiB address-space limit and a 60 s timeout: outcome, wall time and peak resident memory, as a
markdown table (docs/RELIABILITY.md, "The GBNF engine"). The time includes starting Python and, where a vocabulary is named,
loading it (Qwen2: about 0.3 s).

    PYTHONPATH=. python -m tests.fuzz.measure_reproducers
"""

import pathlib
import subprocess
import sys
import textwrap
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
QWEN2 = ROOT / "tests" / "data" / "ggml-vocab-qwen2.gguf"

CASES = [
    (
        "indirect left recursion",
        "none",
        """
        Grammar('root ::= ("x" | b)+ root*\\nb ::= ')
    """,
    ),
    (
        "segment cache, 70 frames deep",
        "qwen2",
        """
        g = Grammar('root ::= r\\nr ::= "a" r s | "a"\\ns ::= "b" | ""', vocab)
        g.accept_bytes(b"a" * 70)
        fast, reference = g.allowed_ids(), g.allowed_ids(reference=True)
        assert (fast == reference).all()
        print(len(fast), "tokens, = reference")
    """,
    ),
    (
        "segment cache, 1,100 frames deep",
        "qwen2",
        """
        g = Grammar('root ::= r\\nr ::= "a" r s | "a"\\ns ::= "b" | ""', vocab)
        g.accept_bytes(b"a" * 1100)
        print(len(g.allowed_ids()), "tokens")
    """,
    ),
    (
        "repetition amplification",
        "none",
        """
        Rules.parse('root ::= "' + 'a' * 100000 + '"{0,2000}')
    """,
    ),
    (
        "one Grammar, 3 threads, 1 s",
        "none",
        """
        import threading, time
        v = Vocab([b"a", b"b", b"ab", b"c", b"</s>"], [4])
        g = Grammar('root ::= ("a" "b")* "c"?', v)
        stop = time.monotonic() + 1.0
        n = [0]
        def masks():
            while time.monotonic() < stop:
                g.allowed_ids(); n[0] += 1
        def changes():
            while time.monotonic() < stop:
                g.accept_bytes(b"a"); g.reset(); n[0] += 1
        ts = [threading.Thread(target=f) for f in (masks, masks, changes)]
        [t.start() for t in ts]; [t.join() for t in ts]
        print(n[0], "calls, no crash")
    """,
    ),
    (
        "fast path past max_stacks",
        "qwen2",
        """
        g = Grammar('root ::= ("x" b)+\\nb ::= c{2} [^x] ("x" | b){2}\\nc ::= [0-9]? | . c{2} "\\\\n"{0,2}', vocab)
        print(len(g.allowed_ids()), "tokens (fallback to the reference path)")
    """,
    ),
    (
        "CR-only line ends",
        "none",
        """
        Rules.parse('root ::= "a"\\rx ::= "b"\\ry ::= [a-')
    """,
    ),
    (
        "groups nested 5,000 deep",
        "none",
        """
        Rules.parse("root ::= " + "(" * 5000 + '"a"' + ")" * 5000)
    """,
    ),
    (
        "groups nested 2,000,000 deep",
        "none",
        """
        Rules.parse("root ::= " + "(" * 2000000 + '"a"' + ")" * 2000000)
    """,
    ),
    (
        "accept(1.5)",
        "none",
        """
        g = Grammar('root ::= [ab]*', Vocab([b"a", b"b", b"</s>"], [2]))
        g.accept(1.5)
    """,
    ),
    (
        "<[999999]> on Qwen2",
        "qwen2",
        """
        Grammar("root ::= <[999999]>", vocab)
    """,
    ),
]


def measure(code, vocab):
    prelude = textwrap.dedent(f"""
        import resource, sys
        resource.setrlimit(resource.RLIMIT_AS, ({4 << 30}, {4 << 30}))
        from bankml import Grammar, GrammarError, Rules, Vocab
        vocab = Vocab.from_gguf({str(QWEN2)!r}) if {vocab == "qwen2"} else None
        try:
    """)
    body = textwrap.indent(textwrap.dedent(code).strip(), "    ")
    tail = textwrap.dedent("""
        except (GrammarError, TypeError, ValueError) as err:
            print(type(err).__name__ + ":", err)
        print("peak", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    """)
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, "-"], input=prelude + body + tail, capture_output=True, text=True, timeout=60
        )
    except subprocess.TimeoutExpired:
        return "timeout (60 s)", 60.0, None
    took = time.perf_counter() - start
    if proc.returncode != 0:
        return f"exit {proc.returncode}: {proc.stderr[-200:]}", took, None
    lines = proc.stdout.strip().splitlines()
    peak = int(lines[-1].split()[1]) / 1024
    return " ".join(lines[:-1])[:150], took, peak


def main():
    print("| input | outcome | time (s) | peak RSS (MiB) |")
    print("|---|---|---:|---:|")
    for name, vocab, code in CASES:
        outcome, took, peak = measure(code, vocab)
        peak_text = f"{peak:.0f}" if peak is not None else "-"
        print(f"| {name} | {outcome.replace('|', '/')} | {took:.2f} | {peak_text} |", flush=True)


if __name__ == "__main__":
    main()
