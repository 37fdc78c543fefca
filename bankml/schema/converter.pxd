# Declarations that compile schema.py (plain Python, unchanged by this file) with C-level classes and calls:
# the classes below become cdef classes with typed attributes, the functions cpdef (still callable from
# Python). Methods with closures stay plain `def` methods (Cython cannot make those cpdef).

cimport cython

cdef class _Meter:
    cdef public object limits
    cdef public Py_ssize_t max_nodes, max_grammar_bytes, max_work_bytes
    cdef public Py_ssize_t nodes, grammar_bytes, work_bytes, ticks
    cdef public object deadline, cancel
    cpdef node(self, pointer)
    cpdef work(self, Py_ssize_t n, pointer)
    cpdef output(self, Py_ssize_t n, pointer)
    cpdef clock(self, pointer)


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
cpdef _wrap64(v)
cpdef _wrap32(v)
cpdef str _b(s)
cpdef str _t(s)
cpdef _dump(v)
cpdef _build_repetition(str item_rule, min_items, max_items, str separator_rule=*)
cpdef str _format_literal(str literal)
cpdef str _generate_constant_rule(value)
cpdef _check_tree(value, Py_ssize_t depth=*, _Meter meter=*)
