# Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.
"""The sampling chain: llama-server's samplers, drawing the same token ids as the pinned libllama.

Owns the candidate array, every sampler of the chain (src/llama-sampler.cpp), their generators and
histories, and the draw-check-redraw loop of common_sampler_sample (common/sampling.cpp) with
grammar_first=false. It does not own the grammar: it asks a ``bankml.Grammar`` whether the drawn token
is allowed and, on a rejection, for the mask; accepting a token advances both.

Floating-point expressions keep llama.cpp's types (float where it computes in float, double where it
promotes) so every intermediate rounds the same way; sorts call the same std::sort / std::partial_sort
so ties break the same way; generators are std::mt19937 drawn through the same std distributions.
"""
import math
import numbers
import weakref

import numpy as np
cimport numpy as cnp
from cython.operator cimport dereference as deref
from libc.math cimport INFINITY, exp, expf, fabsf, log, log2f, logf, pow, powf, sqrt
from libc.stdint cimport int32_t, int64_t, uint32_t
from libc.string cimport memcmp, memcpy
from libcpp.random cimport mt19937, uniform_real_distribution
from libcpp.unordered_map cimport unordered_map
from libcpp.vector cimport vector

from bankml.engine._typedefs cimport token_t
from bankml.engine.vocab import ATTR_CONTROL, ATTR_UNKNOWN
from bankml.errors import GrammarError, json_type_name
from bankml.sampling.params import (DEFAULT_DRY_SEQUENCE_BREAKERS, DEFAULT_SAMPLERS, INT32_MAX, LLAMA_DEFAULT_SEED,
                                    SamplerParams, _as_seed, _vocab_tokenizer)
from bankml.sampling.reasoning_budget import (REASONING_BUDGET_DONE, REASONING_BUDGET_IDLE, ReasoningBudget)

cnp.import_array()

class SamplingError(RuntimeError):
    """The chain cannot give a token (llama.cpp asserts or aborts here)."""


class NoAllowedTokenError(SamplingError, GrammarError):
    """The grammar rejects the token the redraw gave: no token the grammar allows has a finite logit (or the
    grammar allows none of the vocabulary). llama.cpp would hand that token on and abort when the grammar
    accepts it; bankml raises instead of returning a token the grammar does not allow."""

    def __init__(self, reason):
        GrammarError.__init__(self, reason)
cdef float FLT_MAX_VALUE = 3.4028234663852886e38


cdef extern from "<chrono>" namespace "std::chrono" nogil:
    cdef cppclass system_clock_duration "std::chrono::system_clock::duration":
        long long count()
    cdef cppclass system_clock_time_point "std::chrono::system_clock::time_point":
        system_clock_duration time_since_epoch()
    system_clock_time_point system_clock_now "std::chrono::system_clock::now"()


cdef extern from "<random>" namespace "std" nogil:
    cdef cppclass random_device_entropy "std::random_device":
        random_device_entropy()
        double entropy()
        uint32_t operator()()


# --- seeds and generators --------------------------------------------------------

cdef uint32_t get_rng_seed(uint32_t seed) noexcept nogil:
    # LLAMA_DEFAULT_SEED means "random": std::random_device, or the clock where the device is a PRNG
    cdef random_device_entropy* device
    cdef uint32_t value
    if seed != 0xFFFFFFFFU:
        return seed
    device = new random_device_entropy()
    if device.entropy() == 0:
        value = <uint32_t>system_clock_now().time_since_epoch().count()
    else:
        value = deref(device)()
    del device
    return value


cdef class Rng:
    """std::mt19937 as explicit state: seeded, cloneable, drawn through the std distributions llama.cpp uses.

    ``Rng(seed)`` seeds it the way llama_sampler_init_dist does (LLAMA_DEFAULT_SEED = 0xFFFFFFFF or -1 picks
    a random seed; ``seed`` then holds the seed actually used).
    """

    def __init__(self, seed=5489):
        self.seed = get_rng_seed(_as_seed(seed, "seed"))
        self.rng.seed(self.seed)

    def next_u32(self):
        """The next raw 32-bit output."""
        return self.rng()

    def uniform(self):
        """std::uniform_real_distribution<double>(0, 1): the draw llama_sampler_dist makes (two outputs)."""
        cdef uniform_real_distribution[double] dist = uniform_real_distribution[double](0.0, 1.0)
        return dist(self.rng)

    def uniform_float(self):
        """std::uniform_real_distribution<float>(0, 1): the draw the XTC sampler makes (one output)."""
        cdef uniform_real_distribution[float] dist = uniform_real_distribution[float](0.0, 1.0)
        return dist(self.rng)

    def discrete(self, weights):
        """std::discrete_distribution<int> over the weights (float32, as llama_sample_dist passes them)."""
        cdef cnp.ndarray w = np.ascontiguousarray(weights, dtype=np.float32).astype(np.float64)
        cdef const double[::1] view = w
        if w.shape[0] == 0:
            raise ValueError("Invalid weights: expected at least one")
        return _discrete_draw(&view[0], w.shape[0], self.rng)

    def discard(self, unsigned long long n):
        cdef unsigned long long i
        for i in range(n):
            self.rng()

    def clone(self):
        cdef Rng other = Rng.__new__(Rng)
        other.rng = self.rng
        other.seed = self.seed
        return other

    def __reduce__(self):
        raise TypeError("Rng is not picklable; use clone()")


cdef int _discrete_draw(const double* weights, size_t n, mt19937& rng) except -1 nogil:
    cdef discrete_distribution[int]* dist = new discrete_distribution[int](weights, weights + n)
    cdef int result = deref(dist)(rng)
    del dist
    return result


# --- sorting (llama_token_data_array_partial_sort and _inplace) -------------------------

cdef int llama_token_data_array_partial_sort(const llama_token_data_array* cur, int npartial,
                                              vector[llama_token_data]& res) except -1 nogil:
    # bucket the logits into 128 bins over [-10, 10], keep the top bins holding >= npartial, sort those
    cdef int nbuckets = 128
    cdef float bucket_low = -10.0
    cdef float bucket_high = 10.0
    cdef float bucket_scale = <float>nbuckets / (bucket_high - bucket_low)
    cdef float bucket_inter = -bucket_low * bucket_scale
    cdef vector[int] bucket_idx
    cdef vector[int] histo
    cdef vector[llama_token_data*] bucket_ptrs
    cdef int i, ib, j, nhave, ndone
    cdef int n = <int>cur.size
    cdef float val
    cdef llama_token_data* ptr
    histo.assign(nbuckets, 0)
    bucket_idx.resize(n)
    for i in range(n):
        val = cur.data[i].logit
        ib = <int>(bucket_scale * val + bucket_inter)
        if ib > nbuckets - 1:
            ib = nbuckets - 1
        if ib < 0:
            ib = 0
        bucket_idx[i] = ib
        histo[ib] += 1
    nhave = 0
    ib = nbuckets - 1
    while ib >= 0:
        nhave += histo[ib]
        if nhave >= npartial:
            break
        ib -= 1
    res.resize(nhave)
    ptr = res.data()
    bucket_ptrs.reserve(nbuckets - ib)
    j = nbuckets - 1
    while j >= ib:
        bucket_ptrs.push_back(ptr)
        ptr += histo[j]
        j -= 1
    for i in range(n):
        j = bucket_idx[i]
        if j >= ib:
            bucket_ptrs[nbuckets - 1 - j][0] = cur.data[i]
            bucket_ptrs[nbuckets - 1 - j] += 1
    ptr = res.data()
    ndone = 0
    j = nbuckets - 1
    while j > ib:
        bankml_sort_by_logit(ptr, ptr + histo[j])
        ptr += histo[j]
        ndone += histo[j]
        j -= 1
    bankml_partial_sort_by_logit(ptr, ptr + npartial - ndone, ptr + histo[ib])
    return 0


cdef int llama_token_data_array_partial_sort_inplace(llama_token_data_array* cur_p, int npartial,
                                                      vector[llama_token_data]& tmp) except -1 nogil:
    if npartial <= 128:
        bankml_partial_sort_by_logit(cur_p.data, cur_p.data + npartial, cur_p.data + cur_p.size)
        cur_p.size = npartial
        cur_p.sorted = True
        return 0
    llama_token_data_array_partial_sort(cur_p, npartial, tmp)
    memcpy(cur_p.data, tmp.data(), npartial * sizeof(llama_token_data))
    cur_p.size = npartial
    cur_p.sorted = True
    return 0


# --- the samplers -----------------------------------------------------------------------

cdef void llama_sampler_temp_impl(llama_token_data_array* cur_p, float temp) noexcept nogil:
    cdef size_t i, max_i
    cdef float max_l
    if cur_p.size == 0:
        return
    if temp <= 0:
        # keep the first highest logit, -inf for the rest
        max_i = 0
        max_l = cur_p.data[0].logit
        for i in range(1, cur_p.size):
            if cur_p.data[i].logit > max_l:
                cur_p.data[max_i].logit = -INFINITY
                max_i = i
                max_l = cur_p.data[i].logit
            else:
                cur_p.data[i].logit = -INFINITY
        return
    for i in range(cur_p.size):
        cur_p.data[i].logit /= temp


cdef int llama_sampler_softmax_impl(llama_token_data_array* cur_p, bint do_sort,
                                     vector[llama_token_data]& tmp) except -1 nogil:
    cdef size_t i
    cdef float max_l, p, cum_sum
    if cur_p.size == 0:
        return 0  # llama.cpp asserts here
    if do_sort and not cur_p.sorted:
        llama_token_data_array_partial_sort_inplace(cur_p, <int>cur_p.size, tmp)
    max_l = cur_p.data[0].logit
    if not cur_p.sorted:
        for i in range(1, cur_p.size):
            if max_l < cur_p.data[i].logit:
                max_l = cur_p.data[i].logit
    cum_sum = 0
    for i in range(cur_p.size):
        p = expf(cur_p.data[i].logit - max_l)
        cur_p.data[i].p = p
        cum_sum += p
    for i in range(cur_p.size):
        cur_p.data[i].p /= cum_sum
    return 0


cdef int llama_sampler_top_k_impl(llama_token_data_array* cur_p, int32_t k,
                                   vector[llama_token_data]& tmp) except -1 nogil:
    if k <= 0:
        return 0
    if k > <int32_t>cur_p.size:
        k = <int32_t>cur_p.size
    if not cur_p.sorted:
        llama_token_data_array_partial_sort_inplace(cur_p, k, tmp)
    cur_p.size = k
    return 0


