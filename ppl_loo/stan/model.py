"""``StanModel``: a compiled Stan program plus data, evaluated in-process through ctypes.

Every numerical method takes a whole ``(S, d)`` array of draws and makes one call into the
library, which loops over the draws in C++ (optionally on ``n_threads`` threads); a 1-D input is
treated as one draw and the draw axis is dropped from the result.
"""

from __future__ import annotations

import ctypes
import json
import math
import os
from pathlib import Path

import numpy as np

from .compile import BuildResult, StanCompileError, build_library

__all__ = ["StanCompileError", "StanDataError", "StanEvaluationError", "StanModel"]


class StanDataError(ValueError):
    """The data do not match the program's data block (message from Stan)."""


class StanEvaluationError(RuntimeError):
    """Stan threw while evaluating a draw (message from Stan, prefixed with the draw index)."""


_dbl_p = ctypes.POINTER(ctypes.c_double)
_err_p = ctypes.POINTER(ctypes.c_char_p)


def _bind(lib: ctypes.CDLL) -> None:
    vp, c_int, c_uint, c_char_p = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint, ctypes.c_char_p
    errp = ctypes.POINTER(ctypes.c_void_p)
    sigs = {
        "plstan_stan_version": (c_char_p, []),
        "plstan_free_string": (None, [vp]),
        "plstan_new": (vp, [c_char_p, c_uint, errp]),
        "plstan_destroy": (None, [vp]),
        "plstan_model_name": (c_char_p, [vp]),
        "plstan_num_unconstrained": (c_int, [vp]),
        "plstan_num_constrained": (c_int, [vp, c_int, c_int]),
        "plstan_constrained_names": (c_char_p, [vp, c_int, c_int]),
        "plstan_unconstrained_names": (c_char_p, [vp]),
        "plstan_dims_json": (c_char_p, [vp, c_int, c_int]),
        "plstan_log_density": (c_int, [vp, c_int, c_int, _dbl_p, c_int, _dbl_p, c_int, errp]),
        "plstan_log_density_gradient": (
            c_int,
            [vp, c_int, c_int, _dbl_p, c_int, _dbl_p, _dbl_p, c_int, errp],
        ),
        "plstan_param_constrain": (
            c_int,
            [vp, c_int, c_int, _dbl_p, c_int, c_uint, _dbl_p, c_int, errp],
        ),
        "plstan_param_unconstrain": (c_int, [vp, _dbl_p, c_int, _dbl_p, c_int, errp]),
        "plstan_param_unconstrain_json": (c_int, [vp, c_char_p, _dbl_p, errp]),
    }
    for name, (restype, argtypes) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes


def _to_jsonable(value):
    if isinstance(value, dict):
        return {str(k): _to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (np.ndarray, np.generic)):
        arr = np.asarray(value)
        if arr.dtype == bool:
            arr = arr.astype(int)
        return arr.tolist()
    if isinstance(value, (list, tuple)):
        return [_to_jsonable(v) for v in value]
    if isinstance(value, bool):
        return int(value)
    return value


def data_to_json(data) -> str:
    """JSON text for Stan's ``json_data`` from a dict of scalars / lists / NumPy arrays.

    Integer arrays stay integers; non-finite floats are written as ``NaN`` / ``Infinity``, which
    Stan's JSON reader accepts.
    """
    if data is None:
        return "{}"
    if isinstance(data, os.PathLike):
        return Path(data).read_text()
    if isinstance(data, str):
        text = data.strip()
        if text.startswith("{"):
            return text
        return Path(text).read_text()  # a path to a JSON file
    return json.dumps(_to_jsonable(dict(data)), allow_nan=True)


def _read_program(stan_file_or_code) -> tuple[str, str | None]:
    if isinstance(stan_file_or_code, os.PathLike):
        p = Path(stan_file_or_code)
        return p.read_text(), str(p)
    text = str(stan_file_or_code)
    if "\n" not in text and "{" not in text:
        p = Path(text)
        if not p.exists():
            raise FileNotFoundError(f"Stan file {text!r} does not exist")
        return p.read_text(), str(p)
    return text, None


