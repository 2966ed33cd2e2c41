# Helpers for the end-to-end scripts (sourced): start a coordinator and refitd daemons as
# real processes under $work, talk to their HTTP endpoints, stop them. Callers set `bin`
# (the folder with the binaries) and `work` (a scratch folder: open_work makes one), and
# append to `pids`.

# open_work NAME: a new scratch folder /tmp/refit-NAME-XXXXXX as `work`, no processes yet,
# and at exit every process these helpers started stopped and the folder removed.
open_work() {
  work=$(mktemp -d "/tmp/refit-$1-XXXXXX")
  pids=()
  trap cleanup EXIT
}

# More flags for the coordinator (TLS, token); without a token it must be told --insecure.
coordinator_flags=(--insecure)
coordinator_host=127.0.0.1  # the address the coordinator listens on
# Words to run a node's refitd under (a network namespace, environment), by node.
declare -A daemon_prefix
# More flags for every refitd.
daemon_flags=()

# start_coordinator JOB_FILE [PORT]: sets `coordinator` (HOST:PORT), `coordinator_pid` and
# `metrics_port`. PORT (default: any free one) lets a restarted coordinator take the old
# one's address. The log is appended to, so a restart keeps the first life's lines.
start_coordinator() {
  local lines=0
  # The log exists before the process does: its shell creates it only after the fork.
  touch "$work/coordinator.log"
  lines=$(wc -l < "$work/coordinator.log")
  "$bin/refit-coordinator" --listen="$coordinator_host:${2:-0}" --job="$1" --metrics_port=0 \
    "${coordinator_flags[@]}" >> "$work/coordinator.log" 2>&1 &
  pids+=($!)
  coordinator_pid=$!
  local log=$work/coordinator.log.new
  for _ in $(seq 100); do
    tail -n +$((lines + 1)) "$work/coordinator.log" > "$log"
    grep -q "metrics on" "$log" && break
    sleep 0.1
  done
  local port
  port=$(grep -o "listening on $coordinator_host:[0-9]*" "$log" | cut -d: -f2)
  [[ -n $port ]] || { cat "$work/coordinator.log"; echo "coordinator did not start" >&2; exit 1; }
  coordinator=$coordinator_host:$port
  metrics_port=$(grep -o "metrics on http://[0-9.]*:[0-9]*" "$log" | cut -d: -f3)
  rm -f "$log"
}

# start_daemons NODE...: one refitd per node, socket $work/NODE.sock, log $work/NODE.log;
# sets daemon_pid[NODE] and daemon_metrics_port[NODE].
declare -A daemon_pid daemon_metrics_port
start_daemons() {
  local node
  for node in "$@"; do
    rm -f "$work/$node.sock"  # a restart waits for the new socket, not the old one
    touch "$work/$node.log"
    # shellcheck disable=SC2086  # the prefix is words
    ${daemon_prefix[$node]:-} "$bin/refitd" --coordinator="$coordinator" --node="$node" \
      --socket="$work/$node.sock" --metrics_port=0 "${daemon_flags[@]}" >> "$work/$node.log" 2>&1 &
    pids+=($!)
    daemon_pid[$node]=$!
  done
  for node in "$@"; do
    for _ in $(seq 100); do [[ -S $work/$node.sock ]] && break; sleep 0.1; done
    [[ -S $work/$node.sock ]] || { cat "$work/$node.log"; echo "refitd $node did not start" >&2; exit 1; }
    for _ in $(seq 50); do grep -q "metrics on" "$work/$node.log" && break; sleep 0.1; done
    daemon_metrics_port[$node]=$(grep -o "metrics on http://127.0.0.1:[0-9]*" "$work/$node.log" |
                                 tail -1 | cut -d: -f3)
  done
}

# http_get PATH [PORT]: GET a path of the HTTP endpoints on PORT (default: the
# coordinator's), in bash only: a fresh machine may lack curl. The whole response is read
# before any of it is written out: a reader that stops at its first match (grep -q) once
# made the copy fail half way (the headers and the body come in two reads), and the
# pipeline with it.
http_get() {
  local response
  exec 3<>"/dev/tcp/127.0.0.1/${2:-$metrics_port}"
  printf 'GET %s HTTP/1.0\r\nHost: localhost\r\n\r\n' "$1" >&3
  response=$(cat <&3)
  exec 3<&-
  printf '%s\n' "$response"
}

# destinations_seen N, sources_seen N: the coordinator knows exactly N ranks of that side.
destinations_seen() { side_seen destinations "$1"; }
sources_seen() { side_seen sources "$1"; }
side_seen() {
  "$bin/refitctl" layouts --coordinator="$coordinator" 2>/dev/null | grep -q "^$1: $2 ranks"
}

