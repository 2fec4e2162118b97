"""The command line's inputs, each checked with a one-line error that names the file and the fix.

Stan program (compiled once, cached), data file (``.json`` or R dump ``.R``), CmdStan CSV files
(paths, directories or quoted glob patterns), saved results (``.nc`` files with a ``loo`` group),
and output paths (refused when they exist, unless ``--overwrite``; written atomically).
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import warnings
from pathlib import Path

import numpy as np
import xarray as xr

import ppl_loo as pl
from ppl_loo.cli.errors import COMPILE_ERROR, CliError, compile_summary, for_the_command_line, one_line
from ppl_loo.io import read_cmdstan_csv
from ppl_loo.stan_bridge import StanCompileError, StanDataError, as_data_dict

__all__ = ["check_output", "check_program_file", "expand_csv_args", "load_data", "load_program", "load_results",
           "observed_mapping",
           "read_csvs", "check_csv_matches_program", "write_atomic"]

_GLOB_CHARS = re.compile(r"[*?\[]")


def _existing_file(path, what, fix):
    p = Path(path)
    if not p.exists():
        raise CliError(path, f"no such {what}", fix)
    if p.is_dir():
        raise CliError(path, f"is a directory, not a {what}", fix)
    return p


# ------------------------------------------------------------------------------- program and data
def load_data(path):
    """The data file as a dict (``.json`` or R dump ``.R``)."""
    if path is None:
        return {}
    p = _existing_file(path, "data file", "give the .json or .R (R dump) data file the program was run with")
    try:
        return as_data_dict(p)
    except (StanDataError, ValueError, UnicodeDecodeError) as err:
        kind = "R dump" if p.suffix.lower() == ".r" else "JSON"
        raise CliError(path, f"not a readable {kind} data file ({one_line(err)})",
                       "give CmdStan's data file: JSON (.json) or R dump (.R)") from None


def check_program_file(stan_file):
    """The Stan program exists (checked before any other work)."""
    _existing_file(stan_file, "Stan program", "give the path of the .stan file")


def load_program(stan_file, data, data_path, *, n_obs=None, log_likelihood="log_lik", sampler=False):
    """``pl.StanModel(stan_file, data)``, compiled with the cache; errors name the program or the data file."""
    check_program_file(stan_file)
    try:
        return pl.StanModel(stan_file, data, n_obs=n_obs, log_likelihood=log_likelihood, sampler=sampler)
    except StanCompileError as err:
        raise CliError(stan_file, compile_summary(err), "fix the Stan program (stanc's full message: --debug)",
                       COMPILE_ERROR) from err
    except StanDataError as err:
        if data_path is None:  # not Stan's "variable does not exist ... name=N": the user gave no data file
            raise CliError(stan_file, f"no --data given, and the program's data block needs its data "
                           f"({one_line(err)})", f"pass --data FILE (.json or .R) with the data "
                           f"{Path(stan_file).name} was run with") from err
        raise CliError(data_path, f"the data do not match the program's data block: "
                       f"{for_the_command_line(one_line(err))}",
                       f"give the data file {Path(stan_file).name} was run with") from err


# ------------------------------------------------------------------------------- CmdStan CSV files
def expand_csv_args(args):
    """Paths, directories (their ``*.csv``) and glob patterns -> the CSV files, in order, without repeats."""
    out = []
    for arg in args:
        if _GLOB_CHARS.search(arg) and not os.path.exists(arg):
            paths = sorted(glob.glob(arg))
            if not paths:
                raise CliError(arg, "no file matches this pattern", "check the directory and the pattern")
        elif os.path.isdir(arg):
            paths = sorted(glob.glob(os.path.join(arg, "*.csv")))
            if not paths:
                raise CliError(arg, "no .csv files in this directory", "give the CmdStan output files")
        else:
            paths = [os.fspath(_existing_file(arg, "CSV file", "give the CmdStan output files (output_*.csv)"))]
        for p in paths:
            if p in out:
                warnings.warn(f"{p} is given twice; it is read once (one chain)", UserWarning, stacklevel=2)
            else:
                out.append(p)
    return out


def _culprit(paths):
    """The first file that does not parse on its own, with the reason, or ``(None, None)``."""
    for p in paths:
        try:
            f = read_cmdstan_csv(p)
        except Exception as err:  # noqa: BLE001 - any parse failure names the file
            return p, one_line(str(err).replace(f"File {p} ", "").replace(f"{p}: ", ""))
        if f.sampling.shape[0] == 0:
            return p, "no draws (the sampling rows are missing)"
    return None, None


def read_csvs(paths, *, log_likelihood, posterior_predictive, observed):
    """``pl.from_cmdstan``; a file that cannot be read is named, with the reason."""
    fix = "give the CSV files CmdStan wrote for this program (all chains of one run)"
    try:
        return pl.from_cmdstan(paths, log_likelihood=log_likelihood, posterior_predictive=posterior_predictive or None,
                               observed_data=observed or None)
    except KeyError as err:
        raise CliError(paths[0], one_line(err.args[0] if err.args else err),
                       "check --log-lik / --posterior-predictive against the CSV header") from err
    except (ValueError, OSError) as err:  # pl.from_cmdstan's input errors start with the file: "<file>: what; fix"
        msg = one_line(err)
        bad = next((p for p in paths if msg.startswith(f"{p}:")), None)
        if bad is None and paths and msg.startswith(f"{', '.join(paths)}:"):
            bad = ", ".join(paths)
        if bad is None:
            raise _read_error(paths, err, fix) from err
        what, _, hint = msg[len(bad) + 1:].strip().rpartition("; ")
        raise CliError(bad, what or hint, hint if what else fix) from err
    except Exception as err:  # noqa: BLE001 - cmdstanpy raises bare ValueErrors, among others
        raise _read_error(paths, err, fix) from err


def _read_error(paths, err, fix):
    """The first file that does not parse, named with the reason."""
    bad, why = _culprit(paths)
    if bad is None:
        msg = one_line(err)
        bad = next((p for p in paths if p in msg), paths[0])
        why = msg.replace(f"{bad!r}", "this file").replace(bad, "this file")
    return CliError(bad, f"not a readable CmdStan CSV file ({why})", fix)


def check_csv_matches_program(tree, model, paths, stan_file, data_path=None):
    """The program's variables are those of the CSV files: every parameter present, the same shapes."""
    groups = [tree[g].to_dataset() for g in ("posterior", "log_likelihood") if g in tree.children]
    name = Path(stan_file).name
    for var in model.get_dims(include_tp=False, include_gq=False):
        if not any(var in ds for ds in groups):
            raise CliError(paths[0], f"no column for the parameter {var!r} of {name}",
                           "give the .stan program these CSV files were written by")
    for var, shape in model.get_dims().items():  # parameters, transformed parameters, generated quantities
        got = next((tuple(ds[var].shape[2:]) for ds in groups if var in ds), None)
        if got is not None and got != tuple(shape):
            with_data = f" with {Path(data_path).name}" if data_path else ""
            raise CliError(paths[0], f"{var!r} has shape {got} in the CSV files but {tuple(shape)} in {name}"
                           f"{with_data}", "give the program and the data file the CSV files were written with")


