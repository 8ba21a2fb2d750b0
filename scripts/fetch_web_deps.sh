#!/usr/bin/env bash
# Fetches the charting library that `kiln report` inlines into its pages (uPlot, pinned in
# lib/app/report/web/uplot.lock) with npm, and checks its sha512 integrity. The tarball lands in
# ${KILN_WEB_CACHE:-~/.cache/kiln/web}, where CMake finds it, checks it again and embeds it.
# Idempotent: a tarball already there with the right digest is kept. Needs npm only when fetching.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
lock="$root/lib/app/report/web/uplot.lock"
field() { sed -n "s/^$1=//p" "$lock"; }
package=$(field package)
version=$(field version)
integrity=$(field integrity)
cache=${KILN_WEB_CACHE:-$HOME/.cache/kiln/web}
tarball="$cache/$package-$version.tgz"

digest() { echo "sha512-$(openssl dgst -sha512 -binary "$1" | base64 -w0)"; }

if [[ -f "$tarball" && "$(digest "$tarball")" == "$integrity" ]]; then
  exit 0
fi
if ! command -v npm >/dev/null; then
  echo "kiln setup: npm is needed to fetch $package@$version for kiln report (apt-get install npm)" >&2
  exit 1
fi
mkdir -p "$cache"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "kiln setup: fetching $package@$version with npm"
(cd "$tmp" && npm pack --silent "$package@$version" >/dev/null 2>&1)
got=$(digest "$tmp/$package-$version.tgz")
if [[ "$got" != "$integrity" ]]; then
  echo "kiln setup: $package-$version.tgz has integrity $got, expected $integrity (lib/app/report/web/uplot.lock)" >&2
  exit 1
fi
mv "$tmp/$package-$version.tgz" "$tarball"
echo "kiln setup: $package@$version verified and stored in $cache"
