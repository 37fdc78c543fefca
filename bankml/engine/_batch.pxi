# Included by _grammar.pyx. The batch API a serving engine calls once per step: fill_next_token_bitmasks
# (every row of a batch's int32 bitmask in one call, without the GIL, spread over the pool threads of
# _batchpool.h) and apply_token_bitmask_inplace (that bitmask onto the batch's float32 logits, in place,
# as XGrammar's CPU kernel applies its own). Owns BatchPool (the process's pool and its threads) and the
# row jobs. A matcher's state is read under the matcher's own lock, held for the whole batch; the context
# is reached only through MatchContext's locked entry points (mask_into, partial_mask_into).
# Declarations: _grammar.pxd.

cdef enum:
    ROW_FAST = 0        # a state on a whole character: the fast path (MatchContext.mask_into)
    ROW_PARTIAL = 1     # a state inside a character: its candidates (MatchContext.partial_mask_into)
    ROW_ALL = 2         # a lazy grammar awaiting its trigger: every token of the vocabulary
    ROW_LATER = 3       # answered after the batch, with the GIL (no candidate can continue the character)

# The most threads a batch spreads over (the calling thread included).
cdef int MAX_BATCH_THREADS = 256


# a row's fill through the context's locked entry points, called as noexcept (fill_row clears the error)
ctypedef int (*row_call)(mask_row* row) noexcept nogil


cdef int fast_row(mask_row* row) except -1 nogil:
    return (<MatchContext>row.ctx).mask_into(deref(row.stacks), row.out)


cdef int partial_row(mask_row* row) except -1 nogil:
    return (<MatchContext>row.ctx).partial_mask_into(deref(row.stacks), row.partial, &row.vocab, row.candidates,
                                                     row.n_candidates, row.out)


cdef void fill_row(void* job, int64_t item) noexcept nogil:
    """One row of a batch (a batch_task): status 0 when written, else the row is answered after the batch
    with the GIL, as fill_next_token_bitmask answers it (the reference path past a bound of the fast one)."""
    cdef mask_row* row = (<mask_row*>job) + item
    cdef int64_t width
    cdef int status = 2
    if row.kind == ROW_ALL:
        width = (row.n_vocab + 31) >> 5
        memset(row.out, 0xFF, width * sizeof(uint32_t))
        if row.n_vocab & 31:
            row.out[width - 1] = (<uint32_t>1 << (row.n_vocab & 31)) - 1
        row.status = 0
        return
    if row.kind == ROW_FAST:
        status = (<row_call>fast_row)(row)
    elif row.kind == ROW_PARTIAL:
        status = (<row_call>partial_row)(row)
    if status == -1:
        # a GrammarError past a bound of the fast path (a pool thread is a Python thread: it has its own
        # thread state, and the error is dropped there); the row goes to the reference path
        with gil:
            PyErr_Clear()
    row.status = status


cdef void apply_row(void* job, int64_t item) noexcept nogil:
    """One row of apply_token_bitmask_inplace (a batch_task): -inf where the row's bit is clear."""
    cdef apply_job* a = <apply_job*>job
    cdef float* values = a.logits + a.logit_rows[item] * a.logit_stride
    cdef const uint32_t* bits = a.masks + item * a.mask_stride
    cdef int64_t n = a.n_columns, covered = min(a.width * 32, n), w, start, stop, k
    cdef uint32_t word, rejected
    for w in range((covered + 31) >> 5):
        word = bits[w]
        if word == <uint32_t>-1:
            continue
        start = w << 5
        stop = min(start + 32, covered)
        if word == 0:
            for k in range(start, stop):
                values[k] = -INFINITY
            continue
        rejected = ~word
        while rejected:
            k = start + ctz64(rejected)
            if k >= stop:
                break
            values[k] = -INFINITY
            rejected &= rejected - 1
    for k in range(covered, n):
        values[k] = -INFINITY


@cython.final
cdef class BatchPool:
    """The process's pool of mask threads (Python threads waiting without the GIL in _batchpool.h)."""

    def __cinit__(self):
        self.pool = new batch_pool()
        self.pid = os.getpid()
        self.threads = []

    def __dealloc__(self):
        # the threads hold this object while they run, so it dies with none left (or in a forked child,
        # where they never ran: its locks may have been copied held, so it is left as it is)
        if self.pool != NULL and self.pid == os.getpid() and not self.threads:
            del self.pool

    def _work(self, int index):
        with nogil:
            self.pool.work(index)

    cdef int grow(self, int helpers) except -1:
        """Start threads until `helpers` of them serve batches."""
        while len(self.threads) < helpers:
            thread = threading.Thread(target=self._work, args=(len(self.threads),), daemon=True,
                                      name=f"bankml-mask-{len(self.threads)}")
            thread.start()
            self.threads.append(thread)
        return 0

    cdef void run(self, batch_task task, void* job, int64_t n_items, int helpers) noexcept nogil:
        cdef int64_t i
        if helpers <= 0:
            for i in range(n_items):
                task(job, i)
        else:
            self.pool.run(task, job, n_items, helpers)


