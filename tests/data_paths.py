"""Where the tests' fixture files are: ``tests/data/``, found relative to this file (see tests/data/README.md).

Test modules import the constants (``from data_paths import EIGHT_SCHOOLS``): ``tests/`` is on ``sys.path``
during a pytest run because ``tests/conftest.py`` lives there.
"""

from pathlib import Path

#: the fixture folder, ``tests/data``
DATA = Path(__file__).resolve().parent / "data"

#: four CmdStan 2.18 CSV files (``output_1.csv`` .. ``output_4.csv``) of the non-centered eight-schools model and its
#: data file ``eight_schools.data.R``
EIGHT_SCHOOLS = DATA / "cmdstan-eight-schools"

#: an excerpt of the ovarian-cancer microarray CSV files (the full data ship as ``ppl_loo/datasets/ovarian.npz``)
OVARIAN = DATA / "ovarian"
