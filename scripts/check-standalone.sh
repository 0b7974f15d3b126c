#!/usr/bin/env bash
# The project stands on its own: a user's clone has nothing beside it, so no tracked file may
# read or point at the shared folder beside the repository, and every data file the tests,
# docs and examples name ships in the repository (data/, tests/data/). Fails naming each file
# that breaks the rule.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  echo "check-standalone: not a git checkout, nothing to check"
  exit 0
fi
# The pattern is written so that this script does not match itself.
mapfile -t hits < <(git grep -Il -e '[.][.]/shared' -- . || true)
if ((${#hits[@]} > 0)); then
  echo "check-standalone: these files refer to the shared folder beside the repository, which a user's clone does not have:"
  printf '  %s\n' "${hits[@]}"
  exit 1
fi
stray=$(git ls-files | grep -E '^(crash|leak|timeout|oom)-' || true)
if [ -n "$stray" ]; then
  echo "check-standalone: fuzzer artefacts at the repository root (move them into tests/fuzz/corpus): $stray"
  exit 1
fi
echo "check-standalone: no file refers outside the repository"
