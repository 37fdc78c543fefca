"""Seeded run records: record a constrained run, replay it step for step, find a tampered step."""

import json

import numpy as np
import pytest

from bankml import Grammar, Rules, Sampler, SamplerParams
from bankml.cli import main
from bankml.sampling.replay import RunRecorder, read_record, replay

from ..oracle_support import DATA, load_bankml_vocab

GRAMMAR = (DATA / "grammars" / "json.gbnf").read_text(encoding="utf-8")
VOCAB_PATH = DATA / "ggml-vocab-qwen2.gguf"


def record_run(tmp_path, steps=12, seed=11):
    vocab = load_bankml_vocab("qwen2")
    params = SamplerParams(seed=seed, temperature=0.9, top_k=50, top_p=0.9, repeat_penalty=1.1)
    sampler = Sampler(params, vocab, Grammar(Rules.parse(GRAMMAR, vocab=vocab), vocab))
    rng = np.random.default_rng(seed)
    path = tmp_path / "run.jsonl"
    tokens = []
    with RunRecorder(path, params, vocab_path=VOCAB_PATH, grammar=GRAMMAR) as recorder:
        for _ in range(steps):
            logits = rng.normal(0.0, 3.0, len(vocab)).astype(np.float32)
            token = sampler.sample(logits)
            recorder.record(logits, token)
            sampler.accept(token)
            tokens.append(token)
    return path, tokens


def test_replay_matches_every_step(tmp_path):
    path, tokens = record_run(tmp_path)
    header, recorded, logits = read_record(path)
    assert recorded == tokens and logits.shape == (len(tokens), 151936)
    result = replay(path, vocab=load_bankml_vocab("qwen2"))
    assert result.matches and result.steps == len(tokens), str(result)


def test_replay_reports_first_divergent_step(tmp_path):
    path, tokens = record_run(tmp_path)
    lines = path.read_text(encoding="utf-8").splitlines()
    step = 5
    line = json.loads(lines[1 + step])
    line["token"] = (tokens[step] + 1) % 151936
    lines[1 + step] = json.dumps(line)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = replay(path, vocab=load_bankml_vocab("qwen2"))
    assert not result.matches
    assert result.divergence == step and result.replayed == tokens[step]
    assert main(["replay", str(path), "--vocab", str(VOCAB_PATH)]) == 1


def test_replay_cli_all_match(tmp_path, capsys):
    path, tokens = record_run(tmp_path, steps=4)
    assert main(["replay", str(path)]) == 0
    assert f"all {len(tokens)} steps match" in capsys.readouterr().out


def test_bad_records_say_what_is_wrong(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("", encoding="utf-8")
    with pytest.raises(ValueError, match="empty run record"):
        read_record(empty)
    other = tmp_path / "other.jsonl"
    other.write_text('{"format": "something else"}\n', encoding="utf-8")
    with pytest.raises(ValueError, match="not a bankml-run record"):
        read_record(other)
    assert main(["replay", str(other)]) == 2
