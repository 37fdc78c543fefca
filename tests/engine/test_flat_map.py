"""bankml/engine/_flatmap.h, the engine's memo tables: the same answers as a dict through inserts, overwrites,
look-ups, clears and reserves, across many incremental growths (each insert moves a few old slots over, and
until the old array is empty a look-up probes both)."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bankml.engine._grammar import _flat_map_replay


def _dict_replay(ops):
    table, out = {}, []
    for op, key, value in ops:
        if op == 0:
            table[key] = value
        elif op == 1:
            out.append(table.get(key))
        elif op == 2:
            table.clear()
        out.append(len(table))
    return out


KEYS = st.one_of(
    st.integers(0, 300), st.integers(0, 2**64 - 1), st.integers(0, 2**20).map(lambda k: k << 32)
)  # small, any, and packed (id << 32) keys
OPS = st.lists(
    st.one_of(
        st.tuples(st.just(0), KEYS, st.integers(-(2**63), 2**63 - 1)),
        st.tuples(st.just(1), KEYS, st.just(0)),
        st.tuples(st.just(2), st.just(0), st.just(0)),
        st.tuples(st.just(3), st.integers(0, 5000), st.just(0)),
    ),
    max_size=400,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPS)
def test_flat_map_answers_like_a_dict(ops):
    assert _flat_map_replay(ops) == _dict_replay(ops)


def test_flat_map_through_many_growths():
    """100,000 keys inserted (17 growths from 16 slots), every one found with its value while the old arrays
    drain, overwritten, found again; keys never inserted are absent; a clear empties it and it fills again."""
    n = 100_000
    keys = [(k * 0x9E3779B97F4A7C15) % 2**64 for k in range(n)]
    ops = []
    for i, k in enumerate(keys):
        ops.append((0, k, i))
        ops.append((1, keys[i // 2], 0))  # an earlier key, likely still in an old array
    ops += [(0, k, -i) for i, k in enumerate(keys[::7])]
    ops += [(1, k, 0) for k in keys] + [(1, k + 1, 0) for k in keys[:1000]]
    ops += [(2, 0, 0)] + [(0, k, 1) for k in keys[:5000]] + [(1, k, 0) for k in keys[:6000]]
    assert _flat_map_replay(ops) == _dict_replay(ops)
