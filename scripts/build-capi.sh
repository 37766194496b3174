#!/bin/sh
# Builds the C ABI library and lays out an MPI installation:
#   target/oxmpi/{bin/{mpicc,mpicxx,oxmpirun}, include/mpi.h,
#                 lib/{libmpi_abi.so.1, libmpi_abi.so, libmpi.so}, lib/pkgconfig/}
# (a debug build goes to target/oxmpi-debug instead, so the tests never
# replace the optimized library that benchmark binaries point at).
# Usage: scripts/build-capi.sh [release|debug]   (default release)
set -eu
cd "$(dirname "$0")/.."
profile=${1:-release}
flag=--release
[ "$profile" = debug ] && flag=
cargo build $flag -p oxmpi-capi -p oxmpi-launch --bins --lib
target=${CARGO_TARGET_DIR:-target}
out=$target/oxmpi
[ "$profile" = debug ] && out=$target/oxmpi-debug
mkdir -p "$out/bin" "$out/include" "$out/lib/pkgconfig"
# Copy then rename: a running program keeps the library it mapped.
cp -f "$target/$profile/libmpi_abi.so" "$out/lib/.libmpi_abi.so.1.new"
mv -f "$out/lib/.libmpi_abi.so.1.new" "$out/lib/libmpi_abi.so.1"
ln -sf libmpi_abi.so.1 "$out/lib/libmpi_abi.so"
ln -sf libmpi_abi.so.1 "$out/lib/libmpi.so"
cp -f crates/oxmpi-capi/include/mpi.h "$out/include/mpi.h"
cp -f crates/oxmpi-capi/bin/mpicc "$out/bin/mpicc"
ln -sf mpicc "$out/bin/mpicxx"
cp -f "$target/$profile/oxmpirun" "$out/bin/.oxmpirun.new"
mv -f "$out/bin/.oxmpirun.new" "$out/bin/oxmpirun"
prefix=$(cd "$out" && pwd)
cat > "$out/lib/pkgconfig/oxmpi.pc" <<PC
prefix=$prefix
includedir=\${prefix}/include
libdir=\${prefix}/lib

Name: oxmpi
Description: oxmpi MPI library (MPI 5.0 standard ABI)
Version: 0.1.0
Cflags: -I\${includedir}
Libs: -L\${libdir} -Wl,-rpath,\${libdir} -lmpi_abi
PC
cp -f "$out/lib/pkgconfig/oxmpi.pc" "$out/lib/pkgconfig/mpi.pc"
echo "$prefix"
