# The hash map of the engine's memo tables (_flatmap.h): std::unordered_map's find / end / operator[] /
# count / size / clear / reserve over flat arrays that grow a few slots per insert (no rehash lands on one
# mask). An insert may move entries, so no reference or iterator into a map is held across operator[],
# reserve or clear on it.
from libcpp.utility cimport pair


cdef extern from "_flatmap.h" namespace "bankml" nogil:
    cdef cppclass flat_map[K, V]:
        cppclass iterator:
            pair[K, V]& operator*()
            bint operator==(iterator)
            bint operator!=(iterator)
        flat_map()
        iterator find(const K&)
        iterator end()
        V& operator[](const K&)
        size_t count(const K&)
        size_t size()
        void clear()
        void reserve(size_t)
