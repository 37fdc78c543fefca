"""Strict mode's grammars walked against the pinned libllama on real vocabularies, as the converter's grammars
are (tests/engine/test_grammar_oracle.py): a strict grammar is GBNF, so llama.cpp's own grammar sampler is its
reference for masks. For every schema of the project's MaskBench files (bench/data/maskbench/, with their invalid
instances) and of bench/data/schemas.json (22 schemas, a valid instance each), strict mode's GBNF is given to
bankml (``Rules.parse`` + ``Grammar``) and to libllama (``llama_sampler_init_grammar``); each instance, tokenized
by libllama, is walked token by token and at every step the two whole-vocabulary masks must be identical (count
and FNV-1a hash), then the token is accepted by both, until the walk ends or both refuse the token. jsonschema's
verdict on each instance is checked too: the walk reaches the end with the grammar complete exactly when
jsonschema accepts the instance (strict mode's promise, tests/schema/test_schema_strict.py, here through
libllama's masks).

libllama's masks (tests/oracle/mask_recording.py): the runs of ``LIVE_RUNS`` (three SmolLM2 cases of different
shape) compute every mask live in every run; the others replay the digests recorded in
tests/data/oracle_masks_strict.json.gz, while libllama still builds each grammar and accepts every token of the
walk. ``BANKML_ORACLE_LIVE=1`` computes every mask live; ``python -m tests.oracle.mask_recording
tests/schema/test_strict_oracle.py`` records them again."""

import hashlib
import json
import pathlib

import numpy as np
import pytest

from bankml import Grammar, Rules, mask_hash
from bankml.schema.strict import strict_schema_to_grammar

from .. import spec_oracle  # noqa: E402
from ..oracle import libllama
from ..oracle.mask_recording import RECORD, Recording, fingerprint
from ..oracle_support import ORACLE_STATS, load_pair, vocab_path

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
MODULE = "tests/schema/test_strict_oracle.py"
MASKBENCH = sorted((ROOT / "bench" / "data" / "maskbench").glob("*.json"))
SCHEMAS = ROOT / "bench" / "data" / "schemas.json"


def _cases():
    cases = []
    for path in MASKBENCH:
        case = json.loads(path.read_text(encoding="utf-8"))
        cases.append(("maskbench/" + path.name, case["schema"], [t["data"] for t in case["tests"]]))
    for entry in json.loads(SCHEMAS.read_text(encoding="utf-8"))["schemas"]:
        cases.append(("schemas.json/" + entry["name"], entry["schema"], [json.loads(entry["instance"])]))
    return cases


CASES = _cases()
# SmolLM2 (49,152 tokens) for every case; Llama 3 (128,256) for the MaskBench files and every third schema
RUNS = [(name, "smollm2") for name, _, _ in CASES] + [
    (name, "llama3") for i, (name, _, _) in enumerate(CASES) if name.startswith("maskbench/") or i % 3 == 0
]
BY_NAME = {name: (schema, values) for name, schema, values in CASES}
# the runs whose libllama masks are computed live in every run (473 masks): a MaskBench file with invalid
# instances ($defs, $ref, oneOf, pattern, formats), a schema of prefixItems tuples and numeric bounds under oneOf,
# and one of additionalProperties maps, patterns and an enum
LIVE_RUNS = {
    ("maskbench/refs_and_oneof.json", "smollm2"),
    ("schemas.json/geo_feature", "smollm2"),
    ("schemas.json/package_manifest", "smollm2"),
}
# A case is named by its run and a hash of the GBNF strict mode writes for it: the GBNF is bankml's own output and
# changes with the strict compiler, so a changed grammar is a case the recording does not hold, which runs live
# (an entry left for the old grammar is never asked for: harmless, dropped at the next recording, which brings such
# runs back to replaying). The fingerprint covers the rest: this module, its schemas, the oracle driver and the two
# vocabularies; a change there fails every run until the module is recorded again.
RECORDING = Recording(
    "strict",
    fingerprint(
        __file__, [*MASKBENCH, SCHEMAS, pathlib.Path(libllama.__file__), *map(vocab_path, ("smollm2", "llama3"))], {}
    ),
    counts=("strict walks: libllama masks computed live", "strict walks: libllama masks replayed from the recording"),
)


