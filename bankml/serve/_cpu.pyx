"""AMX tiles: whether they execute here (a forked child runs them), and refusing them to ggml.

Only ``bankml.serve.cpu`` calls these; see its docstring for the policy.
"""

PROBE_WORKS = BANKML_PROBE_WORKS
PROBE_NO_PERMISSION = BANKML_PROBE_NO_PERMISSION
PROBE_WRONG_RESULT = BANKML_PROBE_WRONG_RESULT
PROBE_UNSUPPORTED = BANKML_PROBE_UNSUPPORTED
PROBE_FORK_FAILED = BANKML_PROBE_FORK_FAILED
PROBE_SIGNAL = BANKML_PROBE_SIGNAL


def amx_probe(bint ask_permission=True):
    """How a forked child that runs AMX tile instructions ended: PROBE_WORKS, PROBE_NO_PERMISSION (the kernel
    refuses XTILEDATA: ggml then disables AMX itself), PROBE_WRONG_RESULT, PROBE_SIGNAL + signal number,
    PROBE_FORK_FAILED or PROBE_UNSUPPORTED (not Linux on x86-64). Never run it on a CPU without AMX: there the
    child dies of SIGILL by design, which says nothing. ``ask_permission=False`` (tests) runs the tiles without
    the permission: the child then dies of SIGILL on every CPU."""
    cdef int rc
    with nogil:
        rc = bankml_amx_probe(ask_permission)
    return rc


def amx_permission_held():
    """Whether this process already holds the XTILEDATA permission."""
    return bool(bankml_amx_permission_held())


def refuse_amx_permission():
    """Install the seccomp filter that makes ARCH_REQ_XCOMP_PERM fail with EPERM (this process, all its threads
    and its children); 0 or the errno of the failure."""
    return bankml_refuse_amx_permission()


def amx_request_refused():
    """Whether ARCH_REQ_XCOMP_PERM fails with EPERM in this process now."""
    return bool(bankml_amx_request_refused())
