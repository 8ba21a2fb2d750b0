#!/usr/bin/env bash
# The README's first command on a fresh machine of kiln's kind (Debian 12 with CUDA 13.0's toolkit,
# nothing else installed, empty caches): a `debootstrap --variant=minbase bookworm` chroot with the
# host's apt sources, the host's /usr/local/cuda-13.0 mounted read-only (as the kind has it), a
# fresh clone of this checkout and ../shared beside it. Prints the minutes to the first training
# step and the disk the setup used (the chroot's growth: packages, .venv, build, caches).
# Needs root, debootstrap, and the network to Debian's mirror and PyPI. Takes ~15 minutes.
#   bench/fresh_machine.sh [CHROOT_DIR]        # default /tmp/kiln-fresh (removed first)
set -euo pipefail
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
root=${1:-/tmp/kiln-fresh}
[[ $(id -u) -eq 0 ]] || { echo "fresh_machine: needs root (debootstrap, chroot, mount)" >&2; exit 2; }
command -v debootstrap >/dev/null || { echo "fresh_machine: apt-get install debootstrap" >&2; exit 2; }

mounts=()
cleanup() { for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do umount -l "${mounts[i]}" 2>/dev/null || true; done; }
trap cleanup EXIT
bind() { mkdir -p "$2"; mount --bind "$1" "$2"; mounts+=("$2"); [[ "${3:-}" != ro ]] || mount -o remount,bind,ro "$2"; }

rm -rf "$root"
echo "== debootstrap (not timed)"
debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian >/dev/null
cp /etc/apt/sources.list.d/debian.sources "$root/etc/apt/sources.list.d/" 2>/dev/null || true
cp /etc/resolv.conf "$root/etc/resolv.conf"
# What a machine of this kind brings for reaching the registries (its CA bundle, pip's settings),
# which debootstrap leaves out.
mkdir -p "$root/usr/local/share/ca-certificates"
cp /usr/local/share/ca-certificates/* "$root/usr/local/share/ca-certificates/" 2>/dev/null || true
cp /etc/ssl/certs/ca-certificates.crt "$root/etc/host-ca-certificates.crt" 2>/dev/null || true
cp /etc/pip.conf "$root/etc/pip.conf" 2>/dev/null || true
bind /proc "$root/proc"; bind /sys "$root/sys"; bind /dev "$root/dev"
if [[ -d /usr/local/cuda-13.0 ]]; then
  bind /usr/local/cuda-13.0 "$root/usr/local/cuda-13.0" ro
  ln -sfn cuda-13.0 "$root/usr/local/cuda"
  cp /etc/ld.so.conf.d/*cuda* "$root/etc/ld.so.conf.d/" 2>/dev/null ||
    echo /usr/local/cuda-13.0/lib >"$root/etc/ld.so.conf.d/cuda.conf"
fi
mkdir -p "$root/work"
git clone -q "$src" "$root/work/main"
cp -r "$src/../shared" "$root/work/shared"
before=$(du -sxm "$root" | cut -f1)

echo "== README command 1, timed to the first training step"
start=$(date +%s)
log=$root/work/command1.log
chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/local/cuda/bin:/usr/sbin:/usr/bin:/sbin:/bin TERM=dumb \
  ${PIP_CERT:+PIP_CERT=/etc/host-ca-certificates.crt} \
  bash -c 'cd /work/main && scripts/setup.sh && build/bin/kiln train experiment=fashion_mnist trainer.max_epochs=1' \
  >"$log" 2>&1 &
pid=$!
first=""
while kill -0 "$pid" 2>/dev/null; do
  if [[ -z "$first" ]] && grep -q 'training on ' "$log"; then first=$(($(date +%s) - start)); fi
  sleep 2
done
wait "$pid" || { tail -n 20 "$log" >&2; echo "fresh_machine: command 1 failed" >&2; exit 1; }
[[ -n "$first" ]] || first=$(($(date +%s) - start))
after=$(du -sxm "$root" | cut -f1)
grep -E 'kiln setup|installed in' "$log" || true
echo "first training step after $((first / 60)) min $((first % 60)) s; disk used by the setup: $((after - before)) MB" \
  "(.venv $(du -sm "$root/work/main/.venv" | cut -f1) MB, build $(du -sm "$root/work/main/build" | cut -f1) MB)"
