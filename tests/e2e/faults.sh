#!/usr/bin/env bash
# One fault in the middle of an epoch, with real processes, then recovery. A coordinator,
# a trainer node and an inference node (one refitd each), synthetic ranks holding the
# mini model in shared memory. While the epoch of version 1 runs (gather_broadcast: a
# window of several seconds), FAULT strikes:
#   source-daemon       kill -9 of the trainer node's refitd
#   destination-daemon  kill -9 of the inference node's refitd
#   trainer-ranks       kill -9 of the trainer ranks' process (they had published; the
#                       refit was asked for by an orchestrator of its own, refitctl)
#   trainer-refitting   kill -9 of the trainer ranks' process that asked for the refit
#   coordinator         kill -9 of the coordinator
#   daemon-stop         SIGSTOP of the inference node's refitd (it stops reading)
# Each time: the epoch ends well within its deadline (90 s: room for a loaded machine; the
# faults end it in seconds) with the right error, no
# inference rank is told version 1 arrived unless the epoch committed, and no process
# crashes. Then what was killed is restarted (or SIGCONT), new ranks come, and version 2
# goes through with every destination byte checked.
#   faults.sh BIN_DIR FAULT
set -euo pipefail
bin=$1
fault=$2
source "$(dirname "$0")/cluster.sh"
open_work fault
trainer=train-node-0
inference=infer-node-0
cat > "$work/job.json" <<JSON
{"name": "fault", "model": "dsv3-mini", "sourceParallel": "pp=2,ep=2",
 "destinationParallel": "tp=2,dp=2", "epochDeadlineMs": 90000, "leaseMs": 2000,
 "strategy": "gather_broadcast"}
JSON
ranks=("$bin/refit-synthetic-ranks" --refit=mini --versions=1 --timeout_ms=90000)

# aborted_for_dead_daemon DEAD OTHER: the epoch was aborted because DEAD's refitd died: the
# coordinator saw its control stream end, or OTHER's data plane saw its UCX peer go first
# (whichever comes first is a race; both name the failure).
aborted_for_dead_daemon() {
  expect_in "$work/coordinator.log" "epoch fault-1 version 1 aborted" 10
  grep "epoch fault-1 version 1 aborted" "$work/coordinator.log" | grep -qE \
    "refitd on $1 disconnected during the epoch|refitd on $2 failed: epoch 1: .*(Endpoint timeout|Connection reset|unreachable|not connected)" ||
    { grep "epoch fault-1" "$work/coordinator.log" >&2; echo "aborted for another reason" >&2; return 1; }
}

start_coordinator "$work/job.json"
coordinator_port=${coordinator##*:}
start_daemons "$trainer" "$inference"
if [[ $fault == trainer-ranks ]]; then
  # The trainer ranks only publish, then wait (for an acknowledgement of version 1 that is
  # never written) until they are killed; refitctl asks for the refit, so the epoch goes on
  # after they die.
  trainer_flags=(--versions=2 --ack_dir="$work")
  start_ranks 1
  for _ in $(seq 300); do sources_seen 4 && break; sleep 0.1; done
  "$bin/refitctl" refit --coordinator="$coordinator" --version=1 --timeout-ms=90000 \
    > "$work/refit-1.log" 2>&1 &
  pids+=($!)
  trainer_flags=(--coordinator=)
else
  start_ranks 1
fi
expect_in "$work/$inference.log" "epoch fault-1 (version 1) started" 60
sleep 0.5
struck=$(date +%s%N)
case $fault in
  source-daemon)
    kill -KILL "${daemon_pid[$trainer]}"
    expect_in "$work/trainer-ranks-1.log" "refit of version 1"
    aborted_for_dead_daemon "$trainer" "$inference" ;;
  destination-daemon)
    kill -KILL "${daemon_pid[$inference]}"
    expect_in "$work/trainer-ranks-1.log" "refit of version 1"
    aborted_for_dead_daemon "$inference" "$trainer" ;;
  daemon-stop)
    kill -STOP "${daemon_pid[$inference]}"
    # Silent for a lease (2 s), cut off within a quarter lease more.
    expect_in "$work/trainer-ranks-1.log" \
      "refitd on $inference stopped answering (its lease expired)" 6
    expect_in "$work/coordinator.log" "refitd on $inference sent nothing for 2000 ms" ;;
  coordinator)
    kill -KILL "$coordinator_pid"
    expect_in "$work/trainer-ranks-1.log" "refit of version 1"
    # The daemons treat the epoch as aborted: the inference ranks hear so at once.
    expect_in "$work/inference-ranks-1.log" "the coordinator went away during the epoch" ;;
  trainer-ranks)
    kill -KILL "$trainer_ranks"
    # Their memory stays mapped for the rest of the epoch, which commits from it.
    expect_in "$work/coordinator.log" "epoch fault-1 version 1 committed" 30 ;;
  trainer-refitting)
    kill -KILL "$trainer_ranks"
    # The caller of Refit is gone: the coordinator aborts the epoch and frees the group.
    expect_in "$work/coordinator.log" "the caller cancelled the refit" 10
    expect_in "$work/inference-ranks-1.log" "the caller cancelled the refit" 10 ;;
  *) echo "faults.sh: no fault $fault" >&2; exit 2 ;;