class StanModel:
    """A Stan program with data, compiled once (cached) and evaluated in-process.

    Parameters
    ----------
    stan_file_or_code
        Path of a ``.stan`` file or the program text.
    data
        ``dict`` (values: scalars, lists, NumPy arrays), a JSON string, a ``.json`` path or ``None``.
    seed
        Seed of the model constructor (used by ``transformed data`` RNG calls).
    n_threads
        Threads used by the batched methods (results do not depend on it).
    extra_cxxflags
        Additional compiler flags (part of the cache key).

    Attributes
    ----------
    compiled : bool
        Whether constructing this object ran the C++ compiler (``False`` on a cache hit).
    build : BuildResult
        Library path, cache directory and key, build time.
    dim : int
        Number of unconstrained parameters.
    """

    def __init__(
        self,
        stan_file_or_code,
        data=None,
        *,
        seed: int = 1234,
        n_threads: int = 1,
        extra_cxxflags: tuple[str, ...] = (),
        force_compile: bool = False,
    ):
        self.code, filename = _read_program(stan_file_or_code)
        self.build: BuildResult = build_library(
            self.code,
            extra_cxxflags=tuple(extra_cxxflags),
            filename_in_msg=filename,
            force=force_compile,
        )
        self.compiled = self.build.compiled
        self.stanc_warnings = self.build.stanc_warnings
        self._lib = ctypes.CDLL(str(self.build.library), mode=os.RTLD_LOCAL)
        _bind(self._lib)
        self.n_threads = int(n_threads)
        self.data_json = data_to_json(data)
        err = ctypes.c_void_p()
        handle = self._lib.plstan_new(self.data_json.encode(), seed & 0xFFFFFFFF, ctypes.byref(err))
        if not handle:
            raise StanDataError(f"Stan could not instantiate the model with these data: {self._take(err)}")
        self._handle = handle
        self.dim = self._lib.plstan_num_unconstrained(handle)
        self.stan_version = self._lib.plstan_stan_version().decode()
        self.model_name = self._lib.plstan_model_name(handle).decode()

    # ------------------------------------------------------------------ housekeeping
    def __del__(self):
        handle = getattr(self, "_handle", None)
        if handle:
            self._lib.plstan_destroy(handle)
            self._handle = None

    def __repr__(self) -> str:
        return f"StanModel({self.build.key}, dim={self.dim}, params={self.get_dims()})"

    def _take(self, err: ctypes.c_void_p) -> str:
        if not err.value:
            return "unknown error"
        msg = ctypes.cast(err, ctypes.c_char_p).value.decode(errors="replace")
        self._lib.plstan_free_string(err)
        return msg

    def _check(self, rc: int, err: ctypes.c_void_p, what: str) -> None:
        if rc != 0:
            raise StanEvaluationError(f"{what}: {self._take(err)}")

    @staticmethod
    def _ptr(a: np.ndarray):
        return a.ctypes.data_as(_dbl_p)

    def _draws(self, theta, width: int, what: str) -> tuple[np.ndarray, bool]:
        x = np.ascontiguousarray(theta, dtype=np.float64)
        single = x.ndim == 1
        if single:
            x = x[None, :]
        if x.ndim != 2 or x.shape[1] != width:
            raise ValueError(f"{what}: expected shape (S, {width}) or ({width},), got {np.shape(theta)}")
        if x.shape[0] > 2**31 - 1:
            raise ValueError("too many draws for one call")
        return x, single

    # ------------------------------------------------------------------ names and dims
    def param_num(self, include_tp: bool = False, include_gq: bool = False) -> int:
        return self._lib.plstan_num_constrained(self._handle, int(include_tp), int(include_gq))

    def param_unc_num(self) -> int:
        return self.dim

    def constrained_param_names(self, include_tp: bool = True, include_gq: bool = True) -> list[str]:
        s = self._lib.plstan_constrained_names(self._handle, int(include_tp), int(include_gq)).decode()
        return s.split(",") if s else []

    def unconstrained_param_names(self) -> list[str]:
        s = self._lib.plstan_unconstrained_names(self._handle).decode()
        return s.split(",") if s else []

    def get_dims(self, include_tp: bool = True, include_gq: bool = True) -> dict[str, tuple[int, ...]]:
        """``{variable: shape}`` in declaration order (parameters, then tp, then gq)."""
        s = self._lib.plstan_dims_json(self._handle, int(include_tp), int(include_gq)).decode()
        return {k: tuple(v) for k, v in json.loads(s).items()}

    # ------------------------------------------------------------------ densities
    def log_density(self, theta_unc, *, jacobian: bool = True, propto: bool = False) -> np.ndarray:
        """Log density at unconstrained draws ``(S, d)`` -> ``(S,)``.

        ``propto=True`` drops constant terms (evaluated with autodiff types, like Stan's
        ``log_prob_propto``); ``jacobian`` adds the log-Jacobian of the constraining transforms.
        """
        x, single = self._draws(theta_unc, self.dim, "log_density")
        out = np.empty(x.shape[0])
        err = ctypes.c_void_p()
        rc = self._lib.plstan_log_density(
            self._handle, int(propto), int(jacobian), self._ptr(x), x.shape[0], self._ptr(out),
            self.n_threads, ctypes.byref(err),
        )
        self._check(rc, err, "log_density")
        return out[0] if single else out

    def log_density_gradient(
        self, theta_unc, *, jacobian: bool = True, propto: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(lp (S,), grad (S, d))`` by reverse-mode autodiff (``stan::model::log_prob_grad``)."""
        x, single = self._draws(theta_unc, self.dim, "log_density_gradient")
        lp = np.empty(x.shape[0])
        grad = np.empty_like(x)
        err = ctypes.c_void_p()
        rc = self._lib.plstan_log_density_gradient(
            self._handle, int(propto), int(jacobian), self._ptr(x), x.shape[0], self._ptr(lp),
            self._ptr(grad), self.n_threads, ctypes.byref(err),
        )
        self._check(rc, err, "log_density_gradient")
        return (lp[0], grad[0]) if single else (lp, grad)

    # ------------------------------------------------------------------ transforms
    def param_constrain(
        self, theta_unc, *, include_tp: bool = False, include_gq: bool = False, seed: int = 0
    ) -> np.ndarray:
        """Constrained values (``write_array``) ``(S, param_num(include_tp, include_gq))``.

        Columns follow :meth:`constrained_param_names`. Generated quantities of draw ``s`` use
        the RNG ``create_rng(seed, s + 1)``, so results are reproducible for a given seed.
        """
        x, single = self._draws(theta_unc, self.dim, "param_constrain")
        n_out = self.param_num(include_tp, include_gq)
        out = np.empty((x.shape[0], n_out))
        err = ctypes.c_void_p()
        rc = self._lib.plstan_param_constrain(
            self._handle, int(include_tp), int(include_gq), self._ptr(x), x.shape[0],
            int(seed) & 0xFFFFFFFF, self._ptr(out), self.n_threads, ctypes.byref(err),
        )
        self._check(rc, err, "param_constrain")
        return out[0] if single else out

    def param_unconstrain(self, theta) -> np.ndarray:
        """Unconstrain ``(S, param_num())`` constrained parameter draws -> ``(S, d)``."""
        x, single = self._draws(theta, self.param_num(), "param_unconstrain")
        out = np.empty((x.shape[0], self.dim))
        err = ctypes.c_void_p()
        rc = self._lib.plstan_param_unconstrain(
            self._handle, self._ptr(x), x.shape[0], self._ptr(out), self.n_threads, ctypes.byref(err)
        )
        self._check(rc, err, "param_unconstrain")
        return out[0] if single else out

    def param_unconstrain_dict(self, values: dict) -> np.ndarray:
        """Unconstrain one point given as ``{name: value}`` (Stan's ``transform_inits``)."""
        out = np.empty(self.dim)
        err = ctypes.c_void_p()
        rc = self._lib.plstan_param_unconstrain_json(
            self._handle, data_to_json(values).encode(), self._ptr(out), ctypes.byref(err)
        )
        self._check(rc, err, "param_unconstrain_dict")
        return out

    def split_constrained(
        self, values: np.ndarray, *, include_tp: bool = False, include_gq: bool = False
    ) -> dict[str, np.ndarray]:
        """Split ``param_constrain`` output ``(S, n)`` into ``{name: (S, *shape)}``.

        Stan flattens each variable in column-major order, hence ``order='F'``.
        """
        values = np.asarray(values)
        single = values.ndim == 1
        v2 = values[None, :] if single else values
        out, k = {}, 0
        for name, shape in self.get_dims(include_tp, include_gq).items():
            size = math.prod(shape)
            block = v2[:, k : k + size]
            if shape:
                rev = block.reshape((v2.shape[0], *shape[::-1]))
                out[name] = rev.transpose((0, *range(len(shape), 0, -1)))
            else:
                out[name] = block[:, 0]
            if single:
                out[name] = out[name][0]
            k += size
        return out
