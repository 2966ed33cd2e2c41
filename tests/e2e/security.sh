#!/usr/bin/env bash
# The coordinator behind mutual TLS and two tokens, with real processes: certificates made
# here with openssl (a CA, the coordinator's for 127.0.0.1, a client's), the public API's
# token and the daemons' own in mode-600 files. refitd (REFIT_DAEMON_TOKEN_FILE) and the
# synthetic ranks (REFIT_TOKEN_FILE) reach it with REFIT_TLS_* and a refit of the mini
# model goes through, every byte checked; a client without the token, with a wrong one,
# with the daemons' token, without a client certificate or without TLS is turned away with
# an error that says why; a refitd carrying the public token cannot join; a token file
# others can read is refused.
#   security.sh BIN_DIR
set -euo pipefail
bin=$1
source "$(dirname "$0")/cluster.sh"
open_work tls
command -v openssl > /dev/null || { echo "security.sh: needs openssl" >&2; exit 1; }

# Certificates: a CA, the coordinator's (for IP 127.0.0.1) and a client's, all by the CA.
pki=$work/pki
mkdir -m 700 "$pki"
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=refit test CA" \
  -keyout "$pki/ca.key" -out "$pki/ca.pem" 2> /dev/null
for who in coordinator client; do
  openssl req -newkey rsa:2048 -nodes -subj "/CN=refit $who" \
    -keyout "$pki/$who.key" -out "$pki/$who.csr" 2> /dev/null
  printf 'subjectAltName=IP:127.0.0.1\n' > "$pki/$who.ext"
  openssl x509 -req -in "$pki/$who.csr" -CA "$pki/ca.pem" -CAkey "$pki/ca.key" \
    -CAcreateserial -days 2 -extfile "$pki/$who.ext" -out "$pki/$who.pem" 2> /dev/null
  chmod 600 "$pki/$who.key"
done
printf 's3cret-%s\n' "$RANDOM$RANDOM" > "$pki/token"
printf 'daemons-%s\n' "$RANDOM$RANDOM" > "$pki/daemon-token"
chmod 600 "$pki/token" "$pki/daemon-token"

cat > "$work/job.json" <<JSON
{"name": "tls", "model": "dsv3-mini", "sourceParallel": "pp=2,ep=2",
 "destinationParallel": "tp=2,dp=2", "epochDeadlineMs": 60000}
JSON
coordinator_flags=(--tls_cert="$pki/coordinator.pem" --tls_key="$pki/coordinator.key"
                   --tls_client_ca="$pki/ca.pem" --token_file="$pki/token"
                   --daemon_token_file="$pki/daemon-token")
start_coordinator "$work/job.json"
export REFIT_TLS_CA=$pki/ca.pem REFIT_TLS_CERT=$pki/client.pem REFIT_TLS_KEY=$pki/client.key
export REFIT_TOKEN_FILE=$pki/token
REFIT_DAEMON_TOKEN_FILE=$pki/daemon-token start_daemons train-node-0 infer-node-0

# A refit with every credential in place.
"$bin/refit-synthetic-ranks" --side=destination --refit=mini --host=infer-node-0 \
  --socket="$work/infer-node-0.sock" --versions=1 > "$work/inference-ranks.log" 2>&1 &
inference_ranks=$!
pids+=($inference_ranks)
for _ in $(seq 300); do destinations_seen 4 && break; sleep 0.1; done
destinations_seen 4 || { cat "$work"/*.log; exit 1; }
"$bin/refit-synthetic-ranks" --side=source --refit=mini --host=train-node-0 \
  --socket="$work/train-node-0.sock" --coordinator="$coordinator" --versions=1 \
  > "$work/trainer-ranks.log" 2>&1
await_exit "$inference_ranks" 30
wait "$inference_ranks"
grep -q "^version 1: 0 of" "$work/inference-ranks.log"
"$bin/refitctl" status --coordinator="$coordinator" | grep -q "^current version  1$"

# refused EXPECTED ENV_CHANGES...: refitctl status with that environment fails, saying EXPECTED.
refused() {
  local expected=$1
  shift
  if env "$@" "$bin/refitctl" status --coordinator="$coordinator" > /dev/null \
       2> "$work/refused.txt"; then
    echo "a client with $* was let in" >&2
    exit 1
  fi
  grep -q "$expected" "$work/refused.txt" || { cat "$work/refused.txt"; exit 1; }
}
refused "requires a token" -u REFIT_TOKEN_FILE
printf 'wrong\n' > "$pki/wrong-token"
chmod 600 "$pki/wrong-token"
refused "the token is wrong" REFIT_TOKEN_FILE="$pki/wrong-token"
# The daemons' token opens no door of the public API...
refused "the token is wrong" REFIT_TOKEN_FILE="$pki/daemon-token"
# ...and the public token none of the control streams: such a refitd is never a member.
start_daemons intruder-node
for _ in $(seq 100); do grep -q "the token is wrong" "$work/intruder-node.log" && break; sleep 0.1; done
grep -q "the token is wrong" "$work/intruder-node.log" || { cat "$work/intruder-node.log"; exit 1; }
if "$bin/refitctl" status --coordinator="$coordinator" | grep -q intruder-node; then
  echo "a refitd with the public API's token joined" >&2
  exit 1
fi
refused "UNAVAILABLE" -u REFIT_TLS_CERT -u REFIT_TLS_KEY
refused "UNAVAILABLE" -u REFIT_TLS_CA -u REFIT_TLS_CERT -u REFIT_TLS_KEY
chmod 644 "$pki/wrong-token"
refused "may be read by group or others" REFIT_TOKEN_FILE="$pki/wrong-token"
stop_all
echo "security: mutual TLS and the token let the refit through and keep the others out"
