#!/usr/bin/env bash
# The device command of benchmarks/gpu.py on a lent GPU machine (no internet): install the wheels of .whl/ (the
# packages `import ppl_loo` needs that the machine lacks) into /tmp/site, print the GPU and versions, then run the
# benchmark within BUDGET seconds (default 420), its log in $OUT/gpu.log and its results in $OUT/gpu.json.
#   bash benchmarks/gpu_run.sh [more gpu.py arguments, e.g. --rows engine,refits]
# Prepare .whl/ on a machine with internet (see the module docstring of benchmarks/gpu.py) and carry it along.
set -u
OUT=${OUT:-/tmp/gpu_out}
PY=${PY:-python3}
BUDGET=${BUDGET:-420}
mkdir -p "$OUT"
if ! $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    2>/tmp/pip.err; then  # no pip: the wheels are pure Python, and a wheel is a zip archive
  cat /tmp/pip.err; for w in .whl/*.whl; do $PY -m zipfile -e "$w" /tmp/site; done
fi
export PYTHONPATH=/tmp/site:$PWD
{
  nvidia-smi -L 2>&1
  $PY -c "import sys, jax, jaxlib, numpyro, blackjax; print(sys.version); print('jax', jax.__version__, \
'jaxlib', jaxlib.__version__, 'numpyro', numpyro.__version__, 'blackjax', blackjax.__version__)" 2>&1
} | tee "$OUT/gpu.log"
PYTHONUNBUFFERED=1 timeout $((BUDGET + 30)) $PY benchmarks/gpu.py --out "$OUT" --budget-s "$BUDGET" "$@" 2>&1 \
    | tee -a "$OUT/gpu.log"
exit "${PIPESTATUS[0]}"
