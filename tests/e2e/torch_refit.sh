#!/usr/bin/env bash
# The Python client end to end: a torch MoE model trained by one process holding two
# trainer ranks (expert parallel), a second process holding two inference ranks (tensor
# parallel; one shard is empty), a refitd beside each and a coordinator between them. Two
# optimizer steps, two refits; after each, every inference shard is compared with
# torch.equal against the trainer's full weights. The first run registers the model's own
# tensors in place on both sides; the second registers memory refit allocates, the
# inference ranks staged.
#   torch_refit.sh BIN_DIR
set -euo pipefail
bin=$1
source "$(dirname "$0")/cluster.sh"
open_work torch
use_python_client

cat > "$work/job.json" << JSON
{"name": "torch", "sourceRanks": 2, "destinationRanks": 2, "epochDeadlineMs": 30000}
JSON
start_coordinator "$work/job.json"
start_daemons trainer-node inference-node

# run NAME FIRST_VERSION TRAINER_FLAGS [INFERENCE FLAGS...]: one trainer process and one
# inference process, two steps, versions FIRST_VERSION and the next.
run() {
  local out=$work/$1
  mkdir -p "$out"
  "$python" "$client/examples/moe_inference.py" --socket="$work/inference-node.sock" \
    --out="$out" --first-version="$2" "${@:4}" > "$out/inference.log" 2>&1 &
  local inference=$!
  pids+=($inference)
  for _ in $(seq 300); do destinations_seen 2 && break; sleep 0.1; done
  "$python" "$client/examples/moe_trainer.py" --socket="$work/trainer-node.sock" \
    --coordinator="$coordinator" --out="$out" --first-version="$2" $3 > "$out/trainer.log" 2>&1 &
  local trainer=$!
  pids+=($trainer)
  python_pids+=($trainer $inference)
  wait "$trainer" || { cat "$out/trainer.log" "$out/inference.log" >&2; false; }
  await_exit "$inference" 60
  wait "$inference" || { cat "$out/inference.log" >&2; false; }
  cat "$out/trainer.log" "$out/inference.log"
  grep -q "^version $(($2 + 1)): 22 shards equal to the trainer's weights" "$out/inference.log"
  for _ in $(seq 100); do destinations_seen 0 && break; sleep 0.1; done
}
python_pids=()  # whose segments must be gone at the end
run in-place 1 ""
run allocated-staged 3 --allocated --allocated --staged
grep -q "destination rank 0 registered .*staged" "$work/inference-node.log"
# The orchestration side of the client: status, and a refused refit named as such.
"$python" - "$coordinator" << 'PY'
import sys
import grpc
import refit
with refit.RefitClient(sys.argv[1]) as client:
    status = client.status()
    assert status.current_version == 4, status
    assert len(status.daemons) == 2, status
    # A repeat returns the committed report: no destination registered since lacks it.
    assert client.refit(4).epoch_id == "torch-4"
    for version, code in ((2, grpc.StatusCode.FAILED_PRECONDITION),  # older than current
                          (0, grpc.StatusCode.INVALID_ARGUMENT)):  # not a version
        try:
            client.refit(version)
            raise SystemExit(f"refit({version}) was not refused")
        except refit.RefitError as refused:
            assert refused.code == code, refused
            print("refused:", refused.message)
PY
# The processes' segments (named refit-py-PID-...) went with them. Only this test's
# processes count: other tests running beside it make their own.
for pid in "${python_pids[@]}"; do
  if ls /dev/shm | grep -q "^refit-py-$pid-"; then
    echo "shared-memory segments of the Python client remain: $(ls /dev/shm | grep "refit-py-$pid-")" >&2
    false
  fi
done
stop_all
echo "torch refit: two versions through twice (in place, staged), every shard equal"
