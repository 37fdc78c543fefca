"""JSON schema -> GBNF conversion time: bankml.schema.converter (pure Python) vs the pinned llama.cpp's converter (C++,
timed inside the converter program of tests/oracle/build_converter.py, the schema parsed once, outside).

    python bench/schema_convert.py            # the 22 realistic schemas of bench/data/schemas.json, and
                                              # llama.cpp's 81 test cases

Prints one line per group: total and median per-schema time of each, and the ratio. Short on purpose.
"""

import json
import pathlib
import statistics
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bankml.schema.converter import json_schema_to_grammar  # noqa: E402
from bankml.schema.jsontext import load_schema  # noqa: E402
from tests.oracle.build_converter import Converter  # noqa: E402


def bankml_ns(schema, reps):
    doc = load_schema(schema)  # both sides parse the JSON once, outside the timing
    t0 = time.perf_counter_ns()
    for _ in range(reps):
        json_schema_to_grammar(doc)
    return (time.perf_counter_ns() - t0) / reps


def reps_for(schema):
    t0 = time.perf_counter()
    json_schema_to_grammar(schema)
    one = time.perf_counter() - t0
    return max(3, min(200, int(0.05 / max(one, 1e-6))))


def group(name, schemas, conv):
    ours, theirs = [], []
    for schema in schemas:
        try:
            json_schema_to_grammar(schema)
        except Exception:
            continue
        n = reps_for(schema)
        ours.append(bankml_ns(schema, n))
        theirs.append(conv.time_ns(schema, n))
    print(
        f"{name}: {len(ours)} schemas; bankml total {sum(ours) / 1e6:.2f} ms,"
        f" median {statistics.median(ours) / 1e3:.1f} us;"
        f" llama.cpp total {sum(theirs) / 1e6:.2f} ms, median {statistics.median(theirs) / 1e3:.1f} us;"
        f" bankml/llama.cpp {sum(ours) / sum(theirs):.2f}x (total), "
        f"{statistics.median([a / b for a, b in zip(ours, theirs)]):.2f}x (median of ratios)"
    )


def main():
    realistic = [e["schema"] for e in json.loads((ROOT / "bench/data/schemas.json").read_text())["schemas"]]
    table = json.loads((ROOT / "tests/data/json_schema_to_grammar_cases.json").read_text())
    cases = [c["schema"] for c in table["cases"]]
    cases = [json.loads(c) for c in cases if c.strip()]
    with Converter() as conv:
        group("realistic (bench/data/schemas.json)", realistic, conv)
        group("llama.cpp test cases", cases, conv)


if __name__ == "__main__":
    main()
