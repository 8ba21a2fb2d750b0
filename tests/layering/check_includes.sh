#!/usr/bin/env bash
# The include rule: a module includes only modules at its own level or below, never one above.
#
#   lib/base < lib/config < lib/logging < lib/registry < lib/run < lib/sweep < lib/report
#     < lib/distributed < lib/data < lib/weights < lib/trainer < lib/tuner < lib/inference
#     < lib/commands < lib/serve  <  components/  <  tasks/  <  plugins/  <  entrypoints/, lib/app
#
# Modules are ranked by purpose. lib/run (the command seam, run folders, stored configs), lib/sweep
# (sweepers, launchers, Optuna) and lib/report (kiln report and dashboard) never load LibTorch, so
# `kiln` composes, plans sweeps and reports in milliseconds; the engine (lib/distributed .. lib/serve)
# registers its commands through lib/run. Inside the engine, as Lightning's packages: the weights'
# files (checkpoints, safetensors, TorchScript, averaging) below the trainer, the tuner (the
# learning-rate finder) and inference (the Predictor) above it. lib/app, the command-line shell, is at the top: nothing
# but the entrypoint includes it. The torch-free modules (lib/base except torch_compat.h,
# lib/config, lib/logging, lib/registry, lib/run, lib/sweep, lib/report, lib/app) must not include
# LibTorch headers at all. The public headers <kiln/...> (include/kiln/) sit above everything:
# only plugins, examples and users include them.
#
# Usage: check_includes.sh [ROOT]   (default: the repository this script is in)
# Prints one line per violation (file:line: what) and exits 1 if there is any.
set -euo pipefail
root=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
cd "$root"

dirs=(); for d in lib components tasks plugins entrypoints; do [[ -d $d ]] && dirs+=("$d"); done
files=$(find "${dirs[@]}" -type f \( -name '*.h' -o -name '*.cc' \) | sort)
# shellcheck disable=SC2086
awk '
  function module_of(path, parts) {
    split(path, parts, "/")
    return parts[1] == "lib" ? parts[1] "/" parts[2] : parts[1]
  }
  BEGIN {
    n = split("lib/base lib/config lib/logging lib/registry lib/run lib/sweep lib/report lib/distributed lib/data lib/weights lib/trainer lib/tuner lib/inference lib/commands lib/serve", low, " ")
    for (i in low) rank[low[i]] = i + 0
    rank["components"] = n + 1; rank["tasks"] = n + 2; rank["plugins"] = n + 3; rank["entrypoints"] = n + 4; rank["lib/app"] = n + 4
    split("lib/base lib/config lib/logging lib/registry lib/run lib/sweep lib/report lib/app", free, " ")
    for (i in free) torch_free[free[i]] = 1
    violations = 0
  }
  FNR == 1 { from = module_of(FILENAME); previous = "" }
  /^[ \t]*#[ \t]*include[ \t]*"/ {
    target = $0
    sub(/^[^"]*"/, "", target); sub(/".*/, "", target)
    to = module_of(target)
    if ((from in rank) && (to in rank) && rank[to] > rank[from]) {
      printf "%s:%d: %s includes %s, from %s, a module above it\n", FILENAME, FNR, from, target, to
      violations++
    }
  }
  /^[ \t]*#[ \t]*include[ \t]*[<"]kiln\// {
    # <kiln/...> (include/kiln/) is the public face over every module: for users and plugins only.
    if ((from in rank) && rank[from] < rank["plugins"]) {
      printf "%s:%d: %s includes the public header %s; inside kiln include the module header itself\n", FILENAME, FNR, from, $0
      violations++
    }
  }
  /^[ \t]*#[ \t]*include[ \t]*[<"](torch|ATen|c10)\// {
    # A header may include LibTorch under `#if __has_include(...)` (plugin.h reads its version).
    if ((from in torch_free) && FILENAME != "lib/base/torch_compat.h" && previous !~ /__has_include/) {
      printf "%s:%d: %s must not use LibTorch, but includes %s\n", FILENAME, FNR, from, $0
      violations++
    }
  }
  { previous = $0 }
  END {
    if (violations > 0) { printf "include rule: %d violation(s) (the order is in tests/layering/check_includes.sh)\n", violations; exit 1 }
    print "include rule: no module includes one above it, and the torch-free modules include no LibTorch"
  }
' $files
