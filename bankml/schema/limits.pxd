# Declarations that compile limits.py (plain Python, unchanged by this file): _Meter becomes a cdef class with
# typed attributes and cpdef methods, which jsontext, reader and converter call at C level (cimport).

cdef class _Meter:
    cdef public object limits
    cdef public Py_ssize_t max_nodes, max_grammar_bytes, max_work_bytes
    cdef public Py_ssize_t nodes, grammar_bytes, work_bytes, ticks
    cdef public object deadline, cancel
    cpdef node(self, pointer)
    cpdef work(self, Py_ssize_t n, pointer)
    cpdef output(self, Py_ssize_t n, pointer)
    cpdef clock(self, pointer)
