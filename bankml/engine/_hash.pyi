"""Typed stub of bankml.engine._hash (compiled): FNV-1a 64, as the oracle tests record masks."""

import numpy.typing as npt

FNV_OFFSET_BASIS: int
FNV_PRIME: int

def fnv1a_64(data: bytes | bytearray | memoryview) -> int: ...
def mask_hash(allowed_ids: npt.ArrayLike) -> tuple[int, int]: ...
