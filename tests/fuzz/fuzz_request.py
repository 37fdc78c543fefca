"""Fuzzing request resolution and the content parser: strategies, properties, a long-running harness.

Properties:

* ``check_openai(req)``: ``from_openai`` gives a Constraint or a RequestError; the same request as JSON text
  (``from_openai_text``) gives the same; the Constraint's grammar (bare and through the chatml template) is
  built or refused with a SchemaError / GrammarError-free ValueError, never another exception;
* ``check_ollama(req)``: ``from_ollama_text`` likewise;
* ``check_sampler_fields(req, ollama)``: ``bankml.serve.openai.sampler_fields`` (``ollama.sampler_options``)
  gives ``(SamplerParams, int, list)`` or a RequestError;
* ``check_content(raw, ...)``: ``parse_message`` gives two strings or a ContentError; a ContentStream fed
  the same answer in pieces gives the same deltas (or the same ContentError) with and without its
  incremental scanner, and every delta adds to what was sent.

Suite: tests/serve/test_fuzz_request.py (fixed budget). Minutes of fuzzing:

    PYTHONPATH=. python -m tests.fuzz.fuzz_request --minutes 5

replays tests/fuzz/corpus/request/*.json and corpus/content/*.txt first; a failing example is saved there.
"""

import argparse
import json
import pathlib
import sys
import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bankml import ContentError, ContentStream, RequestError, SchemaError
from bankml.chat.constraint import Constraint, from_ollama_text, from_openai, from_openai_text
from bankml.chat.content import parse_message
from bankml.serve.ollama import sampler_options
from bankml.serve.openai import sampler_fields

from .fuzz_schema import DOCUMENTS

CORPUS = pathlib.Path(__file__).parent / "corpus"

# -- strategies

_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**64), 2**64),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=6),
)
_ANY = st.recursive(
    _SCALARS, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4), c, max_size=3), max_leaves=6
)
_GRAMMARS = st.sampled_from(
    ['root ::= "a"', 'root ::= "a', "root ::= undefined", "", 'root ::= [0-9]+ "."?', 'root ::= ("x" | b)+\nb ::= "y"']
)
_RESPONSE_FORMATS = st.one_of(
    st.fixed_dictionaries(
        {"type": st.sampled_from(["text", "json_object", "json_schema", "xml", "", 5])},
        optional={
            "schema": DOCUMENTS | _ANY,
            "json_schema": st.fixed_dictionaries(
                {}, optional={"schema": DOCUMENTS | _ANY, "name": st.text(max_size=3)}
            ),
        },
    ),
    _ANY,
)
_SAMPLER_FIELDS = st.sampled_from(
    [
        "temperature",
        "top_k",
        "top_p",
        "min_p",
        "typical_p",
        "repeat_last_n",
        "repeat_penalty",
        "presence_penalty",
        "frequency_penalty",
        "dry_multiplier",
        "dry_base",
        "dry_allowed_length",
        "dry_penalty_last_n",
        "dry_sequence_breakers",
        "mirostat",
        "mirostat_tau",
        "mirostat_eta",
        "min_keep",
        "seed",
        "samplers",
        "xtc_probability",
        "xtc_threshold",
        "top_n_sigma",
        "dynatemp_range",
        "dynatemp_exponent",
        "max_tokens",
        "n_predict",
        "max_completion_tokens",
        "stop",
        "logit_bias",
    ]
)
_FIELD_VALUES = st.one_of(
    _SCALARS,
    st.lists(st.text(max_size=4), max_size=3),
    st.lists(_SCALARS, max_size=3),
    st.dictionaries(st.text(max_size=3), _SCALARS, max_size=3),
    st.lists(st.lists(_SCALARS, max_size=3), max_size=3),
    st.sampled_from(["kypmxt", "top_k;min_p", 2**31 - 1, 2**63, -1, 0, 1e308, [[1, False]]]),
)
OPENAI_REQUESTS = st.fixed_dictionaries(
    {}, optional={"response_format": _RESPONSE_FORMATS, "json_schema": DOCUMENTS | _ANY, "grammar": _GRAMMARS | _ANY}
)
SAMPLER_REQUESTS = st.dictionaries(_SAMPLER_FIELDS, _FIELD_VALUES, max_size=5)
OLLAMA_REQUESTS = st.fixed_dictionaries(
    {},
    optional={
        "format": st.one_of(st.sampled_from(["json", "", "xml"]), DOCUMENTS, _ANY),
        "options": st.one_of(
            SAMPLER_REQUESTS,
            st.dictionaries(st.sampled_from(["num_predict", "stop", "seed", "top_k"]), _FIELD_VALUES, max_size=3),
            _ANY,
        ),
    },
)
_PIECES = st.sampled_from(
    [
        "{",
        "}",
        "[",
        "]",
        '"a"',
        '"',
        ":",
        ",",
        "1",
        "-",
        "2.5e3",
        "true",
        "null",
        " ",
        "\n",
        "```json",
        "```",
        "\\",
        "\\u12",
        "\\n",
        "é",
        "<think>",
        "</think>",
        "<think>\n",
        "\n</think>\n\n",
        "x",
        "<|im_end|>",
        "\U0001f600",
    ]
)
ANSWERS = st.lists(_PIECES, max_size=14).map("".join)
RAW_ANSWERS = ANSWERS.map(lambda s: s.encode("utf-8")) | st.binary(max_size=24)


