#!/usr/bin/env bash
# Configures and builds into build/ (binaries in build/bin/). Extra args go to
# CMake, e.g. `ci/build.sh -DCATENA_SANITIZE=ON` with BUILD_DIR=build-asan.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo} "$@" >/dev/null
ninja -C "$BUILD_DIR" ${NINJA_TARGETS:-}
