"""How bankml loads models on this CPU: ggml's AMX kernels where they really run, and the thread count.

Why: some virtual machines (Intel Xeon guests) report AMX (``amx_tile amx_int8 amx_bf16`` in /proc/cpuinfo) and
grant the XTILEDATA permission ggml asks for, yet the first instruction that touches tile data faults. A
llama-cpp-python wheel built natively there has ggml's AMX kernels, which ggml enables for Q4_0/Q4_1/Q8_0/Q4_K/
Q5_K/Q6_K/IQ4_XS weights; the first batched matrix product (a prompt of a few dozen tokens) then dies with
"Illegal instruction", and llama-server with it.

What bankml does, once per process, before it loads a model (``prepare_model_loading``):

- CPU without AMX, or a libggml-cpu built without AMX kernels: nothing. Everything is llama-server's default.
- AMX reported and compiled in: a forked child runs the tile instructions ggml's kernels run (``_cpu.amx_probe``).
  - they work: nothing; ggml uses AMX exactly as llama-server does on this machine;
  - the kernel refuses the permission: nothing; ggml sees that itself and leaves AMX out (as llama-server does);
  - they fault: bankml installs a seccomp filter under which the XTILEDATA request fails with EPERM, in this
    process and the processes it starts. ggml then sees what it sees on a kernel without AMX: it leaves its AMX
    buffer type out and keeps every other kernel, the CPU repack kernels included. The logits are those of
    llama-server on this CPU with AMX unavailable (the only llama-server that runs here: the default one
    crashes). One line on stderr says so.
  - they fault and the filter cannot be installed (no seccomp, or the process already holds the permission):
    models load without ggml's extra buffer types (``use_extra_bufts = False``, llama-server's ``--no-repack``),
    which drops the repack kernels too; one line on stderr says so.

``BANKML_AMX`` overrides the probe: ``off`` refuses AMX without probing, ``on`` trusts the CPU (no probe, no
filter), ``auto`` (default) probes. docs/modules/runtime.md has the measurements behind the choice.
"""

import os
import sys
import threading

from bankml.serve import _cpu

__all__ = ["AmxPolicy", "cpu_flags", "default_threads", "prepare_model_loading"]

_lock = threading.Lock()
_policy = None


class AmxPolicy:
    """The outcome of the check: ``state`` (a word below), ``use_extra_bufts`` for llama_model_params, and the
    ``note`` printed on stderr (None when nothing changes)."""

    # states
    ABSENT = "absent"  # the CPU reports no AMX
    NOT_BUILT = "not built"  # the CPU reports AMX, the loaded libggml-cpu has no AMX kernels
    WORKS = "works"  # the tiles run: ggml's AMX kernels are used, as llama-server uses them
    REFUSED_BY_KERNEL = "refused by the kernel"  # ggml disables AMX itself
    TRUSTED = "trusted"  # BANKML_AMX=on: not probed
    TURNED_OFF = "turned off"  # the tiles fault (or BANKML_AMX=off): the XTILEDATA request is refused
    NO_EXTRA_BUFFERS = "no extra buffer types"  # the tiles fault and the refusal could not be installed

    def __init__(self, state, use_extra_bufts=True, note=None, probe=None):
        self.state = state
        self.use_extra_bufts = use_extra_bufts
        self.note = note
        self.probe = probe

    def __repr__(self):
        return f"AmxPolicy(state={self.state!r}, use_extra_bufts={self.use_extra_bufts})"


def cpu_flags(path="/proc/cpuinfo"):
    """The CPU's feature flags as the kernel reports them (empty where there is no /proc/cpuinfo)."""
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return frozenset()