# await_left NODE COUNT: waits (up to 10 s) until NODE's refitd has logged COUNT
# destination ranks leaving. Only then does the coordinator's count of destinations settle:
# while that refitd reconnects it says again the ranks it still holds, so the count can
# drop to 0 and rise once more.
await_left() {
  for _ in $(seq 100); do
    (($(grep -c "destination rank [0-9]* left" "$work/$1.log" || true) >= $2)) && return 0
    sleep 0.1
  done
  echo "refitd on $1 did not see $2 destination ranks leave" >&2
  return 1
}

# await_exit PID SECONDS: fails unless the process ends within SECONDS.
await_exit() {
  for _ in $(seq $(($2 * 10))); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
  echo "process $1 still running after $2 s" >&2
  return 1
}

# start_ranks VERSION [FLAGS...]: the inference node's synthetic ranks (with FLAGS), once the
# coordinator sees all four, then the trainer node's (which publish and ask for the refit,
# unless `trainer_flags` says otherwise: it is appended to their command line).
# Needs `ranks` (the synthetic-ranks command line), `trainer` and `inference` (nodes); sets
# inference_ranks and trainer_ranks.
trainer_flags=(--coordinator=)  # filled in by start_ranks when empty
start_ranks() {
  "${ranks[@]}" --side=destination --host="$inference" --socket="$work/$inference.sock" \
    --first_version="$1" "${@:2}" > "$work/inference-ranks-$1.log" 2>&1 &
  inference_ranks=$!
  pids+=($inference_ranks)
  for _ in $(seq 300); do destinations_seen 4 && break; sleep 0.1; done
  destinations_seen 4 || { cat "$work/inference-ranks-$1.log"; exit 1; }
  local flags=("${trainer_flags[@]}")
  [[ ${flags[*]} == --coordinator= ]] && flags=(--coordinator="$coordinator")
  "${ranks[@]}" --side=source --host="$trainer" --socket="$work/$trainer.sock" \
    --first_version="$1" "${flags[@]}" > "$work/trainer-ranks-$1.log" 2>&1 &
  trainer_ranks=$!
  pids+=($trainer_ranks)
}

# start_inference_ranks COUNT NODE...: each NODE's destination synthetic ranks (`ranks`, for
# `versions`, acknowledging each version in $work; log $work/inference-ranks-NODE.log),
# added to `waiting`; returns once the coordinator sees COUNT destination ranks.
start_inference_ranks() {
  local node
  for node in "${@:2}"; do
    "${ranks[@]}" --side=destination --host="$node" --socket="$work/$node.sock" \
      --versions="$versions" --ack_dir="$work" > "$work/inference-ranks-$node.log" 2>&1 &
    waiting+=($!)
  done
  for _ in $(seq 300); do destinations_seen "$1" && return 0; sleep 0.1; done
  cat "$work"/inference-ranks-*.log
  exit 1
}

