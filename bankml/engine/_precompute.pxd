# Declarations of the build ahead of use (_precompute.pxi): the analyses of the rules the segment cache is
# built from (nullability, llama.cpp's repetition chains and their canonical positions). The plan and the
# background thread are Python-level functions of the extension and need no declaration. Owns no ids.
# Included by _grammar.pxd (textually, as uvloop's loop.pxd includes its handles' .pxd files): these
# declarations belong to the _grammar extension, not to a module of their own, and nothing cimports them
# by name.
from libc.stdint cimport int32_t, uint8_t
from libcpp.vector cimport vector

from bankml.engine._rules cimport Rules
from bankml.engine._zeroarray cimport zero_array


cdef vector[uint8_t] _nullable_rules(Rules rules)
cdef int _repetition_chains_into(Rules rules, const vector[uint8_t]& nullable, vector[int32_t]& chain_depth,
                                  vector[int32_t]& chain_next) except -1
cdef vector[uint8_t] _chain_inner(const vector[int32_t]& chain_next) except *
cdef int _repetition_canonical_into(Rules rules, const vector[int32_t]& chain_depth,
                                    const vector[int32_t]& chain_next, int32_t limit,
                                    zero_array[int32_t]& shift) except -1