def default_threads():
    """llama.cpp's default thread count (``cpu_get_num_math``): one per physical core this process may run on.

    Under contention fewer threads decode faster (ggml's threads spin: 22 tokens took 0.80 s with 1 thread and
    3.75 s with 2 at load average 5.7 on 2 cores); give ``--threads`` then. Threads never change the logits.
    """
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = list(range(os.cpu_count() or 1))
    cores = set()
    for cpu in cpus:
        base = f"/sys/devices/system/cpu/cpu{cpu}/topology/"
        try:
            with open(base + "physical_package_id") as f:
                package = f.read().strip()
            with open(base + "core_id") as f:
                core = f.read().strip()
        except OSError:
            return max(1, len(cpus))
        cores.add((package, core))
    return max(1, len(cores))


def _ggml_has_amx(llama_cpp):
    try:
        info = llama_cpp.llama_print_system_info()
    except Exception:  # an older binding: assume the kernels are there, the probe decides
        return True
    if isinstance(info, bytes):
        info = info.decode("utf-8", "replace")
    return "AMX_INT8 = 1" in info


def _decide(llama_cpp, flags, probe_fn=None, refuse_fn=None):
    # probe_fn/refuse_fn replace the child probe and the seccomp refusal in tests
    probe_fn = probe_fn or _cpu.amx_probe
    refuse_fn = refuse_fn or _cpu.refuse_amx_permission

    mode = os.environ.get("BANKML_AMX", "auto").strip().lower() or "auto"
    if mode not in ("auto", "on", "off"):
        raise ValueError(f"BANKML_AMX must be auto, on or off, not {mode!r}")
    if "amx_tile" not in flags and mode != "off":
        return AmxPolicy(AmxPolicy.ABSENT)
    if llama_cpp is not None and not _ggml_has_amx(llama_cpp) and mode != "off":
        return AmxPolicy(AmxPolicy.NOT_BUILT)
    if mode == "on":
        return AmxPolicy(AmxPolicy.TRUSTED)
    if mode == "off":
        probe, why = None, "BANKML_AMX=off"
    else:
        probe = probe_fn()
        if probe == _cpu.PROBE_WORKS:
            return AmxPolicy(AmxPolicy.WORKS, probe=probe)
        if probe == _cpu.PROBE_NO_PERMISSION:
            return AmxPolicy(AmxPolicy.REFUSED_BY_KERNEL, probe=probe)
        if probe >= _cpu.PROBE_SIGNAL:
            why = f"the AMX tile instructions fault on this CPU (a probe child died of signal {probe - _cpu.PROBE_SIGNAL})"
        elif probe == _cpu.PROBE_WRONG_RESULT:
            why = "the AMX tile instructions give wrong results on this CPU (a probe child)"
        else:
            why = f"the AMX tile instructions could not be checked (probe result {probe})"
    if not _cpu.amx_permission_held() and refuse_fn() == 0 and _cpu.amx_request_refused():
        return AmxPolicy(
            AmxPolicy.TURNED_OFF,
            probe=probe,
            note=(
                f"bankml: {why}; ggml's AMX kernels are off for this process (its AMX permission request is refused, "
                "as on a kernel without AMX); every other CPU kernel, weight repacking included, is llama-server's. "
                "Set BANKML_AMX=on to use AMX anyway."
            ),
        )
    return AmxPolicy(
        AmxPolicy.NO_EXTRA_BUFFERS,
        use_extra_bufts=False,
        probe=probe,
        note=(
            f"bankml: {why}, and AMX cannot be refused to ggml in this process; models load without ggml's extra "
            "buffer types (as llama-server --no-repack), which also turns off weight repacking. "
            "Set BANKML_AMX=on to use AMX anyway."
        ),
    )


def prepare_model_loading(llama_cpp=None, *, flags=None):
    """Check AMX once per process (see the module's docstring) and return the AmxPolicy; call it before the
    first model is loaded and before starting a llama.cpp program (llama-server) that should run the same
    kernels. Prints the policy's note once on stderr."""
    global _policy
    with _lock:
        if _policy is None:
            _policy = _decide(llama_cpp, cpu_flags() if flags is None else flags)
            if _policy.note:
                print(_policy.note, file=sys.stderr, flush=True)
        return _policy
