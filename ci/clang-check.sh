#!/usr/bin/env bash
# Compiles the .cpp files changed since a git ref with the flags of an
# existing Clang build (-fsyntax-only: no objects, no link), so that what
# only Clang refuses (-Wthread-safety, stricter warnings) shows up in a
# minute instead of after CI's Clang build. Not part of CI.
#
#   ci/clang-check.sh [REF] [BUILD_DIR]     # defaults: origin/main or HEAD~1, build-tsan
#
# BUILD_DIR must have been configured (its compile_commands.json). The
# Thrift headers are taken from BUILD_DIR/control/gen if it is current,
# else from build/control/gen.
set -euo pipefail
cd "$(dirname "$0")/.."
ref="${1:-$(git rev-parse -q --verify origin/main || echo HEAD~1)}"
build="${2:-build-tsan}"
[ -f "$build/compile_commands.json" ] || { echo "clang-check: no $build/compile_commands.json" >&2; exit 2; }
gen="$build/control/gen"
if [ -d build/control/gen ] && [ control/idl/catena.thrift -nt "$gen/catena/control/idl/catena_types.h" ]; then
  gen=build/control/gen
fi
files=$( (git diff --name-only "$ref" -- '*.cpp'; git diff --name-only -- '*.cpp') | sort -u)
[ -n "$files" ] || { echo "clang-check: no .cpp changed since $ref"; exit 0; }
python3 - "$build" "$gen" $files <<'EOF'
import json, os, shlex, subprocess, sys
build, gen, files = sys.argv[1], os.path.abspath(sys.argv[2]), sys.argv[3:]
cc = json.load(open(os.path.join(build, "compile_commands.json")))
root = os.getcwd()
def flags_for(path):
    # The target built in the file's CMake directory (control/src/x.cpp:
    # control/), a unity batch of it; of several targets there, the one
    # with the most include directories.
    d = path.split("/src/")[0] if "/src/" in path else os.path.dirname(path)
    prefix = os.path.join(os.path.abspath(build), d, "CMakeFiles") + "/"
    found = [e for e in cc if e["file"].startswith(prefix)]
    if not found:
        return None
    return max(found, key=lambda e: e.get("command", " ".join(e.get("arguments", []))).count("-I"))
failed = []
for f in files:
    if not os.path.exists(f):
        continue
    e = flags_for(f)
    if e is None:
        print(f"clang-check: skip {f} (no target of {build} builds it)", flush=True)
        continue
    args = shlex.split(e["command"]) if "command" in e else list(e["arguments"])
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a in ("-o", "-c"):
            skip = a == "-o"
            continue
        if a.endswith((".cxx", ".cpp")):
            continue
        if a.startswith("-I") and a.endswith("/control/gen"):
            a = "-I" + gen
        out.append(a)
    r = subprocess.run(out + ["-fsyntax-only", os.path.join(root, f)], cwd=e["directory"])
    print(f"clang-check: {'ok  ' if r.returncode == 0 else 'FAIL'} {f}", flush=True)
    if r.returncode != 0:
        failed.append(f)
sys.exit(1 if failed else 0)
EOF
