"""CmdStan output (CSV files, a cmdstanpy ``CmdStanMCMC``, or a PyStan 3 fit) to a DataTree.

>>> from ppl_loo.io import from_cmdstan
>>> dt = from_cmdstan(["output_1.csv", "output_2.csv"], log_likelihood="log_lik")  # doctest: +SKIP

CSV files are read by ``cmdstanpy.from_csv`` (no CmdStan installation needed) and converted by
``arviz_base.from_cmdstanpy``; PyStan fits go through :mod:`.pystan`. What is kept here:

* the file list: sorted expansion of a directory or glob (``from_csv`` lists a directory in
  ``os.listdir`` order, which is arbitrary, and globs only ``*``), and a header check that names
  the differing columns when the files come from different programs (``from_csv`` validates the
  run settings but not that the columns agree);
* ``sample_stats`` with saved warmup: ``from_cmdstanpy`` (arviz_base 1.3) takes the sampler
  columns from ``CmdStanMCMC.method_variables()``, which include the warmup rows, so
  ``sample_stats`` gets warmup + sampling draws and there is no ``warmup_sample_stats``; they are
  split here;
* the run's settings as attributes (Stan version, model name, ``num_warmup``, ``adapt_delta``,
  ``max_depth``, step sizes, inverse metric, timings), which ``from_cmdstanpy`` does not store
  and a refit (``ppl_loo.loo(..., refit=...)``) reuses;
* :func:`read_cmdstan_csv`, one file with its configuration as a tree (``data.file``,
  ``output.file``): cmdstanpy's ``parse_config`` flattens it, keeps the last value of a repeated
  key and drops section paths; the draws, adaptation block and timings come from
  ``cmdstanpy.utils.stancsv``.
"""

from __future__ import annotations

import glob
import math
import os
import re
import warnings
from dataclasses import dataclass, field

import cmdstanpy
import numpy as np
import stanio
import xarray as xr
from arviz_base import dict_to_dataset, from_cmdstanpy
from cmdstanpy.utils import disable_logging, stancsv

from .groups import assemble, requested_names, split_warmup
from .pystan import from_pystan_fit, is_pystan_fit

__all__ = ["VARIATIONAL_GROUP", "CmdStanCSV", "check_files", "check_same_headers", "cmdstan_method", "config_tree",
           "expand_paths", "from_cmdstan", "from_cmdstanpy_fit",
           "from_variational_csv", "read_cmdstan_csv", "read_cmdstan_header", "warn_identical_chains"]


# ---------------------------------------------------------------------------------------- one file
@dataclass
class CmdStanCSV:
    """The parsed content of one CmdStan CSV file."""

    path: str
    config: dict[str, str]  # leaf key -> value (first occurrence) and dotted path -> value
    header: list[str]
    draws: np.ndarray  # (n_rows, n_columns): warmup rows (if saved) then sampling rows
    n_warmup_rows: int
    step_size: float | None = None
    inv_metric: np.ndarray | None = None  # 1-D (diag_e) or 2-D (dense_e)
    timing: dict[str, float] = field(default_factory=dict)

    @property
    def warmup(self) -> np.ndarray:
        return self.draws[: self.n_warmup_rows]

    @property
    def sampling(self) -> np.ndarray:
        return self.draws[self.n_warmup_rows :]

    @property
    def stan_version(self) -> str | None:
        parts = [self.config.get(f"stan_version_{p}") for p in ("major", "minor", "patch")]
        return ".".join(parts) if all(p is not None for p in parts) else None

    def get_int(self, key: str, default: int) -> int:
        """An integer setting; CmdStan >= 2.33 writes booleans as ``true`` / ``false``."""
        value = self.config.get(key)
        if value is None:
            return default
        low = value.strip().lower()
        if low in ("true", "false"):
            return int(low == "true")
        try:
            return int(float(low))
        except ValueError:
            return default


_CONFIG_RE = re.compile(r"^#(\s*)([A-Za-z_][\w]*)\s*=\s*(.*?)\s*(\(Default\))?\s*$")
_SECTION_RE = re.compile(r"^#(\s*)([A-Za-z_][\w]*)\s*$")


