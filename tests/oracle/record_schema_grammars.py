"""Recorder of ``bench/data/schema_grammars.json``: the GBNF the pinned llama.cpp's converter gives each of the 22
schemas of ``bench/data/schemas.json`` (``json_schema_to_grammar(common_json::parse(schema), force_gbnf=true)``,
the program of ``build_converter.py`` linked against llama-cpp-python 0.3.36's ``libllama-common.so``). The
benches and ``tests/engine/test_matcher_oracle.py`` walk these grammars; ``tests/schema/test_schema_oracle.py``
checks the file against the live converter in every run.

    python -m tests.oracle.record_schema_grammars            # write bench/data/schema_grammars.json
    python -m tests.oracle.record_schema_grammars --check    # compare the file with the converter; exit 1 if not

llama.cpp is under the MIT License, Copyright (c) 2023-2026 The ggml authors (full text in
tests/data/LICENSE-llama.cpp.txt); the recorded grammars are its converter's output.
"""

import json
import pathlib
import sys

from .build_converter import Converter

BENCH_DATA = pathlib.Path(__file__).resolve().parents[2] / "bench" / "data"
SCHEMAS = BENCH_DATA / "schemas.json"
OUTPUT = BENCH_DATA / "schema_grammars.json"
NOTE = (
    "GBNF recorded from the pinned llama.cpp's json_schema_to_grammar (llama-cpp-python 0.3.36, vendor/llama.cpp "
    "common/json-schema-to-grammar.cpp): json_schema_to_grammar(common_json::parse(schema), /*force_gbnf=*/true) of "
    "each schema in schemas.json, called from a small program linked against the wheel's libllama-common.so. "
    "llama.cpp is under the MIT License, Copyright (c) 2023-2026 The ggml authors."
)


def record(converter=None):
    """``{"_note": ..., "grammars": {name: gbnf}}`` for the schemas of bench/data/schemas.json, in their order.
    A schema the converter refuses, or converts with a warning, is an error: the benches need whole grammars."""
    entries = json.loads(SCHEMAS.read_text(encoding="utf-8"))["schemas"]
    own = converter is None
    converter = converter or Converter()
    try:
        grammars = {}
        for entry in entries:
            ok, text, kind, stderr = converter.convert(entry["schema"])
            if not ok or stderr:
                raise RuntimeError("%s: llama.cpp's converter gave %s" % (entry["name"], text if not ok else stderr))
            grammars[entry["name"]] = text
    finally:
        if own:
            converter.close()
    return {"_note": NOTE, "grammars": grammars}


def dump(recording):
    return json.dumps(recording, indent=1, ensure_ascii=False) + "\n"


def main(argv=None):
    args = sys.argv[1:] if argv is None else argv
    recording = record()
    if "--check" in args:
        stored = json.loads(OUTPUT.read_text(encoding="utf-8"))
        differ = sorted(
            set(stored["grammars"]) ^ set(recording["grammars"])
            | {n for n in stored["grammars"] if stored["grammars"][n] != recording["grammars"].get(n)}
        )
        for name in differ:
            print("[record_schema_grammars] differs: %s" % name, file=sys.stderr)
        print(
            "[record_schema_grammars] %d of %d grammars as recorded"
            % (len(recording["grammars"]) - len(differ), len(recording["grammars"])),
            file=sys.stderr,
        )
        return 1 if differ else 0
    OUTPUT.write_text(dump(recording), encoding="utf-8")
    print("[record_schema_grammars] wrote %s (%d grammars)" % (OUTPUT, len(recording["grammars"])), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
