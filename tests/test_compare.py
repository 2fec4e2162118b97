"""``pl.compare``'s numbers and printed table, and ``ppl-loo compare --round-to``, on real LOO results.

Conjugate normal models with exact posterior draws (``tests/gaussian_models.py``), plain PSIS
(``pl.loo(tree)`` and ``arviz_stats.loo``): the numbers must be ``arviz_stats.compare``'s unrounded
ones, except ``dse``, which is R ``loo_compare``'s ``se_diff`` (the sample SD of the pointwise differences,
``sqrt(n / (n - 1))`` times ``arviz_stats``' population SD), and ``p_worse``, ``arviz_stats``' formula with that
``dse``; the printed table must show every float with the same number of decimals (never
``arviz_stats``' significant-figure ``"auto"`` rounding, which printed -181.56 as -200.0), and a plain
``arviz_stats`` ``ELPDData`` must be accepted with NA in the columns ppl_loo adds.
"""

from __future__ import annotations

import json
import pickle
import re
import warnings

import arviz_stats as azs
import numpy as np
import pandas as pd
import pytest
import xarray as xr
from cli_tools import run_cli
from gaussian_models import LinearRegressionKnownNoise, leverage_regression, normal_mean_model
from report_helpers import hand_categories

import ppl_loo as pl
from ppl_loo.workflow.downstream.compare import COUNT_COLUMNS, FLAG_COLUMNS, LEGEND, WEIGHT_COLUMNS

NUMBERS = ["rank", "elpd_diff", "dse", "p_worse", "p", "elpd", "se", "weight"]
FLOATS = ["elpd_diff", "dse", "p_worse", "p", "elpd", "se", "weight", "diff_flagged"]


def _quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


@pytest.fixture(scope="module")
def normal():
    """Three fits of the same 60 draws from N(0.3, 1.7^2): the known sigma 1 (too narrow), 1.7 and 3 (too wide)."""
    y = np.random.default_rng(3).normal(0.3, 1.7, size=60)
    trees = {name: normal_mean_model(y, sigma=s, tau=5.0).exact_draws(n_chains=2, n_draws=500, seed=i)
             for i, (name, s) in enumerate((("narrow", 1.0), ("right", 1.7), ("wide", 3.0)))}
    res = {name: _quiet(pl.loo, tree) for name, tree in trees.items()}
    plain = {name: _quiet(azs.loo, tree, pointwise=True) for name, tree in trees.items()}
    return trees, res, plain


@pytest.fixture(scope="module")
def flagged():
    """40 observations with two high-leverage outliers: plain PSIS of the line (``pl.loo``: 2 doubtful
    observations) and ``arviz_stats.loo`` of an intercept-only fit with a wide noise (no ppl_loo result)."""
    model = leverage_regression(seed=1, n=40)
    line = _quiet(pl.loo, model.exact_draws(n_chains=2, n_draws=500, seed=11))
    flat = LinearRegressionKnownNoise(model.X[:, :1], model.y, sigma=4.0, tau=10.0)
    other = _quiet(azs.loo, flat.exact_draws(n_chains=2, n_draws=500, seed=12), pointwise=True)
    assert int(np.sum(line.doubtful.values)) > 0
    return line, other