cdef int apply_top_p(p_ctx& st, llama_token_data_array* cur_p, vector[llama_token_data]& buf_sort,
                      vector[llama_token_data]& tmp) except -1 nogil:
    cdef size_t k, i, last_idx
    cdef llama_token_data* pdata
    cdef float cum_sum
    if st.p >= 1:
        return 0
    llama_sampler_softmax_impl(cur_p, False, tmp)
    k = cur_p.size
    pdata = cur_p.data
    if not cur_p.sorted and cur_p.size > 1024:
        # adaptive: sort the top 256 first, everything only when they do not reach p
        k = 256 if cur_p.size > 256 else cur_p.size
        llama_token_data_array_partial_sort(cur_p, <int>k, buf_sort)
        pdata = buf_sort.data()
    elif not cur_p.sorted:
        llama_token_data_array_partial_sort_inplace(cur_p, <int>k, tmp)
    cum_sum = 0
    last_idx = cur_p.size
    for i in range(cur_p.size):
        cum_sum += pdata[i].p
        if cum_sum >= st.p and i + 1 >= st.min_keep:
            last_idx = i + 1
            break
        if not cur_p.sorted and i == k - 1:
            k = cur_p.size
            llama_token_data_array_partial_sort(cur_p, <int>k, buf_sort)
            pdata = buf_sort.data()
    if not cur_p.sorted:
        memcpy(cur_p.data, buf_sort.data(), last_idx * sizeof(llama_token_data))
        cur_p.sorted = True
    cur_p.size = last_idx
    return 0


cdef int apply_min_p(p_ctx& st, llama_token_data_array* cur_p, vector[llama_token_data]& tmp) except -1 nogil:
    cdef bint min_p_applied = False
    cdef float max_logit, min_logit
    cdef size_t i, n_kept
    if st.p <= 0 or cur_p.size == 0:
        return 0
    if not cur_p.sorted:
        max_logit = -FLT_MAX_VALUE
        for i in range(cur_p.size):
            if max_logit < cur_p.data[i].logit:
                max_logit = cur_p.data[i].logit
        min_logit = max_logit + logf(st.p)
        n_kept = 0
        for i in range(cur_p.size):
            if cur_p.data[i].logit >= min_logit:
                n_kept += 1
        if n_kept != 0 and n_kept >= st.min_keep:
            # the kept tokens in their order (a stable in-place filter is the same as llama.cpp's copy)
            n_kept = 0
            for i in range(cur_p.size):
                if cur_p.data[i].logit >= min_logit:
                    cur_p.data[n_kept] = cur_p.data[i]
                    n_kept += 1
            cur_p.size = n_kept
            min_p_applied = True
    if not min_p_applied:
        if not cur_p.sorted:
            llama_token_data_array_partial_sort_inplace(cur_p, <int>cur_p.size, tmp)
        min_logit = cur_p.data[0].logit + logf(st.p)
        i = 1
        while i < cur_p.size:
            if cur_p.data[i].logit < min_logit and i >= st.min_keep:
                break
            i += 1
        cur_p.size = i
    return 0


cdef int apply_typical(p_ctx& st, llama_token_data_array* cur_p, vector[llama_token_data]& tmp) except -1 nogil:
    cdef float entropy, cum_sum
    cdef vector[float] shifted_scores
    cdef vector[size_t] indices
    cdef vector[llama_token_data] cur_p_new
    cdef size_t i, idx, last_idx
    if st.p >= 1:
        return 0
    llama_sampler_softmax_impl(cur_p, True, tmp)
    entropy = 0
    for i in range(cur_p.size):
        entropy += -cur_p.data[i].p * logf(cur_p.data[i].p)
    shifted_scores.resize(cur_p.size)
    for i in range(cur_p.size):
        shifted_scores[i] = fabsf(-logf(cur_p.data[i].p) - entropy)
    indices.resize(cur_p.size)
    for i in range(cur_p.size):
        indices[i] = i
    bankml_sort_by_score(indices.data(), indices.data() + indices.size(), shifted_scores.data())
    cum_sum = 0
    last_idx = indices.size()
    for i in range(indices.size()):
        idx = indices[i]
        cum_sum += cur_p.data[idx].p
        if cum_sum > st.p and (st.min_keep == 0 or i >= st.min_keep - 1):
            last_idx = i + 1
            break
    cur_p_new.resize(last_idx)
    for i in range(last_idx):
        cur_p_new[i] = cur_p.data[indices[i]]
    if last_idx:
        memcpy(cur_p.data, cur_p_new.data(), last_idx * sizeof(llama_token_data))
    cur_p.size = last_idx
    cur_p.sorted = False
    return 0


cdef int apply_temp_ext(temp_ctx& st, llama_token_data_array* cur_p, vector[llama_token_data]& tmp) except -1 nogil:
    cdef float min_temp, max_temp, max_entropy, entropy, prob, normalized_entropy, dyn_temp
    cdef double max_l_double, cum_sum_double, p
    cdef size_t i
    if st.delta > 0:
        min_temp = st.temp - st.delta
        if min_temp < 0:
            min_temp = 0
        max_temp = st.temp + st.delta
        if cur_p.size <= 1:
            return 0
        max_entropy = -logf(<float>1 / <float>cur_p.size)
        llama_sampler_softmax_impl(cur_p, True, tmp)
        entropy = 0
        for i in range(cur_p.size):
            prob = cur_p.data[i].p
            if prob > 0:
                entropy -= prob * logf(prob)
        normalized_entropy = entropy / max_entropy
        dyn_temp = min_temp + (max_temp - min_temp) * powf(normalized_entropy, st.exponent)
        llama_sampler_temp_impl(cur_p, dyn_temp)
        max_l_double = cur_p.data[0].logit
        cum_sum_double = 0
        for i in range(cur_p.size):
            p = exp(<double>cur_p.data[i].logit - max_l_double)
            cur_p.data[i].p = <float>p
            cum_sum_double += p
        for i in range(cur_p.size):
            cur_p.data[i].p = <float>(<double>cur_p.data[i].p / cum_sum_double)
    else:
        llama_sampler_temp_impl(cur_p, st.temp)
    return 0


cdef int apply_xtc(xtc_ctx& st, llama_token_data_array* cur_p, vector[llama_token_data]& tmp) except -1 nogil:
    cdef uniform_real_distribution[float] distribution = uniform_real_distribution[float](0.0, 1.0)
    cdef float chance
    cdef int pos_last
    cdef size_t i
    if st.p <= 0 or st.threshold > <float>0.5 or cur_p.size < 2:
        return 0
    chance = distribution(st.rng)
    if chance > st.p:
        return 0
    llama_sampler_softmax_impl(cur_p, True, tmp)
    pos_last = 0
    for i in range(cur_p.size):
        if cur_p.data[i].p >= st.threshold:
            pos_last = <int>i
        else:
            break
    if cur_p.size - <size_t>pos_last >= st.min_keep and pos_last > 0:
        cur_p.data += pos_last
        cur_p.size -= pos_last
    return 0


cdef void apply_penalties(penalties_ctx& st, llama_token_data_array* cur_p) noexcept nogil:
    cdef size_t i
    cdef int count
    cdef unordered_map[token_t, int].iterator it
    for i in range(cur_p.size):
        it = st.token_count.find(cur_p.data[i].id)
        if it == st.token_count.end():
            continue
        count = deref(it).second
        if cur_p.data[i].logit <= 0:
            cur_p.data[i].logit *= st.penalty_repeat
        else:
            cur_p.data[i].logit /= st.penalty_repeat
        cur_p.data[i].logit -= <float>count * st.penalty_freq + <float>(count > 0) * st.penalty_present
    cur_p.sorted = False


cdef void apply_top_n_sigma(top_n_sigma_ctx& st, llama_token_data_array* cur_p) noexcept nogil:
    cdef float max_value, logits_sum, mean, acc, std_value
    cdef size_t i, valid_count
    if st.n <= 0 or cur_p.size <= 1:
        return
    max_value = cur_p.data[0].logit
    logits_sum = 0
    valid_count = 0
    for i in range(cur_p.size):
        if cur_p.data[i].logit != -INFINITY:
            if max_value < cur_p.data[i].logit:
                max_value = cur_p.data[i].logit
            logits_sum += cur_p.data[i].logit
            valid_count += 1
    mean = logits_sum / <float>valid_count if valid_count > 0 else 0
    acc = 0
    for i in range(cur_p.size):
        if cur_p.data[i].logit != -INFINITY:
            # pow() promotes to double and the sum rounds back to float on every step
            acc = <float>(<double>acc + pow(<double>(cur_p.data[i].logit - mean), 2.0))
    std_value = <float>sqrt(<double>(acc / <float>valid_count)) if valid_count > 0 else 0
    for i in range(cur_p.size):
        if cur_p.data[i].logit < max_value - (st.n * std_value):
            cur_p.data[i].logit = -INFINITY


cdef int apply_logit_bias(logit_bias_ctx& st, llama_token_data_array* cur_p) except -1 nogil:
    cdef size_t i, j
    cdef token_t token
    if st.biases.empty():
        return 0
    st.to_search.clear()
    for j in range(st.biases.size()):
        token = st.biases[j].token
        if token >= 0 and cur_p.size > <size_t>token and cur_p.data[token].id == token:
            cur_p.data[token].logit += st.biases[j].bias
        else:
            st.to_search.push_back(st.biases[j])
    if st.to_search.empty():
        return 0
    for i in range(cur_p.size):
        for j in range(st.to_search.size()):
            if cur_p.data[i].id == st.to_search[j].token:
                cur_p.data[i].logit += st.to_search[j].bias
                break
    return 0


cdef void apply_dist(dist_ctx& st, llama_token_data_array* cur_p) noexcept nogil:
    cdef uniform_real_distribution[double] dist = uniform_real_distribution[double](0.0, 1.0)
    cdef float max_l, p
    cdef double sum_cum, rnd, sum_run, sum_tgt
    cdef bint found
    cdef size_t i
    if cur_p.size == 0:
        cur_p.selected = -1
        return
    cur_p.selected = 0
    if cur_p.size == 1:
        dist(st.rng)  # one draw per output, as backend sampling does
        cur_p.data[0].p = 1
        return
    max_l = cur_p.data[0].logit
    if not cur_p.sorted:
        for i in range(1, cur_p.size):
            if max_l < cur_p.data[i].logit:
                max_l = cur_p.data[i].logit
    sum_cum = 0
    for i in range(cur_p.size):
        p = expf(cur_p.data[i].logit - max_l)
        cur_p.data[i].p = p
        sum_cum += p
    # one pass: find where the running sum reaches sum_cum * rnd, normalizing as it goes
    rnd = dist(st.rng)
    sum_run = 0
    sum_tgt = sum_cum * rnd
    found = False
    for i in range(cur_p.size):
        if not found:
            sum_run += cur_p.data[i].p
            if sum_run >= sum_tgt:
                cur_p.selected = <int64_t>i
                found = True
        cur_p.data[i].p = <float>(<double>cur_p.data[i].p / sum_cum)
    if not found:
        cur_p.selected = <int64_t>cur_p.size - 1


