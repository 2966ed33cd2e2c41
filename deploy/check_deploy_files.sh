#!/usr/bin/env bash
# Bazel test: deploy/check_deploy_files.py under Debian's python3 (python3-yaml).
set -euo pipefail
exec /usr/bin/python3 deploy/check_deploy_files.py .
