"""Stan's own NUTS, in-process, writing CmdStan-format CSV files (optional).

For users without CmdStan who want CmdStan's output format, and for the tests of
:func:`ppl_loo.from_cmdstan` on real sampler output with saved warmup and thinning. The program
must be built with the sampler (``pl.StanModel(..., sampler=True)``, a separate cached library:
the services headers add about 40% to the compile time).

Each chain runs ``stan::services::sample::hmc_nuts_diag_e_adapt`` (CmdStan's default
``method=sample``: NUTS, diagonal metric, windowed adaptation) with random inits in
``(-init_radius, init_radius)``. The file starts with a CmdStan-style configuration header
(``# key = value`` tree, with ``# generator = ppl_loo.stan_bridge.sampler``), then what Stan's services
write through the writer CmdStan uses (``unique_stream_writer`` with the ``"# "`` prefix): the
header row, the warmup draws when saved, the adaptation block (step size, inverse metric), the
sampling draws and the timing, with CmdStan's default 6 significant digits.

Chains run side by side in threads, as CmdStan's ``num_chains`` and cmdstanpy's ``parallel_chains`` run them (one
per CPU this process may use, at most ``chains``): each has its own seed stream (``create_rng(random_seed,
chain)``), autodiff stack and file, so the draws are the same as one chain after the other. Ctrl-C stops the
running chains and starts no other.
"""

from __future__ import annotations

import ctypes
import functools
import numbers
import os
import signal
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .compile import SAMPLER_FLAG, stanc_version
from .model import StanEvaluationError, StanModel, default_threads

__all__ = ["SAMPLER_FLAG", "sample_cmdstan_csv"]


def _bind(lib) -> None:
    if getattr(lib, "_plstan_sampler_bound", False):
        return
    c_int, c_uint, c_double, c_char_p = ctypes.c_int, ctypes.c_uint, ctypes.c_double, ctypes.c_char_p
    vp = ctypes.c_void_p
    fn = lib.plstan_sample_nuts
    fn.restype = c_int
    fn.argtypes = [vp, c_char_p, c_char_p, c_int, c_int, c_int, c_int, c_uint, c_uint, c_double, c_double,
                   c_double, c_int, ctypes.POINTER(vp), ctypes.POINTER(vp)]
    lib._plstan_sampler_bound = True


def _model_name(model: StanModel) -> str:
    """CmdStan's ``model =``: the program's name (``pois.stan`` -> ``pois_model``, as stanc names it), or the
    compiled library's name when the program was given as code."""
    if model.filename:
        return f"{Path(model.filename).stem}_model"
    return model.model_name


def _header(model: StanModel, *, path, chain, seed, num_warmup, num_samples, thin, save_warmup, adapt_delta,
            max_depth, init_radius, stepsize, data_file=None) -> str:
    major, minor, patch = model.stan_version.split(".")
    lines = [
        f"stan_version_major = {major}",
        f"stan_version_minor = {minor}",
        f"stan_version_patch = {patch}",
        f"model = {_model_name(model)}",
        "method = sample (Default)",
        "  sample",
        f"    num_samples = {num_samples}",
        f"    num_warmup = {num_warmup}",
        f"    save_warmup = {int(save_warmup)}",
        f"    thin = {thin}",
        "    adapt",
        "      engaged = 1 (Default)",
        "      gamma = 0.05 (Default)",
        f"      delta = {adapt_delta}",
        "      kappa = 0.75 (Default)",
        "      t0 = 10 (Default)",
        "      init_buffer = 75 (Default)",
        "      term_buffer = 50 (Default)",
        "      window = 25 (Default)",
        "    algorithm = hmc (Default)",
        "      hmc",
        "        engine = nuts (Default)",
        "          nuts",
        f"            max_depth = {max_depth}",
        "        metric = diag_e (Default)",
        f"        stepsize = {stepsize}",
        "        stepsize_jitter = 0 (Default)",
        f"id = {chain}",
        "data",
        f"  file = {'' if data_file is None else os.fspath(data_file)}",  # CmdStan's data file (not the program)
        f"init = {init_radius}",
        "random",
        f"  seed = {seed}",
        "output",
        f"  file = {path}",
        f"stanc_version = {stanc_version()}",
        "generator = ppl_loo.stan_bridge.sampler (Stan services in-process, not the CmdStan executable)",
    ]
    return "".join(f"# {ln}\n" for ln in lines)


#: plstan_sample_nuts' return code after a Ctrl-C (SIGINT) during the chain
_INTERRUPTED = -2


