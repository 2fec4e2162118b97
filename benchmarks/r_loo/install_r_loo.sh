#!/usr/bin/env bash
# Install R's loo 2.10.1 (with posterior 1.7.1) into a private library, for benchmarks/r_loo/make_reference.py.
#
# Debian's r-cran-loo is 2.5.1; loo 2.10.1 needs posterior >= 1.7.0, which Debian does not package. Both build
# from their GitHub tags; every other dependency comes from Debian (bookworm: R 4.2.2). CRAN is not needed.
#
#   LOO_SRC=/path/to/loo.git POSTERIOR_SRC=/path/to/posterior.git RLIB=/work/rlib benchmarks/r_loo/install_r_loo.sh
#
# LOO_SRC / POSTERIOR_SRC: git directories of https://github.com/stan-dev/loo and https://github.com/stan-dev/posterior
# (bare clones are fine; default: clone them from GitHub). Then run make_reference.py with R_LIBS=$RLIB.
set -euo pipefail
RLIB=${RLIB:-/work/rlib}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

apt-get install -y --no-install-recommends r-base-core r-cran-checkmate r-cran-matrixstats r-cran-jsonlite \
  r-cran-tibble r-cran-vctrs r-cran-distributional r-cran-rlang r-cran-pillar r-cran-tensora r-cran-abind

if [ -z "${LOO_SRC:-}" ]; then git clone --bare https://github.com/stan-dev/loo "$WORK/loo.git"; LOO_SRC=$WORK/loo.git; fi
if [ -z "${POSTERIOR_SRC:-}" ]; then
  git clone --bare https://github.com/stan-dev/posterior "$WORK/posterior.git"; POSTERIOR_SRC=$WORK/posterior.git
fi
mkdir -p "$RLIB" "$WORK/loo" "$WORK/posterior"
# posterior's touchstone/ (benchmark data, not part of the package) is left out
git --git-dir="$POSTERIOR_SRC" archive v1.7.1 -- . ':!touchstone' | tar -x -C "$WORK/posterior"
git --git-dir="$LOO_SRC" archive v2.10.1 | tar -x -C "$WORK/loo"
R CMD INSTALL --no-docs --no-multiarch --library="$RLIB" "$WORK/posterior"
R CMD INSTALL --no-docs --no-multiarch --library="$RLIB" "$WORK/loo"
R_LIBS="$RLIB" Rscript -e 'stopifnot(packageVersion("loo") == "2.10.1", packageVersion("posterior") == "1.7.1")'
echo "loo 2.10.1 and posterior 1.7.1 installed in $RLIB"
