#!/usr/bin/env bash
# The main job, from a fresh Debian 12 machine: install packages, build, then
# measure the fabric between two local processes (latency percentiles against
# the transport floor, and bandwidth).
set -euo pipefail
cd "$(dirname "$0")/.."
ci/install-deps.sh
NINJA_TARGETS="catena-perf" ci/build.sh
build/bin/catena-perf "$@"
