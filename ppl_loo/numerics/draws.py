"""Constrained posterior draws of named variables, read from a DataTree, a Dataset or a dict.

The readers behind every ``unconstrain``: :func:`posterior_dataset` picks the ``posterior`` group,
:func:`draws_of` gives one variable's draws as ``(S, *shape)`` (chains flattened chain-major, the
event dims put in the model's order) and :func:`named_draws` does so for all the variables of a
model, checking that they have the same draws. :func:`index_labels` names the coordinates of one
variable once flattened (``"beta[0,1]"``).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import xarray as xr

__all__ = ["draws_of", "index_labels", "named_draws", "posterior_dataset"]


def posterior_dataset(posterior):
    """Return the ``posterior`` group of a DataTree as a Dataset, or the input unchanged.

    Accepts an ``xarray.DataTree`` (its ``posterior`` child when it has one, else the node
    itself), an ``xarray.Dataset``, or a mapping of arrays (returned unchanged).
    """
    if isinstance(posterior, xr.DataTree):
        node = posterior["posterior"] if "posterior" in posterior.children else posterior
        return node.to_dataset()
    return posterior


def draws_of(post, name: str, shape: tuple, dims: tuple) -> np.ndarray:
    """The draws of the variable ``name`` as a float64 array ``(S, *shape)``.

    Parameters
    ----------
    post : xarray.Dataset or mapping
        A Dataset whose variables have dims ``(chain, draw, ...)`` (flattened chain-major), or a
        mapping ``name -> array`` of shape ``(S, *shape)`` or ``(chain, draw, *shape)``.
    name : str
    shape : tuple of int
        The per-draw shape the model declares.
    dims : tuple of str
        The model's dim names of the variable; a Dataset variable with the same event dims in
        another order is transposed to this one.

    Raises
    ------
    ValueError
        The variable is missing or has the wrong dims or shape.
    TypeError
        ``post`` is neither a Dataset nor a mapping.
    """
    if isinstance(post, xr.Dataset):
        if name not in post.data_vars:
            raise ValueError(
                f"posterior variable {name!r} is missing; the posterior has "
                f"{sorted(map(str, post.data_vars))}. Name the model's parameters like the "
                "fitted model's variables."
            )
        da = post[name]
        if "chain" not in da.dims or "draw" not in da.dims:
            raise ValueError(
                f"posterior variable {name!r} has dims {da.dims}; expected ('chain', 'draw', "
                "...). Use arviz_base.convert_to_datatree or pass a dict of (S, ...) arrays."
            )
        event = [d for d in da.dims if d not in ("chain", "draw")]
        want = list(dims)
        if set(event) == set(want):
            event = want
        da = da.transpose("chain", "draw", *event)
        vals = np.asarray(da.values, dtype=np.float64)
        if vals.shape[2:] != shape:
            raise ValueError(
                f"posterior variable {name!r} has per-draw shape {vals.shape[2:]} (dims "
                f"{tuple(event)}) but the model declares shape {shape}; build the model with "
                "the same data and dimensions as the fit."
            )
        return vals.reshape((-1,) + shape)
    if isinstance(post, Mapping):
        if name not in post:
            raise ValueError(
                f"posterior variable {name!r} is missing; got {sorted(map(str, post))}."
            )
        vals = np.asarray(post[name], dtype=np.float64)
        if vals.shape[1:] == shape:
            return vals
        if vals.ndim == len(shape) + 2 and vals.shape[2:] == shape:
            return vals.reshape((-1,) + shape)
        raise ValueError(
            f"posterior variable {name!r} has shape {vals.shape}; expected (S, *{shape}) or "
            f"(chain, draw, *{shape}) as the model declares shape {shape}."
        )
    raise TypeError(
        "posterior must be an xarray.DataTree, an xarray.Dataset or a dict of arrays, got "
        f"{type(post).__name__}."
    )


def named_draws(posterior, shapes: Mapping, dims: Mapping) -> dict:
    """The draws ``(S, *shape)`` of every variable of ``shapes``, all with the same ``S``.

    Parameters
    ----------
    posterior : xarray.DataTree, xarray.Dataset or mapping
        See :func:`posterior_dataset` and :func:`draws_of`. Extra variables are ignored.
    shapes : mapping
        ``name -> per-draw shape``, in the order of the result.
    dims : mapping
        ``name -> dim names`` (see :func:`draws_of`; a name without an entry has none).

    Returns
    -------
    dict
        ``name -> float64 array (S, *shape)``.

    Raises
    ------
    ValueError
        As :func:`draws_of`, or two variables have different numbers of draws.
    """
    post = posterior_dataset(posterior)
    out = {}
    for name, shape in shapes.items():
        vals = draws_of(post, name, shape, tuple(dims.get(name, ())))
        if out:
            first = next(iter(out))
            if vals.shape[0] != out[first].shape[0]:
                raise ValueError(
                    f"posterior variable {name!r} has {vals.shape[0]} draws but "
                    f"{first!r} has {out[first].shape[0]}; all variables need the same draws."
                )
        out[name] = vals
    return out


def index_labels(base: str, shape: tuple) -> list:
    """One label per entry of a variable of ``shape`` flattened in C order.

    ``[base]`` for a scalar (``shape == ()``), else ``"base[i,j,...]"`` for every index.

    Examples
    --------
    >>> index_labels("beta", (2, 2))
    ['beta[0,0]', 'beta[0,1]', 'beta[1,0]', 'beta[1,1]']
    """
    if shape == ():
        return [base]
    return [f"{base}[{','.join(map(str, idx))}]" for idx in np.ndindex(*shape)]