cdef int llama_sample_dist(llama_token_data_array* cur_p, mt19937& rng) except -1 nogil:
    # std::discrete_distribution<int> over the float probabilities (as doubles)
    cdef vector[double] weights
    cdef size_t i
    weights.resize(cur_p.size)
    for i in range(cur_p.size):
        weights[i] = cur_p.data[i].p
    return _discrete_draw(weights.data(), weights.size(), rng)


cdef int apply_mirostat(mirostat_ctx& st, llama_token_data_array* cur_p, vector[llama_token_data]& tmp) except -1 nogil:
    cdef float s_hat, sum_ti_bi, sum_ti_sq, t_i, b_i, epsilon_hat, k, observed_surprise, e
    cdef size_t i
    cdef int idx, k_int
    llama_sampler_softmax_impl(cur_p, True, tmp)
    s_hat = 0
    sum_ti_bi = 0
    sum_ti_sq = 0
    i = 0
    while i < <size_t>(st.m - 1) and i < cur_p.size - 1:
        t_i = logf(<float>(i + 2) / <float>(i + 1))
        b_i = logf(cur_p.data[i].p / cur_p.data[i + 1].p)
        sum_ti_bi += t_i * b_i
        sum_ti_sq += t_i * t_i
        i += 1
    s_hat = sum_ti_bi / sum_ti_sq
    epsilon_hat = s_hat - 1
    k = powf((epsilon_hat * powf(2, st.mu)) / (1 - powf(<float>st.n_vocab, -epsilon_hat)), 1 / s_hat)
    k_int = <int>k
    llama_sampler_top_k_impl(cur_p, k_int if k_int > 1 else 1, tmp)
    llama_sampler_softmax_impl(cur_p, True, tmp)
    idx = llama_sample_dist(cur_p, st.rng)
    cur_p.selected = idx
    observed_surprise = -log2f(cur_p.data[idx].p)
    e = observed_surprise - st.tau
    st.mu = st.mu - st.eta * e
    return 0


cdef int apply_mirostat_v2(mirostat_ctx& st, llama_token_data_array* cur_p,
                           vector[llama_token_data]& tmp) except -1 nogil:
    cdef size_t i
    cdef int idx
    cdef float observed_surprise, e
    llama_sampler_softmax_impl(cur_p, True, tmp)
    i = 0
    while i < cur_p.size:
        if -log2f(cur_p.data[i].p) > st.mu:
            break
        i += 1
    cur_p.size = i
    if cur_p.size == 0:
        cur_p.size = 1
    llama_sampler_softmax_impl(cur_p, True, tmp)
    idx = llama_sample_dist(cur_p, st.rng)
    cur_p.selected = idx
    observed_surprise = -log2f(cur_p.data[idx].p)
    e = observed_surprise - st.tau
    st.mu = st.mu - st.eta * e
    return 0


# adaptive-p (llama_sampler_adaptive_p_*): selects a token whose probability is near a target adapted from an
# exponential moving average of the original probabilities of the tokens selected so far
cdef float ADAPTIVE_DISTRIBUTION_WIDTH = 0.3
cdef float ADAPTIVE_PEAK_LOGIT_VALUE = 5.0
cdef float ADAPTIVE_SHARPNESS = 10.0
cdef float ADAPTIVE_INV_WIDTH = <float>1.0 / ADAPTIVE_DISTRIBUTION_WIDTH


cdef inline float clamp_float(float v, float low, float high) noexcept nogil:
    # std::clamp: v < low ? low : (high < v ? high : v)
    if v < low:
        return low
    if high < v:
        return high
    return v


cdef int apply_adaptive_p(adaptive_p_ctx& st, llama_token_data_array* cur_p, vector[llama_token_data]& tmp) except -1 nogil:
    cdef float target, adapted_target, dist
    cdef size_t i
    cdef int idx
    llama_sampler_softmax_impl(cur_p, False, tmp)
    if st.adaptive_target < 0:
        cur_p.selected = llama_sample_dist(cur_p, st.rng)
        return 0
    st.original_probs.resize(cur_p.size)
    for i in range(cur_p.size):
        st.original_probs[i] = cur_p.data[i].p
    target = clamp_float(st.adaptive_target, 0, 1)
    if st.total_weight == 0:
        adapted_target = clamp_float(target, 0, 1)
    else:
        adapted_target = clamp_float(<float>2 * target - (st.weighted_sum / st.total_weight), 0, 1)
    for i in range(cur_p.size):
        if cur_p.data[i].logit == -INFINITY:
            continue
        dist = fabsf((cur_p.data[i].p - adapted_target) * ADAPTIVE_INV_WIDTH)
        cur_p.data[i].logit = ADAPTIVE_PEAK_LOGIT_VALUE - ADAPTIVE_SHARPNESS * dist * dist / (<float>1 + dist)
    llama_sampler_softmax_impl(cur_p, False, tmp)
    idx = llama_sample_dist(cur_p, st.rng)
    cur_p.selected = idx
    st.pending_token_id = cur_p.data[idx].id
    st.pending_token_idx = idx
    return 0


cdef void adaptive_p_reset(adaptive_p_ctx& st) noexcept nogil:
    st.weighted_sum = st.adaptive_target / (<float>1 - st.adaptive_decay)
    st.total_weight = <float>1 / (<float>1 - st.adaptive_decay)
    st.pending_token_id = -1
    st.pending_token_idx = -1


cdef int apply_dry(dry_ctx& st, llama_token_data_array* cur_p) except -1 nogil:
    cdef int last_n_repeat, rep_limit, i, longest_match, seq_len, offset, last, rt, lt, k, n, p, right_part_len
    cdef int repeat_len, max_exponent, repeat_exp, ii
    cdef bint match, is_single_token_breaker
    cdef token_t token
    cdef size_t j, s
    cdef float penalty
    cdef unordered_map[token_t, vector[vector[token_t]]].iterator breakers
    cdef unordered_map[token_t, int].iterator repeat
    if st.dry_multiplier == 0 or st.dry_base < 1 or st.dry_penalty_last_n == 0:
        return 0
    last_n_repeat = <int>st.last_tokens.sz
    if st.dry_penalty_last_n < last_n_repeat:
        last_n_repeat = st.dry_penalty_last_n
    if last_n_repeat <= st.dry_allowed_length:
        return 0
    st.dry_repeat_count.assign(last_n_repeat, 0)
    st.dry_max_token_repeat.clear()

    # step 1: the most recent restart sequence limits how far back a repetition can reach
    rep_limit = last_n_repeat
    for i in range(last_n_repeat):
        token = ring_rat(st.last_tokens, i)
        breakers = st.dry_processed_breakers.find(token)
        if breakers == st.dry_processed_breakers.end():
            continue
        longest_match = -1
        for s in range(deref(breakers).second.size()):
            seq_len = <int>deref(breakers).second[s].size()
            if seq_len > longest_match and seq_len <= i:
                match = True
                for offset in range(seq_len):
                    if deref(breakers).second[s][offset] != ring_rat(st.last_tokens, i - offset - 1):
                        match = False
                        break
                if match:
                    longest_match = seq_len
        if longest_match >= 0:
            rep_limit = i - longest_match
            break
    if rep_limit < st.dry_allowed_length:
        return 0

    # step 2: reverse Z-algorithm: for each position, how long a suffix of the context repeats there
    last = last_n_repeat - 1
    rt = 0
    lt = 0
    for k in range(1, last_n_repeat):
        if k > rt:
            n = 0
            while n + k < last_n_repeat and ring_rat(st.last_tokens, n) == ring_rat(st.last_tokens, n + k):
                n += 1
            st.dry_repeat_count[last - k] = n if n < rep_limit else rep_limit
            if n > 0:
                lt = k
                rt = k + n - 1
        else:
            p = k - lt
            right_part_len = rt - k + 1
            if st.dry_repeat_count[last - p] < right_part_len:
                n = st.dry_repeat_count[last - p]
                st.dry_repeat_count[last - k] = n if n < rep_limit else rep_limit
            else:
                ii = rt + 1
                while ii < last_n_repeat and ring_rat(st.last_tokens, ii) == ring_rat(st.last_tokens, ii - k):
                    ii += 1
                n = ii - k
                st.dry_repeat_count[last - k] = n if n < rep_limit else rep_limit
                lt = k
                rt = ii - 1

    # step 3: the token after each repeat would extend it; keep the longest repeat per token
    for i in range(last_n_repeat - 1):
        repeat_len = st.dry_repeat_count[i]
        if repeat_len >= st.dry_allowed_length:
            token = ring_rat(st.last_tokens, last_n_repeat - 2 - i)
            repeat = st.dry_max_token_repeat.find(token)
            if repeat == st.dry_max_token_repeat.end() or deref(repeat).second < repeat_len:
                st.dry_max_token_repeat[token] = repeat_len

    # step 4: penalize, with the exponent clamped so pow() stays finite in float
    max_exponent = 0
    if st.dry_base > <float>1.000001:
        max_exponent = <int>(<float>88.7228391 / <float>log(<double>st.dry_base))
    for j in range(cur_p.size):
        repeat = st.dry_max_token_repeat.find(cur_p.data[j].id)
        if repeat == st.dry_max_token_repeat.end():
            continue
        is_single_token_breaker = False
        breakers = st.dry_processed_breakers.find(cur_p.data[j].id)
        if breakers != st.dry_processed_breakers.end():
            for s in range(deref(breakers).second.size()):
                if deref(breakers).second[s].empty():
                    is_single_token_breaker = True
                    break
        if not is_single_token_breaker:
            repeat_exp = deref(repeat).second - st.dry_allowed_length
            if max_exponent > 0 and repeat_exp > max_exponent:
                repeat_exp = max_exponent
            penalty = st.dry_multiplier * <float>pow(<double>st.dry_base, <double>repeat_exp)
            cur_p.data[j].logit -= penalty
    cur_p.sorted = False
    return 0


