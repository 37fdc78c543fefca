# Included by _grammar.pyx (one extension, so the hot calls stay within one C translation unit).
# The mask cache: whole-vocabulary masks of stack sets (and of a set with an open UTF-8 character), kept in
# fixed-size chunks drawn from a process-wide pool. Owns mask slots.
# Declarations: _maskcache.pxd (included by _grammar.pxd).

# Mask-cache chunks of contexts that are gone, kept for the next contexts: memory the process has
# already touched, so storing a mask in a new context costs a copy and no page faults (a server
# that builds a grammar per request makes and drops contexts all the time).
cdef vector[vector[uint32_t]] chunk_pool
cdef size_t chunk_pool_words = 0
cdef size_t MAX_CHUNK_POOL_WORDS = (32 << 20) // 4
cdef PyThread_type_lock chunk_pool_lock = PyThread_allocate_lock()
cdef int64_t MASKS_PER_CHUNK = 16
# A slot id is an int64 >= 0; NO_SLOT: no mask kept.
cdef int64_t NO_SLOT = -1


cdef void take_chunk(vector[uint32_t]& chunk, size_t capacity) noexcept nogil:
    """An empty chunk with room for `capacity` words, from the pool when it has one."""
    global chunk_pool_words
    PyThread_acquire_lock(chunk_pool_lock, 1)
    if not chunk_pool.empty():
        chunk.swap(chunk_pool.back())
        chunk_pool_words -= chunk.capacity()
        chunk_pool.pop_back()
    PyThread_release_lock(chunk_pool_lock)
    chunk.clear()
    chunk.reserve(capacity)  # reserved, not touched: no zero-fill


cdef void release_chunks(vector[vector[uint32_t]]& chunks) noexcept nogil:
    """Hand a context's chunks to the pool (as many as it keeps) and empty the list."""
    global chunk_pool_words
    cdef size_t i
    PyThread_acquire_lock(chunk_pool_lock, 1)
    for i in range(chunks.size()):
        if chunk_pool_words + chunks[i].capacity() > MAX_CHUNK_POOL_WORDS:
            break
        chunk_pool_words += chunks[i].capacity()
        chunk_pool.push_back(vector[uint32_t]())
        chunk_pool.back().swap(chunks[i])
    PyThread_release_lock(chunk_pool_lock)
    chunks.clear()


cdef class MaskCache:
    """Cached whole-vocabulary masks (mask slots) of width words each, bounded by MAX_MASK_CACHE_BYTES."""

    def __cinit__(self, int64_t width):
        self.width = width

    def __dealloc__(self):
        release_chunks(self.chunks)

    cdef int64_t slot_of_set(self, int32_t set_id) noexcept nogil:
        it = self.set_slot.find(set_id)
        return deref(it).second if it != self.set_slot.end() else NO_SLOT

    cdef int64_t slot_of_partial(self, uint64_t key) noexcept nogil:
        it = self.partial_slot.find(key)
        return deref(it).second if it != self.partial_slot.end() else NO_SLOT

    cdef void copy_slot(self, int64_t slot, uint32_t* out) noexcept nogil:
        """The mask in a slot into out (width words)."""
        memcpy(out, self.chunks[slot // MASKS_PER_CHUNK].data() + (slot % MASKS_PER_CHUNK) * self.width,
               self.width * sizeof(uint32_t))

    cdef int slot_bit(self, int64_t slot, token_t token) noexcept nogil:
        """One token's bit of the mask in a slot."""
        return (self.chunks[slot // MASKS_PER_CHUNK][(slot % MASKS_PER_CHUNK) * self.width + (token >> 5)]
                >> (token & 31)) & 1

    cdef int64_t store(self, const uint32_t* mask) noexcept nogil:
        """Copy a mask in; its slot (the cache is emptied first when it would pass its bound)."""
        cdef int64_t slot
        # Masks live in fixed-size chunks, so storing one never moves the others.
        if (<size_t>(self.n_masks + 1) * self.width * sizeof(uint32_t)) > MAX_MASK_CACHE_BYTES:
            self.clear()
        slot = self.n_masks
        if slot // MASKS_PER_CHUNK >= <int64_t>self.chunks.size():
            self.chunks.push_back(vector[uint32_t]())
            take_chunk(self.chunks.back(), MASKS_PER_CHUNK * self.width)
        self.chunks.back().insert(self.chunks.back().end(), mask, mask + self.width)
        self.n_masks += 1
        return slot

    cdef void keep_set(self, int32_t set_id, const uint32_t* mask) noexcept nogil:
        cdef int64_t slot = self.store(mask)   # (first: store may empty the maps)
        self.set_slot[set_id] = slot

    cdef void keep_partial(self, uint64_t key, const uint32_t* mask) noexcept nogil:
        cdef int64_t slot = self.store(mask)
        self.partial_slot[key] = slot

    cdef void clear(self) noexcept nogil:
        """Forget every cached mask (its chunks go back to the process-wide pool)."""
        release_chunks(self.chunks)
        self.set_slot.clear()
        self.partial_slot.clear()
        self.n_masks = 0

    cdef size_t memory_bytes(self) noexcept nogil:
        return self.chunks.size() * MASKS_PER_CHUNK * self.width * 4
