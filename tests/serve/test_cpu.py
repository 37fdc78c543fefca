"""bankml.serve.cpu: the AMX check before a model is loaded, the refusal of AMX to ggml, llama.cpp's thread default.

The machines differ (AMD EPYC without AMX; Intel Xeon guests whose AMX tiles fault), so every test here holds on
both: the probe's fault path is driven by running the tiles without the permission (SIGILL on every CPU), and
the refusal is installed in child processes only, then checked there (and in a grandchild, which inherits it).
"""

import json
import os
import pathlib
import signal
import subprocess
import sys
import textwrap

import pytest

from bankml.serve import _cpu
from bankml.serve.cpu import AmxPolicy, _decide, cpu_flags, default_threads

from ..oracle_support import smollm2_path

REPO = pathlib.Path(__file__).resolve().parent.parents[1]


def _child(code, env=None, timeout=120):
    full_env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=full_env, timeout=timeout
    )


class FakeLlamaCpp:
    def __init__(self, info):
        self.info = info

    def llama_print_system_info(self):
        return self.info


AMX_FLAGS = frozenset({"avx512f", "avx512_vnni", "amx_tile", "amx_int8", "amx_bf16"})
WITH_AMX = FakeLlamaCpp(b"CPU : SSE3 = 1 | AVX512 = 1 | AMX_INT8 = 1 | REPACK = 1 |")
WITHOUT_AMX = FakeLlamaCpp(b"CPU : SSE3 = 1 | AVX2 = 1 | REPACK = 1 |")


def test_the_probe_catches_a_faulting_tile_instruction():
    # without the XTILEDATA permission every CPU faults on tilezero: AMX ones by the kernel's XFD, others #UD
    assert _cpu.amx_probe(ask_permission=False) == _cpu.PROBE_SIGNAL + signal.SIGILL


def test_the_probe_answers_on_this_machine():
    rc = _cpu.amx_probe()
    if "amx_tile" in cpu_flags():
        assert rc in (_cpu.PROBE_WORKS, _cpu.PROBE_NO_PERMISSION, _cpu.PROBE_WRONG_RESULT) or rc >= _cpu.PROBE_SIGNAL
    else:
        # the kernel refuses the permission on a CPU without AMX: the tiles are never run
        assert rc == _cpu.PROBE_NO_PERMISSION


def test_no_amx_changes_nothing():
    assert _decide(WITH_AMX, frozenset({"avx2", "fma"})).state == AmxPolicy.ABSENT
    policy = _decide(WITHOUT_AMX, AMX_FLAGS)
    assert policy.state == AmxPolicy.NOT_BUILT and policy.use_extra_bufts and policy.note is None


def test_working_or_refused_tiles_change_nothing():
    works = _decide(WITH_AMX, AMX_FLAGS, probe_fn=lambda: _cpu.PROBE_WORKS)
    assert works.state == AmxPolicy.WORKS and works.use_extra_bufts and works.note is None
    refused = _decide(WITH_AMX, AMX_FLAGS, probe_fn=lambda: _cpu.PROBE_NO_PERMISSION)
    assert refused.state == AmxPolicy.REFUSED_BY_KERNEL and refused.use_extra_bufts and refused.note is None


def test_faulting_tiles_turn_amx_off_in_the_process_and_its_children():
    out = _child("""
        import json, signal, subprocess, sys
        from bankml.serve import _cpu
        from bankml.serve.cpu import _decide, AmxPolicy
        flags = frozenset({"amx_tile", "amx_int8"})
        class L:
            def llama_print_system_info(self):
                return b"AMX_INT8 = 1"
        policy = _decide(L(), flags, probe_fn=lambda: _cpu.PROBE_SIGNAL + signal.SIGILL)
        grandchild = subprocess.run([sys.executable, "-c",
                                     "from bankml.serve import _cpu; print(_cpu.amx_request_refused())"],
                                    capture_output=True, text=True).stdout.strip()
        print(json.dumps({"state": policy.state, "extra": policy.use_extra_bufts, "note": policy.note,
                          "refused": _cpu.amx_request_refused(), "grandchild": grandchild}))
    """)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["state"] == AmxPolicy.TURNED_OFF
    assert got["extra"] is True  # the repack kernels stay: only AMX is refused
    assert got["refused"] is True and got["grandchild"] == "True"
    assert "fault" in got["note"] and "signal 4" in got["note"] and "BANKML_AMX=on" in got["note"]


def test_when_amx_cannot_be_refused_the_extra_buffer_types_go():
    import errno

    policy = _decide(
        WITH_AMX, AMX_FLAGS, probe_fn=lambda: _cpu.PROBE_SIGNAL + signal.SIGILL, refuse_fn=lambda: errno.ENOSYS
    )
    assert policy.state == AmxPolicy.NO_EXTRA_BUFFERS and not policy.use_extra_bufts
    assert "--no-repack" in policy.note


def test_bankml_amx_values():
    env = dict(os.environ)
    try:
        os.environ["BANKML_AMX"] = "on"
        assert _decide(WITH_AMX, AMX_FLAGS, probe_fn=lambda: pytest.fail("probed")).state == AmxPolicy.TRUSTED
        os.environ["BANKML_AMX"] = "sometimes"
        with pytest.raises(ValueError, match="BANKML_AMX must be auto, on or off"):
            _decide(WITH_AMX, AMX_FLAGS)
    finally:
        os.environ.clear()
        os.environ.update(env)


def test_default_threads_is_one_per_physical_core():
    n = default_threads()
    assert 1 <= n <= len(os.sched_getaffinity(0))


def test_the_main_job_with_amx_refused_gives_the_same_answer():
    """BANKML_AMX=off takes the fallback path on any CPU (the refusal, and its note once on stderr); the
    answer is the one of the normal path, token for token (a seeded JSON-mode answer)."""
    args = [
        sys.executable,
        "-m",
        "bankml",
        "generate",
        "-t",
        "1",
        "--json",
        "--seed",
        "42",
        "-n",
        "48",
        "Describe a cat as a JSON object with its name and age.",
    ]
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    normal = subprocess.run(args, capture_output=True, text=True, env=env, timeout=300)
    refused = subprocess.run(args, capture_output=True, text=True, env=dict(env, BANKML_AMX="off"), timeout=300)
    assert normal.returncode == 0, normal.stderr
    assert refused.returncode == 0, refused.stderr
    assert refused.stdout == normal.stdout and refused.stdout.strip()
    assert refused.stderr.count("bankml: BANKML_AMX=off; ggml's AMX kernels are off") == 1


def test_no_repack_keeps_the_default_model_s_logits():
    """SmolLM2-135M-Instruct is Q4_1, which ggml repacks on no x86 CPU: without the extra buffer types
    (llama-server's --no-repack, bankml's last fallback) its logits are the same, bit for bit."""
    import numpy as np

    from bankml.serve.runtime import Model

    prompt = "<|im_start|>user\nName three colors and describe each of them in a sentence.<|im_end|>\n" * 3
    logits = []
    for no_repack in (False, True):
        model = Model(smollm2_path(), n_ctx=512, n_threads=1, no_repack=no_repack)
        try:
            assert model.use_extra_bufts is (not no_repack and model.amx.use_extra_bufts)
            slot = model.acquire()
            try:
                slot.clear()
                logits.append(np.array(slot.decode(model.tokenize(prompt))))
            finally:
                model.release(slot)
        finally:
            model.close()
    assert np.array_equal(logits[0], logits[1])
