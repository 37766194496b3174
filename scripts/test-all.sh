#!/usr/bin/env bash
# Runs every oxmpi test on a fresh machine: installs what the tests need
# (MPICH's Hydra launcher and Slurm, for the "an existing launcher runs
# oxmpi" tests), then formatting, lints, docs and the whole test suite.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Each step is announced with the seconds since the script started (CI has
# 30 minutes for everything: the log shows where they go).
started_at=$(date +%s)
step() { echo "== $* (at $(($(date +%s) - started_at)) s)"; }

need_pkgs=()
command -v mpiexec.hydra >/dev/null 2>&1 || need_pkgs+=(mpich)
# libfabric for oxmpi-mtl's ofi MTL tests (loaded at run time: the build
# does not need it, the tests skip without it); -bin for fi_info and the
# fi_*pingpong comparisons, -dev for the struct-layout test's headers.
for p in libfabric1 libfabric-bin libfabric-dev; do
    dpkg -s $p >/dev/null 2>&1 || need_pkgs+=($p)
done
# A TrueType font for oxmpi-bench's PNG plots.
[ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || need_pkgs+=(fonts-dejavu-core)
# Slurm for crates/oxmpi-launch/tests/slurm.rs, which starts its own munged,
# slurmctld and slurmd (nothing is started here: Debian's packages do not
# start their services without an init system, and the test uses its own
# key and configuration). libpmix-dev provides the libpmix.so that Slurm's
# PMIx plugin opens (srun --mpi=pmix, which oxmpi must refuse clearly).
slurm_pkgs=()
for t in slurmctld slurmd srun munged; do
    command -v $t >/dev/null 2>&1 || { slurm_pkgs=(slurmctld slurmd slurm-client munge); break; }
done
dpkg -s libpmix-dev >/dev/null 2>&1 || slurm_pkgs+=(libpmix-dev)
if [ ${#need_pkgs[@]} -gt 0 ] || [ ${#slurm_pkgs[@]} -gt 0 ]; then
    SUDO=""
    [ "$(id -u)" = 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    if [ ${#need_pkgs[@]} -gt 0 ]; then
        echo "== installing ${need_pkgs[*]}"
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
    fi
    if [ ${#slurm_pkgs[@]} -gt 0 ]; then
        echo "== installing ${slurm_pkgs[*]}"
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
            "${slurm_pkgs[@]}" >/dev/null
    fi
fi

# MPICH 5 from PyPI (mpicc_abi, mpi_abi.h, libmpi_abi.so.1) for the
# standard-ABI binary-compatibility tests; cached under target/.
if [ ! -x target/abi-venv/bin/mpicc_abi ]; then
    echo "== installing MPICH 5 (standard ABI) into target/abi-venv"
    rm -rf target/abi-venv
    python3 -m venv target/abi-venv
    target/abi-venv/bin/pip install -q mpich==5.0.2
fi

step "cargo fmt --check"
cargo fmt --all -- --check
step "cargo clippy"
cargo clippy --workspace --all-targets --quiet -- -D warnings
step "cargo doc"
RUSTDOCFLAGS=-Dwarnings cargo doc --workspace --no-deps --quiet
step "cargo test"
cargo test --workspace

# Model checking with loom, in its own target directory (--cfg loom changes
# every crate's build) and without LTO (which would only slow the build):
# the sm ring's models (crates/oxmpi-btl/tests/ring_loom.rs: the ring code
# that runs, with loom's atomics and memory, every interleaving up to 3
# preemptions) and the PML's engine cell.
step "loom: sm ring models, the engine cell"
loom_run() { RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom CARGO_PROFILE_RELEASE_LTO=false "$@"; }
loom_run timeout 1200 cargo test --release -q -p oxmpi-btl --test ring_loom
loom_run cargo test --release -q -p oxmpi-pml --lib loom_models

# A short run of every fuzz target (cargo-fuzz, installed if missing; no
# sanitizer, so the stable toolchain builds it): the PML's wire headers, the
# TCP BTL's wire and framing, the PMI wire and server core, the matching
# engine.
step "fuzz targets"
scripts/fuzz-smoke.sh 8

# 1 GiB over the tcp BTL, checked end to end (a release build: about 1 s).
step "tcp BTL: 1 GiB transfer (release)"
cargo test --release -q -p oxmpi-btl --test tcp_bulk

# The benchmark suite's smoke run: every test, two sizes, one repetition, on
# oxmpi (Rust and C suites), Open MPI 5 and MPICH 5 (from PyPI, cached under
# target/bench), over sm and tcp; exits non-zero if any run fails.
step "oxmpi-bench compare --smoke"
cargo run --release -q -p oxmpi-bench -- compare --smoke --out target/bench/smoke >/dev/null
for f in report.md samples.csv summary.csv limits.csv plots/shm_latency.svg plots/shm_latency.png plots/tcp_bw.svg; do
    test -s "target/bench/smoke/$f" || { echo "oxmpi-bench smoke: $f missing"; exit 1; }
done

# Real clients (issue 38): connectivity and a stencil mini-app in C, and
# mpi4py (built from its source against our mpicc, cached under
# target/clients) running its own test modules, under oxmpirun and Hydra;
# fails on any failure.
step "clients (scripts/clients.sh)"
scripts/clients.sh
step "all tests passed"
