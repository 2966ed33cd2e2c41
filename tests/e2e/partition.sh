#!/usr/bin/env bash
# A network partition in the middle of an epoch, with real processes and a real link. The
# trainer node (the coordinator and its refitd) stays in this network namespace; the
# inference node's refitd runs in a namespace of its own, joined to this one by a veth
# pair, and UCX is held to TCP over that pair. While the epoch of version 1 runs, the link
# is cut. Then:
#   - the epoch ends within the lease and a margin, with the lease error, and no inference
#     rank is told version 1 arrived;
#   - the inference node, cut off, ends its side of the epoch by itself (its keepalive
#     notices the coordinator is gone) well before the epoch deadline;
#   - the link comes back, the inference node rejoins without a restart, and version 2
#     goes through with every destination byte checked.
# Needs root (network namespaces, veth); elsewhere it says why and skips.
#   partition.sh BIN_DIR
set -euo pipefail
bin=$1
source "$(dirname "$0")/netns.sh"
require_netns NetworkPartition
source "$(dirname "$0")/cluster.sh"
open_work part
open_netns refit-part
near=rfa$suffix  # this namespace's end of the pair
far=rfb$suffix   # the inference node's end
subnet=10.213.$((RANDOM % 250 + 1))
link_netns "$near" "$far" "$subnet"

trainer=train-node-0
inference=infer-node-0
lease_ms=2000
cat > "$work/job.json" << JSON
{"name": "partition", "model": "dsv3-mini", "sourceParallel": "pp=2,ep=2",
 "destinationParallel": "tp=2,dp=2", "epochDeadlineMs": 90000, "leaseMs": $lease_ms,
 "strategy": "gather_broadcast"}
JSON
coordinator_host=$subnet.1
daemon_prefix[$trainer]="env UCX_TLS=tcp UCX_NET_DEVICES=$near"
daemon_prefix[$inference]="ip netns exec $netns env UCX_TLS=tcp UCX_NET_DEVICES=$far"
ranks=("$bin/refit-synthetic-ranks" --refit=mini --versions=1 --timeout_ms=90000)

start_coordinator "$work/job.json"
start_daemons "$trainer" "$inference"
start_ranks 1
expect_in "$work/$inference.log" "epoch partition-1 (version 1) started" 60
sleep 0.5
ip -n "$netns" link set "$far" down
cut=$(date +%s%N)
expect_in "$work/trainer-ranks-1.log" \
  "refitd on $inference stopped answering (its lease expired)" 6
ended_ms=$((($(date +%s%N) - cut) / 1000000))
echo "partition: the epoch ended $ended_ms ms after the link was cut (lease $lease_ms ms)"
((ended_ms < lease_ms * 2)) || { echo "too slow: $ended_ms ms" >&2; exit 1; }
expect_in "$work/coordinator.log" "epoch partition-1 version 1 aborted" 5
if grep -q "^version 1:" "$work/inference-ranks-1.log"; then
  echo "an inference rank saw version 1 of an aborted epoch" >&2
  exit 1
fi
# The cut-off node ends its side by itself: its ranks hear of the abort.
expect_in "$work/inference-ranks-1.log" "the coordinator went away during the epoch" 10
echo "partition: the cut-off node gave up on the epoch $((($(date +%s%N) - cut) / 1000000)) ms after the cut"
for pid in "${daemon_pid[$trainer]}" "${daemon_pid[$inference]}" "$coordinator_pid"; do
  kill -0 "$pid" || { echo "process $pid died" >&2; exit 1; }
done

# The link comes back; the same refitd rejoins, and version 2 goes through.
ip -n "$netns" link set "$far" up
for pid in "$inference_ranks" "$trainer_ranks"; do kill -TERM "$pid" 2> /dev/null || true; done
for pid in "$inference_ranks" "$trainer_ranks"; do await_exit "$pid" 10; done
await_left "$inference" 4
for _ in $(seq 300); do destinations_seen 0 && break; sleep 0.1; done
start_ranks 2
await_exit "$trainer_ranks" 120
wait "$trainer_ranks" || { cat "$work/trainer-ranks-2.log" >&2; false; }
await_exit "$inference_ranks" 120
wait "$inference_ranks" || { cat "$work/inference-ranks-2.log" >&2; false; }
grep -q "^version 2: 0 of" "$work/inference-ranks-2.log"
"$bin/refitctl" status --coordinator="$coordinator" | grep -q "^current version  2$"
stop_all
echo "partition: the inference node rejoined and version 2 went through, every byte checked"
