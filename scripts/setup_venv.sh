#!/usr/bin/env bash
# Makes the project's Python virtual environment (.venv, or KILN_VENV) with the pinned LibTorch:
# PyPI's torch wheel (scripts/python/torch.txt), whose lib/, include/ and share/cmake/ kiln builds
# against. The system Python is not changed.
#   setup_venv.sh cpu    torch and the two CUDA runtime libraries libtorch_cpu links
#   setup_venv.sh cuda   and what libtorch_cuda links (a build with KILN_CUDA=ON)
#   setup_venv.sh test   and what Python's `import torch` needs, plus torchvision, Lightning,
#                        onnx, tensorboard, optuna, nbclient and ipykernel (scripts/python/test.txt)
# Every package is installed with --no-deps at its pinned version; NVIDIA's come one by one from
# scripts/python/cuda_libs.txt, only for the libraries the system does not have.
# Idempotent: with everything in place it checks and returns in about a second.
# Offline or air-gapped: PIP_FIND_LINKS=DIR PIP_NO_INDEX=1 installs from a folder of wheels.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mode=${1:-cpu}
case "$mode" in cpu | cuda | test) ;; *) echo "usage: setup_venv.sh cpu|cuda|test" >&2; exit 2 ;; esac
venv=${KILN_VENV:-$root/.venv}
reqs=$root/scripts/python
die() { echo "kiln setup: $*" >&2; exit 1; }

pin=$(sed -n 's/^torch==//p' "$reqs/torch.txt")
py=$venv/bin/python

# A folder that is there but does not run (moved, its Python removed) is made anew.
if [[ -e "$venv" ]] && ! "$py" -c 'import sys' >/dev/null 2>&1; then
  echo "kiln setup: $venv is not a working virtual environment; making it anew"
  rm -rf "$venv"
fi
if [[ ! -e "$venv" ]]; then
  python=${KILN_PYTHON:-python3}
  command -v "$python" >/dev/null || die "no $python to make $venv with (apt-get install python3 python3-venv)"
  "$python" -m venv "$venv" 2>/tmp/kiln-venv.$$ ||
    die "could not make $venv: $(tail -n1 /tmp/kiln-venv.$$) (apt-get install python3-venv)"
  rm -f /tmp/kiln-venv.$$
fi
site=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
torch_dir=$site/torch

# pip_install LABEL ARGS...: one line that says why, never pip's whole log. --no-compile: Python
# compiles a module's bytecode when it is first imported (and caches it, unless
# PYTHONDONTWRITEBYTECODE is set: scripts/test.sh caches it in build/pycache); compiling all of
# torch's ~10,000 files at install took 41 s of this 2-core machine's time against 15 s without.
pip_install() {
  local label=$1 log
  shift
  log=$(mktemp)
  if ! "$py" -m pip install --disable-pip-version-check --no-deps --no-compile -q "$@" >"$log" 2>&1; then
    local why
    why=$(grep -m1 -E '^ERROR|Could not|No matching|HTTPError|NewConnectionError|Errno' "$log" || tail -n1 "$log")
    rm -f "$log"
    die "pip could not install $label: ${why} (is PyPI reachable? offline: PIP_FIND_LINKS=DIR_OF_WHEELS PIP_NO_INDEX=1 scripts/setup.sh)"
  fi
  rm -f "$log"
}

installed_torch() { sed -n "s/^__version__ = '\([^'+]*\).*/\1/p" "$torch_dir/version.py" 2>/dev/null || true; }
have=$(installed_torch)
if [[ "$have" != "$pin" ]] || ! "$py" -m pip show -q filelock sympy numpy >/dev/null 2>&1; then
  if [[ -n "$have" && "$have" != "$pin" ]]; then
    echo "kiln setup: $venv has torch $have; kiln is pinned to $pin, installing it"
  fi
  echo "kiln setup: installing torch $pin (PyPI wheel, ~530 MB, without its NVIDIA packages) into $venv"
  t0=$SECONDS
  pip_install "torch $pin" -r "$reqs/torch.txt"
  [[ "$(installed_torch)" == "$pin" ]] || die "torch $pin did not land in $torch_dir"
  echo "kiln setup: torch $pin installed in $((SECONDS - t0)) s"
fi

# The pins of a requirements file that the venv lacks or has at another version ("" when none).
# (`pip show -q A B` succeeds when any one of them is there, so it cannot tell.)
missing_pins() {
  "$py" - "$1" <<'PY'
import importlib.metadata as md
import sys
missing = []
for line in open(sys.argv[1]):
    line = line.split("#")[0].strip()
    if not line:
        continue
    name, _, version = line.partition("==")
    try:
        if md.version(name) != version:
            missing.append(line)
    except md.PackageNotFoundError:
        missing.append(line)
print(" ".join(missing))
PY
}

if [[ "$mode" == test && -n "$(missing_pins "$reqs/test.txt")" ]]; then
  echo "kiln setup: installing the Python test packages (scripts/python/test.txt) into $venv"
  pip_install "the Python test packages" -r "$reqs/test.txt"
fi

# The CUDA libraries the chosen torch libraries link and nobody provides.
libs=("$torch_dir/lib/libtorch_cpu.so")
[[ "$mode" == cpu ]] || libs+=("$torch_dir/lib/libtorch_cuda.so" "$torch_dir/lib/libtorch_cuda_linalg.so")
[[ "$mode" != test ]] || libs+=("$torch_dir/lib/libtorch_python.so")
for round in 1 2 3; do
  missing=$(ldd "${libs[@]}" 2>/dev/null | sed -n 's/^[[:space:]]*\([^ ]*\) => not found.*/\1/p' | sort -u)
  [[ -n "$missing" ]] || break
  packages=()
  for soname in $missing; do
    package=$(awk -v s="$soname" '$1 == s { print $2 }' "$reqs/cuda_libs.txt")
    [[ -n "$package" ]] || die "torch's libraries need $soname, which neither the system nor scripts/python/cuda_libs.txt provides"
    packages+=("$package")
  done
  mapfile -t packages < <(printf '%s\n' "${packages[@]}" | sort -u)
  echo "kiln setup: the system lacks $(echo $missing); installing ${packages[*]} into $venv"
  pip_install "${packages[*]}" "${packages[@]}"
done
[[ -z "$missing" ]] || die "still missing after installing their packages: $missing"
if [[ "$mode" == test ]]; then
  "$py" -c 'import torch, torchvision, pytorch_lightning' 2>/tmp/kiln-import.$$ ||
    die "Python cannot import torch from $venv: $(tail -n1 /tmp/kiln-import.$$)"
  rm -f /tmp/kiln-import.$$
fi
