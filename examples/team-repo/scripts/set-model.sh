#!/bin/sh
# Runbook helper: point a serving node at a model. Production runs `kubectl set args`; against a
# gameday lab, the lab's own verb does the same (GAMEDAY_LAB names the lab).
set -eu
if [ $# -ne 2 ]; then
  echo "usage: $0 NODE MODEL" >&2
  exit 2
fi
exec gameday lab config "$1" --set-arg "model_tag=$2"
