#!/usr/bin/env bash
# Bazel test: the Python client's unit tests, with freshly generated stubs, under Debian's
# python3 (which sees python3-torch and python3-grpcio).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
py=$(mktemp -d "${TEST_TMPDIR:-/tmp}/refit-py-XXXXXX")
trap 'rm -rf "$py"' EXIT
cp -r "$here/refit" "$py/refit"
"$here/generate_stubs.sh" "$py/refit/_proto"
# The conventions are checked against refitctl's model layouts (a Bazel data dependency).
export REFITCTL=${REFITCTL:-$(pwd)/client/refitctl}
cd "$here/tests"
PYTHONPATH=$py PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 -m unittest discover -v