esac
echo "$fault: the epoch ended $(( ($(date +%s%N) - struck) / 1000000 )) ms after the fault"
[[ $fault == coordinator ]] || expect_in "$work/coordinator.log" "epoch fault-1 version 1 " 5
if grep -q "epoch fault-1 version 1 committed" "$work/coordinator.log"; then
  [[ $fault == trainer-ranks ]] || { echo "the epoch committed despite $fault" >&2; exit 1; }
  committed=1
else
  committed=0
  if grep -q "^version 1:" "$work/inference-ranks-1.log"; then
    echo "an inference rank saw version 1 of an aborted epoch" >&2
    exit 1
  fi
fi
# Every process not struck is still running (none crashed).
alive=("${daemon_pid[$trainer]}" "${daemon_pid[$inference]}" "$coordinator_pid")
for pid in "${alive[@]}"; do
  case $fault in
    source-daemon) [[ $pid == "${daemon_pid[$trainer]}" ]] && continue ;;
    destination-daemon) [[ $pid == "${daemon_pid[$inference]}" ]] && continue ;;
    coordinator) [[ $pid == "$coordinator_pid" ]] && continue ;;
  esac
  kill -0 "$pid" || { echo "process $pid died" >&2; exit 1; }
done

# Recovery.
case $fault in
  source-daemon) start_daemons "$trainer" ;;
  destination-daemon) start_daemons "$inference" ;;
  daemon-stop) kill -CONT "${daemon_pid[$inference]}" ;;
  coordinator) start_coordinator "$work/job.json" "$coordinator_port" ;;
esac
# The ranks of the first round go (a killed process's segments are removed by hand when
# its daemon died with it; otherwise refitd reclaimed them).
for pid in "$inference_ranks" "$trainer_ranks"; do kill -TERM "$pid" 2>/dev/null || true; done
for pid in "$inference_ranks" "$trainer_ranks"; do await_exit "$pid" 10; done
if [[ $fault == trainer-ranks || $fault == trainer-refitting ]]; then
  for _ in $(seq 20); do ls /dev/shm | grep -q "^refit-$trainer_ranks-" || break; sleep 0.1; done
  if ls /dev/shm | grep -q "^refit-$trainer_ranks-"; then
    echo "the killed trainer ranks' segments remain" >&2
    exit 1
  fi
fi
# Where the inference node's refitd outlived the fault, it sees its four ranks leave first.
[[ $fault == destination-daemon ]] || await_left "$inference" 4
for _ in $(seq 300); do destinations_seen 0 && break; sleep 0.1; done
destinations_seen 0 || { echo "the first round's inference ranks are still registered" >&2; false; }
# After the coordinator and daemon-stop faults the new inference ranks are staged (refitd
# writes shadows and copies them in at the commit): that path is checked byte for byte too.
case $fault in
  coordinator|daemon-stop) start_ranks 2 --staged ;;
  *) start_ranks 2 ;;
esac
await_exit "$trainer_ranks" 120
wait "$trainer_ranks" || { cat "$work/trainer-ranks-2.log" "$work"/*.log >&2; exit 1; }
await_exit "$inference_ranks" 120
wait "$inference_ranks" || { cat "$work/inference-ranks-2.log" >&2; exit 1; }
grep -q "^version 2: 0 of" "$work/inference-ranks-2.log"
case $fault in
  coordinator|daemon-stop) grep -q "destination rank 0 registered .*staged" "$work/$inference.log" ;;
esac
"$bin/refitctl" status --coordinator="$coordinator" | grep -q "^current version  2$"
stop_all
echo "fault $fault: the epoch ended cleanly (committed: $committed) and version 2 went through"