_pool = None


cdef BatchPool batch_pool_for(int helpers):
    """The process's BatchPool with at least `helpers` threads (a new one after a fork)."""
    global _pool
    cdef BatchPool pool = _pool
    if pool is None or pool.pid != os.getpid():
        pool = BatchPool()
        _pool = pool
    pool.grow(helpers)
    return pool


def _usable_cores():
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


cdef int batch_threads(max_workers, int64_t n_rows) except -1:
    """Threads for a batch of n_rows (the calling thread included): max_workers, or every usable core."""
    cdef int64_t threads
    if max_workers is None:
        threads = _usable_cores()
    else:
        threads = _count(max_workers, "max_workers")
        if threads < 1 or threads > MAX_BATCH_THREADS:
            raise ValueError(f"max_workers must be in [1, {MAX_BATCH_THREADS}], got {max_workers}")
    return <int>max(1, min(threads, n_rows, MAX_BATCH_THREADS))


def _batch_rows(indices, int64_t n, int64_t batch, what):
    """The bitmask rows of a batch of n: 0..n-1, or `indices` (distinct ints in [0, batch)) as int64."""
    if indices is None:
        if n > batch:
            raise ValueError(f"Invalid bitmask: {n} rows to fill, the bitmask has {batch}")
        return np.arange(n, dtype=np.int64)
    rows = np.asarray(indices)
    if rows.ndim != 1 or rows.shape[0] != n or (rows.size and rows.dtype.kind not in "iu"):
        raise ValueError(f"Invalid indices: expected {n} integer {what} indices, got "
                         f"{rows.dtype} of shape {rows.shape}")
    rows = rows.astype(np.int64)
    if rows.size and (rows.min() < 0 or rows.max() >= batch):
        raise ValueError(f"Invalid indices: {what} indices must lie in [0, {batch}), got range "
                         f"[{rows.min()}, {rows.max()}]")
    if np.unique(rows).size != n:
        raise ValueError(f"Invalid indices: each {what} index may appear once")
    return rows


def fill_next_token_bitmasks(grammars, bitmask, max_workers=None, indices=None):
    """Fill the rows of an int32 bitmask (bit set = allowed), one per matcher, in one call: row i (or
    indices[i]) for grammars[i], in place, as fill_next_token_bitmask fills one.

    bitmask: a writable int32 numpy array or CPU torch tensor of shape (batch, (n_vocab + 31) // 32) with
    contiguous rows (vLLM's, SGLang's and XGrammar's layout). The rows are computed without the GIL on
    max_workers threads (the calling thread and a pool's; default: every usable core), each thread taking
    the next row as it finishes one; matchers that share a MatchContext take turns on its lock. Each
    matcher's lock is held for the whole call, so its state cannot change under it. Returns the bitmask.
    """
    cdef list matchers = list(grammars)
    cdef int64_t n = len(matchers), i, width, stride
    cdef Grammar g
    cdef cnp.ndarray array, rows, candidates
    cdef const int64_t* row_of
    cdef char* base
    cdef vector[mask_row] job
    cdef mask_row* row
    cdef BatchPool pool = None
    cdef int threads
    cdef vector[PyObject*] locks
    cdef size_t entered = 0, k
    array = _batch_bitmask(bitmask)
    width = array.shape[1]
    for g in matchers:   # (TypeError for anything else)
        if g.decoded is None:
            raise ValueError("this Grammar has no vocabulary; give Grammar(rules, vocab) to compute masks")
        if (g.decoded.n_vocab + 31) // 32 != width:
            raise ValueError(f"Invalid bitmask: expected rows of {(g.decoded.n_vocab + 31) // 32} int32 words "
                             f"for a vocabulary of {g.decoded.n_vocab} tokens, got {width}")
        locks.push_back(<PyObject*>g)
    rows = _batch_rows(indices, n, array.shape[0], "bitmask row")
    if n == 0:
        return bitmask
    threads = batch_threads(max_workers, n)
    if threads > 1:
        pool = batch_pool_for(threads - 1)
    base = <char*>cnp.PyArray_DATA(array)
    stride = array.strides[0]
    row_of = <const int64_t*>cnp.PyArray_DATA(rows)
    job.resize(n)
    # each matcher's lock once, in address order (two batches sharing matchers never wait on each other in a
    # cycle); the list holds the matchers, so the borrowed pointers stay valid
    sort(locks.begin(), locks.end())
    locks.erase(unique(locks.begin(), locks.end()), locks.end())
    try:
        while entered < locks.size():
            (<Grammar>locks[entered]).enter()
            entered += 1
        for i in range(n):
            g = matchers[i]
            row = &job[i]
            row.ctx = <PyObject*>g.ctx
            row.stacks = &g.active_stacks
            row.out = <uint32_t*>(base + row_of[i] * stride)
            row.n_vocab = g.decoded.n_vocab
            row.status = 2
            if g.awaiting_trigger:
                row.kind = ROW_ALL
            elif g.partial.n_remain <= 0:
                row.kind = ROW_FAST
            else:
                # the candidates live as long as the context's DecodedVocab (its cached array)
                candidates = g.ctx.decoded.continuation_candidates()
                row.kind = ROW_PARTIAL if candidates.shape[0] else ROW_LATER
                row.candidates = <const token_t*>cnp.PyArray_DATA(candidates)
                row.n_candidates = candidates.shape[0]
                row.vocab = g.ctx.decoded.view()
                row.partial = g.partial
        if pool is None:
            with nogil:
                for i in range(n):
                    fill_row(job.data(), i)
        else:
            with nogil:
                pool.run(fill_row, job.data(), n, threads - 1)
        for i in range(n):
            if job[i].status != 0:
                (<Grammar>matchers[i]).fill_next_token_bitmask(array, row_of[i])
    finally:
        for k in range(entered):
            (<Grammar>locks[k]).leave()
    return bitmask


