#!/usr/bin/env bash
# Bazel test: the Kubernetes manifests against the API schema, offline
# (deploy/check_manifest_schema.py: Debian's python3-kubernetes models), then
# deploy/check_deploy_files.py, both under Debian's python3 (python3-yaml).
set -euo pipefail
/usr/bin/python3 deploy/check_manifest_schema.py .
exec /usr/bin/python3 deploy/check_deploy_files.py .
