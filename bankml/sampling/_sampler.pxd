# Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.
# Declarations of the sampling chain (_sampler.pyx). Names follow llama.cpp's
# src/llama-sampler.cpp and common/sampling.cpp where the semantics are the same.
from libc.stdint cimport int32_t, int64_t, uint32_t
from libcpp.random cimport mt19937
from libcpp.unordered_map cimport unordered_map
from libcpp.vector cimport vector

from bankml.engine._typedefs cimport token_t


cdef extern from * nogil:
    """
    #include <algorithm>
    #include <cstdint>
    #include <random>

    /* llama.cpp's llama_token_data: the layout of every candidate array. */
    struct bankml_token_data {
        int32_t id;
        float   logit;
        float   p;
    };

    /* The orderings llama.cpp sorts by, as functors so std::sort and std::partial_sort run the same
       algorithm (and so break ties the same way) as the libstdc++ code libllama was built with. */
    struct bankml_logit_greater {
        bool operator()(const bankml_token_data & a, const bankml_token_data & b) const { return a.logit > b.logit; }
    };
    struct bankml_p_greater {
        bool operator()(const bankml_token_data & a, const bankml_token_data & b) const { return a.p > b.p; }
    };
    struct bankml_score_less {
        const float * scores;
        bool operator()(size_t a, size_t b) const { return scores[a] < scores[b]; }
    };

    static inline void bankml_sort_by_logit(bankml_token_data * first, bankml_token_data * last) {
        std::sort(first, last, bankml_logit_greater());
    }
    static inline void bankml_partial_sort_by_logit(bankml_token_data * first, bankml_token_data * middle,
                                                    bankml_token_data * last) {
        std::partial_sort(first, middle, last, bankml_logit_greater());
    }
    static inline void bankml_sort_by_p(bankml_token_data * first, bankml_token_data * last) {
        std::sort(first, last, bankml_p_greater());
    }
    static inline void bankml_sort_by_score(size_t * first, size_t * last, const float * scores) {
        bankml_score_less less;
        less.scores = scores;
        std::sort(first, last, less);
    }
    """
    cdef struct bankml_token_data:
        int32_t id
        float logit
        float p
    void bankml_sort_by_logit(bankml_token_data* first, bankml_token_data* last)
    void bankml_partial_sort_by_logit(bankml_token_data* first, bankml_token_data* middle, bankml_token_data* last)
    void bankml_sort_by_score(size_t* first, size_t* last, const float* scores)
    void bankml_sort_by_p(bankml_token_data* first, bankml_token_data* last)


cdef extern from "<random>" namespace "std" nogil:
    # not in Cython's libcpp.random; llama_sample_dist (mirostat) draws with it
    cdef cppclass discrete_distribution[T]:
        discrete_distribution(const double* first, const double* last) except +
        T operator()(mt19937& rng)


ctypedef bankml_token_data llama_token_data


# llama_token_data_array: data may move forward (XTC drops the head), selected is an index into data.
cdef struct llama_token_data_array:
    llama_token_data* data
    size_t size
    int64_t selected
    bint sorted


# The samplers of a chain, in the order of common_sampler_type where it has one.
cdef enum sampler_type:
    SAMPLER_DRY = 1
    SAMPLER_TOP_K = 2
    SAMPLER_TOP_P = 3
    SAMPLER_MIN_P = 4
    SAMPLER_TYPICAL_P = 5
    SAMPLER_TEMPERATURE = 6      # llama_sampler_init_temp_ext
    SAMPLER_XTC = 7
    SAMPLER_INFILL = 8           # llama_sampler_init_infill
    SAMPLER_PENALTIES = 9
    SAMPLER_TOP_N_SIGMA = 10
    SAMPLER_ADAPTIVE_P = 12      # llama_sampler_init_adaptive_p, in dist's place
    SAMPLER_LOGIT_BIAS = 100
    SAMPLER_TEMP = 101           # llama_sampler_init_temp (before mirostat)
    SAMPLER_DIST = 102
    SAMPLER_MIROSTAT = 103
    SAMPLER_MIROSTAT_V2 = 104


# llama.cpp's ring_buffer<llama_token>: fixed capacity, the oldest entry dropped when full. Unlike
# llama.cpp's, the storage grows with the entries pushed (up to the capacity) instead of being allocated at
# full capacity up front: a request's repeat_last_n / dry_penalty_last_n of up to INT32_MAX then costs
# memory for the tokens actually accepted (at most the context), and the entries, their order and every
# draw stay llama.cpp's. Growing can fail: push_back raises MemoryError, never terminates.
cdef struct token_ring:
    vector[token_t] data
    size_t capacity
    size_t sz
    size_t first
    size_t pos


# the ring buffer's steps (llama.cpp's push_back and rat)
cdef inline void ring_init(token_ring& ring, size_t capacity) noexcept nogil:
    ring.data.clear()
    ring.capacity = capacity
    ring.sz = 0
    ring.first = 0
    ring.pos = 0


cdef inline void ring_clear(token_ring& ring) noexcept nogil:
    ring.sz = 0
    ring.first = 0
    ring.pos = 0