# --- infill (llama_sampler_infill_apply) ----------------------------------------------------------------
# For fill-in-the-middle: after a softmax, sample an end-of-generation token when text is unlikely (the EOG
# probability times 3 times the candidate count beats the text probability); otherwise merge every candidate
# into one whose piece it is a prefix of (into the likelier of the two), drop text below 0.2, renormalize, drop
# text below 1/(n_text + 1), renormalize; with no text left, the single candidate is token_eot (else token_eos)
# at logit 1. Pieces are token_to_piece(special=false): empty for control and unknown tokens.

cdef extern from * nogil:
    """
    #include <algorithm>
    #include <cstring>
    struct bankml_piece_ref {
        const unsigned char * ptr;
        int64_t len;
        int64_t pos;
    };
    struct bankml_piece_less {
        bool operator()(const bankml_piece_ref & a, const bankml_piece_ref & b) const {
            const int64_t n = a.len < b.len ? a.len : b.len;
            const int c = n ? std::memcmp(a.ptr, b.ptr, (size_t) n) : 0;
            if (c != 0) return c < 0;
            return a.len < b.len;
        }
    };
    static inline void bankml_sort_pieces(bankml_piece_ref * first, bankml_piece_ref * last) {
        std::sort(first, last, bankml_piece_less());
    }
    static inline int64_t bankml_lower_bound_piece(const bankml_piece_ref * first, const bankml_piece_ref * last,
                                                   const bankml_piece_ref & key) {
        return std::lower_bound(first, last, key, bankml_piece_less()) - first;
    }
    static inline void bankml_sort_positions(int64_t * first, int64_t * last) {
        std::sort(first, last);
    }
    """
    cdef struct bankml_piece_ref:
        const unsigned char* ptr
        int64_t len
        int64_t pos
    void bankml_sort_pieces(bankml_piece_ref* first, bankml_piece_ref* last)
    int64_t bankml_lower_bound_piece(const bankml_piece_ref* first, const bankml_piece_ref* last,
                                     const bankml_piece_ref& key)
    void bankml_sort_positions(int64_t* first, int64_t* last)


cdef unsigned char INFILL_EOG = 1
cdef unsigned char INFILL_NO_TEXT = 2
# up to this many candidates the prefix merge runs llama.cpp's double loop; above it, the same merges in the
# same order from the candidates sorted by piece (only pairs where one piece is a prefix of the other can merge)
cdef size_t INFILL_DIRECT_MAX = 256


cdef inline bint infill_is_eog(const infill_ctx& st, token_t token) noexcept nogil:
    return (st.infill_flags[token] & INFILL_EOG) != 0


cdef inline int64_t infill_piece(const infill_ctx& st, token_t token, const unsigned char** ptr) noexcept nogil:
    ptr[0] = st.infill_pieces + st.infill_offsets[token]
    if st.infill_flags[token] & INFILL_NO_TEXT:
        return 0
    return st.infill_offsets[token + 1] - st.infill_offsets[token]


cdef inline void infill_merge(llama_token_data* data, size_t i0, size_t i1) noexcept nogil:
    # token i0's piece is a prefix of token i1's: merge into the token with the higher probability
    cdef size_t dst = i0, src = i1
    if data[i1].p > data[i0].p:
        dst = i1
        src = i0
    data[dst].p += data[src].p
    data[src].logit = -INFINITY
    data[src].p = 0


cdef int infill_combine(const infill_ctx& st, llama_token_data_array* cur_p) except -1 nogil:
    cdef size_t i0, i1, n = cur_p.size, k
    cdef llama_token_data* data = cur_p.data
    cdef const unsigned char* p0
    cdef const unsigned char* p1
    cdef int64_t len0, len1, lo, hi, m
    cdef vector[bankml_piece_ref] refs
    cdef vector[int64_t] matches
    cdef bankml_piece_ref ref
    if n <= INFILL_DIRECT_MAX:
        for i0 in range(n):
            for i1 in range(n):
                if data[i0].logit == -INFINITY:
                    break
                if i0 == i1 or data[i1].logit == -INFINITY:
                    continue
                len0 = infill_piece(st, data[i0].id, &p0)
                len1 = infill_piece(st, data[i1].id, &p1)
                if len0 > 0 and len0 <= len1 and memcmp(p0, p1, len0) == 0:
                    infill_merge(data, i0, i1)
        return 0
    # the double loop only changes anything for the pairs (i0, i1) where piece i0 is a non-empty prefix of piece
    # i1; those i1 are a contiguous run of the candidates sorted by piece; visiting them in increasing i1 for
    # each i0 in increasing order makes the same merges in the same order (logits and probabilities change,
    # pieces do not)
    refs.reserve(n)
    for k in range(n):
        ref.len = infill_piece(st, data[k].id, &ref.ptr)
        if ref.len > 0:
            ref.pos = <int64_t>k
            refs.push_back(ref)
    bankml_sort_pieces(refs.data(), refs.data() + refs.size())
    hi = <int64_t>refs.size()
    for i0 in range(n):
        if data[i0].logit == -INFINITY:
            continue
        ref.len = infill_piece(st, data[i0].id, &ref.ptr)
        if ref.len == 0:
            continue
        lo = bankml_lower_bound_piece(refs.data(), refs.data() + hi, ref)
        matches.clear()
        m = lo
        while m < hi and refs[m].len >= ref.len and memcmp(refs[m].ptr, ref.ptr, ref.len) == 0:
            if refs[m].pos != <int64_t>i0:
                matches.push_back(refs[m].pos)
            m += 1
        bankml_sort_positions(matches.data(), matches.data() + matches.size())
        for k in range(matches.size()):
            if data[i0].logit == -INFINITY:
                break
            i1 = <size_t>matches[k]
            if data[i1].logit == -INFINITY:
                continue
            infill_merge(data, i0, i1)
    return 0


cdef int apply_infill(infill_ctx& st, llama_token_data_array* cur_p, vector[llama_token_data]& tmp) except -1 nogil:
    cdef float p_txt_sum = 0, p_eog_sum = 0, p_sum, thold
    cdef size_t i, size_org, n_non_eog = 0
    cdef bint is_eog
    if cur_p.size == 0:
        with gil:  # llama.cpp asserts in the softmax
            raise SamplingError("infill: no candidates left")
    llama_sampler_softmax_impl(cur_p, True, tmp)
    for i in range(cur_p.size):
        if infill_is_eog(st, cur_p.data[i].id):
            p_eog_sum += cur_p.data[i].p
        else:
            p_txt_sum += cur_p.data[i].p
    if <float>(<float>3 * p_eog_sum) * <float>cur_p.size > p_txt_sum:
        # too little text: keep just the EOG tokens
        size_org = cur_p.size
        cur_p.size = 0
        p_sum = 0
        for i in range(size_org):
            if infill_is_eog(st, cur_p.data[i].id):
                p_sum += cur_p.data[i].p
                cur_p.data[cur_p.size] = cur_p.data[i]
                cur_p.size += 1
        for i in range(cur_p.size):
            cur_p.data[i].p /= p_sum
        return 0
    infill_combine(st, cur_p)
    size_org = cur_p.size
    p_sum = 0
    thold = <float>0.2
    cur_p.size = 0
    for i in range(size_org):
        is_eog = infill_is_eog(st, cur_p.data[i].id)
        if cur_p.data[i].p < thold and not is_eog:
            continue
        if not is_eog:
            n_non_eog += 1
        p_sum += cur_p.data[i].p
        cur_p.data[cur_p.size] = cur_p.data[i]
        cur_p.size += 1
    if n_non_eog == 0:
        # no text left: the single candidate is EOT (else EOS)
        if st.infill_eot < 0:
            with gil:  # llama.cpp asserts
                raise SamplingError("infill: no text candidate is left and the vocabulary has no EOT or EOS token")
        cur_p.size = 1
        cur_p.data[0].id = st.infill_eot
        cur_p.data[0].logit = 1
        return 0
    for i in range(cur_p.size):
        cur_p.data[i].p /= p_sum
    size_org = cur_p.size
    p_sum = 0
    thold = <float>(1.0 / <double>(n_non_eog + 1))
    cur_p.size = 0
    for i in range(size_org):
        is_eog = infill_is_eog(st, cur_p.data[i].id)
        if cur_p.data[i].p < thold and not is_eog:
            continue
        p_sum += cur_p.data[i].p
        cur_p.data[cur_p.size] = cur_p.data[i]
        cur_p.size += 1
    for i in range(cur_p.size):
        cur_p.data[i].p /= p_sum
    return 0


# --- the chain ----------------------------------------------------------------------------

# llama.cpp's llama_sampler_i, one row per sampler type: what the chain calls on a stage's context to transform
# the candidates (apply), to see the drawn token (accept), to start over (reset), to copy it (clone: a new
# context, without the state a copy must not share) and to free it (free). NULL where the sampler has nothing
# to do. Adding a sampler is its context struct (_sampler.pxd), its row here and its parameters in Sampler._add.

cdef extern from * nogil:
    """
    #include <new>

    /* A stage's context on the heap, made, copied and freed as its own type (nullptr when out of memory). */
    template <class T> static T * bankml_ctx_new(const T & value) noexcept {
        try { return new T(value); } catch (...) { return nullptr; }
    }
    template <class T> static void * bankml_ctx_clone(const void * ctx) noexcept {
        try { return new T(*static_cast<const T *>(ctx)); } catch (...) { return nullptr; }
    }
    template <class T> static void bankml_ctx_free(void * ctx) noexcept {
        delete static_cast<T *>(ctx);
    }
    """
    T* bankml_ctx_new[T](const T& value) noexcept
    void* bankml_ctx_clone[T](const void* ctx) noexcept
    void bankml_ctx_free[T](void* ctx) noexcept


cdef struct stage_scratch:
    vector[llama_token_data]* tmp       # reused by every stage of one chain_apply
    vector[llama_token_data]* buf_sort  # top-p's bucket sort buffer, kept by the Sampler

ctypedef int (*stage_apply_fn)(void*, llama_token_data_array*, stage_scratch*) except -1 nogil
ctypedef void (*stage_fn)(void*) noexcept nogil
ctypedef void (*stage_accept_fn)(void*, token_t) noexcept nogil
ctypedef void* (*stage_clone_fn)(const void*) noexcept nogil

cdef struct sampler_iface:
    const char* name                    # llama_sampler_i.name, as chain_names gives it
    stage_apply_fn apply
    stage_accept_fn accept
    stage_fn reset
    stage_clone_fn clone
    stage_fn free

