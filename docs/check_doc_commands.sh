#!/usr/bin/env bash
# Bazel test: every refitctl command the docs show still parses (docs/check_doc_commands.py).
set -euo pipefail
exec /usr/bin/python3 docs/check_doc_commands.py client/refitctl README.md deploy/README.md docs/*.md
