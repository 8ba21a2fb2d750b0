#!/usr/bin/env bash
# What talking to Optuna costs an optuna sweep: the helper's start-up (Python and Optuna) and
# ask + tell per trial over its line protocol, with the default SQLite storage. The trials cost
# nothing (tests/plugins/sweep_tools' `quadratic` launcher computes each objective in the sweep's
# own process), so what kiln prints at the end of each sweep is the sweeper's own overhead.
# Target: ask + tell under 0.2 s per trial once Python is up. Needs Optuna in the .venv (scripts/setup_venv.sh test).
# N trials per sampler (default 30).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
kiln=${KILN:-build/bin/kiln}
plugin=${SWEEP_TOOLS_PLUGIN:-build/tests/plugins/libsweep_tools.so}
n=${N:-30}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/conf"
printf "x: 0.0\n'y': 0.0\n" >"$work/conf/train.yaml"
for sampler in random tpe; do
  start=$(date +%s%N)
  line=$("$kiln" compose -m --plugin "$plugin" --config-path "$work/conf" hydra/sweeper=optuna \
    "hydra/sweeper/sampler=$sampler" hydra.sweeper.sampler.seed=0 hydra/launcher=quadratic \
    hydra.launcher.steps=1 hydra.sweeper.objective=val/loss "hydra.sweeper.n_trials=$n" \
    'x=interval(-2,2)' 'y=interval(-3,3)' "hydra.sweep.dir=$work/$sampler" 2>&1 | grep 'optuna overhead')
  end=$(date +%s%N)
  printf '%-6s %s; whole sweep %.2f s\n' "$sampler" "${line#*optuna overhead: }" "$(((end - start) / 1000000))e-3"
done