cdef enum:
    N_SAMPLER_TYPES = SAMPLER_MIROSTAT_V2 + 1

cdef sampler_iface SAMPLERS[N_SAMPLER_TYPES]


cdef int _logit_bias(void* ctx, llama_token_data_array* cur_p, stage_scratch* sc) except -1 nogil:
    return apply_logit_bias((<logit_bias_ctx*>ctx)[0], cur_p)

cdef int _penalties(void* ctx, llama_token_data_array* cur_p, stage_scratch* sc) except -1 nogil:
    apply_penalties((<penalties_ctx*>ctx)[0], cur_p)
    return 0

cdef int _dry(void* ctx, llama_token_data_array* cur_p, stage_scratch* sc) except -1 nogil:
    return apply_dry((<dry_ctx*>ctx)[0], cur_p)

cdef int _top_n_sigma(void* ctx, llama_token_data_array* cur_p, stage_scratch* sc) except -1 nogil:
    apply_top_n_sigma((<top_n_sigma_ctx*>ctx)[0], cur_p)
    return 0

cdef int _top_k(void* ctx, llama_token_data_array* cur_p, stage_scratch* sc) except -1 nogil:
    return llama_sampler_top_k_impl(cur_p, (<top_k_ctx*>ctx).k, sc.tmp[0])

cdef int _typical(void* ctx, llama_token_data_array* cur_p, stage_scratch* sc) except -1 nogil:
    return apply_typical((<p_ctx*>ctx)[0], cur_p, sc.tmp[0])

cdef int _top_p(void* ctx, llama_token_data_array* cur_p, stage_scratch* sc) except -1 nogil:
    return apply_top_p((<p_ctx*>ctx)[0], cur_p, sc.buf_sort[0], sc.tmp[0])

cdef int _min_p(void* ctx, llama_token_data_array* cur_p, stage_scratch* sc) except -1 nogil:
    return apply_min_p((<p_ctx*>ctx)[0], cur_p, sc.tmp[0])

cdef int _xtc(void* ctx, llama_token_data_array* cur_p, stage_scratch* sc) except -1 nogil:
    return apply_xtc((<xtc_ctx*>ctx)[0], cur_p, sc.tmp[0])

cdef int _temp_ext(void* ctx, llama_token_data_array* cur_p, stage_scratch* sc) except -1 nogil:
    return apply_temp_ext((<temp_ctx*>ctx)[0], cur_p, sc.tmp[0])

cdef int _temp(void* ctx, llama_token_data_array* cur_p, stage_scratch* sc) except -1 nogil:
    llama_sampler_temp_impl(cur_p, (<temp_ctx*>ctx).temp)
    return 0

cdef int _dist(void* ctx, llama_token_data_array* cur_p, stage_scratch* sc) except -1 nogil:
    apply_dist((<dist_ctx*>ctx)[0], cur_p)
    return 0

cdef int _mirostat(void* ctx, llama_token_data_array* cur_p, stage_scratch* sc) except -1 nogil:
    return apply_mirostat((<mirostat_ctx*>ctx)[0], cur_p, sc.tmp[0])

cdef int _mirostat_v2(void* ctx, llama_token_data_array* cur_p, stage_scratch* sc) except -1 nogil:
    return apply_mirostat_v2((<mirostat_ctx*>ctx)[0], cur_p, sc.tmp[0])

cdef int _adaptive_p(void* ctx, llama_token_data_array* cur_p, stage_scratch* sc) except -1 nogil:
    return apply_adaptive_p((<adaptive_p_ctx*>ctx)[0], cur_p, sc.tmp[0])

cdef int _infill(void* ctx, llama_token_data_array* cur_p, stage_scratch* sc) except -1 nogil:
    return apply_infill((<infill_ctx*>ctx)[0], cur_p, sc.tmp[0])


cdef void _penalties_accept(void* ctx, token_t token) noexcept nogil:
    cdef penalties_ctx* st = <penalties_ctx*>ctx
    cdef token_t old
    if st.penalty_last_n == 0:
        return
    st.token_count[token] += 1
    if st.prev.sz >= <size_t>st.penalty_last_n:
        old = st.prev.data[st.prev.first]
        st.token_count[old] -= 1
        if st.token_count[old] == 0:
            st.token_count.erase(old)
    ring_push_back(st.prev, token)

cdef void _dry_accept(void* ctx, token_t token) noexcept nogil:
    ring_push_back((<dry_ctx*>ctx).last_tokens, token)

cdef void _adaptive_p_accept(void* ctx, token_t token) noexcept nogil:
    cdef adaptive_p_ctx* st = <adaptive_p_ctx*>ctx
    if st.pending_token_id == token and st.pending_token_idx >= 0:
        st.weighted_sum = st.original_probs[st.pending_token_idx] + st.adaptive_decay * st.weighted_sum
        st.total_weight = <float>1 + st.adaptive_decay * st.total_weight
    st.pending_token_id = -1
    st.pending_token_idx = -1


# the contexts that own a generator (seed, seed_cur, rng, as llama.cpp's do)
ctypedef fused seeded_ctx:
    xtc_ctx
    dist_ctx
    mirostat_ctx
    adaptive_p_ctx


cdef inline void seed_rng(seeded_ctx& st, uint32_t seed) noexcept nogil:
    st.seed = seed
    st.seed_cur = get_rng_seed(seed)
    st.rng.seed(st.seed_cur)


cdef inline void reseed(seeded_ctx& st) noexcept nogil:
    st.seed_cur = get_rng_seed(st.seed)
    st.rng.seed(st.seed_cur)


cdef void _penalties_reset(void* ctx) noexcept nogil:
    ring_clear((<penalties_ctx*>ctx).prev)
    (<penalties_ctx*>ctx).token_count.clear()

cdef void _dry_reset(void* ctx) noexcept nogil:
    cdef dry_ctx* st = <dry_ctx*>ctx
    ring_clear(st.last_tokens)
    st.dry_repeat_count.clear()
    st.dry_max_token_repeat.clear()

cdef void _xtc_reset(void* ctx) noexcept nogil:
    reseed((<xtc_ctx*>ctx)[0])

cdef void _dist_reset(void* ctx) noexcept nogil:
    reseed((<dist_ctx*>ctx)[0])

cdef void _mirostat_reset(void* ctx) noexcept nogil:
    cdef mirostat_ctx* st = <mirostat_ctx*>ctx
    st.mu = <float>2 * st.tau
    reseed(st[0])

cdef void _adaptive_p_reset(void* ctx) noexcept nogil:
    adaptive_p_reset((<adaptive_p_ctx*>ctx)[0])
    reseed((<adaptive_p_ctx*>ctx)[0])


cdef void* _adaptive_p_clone(const void* ctx) noexcept nogil:
    # llama_sampler_adaptive_p_clone copies the moving average and the pending token, not the generator: the
    # clone's is seeded afresh from the seed
    cdef void* copy = bankml_ctx_clone[adaptive_p_ctx](ctx)
    if copy != NULL:
        reseed((<adaptive_p_ctx*>copy)[0])
    return copy


cdef void _row(sampler_type t, const char* name, stage_apply_fn apply, stage_accept_fn accept, stage_fn reset,
               stage_clone_fn clone, stage_fn free) noexcept:
    SAMPLERS[<int>t].name = name
    SAMPLERS[<int>t].apply = apply
    SAMPLERS[<int>t].accept = accept
    SAMPLERS[<int>t].reset = reset
    SAMPLERS[<int>t].clone = clone
    SAMPLERS[<int>t].free = free


cdef void _init_samplers() noexcept:
    cdef int i
    for i in range(N_SAMPLER_TYPES):
        _row(<sampler_type>i, NULL, NULL, NULL, NULL, NULL, NULL)
    _row(SAMPLER_LOGIT_BIAS, "logit-bias", _logit_bias, NULL, NULL,
         bankml_ctx_clone[logit_bias_ctx], bankml_ctx_free[logit_bias_ctx])
    _row(SAMPLER_PENALTIES, "penalties", _penalties, _penalties_accept, _penalties_reset,
         bankml_ctx_clone[penalties_ctx], bankml_ctx_free[penalties_ctx])
    _row(SAMPLER_DRY, "dry", _dry, _dry_accept, _dry_reset, bankml_ctx_clone[dry_ctx], bankml_ctx_free[dry_ctx])
    _row(SAMPLER_TOP_N_SIGMA, "top-n-sigma", _top_n_sigma, NULL, NULL,
         bankml_ctx_clone[top_n_sigma_ctx], bankml_ctx_free[top_n_sigma_ctx])
    _row(SAMPLER_TOP_K, "top-k", _top_k, NULL, NULL, bankml_ctx_clone[top_k_ctx], bankml_ctx_free[top_k_ctx])
    _row(SAMPLER_TYPICAL_P, "typical", _typical, NULL, NULL, bankml_ctx_clone[p_ctx], bankml_ctx_free[p_ctx])
    _row(SAMPLER_TOP_P, "top-p", _top_p, NULL, NULL, bankml_ctx_clone[p_ctx], bankml_ctx_free[p_ctx])
    _row(SAMPLER_MIN_P, "min-p", _min_p, NULL, NULL, bankml_ctx_clone[p_ctx], bankml_ctx_free[p_ctx])
    _row(SAMPLER_XTC, "xtc", _xtc, NULL, _xtc_reset, bankml_ctx_clone[xtc_ctx], bankml_ctx_free[xtc_ctx])
    _row(SAMPLER_TEMPERATURE, "temp-ext", _temp_ext, NULL, NULL, bankml_ctx_clone[temp_ctx], bankml_ctx_free[temp_ctx])
    _row(SAMPLER_TEMP, "temp", _temp, NULL, NULL, bankml_ctx_clone[temp_ctx], bankml_ctx_free[temp_ctx])
    _row(SAMPLER_DIST, "dist", _dist, NULL, _dist_reset, bankml_ctx_clone[dist_ctx], bankml_ctx_free[dist_ctx])
    _row(SAMPLER_MIROSTAT, "mirostat", _mirostat, NULL, _mirostat_reset,
         bankml_ctx_clone[mirostat_ctx], bankml_ctx_free[mirostat_ctx])
    _row(SAMPLER_MIROSTAT_V2, "mirostat-v2", _mirostat_v2, NULL, _mirostat_reset,
         bankml_ctx_clone[mirostat_ctx], bankml_ctx_free[mirostat_ctx])
    _row(SAMPLER_ADAPTIVE_P, "adaptive-p", _adaptive_p, _adaptive_p_accept, _adaptive_p_reset,
         _adaptive_p_clone, bankml_ctx_free[adaptive_p_ctx])
    _row(SAMPLER_INFILL, "infill", _infill, NULL, NULL, bankml_ctx_clone[infill_ctx], bankml_ctx_free[infill_ctx])