@pytest.fixture(scope="module", autouse=True)
def _write_recording():
    yield
    if RECORD:
        RECORDING.write()


def test_the_sample_is_the_whole_project_set():
    assert len(CASES) == 4 + 22 and len(RUNS) >= 35
    assert LIVE_RUNS <= set(RUNS)


def _oracle_verdict(schema, value):
    return spec_oracle.is_valid(schema, value)  # jsonschema as the suite reads the spec (ECMA patterns)


def allows(allowed, token):
    return bool(np.any(allowed == token))


def describe(vocab, ids):
    return ", ".join(f"{int(i)}={vocab.piece(int(i))!r}" for i in ids[:8])


def case_id(name, vocab_name, gbnf):
    return f"{vocab_name}-{name} gbnf {hashlib.sha256(gbnf.encode('utf-8')).hexdigest()[:12]}"


def compare_masks(ours, theirs, src, vocab, where):
    """bankml's mask against libllama's (``src``: its digest, live or recorded); returns the allowed ids."""
    mine = ours.allowed_ids()
    got = (int(mine.size), *mask_hash(mine))
    if got != src.digest(theirs):
        reference = theirs.allowed_ids()  # live: the message names the tokens
        if not src.live and (int(reference.size), *mask_hash(reference)) == got:
            pytest.fail(
                f"{where}: libllama gives bankml's mask, the recording another: {RECORDING.path.name} is stale "
                f"(record it again: python -m tests.oracle.mask_recording {MODULE})"
            )
        pytest.fail(
            f"{where}: bankml allows {mine.size} tokens, libllama {reference.size}; "
            f"only bankml: [{describe(vocab, np.setdiff1d(mine, reference))}]; "
            f"only libllama: [{describe(vocab, np.setdiff1d(reference, mine))}]"
        )
    ORACLE_STATS["strict grammar masks identical to libllama's (live or replayed)"] += 1
    return mine


def walk_instance(rules, vocab, oracle_vocab, gbnf, tokens, src, where):
    """Walk one instance's tokens on both grammars; whether the walk ended with the grammar complete."""
    ours = Grammar(rules, vocab)
    theirs = libllama.OracleGrammar(oracle_vocab, gbnf)
    try:
        for i, token in enumerate(tokens + [None]):
            mine = compare_masks(ours, theirs, src, vocab, f"{where}, before token {i} of {len(tokens)}")
            if token is None:
                return allows(mine, vocab.eog_ids[0])
            if not allows(mine, token):
                return False  # both refuse it (the masks are identical)
            ours.accept(token)
            theirs.accept_unchecked(token)  # the mask was just compared: libllama allows the token
    finally:
        theirs.close()
    raise AssertionError("unreachable")  # pragma: no cover


@pytest.mark.oracle
@pytest.mark.parametrize("name,vocab_name", RUNS, ids=[f"{v}-{n}" for n, v in RUNS])
def test_strict_masks_are_libllama_s(name, vocab_name):
    schema, values = BY_NAME[name]
    gbnf = strict_schema_to_grammar(schema)
    vocab, oracle_vocab = load_pair(vocab_name)
    rules = Rules.parse(gbnf, vocab=vocab)
    src = RECORDING.source(case_id(name, vocab_name, gbnf), vocab_name, live=(name, vocab_name) in LIVE_RUNS)
    for k, value in enumerate(values):
        text = json.dumps(value, ensure_ascii=False).encode("utf-8")
        tokens = oracle_vocab.tokenize(text, add_special=False, parse_special=False)
        complete = walk_instance(rules, vocab, oracle_vocab, gbnf, tokens, src, f"{name} instance {k} on {vocab_name}")
        assert complete == _oracle_verdict(schema, value), (name, k, text[:200])
        ORACLE_STATS["strict instances walked on libllama's masks, verdict jsonschema's"] += 1
    src.finish()
