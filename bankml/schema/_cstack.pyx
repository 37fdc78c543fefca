"""The C stack left to the calling thread, for the compiled schema modules that recurse.

``strict.py`` and ``strict_lang.py`` are compiled by Cython as they are (plain Python). Compiled, their recursion
(a schema's nesting, a ``$ref`` chain, a ``const`` value's nesting, an excluded key's length, a pattern's groups)
runs on the C stack, which Python's recursion limit does not bound: a deep enough schema would crash the process.
Each recursive function of theirs calls ``check_stack()`` first. It raises ``_TooDeep`` (``bankml.schema.limits``)
when less than ``STACK_MARGIN`` bytes of the thread's stack are left; the compiled strict compiler then redoes the
conversion from the start as plain Python, where deep recursion ends in RecursionError (a SchemaError), and the
pattern builder refuses the pattern as nesting too deeply, as it does on RecursionError.

The stack's low end is asked of the thread library once per thread (``pthread_getattr_np``, Linux); elsewhere, or
if it cannot say, the thread is granted 1 MB below the first call's frame.
"""

from libc.stdint cimport uintptr_t

from bankml.schema.limits import _TooDeep

cdef extern from *:
    """
    #include <stdint.h>
    #if defined(__linux__)
    #include <pthread.h>
    #endif
    static __thread uintptr_t bankml_stack_low = 0;

    static uintptr_t bankml_stack_left(void) {
        uintptr_t here = (uintptr_t)__builtin_frame_address(0);
        if (bankml_stack_low == 0) {
    #if defined(__linux__)
            pthread_attr_t attr;
            void *addr = 0;
            size_t size = 0;
            if (pthread_getattr_np(pthread_self(), &attr) == 0) {
                if (pthread_attr_getstack(&attr, &addr, &size) == 0)
                    bankml_stack_low = (uintptr_t)addr;
                pthread_attr_destroy(&attr);
            }
    #endif
            if (bankml_stack_low == 0 || bankml_stack_low >= here)
                bankml_stack_low = here > ((uintptr_t)1 << 20) ? here - ((uintptr_t)1 << 20) : 1;
        }
        return here > bankml_stack_low ? here - bankml_stack_low : 0;
    }
    """
    uintptr_t bankml_stack_left()

# what a recursive function's callees may still use before the next check: dozens of compiled frames (1-4 KB
# each) and the C library calls between them
STACK_MARGIN = 256 * 1024


def check_stack():
    """Raise ``_TooDeep`` when less than STACK_MARGIN bytes of this thread's C stack are left."""
    if bankml_stack_left() < STACK_MARGIN:
        raise _TooDeep()
