#!/usr/bin/env bash
# Prints the Nth (1-based) command of README.md's "Set up on a fresh
# machine" section: the body of its Nth ```sh block. .ci/run runs what this
# prints, so CI runs the README's commands exactly as written.
set -euo pipefail
n=${1:?usage: readme-command.sh N}
readme="$(dirname "${BASH_SOURCE[0]}")/../README.md"
awk -v want="$n" '
    /^## / { in_setup = ($0 == "## Set up on a fresh machine"); next }
    in_setup && /^```sh$/ { k++; if (k == want) grab = 1; next }
    grab && /^```$/ { exit }
    grab { print }
' "$readme"
