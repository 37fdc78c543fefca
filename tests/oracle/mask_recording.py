"""libllama's whole-vocabulary masks for the oracle walks: computed live, or replayed from a recording.

The walks of ``tests/engine/test_grammar_oracle.py``, ``test_matcher_oracle.py`` and
``tests/schema/test_strict_oracle.py`` compare every bankml mask with the mask of the pinned llama.cpp's grammar
sampler (``llama_sampler_apply`` over the whole vocabulary).
That call is the walks' main cost: tens of milliseconds on a 150k-token vocabulary, thousands of times. Its
answers depend only on the grammar, the vocabulary and the tokens accepted, so they are recorded once per
case as ``(count, FNV-1a hash)`` digests, in the order the walk asks for them:

- **live**: the SmolLM2 vocabulary's cases (``LIVE_VOCABS``; a module may name its own live cases instead,
  ``Recording.source(..., live=)``), every case with ``BANKML_ORACLE_LIVE=1``, and any case the recording does
  not hold. libllama computes every mask.
- **replayed**: the other cases. libllama still builds, accepts and clones every grammar of the walk (so a
  token it refuses still fails the walk); only the mask's digest comes from the recording. Where bankml's
  mask differs from the recorded one, libllama computes that mask live: the failure then shows the tokens only
  one side allows, or says that the recording is stale (libllama agrees with bankml).

A recording names the inputs it was made from (``fingerprint``: the walks, grammars, schemas, the two
vocabulary files, the oracle driver and the test modules' source); a different fingerprint fails the test
rather than replaying answers to other questions. ``python -m tests.oracle.mask_recording`` records the three
modules again (every case live, two workers: about five minutes on a quiet machine); ``python -m
tests.oracle.mask_recording tests/schema/test_strict_oracle.py`` records one of them.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import pathlib
import subprocess
import sys

from bankml import mask_hash

from ..oracle_support import DATA, ORACLE_CONDITIONS, ORACLE_LIVE, ORACLE_STATS

ROOT = DATA.parent.parent
LIVE_VOCABS = ("smollm2",)
RECORD = os.environ.get("BANKML_ORACLE_RECORD", "") not in ("", "0")
ALL_LIVE = RECORD or ORACLE_LIVE
# the ORACLE_STATS names a MaskSource counts its masks under: (computed live, replayed from the recording)
SOURCE_COUNTS = ("libllama masks computed live", "libllama masks replayed from the recording")
# the gate holds the replayed masks to their minimum only where they are replayed (tests/oracle_minimums.json)
ORACLE_CONDITIONS["libllama masks replayed (BANKML_ORACLE_LIVE unset)"] = not ALL_LIVE


def fingerprint(module_file: str, inputs: list[pathlib.Path], settings: dict) -> str:
    """The inputs a module's recording answers for: its own source, its data files and its settings (a file
    outside the repository, such as SmolLM2's GGUF in its package, is named by its file name)."""
    h = hashlib.sha256()
    for path in [pathlib.Path(module_file), *inputs]:
        name = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name
        h.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    h.update(json.dumps(settings, sort_keys=True).encode())
    return h.hexdigest()


class Recording:
    """One test module's recording: ``{case id: [[count, hash0, hash1], ...]}`` under its fingerprint.

    ``counts``: the ORACLE_STATS names its walks count their masks under (computed live, replayed)."""

    def __init__(self, name: str, fingerprint: str, counts: tuple[str, str] = SOURCE_COUNTS):
        self.path = DATA / f"oracle_masks_{name}.json.gz"
        self.fingerprint = fingerprint
        self.counts = counts
        self.cases: dict[str, list] = {}
        self.recorded: dict[str, list] = {}
        self.stale = None
        if not ALL_LIVE and self.path.exists():
            data = json.loads(gzip.decompress(self.path.read_bytes()))
            if data["fingerprint"] == fingerprint:
                self.cases = data["cases"]
            else:
                self.stale = (
                    f"{self.path.name} was recorded for other inputs (fingerprint {data['fingerprint'][:12]}, "
                    f"now {fingerprint[:12]}): record again with python -m tests.oracle.mask_recording"
                )

    def source(self, case_id: str, vocab_name: str, live: bool | None = None) -> MaskSource:
        """libllama's masks along one case's walk. ``live``: whether the case runs live in every run (default:
        whether its vocabulary is among ``LIVE_VOCABS``); it also runs live where the recording lacks it."""
        if self.stale is not None:
            raise AssertionError(self.stale)
        if live is None:
            live = vocab_name in LIVE_VOCABS
        live = ALL_LIVE or live or case_id not in self.cases
        digests: list = [] if live else self.cases[case_id]
        if RECORD:
            self.recorded[case_id] = digests
        return MaskSource(case_id, live, digests, self.counts)

    def write(self) -> None:
        """Write what this run recorded (every case of the module ran live)."""
        payload = {"fingerprint": self.fingerprint, "cases": dict(sorted(self.recorded.items()))}
        text = json.dumps(payload, separators=(",", ":")).encode()
        self.path.write_bytes(gzip.compress(text, mtime=0))


class MaskSource:
    """libllama's mask digests along one walk, in the order the walk asks for them."""

    def __init__(self, case_id: str, live: bool, digests: list, counts: tuple[str, str] = SOURCE_COUNTS):
        self.case_id = case_id
        self.live = live
        self.digests = digests
        self.counts = counts
        self.at = 0

    def digest(self, theirs) -> tuple[int, int, int]:
        """``(count, hash0, hash1)`` of libllama's mask now (``theirs``: its grammar at this point of the walk)."""
        if self.live:
            ids = theirs.allowed_ids()
            got = (int(ids.size), *mask_hash(ids))
            self.digests.append(list(got))
            ORACLE_STATS[self.counts[0]] += 1
            return got
        if self.at >= len(self.digests):
            raise AssertionError(
                f"{self.case_id}: the walk asks for more masks than recorded ({len(self.digests)}): "
                "record again with python -m tests.oracle.mask_recording"
            )
        got = tuple(self.digests[self.at])
        self.at += 1
        ORACLE_STATS[self.counts[1]] += 1
        return got  # type: ignore[return-value]

    def finish(self) -> None:
        """A replayed walk must have asked for every recorded mask (otherwise it walked elsewhere)."""
        if not self.live and self.at != len(self.digests):
            raise AssertionError(
                f"{self.case_id}: the walk asked for {self.at} masks, the recording holds {len(self.digests)}: "
                "record again with python -m tests.oracle.mask_recording"
            )


MODULES = (
    "tests/engine/test_grammar_oracle.py",
    "tests/engine/test_matcher_oracle.py",
    "tests/schema/test_strict_oracle.py",
)


def main(argv: list[str]) -> int:
    """Record the modules' masks again (those named in ``argv``, default all of ``MODULES``): every case live, each
    module on one worker, which writes its file."""
    modules = argv or list(MODULES)
    unknown = sorted(set(modules) - set(MODULES))
    if unknown:
        print(f"not a recorded module: {', '.join(unknown)} (these are: {', '.join(MODULES)})", file=sys.stderr)
        return 2
    env = dict(os.environ, BANKML_ORACLE_RECORD="1")
    workers = str(min(2, len(modules)))
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        *modules,
        "-q",
        "-p",
        "no:cacheprovider",
        "-n",
        workers,
        "--dist",
        "loadfile",
    ]
    return subprocess.run(cmd, cwd=ROOT, env=env).returncode


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
