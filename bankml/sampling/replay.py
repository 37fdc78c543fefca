"""Seeded run records and their replay.

A run record is JSON lines: a header (the sampler parameters with the seed, the grammar text and root,
the vocabulary file, the prefill tokens, and the name of an ``.npy`` file holding each step's logits)
followed by one line per sampled step (its token id). ``replay(path)`` builds the same sampler, feeds it
the recorded logits step by step, and reports the first step whose token differs from the record —
or that every step matches. Owns the file format only; sampling is ``bankml.Sampler``'s.
"""

import json
import os

import numpy as np

from bankml.engine._grammar import Grammar, Rules
from bankml.engine.vocab import Vocab
from bankml.sampling._sampler import Sampler
from bankml.sampling.params import SamplerParams

FORMAT = "bankml-run"
VERSION = 1


class RunRecorder:
    """Writes a run record as it happens: ``record(logits, token)`` per step, then ``close()``.

    ``params`` is a SamplerParams; ``vocab_path`` the GGUF file the run used (replay reloads it);
    ``grammar`` GBNF text or None; ``prefill`` the tokens given to the grammar before the first draw.
    With ``save_logits`` the logits of every step go to ``<path>.npy`` (float32, one row per step).
    """

    def __init__(self, path, params, vocab_path=None, grammar=None, root="root", prefill=(), save_logits=True):
        self.path = os.fspath(path)
        self.logits_path = self.path + ".npy" if save_logits else None
        self._rows = []
        self._handle = open(self.path, "w", encoding="utf-8")
        header = {
            "format": FORMAT,
            "version": VERSION,
            "params": {k: list(v) if isinstance(v, tuple) else v for k, v in params.as_dict().items()},
            "vocab": os.fspath(vocab_path) if vocab_path is not None else None,
            "grammar": grammar,
            "root": root,
            "prefill": [int(t) for t in prefill],
            "logits": os.path.basename(self.logits_path) if self.logits_path else None,
        }
        self._handle.write(json.dumps(header) + "\n")

    def record(self, logits, token):
        if self.logits_path is not None:
            self._rows.append(np.array(logits, dtype=np.float32, copy=True))
        self._handle.write(
            json.dumps({"step": len(self._rows) - 1 if self.logits_path else None, "token": int(token)}) + "\n"
        )

    def close(self):
        self._handle.close()
        if self.logits_path is not None:
            np.save(self.logits_path, np.stack(self._rows) if self._rows else np.zeros((0, 0), np.float32))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def read_record(path):
    """(header, tokens, logits or None) of a run record; ValueError saying what is wrong otherwise."""
    path = os.fspath(path)
    with open(path, encoding="utf-8") as handle:
        lines = [line for line in handle if line.strip()]
    if not lines:
        raise ValueError(f"{path}: empty run record")
    try:
        header = json.loads(lines[0])
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}:1: the header is not JSON ({err})") from None
    if header.get("format") != FORMAT or header.get("version") != VERSION:
        raise ValueError(f"{path}:1: not a {FORMAT} record of version {VERSION}")
    tokens = []
    for number, line in enumerate(lines[1:], start=2):
        try:
            tokens.append(int(json.loads(line)["token"]))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            raise ValueError(f"{path}:{number}: expected a step line with an integer 'token'") from None
    logits = None
    if header.get("logits"):
        logits = np.load(os.path.join(os.path.dirname(path), header["logits"]))
        if logits.ndim != 2 or logits.shape[0] != len(tokens):
            raise ValueError(
                f"{path}: {header['logits']} holds {logits.shape[0] if logits.ndim == 2 else '?'} "
                f"rows of logits for {len(tokens)} steps"
            )
    return header, tokens, logits


class ReplayResult:
    def __init__(self, steps, divergence=None, recorded=None, replayed=None):
        self.steps = steps
        self.divergence = divergence
        self.recorded = recorded
        self.replayed = replayed

    @property
    def matches(self):
        return self.divergence is None

    def __str__(self):
        if self.matches:
            return f"all {self.steps} steps match"
        return (
            f"step {self.divergence} diverges: recorded token {self.recorded}, replayed {self.replayed} "
            f"({self.divergence} of {self.steps} steps matched before it)"
        )


def replay(path, vocab=None):
    """Rerun a recorded run's sampler over its recorded logits; the first divergent step, if any."""

    header, tokens, logits = read_record(path)
    if logits is None:
        raise ValueError(f"{path}: the record has no logits to replay (recorded with save_logits=False)")
    if vocab is None:
        if not header.get("vocab"):
            raise ValueError(f"{path}: the record names no vocabulary; pass one")
        vocab = Vocab.from_gguf(header["vocab"])
    params = SamplerParams(**header["params"])
    grammar = None
    if header.get("grammar"):
        grammar = Grammar(Rules.parse(header["grammar"], root=header.get("root", "root"), vocab=vocab), vocab)
    sampler = Sampler(params, vocab, grammar)
    if header.get("prefill"):
        sampler.prefill(header["prefill"])
    for step, recorded in enumerate(tokens):
        replayed = sampler.sample(np.ascontiguousarray(logits[step], dtype=np.float32))
        if replayed != recorded:
            return ReplayResult(len(tokens), step, recorded, replayed)
        sampler.accept(recorded)
    return ReplayResult(len(tokens))
