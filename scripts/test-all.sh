#!/usr/bin/env bash
# Runs every oxmpi test on a fresh machine: installs what the tests need
# (MPICH's Hydra launcher, for the "an existing launcher runs oxmpi" tests),
# then formatting, lints, docs and the whole test suite.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

need_pkgs=()
command -v mpiexec.hydra >/dev/null 2>&1 || need_pkgs+=(mpich)
if [ ${#need_pkgs[@]} -gt 0 ]; then
    echo "== installing ${need_pkgs[*]}"
    SUDO=""
    [ "$(id -u)" = 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi

# MPICH 5 from PyPI (mpicc_abi, mpi_abi.h, libmpi_abi.so.1) for the
# standard-ABI binary-compatibility tests; cached under target/.
if [ ! -x target/abi-venv/bin/mpicc_abi ]; then
    echo "== installing MPICH 5 (standard ABI) into target/abi-venv"
    rm -rf target/abi-venv
    python3 -m venv target/abi-venv
    target/abi-venv/bin/pip install -q mpich==5.0.2
fi

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --quiet -- -D warnings
echo "== cargo doc"
RUSTDOCFLAGS=-Dwarnings cargo doc --workspace --no-deps --quiet
echo "== cargo test"
cargo test --workspace
