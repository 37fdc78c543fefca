"""llama.cpp's sampler chain, token for token.

Owns: ``_sampler`` (the Cython kernels and chain: ``Rng``, ``Sampler``, the DRY breakers' preparation),
``params`` (``SamplerParams`` and the reading of a request's sampler fields), ``reasoning_budget`` (the
reasoning budget), ``logprobs`` (llama-server's ``n_probs``/``logprobs`` records) and ``replay`` (seeded run records
and their replay).

Must not import: ``chat``, ``serve``, ``integrations`` or ``schema``; from ``engine`` only the matcher and
the vocabulary (the grammar redraw and replay).
"""

from bankml.sampling._sampler import Rng, Sampler
from bankml.sampling.params import SamplerParams

__all__ = ["Rng", "Sampler", "SamplerParams"]