def _assert_same_numbers(got, ref, n, res=None):
    """``got`` is ``ref`` (``arviz_stats.compare``'s table of models of ``n`` observations) but for ``dse`` from the
    sample SD, ``p_worse`` from that ``dse`` and the stacking ``weight`` (with ``res``, the results): the maximizer of
    the log score, ``pl.stacking_weights``' (``arviz_stats``' SLSQP stops within 2e-4 of it, with a lower score)."""
    from scipy.stats import norm

    assert list(got.index) == list(ref.index)
    if res is not None:
        lpd = np.column_stack([res[name].elpd_i.values for name in got.index])
        w = got["weight"].to_numpy(float)
        np.testing.assert_allclose(w, pl.stacking_weights(lpd).values, rtol=0, atol=1e-15)
        np.testing.assert_allclose(w, ref["weight"].to_numpy(float), rtol=0, atol=2e-4)
        score = lambda v: np.sum(np.log(np.exp(lpd) @ v))  # noqa: E731
        assert score(w) >= score(ref["weight"].to_numpy(float))
    for col in NUMBERS:
        if col == "weight" and res is not None:
            continue
        want = ref[col].to_numpy(float)
        if col == "dse":
            want = want * np.sqrt(n / (n - 1))
        if col == "p_worse":
            diff, dse = ref["elpd_diff"].to_numpy(float), ref["dse"].to_numpy(float) * np.sqrt(n / (n - 1))
            want = np.where(diff == 0, np.nan, norm.cdf(0, diff, dse + 1e-12))
        np.testing.assert_allclose(got[col].to_numpy(float), want, rtol=0, atol=1e-10, err_msg=col)
    for col in ("diag_diff", "diag_elpd"):
        assert list(got[col]) == list(ref[col])


def _expected_tokens(table, name, decimals):
    """The whitespace-separated cells of ``name``'s printed row, built from the unrounded numbers."""
    row = table.loc[name]
    out = [str(name)]
    for col in table.columns:
        v = row[col]
        if col in ("diag_diff", "diag_elpd"):
            out += str(v).split()
        elif pd.isna(v):
            out.append("<NA>" if col in COUNT_COLUMNS else "NaN")
        elif col in FLOATS:
            out.append(f"{float(v):.{decimals}f}")
        else:
            out.append(str(int(v)))
    return out


def _assert_printed(text, table, decimals):
    lines = text.rstrip("\n").splitlines()
    assert lines[0].split() == list(table.columns)
    assert len(lines) == 1 + len(table)
    for name, line in zip(table.index, lines[1:]):
        assert line.split() == _expected_tokens(table, name, decimals)
    body = "\n".join(line.split(maxsplit=1)[1] for line in lines[1:])
    for number in re.findall(r"-?\d+\.\d+", body):  # every decimal number with the same decimals
        assert len(number.split(".")[1]) == decimals, number


# ----------------------------------------------------------------------------- the numbers
def test_numbers_are_arviz_stats_unrounded(normal):
    _, res, _ = normal
    for method in ("stacking", "pseudo-BMA"):
        ref = azs.compare(res, method=method, round_to="none")
        for round_to in (2, 0, "auto", "none"):
            got = pl.compare(res, method=method, round_to=round_to)
            _assert_same_numbers(got, ref, 60, res if method == "stacking" else None)
    got = pl.compare(res)
    assert list(got.index) == ["right", "wide", "narrow"]
    d = res["narrow"].elpd_i.values - res["right"].elpd_i.values  # R's se_diff: sqrt(n) times the sample SD
    assert got.loc["narrow", "dse"] == pytest.approx(np.sqrt(60) * np.std(d, ddof=1), rel=1e-12)
    # full precision kept: these numbers are not what two decimals (nor arviz_stats' "auto") would make them
    assert any(v != round(v, 2) for v in got["elpd"]) and any(v != round(v, 2) for v in got["elpd_diff"])
    assert (got[["n_adapted", "n_doubtful", "n_refit"]] == 0).all().all() and (got["diff_flagged"] == 0.0).all()
    assert str(got["n_adapted"].dtype) == "Int64"


