# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Eight schools in PyMC: centred vs non-centred, compared with adaptive LOO
#
# A notebook in jupytext's percent format: open it in Jupyter (with jupytext) or VS Code, or run it
# as a script (`python examples/notebook_compare.py [report.html]`). The two parameterizations of
# the eight-schools model (Rubin 1981) are the same model; their LOO estimates differ only through
# how well their samplers explore it, which is what the table's `n_adapted` / `n_doubtful`
# columns and the report show.

# %%
import sys
import warnings

import numpy as np
import pymc as pm

import ppl_loo as pl

try:
    from IPython.display import display
except ImportError:  # run as a plain script
    def display(obj):
        print(obj.to_string() if hasattr(obj, "to_string") else obj)

REPORT = sys.argv[1] if len(sys.argv) > 1 and sys.argv[1].endswith(".html") else "eight_schools_report.html"

y = np.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0])
sigma = np.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])
coords = {"school": np.arange(8)}


# %% [markdown]
# ## The two models, sampled with PyMC's NUTS (small runs)

# %%
def sample(model, seed):
    with model:
        idata = pm.sample(draws=500, tune=1000, chains=4, cores=1, target_accept=0.95, random_seed=seed,
                          progressbar=False, compute_convergence_checks=False, nuts_sampler="pymc")
        pm.compute_log_likelihood(idata, progressbar=False)
        pm.sample_posterior_predictive(idata, extend_inferencedata=True, random_seed=seed, progressbar=False)
    return idata


with pm.Model(coords=coords) as centered:
    mu = pm.Normal("mu", 0, 5)
    tau = pm.HalfCauchy("tau", 5)
    theta = pm.Normal("theta", mu, tau, dims="school")
    pm.Normal("y", theta, sigma, observed=y, dims="school")

with pm.Model(coords=coords) as noncentered:
    mu = pm.Normal("mu", 0, 5)
    tau = pm.HalfCauchy("tau", 5)
    theta_tilde = pm.Normal("theta_tilde", 0, 1, dims="school")
    theta = pm.Deterministic("theta", mu + tau * theta_tilde, dims="school")
    pm.Normal("y", theta, sigma, observed=y, dims="school")

models = {"centered": centered, "noncentered": noncentered}
fits = {name: sample(m, seed) for (name, m), seed in zip(models.items(), (1, 2))}

# %% [markdown]
# ## Adaptive LOO of each fit
#
# `pl.loo(idata, model)` starts from plain PSIS-LOO and adapts the proposal of every observation
# it cannot vouch for; `summary_table()` lists what it did.

# %%
results = {}
for name, idata in fits.items():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the summary says what was adapted or doubtful
        results[name] = pl.loo(idata, models[name], progressbar=False)
    print(f"{name}: elpd_loo = {results[name].elpd:.2f} (SE {results[name].se:.2f})")
    display(results[name].summary_table(flagged_only=True))

# %% [markdown]
# ## Comparison and report

# %%
trees = {name: pl.add_loo(fits[name], res) for name, res in results.items()}
table = pl.compare(trees)
display(table)

# %%
path = pl.report(trees, REPORT, title="Eight schools: centred vs non-centred", overwrite=True)
print(f"best: {table.index[0]}; report written to {path}")
