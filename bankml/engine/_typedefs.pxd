# The fixed-width types shared by bankml's Cython modules, and the NumPy dtype
# each must match when it crosses into Python.
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t

ctypedef uint32_t element_value_t   # an element's value: code point, rule id or token id   (np.uint32)
ctypedef int32_t token_t            # a token id                                            (np.int32)
ctypedef int32_t position_t         # an index into Rules' flat element array               (np.int32)
ctypedef int32_t node_t             # an index into a matcher's stack-node pool             (np.int32)
ctypedef int64_t offset_t           # an offset into a flat per-vocabulary buffer           (np.int64)
