#!/usr/bin/env bash
# Fails if any tracked C++ file differs from .clang-format (clang-format 14,
# Debian 12's). Fix with: git ls-files '*.cpp' '*.hpp' | xargs clang-format -i
set -euo pipefail
cd "$(dirname "$0")/.."
git ls-files '*.cpp' '*.hpp' '*.h' '*.cc' | xargs clang-format --dry-run --Werror
echo "format: $(git ls-files '*.cpp' '*.hpp' '*.h' '*.cc' | wc -l) files match .clang-format"