def observed_mapping(specs, data, data_path, csv_path):
    """``--posterior-predictive`` -> ``(posterior_predictive, observed_data)`` for ``pl.from_cmdstan``.

    ``NAME`` keeps the generated quantity ``NAME`` as it is; ``NAME=DATA`` stores it under the
    data entry's name ``DATA`` and adds ``data[DATA]`` as the observed data (ArviZ pairs the two
    groups by name).
    """
    pp, observed = {}, {}
    for spec in specs or ():
        stan_name, _, data_name = spec.partition("=")
        stan_name, data_name = stan_name.strip(), data_name.strip()
        if not stan_name or (_ and not data_name):
            raise CliError(csv_path, f"--posterior-predictive {spec!r} is not NAME or NAME=DATA_ENTRY",
                           "e.g. --posterior-predictive y_hat=y")
        if not data_name:
            pp[stan_name] = stan_name
            continue
        if data_name not in data:
            raise CliError(data_path or "--data", f"no data entry {data_name!r} (entries: {', '.join(data)})",
                           f"in --posterior-predictive {spec}, name a data entry after '='")
        pp[data_name] = stan_name
        observed[data_name] = np.asarray(data[data_name])
    return pp, observed


# ------------------------------------------------------------------------------- results and outputs
def load_results(paths, names):
    """``{name: DataTree}`` of saved results (``.nc`` with a ``loo`` group), loaded into memory."""
    if names is not None and len(names) != len(paths):
        raise CliError("--names", f"{len(names)} names for {len(paths)} files", "give one name per file")
    names = names or _default_names(paths)
    if len(set(names)) != len(names):
        raise CliError("--names", f"the names {names} repeat", "give each result its own name")
    out = {}
    for name, path in zip(names, paths):
        _existing_file(path, "result file", "give .nc files written by `ppl-loo loo ... --out FILE.nc`")
        try:
            with xr.open_datatree(path) as tree:
                tree = tree.load()
        except Exception as err:  # noqa: BLE001 - whatever the netCDF engines raise
            raise CliError(path, f"not a netCDF file xarray can read ({one_line(err, 200)})",
                           "give .nc files written by `ppl-loo loo ... --out FILE.nc`") from err
        if "loo" not in tree.children:
            raise CliError(path, "no 'loo' group", "write the file with `ppl-loo loo ... --out FILE.nc` "
                           "or pl.add_loo(tree, pl.loo(...)).to_netcdf(FILE.nc)")
        try:
            pl.LooResult.from_datatree(tree)
        except Exception as err:  # noqa: BLE001
            raise CliError(path, f"its 'loo' group is not a ppl_loo result ({one_line(err, 200)})",
                           "rewrite it with `ppl-loo loo ... --out FILE.nc`") from err
        out[name] = tree
    return out


