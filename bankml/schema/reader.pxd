# Declarations that compile reader.py (plain Python, unchanged by this file): the classes below become cdef classes
# with typed attributes, their methods cpdef (still callable from Python); converter.py cimports them.

from bankml.schema.limits cimport _Meter

cdef class _Node:
    cdef public int kind
    cdef public object path, ref, target, children, value, values, minimum, maximum, pattern, format
    cdef public object min_length, max_length, items, min_items, max_items, properties, additional


cdef class _Builder:
    cdef public object root
    cdef public dict refs
    cdef public list pending
    cdef public _Meter meter
    cdef public Py_ssize_t depth
    cpdef build(self)
    cpdef resolve_ref(self, ref, path)
    cpdef build_ref(self, value, path)
    cpdef build_alternatives(self, kind, alts, path)
    cpdef build_object(self, dict schema, path)
    cpdef build_array(self, dict schema, path)
    cpdef build_string(self, dict schema, path)
    cpdef build_integer(self, dict schema, path)
    cpdef build_node(self, schema, str path)


cpdef _wrap64(v)
cpdef _wrap32(v)
