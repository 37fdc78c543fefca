// bankml: a fixed-size array that starts all zero without being written (_zeroarray.pxd declares it).
//
// The engine keeps a few arrays per element position (a class's ASCII members, flags, segment lengths,
// nullable tails), filled on first use. A grammar of a million elements (Github_hard---o9882's bounded
// repetitions) makes them ~28 MB, and std::vector::assign(n, 0) writes every byte: each 4 KB page of
// fresh memory is faulted in then, 2.5-3 us a page on these machines, ~20 ms before the first mask. calloc
// hands out memory known to be zero without writing it when it is freshly mapped (a page is faulted in
// when first used, and most never are), and clears only what it reuses.
//
// T must be trivially copyable and all-zero bytes must be its zero. Not copyable; assign_zeros replaces
// the contents (and invalidates data()).
#pragma once

#include <cstddef>
#include <cstdlib>
#include <new>

namespace bankml {

template <class T>
class zero_array {
public:
    zero_array() {}
    ~zero_array() { std::free(data_); }
    zero_array(const zero_array&) = delete;
    zero_array& operator=(const zero_array&) = delete;

    void assign_zeros(std::size_t n) {
        T* fresh = static_cast<T*>(std::calloc(n ? n : 1, sizeof(T)));
        if (fresh == nullptr) {
            throw std::bad_alloc();
        }
        std::free(data_);
        data_ = fresh;
        size_ = n;
    }
    T& operator[](std::size_t i) { return data_[i]; }
    const T& operator[](std::size_t i) const { return data_[i]; }
    T* data() { return data_; }
    std::size_t size() const { return size_; }

private:
    T* data_ = nullptr;
    std::size_t size_ = 0;
};

}  // namespace bankml
