#!/bin/sh
# The team's runbook helper (written by `gameday init`): point a serving node at a model.
# In production this would be `kubectl set args` or a deploy tool; against a gameday lab, the
# lab's own verb does the same. gameday runs it with the lab in GAMEDAY_LAB and its own
# `gameday` first on PATH.
set -eu
if [ $# -ne 2 ]; then
  echo "usage: $0 NODE MODEL" >&2
  exit 2
fi
exec gameday lab config "$1" --set-arg "model_tag=$2"
