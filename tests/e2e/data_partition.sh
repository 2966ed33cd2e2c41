#!/usr/bin/env bash
# A dead data-plane link between two daemons that both still reach the coordinator. The
# inference node's refitd runs in a network namespace of its own, joined to this one by
# two veth pairs: one carries the control plane (the coordinator's port), the other the
# data plane (UCX held to TCP over it), shaped to 1 Gbit/s so that each reshard epoch
# sends one 585 MB message that takes about 5 s. Heartbeats keep both leases alive, so
# only the data plane itself can tell a dead link from a slow one:
#   - version 1 goes through on the slow link: its message takes about half the job's
#     dataPlaneStallMs (10 s, the default), and nothing is cut;
#   - one second into version 2 the data link is cut (its far end down: packets in flight
#     vanish, nothing is refused). The epoch ends within the stall limit and a margin of
#     the cut, not at its deadline (90 s), and no inference rank is told version 2 arrived;
#   - the link comes back at full speed, and version 3 goes through.
# Every version that goes through has every destination byte checked.
# Needs root (network namespaces, veth, tc); elsewhere it says why and skips.
#   data_partition.sh BIN_DIR
set -euo pipefail
bin=$1
source "$(dirname "$0")/netns.sh"
require_netns DataPlanePartition
source "$(dirname "$0")/cluster.sh"
open_work dpart
open_netns refit-dpart
control_near=rca$suffix data_near=rda$suffix  # this namespace's ends
control_far=rcb$suffix data_far=rdb$suffix    # the inference node's ends
control_subnet=10.214.$((RANDOM % 250 + 1))
data_subnet=10.215.$((RANDOM % 250 + 1))
link_netns "$control_near" "$control_far" "$control_subnet"
link_netns "$data_near" "$data_far" "$data_subnet"
tc qdisc add dev "$data_near" root handle 1: htb default 10 2> /dev/null &&
  tc class add dev "$data_near" parent 1: classid 1:10 htb rate 1000mbit 2> /dev/null ||
  skip "cannot shape a link here (tc htb)"

trainer=train-node-0
inference=infer-node-0
stall_ms=10000
cat > "$work/job.json" << JSON
{"name": "dpart", "model": "dsv3-mini", "sourceParallel": "pp=2,ep=2",
 "destinationParallel": "tp=2,dp=2", "epochDeadlineMs": 90000, "leaseMs": 2000,
 "dataPlaneStallMs": $stall_ms}
JSON
coordinator_host=$control_subnet.1
daemon_prefix[$trainer]="env UCX_TLS=tcp UCX_NET_DEVICES=$data_near"
daemon_prefix[$inference]="ip netns exec $netns env UCX_TLS=tcp UCX_NET_DEVICES=$data_far"
# The two daemons share this host's /dev/shm; the bytes must take the shaped link instead.
daemon_flags=(--shared_memory_between_daemons=false)
ranks=("$bin/refit-synthetic-ranks" --refit=mini --versions=1 --timeout_ms=90000)

start_coordinator "$work/job.json"
start_daemons "$trainer" "$inference"

# run_version V: the ranks of version V, through to the end, every byte checked.
run_version() {
  start_ranks "$1"
  await_exit "$trainer_ranks" 120
  wait "$trainer_ranks" || { cat "$work/trainer-ranks-$1.log" >&2; false; }
  await_exit "$inference_ranks" 120
  wait "$inference_ranks" || { cat "$work/inference-ranks-$1.log" >&2; false; }
  grep -q "^version $1: 0 of" "$work/inference-ranks-$1.log"
}
# A slow link is not a dead one.
run_version 1
grep "epoch dpart-1 version 1 committed" "$work/coordinator.log" | grep -o "in [0-9.]* s"
echo "data partition: version 1 went through the shaped link"
await_left "$inference" 4
for _ in $(seq 300); do destinations_seen 0 && break; sleep 0.1; done

# A dead one ends the epoch by the stall limit.
start_ranks 2
expect_in "$work/$inference.log" "epoch dpart-2 (version 2) started" 60
sleep 1
ip -n "$netns" link set "$data_far" down
cut=$(date +%s%N)
expect_in "$work/coordinator.log" "epoch dpart-2 version 2 aborted" 60
ended_ms=$((($(date +%s%N) - cut) / 1000000))
grep "epoch dpart-2 version 2 aborted" "$work/coordinator.log"
grep -q "no data-plane operation finished for $stall_ms ms" "$work/coordinator.log" ||
  { echo "the epoch did not end by the stall limit" >&2; exit 1; }
echo "data partition: the epoch ended $ended_ms ms after the data link was cut (stall limit $stall_ms ms)"
((ended_ms < stall_ms * 2)) || { echo "too slow: $ended_ms ms" >&2; exit 1; }
# Ended by the data plane, not by a lease: both daemons kept their sessions.
if grep -q "sent nothing for" "$work/coordinator.log"; then
  echo "a daemon lost its lease: the control plane was cut too" >&2
  exit 1
fi
if grep -q "^version 2:" "$work/inference-ranks-2.log"; then
  echo "an inference rank saw version 2 of an aborted epoch" >&2
  exit 1
fi
for pid in "${daemon_pid[$trainer]}" "${daemon_pid[$inference]}" "$coordinator_pid"; do
  kill -0 "$pid" || { echo "process $pid died" >&2; exit 1; }
done

# The link comes back (at full speed), and version 3 goes through.
ip -n "$netns" link set "$data_far" up
tc qdisc del dev "$data_near" root
for pid in "$inference_ranks" "$trainer_ranks"; do kill -TERM "$pid" 2> /dev/null || true; done
for pid in "$inference_ranks" "$trainer_ranks"; do await_exit "$pid" 10; done
await_left "$inference" 8
for _ in $(seq 300); do destinations_seen 0 && break; sleep 0.1; done
run_version 3
"$bin/refitctl" status --coordinator="$coordinator" | grep -q "^current version  3$"
stop_all
echo "data partition: the link came back and version 3 went through, every byte checked"
