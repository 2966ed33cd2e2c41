#!/usr/bin/env bash
# Bazel test: `pip install` of the client on a machine without network (Debian's pip and
# setuptools, in a venv that sees Debian's grpcio, protobuf and torch) gives an importable
# refit with its generated stubs, its type marker and its exception classes, run from
# outside the source tree.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d "${TEST_TMPDIR:-/tmp}/refit-pip-XXXXXX")
trap 'rm -rf "$work"' EXIT
# pip builds in the source folder: give it a copy laid out as the repository is.
mkdir -p "$work/src/client/python" "$work/src/proto"
cp -rL "$here/refit" "$here/setup.py" "$here/pyproject.toml" "$work/src/client/python/"
rm -f "$work/src/client/python/refit/_proto/refit_pb2"*.py
cp -L "$here/../../proto/refit.proto" "$work/src/proto/"
/usr/bin/python3 -m venv --system-site-packages "$work/venv"
"$work/venv/bin/python" -m pip install --quiet --no-build-isolation --no-index \
  "$work/src/client/python"
cd "$work"
"$work/venv/bin/python" - << 'PY'
import os
import grpc
import refit
from refit._proto import refit_pb2
assert "site-packages" in refit.__file__, refit.__file__
assert os.path.exists(os.path.join(os.path.dirname(refit.__file__), "py.typed"))
assert refit_pb2.RefitRequest(version=3).version == 3
error = refit.errors.from_rpc_error(type("E", (grpc.RpcError,), {
    "code": lambda self: grpc.StatusCode.DEADLINE_EXCEEDED,
    "details": lambda self: "epoch 7: 2 of 4 destinations done"})())
assert isinstance(error, refit.RefitTimeout) and isinstance(error, refit.RefitError), error
assert error.code == grpc.StatusCode.DEADLINE_EXCEEDED and "epoch 7" in error.message
box = refit.DeviceMesh((2, 2)).box_of(3, (5, 4), [refit.Shard(0), refit.Shard(1)])
assert (box.offset, box.extent) == ((3, 2), (2, 2)), box
print("installed:", refit.__file__)
PY
