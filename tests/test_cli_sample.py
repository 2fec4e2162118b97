"""``ppl-loo sample``: the CmdStan-style header names the data file and the program, the library compiled
with the sampler serves ``ppl-loo loo`` of the same program (one compilation, not two), and the derived mixture
program that ``ppl-loo loo`` samples is compiled beside the sampler.

A real run of ``python -m ppl_loo.cli sample`` on ``stan_models/normal_known_sigma.stan`` (1 chain, 50 draws).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("httpstan")
if shutil.which("g++") is None:  # pragma: no cover
    pytest.skip("no C++ compiler", allow_module_level=True)

import ppl_loo as pl
from ppl_loo.adapters.stan.posterior import loo_adapter
from ppl_loo.io.cmdstan import read_cmdstan_csv
from ppl_loo.stan_bridge.compile import SAMPLER_FLAG, cache_key, cached_build
from ppl_loo.stan_bridge.derived import sampling_program

ROOT = Path(__file__).resolve().parents[1]
NORMAL = ROOT / "stan_models" / "normal_known_sigma.stan"
DATA = {"N": 5, "y": [0.3, -0.5, 1.1, 0.2, 6.0], "sigma": 1.0, "mu0": 0.0, "tau0": 2.0}


@pytest.fixture(scope="module")
def sampled(tmp_path_factory):
    """``ppl-loo sample`` as a user runs it: ``(data file, CSV path, stderr)``."""
    d = tmp_path_factory.mktemp("sample")
    data_file = d / "pois_data.json"  # a name unlike the program's: the header must say which is which
    data_file.write_text(json.dumps(DATA))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "ppl_loo.cli", "sample", str(NORMAL), "--data", str(data_file),
                           "--out-dir", str(d / "out"), "--chains", "1", "--warmup", "50", "--draws", "50",
                           "--seed", "2"], capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    csv = d / "out" / "output_1.csv"
    assert proc.stdout.split() == [str(csv)]
    return data_file, csv, proc.stderr


def _header(csv):
    """The header's comment lines, without the ``# `` prefix, up to the column names."""
    lines = []
    for line in csv.read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line[2:])
    return lines


def test_header_names_the_data_file_not_the_program(sampled):
    data_file, csv, _ = sampled
    header = _header(csv)
    block = header.index("data")  # CmdStan's "data" block: its "file" is the data file
    assert header[block + 1] == f"  file = {data_file}"
    assert not any(ln.strip() == f"file = {NORMAL}" for ln in header)  # the program is not called the data
    assert "model = normal_known_sigma_model" in header  # the program, named as CmdStan names it
    f = read_cmdstan_csv(csv)
    assert f.config["model"] == "normal_known_sigma_model"
    assert f.sampling.shape[0] == 50
    tree = pl.from_cmdstan([csv])
    assert tree.attrs["model_name"] == "normal_known_sigma_model"
    assert tree.posterior.sizes["chain"] == 1 and tree.posterior.sizes["draw"] == 50


def test_loo_reuses_the_library_compiled_for_sample(sampled, tmp_path, monkeypatch):
    """A model without the sampler loads the sampler's library when only that one is cached: ``sample`` then
    ``loo`` compile the program once. A private cache holding only the sampler's entry (copied from the one
    ``ppl-loo sample`` just used) shows it without a second compilation in the test."""
    code = NORMAL.read_text()
    sampler_model = pl.StanModel(NORMAL, DATA, sampler=True)  # a cache hit: `sample` built it
    assert sampler_model.compiled is False
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    shutil.copytree(sampler_model.build.directory, cache / sampler_model.build.directory.name)
    monkeypatch.setenv("PPL_LOO_STAN_CACHE", str(cache))
    assert sampler_model.build.key == cache_key(code, (SAMPLER_FLAG,))
    assert not (cache / cache_key(code, ()) / "bridge.so").exists()  # the plain library is not cached here
    plain = pl.StanModel(NORMAL, DATA)
    assert plain.compiled is False  # no compiler run: the sampler's library serves
    assert plain.build.library == cache / sampler_model.build.key / "bridge.so"
    assert plain.extra_cxxflags == ()  # it is still a model without the sampler (its derived programs too)
    assert sorted(p.name for p in cache.iterdir()) == [sampler_model.build.key]  # nothing else was built
    x = np.linspace(-2, 2, 7)[:, None]
    np.testing.assert_array_equal(plain.log_density(x), sampler_model.log_density(x))
    deleted = plain.with_data({**DATA, "N": 4, "y": DATA["y"][:4]})  # data deletion, as the LOO densities do
    assert deleted.compiled is False and deleted.build.library == plain.build.library


def test_sample_compiles_the_sampling_program_that_loo_runs(sampled):
    """After ``ppl-loo sample`` the derived mixture program is in the cache, under the key ``pl.loo``'s mixture run
    looks up: building it there compiles nothing."""
    model = pl.StanModel(NORMAL, DATA, sampler=True)
    assert cached_build(sampling_program(model.code, "log_lik"), (SAMPLER_FLAG,)) is not None
    assert loo_adapter(model)._sampling_program().compiled is False
