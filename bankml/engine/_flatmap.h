// bankml: the hash map of the engine's memo tables (_flatmap.pxd declares it).
//
// The tables map integer keys (node, set and entry ids, packed pairs of them) to small trivially copyable
// values, and grow for as long as a context lives: a MaskBench schema's tables reach hundreds of thousands
// of entries. std::unordered_map rehashes a table in one go when it grows -- every node relinked, each key
// taken modulo a prime -- and that lands on whichever mask made the insert: 0.55-1.1 ms measured on a mask that
// built nothing (Github_medium---o9786, a continuation table of ~10^5 entries; 20 us with this map). Here a table is a flat array of
// a power-of-two size probed linearly from a mixed hash, and it grows incrementally: the bigger array is
// allocated untouched (its pages are faulted in as they are used) and every insert moves a few slots of the
// old one over, so no single insert moves more than MIGRATE_PER_INSERT entries. Until the old array is empty
// a look-up probes both.
//
// The subset of std::unordered_map's interface the engine uses: find / end / operator[] / count / size /
// clear / reserve, and iterators that dereference to a std::pair<K, V>. Unlike std::unordered_map, an insert
// may move entries: no reference or iterator into the map survives the next operator[], reserve or clear.
// K is an integer type; K and V must be trivially copyable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

namespace bankml {

inline uint64_t flat_map_mix(uint64_t x) {
    // MurmurHash3's 64-bit finalizer: packed keys differ in a few low or high bits, and probing needs all
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

template <class K, class V>
class flat_map {
public:
    typedef std::pair<K, V> value_type;

    struct iterator {
        value_type* slot;
        value_type& operator*() const { return *slot; }
        value_type* operator->() const { return slot; }
        bool operator==(const iterator& other) const { return slot == other.slot; }
        bool operator!=(const iterator& other) const { return slot != other.slot; }
    };

    flat_map() {}
    ~flat_map() {
        release(cur_);
        release(old_);
    }
    flat_map(const flat_map&) = delete;
    flat_map& operator=(const flat_map&) = delete;

    iterator end() { return iterator{nullptr}; }

    iterator find(const K& key) { return iterator{lookup(key)}; }

    size_t count(const K& key) { return lookup(key) != nullptr ? 1 : 0; }

    V& operator[](const K& key) {
        value_type* found = lookup(key);
        if (found != nullptr) {
            return found->second;
        }
        if (old_.slots != nullptr) {
            migrate(MIGRATE_PER_INSERT);
        }
        if (2 * (cur_.count + old_.count + 1) > cur_.capacity) {
            grow(cur_.capacity ? 2 * cur_.capacity : MIN_CAPACITY);
        }
        value_type* slot = place(cur_, key);
        slot->first = key;
        slot->second = V();
        return slot->second;
    }

    size_t size() const { return cur_.count + old_.count; }

    void clear() {
        release(old_);
        if (cur_.count != 0) {
            std::memset(cur_.used, 0, cur_.capacity);
            cur_.count = 0;
        }
    }

    // room for n entries at most half full, so that the next n - size() inserts allocate nothing (a whole
    // rehash here, asked for ahead of time)
    void reserve(size_t n) {
        size_t capacity = cur_.capacity ? cur_.capacity : MIN_CAPACITY;
        while (capacity < 2 * n) {
            capacity *= 2;
        }
        if (capacity > cur_.capacity) {
            grow(capacity);
        }
        if (old_.slots != nullptr) {
            migrate(old_.capacity);
        }
    }

private:
    // (enumerators, not static members: never odr-used, so no out-of-class definitions are needed)
    enum : size_t {
        MIN_CAPACITY = 16,
        MIGRATE_PER_INSERT = 8,   // old slots moved per insert: 4x what keeps ahead of growth
    };

    struct table {
        value_type* slots = nullptr;
        uint8_t* used = nullptr;
        size_t capacity = 0;   // a power of two, or 0
        size_t count = 0;      // entries held (in old_: those not yet moved)
        size_t next = 0;       // old_: the first slot not yet moved
    };

    static table allocate(size_t capacity) {
        table t;
        // untouched memory: calloc's zero pages and malloc's are faulted in as the probes reach them
        t.slots = static_cast<value_type*>(std::malloc(capacity * sizeof(value_type)));
        t.used = static_cast<uint8_t*>(std::calloc(capacity, 1));
        if (t.slots == nullptr || t.used == nullptr) {
            std::free(t.slots);
            std::free(t.used);
            throw std::bad_alloc();
        }
        t.capacity = capacity;
        return t;
    }

    static void release(table& t) {
        std::free(t.slots);
        std::free(t.used);
        t = table();
    }

    static value_type* probe(const table& t, const K& key, size_t* at) {
        const size_t mask = t.capacity - 1;
        size_t i = flat_map_mix(static_cast<uint64_t>(key)) & mask;
        while (t.used[i]) {
            if (t.slots[i].first == key) {
                *at = i;
                return &t.slots[i];
            }
            i = (i + 1) & mask;
        }
        *at = i;
        return nullptr;
    }

    value_type* lookup(const K& key) {
        size_t at;
        if (cur_.count != 0) {
            value_type* found = probe(cur_, key, &at);
            if (found != nullptr) {
                return found;
            }
        }
        if (old_.count != 0) {
            value_type* found = probe(old_, key, &at);
            if (found != nullptr && at >= old_.next) {   // (below next: moved already, found in cur_)
                return found;
            }
        }
        return nullptr;
    }

    // a free slot for a key known to be absent, counted in
    static value_type* place(table& t, const K& key) {
        const size_t mask = t.capacity - 1;
        size_t i = flat_map_mix(static_cast<uint64_t>(key)) & mask;
        while (t.used[i]) {
            i = (i + 1) & mask;
        }
        t.used[i] = 1;
        t.count += 1;
        return &t.slots[i];
    }

    // move up to n slots of old_ into cur_ (old_ released once empty)
    void migrate(size_t n) {
        size_t stop = old_.next + n < old_.capacity ? old_.next + n : old_.capacity;
        for (size_t j = old_.next; j < stop; ++j) {
            if (old_.used[j]) {
                *place(cur_, old_.slots[j].first) = old_.slots[j];
                old_.count -= 1;
            }
        }
        old_.next = stop;
        if (old_.next == old_.capacity || old_.count == 0) {
            release(old_);
        }
    }

    // a new cur_ of the given capacity; the entries of the old one (if any) become old_, moved over by the
    // inserts that follow (or at once by reserve)
    void grow(size_t capacity) {
        if (old_.slots != nullptr) {
            migrate(old_.capacity);   // (not reached from inserts: they move old_ out long before cur_ fills)
        }
        if (cur_.count == 0) {
            release(cur_);
            cur_ = allocate(capacity);
            return;
        }
        old_ = cur_;
        old_.next = 0;
        cur_ = allocate(capacity);
    }

    table cur_;
    table old_;
};

}  // namespace bankml
