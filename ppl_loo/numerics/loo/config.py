"""Static configuration of the adaptive search: the transformations, their step grids, their labels.

Everything here is a Python constant or a function of :class:`EngineConfig` (hashable: it keys
the jit cache), so none of it is traced.
"""


from typing import NamedTuple

import numpy as np

__all__ = ["NEWTON_STEPS", "MM_ITERATIONS", "TRANSFORMS", "TRANSFORM_GROUP", "EngineConfig", "candidate_labels",
           "groups_of", "split_name", "steps_of", "transform_group"]

#: name -> its step grid: "grid" = the hbar grid, "unit" = hbar 1 only, "damped" = NEWTON_STEPS
NEWTON_STEPS = (1.0, 0.5, 0.25)
#: iterations of the iterated moment matching ("mm_iter"); its "step" is the iteration count
MM_ITERATIONS = (1.0, 2.0, 3.0, 4.0)
TRANSFORMS = {
    "pmm1": "grid",
    "pmm2": "grid",
    "mm1": "unit",
    "mm2": "unit",
    "mm3": "unit",
    "kl": "grid",
    "var": "grid",
    "ll": "grid",
    "newton": "damped",
    "newton_mix": "damped",
    "mm_iter": "iter",
    "pmm1_mix": "grid",
    "pmm2_mix": "grid",
    "mm3_mix": "unit",
    "cavity": "damped",
    "projective": "damped",
}


#: independent constructions: a candidate is corroborated by one of another group (``docs/method.md``)
TRANSFORM_GROUP = {
    "pmm1": "moments", "pmm2": "moments", "mm1": "moments", "mm2": "moments", "mm3": "moments",
    "mm_iter": "moments", "kl": "gradient flow", "var": "gradient flow", "ll": "gradient flow",
    "newton": "newton", "cavity": "approximation", "projective": "approximation",
}


class EngineConfig(NamedTuple):
    """Static configuration of the search (hashable: it keys the jit cache)."""

    transforms: tuple
    hbar: tuple
    r_eff: float
    jacobian: str = "auto"  # "auto" | "exact" | "first_order"
    exact_max_dim: int = 64
    newton_max_dim: int | None = None  # None: the Newton step wherever its (d, d) work fits (numerics.loo.memory)
    min_ess: float = 0.0  # candidates whose smoothed weights have a smaller ESS are not usable
    n_chains: int = 1  # draws are chain-major: per-chain estimates (a Monte Carlo error that sees the chains)
    k_threshold: float = 0.7  # candidates above it are not chosen while one below it passes every check
    block_bytes: int | None = None  # per-draw work in blocks within this many bytes (None: memory.BLOCK_BYTES)
    flow_max_dim: int | None = 256  # jacobian="auto": autodiff gradient flows only on blocks up to this size


def split_name(full_name):
    """``"newton_mix"`` -> ``("newton", True)``."""
    if full_name.endswith("_mix"):
        return full_name[: -len("_mix")], True
    return full_name, False


def steps_of(name, hbar):
    """The step grid of a transformation name (a tuple of floats; see :data:`TRANSFORMS`)."""
    kind = TRANSFORMS[name]
    if kind == "grid":
        return tuple(hbar)
    if kind == "iter":
        return MM_ITERATIONS
    return NEWTON_STEPS if kind == "damped" else (1.0,)


def transform_group(full_name):
    """The group of a transformation name (``"pmm2_mix"`` -> ``"moments"``)."""
    return TRANSFORM_GROUP[split_name(full_name)[0]]


def candidate_labels(cfg: EngineConfig):
    """``(transform, hbar)`` for every candidate, in the order of the per-candidate result arrays."""
    out = []
    for name in cfg.transforms:
        steps = steps_of(name, cfg.hbar)
        out.extend((name, float(t)) for t in steps)
    return out


def groups_of(cfg):
    """Group index of every candidate (static): :data:`TRANSFORM_GROUP` of its transformation."""
    names = sorted(set(TRANSFORM_GROUP.values()))
    return np.asarray([names.index(transform_group(t)) for t, _ in candidate_labels(cfg)])
