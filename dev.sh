#!/usr/bin/env bash
# Set up the environment (a virtualenv in .venv on a Python >= 3.12 found on this machine) and run
#   bash dev.sh demo   - the embedded demo (ppl-loo demo)
#   bash dev.sh test   - the test suite
#   bash dev.sh lint   - ruff check (the rules in pyproject.toml)
#   bash dev.sh env    - only the environment
# `test` and `env` also install headless Chromium and its driver (Debian's chromium, chromium-driver; the browser
# test of the HTML report needs them) when they are missing and apt-get can be run as root; otherwise they say so.
set -euo pipefail
cd "$(dirname "$0")"
VENV="${PPL_LOO_VENV:-.venv}"

find_python() {
  local c v
  for c in "${PPL_LOO_PYTHON:-}" python3.13 python3.12 python3 python \
           "$(command -v pyenv >/dev/null 2>&1 && pyenv root)"/versions/3.1[2-9]*/bin/python \
           "$HOME"/.pyenv/versions/3.1[2-9]*/bin/python /root/.pyenv/versions/3.1[2-9]*/bin/python \
           /usr/local/bin/python3.1[2-9] /usr/bin/python3.1[2-9]; do
    [ -n "$c" ] || continue
    command -v "$c" >/dev/null 2>&1 || [ -x "$c" ] || continue
    v=$("$c" -c 'import sys; print(int(sys.version_info >= (3, 12)))' 2>/dev/null) || continue
    if [ "$v" = 1 ]; then echo "$c"; return 0; fi
  done
  return 1
}

if [ ! -x "$VENV/bin/python" ] || [ ! -x "$VENV/bin/ruff" ] ||
   ! "$VENV/bin/python" -c 'import ppl_loo, pytest, selenium, dask.array, distributed, zarr' >/dev/null 2>&1; then
  PY=$(find_python) || { echo "error: ppl_loo needs Python >= 3.12 (PyMC 6, ArviZ 1.x); none found. Install one (e.g. pyenv install 3.12) or set PPL_LOO_PYTHON." >&2; exit 1; }
  echo "using $PY ($("$PY" --version 2>&1)) for $VENV" >&2
  "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q -e ".[test]"
fi

install_chromium() {
  if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then return 0; fi
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "installing chromium and chromium-driver (browser test of the HTML report)" >&2
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver ||
      echo "note: apt-get could not install chromium chromium-driver; tests/test_report_browser.py will fail until they are installed" >&2
  else
    echo "note: chromium/chromedriver not found and apt-get cannot be run as root here; install chromium and chromium-driver (Debian) for tests/test_report_browser.py" >&2
  fi
}

case "${1:-test}" in
  test|env) install_chromium ;;
esac

case "${1:-test}" in
  demo) shift; exec "$VENV/bin/ppl-loo" demo "$@" ;;
  test) shift
    # test files run in parallel worker processes (pytest-xdist), one whole file per worker at a time (module-scoped
    # fixtures such as the reduced benchmarks run once): as many workers as cores, at most one per 6 GB of memory
    # (a worker's peak) and at most 4; PPL_LOO_TEST_WORKERS overrides (0: no workers, one process)
    workers="${PPL_LOO_TEST_WORKERS:-$("$VENV/bin/python" -c 'import os
mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
print(max(1, min(len(os.sched_getaffinity(0)), int(mem // 6), 4)))')}"
    if [ "$workers" -gt 0 ] 2>/dev/null; then
      exec "$VENV/bin/python" -m pytest -q -n "$workers" --dist loadfile "$@"
    fi
    exec "$VENV/bin/python" -m pytest -q "$@" ;;
  lint) shift; exec "$VENV/bin/ruff" check "$@" ;;
  env) ;;
  *) echo "usage: bash dev.sh {demo|test|lint|env}" >&2; exit 2 ;;
esac
