#!/usr/bin/env bash
# Puts the charting library that `kiln report` inlines into its pages (uPlot, pinned in
# lib/report/web/uplot.lock) where CMake finds it, checks it again and embeds it:
# ${KILN_WEB_CACHE:-~/.cache/kiln/web}/uplot-VERSION.tgz.
# The tarball comes from a folder of pinned npm tarballs, byte for byte as npm serves them
# (KILN_PACKAGE_DIR; by default ../shared/packages/npm beside the checkout when there is one), and
# must match the lock's sha512 integrity. No registry is contacted: an air-gapped machine works
# the same way. Idempotent: a tarball already in the cache with the right digest is kept.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$root/scripts/package_dir.sh"
lock="$root/lib/report/web/uplot.lock"
field() { sed -n "s/^$1=//p" "$lock"; }
package=$(field package)
version=$(field version)
integrity=$(field integrity)
cache=${KILN_WEB_CACHE:-$HOME/.cache/kiln/web}
tarball="$cache/$package-$version.tgz"

if [[ -f "$tarball" ]] && kiln_check_integrity "$tarball" "$integrity" 2>/dev/null; then
  exit 0
fi
dir=$(kiln_package_dir)
if [[ -z "$dir" ]]; then
  echo "kiln setup: $package-$version.tgz (kiln report's charts) not found: set KILN_PACKAGE_DIR to a folder that holds it (npm pack $package@$version) and run scripts/setup.sh again; kiln builds and trains without it" >&2
  exit 1
fi
source_tgz="$dir/$package-$version.tgz"
[[ -f "$source_tgz" ]] || { echo "kiln setup: $source_tgz not found (KILN_PACKAGE_DIR=$dir): kiln report is built without charts" >&2; exit 1; }
kiln_check_integrity "$source_tgz" "$integrity" || exit 1
mkdir -p "$cache"
cp "$source_tgz" "$tarball.tmp" && mv "$tarball.tmp" "$tarball"
echo "kiln setup: $package@$version verified and stored in $cache"
