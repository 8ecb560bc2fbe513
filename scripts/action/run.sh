#!/usr/bin/env bash
# The action's run step: annotations on stdout (GitHub reads workflow commands there), the
# Markdown summary appended to $GITHUB_STEP_SUMMARY, stab's exit status as the step's and
# as the `exit-code` output. STAB_BIN overrides the command (a test points it at a venv).
set -uo pipefail
stab=(${STAB_BIN:-stab})
read -r -d '' -a paths <<< "${STAB_PATHS:-}" || true
read -r -d '' -a extra <<< "${STAB_ARGS:-}" || true
if [[ ${#paths[@]} -eq 0 ]]; then
    echo "::error title=stab::the action needs 'paths': the logs or run folders to analyse"
    exit 2
fi
args=(--fail-on "${STAB_FAIL_ON:-error}")
if [[ "${STAB_RECURSIVE:-false}" == "true" ]]; then
    args+=(--recursive)
fi
"${stab[@]}" analyze "${paths[@]}" "${args[@]}" "${extra[@]}" --format github
status=$?
if [[ -n "${GITHUB_STEP_SUMMARY:-}" ]]; then
    # the same analysis as Markdown; its exit status is the one above, so it is not kept
    "${stab[@]}" analyze "${paths[@]}" "${args[@]}" "${extra[@]}" --format markdown \
        >> "$GITHUB_STEP_SUMMARY" 2>/dev/null || true
fi
if [[ -n "${GITHUB_OUTPUT:-}" ]]; then
    echo "exit-code=$status" >> "$GITHUB_OUTPUT"
fi
exit "$status"