def config_tree(comments: list[bytes]) -> dict[str, str]:
    """The run configuration (the indented ``key = value`` comments before the header).

    Returns
    -------
    dict
        ``{leaf key: value}`` (first occurrence) and ``{dotted.path: value}``, values as written.
    """
    config: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    for raw in comments:
        line = raw.decode("utf-8").rstrip("\r\n")
        if line.lstrip("# ").startswith("Adaptation terminated"):
            break
        m = _CONFIG_RE.match(line)
        mm = m or _SECTION_RE.match(line)
        if not mm:
            continue
        indent, key = len(mm.group(1)), mm.group(2)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        if m:
            config.setdefault(".".join([s for _, s in stack] + [key]), m.group(3))
            config.setdefault(key, m.group(3))
        stack.append((indent, key))
    return config


def read_cmdstan_csv(path) -> CmdStanCSV:
    """Parse one CmdStan CSV file (config, header, warmup/sampling draws, adaptation, timing).

    Parameters
    ----------
    path : str or os.PathLike

    Returns
    -------
    CmdStanCSV
    """
    path = os.fspath(path)
    comments, header, lines = stancsv.parse_comments_header_and_draws(path)
    if header is None:
        raise ValueError(f"{path}: no header row; is this a CmdStan CSV file?")
    columns = [h.strip() for h in header.split(",")]
    draws = stancsv.csv_bytes_list_to_numpy(lines)
    if draws.shape[0] == 0:  # (0, 0) from cmdstanpy
        draws = np.empty((0, len(columns)))
    if draws.shape[1] != len(columns):
        raise ValueError(f"{path}: {draws.shape[1]} values per row but {len(columns)} columns in the header")
    step_size, inv_metric = stancsv.parse_hmc_adaptation_lines(comments)
    timing = {k.lower().replace("-", ""): v for k, v in stancsv.parse_timing_lines(comments).items()}
    out = CmdStanCSV(path, config_tree(comments), columns, draws, 0, step_size, inv_metric, timing)
    if out.get_int("save_warmup", 0):
        try:
            out.n_warmup_rows = stancsv.count_warmup_and_sampling_draws(path)[0]
        except ValueError:  # no adaptation block (adapt engaged=0): count the saved warmup from the config
            thin = max(out.get_int("thin", 1), 1)
            out.n_warmup_rows = min(math.ceil(out.get_int("num_warmup", 0) / thin), len(draws))
    return out


def read_cmdstan_header(path) -> list[str]:
    """The column names of a CmdStan CSV file (the first non-comment line)."""
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip() and not line.startswith("#"):
                return [h.strip() for h in line.rstrip("\r\n").split(",")]
    raise ValueError(f"{path}: no header row; is this a CmdStan CSV file?")


# ---------------------------------------------------------------------------------------- files
def expand_paths(csv_files) -> list[str]:
    """A path, a list of paths, a directory (its ``*.csv``) or a glob pattern -> sorted file list."""
    if isinstance(csv_files, (str, os.PathLike)):
        s = os.fspath(csv_files)
        if os.path.isdir(s):
            paths = sorted(glob.glob(os.path.join(s, "*.csv")))
        elif any(ch in s for ch in "*?["):
            paths = sorted(glob.glob(s))
        else:
            paths = [s]
    else:
        try:
            paths = [os.fspath(p) for p in csv_files]
        except TypeError:
            raise TypeError(f"csv_files={csv_files!r}: give a CSV path, a list of paths (one chain each), a directory, "
                            "a glob pattern, a cmdstanpy fit or a PyStan 3 fit") from None
    if not paths:
        raise ValueError(f"no CmdStan CSV files in {csv_files!r}")
    return paths


def _header_difference(ref: list[str], other: list[str]) -> str:
    missing = [c for c in ref if c not in set(other)]
    extra = [c for c in other if c not in set(ref)]
    parts = []
    if missing:
        parts.append(f"missing columns {missing[:20]}{' ...' if len(missing) > 20 else ''}")
    if extra:
        parts.append(f"extra columns {extra[:20]}{' ...' if len(extra) > 20 else ''}")
    if not parts:
        moved = [c for a, c in zip(ref, other) if a != c]
        parts.append(f"columns in a different order {moved[:20]}")
    return "; ".join(parts)


