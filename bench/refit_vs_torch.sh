#!/usr/bin/env bash
# refit's live refit against the refits a user writes with torch.distributed, side by side
# on this machine, same layouts (dsv3-mini, PP2 x EP2 -> TP2 x DP2, 1.18 GB delivered),
# alternating within each round:
#   refit          two refitd (trainer node, inference node), a coordinator, the synthetic
#                  ranks in shared memory; the coordinator's epoch time; checksums on
#   refit -cksum   the same with the job's skipChecksums (what integrity checks cost)
#   refit -shm     checksums on, the two refitd told not to hand chunks over through shared
#                  memory (--shared_memory_between_daemons=false): UCX over TCP loopback,
#                  as between daemons of different hosts
#   torch g+b      gather onto one trainer rank per tensor, broadcast to every inference rank
#   torch p2p      only the overlapping pieces, one message per (source, destination) pair
#   memcpy         one copy of the delivered bytes in one process: the bound on this machine
# The first epoch (connections, first touch) is shown apart; "warm" is the median of the
# others over all rounds. Every system checks every delivered byte after each epoch.
#   bench/refit_vs_torch.sh BIN_DIR [ROUNDS] [EPOCHS] [SETUP]
# BIN_DIR holds refitd, refit-coordinator, refit-synthetic-ranks and refitctl. SETUP is
# refit's side: mini (one trainer node and one inference node, 8 GPUs each: two refitd) or
# mini4 (the same ranks at 2 GPUs per node: two trainer and two inference nodes, four
# refitd). The torch baselines run one process per rank either way.
set -euo pipefail
bin=$(cd "$1" && pwd)
rounds=${2:-3}
epochs=${3:-4}
setup=${4:-mini}
case $setup in
  mini) gpus=8 trainers=(train-node-0) inferences=(infer-node-0) ;;
  mini4) gpus=2 trainers=(train-node-0 train-node-1) inferences=(infer-node-0 infer-node-1) ;;
  *) echo "refit_vs_torch.sh: no setup $setup (mini or mini4)" >&2; exit 2 ;;
esac
here=$(cd "$(dirname "$0")/.." && pwd)
source "$here/tests/e2e/cluster.sh"
open_work vs-torch
python=/usr/bin/python3  # Debian's, with python3-torch
model=dsv3-mini
source_parallel=pp=2,ep=2
destination_parallel=tp=2,dp=2
"$bin/refitctl" plan --model "$model" --src-parallel "$source_parallel" \
  --dst-parallel "$destination_parallel" --layouts-out "$work/layouts" > /dev/null
results=$work/results  # lines: SYSTEM EPOCH SECONDS GB
: > "$results"

