#!/usr/bin/env bash
# Checks systemd unit files with `systemd-analyze verify` (offline: no
# running systemd needed) and fails on anything it says, warnings included
# (it ignores a misspelt setting with a warning and exit status 0).
# Usage: ci/verify-units.sh DIR   (every *.service in DIR; ctest passes
# build/systemd-test, the units with their binaries in build/bin)
set -euo pipefail
dir=${1:?usage: ci/verify-units.sh DIR}
shopt -s nullglob
units=("$dir"/*.service)
if [ "${#units[@]}" -eq 0 ]; then
  echo "verify-units: no unit in $dir" >&2
  exit 2
fi
rc=0
for u in "${units[@]}"; do
  if ! out=$(systemd-analyze verify "$u" 2>&1) || [ -n "$out" ]; then
    echo "verify-units: $u:" >&2
    echo "$out" >&2
    rc=1
  else
    echo "verify-units: $(basename "$u") ok"
  fi
done
exit $rc
