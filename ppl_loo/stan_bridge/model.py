"""``StanModel``: a compiled Stan program plus data, evaluated in-process through ctypes.

Every numerical method takes a whole ``(S, d)`` array of draws and makes one call into the
library, which loops over the draws in C++ (on ``n_threads`` threads); a 1-D input is treated as
one draw and the draw axis is dropped from the result.

The same object is what a user passes to :func:`ppl_loo.loo` (``model=pl.StanModel(file, data)``):
its LOO options (``n_obs``, ``obs_keys``, ``log_likelihood``, ``loo_extra``) are stored here and
:func:`ppl_loo.adapters.stan.posterior.loo_adapter` turns it into the posterior-model adapter
(:class:`ppl_loo.adapters.stan.posterior.StanPosterior`) that the engine uses.
"""

from __future__ import annotations

import ctypes
import json
import math
import os
from pathlib import Path

import numpy as np

from ppl_loo.io import read_rdump
from ppl_loo.numerics.random import seed_from

from .compile import SAMPLER_FLAG, BuildResult, StanCompileError, build_library, cached_build

__all__ = [
    "LOO_OPTIONS",
    "StanCompileError",
    "StanDataError",
    "StanEvaluationError",
    "StanModel",
    "as_data_dict",
    "default_threads",
    "merge_loo_options",
]


class StanDataError(ValueError):
    """The data do not match the program's data block (message from Stan)."""


class StanEvaluationError(RuntimeError):
    """Stan threw while evaluating a draw (message from Stan, prefixed with the draw index)."""


#: draws per native call of param_constrain (write_array with generated quantities: about 10 us a draw)
_CONSTRAIN_CHUNK = 65536