def test_plain_elpddata_is_accepted_with_na_flags(normal):
    _, res, plain = normal
    mixed = {"narrow": res["narrow"], "right": plain["right"], "wide": res["wide"]}
    got = pl.compare(mixed)
    _assert_same_numbers(got, azs.compare(mixed, round_to="none"), 60, mixed)
    for col in FLAG_COLUMNS:
        assert pd.isna(got.loc["right", col]), col
        for name in ("narrow", "wide"):
            assert not pd.isna(got.loc[name, col]) and got.loc[name, col] == 0
    # the plain PSIS numbers of both libraries are the same comparison
    ours = pl.compare(res)
    np.testing.assert_allclose(got["elpd_diff"].to_numpy(float), ours["elpd_diff"].to_numpy(float), rtol=1e-6)
    # every item an ELPDData, in a list
    both = pl.compare([plain["narrow"], plain["wide"]])
    listed = {"model_0": plain["narrow"], "model_1": plain["wide"]}
    _assert_same_numbers(both, azs.compare(listed, round_to="none"), 60, listed)
    assert both[list(FLAG_COLUMNS + WEIGHT_COLUMNS)].isna().all().all()
    _assert_printed(both.to_string(), both, 2)
    # pl.report needs ppl_loo's diagnostics: it still says so
    with pytest.raises(TypeError, match=r"model 'b' is an arviz_stats ELPDDataLOO .*pl.compare also accepts it"):
        pl.report({"a": res["narrow"], "b": plain["wide"]}, "unused.html")


def test_diff_flagged_against_an_elpddata(flagged):
    """An ELPDData flags no observation: the other model's diff_flagged sums over its own flagged ones."""
    line, other = flagged
    got = pl.compare({"line": line, "flat": other})
    _assert_same_numbers(got, azs.compare({"line": line, "flat": other}, round_to="none"), 40,
                         {"line": line, "flat": other})
    cats = np.array(hand_categories(line))
    mine = cats != "psis"
    n_doubtful = np.asarray(line.doubtful.values, bool).sum()
    assert got.loc["line", "n_doubtful"] == n_doubtful == (cats == "doubtful").sum() > 0
    assert got.loc["line", "n_adapted"] == (cats == "adapted").sum()
    assert sum(got.loc["line", c] for c in FLAG_COLUMNS[:-1]) == mine.sum()
    assert all(pd.isna(got.loc["flat", col]) for col in FLAG_COLUMNS)
    if got.index[0] == "line":
        assert got.loc["line", "diff_flagged"] == 0.0
    else:
        e_line, e_flat = np.asarray(line.elpd_i.values), np.asarray(other.elpd_i.values)
        hand = sum(e_line[i] - e_flat[i] for i in range(e_line.size) if mine[i])
        assert got.loc["line", "diff_flagged"] == pytest.approx(hand, rel=1e-12)
    _assert_printed(got.to_string(), got, 2)  # NA cells print as <NA> / NaN, the rest with 2 decimals


def test_bad_round_to_names_it(normal):
    _, res, _ = normal
    for bad in (-1, 1.5, "x", "1g", True):
        with pytest.raises(ValueError, match=r"round_to=.*number of decimals"):
            pl.compare(res, round_to=bad)


# ----------------------------------------------------------------------------- the printed table
def test_printed_table_has_fixed_decimals(normal):
    _, res, _ = normal
    table = pl.compare(res)
    _assert_printed(table.to_string(), table, 2)
    with pd.option_context("display.width", 10_000, "display.max_columns", 100):
        _assert_printed(repr(table), table, 2)  # print(pl.compare(...)) in a script or notebook
    for width in (80, 120):  # a terminal: every column shown, in blocks no wider than it, nothing elided
        with pd.option_context("display.width", width):
            text = repr(table)
        assert "..." not in text and max(len(line) for line in text.splitlines()) <= width
        blocks = [b.splitlines() for b in text.split("\n\n")]
        header = [h for b in blocks for h in b[0].rstrip(" \\").split()]
        assert header == list(table.columns) and len(blocks) > 1
        for j, name in enumerate(table.index):
            cells = [c for b in blocks for c in b[1 + j].rstrip(" \\").split()[1:]]
            assert [name, *cells] == _expected_tokens(table, name, 2)
    assert "<td>" in table._repr_html_() and f"{table['elpd'].iloc[0]:.2f}" in table._repr_html_()
    one = pl.compare(res, round_to=1)
    _assert_printed(one.to_string(), one, 1)
    zero = pl.compare(res, round_to=0)
    assert f"{zero['elpd'].iloc[0]:.0f}" in zero.to_string().splitlines()[1].split()
    raw = pl.compare(res, round_to="none")
    assert raw.to_string() == pd.DataFrame(raw).to_string()  # pandas' own format
    assert pickle.loads(pickle.dumps(one)).to_string() == one.to_string()
    assert type(table[["elpd", "se"]]) is pd.DataFrame  # a selection is a plain DataFrame


