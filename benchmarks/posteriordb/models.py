"""The seven posteriordb models of Lai & Yao (2024), Tables 2-3, in PyMC with the priors of App. E.

Data: ``shared/data/posteriordb/*.json`` (posteriordb snapshot, see the implementer's notes 5.4).
Each builder takes the data restricted to a split (a dict of arrays, observation-indexed entries
subset) and returns a ``pymc.Model`` whose observed variable is ``"y"``. Group sizes (states,
counties, sites, years) always come from the full data, so the parameter vector is the same for
the train, validation and test models (the split is at observation level, notes erratum 10).

Formulations (notes 5.4, App. E; "N(0, s)" is a normal with sd s):

- election: y ~ Bernoulli(logit^-1(b0 + b1 black + b2 female + b3 black*female + b4 v_prev + a[age]
  + e[edu] + ae[age_edu] + s[state] + r[region])), b0..b4 ~ N(0, 100), varying effects centred with
  sds ~ LogNormal(3, 1).
- glmm: counts ~ Poisson(exp(mu + alpha[site] + eps[year])), mu ~ N(0, 10), alpha ~ N(0, sigma_s),
  eps ~ N(0, sigma_y), sigma_s ~ LogNormal(1, 1), sigma_y ~ LogNormal(0, 1) (the 43 missing counts
  of the data set are not used).
- earnings: log(earn) ~ N(b0 + b1 h + b2 male + b3 h male, sigma), h = height centred, b ~ N(0, 1),
  sigma ~ LogNormal(0, 1).
- kidscore: kid_score ~ N(b0 + b1 hs + b2 iq + b3 hs iq, sigma), predictors centred (the outcome is
  not, as the paper's numbers imply), b ~ N(0, 1), sigma ~ HalfNormal(1).
- nes: partyid7 ~ N(b0 + b1 ideo + b2 race + b3..b5 I(age = 2, 3, 4) + b6 educ + b7 gender
  + b8 income, sigma), b ~ N(0, 1), sigma ~ HalfNormal(1).
- radon: log_radon ~ N(a[county] + b[county] floor, sigma), a ~ N(mu_a, sigma_a),
  b ~ N(mu_b, sigma_b), mu ~ N(0, 10), sigmas ~ LogNormal(0, 1) (centred, as App. E writes it).
- wells: switched ~ Bernoulli(logit^-1(b0 + b1 a + b2 d + b3 e + b4 a d + b5 a e + b6 d e)),
  a = arsenic, d = dist / 100, e = educ / 4, each centred (posteriordb's scaling), b ~ N(0, 1).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pymc as pm

ROOT = Path(__file__).resolve().parents[2]
_CANDIDATES = (ROOT / "shared/data/posteriordb", ROOT.parent / "shared/data/posteriordb",
               Path("/work/shared/data/posteriordb"))

#: paper name -> (posteriordb data file, likelihood, scores reported)
MODELS = {
    "election": ("election88", "bernoulli", ("log", "quadratic")),
    "glmm": ("GLMM_data", "poisson", ("log",)),
    "earnings": ("earnings", "normal", ("log", "crps")),
    "kidscore": ("kidiq_with_mom_work", "normal", ("log", "crps")),
    "nes": ("nes2000", "normal", ("log", "crps")),
    "radon": ("radon_all", "normal", ("log", "crps")),
    "wells": ("wells_data", "bernoulli", ("log", "quadratic")),
}


def data_dir() -> Path:
    for p in _CANDIDATES:
        if p.is_dir():
            return p
    raise FileNotFoundError("shared/data/posteriordb not found (looked in " + ", ".join(map(str, _CANDIDATES)) + ")")


def load(name: str) -> dict:
    """The prepared data of a model: observation-indexed arrays plus group sizes (``n`` = #obs)."""
    raw = json.loads((data_dir() / f"{MODELS[name][0]}.json").read_text())
    a = {k: np.asarray(v) for k, v in raw.items()}
    if name == "election":
        d = {k: a[k] for k in ("age", "edu", "age_edu", "state", "region_full", "black", "female", "v_prev_full",
                               "y")}
        for k in ("age", "edu", "age_edu", "state", "region_full"):
            d[k] = d[k] - 1
        sizes = {k: int(a[s]) for k, s in (("n_age", "n_age"), ("n_edu", "n_edu"), ("n_age_edu", "n_age_edu"),
                                           ("n_state", "n_state"), ("n_region", "n_region_full"))}
    elif name == "glmm":
        d = {"y": a["obs"], "site": a["obssite"] - 1, "year": a["obsyear"] - 1}
        sizes = {"n_site": int(a["nsite"]), "n_year": int(a["nyear"])}
    elif name == "earnings":
        h = a["height"].astype(float)
        d = {"y": np.log(a["earn"].astype(float)), "h": h - h.mean(), "male": a["male"].astype(float)}
        sizes = {}
    elif name == "kidscore":
        hs, iq = a["mom_hs"].astype(float), a["mom_iq"].astype(float)
        d = {"y": a["kid_score"].astype(float), "hs": hs - hs.mean(), "iq": iq - iq.mean()}
        sizes = {}
    elif name == "nes":
        d = {"y": a["partyid7"].astype(float), "ideo": a["real_ideo"].astype(float),
             "race": a["race_adj"].astype(float), "age": a["age_discrete"], "educ": a["educ1"].astype(float),
             "gender": a["gender"].astype(float), "income": a["income"].astype(float)}
        sizes = {}
    elif name == "radon":
        d = {"y": a["log_radon"].astype(float), "floor": a["floor_measure"].astype(float),
             "county": a["county_idx"] - 1}
        sizes = {"n_county": int(a["J"])}
    elif name == "wells":
        ars, dist, educ = a["arsenic"].astype(float), a["dist"] / 100.0, a["educ"] / 4.0
        d = {"y": a["switched"], "a": ars - ars.mean(), "d": dist - dist.mean(), "e": educ - educ.mean()}
        sizes = {}
    else:
        raise KeyError(name)
    n = len(d["y"])
    return {"obs": d, "sizes": sizes, "n": n}


def subset(data: dict, idx) -> dict:
    return {"obs": {k: v[idx] for k, v in data["obs"].items()}, "sizes": data["sizes"], "n": len(idx)}


def split(n: int, seed: int):
    """60/20/20 train/validation/test indices, from ``numpy.random.default_rng(seed)`` (notes erratum 10)."""
    perm = np.random.default_rng(seed).permutation(n)
    a, b = int(round(0.6 * n)), int(round(0.8 * n))
    return np.sort(perm[:a]), np.sort(perm[a:b]), np.sort(perm[b:])


def build(name: str, data: dict) -> pm.Model:
    """The PyMC model of ``name`` on ``data`` (from :func:`load` / :func:`subset`)."""
    o, s = data["obs"], data["sizes"]
    with pm.Model() as model:
        if name == "election":
            b = pm.Normal("b", 0.0, 100.0, shape=5)
            sd = pm.LogNormal("sigma", 3.0, 1.0, shape=5)
            a_age = pm.Normal("a_age", 0.0, sd[0], shape=s["n_age"])
            a_edu = pm.Normal("a_edu", 0.0, sd[1], shape=s["n_edu"])
            a_ae = pm.Normal("a_age_edu", 0.0, sd[2], shape=s["n_age_edu"])
            a_st = pm.Normal("a_state", 0.0, sd[3], shape=s["n_state"])
            a_rg = pm.Normal("a_region", 0.0, sd[4], shape=s["n_region"])
            eta = (b[0] + b[1] * o["black"] + b[2] * o["female"] + b[3] * o["black"] * o["female"]
                   + b[4] * o["v_prev_full"] + a_age[o["age"]] + a_edu[o["edu"]] + a_ae[o["age_edu"]]
                   + a_st[o["state"]] + a_rg[o["region_full"]])
            pm.Bernoulli("y", logit_p=eta, observed=o["y"])
        elif name == "glmm":
            mu = pm.Normal("mu", 0.0, 10.0)
            sd_s = pm.LogNormal("sigma_site", 1.0, 1.0)
            sd_y = pm.LogNormal("sigma_year", 0.0, 1.0)
            alpha = pm.Normal("alpha", 0.0, sd_s, shape=s["n_site"])
            eps = pm.Normal("eps", 0.0, sd_y, shape=s["n_year"])
            pm.Poisson("y", pm.math.exp(mu + alpha[o["site"]] + eps[o["year"]]), observed=o["y"])
        elif name == "earnings":
            b = pm.Normal("b", 0.0, 1.0, shape=4)
            sigma = pm.LogNormal("sigma", 0.0, 1.0)
            mu = b[0] + b[1] * o["h"] + b[2] * o["male"] + b[3] * o["h"] * o["male"]
            pm.Normal("y", mu, sigma, observed=o["y"])
        elif name == "kidscore":
            b = pm.Normal("b", 0.0, 1.0, shape=4)
            sigma = pm.HalfNormal("sigma", 1.0)
            mu = b[0] + b[1] * o["hs"] + b[2] * o["iq"] + b[3] * o["hs"] * o["iq"]
            pm.Normal("y", mu, sigma, observed=o["y"])
        elif name == "nes":
            b = pm.Normal("b", 0.0, 1.0, shape=9)
            sigma = pm.HalfNormal("sigma", 1.0)
            age = o["age"]
            mu = (b[0] + b[1] * o["ideo"] + b[2] * o["race"] + b[3] * (age == 2) + b[4] * (age == 3)
                  + b[5] * (age == 4) + b[6] * o["educ"] + b[7] * o["gender"] + b[8] * o["income"])
            pm.Normal("y", mu, sigma, observed=o["y"])
        elif name == "radon":
            mu_a = pm.Normal("mu_a", 0.0, 10.0)
            mu_b = pm.Normal("mu_b", 0.0, 10.0)
            sd_a = pm.LogNormal("sigma_a", 0.0, 1.0)
            sd_b = pm.LogNormal("sigma_b", 0.0, 1.0)
            sigma = pm.LogNormal("sigma", 0.0, 1.0)
            a = pm.Normal("a", mu_a, sd_a, shape=s["n_county"])
            b = pm.Normal("b", mu_b, sd_b, shape=s["n_county"])
            c = o["county"]
            pm.Normal("y", a[c] + b[c] * o["floor"], sigma, observed=o["y"])
        elif name == "wells":
            b = pm.Normal("b", 0.0, 1.0, shape=7)
            a, d, e = o["a"], o["d"], o["e"]
            eta = b[0] + b[1] * a + b[2] * d + b[3] * e + b[4] * a * d + b[5] * a * e + b[6] * d * e
            pm.Bernoulli("y", logit_p=eta, observed=o["y"])
        else:
            raise KeyError(name)
    return model


#: Lai & Yao, Tables 2-3 (mean over 5 seeds; std in the paper): (model, method) -> family -> score -> value.
#: Quad is the paper's number, which is not the standard mean quadratic score (notes erratum 4).
PAPER = {
    ("election", "VI"): {"diag": {"log": -1494.44, "quadratic": 0.21}, "dense": {"log": -1493.80, "quadratic": 0.21}},
    ("election", "PVI-log"): {"diag": {"log": -1490.89, "quadratic": 0.21},
                              "dense": {"log": -1493.64, "quadratic": 0.20}},
    ("election", "PVI-quadratic"): {"diag": {"log": -1603.60, "quadratic": 0.25},
                                    "dense": {"log": -1603.64, "quadratic": 0.25}},
    ("glmm", "VI"): {"diag": {"log": -1159.49}, "dense": {"log": -1161.63}},
    ("glmm", "PVI-log"): {"diag": {"log": -1150.21}, "dense": {"log": -1149.00}},
    ("earnings", "VI"): {"diag": {"log": -298.12, "crps": 111.51}, "dense": {"log": -298.18, "crps": 111.60}},
    ("earnings", "PVI-log"): {"diag": {"log": -288.69, "crps": 108.49}, "dense": {"log": -283.42, "crps": 109.08}},
    ("earnings", "PVI-crps"): {"diag": {"log": -291.54, "crps": 109.55}, "dense": {"log": -284.29, "crps": 108.78}},
    ("kidscore", "VI"): {"diag": {"log": -590.67, "crps": 4481.15}, "dense": {"log": -590.71, "crps": 4480.55}},
    ("kidscore", "PVI-log"): {"diag": {"log": -369.91, "crps": 872.82}, "dense": {"log": -371.06, "crps": 871.84}},
    ("kidscore", "PVI-crps"): {"diag": {"log": -370.27, "crps": 875.74}, "dense": {"log": -370.51, "crps": 867.66}},
    ("nes", "VI"): {"diag": {"log": -185.71, "crps": 91.42}, "dense": {"log": -185.71, "crps": 91.49}},
    ("nes", "PVI-log"): {"diag": {"log": -185.60, "crps": 91.02}, "dense": {"log": -184.87, "crps": 90.70}},
    ("nes", "PVI-crps"): {"diag": {"log": -187.15, "crps": 87.81}, "dense": {"log": -187.91, "crps": 89.75}},
    ("radon", "VI"): {"diag": {"log": -3412.90, "crps": 1338.01}, "dense": {"log": -3411.69, "crps": 1337.71}},
    ("radon", "PVI-log"): {"diag": {"log": -3372.10, "crps": 1333.02}, "dense": {"log": -3415.79, "crps": 1344.73}},
    ("radon", "PVI-crps"): {"diag": {"log": -3482.39, "crps": 1323.71}, "dense": {"log": -3495.78, "crps": 1330.10}},
    ("wells", "VI"): {"diag": {"log": -393.64, "quadratic": 0.18}, "dense": {"log": -393.68, "quadratic": 0.18}},
    ("wells", "PVI-log"): {"diag": {"log": -392.14, "quadratic": 0.18}, "dense": {"log": -391.02, "quadratic": 0.18}},
    ("wells", "PVI-quadratic"): {"diag": {"log": -415.39, "quadratic": 0.27},
                                 "dense": {"log": -415.40, "quadratic": 0.27}},
}