def check_same_headers(paths: list[str]) -> None:
    """Raise ``ValueError`` naming the differing columns when the files' headers differ."""
    ref = read_cmdstan_header(paths[0])
    for p in paths[1:]:
        other = read_cmdstan_header(p)
        if other != ref:
            raise ValueError(
                f"CmdStan CSV file {p!r} has a different header from {paths[0]!r} "
                f"(a different model?): {_header_difference(ref, other)}"
            )


# ---------------------------------------------------------------------------------------- DataTree
def _fit_attrs(fit: cmdstanpy.CmdStanMCMC) -> tuple[dict, dict]:
    """Attributes of every group and of ``sample_stats``, from the fit's configuration and files."""
    cfg = fit.metadata.cmdstan_config
    attrs: dict = {"inference_library": "cmdstan"}
    version = [cfg.get(f"stan_version_{p}") for p in ("major", "minor", "patch")]
    if all(v is not None for v in version):
        attrs["inference_library_version"] = attrs["stan_version"] = ".".join(str(v) for v in version)
    for key, name, cast in (("model", "model_name", str), ("num_samples", "num_samples", int),
                            ("num_warmup", "num_warmup", int), ("save_warmup", "save_warmup", int),
                            ("thin", "thin", int), ("metric", "metric", str),
                            ("delta", "adapt_delta", float), ("max_depth", "max_depth", int)):
        if key in cfg:  # adapt_delta, max_depth: the sampler settings a refit reuses
            attrs[name] = cast(cfg[key])
    # CmdStan writes 6 significant digits unless sig_figs is set (-1: the default); the draws and
    # generated quantities are rounded to it (ppl_loo.workflow.loo.draws compares at that precision)
    sig = int(cfg.get("sig_figs", -1) or -1)
    attrs["sig_figs"] = sig if sig > 0 else 6
    one = fit.chains == 1  # one file: scalars / 1-D, as written
    step = fit.step_size
    if step is not None:
        attrs["step_size"] = float(step[0]) if one else np.asarray(step)
    stats_attrs = {}
    for key in ("warmup", "sampling", "total"):
        if fit.time and all(key in t for t in fit.time):
            stats_attrs[f"elapsed_time_{key}"] = np.array([t[key] for t in fit.time])
    metric = fit.inv_metric
    if metric is not None and metric.ndim == 2:  # diagonal metrics only, one row per chain
        stats_attrs["inv_metric"] = metric[0] if one else metric
    return attrs, stats_attrs


def from_cmdstanpy_fit(fit: cmdstanpy.CmdStanMCMC, *, log_likelihood="log_lik", posterior_predictive=None,
                       observed_data=None, include_warmup: bool = False) -> xr.DataTree:
    """A cmdstanpy ``CmdStanMCMC`` -> DataTree (the arguments of :func:`from_cmdstan`)."""
    ll, pp = requested_names(log_likelihood, posterior_predictive, fit.metadata.stan_vars, "CmdStan")
    dt = from_cmdstanpy(fit, log_likelihood=ll or None,
                        posterior_predictive=list(dict.fromkeys(pp.values())) or None,
                        save_warmup=include_warmup)
    groups = {name: node.to_dataset() for name, node in dt.children.items()}
    stats = groups.get("sample_stats")
    n_extra = 0 if stats is None else stats.sizes["draw"] - fit.num_draws_sampling
    if n_extra > 0:  # the warmup rows from method_variables(), see the module docstring
        warm, groups["sample_stats"] = split_warmup(stats, n_extra)
        if include_warmup:
            groups["warmup_sample_stats"] = warm
    attrs, stats_attrs = _fit_attrs(fit)
    return assemble(groups, attrs=attrs, stats_attrs=stats_attrs, observed_data=observed_data, pp_names=pp)


