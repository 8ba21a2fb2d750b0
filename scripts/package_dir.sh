# Sourced by the setup and data scripts: where the pinned npm tarballs are, and their integrity.
#   KILN_PACKAGE_DIR  a folder of npm tarballs, byte for byte as `npm pack` gives them (uPlot, the
#                     @stdlib data sets); default ../shared/packages/npm beside the checkout when
#                     that folder exists. kiln never contacts the npm registry.

# The folder, or nothing.
kiln_package_dir() {
  local root
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  if [[ -n "${KILN_PACKAGE_DIR:-}" ]]; then
    echo "$KILN_PACKAGE_DIR"
  elif [[ -d "$root/../shared/packages/npm" ]]; then
    (cd "$root/../shared/packages/npm" && pwd)
  fi
}

# kiln_check_integrity FILE sha512-BASE64: npm's integrity string; one line on stderr when wrong.
kiln_check_integrity() {
  local got
  got="sha512-$(openssl dgst -sha512 -binary "$1" | base64 -w0)"
  if [[ "$got" != "$2" ]]; then
    echo "kiln setup: $1 has integrity $got, expected $2 (a corrupt or different tarball: replace it)" >&2
    return 1
  fi
}