def _default_names(paths):
    stems = [Path(p).stem for p in paths]
    return stems if len(set(stems)) == len(stems) else [os.fspath(p) for p in paths]


def check_output(path, overwrite, what="output file"):
    """Refuse an existing ``path`` without ``--overwrite``, and a missing directory, before any work."""
    if path is None:
        return None
    p = Path(path)
    if p.is_dir():
        raise CliError(path, "is a directory", f"give the {what}'s file name")
    if p.exists() and not overwrite:
        raise CliError(path, "exists", "pass --overwrite to replace it, or choose another name")
    if not p.parent.is_dir():
        raise CliError(path, f"directory {os.fspath(p.parent)!r} does not exist", "create it first")
    if not os.access(p.parent, os.W_OK | os.X_OK):
        raise CliError(path, f"directory {os.fspath(p.parent)!r} is not writable", "choose a folder you can write to")
    return p


def write_atomic(path, write):
    """``write(tmp)`` to a temporary name beside ``path``, then ``os.replace``: never a half-written file."""
    path = Path(path)
    # the suffix kept (writers may check it); the name cut so that a long file name leaves room for the rest
    tmp = path.with_name(f".{path.stem[:100]}.{os.getpid()}.tmp{path.suffix[:20]}")
    try:
        write(tmp)
        os.replace(tmp, path)
    except OSError as err:  # a full disk, a read-only folder: the old file (if any) is kept as it was
        raise CliError(path, f"could not be written ({err.strerror or err})",
                       "check that the folder is writable and the disk has space (an existing file was kept)") from err
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()
    return path
