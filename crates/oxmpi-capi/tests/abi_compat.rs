//! Standard-ABI binary compatibility with MPICH 5 (`mpicc_abi` and its
//! `mpi_abi.h`, from PyPI's `mpich` wheel): the constants of our `mpi.h`
//! equal MPICH's, and programs compiled and linked by MPICH's `mpicc_abi`
//! run on oxmpi's `libmpi_abi.so.1` by switching the library
//! (`LD_LIBRARY_PATH`; MPICH links with RUNPATH, which that overrides).
//!
//! MPICH is found in `$OXMPI_MPICH_ABI_PREFIX`, `target/abi-venv` (which
//! `scripts/test-all.sh` creates) or `/tmp/anchors/venv-mpich5`; without
//! one the tests are skipped with a note, except in CI where they fail.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn mpich() -> Option<PathBuf> {
    let candidates = [
        std::env::var_os("OXMPI_MPICH_ABI_PREFIX").map(PathBuf::from),
        Some(root().join("target/abi-venv")),
        Some(PathBuf::from("/tmp/anchors/venv-mpich5")),
    ];
    let found = candidates
        .into_iter()
        .flatten()
        .find(|p| p.join("bin/mpicc_abi").exists());
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "MPICH's mpicc_abi is missing in CI (scripts/test-all.sh installs it)"
        );
        eprintln!("note: no MPICH standard-ABI install found; skipping");
    }
    found
}

fn install() -> PathBuf {
    static ONCE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    ONCE.get_or_init(|| {
        let out = Command::new("sh")
            .arg(root().join("scripts/build-capi.sh"))
            .arg("debug")
            .output()
            .expect("run build-capi.sh");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        PathBuf::from(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .last()
                .unwrap()
                .trim(),
        )
    })
    .clone()
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("oxmpi-abi-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

fn ok(out: std::process::Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what}: exit {:?}\n{}{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn constants_equal_mpich_standard_abi() {
    let Some(m) = mpich() else { return };
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/abi/constants.c");
    let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("include");
    let ours = tmp("constants_ours");
    ok(
        Command::new("cc")
            .arg("-I")
            .arg(&include)
            .arg("-o")
            .arg(&ours)
            .arg(&src)
            .output()
            .unwrap(),
        "cc with oxmpi's mpi.h",
    );
    let theirs = tmp("constants_mpich");
    ok(
        Command::new(m.join("bin/mpicc_abi"))
            .arg("-o")
            .arg(&theirs)
            .arg(&src)
            .output()
            .unwrap(),
        "mpicc_abi",
    );
    let a = ok(Command::new(&ours).output().unwrap(), "constants (ours)");
    let b = ok(
        Command::new(&theirs)
            .env("LD_LIBRARY_PATH", install().join("lib"))
            .output()
            .unwrap(),
        "constants (MPICH header)",
    );
    assert!(a.lines().count() > 40, "{a}");
    assert_eq!(a, b, "oxmpi's mpi.h and MPICH's mpi_abi.h disagree");
}

#[test]
fn mpich_abi_binaries_run_on_oxmpi() {
    let Some(m) = mpich() else { return };
    let prefix = install();
    for (name, expect) in [("ring", "ring ok"), ("p2p", "p2p ok")] {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/smoke/{name}.c"));
        let exe = tmp(&format!("{name}_mpich"));
        ok(
            Command::new(m.join("bin/mpicc_abi"))
                .args(["-O1", "-o"])
                .arg(&exe)
                .arg(&src)
                .output()
                .unwrap(),
            "mpicc_abi",
        );
        for btl in ["self,sm", "self,tcp"] {
            let out = Command::new(prefix.join("bin/oxmpirun"))
                .args([
                    "-n",
                    "3",
                    "--timeout",
                    "120",
                    "--mca",
                    "btl",
                    btl,
                    "-x",
                    "LD_LIBRARY_PATH",
                ])
                .arg(&exe)
                .env("LD_LIBRARY_PATH", prefix.join("lib"))
                .env_remove("PMI_FD")
                .output()
                .unwrap();
            let s = ok(
                out,
                &format!("{name} built by MPICH's mpicc_abi on oxmpi ({btl})"),
            );
            assert!(s.contains(expect), "{name} {btl}: {s}");
        }
    }
}
