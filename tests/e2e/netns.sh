# Helpers for the end-to-end scripts that cut links: a network namespace for one node,
# joined to this one by veth pairs. Needs root; a step this machine cannot take skips the
# script with the reason.

# require_netns TEST: skips the script, reported as TEST, unless this machine may create
# network namespaces (root, iproute2).
require_netns() {
  netns_test=$1
  [[ $(id -u) == 0 ]] || skip "needs root to create network namespaces"
  command -v ip > /dev/null || skip "needs ip (iproute2)"
}

# skip REASON: the script passes without running, and says why.
skip() {
  echo "[  SKIPPED ] $netns_test: $1"
  exit 0
}

# open_netns NAME: a new namespace `netns` named NAME-XXXX (its loopback up) and `suffix`,
# four hex digits for the script's link names; at exit it is removed with its links, after
# the processes are stopped.
open_netns() {
  suffix=$(printf '%04x' $((RANDOM % 65536)))
  netns=$1-$suffix
  netns_links=()
  trap close_netns EXIT
  ip netns add "$netns" 2> /dev/null || skip "cannot create a network namespace here"
  ip -n "$netns" link set lo up
}

# link_netns NEAR FAR SUBNET: a veth pair, NEAR here as SUBNET.1 and FAR in the namespace
# as SUBNET.2, both up.
link_netns() {
  ip link add "$1" type veth peer name "$2" netns "$netns" 2> /dev/null ||
    skip "cannot create a veth pair here"
  netns_links+=("$1")
  ip addr add "$3.1/24" dev "$1"
  ip link set "$1" up
  ip -n "$netns" addr add "$3.2/24" dev "$2"
  ip -n "$netns" link set "$2" up
}

close_netns() {
  cleanup
  local link
  for link in "${netns_links[@]}"; do ip link del "$link" 2> /dev/null || true; done
  ip netns del "$netns" 2> /dev/null || true
}