def sample_cmdstan_csv(
    model: StanModel,
    output_dir,
    *,
    chains: int = 4,
    random_seed: int,
    num_warmup: int = 1000,
    num_samples: int = 1000,
    thin: int = 1,
    save_warmup: bool = False,
    adapt_delta: float = 0.8,
    max_depth: int = 10,
    init_radius: float = 2.0,
    stepsize: float = 1.0,
    prefix: str = "output",
    data_file=None,
    parallel_chains: int | None = None,
) -> tuple[list[Path], list[str]]:
    """Run ``chains`` chains of Stan's NUTS and write ``<output_dir>/<prefix>_<chain>.csv``.

    Parameters
    ----------
    model
        A :class:`~ppl_loo.StanModel` built with ``sampler=True``.
    output_dir
        Directory of the CSV files (created if needed).
    chains, random_seed
        Chain ``c`` (1-based, CmdStan's ``id``) uses Stan's RNG ``create_rng(random_seed, c)``.
    num_warmup, num_samples, thin, save_warmup, adapt_delta, max_depth, init_radius, stepsize
        CmdStan's arguments of the same names (``adapt delta``, ``nuts max_depth``, ``init``).
    data_file
        The path of the data file the model's data came from, written as the header's ``data file =``
        (CmdStan's ``data file=``); empty when not given (data passed as a dict).
    parallel_chains
        Chains run side by side (threads); default: one per CPU this process may use, at most ``chains``. From a
        thread other than the main thread, one after the other.

    Returns
    -------
    (paths, logs)
        The CSV paths and each chain's logger output (with Stan's "Gradient evaluation took").
    """
    if not getattr(model._lib, "plstan_has_sampler", None):
        raise ValueError("this StanModel was built without the sampler: "
                         "construct it with pl.StanModel(..., sampler=True)")
    counts = isinstance(parallel_chains, numbers.Integral) and not isinstance(parallel_chains, bool)
    if parallel_chains is not None and not (counts and parallel_chains >= 1):
        raise ValueError(f"parallel_chains={parallel_chains!r}: give a positive number of chains to run side by side "
                         "(1: one after the other), or None for one per CPU.")
    _bind(model._lib)
    out_dir = Path(output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    run = functools.partial(_run_chain, model, out_dir, prefix=prefix, random_seed=random_seed,
                            header_args=dict(seed=random_seed, num_warmup=num_warmup, num_samples=num_samples,
                                             thin=thin, save_warmup=save_warmup, adapt_delta=adapt_delta,
                                             max_depth=max_depth, init_radius=init_radius, stepsize=stepsize,
                                             data_file=data_file))
    chain_ids = range(1, int(chains) + 1)
    side_by_side = min(int(chains), default_threads() if parallel_chains is None else int(parallel_chains))
    # the chains install the library's Ctrl-C handler and put back the one they found; side by side they can put
    # back each other's, so only the main thread, which can reinstall Python's afterwards, runs them so
    if side_by_side > 1 and threading.current_thread() is threading.main_thread():
        done = _side_by_side(run, chain_ids, side_by_side)
    else:
        done = [run(chain) for chain in chain_ids]
    return [path for path, _ in done], [log for _, log in done]


def _side_by_side(run, chain_ids, n_threads):
    """``[run(chain) for chain in chain_ids]`` in ``n_threads`` threads. The first failure or interruption stops the
    chains not yet started and is raised once the running ones return; Python's Ctrl-C handler is reinstalled."""
    handler = signal.getsignal(signal.SIGINT)
    stop = threading.Event()

    def one(chain):
        if stop.is_set():
            return None
        try:
            return run(chain)
        except BaseException:
            stop.set()
            raise

    try:
        with ThreadPoolExecutor(n_threads, thread_name_prefix="ppl_loo-stan-chain") as pool:
            futures = [pool.submit(one, chain) for chain in chain_ids]
            try:
                done = [f.result() for f in futures]
            except BaseException:
                stop.set()
                raise
    finally:
        if handler is not None:
            signal.signal(signal.SIGINT, handler)
    return done


def _run_chain(model, out_dir, chain, *, prefix, random_seed, header_args):
    """One chain of Stan's NUTS into ``<out_dir>/<prefix>_<chain>.csv``: ``(path, the logger's output)``."""
    path = out_dir / f"{prefix}_{chain}.csv"
    header = _header(model, path=path, chain=chain, **header_args)
    a = header_args
    log, err = ctypes.c_void_p(), ctypes.c_void_p()
    rc = model._lib.plstan_sample_nuts(
        model._handle, os.fspath(path).encode(), header.encode(), int(a["num_warmup"]), int(a["num_samples"]),
        int(a["thin"]), int(bool(a["save_warmup"])), int(random_seed) & 0xFFFFFFFF, chain, float(a["init_radius"]),
        float(a["stepsize"]), float(a["adapt_delta"]), int(a["max_depth"]), ctypes.byref(log), ctypes.byref(err),
    )
    text = model._take(log) if log.value else ""
    if rc == _INTERRUPTED:  # Ctrl-C while the chain ran (the library's own handler caught it)
        if err.value:
            model._take(err)
        path.unlink(missing_ok=True)  # a half-written chain is not output
        raise KeyboardInterrupt(f"Stan's sampler was interrupted on chain {chain}")
    if rc != 0:
        msg = model._take(err) if err.value else text.strip()[-2000:]
        raise StanEvaluationError(f"Stan's sampler failed on chain {chain} (return code {rc}): {msg}")
    return path, text