cdef inline int ring_push_back(token_ring& ring, token_t value) except -1 nogil:
    if ring.capacity == 0:
        return 0
    if ring.pos == ring.data.size():
        # only while the ring has never been full: pos == sz == data.size()
        ring.data.push_back(value)
    else:
        ring.data[ring.pos] = value
    if ring.sz == ring.capacity:
        ring.first = (ring.first + 1) % ring.capacity
    else:
        ring.sz += 1
    ring.pos = (ring.pos + 1) % ring.capacity
    return 0


cdef inline token_t ring_rat(const token_ring& ring, size_t i) noexcept nogil:
    # the i-th most recent entry (0 = the newest)
    return ring.data[(ring.first + ring.sz - i - 1) % ring.capacity]


cdef struct logit_bias_entry:
    token_t token
    float bias


# One sampler of the chain: its type and its context, as llama.cpp's llama_sampler is an interface and a ctx.
# The context is the type's struct below (new_ctx makes it; chain_clone copies and chain_free frees it through
# the type's row of the SAMPLERS table, _sampler.pyx): each holds the fields of llama.cpp's
# llama_sampler_<type> context, parameters and state.
cdef struct chain_stage:
    sampler_type type
    void* ctx


cdef struct logit_bias_ctx:               # llama_sampler_logit_bias
    vector[logit_bias_entry] biases
    vector[logit_bias_entry] to_search


cdef struct penalties_ctx:                # llama_sampler_penalties
    int32_t penalty_last_n
    float penalty_repeat
    float penalty_freq
    float penalty_present
    token_ring prev
    unordered_map[token_t, int] token_count


cdef struct dry_ctx:                      # llama_sampler_dry
    float dry_multiplier
    float dry_base
    int32_t dry_allowed_length
    int32_t dry_penalty_last_n
    unordered_map[token_t, vector[vector[token_t]]] dry_processed_breakers
    vector[int] dry_repeat_count
    unordered_map[token_t, int] dry_max_token_repeat
    token_ring last_tokens


cdef struct top_n_sigma_ctx:              # llama_sampler_top_n_sigma
    float n


cdef struct top_k_ctx:                    # llama_sampler_top_k
    int32_t k


cdef struct p_ctx:                        # llama_sampler_top_p, _min_p and _typical: the same two fields
    float p
    size_t min_keep


cdef struct xtc_ctx:                      # llama_sampler_xtc
    float p                               # the probability
    float threshold
    size_t min_keep
    uint32_t seed
    uint32_t seed_cur
    mt19937 rng


cdef struct temp_ctx:                     # llama_sampler_temp_ext (temp reads temp only)
    float temp
    float delta
    float exponent


cdef struct dist_ctx:                     # llama_sampler_dist
    uint32_t seed
    uint32_t seed_cur
    mt19937 rng


cdef struct mirostat_ctx:                 # llama_sampler_mirostat (v2 reads neither n_vocab nor m)
    int32_t n_vocab
    int32_t m
    float tau
    float eta
    float mu
    uint32_t seed
    uint32_t seed_cur
    mt19937 rng


cdef struct adaptive_p_ctx:               # llama_sampler_adaptive_p
    float adaptive_target
    float adaptive_decay
    float weighted_sum
    float total_weight
    vector[float] original_probs
    token_t pending_token_id
    int32_t pending_token_idx
    uint32_t seed
    uint32_t seed_cur
    mt19937 rng


cdef struct infill_ctx:                   # llama_sampler_infill
    const unsigned char* infill_pieces    # every piece in one buffer (owned by the Sampler's vocabulary data)
    const int64_t* infill_offsets         # piece t is infill_pieces[infill_offsets[t]:infill_offsets[t + 1]]
    const unsigned char* infill_flags     # per token: INFILL_EOG, INFILL_NO_TEXT (token_to_piece(special=false) is empty)
    token_t infill_eot                    # token_eot, else token_eos; -1 if the vocabulary has neither


cdef uint32_t get_rng_seed(uint32_t seed) noexcept nogil
cdef int chain_apply(vector[chain_stage]& chain, llama_token_data_array* cur_p,
                     vector[llama_token_data]& buf_sort) except -1 nogil
cdef int chain_accept(vector[chain_stage]& chain, token_t token) except -1 nogil
cdef void chain_reset(vector[chain_stage]& chain) noexcept nogil
cdef int chain_clone(const vector[chain_stage]& chain, vector[chain_stage]& copy) except -1
cdef void chain_free(vector[chain_stage]& chain) noexcept nogil


cdef class Rng:
    cdef mt19937 rng
    cdef readonly uint32_t seed


cdef class Sampler:
    cdef readonly object params
    cdef readonly object vocab
    cdef readonly object grammar
    cdef readonly object reasoning_budget
    cdef readonly int64_t n_vocab
    cdef vector[chain_stage] chain
    cdef vector[llama_token_data] cur
    cdef vector[llama_token_data] buf_sort
    cdef readonly int64_t n_redraws
    cdef object infill_data              # keeps the buffers the infill stages point into alive
    cdef llama_token_data_array last_p   # the candidates the last draw left (common_sampler's cur_p)

    cdef int set_logits(self, const float* logits) except -1 nogil
    cdef int64_t draw(self) except -2 nogil
