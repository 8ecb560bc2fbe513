#!/usr/bin/env bash
# The static checks CI makes before the tests; .ci/run, the README's test command and
# .pre-commit-config.yaml all run these same commands. Stops at the first failure.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check stabilitycli tests benchmarks scripts
.venv/bin/ruff format --check stabilitycli tests benchmarks scripts
.venv/bin/mypy stabilitycli
.venv/bin/lint-imports
# no import circle, no private name taken across modules (lazy imports included)
.venv/bin/python scripts/import_cycles.py
