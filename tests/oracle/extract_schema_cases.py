"""Reads llama.cpp's tests/test-json-schema-to-grammar.cpp into tests/data/json_schema_to_grammar_cases.json
(run by hand when the pinned llama.cpp changes; the exact output of each case is then recorded with the
live oracle: python -m tests.oracle.extract_schema_cases SRC --record)."""

import json
import pathlib
import re
import sys

HERE = pathlib.Path(__file__).resolve().parent
OUT = HERE.parent / "data" / "json_schema_to_grammar_cases.json"

_RAW = r'R"""\((.*?)\)"""'
_STR = r'"((?:[^"\\]|\\.)*)"'
_CASE = re.compile(
    r"test\(\{\s*(SUCCESS|FAILURE),\s*" + _STR + r",\s*(?:" + _RAW + "|" + _STR + r"),\s*(?:" + _RAW + r'|"")\s*\}\);',
    re.S,
)


def trim(text):
    # the C++ test's trim(): strip the ends, then the indentation of every line
    text = text.strip(" \n\r\t")
    return re.sub(r"(^|\n)[ \t]+", r"\1", text)


def extract(src):
    text = (pathlib.Path(src) / "tests" / "test-json-schema-to-grammar.cpp").read_text()
    body = text[text.index("static void test_all") : text.index("int main()")]
    cases = []
    for m in _CASE.finditer(body):
        status, name, grammar = m.group(1), m.group(2), m.group(5)
        schema = m.group(3) if m.group(3) is not None else json.loads('"' + m.group(4) + '"')
        case = {"name": json.loads('"' + name + '"'), "status": status, "schema": schema}
        if status == "SUCCESS":
            case["expected_trimmed"] = trim(grammar)
        cases.append(case)
    assert len(cases) == body.count("test({"), (len(cases), body.count("test({"))
    return cases


def main():
    src = sys.argv[1]
    cases = extract(src)
    if "--record" in sys.argv:
        from .build_converter import Converter

        with Converter() as conv:
            for case in cases:
                ok, out, _kind, err = conv.convert_text(case["schema"])
                if ok:
                    case["grammar"] = out
                    case["warning_output"] = err
                else:
                    case["error"] = out
    doc = {
        "source": "llama.cpp tests/test-json-schema-to-grammar.cpp, as vendored by llama-cpp-python 0.3.36 "
        "(MIT License, Copyright (c) 2023-2026 The ggml authors)",
        "cases": cases,
    }
    OUT.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    print(len(cases), "cases written to", OUT)


if __name__ == "__main__":
    main()
