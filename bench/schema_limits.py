"""Time and memory of docs/RELIABILITY.md's schema blow-ups (the server section's first rows): a long ``$ref``
chain (``test_long_ref_chains``) and each schema of
``tests/schema/test_schema_hostile.py::test_exponential_conversions_are_refused``, converted directly and through
the chat template, in a child process under a 4 GiB address-space limit; its outcome (the SchemaLimits bound
that refused it), the conversion's wall time (the child's start and imports left out) and the child's peak
resident memory, as a markdown table.

    python bench/schema_limits.py

The test checks the same outcomes without timing them.
"""

import argparse
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.schema.test_schema_hostile import _EXPONENTIAL  # noqa: E402

LIMIT_AS = 4 << 30
# the first row: a $ref chain of objects, as tests/schema/test_schema_hostile.py::test_long_ref_chains builds it
REF_CHAIN = """
def ref_chain(n):
    defs = {"d%d" % i: {"type": "object", "properties": {"x": {"$ref": "#/$defs/d%d" % (i + 1)}}} for i in range(n)}
    defs["d%d" % n] = {"type": "string"}
    return {"$ref": "#/$defs/d0", "$defs": defs}
"""
CASES = [
    ("a $ref chain of 12,000 objects", "ref_chain(12000)"),
    ("a $ref chain of 50,000 objects", "ref_chain(50000)"),
    ("19 levels of allOf/$ref objects (text)", "json.dumps(allof_levels(19))"),
    ("16 levels of allOf/$ref objects (a Python dict)", "allof_levels(16)"),
    ("allOf naming the same $ref twice, 40 levels", "one_property(40)"),
    ('x = {"anyOf": [x, x]} 40 times (shared sub-dicts)', "shared(40)"),
    ('"type": ["object", "object"] nested 40 levels (text)', "json.dumps(type_lists(40))"),
]
CONVERTERS = [
    ("direct", "lambda s: json_schema_to_grammar(s)[0]"),
    ("chat", "lambda s: chat_grammar(json.loads(s) if isinstance(s, str) else s, 'chatml')[0]"),
]


def measure(case, convert):
    code = (
        f"import resource, time\nresource.setrlimit(resource.RLIMIT_AS, ({LIMIT_AS}, {LIMIT_AS}))\n"
        + _EXPONENTIAL
        + REF_CHAIN
        + f"\nschema = {case}\nt0 = time.perf_counter()\nout = run({convert}, schema)\n"
        "took = time.perf_counter() - t0\n"
        "import re\nbound = re.search(r'SchemaLimits\\.\\w+|nests too deeply', out)\n"
        "print(('SchemaError (' + bound.group(0) + ')') if bound else out[:80], '|', f'{took:.2f} s', '|',"
        " resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=600)
    if proc.returncode != 0:
        return f"exit {proc.returncode}: {proc.stderr.strip()[-150:]} | - | -"
    outcome, took, peak = proc.stdout.strip().splitlines()[-1].rsplit(" | ", 2)
    return f"{outcome} | {took} | {int(peak) / 1024:.0f}"


def main(argv=None):
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args(argv)
    print("| schema | path | outcome | time | peak RSS (MiB) |")
    print("|---|---|---|---|---:|")
    for name, case in CASES:
        for path, convert in CONVERTERS:
            print(f"| {name} | {path} | {measure(case, convert)} |", flush=True)


if __name__ == "__main__":
    main()
