#!/usr/bin/env bash
# The main job, from a fresh Debian 12 machine: install packages, build, start
# a local cluster (controller + 3 brokers as processes on loopback), publish
# and subscribe through it, verify every acknowledged record was delivered
# exactly once and in order, print counts, offsets and latency percentiles.
# Extra arguments go to `catena cluster demo` (e.g. --records 100000 --kill).
set -euo pipefail
cd "$(dirname "$0")/.."
ci/install-deps.sh
NINJA_TARGETS="catena catenad catena-controller" ci/build.sh
exec build/bin/catena cluster demo --dir build/demo-cluster "$@"