_init_samplers()


cdef int chain_apply(vector[chain_stage]& chain, llama_token_data_array* cur_p,
                     vector[llama_token_data]& buf_sort) except -1 nogil:
    cdef size_t s
    cdef vector[llama_token_data] tmp
    cdef stage_scratch sc
    sc.tmp = &tmp
    sc.buf_sort = &buf_sort
    for s in range(chain.size()):
        SAMPLERS[<int>chain[s].type].apply(chain[s].ctx, cur_p, &sc)
    return 0


cdef int chain_accept(vector[chain_stage]& chain, token_t token) except -1 nogil:
    cdef size_t s
    cdef stage_accept_fn accept
    for s in range(chain.size()):
        accept = SAMPLERS[<int>chain[s].type].accept
        if accept != NULL:
            accept(chain[s].ctx, token)
    return 0


cdef void chain_reset(vector[chain_stage]& chain) noexcept nogil:
    cdef size_t s
    cdef stage_fn reset
    for s in range(chain.size()):
        reset = SAMPLERS[<int>chain[s].type].reset
        if reset != NULL:
            reset(chain[s].ctx)


cdef int chain_clone(const vector[chain_stage]& chain, vector[chain_stage]& copy) except -1:
    """copy (empty) gets a stage per stage of chain, each with a context of its own (llama_sampler_clone)."""
    cdef size_t s
    cdef chain_stage st
    copy.reserve(chain.size())
    for s in range(chain.size()):
        st.type = chain[s].type
        st.ctx = SAMPLERS[<int>st.type].clone(chain[s].ctx)
        if st.ctx == NULL:
            raise MemoryError()
        copy.push_back(st)
    return 0


cdef void chain_free(vector[chain_stage]& chain) noexcept nogil:
    cdef size_t s
    for s in range(chain.size()):
        SAMPLERS[<int>chain[s].type].free(chain[s].ctx)
    chain.clear()


cdef int push_stage(vector[chain_stage]& chain, sampler_type type, void* ctx) except -1:
    """Append a stage that owns ctx (a context bankml_ctx_new made: NULL when it ran out of memory)."""
    cdef chain_stage st
    if ctx == NULL:
        raise MemoryError()
    st.type = type
    st.ctx = ctx
    try:
        chain.push_back(st)
    except MemoryError:
        SAMPLERS[<int>type].free(ctx)
        raise
    return 0


# llama_sampler_init_dry's limits: a breaker is cut to its first MAX_CHAR_LEN bytes, a tail's tokenization to
# its first MAX_SEQ_LEN tokens. llama.cpp limits neither the number of breakers nor their total size.
DRY_MAX_CHAR_LEN = 40
DRY_MAX_SEQ_LEN = 20
# processed breakers kept per vocabulary (one entry per distinct breaker after the cut), least recently used
# dropped first, so requests with ever new breakers cannot grow the cache without bound
_DRY_CACHE_ENTRIES = 256
# id(vocab) -> (weak reference, {breaker bytes: processed}); keyed by identity, as a Vocab is unhashable, and
# dropped when the vocabulary dies
_DRY_BREAKER_CACHE = {}


def _dry_cache_for(vocab):
    key = id(vocab)
    entry = _DRY_BREAKER_CACHE.get(key)
    if entry is not None and entry[0]() is vocab:
        return entry[1]
    try:
        ref = weakref.ref(vocab, lambda _, key=key: _DRY_BREAKER_CACHE.pop(key, None))
    except TypeError:
        return {}          # not weakly referenceable: no cache
    per_vocab = {}
    _DRY_BREAKER_CACHE[key] = (ref, per_vocab)
    return per_vocab


class _DryTokenizerMissing(ValueError):
    pass


def _dry_breaker_bytes(breaker):
    """The bytes llama.cpp processes for one breaker: its UTF-8 up to the first NUL (llama.cpp passes the
    breakers as C strings), cut to DRY_MAX_CHAR_LEN bytes; b"" when it skips the breaker."""
    try:
        raw = breaker.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"Invalid dry_sequence_breakers: {breaker!r} is not valid Unicode text") from None
    nul = raw.find(b"\0")
    if nul >= 0:
        raw = raw[:nul]
    return raw[:DRY_MAX_CHAR_LEN]


cdef struct tail_match:
    int32_t token
    int32_t start          # the tail is breaker[start:]; start == breaker length: the piece contains it


cdef int scan_overlaps(const unsigned char* buf, const int64_t* offsets, Py_ssize_t n,
                       const unsigned char* s, Py_ssize_t sl, vector[tail_match]& out) except -1 nogil:
    # get_overlapping_token_sequences' scan: a piece containing the breaker gives the empty tail; each
    # occurrence of the breaker's first byte from which the rest of the piece is a proper prefix of the breaker
    # gives the tail after that prefix
    cdef Py_ssize_t t, wl, pos, i, start
    cdef const unsigned char* w
    cdef bint match, found
    cdef tail_match m
    cdef unsigned char first = s[0]
    for t in range(n):
        w = buf + offsets[t]
        wl = offsets[t + 1] - offsets[t]
        found = False
        if sl <= wl:
            for start in range(wl - sl + 1):
                if w[start] == first and memcmp(w + start, s, sl) == 0:
                    found = True
                    break
        m.token = <int32_t>t
        if found:
            m.start = <int32_t>sl
            out.push_back(m)
            continue
        for pos in range(wl):
            if w[pos] != first:
                continue
            match = True
            i = 1
            while i < sl and i + pos < wl:
                if w[pos + i] != s[i]:
                    match = False
                    break
                i += 1
            if match:
                m.start = <int32_t>i
                out.push_back(m)
    return 0


