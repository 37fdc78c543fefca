"""Bounded caches, by content, of what ``ChatTemplate.apply`` derives from a template, its tools and its options
and not from the messages: the tools as the template renders them (each tool's JSON text computed once), and
the request's chat parameters (the PEG arena, the grammar text, its triggers, the tags and tokens). Agents
send the same long tool list with every turn; with these caches a turn renders its messages and reuses the rest.

A key is built from JSON texts (``json_key``: the value's exact content, key order included) and plain values,
so equal requests share an entry and a request that differs in anything the result depends on gets its own.
Each cache is a least-recently-used map bounded in entries and in weight (about the bytes it holds). What a hit
returns is immutable (texts, tuples, the arena, which nothing changes once built) or a fresh copy, so a caller
that changes what it got cannot change a later answer. It must not import ``template`` or ``families``.
"""

import gc
import json
import pickle
import threading
from collections import OrderedDict

__all__ = ["LRUCache", "json_key", "object_key", "clear", "stats", "gc_paused", "TOOLS", "PARAMS"]


class LRUCache:
    """A thread-safe least-recently-used map holding at most ``max_entries`` entries and ``max_weight`` total
    weight (each ``put`` says its entry's weight); the least recently used entries go first. An entry heavier
    than ``max_weight`` is not kept."""

    def __init__(self, max_entries, max_weight):
        if max_entries < 0 or max_weight < 0:
            raise ValueError("cache bounds must be >= 0, got %r and %r" % (max_entries, max_weight))
        self.max_entries, self.max_weight = max_entries, max_weight
        self._data = OrderedDict()
        self._weight = 0
        self._lock = threading.Lock()
        self.hits = self.misses = self.evictions = 0

    def get(self, key):
        """The value for ``key`` (now the most recently used), or None."""
        with self._lock:
            item = self._data.get(key)
            if item is None:
                self.misses += 1
                return None
            self._data.move_to_end(key)
            self.hits += 1
            return item[0]

    def put(self, key, value, weight=1):
        with self._lock:
            old = self._data.pop(key, None)
            if old is not None:
                self._weight -= old[1]
            if weight > self.max_weight or self.max_entries == 0:
                return
            self._data[key] = (value, weight)
            self._weight += weight
            while len(self._data) > self.max_entries or self._weight > self.max_weight:
                _, (_, w) = self._data.popitem(last=False)
                self._weight -= w
                self.evictions += 1

    def clear(self):
        """Drops every entry and zeroes the counts."""
        with self._lock:
            self._data.clear()
            self._weight = 0
            self.hits = self.misses = self.evictions = 0

    def resize(self, max_entries=None, max_weight=None):
        """New bounds (None keeps one); entries beyond them go, least recently used first."""
        with self._lock:
            if max_entries is not None:
                self.max_entries = max_entries
            if max_weight is not None:
                self.max_weight = max_weight
            while self._data and (len(self._data) > self.max_entries or self._weight > self.max_weight):
                _, (_, w) = self._data.popitem(last=False)
                self._weight -= w
                self.evictions += 1

    def __len__(self):
        return len(self._data)

    @property
    def weight(self):
        return self._weight

    def stats(self):
        return {
            "entries": len(self._data),
            "weight": self._weight,
            "max_entries": self.max_entries,
            "max_weight": self.max_weight,
            "hits": self.hits,
            "misses": self.misses,
            "evictions": self.evictions,
        }


class _GcPause:
    """``with gc_paused():`` runs its body with Python's cyclic garbage collector off (and back on after, when
    it was on). Building a request's arena allocates tens of thousands of small objects, each allocation burst
    making the collector walk every object of the process (the template, the caches, the server): that walk
    was most of the arena's cost. What the body leaves behind is freed by reference counting (the arena has no
    cycles); the collector runs as usual afterwards. Nested and concurrent pauses share one count."""

    def __init__(self):
        self._lock = threading.Lock()
        self._depth = 0
        self._was_enabled = False

    def __enter__(self):
        with self._lock:
            if self._depth == 0:
                self._was_enabled = gc.isenabled()
                gc.disable()
            self._depth += 1
        return self

    def __exit__(self, *exc):
        with self._lock:
            self._depth -= 1
            if self._depth == 0 and self._was_enabled:
                gc.enable()
        return False


_GC_PAUSE = _GcPause()


def gc_paused():
    return _GC_PAUSE


def json_key(value):
    """The exact JSON text of a request value (key order kept, ``1``, ``1.0`` and ``true`` apart), or None when
    the value is not JSON (then the request is not cached). ``None`` and empty values have their own texts."""
    try:
        # a cycle is a RecursionError here (the encoder's cycle check, off, doubles its time)
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), check_circular=False)
    except (TypeError, ValueError, RecursionError):
        return None


def object_key(value):
    """The pickle of a request value (its exact structure, shared parts written once, so that a schema of
    shared sub-objects stays as small as it is where its JSON text would be exponential), or None when it
    cannot be pickled. ``pickle.loads`` of it is the cache's own faithful copy."""
    try:
        return pickle.dumps(value, protocol=5)
    except (TypeError, ValueError, AttributeError, RecursionError, pickle.PicklingError):
        return None


# the tools of a request, by their JSON text: (tools as llama.cpp passes them, the same made of JSONDict /
# JSONList for rendering); weight: the length of the text (the two copies hold about 3 bytes per byte of it)
TOOLS = LRUCache(max_entries=64, max_weight=32 << 20)
# the chat parameters apply derives from a template, the tools and the options; weight: the tools' and the
# grammar's text lengths plus 200 per parser of the arena (tracemalloc: 2.9 MB held for Qwen3.5's 128 MaskBench
# tools, weighed 2.9 MB; 24.5 MB for 1,000 tools, weighed 20 MB)
PARAMS = LRUCache(max_entries=64, max_weight=128 << 20)


def clear():
    """Empties every chat cache."""
    TOOLS.clear()
    PARAMS.clear()


def stats():
    return {"tools": TOOLS.stats(), "params": PARAMS.stats()}
