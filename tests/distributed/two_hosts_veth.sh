#!/usr/bin/env bash
# Two "hosts" on one machine: two network namespaces joined by a veth pair (10.77.0.1 and
# 10.77.0.2), one kiln worker in each. They rendezvous over the veth addresses, as two machines
# would over their network (torchrun-style variables, GLOO_SOCKET_IFNAME naming the interface),
# and train to completion. The namespaces are removed on every exit path.
#   tests/distributed/two_hosts_veth.sh KILN_BINARY BLOBS_PLUGIN
# Exits 77 (skipped) where namespaces cannot be made (not root, no CAP_NET_ADMIN, no iproute2).
set -euo pipefail
KILN=${1:?kiln binary}
PLUGIN=${2:?gaussian_blobs plugin}
NS0=kiln_host0_$$
NS1=kiln_host1_$$
WORK=$(mktemp -d)

cleanup() {
  ip netns del "$NS0" 2>/dev/null || true
  ip netns del "$NS1" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

# Entering a namespace (`ip -n`) remounts / as a slave; in a chroot whose / is not a mount point
# that fails: that is this machine, not kiln, so it skips too.
if ! command -v ip >/dev/null || ! ip netns add "$NS0" 2>/dev/null || ! ip netns add "$NS1" 2>/dev/null ||
   ! ip -n "$NS0" link show lo >/dev/null 2>&1; then
  echo "skipped: cannot create and enter network namespaces here (needs root, iproute2, / a mount point)"
  exit 77
fi
ip link add veth_k0 type veth peer name veth_k1
ip link set veth_k0 netns "$NS0"
ip link set veth_k1 netns "$NS1"
ip -n "$NS0" addr add 10.77.0.1/24 dev veth_k0
ip -n "$NS1" addr add 10.77.0.2/24 dev veth_k1
for ns in "$NS0" "$NS1"; do ip -n "$ns" link set lo up; done
ip -n "$NS0" link set veth_k0 up
ip -n "$NS1" link set veth_k1 up

RUN="$WORK/run"
common=(train --plugin "$PLUGIN" experiment=blobs hydra.run.dir="$RUN" model.dropout=0.0
        trainer.max_epochs=2 trainer.num_threads=1 trainer.enable_progress_bar=false data.num_workers=0
        trainer.ddp_timeout=60)
start=$(date +%s.%N)
ip netns exec "$NS1" env RANK=1 WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=10.77.0.1 MASTER_PORT=29517 \
  GLOO_SOCKET_IFNAME=veth_k1 "$KILN" "${common[@]}" >"$WORK/host1.log" 2>&1 &
host1=$!
status0=0
ip netns exec "$NS0" env RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=10.77.0.1 MASTER_PORT=29517 \
  GLOO_SOCKET_IFNAME=veth_k0 "$KILN" "${common[@]}" >"$WORK/host0.log" 2>&1 || status0=$?
status1=0
wait "$host1" || status1=$?
end=$(date +%s.%N)

fail() {
  echo "FAILED: $1"
  echo "--- host 0"; cat "$WORK/host0.log"
  echo "--- host 1"; cat "$WORK/host1.log"
  exit 1
}
[[ $status0 -eq 0 ]] || fail "host 0 exited with $status0"
[[ $status1 -eq 0 ]] || fail "host 1 exited with $status1"
grep -q "rank 0 of 2 (torchrun) joined at 10.77.0.1:29517" "$RUN/train.log" || fail "no rendezvous line in train.log"
grep -q "data parallel: 2 ranks over gloo" "$RUN/train.log" || fail "not data parallel"
grep -q "fit done: 2 epochs" "$RUN/train.log" || fail "training did not complete"
grep -q "test/acc" "$RUN/test_metrics.yaml" || fail "no test metrics"
[[ ! -e "$RUN/rank_1.log" ]] || fail "rank 1 wrote into the run directory"
printf 'two hosts over veth: trained 2 epochs in %.1f s; %s\n' "$(awk "BEGIN{print $end - $start}")" \
  "$(grep -o 'one all-reduce of all .*' "$RUN/train.log")"
