# A fixed-size array that starts all zero without being written (_zeroarray.h: calloc's, so fresh
# memory is faulted in only where it is used): the engine's per-element arrays filled on first use.
cdef extern from "_zeroarray.h" namespace "bankml" nogil:
    cdef cppclass zero_array[T]:
        zero_array()
        void assign_zeros(size_t) except +
        T& operator[](size_t)
        T* data()
        size_t size()
