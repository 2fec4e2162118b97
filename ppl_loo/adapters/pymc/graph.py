"""PyTensor graphs of a PyMC model as JAX functions, shared by the PyMC adapter, its GLM detection and
its PVI terms."""

from __future__ import annotations

from collections.abc import Callable

from ppl_loo.model.build import coordinate_labels

__all__ = ["jaxify", "value_labels"]


def jaxify(inputs, outputs) -> Callable:
    """Compile a PyTensor graph to a JAX function ``f(*inputs) -> list of outputs``.

    PyMC is imported here, when a PyMC model is adapted, so that ``import ppl_loo`` does not load it.
    """
    from pymc.sampling.jax import get_jaxified_graph

    return get_jaxified_graph(inputs=list(inputs), outputs=list(outputs))


def value_labels(adapter) -> list:
    """One label per unconstrained coordinate of a PyMC adapter (``"sigma_log__"``, ``"beta[0,1]"``)."""
    return coordinate_labels((v, adapter.ushapes[v]) for v in adapter.value_names)
