#!/usr/bin/env bash
# Runs every ctest entry of a ThreadSanitizer build (configured with
# -DCATENA_TSAN=ON, which is also the Clang -Wthread-safety build): unit,
# integration, and the multi-process failover and chaos entries, which find
# what single processes cannot (about 11 minutes in all on 2 cores; add
# `-LE failover` to leave those out). Every process the tests start
# (catenad, catena-controller, catena) is built with TSan too; each writes
# its reports to $BUILD_DIR/tsan-reports/, and any report there fails the
# run, whatever the exit codes said.
# Usage: BUILD_DIR=build-tsan ci/tsan-test.sh [extra ctest args]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build-tsan}
reports="$PWD/$BUILD_DIR/tsan-reports"
rm -rf "$reports" && mkdir -p "$reports"
# die_after_fork=0: the fabric's CrossProcess test forks a child that opens
# its own provider (threads) without exec; TSan would refuse that outright.
# (Options are separated by spaces; a path must not hold a colon.)
export TSAN_OPTIONS="suppressions=$PWD/ci/tsan.supp log_path=$reports/tsan second_deadlock_stack=1 die_after_fork=0 ${TSAN_OPTIONS:-}"
rc=0
ctest --test-dir "$BUILD_DIR" --output-on-failure --timeout 900 -j1 "$@" || rc=$?
if compgen -G "$reports/tsan*" >/dev/null; then
  echo "tsan-test: ThreadSanitizer reports:"
  for f in "$reports"/tsan*; do echo "--- $f"; cat "$f"; done
  rc=1
fi
exit $rc
