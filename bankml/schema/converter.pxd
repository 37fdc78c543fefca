# Declarations that compile converter.py (plain Python, unchanged by this file) with C-level classes and calls:
# _Converter becomes a cdef class with typed attributes, the functions cpdef (still callable from Python).
# Methods with closures stay plain `def` methods (Cython cannot make those cpdef). The meter and the nodes are
# limits.pxd's and reader.pxd's types, called at C level.

cimport cython

from bankml.schema.limits cimport _Meter
from bankml.schema.reader cimport _Node


cdef class _Converter:
    cdef public object dotall
    cdef public dict rules
    cdef public set refs_being_resolved
    cdef public list errors, warnings
    cdef public object error_pointer
    cdef public _Meter meter
    cdef public object pointer
    cdef public Py_ssize_t depth
    cpdef str add_rule(self, str name, str rule)
    cpdef _error(self, message, pointer)
    cpdef visit_pattern(self, pattern, name, _Node node)
    cpdef resolve_ref(self, _Node node)
    cpdef str build_object_rule(self, list properties, set required, str name, additional)
    cpdef add_primitive(self, name, rule)
    cpdef visit_primitive(self, rule_name, typ)
    cpdef str visit(self, _Node node, str name)
    cpdef format_grammar(self)


@cython.locals(c=Py_UCS4)
cpdef str _escape_rule_name(str name)
cpdef str _b(s)
cpdef str _t(s)
cpdef _build_repetition(str item_rule, min_items, max_items, str separator_rule=*)
cpdef str _format_literal(str literal)
cpdef str _generate_constant_rule(value)