def apply_token_bitmask_inplace(logits, bitmask, indices=None, max_workers=None):
    """Set logits[indices[k], t] to -inf wherever bit t of bitmask row k is clear, in place (row k of the
    logits without indices), as XGrammar's apply_token_bitmask_inplace does: the columns past the
    bitmask's width * 32 too, the others left as they are.

    logits: writable float32 (rows, n_columns) with contiguous rows, a numpy array or a CPU torch tensor;
    bitmask: int32 (k, width), the same kinds. Rows run without the GIL on max_workers threads (default:
    every usable core). Returns the logits.
    """
    cdef cnp.ndarray values = _batch_logits(logits)
    cdef cnp.ndarray masks = _bitmask_array(bitmask)
    cdef cnp.ndarray rows
    cdef apply_job job
    cdef BatchPool pool = None
    cdef int threads
    cdef int64_t i
    if not isinstance(masks, np.ndarray) or masks.dtype != np.int32 or masks.ndim != 2 \
            or (masks.shape[0] and masks.strides[1] != 4):
        raise ValueError(f"Invalid bitmask: expected int32 of shape (rows, width) with contiguous rows, got "
                         f"{getattr(bitmask, 'dtype', type(bitmask).__name__)} of shape "
                         f"{tuple(getattr(bitmask, 'shape', ())) or None}")
    if indices is None and masks.shape[0] != values.shape[0]:
        raise ValueError(f"Invalid bitmask: {masks.shape[0]} rows for {values.shape[0]} rows of logits; give "
                         "indices to say which")
    rows = _batch_rows(indices, masks.shape[0], values.shape[0], "logits row")
    if masks.shape[0] == 0:
        return logits
    threads = batch_threads(max_workers, masks.shape[0])
    if threads > 1:
        pool = batch_pool_for(threads - 1)
    job.logits = <float*>cnp.PyArray_DATA(values)
    job.logit_stride = values.strides[0] // 4
    job.logit_rows = <const int64_t*>cnp.PyArray_DATA(rows)
    job.n_columns = values.shape[1]
    job.masks = <const uint32_t*>cnp.PyArray_DATA(masks)
    job.mask_stride = masks.strides[0] // 4
    job.width = masks.shape[1]
    if pool is None:
        with nogil:
            for i in range(masks.shape[0]):
                apply_row(&job, i)
    else:
        with nogil:
            pool.run(apply_row, &job, masks.shape[0], threads - 1)
    return logits


def _batch_bitmask(bitmask):
    """A writable int32 (batch, width) view of a bitmask with contiguous rows, or ValueError."""
    array = _bitmask_array(bitmask)
    if not isinstance(array, np.ndarray) or array.dtype != np.int32 or array.ndim != 2 \
            or not array.flags.writeable or (array.shape[0] and array.strides[1] != 4) \
            or array.strides[0] % 4:
        raise ValueError(
            f"Invalid bitmask: expected a writable int32 numpy array or CPU torch tensor of shape (batch, width) "
            f"with contiguous rows, got {getattr(bitmask, 'dtype', type(bitmask).__name__)} of shape "
            f"{tuple(getattr(bitmask, 'shape', ())) or None}")
    return array


def _batch_logits(logits):
    """A writable float32 (rows, n_columns) view of logits with contiguous rows, or ValueError."""
    array = logits
    if type(logits).__module__.partition(".")[0] == "torch" and hasattr(logits, "numpy"):
        if logits.device.type != "cpu":
            raise ValueError(f"Invalid logits: expected a CPU tensor, got one on {logits.device}")
        array = logits.detach().numpy()
    if not isinstance(array, np.ndarray) or array.dtype != np.float32 or array.ndim != 2 \
            or not array.flags.writeable or (array.shape[0] and array.strides[1] != 4) or array.strides[0] % 4:
        raise ValueError(
            f"Invalid logits: expected writable float32 of shape (rows, n_columns) with contiguous rows, got "
            f"{getattr(logits, 'dtype', type(logits).__name__)} of shape {tuple(getattr(logits, 'shape', ())) or None}")
    return array
