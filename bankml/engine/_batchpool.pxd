# The worker pool of the batch mask fill (_batchpool.h): rows handed to the calling thread and pool
# threads from a shared counter, all without the GIL. _batch.pxi starts the threads and fills the rows.
from libc.stdint cimport int64_t

cdef extern from "_batchpool.h" namespace "bankml" nogil:
    ctypedef void (*batch_task)(void* job, int64_t item) noexcept nogil

    cdef cppclass batch_pool:
        batch_pool()
        void run(batch_task task, void* job, int64_t n_items, int helpers)
        void work(int index)
        void stop()
