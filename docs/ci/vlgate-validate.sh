#!/usr/bin/env bash
# The step a CI job runs after training: register the checkpoint, validate the new version,
# keep the decision and the report as the job's artifacts, and exit as vlgate validate does.
#
#   docs/ci/vlgate-validate.sh MODEL CHECKPOINT_DIR [OUT_DIR]
#
# Exit status (vlgate validate's): 0 promoted, 3 rejected, 4 could not judge, 5 inconclusive,
# 2 bad input. OUT_DIR (default vlgate-out) gets decision.json (the decision record with the
# model, version and run) and report.html (the validation report, when one was written).
# The environment says where MLflow and vlgate's state are (MLFLOW_TRACKING_URI and its
# credentials, VLGATE_HOME with vlgate.yaml), as for any vlgate command.
set -uo pipefail
if [ $# -lt 2 ]; then
    echo "usage: $0 MODEL CHECKPOINT_DIR [OUT_DIR]" >&2
    exit 2
fi
model=$1
checkpoint=$2
out=${3:-vlgate-out}
vlgate=${VLGATE:-vlgate}
python=${PYTHON:-python3}
mkdir -p "$out"

registered=$("$vlgate" register "$model" "$checkpoint") || exit 2
version=$(printf '%s' "$registered" | "$python" -c 'import json, sys; print(json.load(sys.stdin)["version"])') || exit 2
echo "registered $model v$version"

"$vlgate" validate "$model" "$version" --json > "$out/decision.json"
status=$?
report=$("$python" -c 'import json, sys; print(json.load(open(sys.argv[1])).get("report") or "")' "$out/decision.json" 2>/dev/null || true)
if [ -n "$report" ] && [ -f "$report" ]; then
    cp "$report" "$out/report.html"
fi
case $status in
    0) echo "$model v$version: promoted" ;;
    3) echo "$model v$version: rejected (the reasons are in $out/decision.json and $out/report.html)" ;;
    4) echo "$model v$version: could not be judged (something to judge was missing; see $out/decision.json)" ;;
    5) echo "$model v$version: inconclusive (more shared items would decide; see $out/decision.json)" ;;
    *) echo "$model v$version: vlgate validate exited $status" ;;
esac
exit $status