def from_cmdstan(
    csv_files,
    *,
    log_likelihood="log_lik",
    posterior_predictive=None,
    observed_data=None,
    include_warmup: bool = False,
) -> xr.DataTree:
    """CmdStan output -> :class:`xarray.DataTree` with ArviZ groups.

    Parameters
    ----------
    csv_files
        A CSV path, a list of paths (one chain each, all with the same header), a directory or a
        glob pattern (read by ``cmdstanpy.from_csv``, without a CmdStan installation); or a
        cmdstanpy ``CmdStanMCMC``; or a PyStan 3 ``stan.fit.Fit`` (draws, sampler diagnostics,
        warmup when saved, thinning, and the step size, inverse metric, timings and Stan's
        "Gradient evaluation took" from its output).
    log_likelihood
        The pointwise log-likelihood variable(s): a name, a list of names, a dict
        ``{new_name: stan_name}`` (renamed in the ``log_likelihood`` group), or None.
        Default ``"log_lik"``; a missing variable raises ``KeyError`` unless it is the default.
    posterior_predictive
        Same forms, for the ``posterior_predictive`` group.
    observed_data
        ``{name: array}`` (or a Dataset) stored as the ``observed_data`` group.
    include_warmup
        Add ``warmup_posterior`` / ``warmup_sample_stats`` (...) groups when the files saved the
        warmup (``save_warmup=1``); otherwise warmup rows are dropped.

    Returns
    -------
    xarray.DataTree
        Groups ``posterior`` (every variable except the log-likelihood and posterior-predictive
        ones), ``sample_stats`` (``lp``, ``acceptance_rate``, ``step_size``, ``tree_depth``,
        ``n_steps``, ``diverging`` (bool), ``energy``), ``log_likelihood``,
        ``posterior_predictive``, ``observed_data``; dims ``(chain, draw, name_dim_0, ...)``.
        Attributes: ``stan_version``, ``model_name``, ``num_samples``, ``num_warmup``,
        ``save_warmup``, ``thin``, ``step_size`` (adapted, per chain); ``sample_stats`` also has
        ``inv_metric`` (diagonal) and ``elapsed_time_*``.
    """
    kw = {"log_likelihood": log_likelihood, "posterior_predictive": posterior_predictive,
          "observed_data": observed_data, "include_warmup": include_warmup}
    if isinstance(csv_files, cmdstanpy.CmdStanMCMC):
        return from_cmdstanpy_fit(csv_files, **kw)
    if is_pystan_fit(csv_files):
        return from_pystan_fit(csv_files, **kw)
    runset = getattr(csv_files, "runset", None)
    if runset is not None and hasattr(runset, "csv_files"):  # CmdStanVB, CmdStanMLE, CmdStanLaplace, ...: its files
        csv_files = list(runset.csv_files)
    paths = expand_paths(csv_files)
    parsed = check_files(paths)
    method = cmdstan_method(paths)
    if method in ("variational", "laplace"):
        return from_variational_csv(paths, method=method, **kw)
    check_same_headers(paths)
    try:
        with disable_logging():  # its divergence warning points at diagnose(), which needs CmdStan
            fit = cmdstanpy.from_csv(paths, method="sample")
    except Exception as err:  # noqa: BLE001 - cmdstanpy raises bare ValueErrors (reshape, parse, ...)
        raise _file_error(paths, err) from err
    warn_identical_chains(paths, parsed)
    return from_cmdstanpy_fit(fit, **kw)


# ---------------------------------------------------------------------------------------- checks
_FIX = "give the CSV files CmdStan wrote (output_*.csv, one per chain, all of one run)"