# await_verified VERSION NODE...: waits for every process in `waiting`, then fails (every
# log shown) if one failed or unless each NODE's inference ranks found no byte wrong in
# VERSION (their log: $work/inference-ranks-NODE.log).
await_verified() {
  local status=0 pid node
  for pid in "${waiting[@]}"; do wait "$pid" || status=$?; done
  if [[ $status -ne 0 ]]; then
    echo "synthetic ranks failed ($status)" >&2
    cat "$work"/*.log >&2
    exit 1
  fi
  for node in "${@:2}"; do
    grep -q "^version $1: 0 of" "$work/inference-ranks-$node.log" ||
      { cat "$work/inference-ranks-$node.log"; exit 1; }
  done
}

# use_python_client: the Python client with freshly generated stubs in $work/py, on
# PYTHONPATH with the examples; $python is Debian's interpreter (it sees python3-torch and
# python3-grpcio) and $client the client's folder.
use_python_client() {
  python=/usr/bin/python3
  client=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../client/python" && pwd)
  mkdir -p "$work/py/refit"
  cp -r "$client/refit/." "$work/py/refit/"
  "$client/generate_stubs.sh" "$work/py/refit/_proto"
  export PYTHONPATH=$work/py:$client/examples
  export PYTHONDONTWRITEBYTECODE=1
}

# install_python_client PYTHON: `pip install` of the Python client (with its vLLM plugin's
# entry point) by PYTHON into $work/site, as a user installs it, built from a copy laid out
# as the repository is (no stubs: the build generates them). The caller puts $work/site on
# PYTHONPATH.
install_python_client() {
  local root
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  mkdir -p "$work/src/client/python" "$work/src/proto"
  cp -rL "$root/client/python/refit" "$root/client/python/setup.py" \
    "$root/client/python/pyproject.toml" "$work/src/client/python/"
  rm -f "$work/src/client/python/refit/_proto/refit_pb2"*.py
  cp -L "$root/proto/refit.proto" "$work/src/proto/"
  "$1" -m pip install --quiet --no-build-isolation --no-index --no-deps \
    --target "$work/site" "$work/src/client/python" > "$work/pip.log" 2>&1 ||
    { cat "$work/pip.log"; return 1; }
}

# run_dense_example ENGINE_SCRIPT [ARGS...] [-- ENGINE_ARGS...]: the dense example of the
# Python client on a started coordinator and the daemons trainer-node and inference-node:
# the engine process (client/python/examples/ENGINE_SCRIPT, inference.log), then TP trainer
# 1 and TP trainer 0, which asks for the refits (dense-trainer-R.log). ARGS go to all three
# (--steps=N), ENGINE_ARGS to the engine alone. Returns once all three have ended well;
# shows their logs and fails otherwise.
run_dense_example() {
  local engine=$1 inference trainer_1 pid
  local -a common=() engine_only=()
  shift
  while (($#)) && [[ $1 != -- ]]; do common+=("$1"); shift; done
  (($#)) && shift && engine_only=("$@")
  set -- "${common[@]}"
  "$python" "$client/examples/$engine" --socket="$work/inference-node.sock" --out="$work" "$@" \
    "${engine_only[@]}" > "$work/inference.log" 2>&1 &
  inference=$!
  pids+=($inference)
  for _ in $(seq 300); do destinations_seen 2 && break; sleep 0.1; done
  destinations_seen 2 || { cat "$work/inference.log" >&2; return 1; }
  "$python" "$client/examples/dense_trainer.py" --socket="$work/trainer-node.sock" --tp-rank=1 \
    --out="$work" "$@" > "$work/dense-trainer-1.log" 2>&1 &
  trainer_1=$!
  pids+=($trainer_1)
  # The rank that asks for the refit starts once the other one is registered: a refit of
  # an incomplete group is refused, not waited for.
  for _ in $(seq 300); do sources_seen 1 && break; sleep 0.1; done
  sources_seen 1 || { cat "$work/dense-trainer-1.log" >&2; return 1; }
  "$python" "$client/examples/dense_trainer.py" --socket="$work/trainer-node.sock" --tp-rank=0 \
    --coordinator="$coordinator" --out="$work" "$@" > "$work/dense-trainer-0.log" 2>&1 ||
    { cat "$work"/dense-trainer-*.log "$work/inference.log" >&2; return 1; }
  for pid in "$trainer_1" "$inference"; do
    await_exit "$pid" 60
    wait "$pid" || { cat "$work"/dense-trainer-*.log "$work/inference.log" >&2; return 1; }
  done
}

# expect_in FILE TEXT [SECONDS]: TEXT shows up in FILE within SECONDS (default 10).
expect_in() {
  for _ in $(seq $((${3:-10} * 10))); do grep -qF "$2" "$1" && return 0; sleep 0.1; done
  echo "expected in $(basename "$1"): $2" >&2
  return 1
}

# stop_all: SIGTERM to every process; each must end by itself, and the coordinator and the
# refitd daemons still running must end cleanly (exit status 0: a crash while shutting
# down fails the test).
stop_all() {
  local pid status running=()
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null && running+=("$pid") || true; done
  for pid in "${pids[@]}"; do await_exit "$pid" 10 || exit 1; done
  for pid in "${daemon_pid[@]}" "${coordinator_pid:-}"; do
    [[ -n $pid ]] || continue
    # shellcheck disable=SC2076  # a literal match
    [[ " ${running[*]} " =~ " $pid " ]] || continue
    status=0
    wait "$pid" || status=$?
    ((status == 0)) || { echo "process $pid ended with status $status on SIGTERM" >&2; exit 1; }
  done
  pids=()
}

# A failing command names its script and line, and the daemons' logs are shown, also when
# it fails inside one of these functions.
set -o errtrace
on_error() {
  echo "$(basename "$0"): failed at line $1" >&2
  tail -n 15 "$work"/*.log >&2 2>/dev/null || true
}
trap 'on_error $LINENO' ERR

# Ends every process, whatever state a failed test left it in: a process stopped by a
# fault (SIGSTOP) handles its SIGTERM only once continued, and one that does not end within
# 10 s is killed, so a failed test ends instead of waiting out its timeout.
cleanup() {
  local pid
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null && kill -CONT "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do await_exit "$pid" 10 || kill -KILL "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  [[ -n ${KEEP_WORK:-} ]] || rm -rf "$work"
}
