# A growable array of trivially copyable values that grows by realloc (_podvec.h): a big one grows
# without being copied into fresh pages. The parser's arrays and the Rules they become.
cdef extern from "_podvec.h" namespace "bankml" nogil:
    cdef cppclass pod_vector[T]:
        pod_vector()
        size_t size()
        size_t capacity()
        bint empty()
        T* data()
        T& operator[](size_t)
        T& back()
        void reserve(size_t) except +
        void push_back(const T&) except +
        void append(const T*, const T*) except +
        void resize(size_t, const T&) except +
        void clear()
        void swap(pod_vector[T]&)
