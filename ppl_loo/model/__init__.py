"""The one model protocol (DESIGN.md, layer 2): what every algorithm receives from a model.

:class:`Model` is a NamedTuple of pure functions (:mod:`.protocol`), built from a backend adapter by
:mod:`.build`; :func:`ppl_loo.as_model` (:mod:`ppl_loo.adapters.as_model`) builds it from a ``pymc.Model``
(:mod:`ppl_loo.adapters.pymc`), a ``pl.StanModel`` (:mod:`ppl_loo.adapters.stan`) or JAX functions
(:mod:`ppl_loo.adapters.jax`). Every algorithm (LOO, PVI, refits, NUTS) receives a :class:`Model`.
"""

from ppl_loo.model.protocol import GLMStructure, Layout, Model, Observations, Output, ReluStructure

__all__ = ["Model", "Layout", "Observations", "Output", "GLMStructure", "ReluStructure"]
