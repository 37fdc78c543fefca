"""The C stack left to the calling thread, for the compiled schema modules that recurse, and a thread with a stack
of its own size for a recursion that needs more room than its caller's.

The strict compiler's modules (``bankml.schema.strict``) are compiled by Cython as they are (plain Python).
Compiled, their recursion (a schema's nesting, a ``$ref`` chain, a ``const`` value's nesting, an excluded key's
length, a pattern's groups) runs on the C stack, which Python's recursion limit does not bound: a deep enough
schema would crash the process. Each recursive function of theirs calls ``check_stack()`` first. It raises
``_TooDeep`` (``bankml.schema.limits``) when less than ``STACK_MARGIN`` bytes of the thread's stack are left; the
strict compiler then redoes the conversion from the start in a thread of its own with a large stack
(``run_with_stack``), where ``_TooDeep`` again is a refusal (a SchemaError), and the pattern builder refuses the
pattern as nesting too deeply. No process-wide setting changes: the thread's stack size is its own
(``pthread_attr_setstacksize``), not ``threading.stack_size``'s.

The stack's low end is asked of the thread library once per thread (``pthread_getattr_np``, Linux); elsewhere, or
if it cannot say, the thread is granted 1 MB below the first call's frame.
"""

from libc.stdint cimport uintptr_t

from bankml.schema.limits import _TooDeep

cdef extern from *:
    """
    #include <stdint.h>
    #include <pthread.h>
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

    /* the thread of bankml_run_with_stack: it takes the GIL (a thread state of its own) and calls the callable,
       which records its own outcome */
    static void *bankml_thread_main(void *call) {
        PyGILState_STATE gil = PyGILState_Ensure();
        PyObject *got = PyObject_CallNoArgs((PyObject *)call);
        if (got == NULL)
            PyErr_WriteUnraisable((PyObject *)call);
        Py_XDECREF(got);
        PyGILState_Release(gil);
        return NULL;
    }

    /* call() in a new thread of stack_bytes of stack; the caller waits for it without the GIL. 0, or the error
       number of the thread library (the thread did not start) */
    static int bankml_run_with_stack(PyObject *call, size_t stack_bytes) {
        pthread_attr_t attr;
        pthread_t thread;
        int rc = pthread_attr_init(&attr);
        if (rc != 0)
            return rc;
        rc = pthread_attr_setstacksize(&attr, stack_bytes);
        if (rc == 0)
            rc = pthread_create(&thread, &attr, bankml_thread_main, call);
        pthread_attr_destroy(&attr);
        if (rc != 0)
            return rc;
        Py_BEGIN_ALLOW_THREADS
        pthread_join(thread, NULL);
        Py_END_ALLOW_THREADS
        return 0;
    }
    """
    uintptr_t bankml_stack_left()
    int bankml_run_with_stack(object call, size_t stack_bytes)

# what a recursive function's callees may still use before the next check: dozens of compiled frames (1-4 KB
# each) and the C library calls between them
STACK_MARGIN = 256 * 1024


def check_stack():
    """Raise ``_TooDeep`` when less than STACK_MARGIN bytes of this thread's C stack are left."""
    if bankml_stack_left() < STACK_MARGIN:
        raise _TooDeep()


def run_with_stack(fn, size_t stack_bytes):
    """``fn()`` in a new thread whose C stack is ``stack_bytes`` bytes, the caller waiting: its result, or the
    exception it raised (raised here). OSError when the thread cannot start."""
    outcome = []

    def call():
        try:
            outcome.append((True, fn()))
        except BaseException as e:  # handed to the caller
            outcome.append((False, e))

    rc = bankml_run_with_stack(call, stack_bytes)
    if rc != 0:
        raise OSError(rc, "a thread of %d bytes of stack could not start" % stack_bytes)
    ok, value = outcome.pop()
    if ok:
        return value
    raise value
