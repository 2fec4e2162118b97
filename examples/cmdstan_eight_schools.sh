#!/usr/bin/env bash
# Eight schools with the command line only: CmdStan output in, adaptive LOO, centred vs non-centred,
# an HTML report. The walk-through is examples/cmdstan_eight_schools.md.
#
#   bash examples/cmdstan_eight_schools.sh [WORK_DIR]        (default: ./eight_schools_out)
#
# Environment: PPL_LOO  the command (default: ppl-loo; e.g. ".venv/bin/python -m ppl_loo.cli")
#              ES_DATA  the CmdStan output of the non-centred program
#                       (default: ../shared/data/cmdstan-eight-schools beside the repository)
#              DRAWS    draws per chain of the centred program's run (default 1000; warmup the same)
set -u
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$HERE")"
PPL_LOO="${PPL_LOO:-ppl-loo}"
ES_DATA="${ES_DATA:-$ROOT/../shared/data/cmdstan-eight-schools}"
DRAWS="${DRAWS:-1000}"
OUT="${1:-eight_schools_out}"
mkdir -p "$OUT"

# Run one ppl-loo command, echoing it and its exit status on stderr; status 1 (results written, some
# observations doubtful) is not a failure of the walk-through, 2 and above are.
ppl_loo() {
    echo "+ ppl-loo $*" >&2
    $PPL_LOO "$@"
    local rc=$?
    echo "(exit status $rc)" >&2
    if [ "$rc" -gt 1 ]; then
        echo "ppl-loo failed with exit status $rc" >&2
        exit "$rc"
    fi
}

# 1. The non-centred program on CmdStan's own output (4 chains x 100 draws, CmdStan 2.18).
#    y_hat=y: the replicates y_hat go to group posterior_predictive under the name y, next to the
#    observed y of the data file (group observed_data).
ppl_loo loo "$ROOT/stan_models/eight_schools_noncentered.stan" --data "$ES_DATA/eight_schools.data.R" \
    "$ES_DATA/output_*.csv" --posterior-predictive y_hat=y --out "$OUT/noncentered.nc" --overwrite

# 2. The centred program has no CmdStan output here: write CmdStan-format CSV files with Stan's NUTS
#    in-process (no CmdStan installation needed).
ppl_loo sample "$ROOT/stan_models/eight_schools_centered.stan" --data "$ES_DATA/eight_schools.data.R" \
    --out-dir "$OUT/centered" --chains 4 --warmup "$DRAWS" --draws "$DRAWS" --seed 1 --overwrite

# 3. Adaptive LOO of the centred program, the same way.
ppl_loo loo "$ROOT/stan_models/eight_schools_centered.stan" --data "$ES_DATA/eight_schools.data.R" \
    "$OUT/centered/output_*.csv" --posterior-predictive y_hat=y --out "$OUT/centered.nc" --overwrite

# 4. Compare the two saved results, and write the HTML report.
ppl_loo compare "$OUT/noncentered.nc" "$OUT/centered.nc" --names noncentered centered \
    --html "$OUT/report.html" --overwrite

# 5. For scripts: the comparison as JSON (raw numbers; `ppl-loo loo ... --json` does the same for one fit).
ppl_loo compare "$OUT/noncentered.nc" "$OUT/centered.nc" --names noncentered centered --json --quiet \
    > "$OUT/compare.json"
echo "report: $OUT/report.html; comparison as JSON: $OUT/compare.json"