# ----------------------------------------------------------------------------- ppl-loo compare
@pytest.fixture(scope="module")
def saved(normal, tmp_path_factory):
    trees, res, _ = normal
    folder = tmp_path_factory.mktemp("compare_table")
    paths = {}
    for name in ("narrow", "right"):
        paths[name] = folder / f"{name}.nc"
        pl.add_loo(trees[name], res[name]).to_netcdf(paths[name])
    return paths


def _from_files(paths):
    trees = {}
    for name, p in paths.items():
        with xr.open_datatree(p) as t:
            trees[name] = t.load()
    return trees


def test_cli_prints_two_decimals_and_round_to(saved, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")  # a terminal of 80 columns: the table in blocks no wider
    code, out, err = run_cli("compare", saved["narrow"], saved["right"], "--quiet")
    assert code == 0 and max(len(line) for line in out.splitlines()) <= 80 and len(out.split("\n\n")) > 1
    monkeypatch.setenv("COLUMNS", "10000")  # one block, the rows parsed below
    trees = _from_files(saved)
    table = pl.compare(trees, round_to="none")
    loaded = {k: pl.LooResult.from_datatree(t) for k, t in trees.items()}
    _assert_same_numbers(table, azs.compare(loaded, round_to="none"), 60, loaded)
    code, out, err = run_cli("compare", saved["narrow"], saved["right"], "--quiet")
    assert code == 0 and err == ""
    _assert_printed(out, table, 2)
    assert out == pl.compare(trees).to_string() + "\n"
    for n in ("1", "0", "3"):
        code, out, err = run_cli("compare", saved["narrow"], saved["right"], "--round-to", n, "--quiet")
        assert code == 0
        _assert_printed(out, table, int(n))
    # --json: the unrounded numbers whatever --round-to says
    code, out, err = run_cli("compare", saved["narrow"], saved["right"], "--json", "--round-to", "1", "--quiet")
    rows = {r["name"]: r for r in json.loads(out)["models"]}
    for name in table.index:
        for col in ("elpd", "se", "elpd_diff", "dse", "weight", "diff_flagged"):
            assert rows[name][col] == pytest.approx(float(table.loc[name, col]), rel=1e-12, abs=1e-12)


def test_cli_prints_the_legend_of_the_added_columns(saved):
    """Under the table, what elpd_diff and ppl_loo's columns mean (diff_flagged: oriented as elpd_diff, and free to
    have the other sign); none with --quiet, whose output is the table alone."""
    code, out, err = run_cli("compare", saved["narrow"], saved["right"])
    assert code == 0
    table, legend = out.rsplit("\n\n", 1)  # the table may be in blocks (a narrow terminal), the legend is last
    assert " ".join(legend.split()) == LEGEND
    assert "diff_flagged: the part of elpd_diff" in LEGEND and "other sign" in LEGEND
    code, quiet, err = run_cli("compare", saved["narrow"], saved["right"], "--quiet")
    assert quiet == table + "\n"


@pytest.mark.parametrize("bad", ["-1", "1.5", "x", "", "1e2", "٣"])
def test_cli_bad_round_to_is_one_line_status_2(saved, bad):
    code, out, err = run_cli("compare", saved["narrow"], saved["right"], f"--round-to={bad}")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("ppl-loo: error: --round-to: ") and "Traceback" not in err
    assert "whole number >= 0" in err