def _flat_pieces(vocab, pieces):
    """All pieces in one buffer with their offsets (kept with a Vocab's derived structures)."""
    derived = getattr(vocab, "_derived", None)
    if isinstance(derived, dict) and "flat_pieces" in derived:
        return derived["flat_pieces"]
    lengths = np.fromiter((len(p) for p in pieces), dtype=np.int64, count=len(pieces))
    offsets = np.zeros(len(pieces) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    flat = (b"".join(pieces), offsets)
    if isinstance(derived, dict):
        derived["flat_pieces"] = flat
    return flat


def _overlapping_tails(vocab, list pieces, bytes breaker):
    """For each token whose piece overlaps the breaker, (token, [tails]): b"" when the piece contains it."""
    cdef bytes buf
    cdef const int64_t[::1] offsets
    cdef vector[tail_match] out
    cdef const unsigned char* s = breaker
    cdef const unsigned char* b
    cdef Py_ssize_t sl = len(breaker), n = len(pieces)
    cdef size_t k
    buf, offsets_array = _flat_pieces(vocab, pieces)
    offsets = offsets_array
    b = buf
    with nogil:
        scan_overlaps(b, &offsets[0], n, s, sl, out)
    result = []
    last = -1
    tails = None
    for k in range(out.size()):
        token = out[k].token
        tail = breaker[out[k].start:]
        if token == last:
            tails.append(tail)        # (no negative indexing: the module is built without wraparound)
        else:
            tails = [tail]
            result.append((token, tails))
            last = token
    return result


def _infill_data(vocab, n):
    """What the infill sampler reads of a vocabulary: all pieces in one buffer with their offsets, a flag byte per
    token (INFILL_EOG: llama_vocab_is_eog; INFILL_NO_TEXT: a control or unknown token, which
    token_to_piece(special=false) renders empty) and token_eot, else token_eos, else -1. A vocabulary without
    token attributes (a hand-made Vocab) renders every piece as given and has no EOT/EOS token."""
    pieces = getattr(vocab, "pieces", None)
    if not isinstance(pieces, list) or (pieces and type(pieces[0]) is not bytes):
        if not hasattr(vocab, "piece"):
            raise ValueError("Invalid samplers: infill needs a vocabulary with pieces and end-of-generation tokens "
                             "(a bankml.Vocab)")
        pieces = [bytes(vocab.piece(t)) for t in range(n)]
    if len(pieces) != n:
        raise ValueError("Invalid samplers: infill needs one piece per token of the vocabulary")
    buf, offsets = _flat_pieces(vocab, pieces)
    eog = getattr(vocab, "eog_mask", None)
    if eog is None:
        if not hasattr(vocab, "is_eog"):
            raise ValueError("Invalid samplers: infill needs the vocabulary's end-of-generation tokens (is_eog)")
        eog = np.fromiter((bool(vocab.is_eog(t)) for t in range(n)), dtype=np.bool_, count=n)
    flags = np.where(np.asarray(eog, dtype=np.bool_), INFILL_EOG, 0).astype(np.uint8)
    attrs = getattr(vocab, "token_attrs", None)
    if attrs is not None:
        flags[(np.asarray(attrs) & (ATTR_UNKNOWN | ATTR_CONTROL)) != 0] |= INFILL_NO_TEXT
    special = (getattr(vocab, "info", None) or {}).get("special_ids") or {}
    eot = special.get("eot")
    if eot is None:
        eot = special.get("eos")
    if eot is None or not 0 <= eot < n:
        eot = -1
    return buf, offsets, flags, int(eot)


def _dry_breakers(vocab, breakers):
    """get_overlapping_token_sequences for every breaker: head token -> the tokenized tails.

    The byte scan runs over every piece once per distinct breaker and vocabulary (cached, least recently used
    first out); a tokenizer is called only for tails that are not empty -- never for a breaker of one byte,
    llama-server's defaults included -- and once per distinct tail."""
    per_vocab = _dry_cache_for(vocab)
    whole_key = ("breaker list",) + tuple(breakers)
    merged = per_vocab.pop(whole_key, None)
    if merged is not None:
        per_vocab[whole_key] = merged
        return merged
    tokenize = _vocab_tokenizer(vocab)
    result = {}
    for breaker in breakers:
        raw = _dry_breaker_bytes(breaker)
        if not raw:
            continue   # llama.cpp skips empty breakers
        key = raw   # a vocabulary's tokenizer is fixed for its lifetime
        entry = per_vocab.pop(key, None)
        if entry is None:
            entry = _process_breaker(vocab, raw, tokenize, breaker)
        per_vocab[key] = entry          # most recently used last
        while len(per_vocab) > _DRY_CACHE_ENTRIES:
            del per_vocab[next(iter(per_vocab))]
        for token_id, seqs in entry:
            have = result.get(token_id)
            if have is None:
                result[token_id] = dict.fromkeys(seqs)
            else:
                have.update(dict.fromkeys(seqs))
    merged = {token_id: [list(seq) for seq in seqs] for token_id, seqs in result.items()}
    per_vocab[whole_key] = merged        # the whole list too: requests repeat theirs
    while len(per_vocab) > _DRY_CACHE_ENTRIES:
        del per_vocab[next(iter(per_vocab))]
    return merged


def _process_breaker(vocab, bytes raw, tokenize, breaker):
    pieces = getattr(vocab, "pieces", None)
    if not isinstance(pieces, list) or (pieces and type(pieces[0]) is not bytes):
        pieces = [bytes(vocab.piece(t)) for t in range(len(vocab))]
    tokenized = {b"": ()}
    entry = []
    for token_id, tails in _overlapping_tails(vocab, pieces, raw):
        seqs = []
        for tail in tails:
            seq = tokenized.get(tail)
            if seq is None:
                if tokenize is None:
                    raise ValueError(
                        f"Invalid dry_sequence_breakers: {breaker!r} overlaps the end of token {token_id} "
                        f"({pieces[token_id]!r}), and llama.cpp tokenizes the rest ({tail!r}): give the vocabulary "
                        "a tokenizer (Vocab.with_tokenizer, see bankml.integrations.adapters)")
                seq = tuple(int(x) for x in tokenize(tail, False, False))[:DRY_MAX_SEQ_LEN]
                tokenized[tail] = seq
            if seq not in seqs:
                seqs.append(seq)
        entry.append((token_id, tuple(seqs)))
    return entry


cdef class Sampler:
    """llama-server's sampling (common_sampler_init + common_sampler_sample with grammar_first=false).

    sample(logits) draws a token id from float32 logits of shape (n_vocab,); accept(token) records a
    generated token (grammar, penalty and DRY history); prefill(tokens) feeds prompt tokens to the
    grammar only. The chain works on its own copy of the logits.
    """

    def __init__(self, params, vocab, grammar=None, reasoning_budget=None):
        cdef logit_bias_ctx logit_bias
        cdef adaptive_p_ctx adaptive_p
        cdef dist_ctx dist
        cdef temp_ctx temp_stage
        cdef mirostat_ctx mirostat
        cdef logit_bias_entry entry
        cdef float temp
        if params is None:
            params = SamplerParams()
        if not isinstance(params, SamplerParams):
            raise TypeError(f"params must be SamplerParams, got {type(params).__name__}")
        self.params = params
        self.vocab = vocab
        self.grammar = grammar
        if reasoning_budget is not None and not isinstance(reasoning_budget, ReasoningBudget):
            raise TypeError(f"reasoning_budget must be a ReasoningBudget, got {type(reasoning_budget).__name__}")
        self.reasoning_budget = reasoning_budget
        self.n_vocab = len(vocab)
        if grammar is not None and getattr(grammar, "vocab", vocab) is not None \
                and len(grammar.vocab) != self.n_vocab:
            raise ValueError("Invalid grammar: its vocabulary is not the sampler's")
        chain_free(self.chain)
        temp = params.temperature
        if params.logit_bias:
            for token, bias in params.logit_bias:
                if not 0 <= token < self.n_vocab:
                    raise ValueError(f"Invalid logit_bias: token {token} is outside [0, {self.n_vocab})")
                entry.token = token
                entry.bias = bias
                logit_bias.biases.push_back(entry)
            push_stage(self.chain, SAMPLER_LOGIT_BIAS, bankml_ctx_new[logit_bias_ctx](logit_bias))
        if params.mirostat == 0:
            for name in params.samplers:
                if name != "adaptive_p":
                    self._add(name)
            if "adaptive_p" in params.samplers:
                # like dist and mirostat it selects the token, so common_sampler_init puts it last, in dist's place
                adaptive_p.adaptive_target = params.adaptive_target
                adaptive_p.adaptive_decay = clamp_float(params.adaptive_decay, 0, <float>0.99)
                adaptive_p_reset(adaptive_p)
                seed_rng(adaptive_p, <uint32_t>params.seed)
                push_stage(self.chain, SAMPLER_ADAPTIVE_P, bankml_ctx_new[adaptive_p_ctx](adaptive_p))
            else:
                seed_rng(dist, <uint32_t>params.seed)
                push_stage(self.chain, SAMPLER_DIST, bankml_ctx_new[dist_ctx](dist))
        else:
            if temp != 1:
                temp_stage.temp = temp
                temp_stage.delta = 0
                temp_stage.exponent = 1
                push_stage(self.chain, SAMPLER_TEMP, bankml_ctx_new[temp_ctx](temp_stage))
            mirostat.n_vocab = <int32_t>self.n_vocab
            mirostat.m = 100
            mirostat.tau = params.mirostat_tau
            mirostat.eta = params.mirostat_eta
            mirostat.mu = <float>2 * mirostat.tau
            seed_rng(mirostat, <uint32_t>params.seed)
            push_stage(self.chain, SAMPLER_MIROSTAT if params.mirostat == 1 else SAMPLER_MIROSTAT_V2,
                       bankml_ctx_new[mirostat_ctx](mirostat))
        self.cur.resize(self.n_vocab)

    def __dealloc__(self):
        chain_free(self.chain)

    def _add(self, name):
        cdef penalties_ctx penalties
        cdef dry_ctx dry
        cdef top_n_sigma_ctx top_n_sigma
        cdef top_k_ctx top_k
        cdef p_ctx cutoff
        cdef xtc_ctx xtc
        cdef temp_ctx temperature
        cdef infill_ctx infill
        cdef const unsigned char* pieces_buf
        cdef const int64_t[::1] offsets_view
        cdef const unsigned char[::1] flags_view
        p = self.params
        cdef size_t min_keep = p.min_keep
        if name == "penalties":
            if p.repeat_last_n == 0 or (p.repeat_penalty == 1 and p.frequency_penalty == 0 and p.presence_penalty == 0):
                return
            penalties.penalty_last_n = p.repeat_last_n
            penalties.penalty_repeat = p.repeat_penalty
            penalties.penalty_freq = p.frequency_penalty
            penalties.penalty_present = p.presence_penalty
            ring_init(penalties.prev, p.repeat_last_n)
            push_stage(self.chain, SAMPLER_PENALTIES, bankml_ctx_new[penalties_ctx](penalties))
        elif name == "dry":
            if not (p.dry_multiplier != 0 and p.dry_base >= 1 and p.dry_penalty_last_n != 0):
                return
            dry.dry_multiplier = p.dry_multiplier
            dry.dry_base = p.dry_base
            dry.dry_allowed_length = p.dry_allowed_length
            dry.dry_penalty_last_n = p.dry_penalty_last_n
            for head, tails in _dry_breakers(self.vocab, p.dry_sequence_breakers).items():
                dry.dry_processed_breakers[head] = tails     # (copied: the cached lists stay unchanged)
            ring_init(dry.last_tokens, p.dry_penalty_last_n)
            push_stage(self.chain, SAMPLER_DRY, bankml_ctx_new[dry_ctx](dry))
        elif name == "top_n_sigma":
            if p.top_n_sigma <= 0:
                return
            top_n_sigma.n = p.top_n_sigma
            push_stage(self.chain, SAMPLER_TOP_N_SIGMA, bankml_ctx_new[top_n_sigma_ctx](top_n_sigma))
        elif name == "top_k":
            top_k.k = p.top_k
            push_stage(self.chain, SAMPLER_TOP_K, bankml_ctx_new[top_k_ctx](top_k))
        elif name == "typ_p":
            if p.typical_p >= 1:
                return
            cutoff.p = p.typical_p
            cutoff.min_keep = min_keep
            push_stage(self.chain, SAMPLER_TYPICAL_P, bankml_ctx_new[p_ctx](cutoff))
        elif name == "top_p":
            if p.top_p >= 1:
                return
            cutoff.p = p.top_p
            cutoff.min_keep = min_keep
            push_stage(self.chain, SAMPLER_TOP_P, bankml_ctx_new[p_ctx](cutoff))
        elif name == "min_p":
            if p.min_p <= 0:
                return
            cutoff.p = p.min_p
            cutoff.min_keep = min_keep
            push_stage(self.chain, SAMPLER_MIN_P, bankml_ctx_new[p_ctx](cutoff))
        elif name == "xtc":
            if p.xtc_probability <= 0 or p.xtc_threshold > 0.5:
                return
            xtc.p = p.xtc_probability
            xtc.threshold = p.xtc_threshold
            xtc.min_keep = min_keep
            seed_rng(xtc, <uint32_t>p.seed)
            push_stage(self.chain, SAMPLER_XTC, bankml_ctx_new[xtc_ctx](xtc))
        elif name == "temperature":
            if p.temperature == 1 and p.dynatemp_range <= 0:
                return
            temperature.temp = p.temperature
            temperature.delta = p.dynatemp_range
            temperature.exponent = p.dynatemp_exponent
            push_stage(self.chain, SAMPLER_TEMPERATURE, bankml_ctx_new[temp_ctx](temperature))
        elif name == "infill":
            if self.infill_data is None:
                self.infill_data = _infill_data(self.vocab, self.n_vocab)
            buf, offsets, flags, eot = self.infill_data
            pieces_buf = buf
            offsets_view = offsets
            flags_view = flags
            infill.infill_pieces = pieces_buf
            infill.infill_offsets = &offsets_view[0]
            infill.infill_flags = &flags_view[0]
            infill.infill_eot = eot
            push_stage(self.chain, SAMPLER_INFILL, bankml_ctx_new[infill_ctx](infill))
        else:  # pragma: no cover - SamplerParams only lets the names above through
            raise ValueError(f"Invalid samplers: {name!r}")

    cdef int set_logits(self, const float* logits) except -1 nogil:
        cdef int64_t i
        cdef llama_token_data* data = self.cur.data()
        for i in range(self.n_vocab):
            data[i].id = <int32_t>i
            data[i].logit = logits[i]
            data[i].p = 0
        return 0

    cdef int64_t draw(self) except -2 nogil:
        # one pass of the chain over the candidates set_logits left; the drawn id, or -1 if none
        cdef llama_token_data_array cur_p
        cur_p.data = self.cur.data()
        cur_p.size = self.cur.size()
        cur_p.selected = -1
        cur_p.sorted = False
        chain_apply(self.chain, &cur_p, self.buf_sort)
        self.last_p = cur_p
        if cur_p.selected < 0 or <size_t>cur_p.selected >= cur_p.size:
            return -1
        return cur_p.data[cur_p.selected].id

    def _check(self, logits):
        if not isinstance(logits, np.ndarray) or logits.dtype != np.float32 or logits.ndim != 1 \
                or logits.shape[0] != self.n_vocab:
            raise ValueError(
                f"Invalid logits: expected float32 of shape ({self.n_vocab},), got "
                f"{getattr(logits, 'dtype', type(logits).__name__)} of shape {getattr(logits, 'shape', None)}")
        return np.ascontiguousarray(logits)

    def sample(self, logits):
        """Draw the next token id as llama-server does (common_sampler_sample, grammar_first=false).

        The chain draws once; only the drawn token is checked against the grammar. If the grammar
        rejects it, the chain runs again from the original logits with the grammar's rejections at
        -inf, drawing from the same generators.
        """
        # (the arrays' memory is read through pointers, with no typed memoryview: a draw allocates no object
        # the cyclic GC tracks, so a collection of the caller's objects never starts inside it)
        cdef cnp.ndarray values = self._check(logits)
        cdef cnp.ndarray masked
        cdef const float* data = <const float*>cnp.PyArray_DATA(values)
        cdef int64_t token
        if self.reasoning_budget is not None and self.reasoning_budget.forced_token is not None:
            # the reasoning budget constrains the candidates first (common_sampler_sample), in both draws
            logits = self.reasoning_budget.apply(np.array(logits, dtype=np.float32, copy=True))
            values = self._check(logits)
            data = <const float*>cnp.PyArray_DATA(values)
        with nogil:
            self.set_logits(data)
            token = self.draw()
        if self._grammar_applies() and (token < 0 or not self.grammar.allows(token)):
            masked = np.array(logits, dtype=np.float32, copy=True)
            self.grammar.apply(masked)
            data = <const float*>cnp.PyArray_DATA(masked)
            self.n_redraws += 1
            with nogil:
                self.set_logits(data)
                token = self.draw()
            if token >= 0 and not self.grammar.allows(token):
                # every token the grammar allows was at -inf or NaN (in the logits or after the chain), so the
                # redraw fell on a rejected one: llama.cpp accepts it and then aborts in the grammar
                raise NoAllowedTokenError(
                    f"no token the grammar allows can be sampled: the redraw gave token {int(token)}, which the "
                    "grammar rejects (every allowed token has a logit of -inf or NaN, or the grammar allows no "
                    "token of this vocabulary)")
        if token < 0:
            raise SamplingError("no selected token during sampling - check your sampling configuration")
        return int(token)

    def _grammar_applies(self):
        """grammar_should_apply: a lazy grammar beside a reasoning budget is left out while the budget is inside
        a reasoning block (counting, forcing), so that a trigger in the reasoning starts nothing."""
        if self.grammar is None:
            return False
        if self.reasoning_budget is None or not getattr(self.grammar, "lazy", False):
            return True
        state = self.reasoning_budget.state
        return state == REASONING_BUDGET_IDLE or state == REASONING_BUDGET_DONE

    def candidates(self):
        """common_sampler_get_candidates(do_sort=true) after the last sample(): ``(ids, p)`` (int32 and float32
        arrays) of the candidates the chain left in its last draw (the redraw when the grammar rejected the first
        one), sorted by probability, highest first, with the same std::sort llama.cpp calls when the chain left
        them unsorted (llama-server's ``post_sampling_probs``). Empty before the first sample()."""
        cdef llama_token_data_array* cur_p = &self.last_p
        cdef size_t i
        cdef int32_t[::1] ids_view
        cdef float[::1] p_view
        if self.cur.size() == 0 or cur_p.data == NULL:
            return np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.float32)
        if not cur_p.sorted:
            bankml_sort_by_p(cur_p.data, cur_p.data + cur_p.size)
            cur_p.sorted = True
        ids = np.empty(cur_p.size, dtype=np.int32)
        probs = np.empty(cur_p.size, dtype=np.float32)
        ids_view = ids
        p_view = probs
        for i in range(cur_p.size):
            ids_view[i] = cur_p.data[i].id
            p_view[i] = cur_p.data[i].p
        return ids, probs

    def accept(self, token):
        """common_sampler_accept(token, is_generated=true): the reasoning budget, the grammar (where it applies;
        a lazy grammar left out of a reasoning block is fed the end sequence that closed it), then the chain's
        histories."""
        token = int(token)
        if not 0 <= token < self.n_vocab:
            raise ValueError(f"Invalid token id: {token} is outside [0, {self.n_vocab})")
        accept_grammar = self._grammar_applies()
        if self.reasoning_budget is not None:
            self.reasoning_budget.accept(token)
            if self.grammar is not None and not accept_grammar and \
                    self.reasoning_budget.state == REASONING_BUDGET_DONE:
                end = self.reasoning_budget.end_match
                if end:
                    for t in end:
                        self.grammar.accept(int(t))
        if accept_grammar:
            self.grammar.accept(token)
        chain_accept(self.chain, <token_t>token)

    def accept_prompt(self, tokens):
        """common_sampler_accept(token, is_generated=false) for each prompt token, as llama-server's slot does
        before the first draw: the penalty and DRY histories see the prompt; the grammar does not."""
        cdef int64_t token
        for t in tokens:
            token = int(t)
            if not 0 <= token < self.n_vocab:
                raise ValueError(f"Invalid token id: {token} is outside [0, {self.n_vocab})")
            chain_accept(self.chain, <token_t>token)

    def prefill(self, tokens):
        """Prompt tokens the template already placed (the generation prompt): they advance the grammar and the
        reasoning budget (common_sampler_init's prefill), not the histories."""
        tokens = [int(t) for t in tokens]
        if self.grammar is not None:
            for token in tokens:
                self.grammar.accept(token)
        if self.reasoning_budget is not None:
            for token in tokens:
                self.reasoning_budget.accept(token)

    def clone(self):
        """An independent copy: generators, histories and the grammar state (as llama_sampler_clone: adaptive-p's
        generator is seeded afresh)."""
        cdef Sampler other = Sampler.__new__(Sampler)
        cdef size_t i
        other.params = self.params
        other.vocab = self.vocab
        other.grammar = self.grammar.clone() if self.grammar is not None else None
        other.reasoning_budget = self.reasoning_budget.clone() if self.reasoning_budget is not None else None
        other.n_vocab = self.n_vocab
        chain_clone(self.chain, other.chain)
        other.infill_data = self.infill_data
        other.cur.resize(self.n_vocab)
        other.n_redraws = self.n_redraws
        return other

    def reset(self, grammar=True):
        """llama_sampler_reset on the chain (generators reseeded, histories cleared); with grammar=True
        the grammar and the reasoning budget go back to their start too (common_sampler_reset leaves both
        alone)."""
        chain_reset(self.chain)
        if grammar and self.grammar is not None:
            self.grammar.reset()
        if grammar and self.reasoning_budget is not None:
            self.reasoning_budget.reset()

    @property
    def chain_names(self):
        """The samplers of the chain as llama.cpp names them (disabled ones are left out, as llama.cpp
        replaces them with empty samplers that do nothing)."""
        return tuple(SAMPLERS[<int>self.chain[i].type].name.decode() for i in range(self.chain.size()))

    def __reduce__(self):
        raise TypeError("Sampler is not picklable; use clone()")


