#!/usr/bin/env bash
# A short run of every fuzz target (what CI runs; scripts/test-all.sh calls
# it): the PML's wire headers, the TCP BTL's wire and framing, the PMI wire
# and server core, the matching engine. Each crate's fuzz/ directory is its
# own workspace (see crates/oxmpi-match/README.md); all build into
# target/fuzz, without a sanitizer (-s none), which works on the stable
# toolchain. Each target starts from its committed seeds (fuzz/seeds/<t>)
# and writes what it finds new to target/fuzz/corpus/<t>.
# Usage: scripts/fuzz-smoke.sh [seconds per target]   (default 20, or
#        $FUZZ_SECONDS)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
seconds=${1:-${FUZZ_SECONDS:-20}}
root=$(pwd)
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "== installing cargo-fuzz"
    cargo install --locked cargo-fuzz
fi
targets=(
    oxmpi-pml:hdr
    oxmpi-btl:tcp_wire
    oxmpi-btl:tcp_framing
    oxmpi-runtime:pmi_wire
    oxmpi-runtime:pmi_server
    oxmpi-match:differential
)
for ct in "${targets[@]}"; do
    crate=${ct%%:*}
    t=${ct#*:}
    corpus=$root/target/fuzz/corpus/$t
    mkdir -p "$corpus"
    seeds=()
    [ -d "crates/$crate/fuzz/seeds/$t" ] && seeds=("$root/crates/$crate/fuzz/seeds/$t")
    echo "== fuzz $crate $t (${seconds} s)"
    log=$root/target/fuzz/$t.log
    if ! (cd "crates/$crate" && cargo fuzz run -s none --target-dir "$root/target/fuzz" "$t" \
        "$corpus" "${seeds[@]}" -- -max_total_time="$seconds") >"$log" 2>&1; then
        tail -n 40 "$log" >&2
        echo "fuzz target $t failed (whole log: $log)" >&2
        exit 1
    fi
    grep -E '^Done [0-9]+ runs' "$log" || true
done
