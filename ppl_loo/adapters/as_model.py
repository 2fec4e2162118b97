"""``as_model``: the one entry from a user's model object to the :class:`~ppl_loo.model.Model` protocol.

What each backend provides:

- **PyMC** (a ``pymc.Model`` or :class:`~ppl_loo.models.PyMCModel`): the log density and the
  pointwise log-likelihood compiled from the PyTensor graph to JAX; for PVI, the prior is the log
  joint minus the observed variable's logp sum, category probabilities are the observed variable's
  logp at every category, and the simulator is PyTensor's own JAX sampler of the observed
  distribution (a reparameterized, pathwise differentiable draw for continuous distributions).
- **Stan** (a ``pl.StanModel`` or its LOO adapter ``StanPosterior``): the compiled program through
  the in-process bridge; exact LOO by data deletion; for PVI, single-observation instances of the
  same program (:mod:`ppl_loo.adapters.stan.pvi`).
- **JAX** (:class:`~ppl_loo.JaxModel`, the closed-form models of :mod:`ppl_loo.models`, any JAX
  :class:`~ppl_loo.models.PosteriorModel`): the user's functions; for PVI, a simulator and category
  probabilities as JAX functions of the constrained values.
- **Likelihood-free** (:class:`~ppl_loo.SimulatorModel`, PVI only): a differentiable JAX simulator and
  an optional prior.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict

import numpy as np

from ppl_loo.adapters.jax.base import PosteriorModel
from ppl_loo.adapters.jax.pvi import SimulatorModel, jax_pvi_model, layout_labels, no_user_fns, simulator_pvi_model
from ppl_loo.adapters.pymc.adapter import PyMCModel
from ppl_loo.adapters.pymc.graph import value_labels
from ppl_loo.adapters.pymc.pvi import pymc_pvi_model
from ppl_loo.adapters.stan.posterior import loo_adapter
from ppl_loo.adapters.stan.pvi import is_stan_model, stan_pvi_model
from ppl_loo.jax_settings import uses_x64
from ppl_loo.model.build import from_adapter
from ppl_loo.model.protocol import Model
from ppl_loo.stan_bridge.model import StanModel

__all__ = ["as_model", "pymc_adapter"]

_NOT_A_MODEL = ("Pass a pymc.Model, a pl.StanModel, a pl.JaxModel, a closed-form model from pl.models"
                "{extra}.")


def _is_pymc_model(obj) -> bool:
    if not type(obj).__module__.startswith("pymc"):
        return False
    import pymc as pm  # PyMC is imported only when the user passes a PyMC model

    return isinstance(obj, pm.Model)


@uses_x64
def as_model(obj, *, var_name=None, data=None, pvi=False, simulator=None, probs=None, observed=None,
             categories=None) -> Model:
    """The :class:`~ppl_loo.model.Model` of a PyMC, Stan or JAX model (or of a :class:`SimulatorModel`).

    Parameters
    ----------
    obj
        ``pymc.Model``, :class:`~ppl_loo.models.PyMCModel`, ``pl.StanModel`` / ``StanPosterior``,
        :class:`~ppl_loo.JaxModel` or another JAX :class:`~ppl_loo.models.PosteriorModel`, a
        :class:`SimulatorModel` (PVI only), or a :class:`Model` (returned unchanged).
    var_name : str, optional
        The observed variable (models with several).
    data : DataTree, optional
        Stan: the fit, whose ``log_likelihood`` group names the log-likelihood variable.
    pvi : bool
        Also build the PVI terms (``terms``, ``eval_*``): ``pl.pvi`` and ``pl.predictive_scores``.
    simulator, probs, observed, categories
        PVI inputs. JAX models: ``simulator(values, key) -> outcomes`` (reparameterized),
        ``probs(values) -> (*obs_shape, n_categories)``, ``observed`` outcomes. Stan: ``simulator``
        names a generated quantity with one ``*_rng`` draw per observation and ``observed`` the data
        entry with the outcomes. ``categories``: the possible outcomes, sorted (quadratic score).
    """
    if isinstance(obj, Model):
        if pvi and obj.terms is None:
            raise ValueError(f"this {obj.kind} Model was built without its PVI terms: pass the model object itself.")
        return obj
    if pvi:
        return _pvi(obj, var_name, simulator, probs, observed, categories)
    for name, value in (("simulator", simulator), ("probs", probs), ("observed", observed), ("categories", categories)):
        if value is not None:
            raise ValueError(f"{name}= is a PVI input; pl.loo does not use it.")
    if _is_pymc_model(obj):
        obj = pymc_adapter(obj, var_name)
    if isinstance(obj, StanModel):
        obj = loo_adapter(obj, var_name=var_name, data=data)
    if isinstance(obj, SimulatorModel):
        raise TypeError("a SimulatorModel has no likelihood, so LOO is not defined for it (it is for pl.pvi).")
    if not (isinstance(obj, PosteriorModel) and obj.is_jax):
        raise TypeError(f"model of type {type(obj).__name__} is not a ppl_loo model. "
                        + _NOT_A_MODEL.format(extra=", or None for plain PSIS-LOO"))
    return from_adapter(obj, kind=_kind(obj), labels=_labels(obj))


#: the adapters of the PyMC models used last, ``(id(model), var_name) -> (model, fingerprint, PyMCModel)``, most recent
#: last: a model's graphs are compiled to JAX (and its structure detected) once, not once per call of ``pl.loo`` or an
#: after-LOO function. A map with weak keys would not release anything here (the adapter holds its model), so the map
#: is bounded instead: the adapters of models used longer ago are dropped, with their compiled programs
_PYMC_ADAPTERS: OrderedDict = OrderedDict()
#: how many PyMC adapters are kept
PYMC_ADAPTERS_KEPT = 8


def pymc_adapter(model, var_name=None) -> PyMCModel:
    """The :class:`PyMCModel` of ``model``, reused while the model is unchanged.

    The adapter compiles the model's graphs with its shared variables (``pm.Data``) as constants, so it is reused
    only while :func:`_pymc_fingerprint` (the model's variables and the values of its shared variables) is the one
    it was built with; ``pm.set_data`` or a new variable builds a new one. At most :data:`PYMC_ADAPTERS_KEPT` are
    kept (the most recently used).
    """
    key = (id(model), var_name)
    fingerprint = _pymc_fingerprint(model)
    hit = _PYMC_ADAPTERS.get(key)
    if hit is not None and hit[0] is model and hit[1] == fingerprint:
        _PYMC_ADAPTERS.move_to_end(key)
        return hit[2]
    adapter = PyMCModel(model, var_name=var_name)
    _PYMC_ADAPTERS[key] = (model, fingerprint, adapter)
    _PYMC_ADAPTERS.move_to_end(key)
    while len(_PYMC_ADAPTERS) > PYMC_ADAPTERS_KEPT:
        _PYMC_ADAPTERS.popitem(last=False)
    return adapter


def _pymc_fingerprint(model) -> tuple:
    """What a :class:`PyMCModel` depends on: the identity of every named variable (a new or replaced variable changes
    it) and a digest of every shared variable's value (``pm.Data``, changed by ``pm.set_data``)."""
    from pytensor.compile.sharedvalue import SharedVariable

    digest = hashlib.blake2b(digest_size=16)
    ids = []
    for name, var in model.named_vars.items():
        ids.append((name, id(var)))
        if isinstance(var, SharedVariable):
            value = var.get_value(borrow=True)
            digest.update(repr((getattr(value, "shape", None), str(getattr(value, "dtype", "")))).encode())
            digest.update(memoryview(np.ascontiguousarray(value)).cast("B"))
    return tuple(ids), tuple(id(v) for v in model.observed_RVs), digest.hexdigest()


def _kind(adapter) -> str:
    if isinstance(adapter, PyMCModel):
        return "PyMC"
    return "Stan" if is_stan_model(adapter) else "JAX"


def _labels(adapter) -> tuple:
    """One label per unconstrained coordinate (the PVI summary's ``param`` coordinate)."""
    if isinstance(adapter, PyMCModel):
        return tuple(value_labels(adapter))
    layout = getattr(adapter, "layout", None)
    if layout is not None:
        return tuple(layout_labels(layout))
    bridge = getattr(adapter, "bridge", None)
    if bridge is not None:
        return tuple(bridge.unconstrained_param_names())
    return tuple(f"theta[{k}]" for k in range(adapter.dim))


def _pvi(obj, var_name, simulator, probs, observed, categories) -> Model:
    if _is_pymc_model(obj):
        obj = pymc_adapter(obj, var_name)
    if isinstance(obj, PyMCModel):
        no_user_fns(simulator, probs, "PyMC", "they are derived from the observed variable")
        if observed is not None:
            raise ValueError("observed= is not used with PyMC models: the observed data are in the model "
                             "(pm.set_data to change them).")
        return pymc_pvi_model(obj, categories=categories)
    if isinstance(obj, SimulatorModel):
        return simulator_pvi_model(obj)
    if is_stan_model(obj):
        return stan_pvi_model(obj, simulator=simulator, observed=observed, categories=categories)
    if isinstance(obj, PosteriorModel) and obj.is_jax:
        return jax_pvi_model(obj, simulator=simulator, probs=probs, observed=observed, categories=categories)
    raise TypeError(f"model of type {type(obj).__name__} is not supported by pl.pvi. "
                    + _NOT_A_MODEL.format(extra=" (or another JAX PosteriorModel), or a pl.SimulatorModel"))
