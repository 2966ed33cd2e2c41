#!/usr/bin/env bash
# Installs the Debian 12 packages refit builds and tests with, when any is missing.
# Everything comes from Debian's archive; the build itself never downloads anything.
set -euo pipefail

PACKAGES=(
  g++
  bazel-bootstrap
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libspdlog-dev libxxhash-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libucx-dev prometheus-cpp-dev libcpp-httplib-dev
  openssl  # the TLS test makes its certificates
  iproute2  # the partition test's network namespaces and veth pair
  # The Python client and its tests (Debian's /usr/bin/python3 sees these).
  python3-grpcio python3-protobuf python3-numpy python3-torch python3-yaml
  python3-pip python3-setuptools python3-venv  # pip install ./client/python, in a venv
  python3-kubernetes  # the Kubernetes API models: the manifests' offline schema check
)
# tests/fuzz/run_fuzzers.sh also needs clang (libFuzzer); the test command does not.

missing=()
for package in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done

if ((${#missing[@]} > 0)); then
  echo "installing: ${missing[*]}"
  sudo_cmd=()
  if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# promtool checks and unit-tests the alert rules. Debian ships it only inside its prometheus
# package, whose installation would start a Prometheus server where systemd runs: the binary
# alone is unpacked from that package into /usr/local/bin.
if ! command -v promtool > /dev/null; then
  echo "installing: promtool (from Debian's prometheus package)"
  sudo_cmd=()
  if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi
  unpacked=$(mktemp -d)
  (cd "$unpacked" && { apt-get download -qq prometheus 2> /dev/null ||
                       { "${sudo_cmd[@]}" apt-get update -qq && apt-get download -qq prometheus; }; })
  dpkg-deb -x "$unpacked"/prometheus_*.deb "$unpacked/root"
  "${sudo_cmd[@]}" install -m 755 "$unpacked/root/usr/bin/promtool" /usr/local/bin/promtool
  rm -rf "$unpacked"
fi
