# The AMX probe and the AMX refusal (C in _cpu_probe.h); the policy lives in cpu.py.

cdef extern from "_cpu_probe.h" nogil:
    int BANKML_PROBE_WORKS
    int BANKML_PROBE_NO_PERMISSION
    int BANKML_PROBE_WRONG_RESULT
    int BANKML_PROBE_UNSUPPORTED
    int BANKML_PROBE_FORK_FAILED
    int BANKML_PROBE_SIGNAL
    int bankml_amx_probe(int ask_permission)
    int bankml_amx_permission_held()
    int bankml_refuse_amx_permission()
    int bankml_amx_request_refused()
