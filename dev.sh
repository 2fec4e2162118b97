#!/usr/bin/env bash
# Set up the environment (a virtualenv in .venv on a Python >= 3.12 found on this machine) and run
#   bash dev.sh demo   - the embedded demo (ppl-loo demo)
#   bash dev.sh test   - the test suite
#   bash dev.sh env    - only the environment
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

if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import ppl_loo, pytest' >/dev/null 2>&1; then
  PY=$(find_python) || { echo "error: ppl_loo needs Python >= 3.12 (PyMC 6, ArviZ 1.x); none found. Install one (e.g. pyenv install 3.12) or set PPL_LOO_PYTHON." >&2; exit 1; }
  echo "using $PY ($("$PY" --version 2>&1)) for $VENV" >&2
  "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q -e ".[test]"
fi

case "${1:-test}" in
  demo) shift; exec "$VENV/bin/ppl-loo" demo "$@" ;;
  test) shift; exec "$VENV/bin/python" -m pytest -q "$@" ;;
  env) ;;
  *) echo "usage: bash dev.sh {demo|test|env}" >&2; exit 2 ;;
esac
