# Declarations of the matcher's rollback history (_rollback.pxi): a ring of the states before its last
# `capacity` accepted steps, and the transaction accept_tokens / validate_tokens run in. Owns ring slots.
# Included by _grammar.pxd (textually, as uvloop's loop.pxd includes its handles' .pxd files): these
# declarations belong to the _grammar extension, not to a module of their own, and nothing cimports them
# by name.
from libc.stdint cimport uint8_t
from libcpp.vector cimport vector
cimport cython

from bankml.engine._typedefs cimport node_t
from bankml.engine._utf8 cimport partial_utf8


# history flags: what a rolled-back state had besides its stacks and partial character
cdef enum:
    HISTORY_AWAITING = 1        # the lazy grammar was waiting for its trigger
    HISTORY_EOG = 2             # an end-of-generation token had been accepted


# ring slots: the states before a matcher's last `capacity` accepted steps
@cython.final
cdef class RollbackRing:
    cdef readonly int capacity
    cdef int head, count                           # slot head is written next; count entries are kept
    cdef vector[vector[node_t]] stacks
    cdef vector[partial_utf8] partial
    cdef vector[uint8_t] flags                     # HISTORY_* bits
    cdef list trigger                              # per slot, lazy matchers only: LazyTrigger.state()
    # a transaction (accept_tokens / validate_tokens): where it started and the entries it overwrote
    cdef bint in_transaction
    cdef int start_head, start_count
    cdef vector[int] saved_slots
    cdef vector[vector[node_t]] saved_stacks
    cdef vector[partial_utf8] saved_partial
    cdef vector[uint8_t] saved_flags
    cdef list saved_trigger

    cdef int push(self, vector[node_t]& stacks, partial_utf8 partial, uint8_t flags, object trigger) except -1
    cdef object take(self, int n, vector[node_t]& stacks, partial_utf8* partial, uint8_t* flags)
    cdef void begin(self)
    cdef void end(self, bint undo)
    cdef void clear(self)
    cdef RollbackRing copy(self)