# --- llama-server's token probabilities (get_token_probabilities, tools/server/server-common.cpp) ------------

def token_probabilities(logits, n_top):
    """llama-server's ``get_token_probabilities(ctx, idx, n_top)`` over raw float32 logits: ``(ids, p)``, the
    int32 token ids and float32 probabilities of all n_vocab candidates in the order llama-server leaves them.

    The first ``min(n_top, n_vocab)`` are the highest logits, highest first, from the same ``std::partial_sort``
    (libstdc++'s heap select then sort_heap, so ties land where llama-server's land); the rest are in the order
    the heap select leaves them (the original order, except that each place where a larger logit entered the heap
    now holds the heap's former minimum). The softmax runs over all n_vocab candidates in that order, as
    llama-server's loop does: the maximum (``cur[0]`` when n_top > 0, else a scan), ``expf(logit - max)`` summed
    in float32 one after the other, then each divided by the sum. The logits are the model's, before any
    sampler, logit bias or grammar: llama-server's pre-sampling numbers ignore the grammar."""
    if not isinstance(logits, np.ndarray) or logits.dtype != np.float32 or logits.ndim != 1:
        raise ValueError(f"Invalid logits: expected a float32 vector, got "
                         f"{getattr(logits, 'dtype', type(logits).__name__)} of shape {getattr(logits, 'shape', None)}")
    if isinstance(n_top, bool) or not isinstance(n_top, numbers.Integral) or n_top < 0:
        raise ValueError(f"Invalid n_top: expected a non-negative integer, got {n_top!r}")
    cdef const float[::1] view = np.ascontiguousarray(logits)
    cdef size_t n = view.shape[0]
    cdef size_t top = min(<size_t>n_top, n) if n_top < 2**62 else n
    cdef vector[llama_token_data] cur
    cdef size_t i
    cdef float max_l, p, cum_sum
    ids = np.empty(n, dtype=np.int32)
    probs = np.empty(n, dtype=np.float32)
    cdef int32_t[::1] ids_view = ids
    cdef float[::1] p_view = probs
    if n == 0:
        return ids, probs
    with nogil:
        cur.resize(n)
        for i in range(n):
            cur[i].id = <int32_t>i
            cur[i].logit = view[i]
            cur[i].p = 0
        if top > 0:
            bankml_partial_sort_by_logit(cur.data(), cur.data() + top, cur.data() + n)
        max_l = -INFINITY
        if top > 0:
            max_l = cur[0].logit
        else:
            for i in range(n):
                if max_l < cur[i].logit:     # std::max(max_l, logit): keeps max_l unless logit is larger
                    max_l = cur[i].logit
        cum_sum = 0
        for i in range(n):
            p = expf(cur[i].logit - max_l)
            cur[i].p = p
            cum_sum += p
        for i in range(n):
            cur[i].p /= cum_sum
            ids_view[i] = cur[i].id
            p_view[i] = cur[i].p
    return ids, probs


def token_logarithm(x):
    """completion_token_output::logarithm: ``std::log`` of a float probability in float32 (logf), the lowest float
    instead of -inf for 0 (nlohmann's JSON would print -inf as null)."""
    cdef float v = <float>x
    if v == 0:
        return -FLT_MAX_VALUE
    return <double>logf(v)

