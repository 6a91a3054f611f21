#!/usr/bin/env bash
# Runs clang-tidy (14, Debian 12's) with the checks in .clang-tidy over every
# tracked .cpp of ours that the build compiles (not the Thrift code generated
# under the build directory), JOBS at a time (default: every core), and fails
# on any warning (.clang-tidy: WarningsAsErrors '*'). Needs a configured
# build: BUILD_DIR (default build) with compile_commands.json, and the Thrift
# headers generated there (ci/build.sh makes both).
# A unity build (-DCMAKE_UNITY_BUILD=ON, as CI's) lists its batches, not
# the sources: clang-tidy then reads each batch once, and reports findings
# in the sources it includes (HeaderFilterRegex covers them), which takes
# about a third of the time of one source at a time (2026-12-02, 180
# sources in 45 batches: 326 s of CPU against about 740 s). What a batch
# cannot show is a source that misses an include another source of its
# batch made; a build without unity batches (the default) shows that.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
db="$BUILD_DIR/compile_commands.json"
if [ ! -f "$db" ]; then
  echo "tidy: no $db; run ci/build.sh first (it exports compile commands)" >&2
  exit 2
fi
# Tracked sources the database knows: what the build compiles, and nothing
# it generates.
mapfile -t sources < <(python3 -c '
import json, os, sys
root = os.getcwd() + "/"
for e in json.load(open(sys.argv[1])):
    f = os.path.normpath(os.path.join(e["directory"], e["file"]))
    if f.startswith(root): print(f[len(root):])
' "$db")
mapfile -t files < <(printf '%s\n' "${sources[@]}" | grep -Fxf <(git ls-files '*.cpp'))
# A unity build's batches (generated under the build directory: they
# include our tracked sources by absolute path).
mapfile -t -O "${#files[@]}" files < <(printf '%s\n' "${sources[@]}" | grep '/Unity/unity_[0-9]*_cxx\.cxx$' || true)
if [ "${#files[@]}" -eq 0 ]; then
  echo "tidy: no tracked source in $db" >&2
  exit 2
fi
started=$(date +%s)
# clang-tidy's "N warnings generated." counts what the filters dropped
# (system and generated headers); only findings are printed.
if printf '%s\n' "${files[@]}" |
  xargs -P "$JOBS" -n 1 clang-tidy --config-file=.clang-tidy -p "$BUILD_DIR" --quiet 2> >(grep -v ' warnings\? generated\.$' >&2); then
  echo "tidy: ${#files[@]} files clean ($(( $(date +%s) - started ))s)"
else
  echo "tidy: findings above (${#files[@]} files, $(( $(date +%s) - started ))s); fix them or NOLINT(check) with the reason" >&2
  exit 1
fi
