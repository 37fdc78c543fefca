"""Step and grammar timers for bench/vllm_throughput.py, inside vLLM's engine core and worker processes.

vLLM on CPU runs the engine core and its worker in processes started with ``spawn`` (vllm/platforms/cpu.py
sets ``VLLM_WORKER_MULTIPROC_METHOD=spawn``), so wrappers installed in the bench's own process never reach
them. vLLM loads its ``vllm.general_plugins`` entry points in every process it starts (EngineCore.__init__,
WorkerBase.init_worker), before the scheduler, model runner and logits processors exist: ``plugin_path``
writes a distribution whose only entry point is ``install`` into a temporary directory, the bench puts that
directory on ``sys.path`` (which spawned children inherit), and ``install`` wraps, in each process:

* ``EngineCore.step``: the step's wall time (schedule, forward pass and sampling on the worker, update);
* ``BankmlLogitsProcessor.apply`` and ``update_state`` (worker);
* ``StructuredOutputManager.grammar_bitmask`` (engine core, while the worker runs the forward pass);
* ``apply_grammar_bitmask`` as the model runner calls it (worker);
* ``XgrammarGrammar`` / ``GuidanceGrammar.accept_tokens`` (the scheduler's update, engine core);
* ``XgrammarBackend`` / ``GuidanceBackend.compile_grammar`` (a thread of the engine core, outside the step).

Each wrapper adds its nanoseconds and one call to two int64 slots of a file mapped shared by every process
(the file named by ``BANKML_BENCH_TIMERS``; nothing is installed without it). A slot has one writing thread,
except the compile slots, written under a lock. Without speculative decoding, as the bench runs: with drafts,
``grammar_bitmask`` calls ``accept_tokens`` itself (and rolls back), which would be counted twice. Outside the
bench nothing imports this module.
"""

import ctypes
import mmap
import os
import pathlib
import tempfile
import threading
import time

ENV = "BANKML_BENCH_TIMERS"
# the grammar code of bankml's logits processor and of vLLM's structured-output backends
BANKML = ("bankml_apply", "bankml_update_state")
BACKEND = ("manager_grammar_bitmask", "apply_grammar_bitmask", "accept_tokens")
GRAMMAR = BANKML + BACKEND
NAMES = GRAMMAR + ("step", "backend_compile")
_SLOTS = 2 * len(NAMES)

_installed = False


def _map(path):
    with open(path, "r+b") as f:
        mapping = mmap.mmap(f.fileno(), 8 * _SLOTS)  # MAP_SHARED: every process sees every write
    return mapping, (ctypes.c_int64 * _SLOTS).from_buffer(mapping)


def _wrap(counts, owner, attribute, name, lock=None):
    inner = getattr(owner, attribute)
    slot = 2 * NAMES.index(name)
    clock = time.perf_counter_ns

    if lock is None:

        def timed(*args, **kwargs):
            start = clock()
            try:
                return inner(*args, **kwargs)
            finally:
                counts[slot] += clock() - start
                counts[slot + 1] += 1

    else:

        def timed(*args, **kwargs):
            start = clock()
            try:
                return inner(*args, **kwargs)
            finally:
                elapsed = clock() - start
                with lock:
                    counts[slot] += elapsed
                    counts[slot + 1] += 1

    timed.__wrapped__ = inner
    setattr(owner, attribute, timed)


def install():
    """vLLM's general-plugin hook: wrap the timed functions of this process, once, if ``BANKML_BENCH_TIMERS``
    names the counters file."""
    global _installed
    path = os.environ.get(ENV)
    if _installed or not path:
        return
    _installed = True
    from vllm.v1.engine.core import EngineCore
    from vllm.v1.structured_output import StructuredOutputManager
    from vllm.v1.structured_output.backend_guidance import GuidanceBackend, GuidanceGrammar
    from vllm.v1.structured_output.backend_xgrammar import XgrammarBackend, XgrammarGrammar
    from vllm.v1.worker import gpu_model_runner

    from bankml.integrations.vllm import BankmlLogitsProcessor

    mapping, counts = _map(path)
    install.mapping = mapping  # kept alive with the process
    _wrap(counts, EngineCore, "step", "step")
    _wrap(counts, BankmlLogitsProcessor, "apply", "bankml_apply")
    _wrap(counts, BankmlLogitsProcessor, "update_state", "bankml_update_state")
    _wrap(counts, StructuredOutputManager, "grammar_bitmask", "manager_grammar_bitmask")
    # the CPU model runner inherits GPUModelRunner.sample_tokens, which calls the name gpu_model_runner imported
    _wrap(counts, gpu_model_runner, "apply_grammar_bitmask", "apply_grammar_bitmask")
    for grammar in (XgrammarGrammar, GuidanceGrammar):
        _wrap(counts, grammar, "accept_tokens", "accept_tokens")
    lock = threading.Lock()
    for backend in (XgrammarBackend, GuidanceBackend):
        _wrap(counts, backend, "compile_grammar", "backend_compile", lock)


def plugin_path():
    """A temporary directory holding a distribution whose ``vllm.general_plugins`` entry point is ``install``
    (this module must be importable in vLLM's processes: bench/ on ``sys.path``, as when the bench runs)."""
    root = pathlib.Path(tempfile.mkdtemp(prefix="bankml-bench-timers-"))
    info = root / "bankml_bench_timers-0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: bankml-bench-timers\nVersion: 0\n")
    (info / "entry_points.txt").write_text(f"[vllm.general_plugins]\nbankml_bench_timers = {__name__}:install\n")
    return str(root)


class Timers:
    """The bench's side: creates the counters file (named in ``BANKML_BENCH_TIMERS`` for the processes vLLM
    starts after this) and reads it."""

    def __init__(self):
        fd, self.path = tempfile.mkstemp(
            prefix="bankml-bench-timers-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None
        )
        os.write(fd, bytes(8 * _SLOTS))
        os.close(fd)
        os.environ[ENV] = self.path
        self._mapping, self._counts = _map(self.path)

    def snapshot(self):
        return list(self._counts)

    def level(self, before, after, counted=GRAMMAR):
        """A level's figures from the snapshots before and after it; the share counts the ``counted`` parts (the
        mode's own grammar: bankml's processor is loaded, idle, in every mode)."""
        delta = {}
        for i, name in enumerate(NAMES):
            delta[name] = (after[2 * i] - before[2 * i], after[2 * i + 1] - before[2 * i + 1])
        step_ns, steps = delta["step"]
        grammar_ns = sum(delta[name][0] for name in counted)
        return {
            "steps": steps,
            "step_s": step_ns / 1e9,
            "grammar_s": grammar_ns / 1e9,
            # null when no step was timed (the plugin did not load in the engine core)
            "grammar_share": grammar_ns / step_ns if step_ns else None,
            "grammar_parts_s": {name: delta[name][0] / 1e9 for name in GRAMMAR if delta[name][1]},
            "backend_compile_s": delta["backend_compile"][0] / 1e9,
        }

    def close(self):
        del self._counts
        self._mapping.close()
        os.unlink(self.path)