# -- properties


def _grammars(constraint):
    for template in (None, "chatml", "qwen3"):
        try:
            grammar, _prompt = constraint.to_grammar(template)
        except SchemaError:
            continue
        assert grammar is None or isinstance(grammar, str)


def check_openai(req):
    try:
        constraint = from_openai(req)
    except RequestError as e:
        outcome = ("refused", str(e))
    else:
        assert isinstance(constraint, Constraint)
        _grammars(constraint)
        outcome = ("constraint", constraint.kind, constraint.chat, constraint.source)
    try:
        again = from_openai_text(None, json.dumps(req, ensure_ascii=False))
    except RequestError as e:
        # the text reader refuses what llama.cpp's JSON reader refuses (integers past 64 bits read as floats)
        assert outcome[0] == "refused" or "JSON" in str(e) or "surrogate" in str(e), (outcome, str(e))
        return outcome
    if outcome[0] == "constraint":
        assert (again.kind, again.chat, again.source) == outcome[1:], (outcome, again)
    return outcome


def check_ollama(req):
    try:
        constraint = from_ollama_text(None, json.dumps(req, ensure_ascii=False))
    except RequestError:
        return None
    assert isinstance(constraint, Constraint)
    _grammars(constraint)
    return constraint


def check_sampler_fields(req, ollama=False):
    try:
        params, n_predict, stop = sampler_options(req) if ollama else sampler_fields(req)
    except RequestError:
        return None
    assert isinstance(n_predict, int) and isinstance(stop, list) and all(isinstance(s, str) for s in stop)
    return params


def _stream(raw, pieces, json_mode, template, thinking, incremental):
    stream = ContentStream(json_mode, template, thinking, incremental=incremental)
    deltas = []
    try:
        for piece in pieces:
            deltas.append(stream.push(piece))
        deltas.append(stream.finish())
    except ContentError as e:
        return ("error", str(e), deltas)
    assert all(isinstance(d, str) for d in deltas)
    assert stream.content == "".join(deltas)
    return ("ok", stream.content, deltas)


def check_content(raw, cuts, json_mode, template, thinking):
    for partial in (False, True):
        try:
            text, reasoning = parse_message(raw, json_mode, template, thinking, partial)
        except ContentError:
            continue
        assert isinstance(text, str) and isinstance(reasoning, str)
    cuts = sorted({c % (len(raw) + 1) for c in cuts})
    pieces = [raw[a:b] for a, b in zip([0] + cuts, cuts + [len(raw)])]
    fast = _stream(raw, pieces, json_mode, template, thinking, True)
    slow = _stream(raw, pieces, json_mode, template, thinking, False)
    assert fast == slow, (fast, slow)


def corpus_requests():
    for path in sorted((CORPUS / "request").glob("*.json")):
        yield path.name, json.loads(path.read_text("utf-8"))


def corpus_answers():
    for path in sorted((CORPUS / "content").glob("*.txt")):
        yield path.name, path.read_bytes()


def replay_corpus():
    for _name, req in corpus_requests():
        check_openai(req)
        check_ollama(req)
        check_sampler_fields(req)
        check_sampler_fields(req, ollama=True)
    for _name, raw in corpus_answers():
        for template in ("chatml", "qwen3"):
            for json_mode in (True, False):
                check_content(raw, [1, 5, 9], json_mode, template, False)


# -- the long harness


def _save(kind, value):
    text = json.dumps(value, ensure_ascii=False, default=repr) if kind == "request" else None
    name = "found-%d" % (abs(hash(text if text is not None else bytes(value))) % 10**8)
    path = CORPUS / kind / (name + (".json" if kind == "request" else ".txt"))
    if text is not None:
        path.write_text(text, "utf-8")
    else:
        path.write_bytes(bytes(value))
    print(f"failing example saved as {path}", file=sys.stderr)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    args = parser.parse_args(argv)
    replay_corpus()
    end = time.monotonic() + 60 * args.minutes
    budget = settings(max_examples=1000, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    rounds = 0
    while time.monotonic() < end:

        @budget
        @given(OPENAI_REQUESTS, OLLAMA_REQUESTS, SAMPLER_REQUESTS)
        def requests(openai_req, ollama_req, sampler_req):
            for req, check in (
                (openai_req, check_openai),
                (ollama_req, check_ollama),
                (sampler_req, check_sampler_fields),
            ):
                try:
                    check(req)
                except BaseException:
                    _save("request", req)
                    raise

        @budget
        @given(
            RAW_ANSWERS,
            st.lists(st.integers(0, 64), max_size=4),
            st.booleans(),
            st.sampled_from(["chatml", "qwen3"]),
            st.booleans(),
        )
        def answers(raw, cuts, json_mode, template, thinking):
            try:
                check_content(raw, cuts, json_mode, template, thinking)
            except BaseException:
                _save("content", raw)
                raise

        requests()
        answers()
        rounds += 1
        print(f"{rounds * 1000} examples of each, no failure", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
