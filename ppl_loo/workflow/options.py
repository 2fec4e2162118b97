"""Option groups of the fitting functions: a frozen dataclass per group, given as an instance, a dict or None.

``pl.pvi(data, model, optimizer={"steps": 500})`` and ``pl.pvi(data, model, optimizer=pl.OptimizerOptions(steps=500))``
are the same call; ``None`` is the group's defaults. A dict is checked key by key: an unknown key raises an error
that names it and lists the group's fields.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

__all__ = ["resolve_options"]


def resolve_options(cls, value, param, caller):
    """``value`` as an instance of the option dataclass ``cls``.

    Parameters
    ----------
    cls : type
        A dataclass whose fields all have defaults.
    value : cls, Mapping or None
        The user's argument: an instance (returned as is), a dict of some of the fields, or None (the defaults).
    param : str
        The argument's name, for the messages.
    caller : str
        The public function, for the messages (``"pvi"``).

    Returns
    -------
    cls

    Raises
    ------
    ValueError
        A dict key is not a field of ``cls`` (the message names it and lists the fields).
    TypeError
        ``value`` is of another type.
    """
    if value is None:
        return cls()
    if isinstance(value, cls):
        return value
    if isinstance(value, Mapping):
        valid = [f.name for f in dataclasses.fields(cls)]
        unknown = [k for k in value if k not in valid]
        if unknown:
            raise ValueError(f"pl.{caller}({param}=...): unknown option {unknown[0]!r}"
                             + (f" (and {unknown[1:]})" if len(unknown) > 1 else "")
                             + f"; the options of pl.{cls.__name__} are {', '.join(valid)}.")
        return cls(**value)
    raise TypeError(f"pl.{caller}: {param} must be a pl.{cls.__name__}, a dict of its options or None; got "
                    f"{type(value).__name__}.")