def check_files(paths: list[str]) -> dict[str, CmdStanCSV]:
    """Each path is a readable, non-empty text file with a header row and draws; else a ``ValueError``
    that names the file and the fix (cmdstanpy's own errors name neither, or fail later on a reshape)."""
    parsed = {}
    for p in paths:
        if not os.path.exists(p):
            raise FileNotFoundError(f"{p}: no such CmdStan CSV file; {_FIX}")
        if os.path.isdir(p):
            raise ValueError(f"{p}: is a directory, not a CmdStan CSV file; give the directory alone (its *.csv "
                             f"files are read) or {_FIX}")
        if os.path.getsize(p) == 0:
            raise ValueError(f"{p}: the file is empty (did the run fail or is it still being written?); {_FIX}")
        with open(p, "rb") as fh:
            head = fh.read(65536)
        if b"\0" in head:
            raise ValueError(f"{p}: not a readable CmdStan CSV file (a binary file, not text); {_FIX}")
        try:
            head.decode("utf-8")
        except UnicodeDecodeError as err:
            if err.start < len(head) - 4:  # not a character cut at the read boundary
                raise ValueError(f"{p}: not a readable CmdStan CSV file (not a text file: bytes that are not UTF-8 at "
                                 f"offset {err.start}); "
                                 f"{_FIX}") from None
        try:
            f = read_cmdstan_csv(p)
        except ValueError as err:
            msg = str(err)
            m = re.search(r"number of columns changed from (\d+) to (\d+) at row (\d+)", msg)
            if m:
                msg = (f"a draw row has {m.group(2)} values but the header {m.group(1)} columns (row {m.group(3)} of "
                       "the draws: a truncated or edited file?)")
            raise ValueError(msg if msg.startswith(p) else f"{p}: not a readable CmdStan CSV file ({msg}); {_FIX}") \
                from None
        except Exception as err:  # noqa: BLE001 - cmdstanpy / numpy parse errors
            raise ValueError(f"{p}: not a readable CmdStan CSV file ({type(err).__name__}: {err}); {_FIX}") from None
        if not f.header or f.header[0] not in ("lp__", "log_p__", "lp_approx__"):  # sample/vb, laplace, pathfinder
            raise ValueError(f"{p}: not a readable CmdStan CSV file (its header row does not start with lp__: "
                             f"{','.join(f.header[:5])}..., so it is not CmdStan output); {_FIX}")
        if f.sampling.shape[0] == 0:
            raise ValueError(f"{p}: a header but no draws (the run was interrupted or failed before sampling); "
                             f"{_FIX}")
        parsed[p] = f
    return parsed


def _file_error(paths, err) -> ValueError:
    msg = " ".join(str(err).split())
    bad = next((p for p in paths if p in msg), None)
    where = bad if bad is not None else (paths[0] if len(paths) == 1 else ", ".join(paths))
    return ValueError(f"{where}: not readable as CmdStan CSV files ({type(err).__name__}: {msg}); {_FIX}")


def cmdstan_method(paths: list[str]) -> str:
    """The CmdStan method the files were written by (``# method = ...`` in the header comments).

    ``sample`` and ``variational`` are read; any other method raises a ``ValueError`` saying what to do.
    """
    methods = {}
    for p in paths:
        with open(p, "rb") as fh:
            comments = [ln for ln in (fh.readline() for _ in range(200)) if ln.startswith(b"#")]
        methods[p] = config_tree(comments).get("method", "sample")  # files without a config: sampler output
    kinds = sorted(set(methods.values()))
    if len(kinds) > 1:
        listed = ", ".join(f"{p} ({m})" for p, m in methods.items())
        raise ValueError(f"the CmdStan CSV files come from different methods: {listed}; give the files of one run")
    method = kinds[0]
    where = paths[0] if len(paths) == 1 else ", ".join(paths)
    if method == "sample":
        return method
    if method in ("variational", "laplace"):
        if len(paths) > 1:
            raise ValueError(f"{where}: {len(paths)} files of CmdStan's method={method}, each its own "
                             "approximation q; give one file (pl.loo weights its draws by that q)")
        return method
    if method == "optimize":
        raise ValueError(f"{where}: CmdStan method=optimize output is a point estimate (the mode), not draws, so "
                         "there is no LOO to compute from it; run CmdStan's method=sample (or method=variational), "
                         "or use pl.laplace(None, model) for a Laplace approximation around the mode")
    if method == "pathfinder":
        raise ValueError(f"{where}: CmdStan method=pathfinder output is not read by ppl_loo (its draws are resampled, "
                         "so lp_approx__ is not the density they come from); run CmdStan's method=sample, "
                         "or use pl.laplace(None, model) / pl.pvi(None, model) on the model")
    if method == "generate_quantities":
        raise ValueError(f"{where}: CmdStan method=generate_quantities output holds only the generated "
                         "quantities; give the CSV files of the method=sample run they were generated from")
    raise ValueError(f"{where}: CmdStan method={method} is not sampler output; run CmdStan's method=sample")


