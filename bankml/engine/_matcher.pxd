# Declarations of the matcher (_matcher.pxi): Grammar, one sequence's stacks, partial UTF-8 state, lazy
# trigger state and rollback history over a shared MatchContext.
# Included by _grammar.pxd (textually, as uvloop's loop.pxd includes its handles' .pxd files): these
# declarations belong to the _grammar extension, not to a module of their own, and nothing cimports them
# by name. Named here without a cimport, declared by a .pxd included before this one: MatchContext,
# RollbackRing.
from libcpp.vector cimport vector
from cpython.pythread cimport PyThread_type_lock

from bankml.engine._rules cimport Rules
from bankml.engine._trie cimport DecodedVocab
from bankml.engine._typedefs cimport node_t, token_t
from bankml.engine._utf8 cimport partial_utf8


cdef class Grammar:
    # the matcher's own lock (reentrant: a method may call another), taken around every read or change of
    # its state, before the context's lock and never after it
    cdef PyThread_type_lock state_lock
    cdef unsigned long lock_owner
    cdef int lock_depth
    cdef readonly MatchContext ctx
    cdef readonly Rules rules
    cdef readonly object vocab
    cdef DecodedVocab decoded
    cdef vector[node_t] active_stacks
    cdef partial_utf8 partial
    # lazy grammars (llama_grammar's trigger fields): whether it is one, whether it still waits, and the
    # trigger with the text buffered while waiting (a _triggers.LazyTrigger)
    cdef readonly bint lazy
    cdef readonly bint awaiting_trigger
    cdef object trigger
    # an end-of-generation token was accepted (is_terminated)
    cdef bint eog_accepted
    cdef RollbackRing history

    cdef int enter(self) except -1
    cdef void leave(self) noexcept
    cdef int accept_step(self, token_t token) except -1
    cdef bint try_accept(self, token_t token) except -1