# refit_live NAME SKIP_CHECKSUMS [REFITD_FLAGS...]: one cluster, $epochs versions.
refit_live() {
  daemon_flags=("${@:3}")
  cat > "$work/job.json" <<JSON
{"name": "bench", "model": "$model", "sourceParallel": "$source_parallel",
 "destinationParallel": "$destination_parallel", "epochDeadlineMs": 120000,
 "skipChecksums": $2}
JSON
  start_coordinator "$work/job.json"
  start_daemons "${trainers[@]}" "${inferences[@]}"
  local node ranks=("$bin/refit-synthetic-ranks" --model="$model" --gpus_per_node="$gpus"
                    --source_parallel="$source_parallel"
                    --destination_parallel="$destination_parallel" --versions="$epochs"
                    --ack_dir="$work")
  local inference_ranks=() trainer_ranks=()
  for node in "${inferences[@]}"; do
    "${ranks[@]}" --side=destination --host="$node" --socket="$work/$node.sock" \
      > "$work/inference-ranks-$node.log" 2>&1 &
    pids+=($!)
    inference_ranks+=($!)
  done
  for _ in $(seq 600); do destinations_seen 4 && break; sleep 0.1; done
  for node in "${trainers[@]}"; do
    "${ranks[@]}" --side=source --host="$node" --socket="$work/$node.sock" \
      --coordinator="$coordinator" --ack_from="${#inferences[@]}" \
      > "$work/trainer-ranks-$node.log" 2>&1 &
    trainer_ranks+=($!)
  done
  for pid in "${trainer_ranks[@]}" "${inference_ranks[@]}"; do
    wait "$pid" || { cat "$work"/*.log; exit 1; }
  done
  # Every version was checked byte for byte by the inference ranks.
  for node in "${inferences[@]}"; do
    (($(grep -c "^version [0-9]*: 0 of" "$work/inference-ranks-$node.log") == epochs)) ||
      { cat "$work/inference-ranks-$node.log"; exit 1; }
  done
  # "epoch bench-1: version 1, 1180.0 MB in 0.812 s (1.45 GB/s); 0.790 s after the last
  # publish": the epoch from its start (with several trainer processes, the first one's
  # Refit waits for the others to publish).
  awk -v name="$1" '/^epoch / { print name, ++n, $12, $5 / 1000 }' \
    "$work/trainer-ranks-${trainers[0]}.log" >> "$results"
  stop_all
  rm -f "$work"/verified-* "$work"/*.sock
}

# torch_baseline NAME STRATEGY
torch_baseline() {
  "$python" "$here/bench/torch_refit_baselines.py" --layouts "$work/layouts" \
    --strategy "$2" --rounds "$epochs" > "$work/torch.log" 2>&1 || { cat "$work/torch.log"; exit 1; }
  # "torch p2p round 2: 0.445 s, 1.18 GB delivered, 2.66 GB/s, 0 wrong"
  (($(grep -c ", 0 wrong$" "$work/torch.log") == epochs)) || { cat "$work/torch.log"; exit 1; }
  awk -v name="$1" '/^torch / { sub(":", "", $4); print name, $4, $5, $7 }' \
    "$work/torch.log" >> "$results"
}

memcpy_bound() {
  "$python" - "$1" >> "$results" <<'PY'
import sys, time, torch
torch.set_num_threads(1)
size = int(float(sys.argv[1]) * 1e9)
source, destination = torch.ones(size, dtype=torch.uint8), torch.zeros(size, dtype=torch.uint8)
for epoch in (1, 2, 3):
    start = time.perf_counter()
    destination.copy_(source)
    print("memcpy", epoch, f"{time.perf_counter() - start:.4f}", size / 1e9)
PY
}

for round in $(seq "$rounds"); do
  echo "round $round of $rounds" >&2
  refit_live refit false
  refit_live "refit -cksum" true
  refit_live "refit -shm" false --shared_memory_between_daemons=false
  torch_baseline "torch g+b" gather_broadcast
  torch_baseline "torch p2p" p2p
done
# The bytes delivered to the destination views (the torch lines: refit's count every hop).
gigabytes=$(awk '/^torch p2p/ { print $5; exit }' "$results")
memcpy_bound "$gigabytes"

# Table: per system, median first epoch, median warm epoch, GB/s warm, ratios to refit.
"$python" - "$results" <<'PY'
import statistics, sys
systems = {}
for line in open(sys.argv[1]):
    *name, epoch, seconds, gigabytes = line.split()
    entry = systems.setdefault(" ".join(name), {"first": [], "warm": [], "gb": float(gigabytes)})
    entry["first" if epoch == "1" else "warm"].append(float(seconds))
refit = statistics.median(systems["refit"]["warm"])
delivered = systems["torch p2p"]["gb"]  # GB/s of what lands in destination views, for all
print(f"{'system':<14} {'first s':>8} {'warm s':>8} {'warm range':>14} {'GB/s':>6} "
      f"{'/ refit':>8}")
for name, entry in systems.items():
    warm = statistics.median(entry["warm"])
    print(f"{name:<14} {statistics.median(entry['first']):8.3f} {warm:8.3f} "
          f"{min(entry['warm']):6.3f}-{max(entry['warm']):<7.3f} {delivered / warm:6.2f} "
          f"{warm / refit:8.2f}")
PY