def warn_identical_chains(paths: list[str], parsed: dict | None = None) -> None:
    """Warn when two files hold the same draws (the same CSV given twice): R-hat would look perfect."""
    if len(paths) < 2:
        return
    seen: dict[bytes, str] = {}
    for p in paths:
        draws = (parsed[p] if parsed and p in parsed else read_cmdstan_csv(p)).sampling
        key = np.ascontiguousarray(draws).tobytes()
        if key in seen:
            which = f"{p} is given twice" if p == seen[key] else f"{p} and {seen[key]} hold identical draws"
            warnings.warn(f"{which} (the same chain given twice?): R-hat and the "
                          "effective sample size treat them as independent chains and look better than they are; "
                          "give each chain's file once", UserWarning, stacklevel=3)
        else:
            seen[key] = p


# ---------------------------------------------------------------------------------------- variational
#: the group holding the density of the approximation the posterior draws come from (read by pl.loo)
VARIATIONAL_GROUP = "variational"


def from_variational_csv(paths, *, method="variational", log_likelihood="log_lik", posterior_predictive=None,
                         observed_data=None, include_warmup=False) -> xr.DataTree:
    """CmdStan ``method=variational`` (or ``method=laplace``) output -> DataTree of the approximation's draws.

    Variational output's first row is the approximation's mean (``lp__ = log_p__ = log_g__ = 0``); it is
    dropped. ``log_g__`` (``log_q__`` in laplace output: the log density of ``q`` on the unconstrained
    scale, up to a constant) becomes the ``log_q`` of group ``variational``, which ``pl.loo`` uses for the
    weights of Eq. 13.
    """
    del include_warmup  # no warmup in variational output
    f = read_cmdstan_csv(paths[0])
    cols = f.header
    q_col = "log_g__" if "log_g__" in cols else "log_q__"
    for needed in ("log_p__", q_col):
        if needed not in cols:
            raise ValueError(f"{paths[0]}: method={method} output without the {needed} column; give the CSV "
                             "file CmdStan (2.x) wrote")
    rows = f.draws
    if method == "variational" and rows.shape[0] >= 1 and rows[0, cols.index(q_col)] == 0 and rows[0, 0] == 0:
        rows = rows[1:]  # the mean of the approximation, not a draw
    if rows.shape[0] < 2:
        raise ValueError(f"{paths[0]}: method={method} output with fewer than 2 draws; rerun CmdStan with more "
                         "draws (output_samples / draws = 1000, the default)")
    variables = stanio.parse_header(",".join(cols))
    available = [v for v in variables if not v.endswith("__")]
    ll, pp = requested_names(log_likelihood, posterior_predictive, available, "CmdStan")
    taken = set(ll.values()) | set(pp.values())

    def dataset(mapping):
        out = {}
        for new, old in mapping.items():
            out[new] = np.asarray(variables[old].extract_reshape(rows))[None]  # (chain=1, draw, ...)
        return dict_to_dataset(out, sample_dims=["chain", "draw"], dims={
            new: [f"{new}_dim_{k}" for k in range(out[new].ndim - 2)] for new in out}) if out else None

    groups = {"posterior": dataset({v: v for v in available if v not in taken})}
    if ll:
        groups["log_likelihood"] = dataset(ll)
    if pp:
        groups["posterior_predictive"] = dataset(pp)
    alg = f.config.get("algorithm", "meanfield") if method == "variational" else "laplace"
    q = xr.Dataset({"log_q": (("chain", "draw"), rows[None, :, cols.index(q_col)]),
                    "log_p": (("chain", "draw"), rows[None, :, cols.index("log_p__")])},
                   coords={"chain": [0], "draw": np.arange(rows.shape[0])},
                   attrs={"posterior_group": "posterior", "method": method, "algorithm": alg,
                          "source": os.path.basename(paths[0]),
                          "note": f"log_q: CmdStan's {q_col} (log density of the approximation q on the "
                                  "unconstrained scale, up to a constant); log_p: its log_p__"})
    groups = {k: v for k, v in groups.items() if v is not None}
    groups[VARIATIONAL_GROUP] = q
    attrs = {"inference_library": "cmdstan", "cmdstan_method": method, "variational_algorithm": alg}
    if f.stan_version:
        attrs["inference_library_version"] = attrs["stan_version"] = f.stan_version
    if "model" in f.config:
        attrs["model_name"] = f.config["model"]
    sig = f.get_int("sig_figs", -1)
    attrs["sig_figs"] = sig if sig > 0 else 6
    return assemble(groups, attrs=attrs, stats_attrs={}, observed_data=observed_data, pp_names=pp)
