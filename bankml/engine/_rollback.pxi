# Included by _grammar.pyx. The matcher's rollback history: a ring of the states before its last
# `capacity` accepted steps (stack ids stay valid for the context's life, so a state is a few integers),
# and the transaction accept_tokens / validate_tokens run in (the entries a transaction overwrote are
# kept until it commits or is undone). Owns ring slots.
# Declarations: _rollback.pxd (included by _grammar.pxd).


cdef class RollbackRing:
    """The states before a matcher's last `capacity` steps; slot `head` is written next."""

    def __cinit__(self, int capacity, bint lazy):
        self.capacity = capacity
        self.stacks.resize(capacity)
        self.partial.resize(capacity)
        self.flags.resize(capacity)
        self.trigger = [None] * capacity if lazy else None
        self.saved_trigger = []

    cdef int push(self, vector[node_t]& stacks, partial_utf8 partial, uint8_t flags, object trigger) except -1:
        """Make (stacks, partial, flags, trigger) the newest entry (stacks is swapped in, left empty). In a
        transaction, an entry this overwrites (the ring is full) is kept aside for undo."""
        cdef int slot = self.head
        if self.capacity == 0:
            return 0
        if self.in_transaction and self.count == self.capacity:
            self.saved_slots.push_back(slot)
            self.saved_stacks.push_back(vector[node_t]())
            self.saved_stacks.back().swap(self.stacks[slot])
            self.saved_partial.push_back(self.partial[slot])
            self.saved_flags.push_back(self.flags[slot])
            if self.trigger is not None:
                self.saved_trigger.append(self.trigger[slot])
        self.stacks[slot].swap(stacks)
        self.partial[slot] = partial
        self.flags[slot] = flags
        if self.trigger is not None:
            self.trigger[slot] = trigger
        self.head = (slot + 1) % self.capacity
        if self.count < self.capacity:
            self.count += 1
        return 0

    cdef object take(self, int n, vector[node_t]& stacks, partial_utf8* partial, uint8_t* flags):
        """Drop the newest n entries (1 <= n <= count) and give back the oldest of them: its stacks (swapped
        into `stacks`), partial character and flags; returns its trigger state (None for an eager matcher)."""
        cdef int slot = (self.head - n) % self.capacity
        cdef int k
        if slot < 0:
            slot += self.capacity
        stacks.swap(self.stacks[slot])
        self.stacks[slot].clear()
        partial[0] = self.partial[slot]
        flags[0] = self.flags[slot]
        trigger = None
        if self.trigger is not None:
            trigger = self.trigger[slot]
            self.trigger[slot] = None
        for k in range(1, n):
            self.stacks[(slot + k) % self.capacity].clear()
            if self.trigger is not None:
                self.trigger[(slot + k) % self.capacity] = None
        self.head = slot
        self.count -= n
        return trigger

    cdef void begin(self):
        self.in_transaction = True
        self.start_head = self.head
        self.start_count = self.count

    cdef void end(self, bint undo):
        """End the transaction; undo: put back what its pushes overwrote, newest first (so a slot
        overwritten twice ends with its original entry), and the ring's position."""
        cdef int k, slot
        self.in_transaction = False
        if undo:
            for k in range(<int>self.saved_slots.size() - 1, -1, -1):
                slot = self.saved_slots[k]
                self.stacks[slot].swap(self.saved_stacks[k])
                self.partial[slot] = self.saved_partial[k]
                self.flags[slot] = self.saved_flags[k]
                if self.trigger is not None:
                    self.trigger[slot] = self.saved_trigger[k]
            self.head = self.start_head
            self.count = self.start_count
        self.saved_slots.clear()
        self.saved_stacks.clear()
        self.saved_partial.clear()
        self.saved_flags.clear()
        self.saved_trigger = []

    cdef void clear(self):
        cdef int k
        for k in range(self.capacity):
            self.stacks[k].clear()
        if self.trigger is not None:
            self.trigger = [None] * self.capacity
        self.head = 0
        self.count = 0

    cdef RollbackRing copy(self):
        cdef RollbackRing other = RollbackRing(self.capacity, self.trigger is not None)
        other.head = self.head
        other.count = self.count
        other.stacks = self.stacks
        other.partial = self.partial
        other.flags = self.flags
        if self.trigger is not None:
            other.trigger = list(self.trigger)
        return other
