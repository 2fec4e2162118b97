"""Build ``ovarian.npz`` from the raw CSV files of the ovarian-cancer microarray data.

Run once from the repository root (the CSVs live in the project's shared data folder)::

    python -m ppl_loo.datasets.make_ovarian /path/to/shared/data/ovarian

The archive keeps the *raw* values in float64 (``x``: 54 x 1536, ``y``: 54 labels with 30 ones);
:func:`ppl_loo.datasets.load_ovarian` standardizes them. Source: Schummer et al. (1999),
Hernandez-Lobato et al. (2010), as shipped in the data folder of ``bayesianquilts`` 0.9.0.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

OUT = Path(__file__).with_name("ovarian.npz")


def main(src: str | Path) -> Path:
    """Read ``ovarian_x.csv`` / ``ovarian_y.csv`` from ``src`` and write ``ovarian.npz``."""
    src = Path(src)
    x = np.loadtxt(src / "ovarian_x.csv", delimiter=",", dtype=np.float64)
    y = np.loadtxt(src / "ovarian_y.csv", delimiter=",", dtype=np.float64)
    if x.shape != (54, 1536) or y.shape != (54,):
        raise ValueError(f"unexpected shapes x {x.shape}, y {y.shape}; expected (54, 1536), (54,).")
    if not np.isin(y, (0.0, 1.0)).all():
        raise ValueError("y must be binary.")
    np.savez_compressed(OUT, x=x, y=y.astype(np.int8))
    return OUT


if __name__ == "__main__":
    default = Path(__file__).resolve().parents[3] / "shared" / "data" / "ovarian"
    path = main(sys.argv[1] if len(sys.argv) > 1 else default)
    print(f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB)")
