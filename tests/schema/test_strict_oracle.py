"""Strict mode's grammars walked against the pinned libllama on real vocabularies, live, as the converter's
grammars are (tests/engine/test_grammar_oracle.py): a strict grammar is GBNF, so llama.cpp's own grammar sampler
is its reference for masks. For every schema of the project's MaskBench files (bench/data/maskbench/, with
their invalid instances) and of bench/data/schemas.json (22 schemas, a valid instance each), strict mode's GBNF
is given to bankml (``Rules.parse`` + ``Grammar``) and to libllama (``llama_sampler_init_grammar``); each
instance, tokenized by libllama, is walked token by token and at every step the two whole-vocabulary masks must
be identical (count and FNV-1a hash), then the token is accepted by both, until the walk ends or both refuse the
token. libllama computes every mask here: nothing is replayed. jsonschema's verdict on each instance is checked
too: the walk reaches the end with the grammar complete exactly when jsonschema accepts the instance (strict
mode's promise, tests/schema/test_schema_strict.py, here through libllama's masks)."""

import json
import pathlib

import jsonschema
import numpy as np
import pytest

from bankml import Grammar, Rules, mask_hash
from bankml.schema.strict import strict_schema_to_grammar

from .. import spec_oracle  # noqa: E402
from ..oracle import libllama
from ..oracle_support import ORACLE_STATS, load_pair

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
FORMATS = jsonschema.Draft202012Validator.FORMAT_CHECKER


def _cases():
    cases = []
    for path in sorted((ROOT / "bench" / "data" / "maskbench").glob("*.json")):
        case = json.loads(path.read_text(encoding="utf-8"))
        cases.append(("maskbench/" + path.name, case["schema"], [t["data"] for t in case["tests"]]))
    for entry in json.loads((ROOT / "bench" / "data" / "schemas.json").read_text(encoding="utf-8"))["schemas"]:
        cases.append(("schemas.json/" + entry["name"], entry["schema"], [json.loads(entry["instance"])]))
    return cases


CASES = _cases()
# SmolLM2 (49,152 tokens) for every case; Llama 3 (128,256) for the MaskBench files and every third schema
RUNS = [(name, "smollm2") for name, _, _ in CASES] + [
    (name, "llama3") for i, (name, _, _) in enumerate(CASES) if name.startswith("maskbench/") or i % 3 == 0
]
BY_NAME = {name: (schema, values) for name, schema, values in CASES}


def test_the_sample_is_the_whole_project_set():
    assert len(CASES) == 4 + 22 and len(RUNS) >= 35


def _oracle_verdict(schema, value):
    return spec_oracle.is_valid(schema, value)  # jsonschema as the suite reads the spec (ECMA patterns)


@pytest.mark.oracle
@pytest.mark.parametrize("name,vocab_name", RUNS, ids=[f"{v}-{n}" for n, v in RUNS])
def test_strict_masks_are_libllama_s(name, vocab_name):
    schema, values = BY_NAME[name]
    gbnf = strict_schema_to_grammar(schema)
    vocab, oracle_vocab = load_pair(vocab_name)
    rules = Rules.parse(gbnf, vocab=vocab)
    eog = vocab.eog_ids[0]
    for k, value in enumerate(values):
        text = json.dumps(value, ensure_ascii=False).encode("utf-8")
        tokens = oracle_vocab.tokenize(text, add_special=False, parse_special=False)
        ours = Grammar(rules, vocab)
        theirs = libllama.OracleGrammar(oracle_vocab, gbnf)
        try:
            walked = True
            for i, token in enumerate(tokens + [None]):
                mine = ours.allowed_ids()
                reference = theirs.allowed_ids()
                where = f"{name} instance {k} on {vocab_name}, before token {i} of {len(tokens)}"
                if (int(mine.size), *mask_hash(mine)) != (int(reference.size), *mask_hash(reference)):
                    only_ours = np.setdiff1d(mine, reference)[:8].tolist()
                    only_theirs = np.setdiff1d(reference, mine)[:8].tolist()
                    pytest.fail(
                        f"{where}: bankml allows {mine.size}, libllama {reference.size}: {only_ours} / {only_theirs}"
                    )
                ORACLE_STATS["strict grammar masks identical to libllama's (live)"] += 1
                if token is None:
                    break
                if not bool(np.any(reference == token)):
                    walked = False
                    break
                ours.accept(token)
                theirs.accept(token)
            complete = walked and bool(np.any(theirs.allowed_ids() == eog))
            assert complete == _oracle_verdict(schema, value), (name, k, text[:200])
            ORACLE_STATS["strict instances walked on libllama's masks, verdict jsonschema's"] += 1
        finally:
            theirs.close()
