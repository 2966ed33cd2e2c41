#!/usr/bin/env bash
# The alert rules as Prometheus reads them (promtool check rules), each alert firing on the
# series it is written for and quiet beside them (promtool test rules), and every refit
# series they query one that refit exports (daemon/metrics.cc).
set -euo pipefail
rules=deploy/prometheus/refit-alerts.yaml
command -v promtool > /dev/null || { echo "promtool is missing (Debian: prometheus)" >&2; exit 1; }
promtool check rules "$rules"
(cd deploy/prometheus && promtool test rules refit-alerts.test.yaml)
exported=$(grep -o '\.Name("[a-z_]*")' daemon/metrics.cc | sed 's/.Name("\(.*\)")/\1/' | sort -u)
queried=$(grep -o '\brefitd\?_[a-z_]*' "$rules" | sort -u)
unknown=$(comm -23 <(echo "$queried") <(echo "$exported"))
[[ -z $unknown ]] || { echo "the alert rules query series refit does not export: $unknown" >&2; exit 1; }
echo "alert rules: $(grep -c '^      - alert:' "$rules") alerts checked and tested"
