#!/usr/bin/env bash
# The action's install step: stabilitycli from PyPI at STAB_VERSION, else the action's own
# checkout (STAB_SOURCE). STAB_PIP overrides the installer (a test prints the command).
set -euo pipefail
pip=(${STAB_PIP:-python3 -m pip})
if [[ -n "${STAB_VERSION:-}" ]]; then
    "${pip[@]}" install --quiet "stabilitycli==${STAB_VERSION#v}"
else
    "${pip[@]}" install --quiet "${STAB_SOURCE:?the action path}"
fi