_dbl_p = ctypes.POINTER(ctypes.c_double)
_int_p = ctypes.POINTER(ctypes.c_int)
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
        "plstan_log_density": (c_int, [vp, c_int, c_int, _dbl_p, c_int, _dbl_p, c_int, c_int, _int_p, errp]),
        "plstan_log_density_gradient": (
            c_int,
            [vp, c_int, c_int, _dbl_p, c_int, _dbl_p, _dbl_p, c_int, c_int, _int_p, errp],
        ),
        "plstan_time_gradient": (c_int, [vp, _dbl_p, c_int, _dbl_p, _dbl_p, errp]),
        "plstan_param_constrain": (
            c_int,
            [vp, c_int, c_int, _dbl_p, c_int, c_uint, c_int, _dbl_p, c_int, errp],
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


def as_data_dict(data) -> dict:
    """The data as a ``dict``: from a dict, JSON text, a ``.json`` path or an R dump (``.R``) path."""
    if data is None:
        return {}
    if isinstance(data, dict):
        return dict(data)
    if isinstance(data, (str, os.PathLike)):
        text = os.fspath(data).strip()
        if not text.startswith("{"):
            p = Path(text)
            if not p.exists():
                raise FileNotFoundError(f"data file {text!r} does not exist")
            if p.suffix.lower() == ".r":
                return read_rdump(p)
            text = p.read_text()
        try:
            return json.loads(text)
        except json.JSONDecodeError as err:
            raise StanDataError(f"the data are not valid JSON: {err}") from None
    try:
        return dict(data)
    except (TypeError, ValueError):
        raise TypeError(
            f"data: expected a dict, a JSON text, or the path of a .json or .R file; got {type(data).__name__}"
        ) from None


def default_threads() -> int:
    """Threads of the batched calls when ``n_threads=None``: the CPUs this process may use, at most 8."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        n = os.cpu_count() or 1
    return max(1, min(n, 8))


_ON_ERROR = ("raise", "reject")

#: the LOO options of a :class:`StanModel` and their defaults
LOO_OPTIONS = {"n_obs": None, "obs_keys": None, "log_likelihood": "log_lik", "loo_extra": None}


def merge_loo_options(options: dict, **overrides) -> dict:
    """``options`` with the ``overrides`` that differ from their default (:data:`LOO_OPTIONS`).

    Parameters
    ----------
    options : dict
        LOO options (``StanModel.loo_options``).
    **overrides
        ``n_obs``, ``obs_keys``, ``log_likelihood``, ``loo_extra``; a value equal to its default (``None``;
        ``"log_lik"`` for ``log_likelihood``, whose ``None`` means no such generated quantity) keeps the
        option of ``options``.

    Returns
    -------
    dict
        The merged options (``obs_keys`` as a tuple).
    """
    unknown = sorted(set(overrides) - set(LOO_OPTIONS))
    if unknown:
        raise TypeError(f"unknown LOO option(s) {unknown}; the options are {list(LOO_OPTIONS)}")
    out = dict(options)
    for key, value in overrides.items():
        default = LOO_OPTIONS[key]
        if value is default or (default is not None and value == default):
            continue
        out[key] = tuple(value) if key == "obs_keys" else value
    return out


class StanModel:
    """A Stan program with data, compiled once (cached) and evaluated in-process.

    Parameters
    ----------
    stan_file_or_code
        Path of a ``.stan`` file or the program text.
    data
        ``dict`` (values: scalars, lists, NumPy arrays), a JSON string, a ``.json`` path, an R dump
        (``.data.R``, CmdStan's format) path, or ``None``.
    n_obs
        For LOO: name of the integer data entry holding the number of observations (``"N"``,
        ``"J"`` for eight schools). Default: detected from the data, see
        :func:`ppl_loo.adapters.stan.data.detect_n_obs`; ambiguous data raise an error asking for it.
    obs_keys
        For LOO: the data entries indexed by observation along their first axis, which exact LOO
        by data deletion subsets. Default: every array whose leading dimension equals
        ``data[n_obs]``.
    log_likelihood
        For LOO: the generated quantity with the pointwise log-likelihood (a vector of length
        ``data[n_obs]``). Default ``"log_lik"``; programs without it get the log-likelihood by
        data deletion.
    loo_extra
        For LOO, optional, only for programs with parameters indexed by observation (one per group,
        such as ``theta_tilde`` in eight schools): ``loo_extra(theta, i)``, a JAX function of one
        unconstrained draw giving the log conditional density of the coordinates that deleting
        observation ``i`` removes (usually their prior). Without it such programs use
        ``logp - log_lik[i]`` with ``log_lik`` differentiated through a derived program. See
        :class:`~ppl_loo.adapters.stan.posterior.StanPosterior`.
    random_seed
        Seed of the model constructor (used by ``transformed data`` RNG calls). None: a seed derived
        from the program and its data, so that the same program on the same data reproduces.
    n_threads
        Threads used by the batched methods (results do not depend on it); ``None``: the CPUs
        available to this process, at most 8.
    extra_cxxflags
        Additional compiler flags (part of the cache key).
    force_compile
        Rebuild the library even when it is in the cache.
    sampler
        Also compile Stan's NUTS into the library, for
        :func:`ppl_loo.stan_bridge.sampler.sample_cmdstan_csv` (CmdStan-format CSV output without
        CmdStan); a separate cached library that takes about 40% longer to build. A model built without
        ``sampler=True`` loads that library when it is cached and its own is not (it holds every function
        of the plain one), so that sampling a program and then computing its LOO compiles it once.

    Attributes
    ----------
    compiled : bool
        Whether constructing this object ran the C++ compiler (``False`` on a cache hit).
    build : BuildResult
        Library path, cache directory and key, build time.
    dim : int
        Number of unconstrained parameters.
    data : dict
        The data (as a dict).
    random_seed : int
        The seed of the model constructor (given, or derived from the program and its data).
    last_n_rejected : int
        Draws rejected (log density ``-inf``) by the last density call with ``on_error="reject"``.

    Examples
    --------
    >>> import ppl_loo as pl
    >>> model = pl.StanModel("eight_schools.stan", "eight_schools.data.R")
    >>> res = pl.loo(pl.from_cmdstan(["output_1.csv", "output_2.csv"]), model=model)  # doctest: +SKIP
    """

    def __init__(
        self,
        stan_file_or_code,
        data=None,
        *,
        n_obs: str | None = None,
        obs_keys=None,
        log_likelihood: str | None = "log_lik",
        loo_extra=None,
        random_seed: int | None = None,
        n_threads: int | None = None,
        extra_cxxflags: tuple[str, ...] = (),
        force_compile: bool = False,
        sampler: bool = False,
    ):
        self.code, filename = _read_program(stan_file_or_code)
        if sampler:  # Stan's NUTS in the library (ppl_loo.stan_bridge.sampler), a separate cached build
            extra_cxxflags = (*extra_cxxflags, SAMPLER_FLAG)
        self.filename = filename
        self.data = as_data_dict(data)
        if n_obs is not None:
            if n_obs not in self.data:
                raise StanDataError(f"n_obs={n_obs!r} is not a data entry (entries: {list(self.data)})")
            value = self.data[n_obs]
            if np.ndim(value) != 0 or not float(np.asarray(value)).is_integer() or int(np.asarray(value)) < 1:
                raise StanDataError(f"n_obs={n_obs!r}: data[{n_obs!r}] = {value!r} is not a positive integer "
                                    "(the number of observations)")
        self.loo_options = merge_loo_options(dict(LOO_OPTIONS), n_obs=n_obs, obs_keys=obs_keys,
                                             log_likelihood=log_likelihood, loo_extra=loo_extra)
        self.extra_cxxflags = tuple(extra_cxxflags)
        # the library built with the sampler serves too when it is the one cached (ppl-loo sample, then loo)
        cached = None if force_compile else cached_build(self.code, self.extra_cxxflags, accept_sampler=True)
        self.build: BuildResult = cached or build_library(
            self.code,
            extra_cxxflags=self.extra_cxxflags,
            filename_in_msg=filename,
            force=force_compile,
        )
        self.compiled = self.build.compiled
        self.stanc_warnings = self.build.stanc_warnings
        self._lib = ctypes.CDLL(str(self.build.library), mode=os.RTLD_LOCAL)
        _bind(self._lib)
        self.n_threads = default_threads() if n_threads is None else max(1, int(n_threads))
        self.data_json = data_to_json(self.data)
        self.random_seed = int(seed_from(random_seed, np.frombuffer(self.code.encode(), dtype=np.uint8),
                                         np.frombuffer(self.data_json.encode(), dtype=np.uint8)))
        self.last_n_rejected = 0
        err = ctypes.c_void_p()
        handle = self._lib.plstan_new(self.data_json.encode(), self.random_seed & 0xFFFFFFFF, ctypes.byref(err))
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

    def __reduce__(self):
        """Pickled (cloudpickle: dask workers) as the program, its data and options, not the loaded library:
        the unpickled model loads the library from the compiled-model cache by its key
        (:func:`~ppl_loo.stan_bridge.compile.build_library`; workers on this machine share the cache folder) and
        compiles it only where the cache lacks it."""
        opts = self.loo_options
        state = {"code": self.code, "data": self.data, "n_obs": opts["n_obs"], "obs_keys": opts["obs_keys"],
                 "log_likelihood": opts["log_likelihood"], "loo_extra": opts["loo_extra"],
                 "random_seed": self.random_seed,
                 "n_threads": self.n_threads, "extra_cxxflags": self.extra_cxxflags, "filename": self.filename}
        return _rebuild_stan_model, (state,)

    def with_data(self, data) -> StanModel:
        """The same (cached) program on other data, with the same seed and threads."""
        return StanModel(self.code, data, random_seed=self.random_seed, n_threads=self.n_threads,
                         extra_cxxflags=self.extra_cxxflags)

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

    @staticmethod
    def _reject_flag(on_error: str) -> int:
        if on_error not in _ON_ERROR:
            raise ValueError(f"on_error must be one of {_ON_ERROR}, got {on_error!r}")
        return int(on_error == "reject")

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
    def log_density(
        self, theta_unc, *, jacobian: bool = True, propto: bool = False, on_error: str = "raise"
    ) -> np.ndarray:
        """Log density at unconstrained draws ``(S, d)`` -> ``(S,)``.

        ``propto=True`` drops constant terms (evaluated with autodiff types, like Stan's
        ``log_prob_propto``); ``jacobian`` adds the log-Jacobian of the constraining transforms.
        ``on_error="reject"`` gives ``-inf`` at draws where Stan throws ``std::domain_error``
        (what its samplers treat as a rejection) instead of raising; their number is
        :attr:`last_n_rejected`. Other errors always raise :class:`StanEvaluationError`.
        """
        x, single = self._draws(theta_unc, self.dim, "log_density")
        out = np.empty(x.shape[0])
        err = ctypes.c_void_p()
        n_rej = ctypes.c_int(0)
        rc = self._lib.plstan_log_density(
            self._handle, int(propto), int(jacobian), self._ptr(x), x.shape[0], self._ptr(out),
            self.n_threads, self._reject_flag(on_error), ctypes.byref(n_rej), ctypes.byref(err),
        )
        self._check(rc, err, "log_density")
        self.last_n_rejected = n_rej.value
        return out[0] if single else out

    def log_density_gradient(
        self, theta_unc, *, jacobian: bool = True, propto: bool = False, on_error: str = "raise"
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(lp (S,), grad (S, d))`` by reverse-mode autodiff (``stan::model::log_prob_grad``).

        ``on_error="reject"``: ``-inf`` and a NaN gradient at draws where Stan throws
        ``std::domain_error`` (see :meth:`log_density`).
        """
        x, single = self._draws(theta_unc, self.dim, "log_density_gradient")
        lp = np.empty(x.shape[0])
        grad = np.empty_like(x)
        err = ctypes.c_void_p()
        n_rej = ctypes.c_int(0)
        rc = self._lib.plstan_log_density_gradient(
            self._handle, int(propto), int(jacobian), self._ptr(x), x.shape[0], self._ptr(lp),
            self._ptr(grad), self.n_threads, self._reject_flag(on_error), ctypes.byref(n_rej),
            ctypes.byref(err),
        )
        self._check(rc, err, "log_density_gradient")
        self.last_n_rejected = n_rej.value
        return (lp[0], grad[0]) if single else (lp, grad)

    def time_gradient(self, theta_unc, n_reps: int = 1000) -> float:
        """Seconds per gradient of Stan's own ``log_prob_grad<true, true>`` (what NUTS calls), timed
        in a C++ loop of ``n_reps`` evaluations at one point, with no Python in between.

        The reference cost for the bridge's overhead (``benchmarks/stan.py``).
        """
        x, _ = self._draws(np.asarray(theta_unc).reshape(-1), self.dim, "time_gradient")
        seconds, lp = ctypes.c_double(), ctypes.c_double()
        err = ctypes.c_void_p()
        rc = self._lib.plstan_time_gradient(self._handle, self._ptr(x), int(n_reps), ctypes.byref(seconds),
                                            ctypes.byref(lp), ctypes.byref(err))
        self._check(rc, err, "time_gradient")
        return seconds.value

    # ------------------------------------------------------------------ transforms
    def param_constrain(
        self, theta_unc, *, include_tp: bool = False, include_gq: bool = False, random_seed: int | None = None
    ) -> np.ndarray:
        """Constrained values (``write_array``) ``(S, param_num(include_tp, include_gq))``.

        Columns follow :meth:`constrained_param_names`. Generated quantities of draw ``s`` use
        the RNG ``create_rng(random_seed, s + 1)``, so results are reproducible for a given seed; None: a seed
        derived from ``theta_unc``.
        """
        x, single = self._draws(theta_unc, self.dim, "param_constrain")
        seed = int(seed_from(random_seed, x))
        n_out = self.param_num(include_tp, include_gq)
        out = np.empty((x.shape[0], n_out))
        # chunks of draws, each a short native call, so that Ctrl-C (handled by Python between calls) stops a
        # long evaluation promptly; the RNG of draw s depends on s only, not on the chunking
        for lo in range(0, x.shape[0], _CONSTRAIN_CHUNK):
            hi = min(lo + _CONSTRAIN_CHUNK, x.shape[0])
            err = ctypes.c_void_p()
            rc = self._lib.plstan_param_constrain(
                self._handle, int(include_tp), int(include_gq), self._ptr(x[lo:hi]), hi - lo,
                int(seed) & 0xFFFFFFFF, lo, self._ptr(out[lo:hi]), self.n_threads, ctypes.byref(err),
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


def _rebuild_stan_model(state: dict) -> StanModel:
    """The :class:`StanModel` of a pickled state (:meth:`StanModel.__reduce__`)."""
    state = dict(state)
    code, data, filename = state.pop("code"), state.pop("data"), state.pop("filename")
    model = StanModel(code, data, **state)
    model.filename = filename
    return model
