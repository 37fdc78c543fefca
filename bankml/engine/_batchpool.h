// bankml: the worker pool of the batch mask fill (_batchpool.pxd declares it; _batch.pxi drives it).
//
// A serving engine asks for a whole batch's masks at every step. One call hands the rows to the calling
// thread and to `helpers` pool threads, which take rows one at a time from a shared counter (a slow row,
// the first visit of a new grammar region, holds one thread and not a fixed share of the batch), and
// returns when every row is done. The pool threads are Python threads (started by _batch.pxi), so a row
// that raises has its own thread state to raise in; they wait here without the GIL.
//
// One batch runs at a time (run_lock_); a second caller waits for the first. A pool is used in the
// process that made it: after fork() the caller makes a new one (the threads do not survive a fork).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace bankml {

// one row of a batch: job is the caller's array, item the row's index in it; must not throw
typedef void (*batch_task)(void* job, std::int64_t item);

class batch_pool {
public:
    batch_pool() {}
    batch_pool(const batch_pool&) = delete;
    batch_pool& operator=(const batch_pool&) = delete;

    // task(job, i) for every i in [0, n_items): on the calling thread and on those of pool threads
    // 0..helpers-1 that wake while rows are left, returning when all are done. The caller never waits for a
    // helper that has not woken (on a loaded machine it may not be scheduled for milliseconds): it takes the
    // rows itself, closes the batch and waits only for helpers that are inside it.
    void run(batch_task task, void* job, std::int64_t n_items, int helpers) {
        std::lock_guard<std::mutex> serial(run_lock_);
        {
            std::lock_guard<std::mutex> guard(lock_);
            task_ = task;
            job_ = job;
            n_items_ = n_items;
            next_.store(0, std::memory_order_relaxed);
            helpers_ = helpers;
            open_ = helpers > 0;
            active_ = 0;
            ++generation_;
        }
        if (helpers > 0) wake_.notify_all();
        drain();
        if (helpers > 0) {
            std::unique_lock<std::mutex> guard(lock_);
            open_ = false;
            done_.wait(guard, [this] { return active_ == 0; });
        }
    }

    // A pool thread's life: wait for a batch it takes part in, take rows until none is left; until stop().
    void work(int index) {
        std::unique_lock<std::mutex> guard(lock_);
        std::uint64_t seen = 0;
        for (;;) {
            wake_.wait(guard, [&] { return stopping_ || generation_ != seen; });
            if (stopping_) return;
            seen = generation_;
            if (index >= helpers_ || !open_) continue;   // not asked, or the caller finished without it
            ++active_;
            guard.unlock();
            drain();
            guard.lock();
            if (--active_ == 0) done_.notify_one();
        }
    }

    void stop() {
        {
            std::lock_guard<std::mutex> guard(lock_);
            stopping_ = true;
        }
        wake_.notify_all();
    }

private:
    void drain() {
        for (;;) {
            std::int64_t item = next_.fetch_add(1, std::memory_order_relaxed);
            if (item >= n_items_) return;
            task_(job_, item);
        }
    }

    std::mutex run_lock_;
    std::mutex lock_;
    std::condition_variable wake_, done_;
    std::uint64_t generation_ = 0;
    batch_task task_ = nullptr;
    void* job_ = nullptr;
    std::int64_t n_items_ = 0;
    std::atomic<std::int64_t> next_{0};
    int helpers_ = 0;
    int active_ = 0;        // helpers inside the open batch
    bool open_ = false;     // helpers may still join the batch
    bool stopping_ = false;
};

}  // namespace bankml
