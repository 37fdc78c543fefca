// bankml: a growable array of trivially copyable values that grows by realloc (_podvec.pxd declares it).
//
// The parser's arrays grow with the grammar's expanded size, and a big bounded repetition expands a
// 543 KB grammar (Github_hard---o9882) to 1.1 million elements and 275,245 rules. std::vector grows by
// allocating anew and copying: every growth writes the whole array again into fresh pages, and a fresh
// 4 KB page costs a fault (2.5-3 us on these machines). realloc grows a big block in place, or for a
// block malloc mapped on its own moves its pages (mremap) without copying or touching them, so an array
// grown to N bytes has touched about N bytes. The subset of std::vector the engine uses: push_back,
// append, reserve, resize, size, capacity, data, operator[], back, empty, clear, swap.
//
// T must be trivially copyable (realloc moves bytes). Growth invalidates data(), as std::vector's does.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <type_traits>

namespace bankml {

template <class T>
class pod_vector {
    static_assert(std::is_trivially_copyable<T>::value, "pod_vector holds trivially copyable values");

public:
    pod_vector() {}
    ~pod_vector() { std::free(data_); }
    pod_vector(const pod_vector&) = delete;
    pod_vector& operator=(const pod_vector&) = delete;

    std::size_t size() const { return size_; }
    std::size_t capacity() const { return capacity_; }
    bool empty() const { return size_ == 0; }
    T* data() { return data_; }
    const T* data() const { return data_; }
    T& operator[](std::size_t i) { return data_[i]; }
    const T& operator[](std::size_t i) const { return data_[i]; }
    T& back() { return data_[size_ - 1]; }

    void reserve(std::size_t n) {
        if (n <= capacity_) {
            return;
        }
        if (n > std::size_t(-1) / sizeof(T)) {
            throw std::bad_alloc();
        }
        T* grown = static_cast<T*>(std::realloc(data_, n * sizeof(T)));
        if (grown == nullptr) {
            throw std::bad_alloc();
        }
        data_ = grown;
        capacity_ = n;
    }
    void push_back(const T& value) {
        if (size_ == capacity_) {
            grow(size_ + 1);
        }
        data_[size_++] = value;
    }
    void append(const T* first, const T* last) {
        std::size_t n = static_cast<std::size_t>(last - first);
        if (size_ + n > capacity_) {
            grow(size_ + n);
        }
        if (n > 0) {
            std::memcpy(data_ + size_, first, n * sizeof(T));
        }
        size_ += n;
    }
    void resize(std::size_t n, const T& value) {
        if (n > capacity_) {
            grow(n);
        }
        for (std::size_t i = size_; i < n; ++i) {
            data_[i] = value;
        }
        size_ = n;
    }
    void clear() { size_ = 0; }
    void swap(pod_vector& other) {
        std::swap(data_, other.data_);
        std::swap(size_, other.size_);
        std::swap(capacity_, other.capacity_);
    }

private:
    void grow(std::size_t needed) {
        std::size_t doubled = capacity_ * 2;
        reserve(needed > doubled ? needed : (doubled < 16 ? 16 : doubled));
    }

    T* data_ = nullptr;
    std::size_t size_ = 0;
    std::size_t capacity_ = 0;
};

}  // namespace bankml
