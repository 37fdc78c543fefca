# Declarations that compile jsontext.py (plain Python, unchanged by this file): its hot functions become cpdef
# (still callable from Python; converter.py calls _dump at C level through cimport).

from bankml.schema.limits cimport _Meter

cpdef _dump(v)
cpdef _check_tree(value, Py_ssize_t depth=*, _Meter meter=*)
