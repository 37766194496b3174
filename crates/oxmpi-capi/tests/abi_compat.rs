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

/// The prototypes of a header: `(name, line)` of every `MPI_` and `PMPI_`
/// function it declares (MPICH's `MPIX_` extensions left out), the line
/// without a trailing comment.
fn prototypes(header: &str) -> std::collections::BTreeMap<String, String> {
    header
        .lines()
        .filter(|l| ["int ", "double ", "MPI_"].iter().any(|p| l.starts_with(p)))
        .filter_map(|l| {
            let name = l[..l.find('(')?].split_whitespace().last()?;
            let line = l[..=l.rfind(';')?].to_string();
            (name.starts_with("MPI_") || name.starts_with("PMPI_"))
                .then(|| (name.to_string(), line))
        })
        .collect()
}

/// `mpi.h` declares the whole standard ABI: exactly the `MPI_` and `PMPI_`
/// functions of MPICH 5's `mpi_abi.h` (`MPI_T_` ones included, MPICH's
/// `MPIX_` extensions not), implemented or not, each with a signature
/// compatible with MPICH's: a C file that includes one header and declares
/// again every prototype of the other compiles without a conflict, both
/// ways round.
#[test]
fn header_declares_every_standard_function_as_mpich_does() {
    let Some(m) = mpich() else { return };
    let mpich_h = std::fs::read_to_string(m.join("include/mpi_abi.h")).unwrap();
    let ours_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("include");
    let ours_h = std::fs::read_to_string(ours_dir.join("mpi.h")).unwrap();
    let (theirs, ours) = (prototypes(&mpich_h), prototypes(&ours_h));
    assert!(
        theirs.len() > 1200,
        "{} prototypes in mpi_abi.h",
        theirs.len()
    );
    let missing: Vec<&String> = theirs.keys().filter(|f| !ours.contains_key(*f)).collect();
    let extra: Vec<&String> = ours.keys().filter(|f| !theirs.contains_key(*f)).collect();
    assert!(missing.is_empty(), "not declared in mpi.h: {missing:?}");
    assert!(
        extra.is_empty(),
        "declared in mpi.h, not in MPICH's: {extra:?}"
    );
    for (include, dir, other) in [
        ("mpi.h", ours_dir.clone(), &theirs),
        ("mpi_abi.h", m.join("include"), &ours),
    ] {
        let mut c = format!("#include <{include}>\n");
        for line in other.values() {
            c.push_str(line);
            c.push('\n');
        }
        let src = tmp(&format!("redeclare_{include}.c"));
        std::fs::write(&src, c).unwrap();
        ok(
            Command::new("cc")
                .args([
                    "-std=c11",
                    "-fsyntax-only",
                    "-Wall",
                    "-Wextra",
                    "-Werror",
                    "-I",
                ])
                .arg(&dir)
                .arg(&src)
                .output()
                .unwrap(),
            &format!("the other header's prototypes declared again after {include}"),
        );
    }
}

/// The constants of a header: every `#define MPI_X value` and every enum
/// member `MPI_X = value` (names with `MPIX_` left out), by name, with
/// their value's text (spaces and trailing commas and comments dropped).
fn constants(header: &str) -> std::collections::BTreeMap<String, String> {
    let mut out = std::collections::BTreeMap::new();
    for l in header.lines() {
        let l = l.split("/*").next().unwrap_or("").trim();
        let (name, value) = if let Some(d) = l.strip_prefix("#define ") {
            let mut w = d.splitn(2, char::is_whitespace);
            (w.next().unwrap_or(""), w.next().unwrap_or(""))
        } else if let Some((n, v)) = l.split_once('=') {
            (n.trim(), v)
        } else {
            continue;
        };
        if name.starts_with("MPI_") && !name.contains('(') {
            let v: String = value
                .trim_end_matches(',')
                .chars()
                .filter(|c| !c.is_whitespace())
                .collect();
            out.insert(name.to_string(), v);
        }
    }
    out
}

/// Every constant of MPICH 5's `mpi_abi.h` (handles, error classes,
/// modes, combiners, `MPI_T_` enumerations, special pointers, limits) is in
/// `mpi.h` with the same value, and `mpi.h` has none MPICH lacks.
#[test]
fn header_has_every_constant_of_mpich() {
    let Some(m) = mpich() else { return };
    let theirs = constants(&std::fs::read_to_string(m.join("include/mpi_abi.h")).unwrap());
    let ours = constants(
        &std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("include/mpi.h"))
            .unwrap(),
    );
    assert!(
        theirs.len() > 300,
        "{} constants in mpi_abi.h",
        theirs.len()
    );
    let differ: Vec<String> = theirs
        .iter()
        .filter(|(k, v)| ours.get(*k) != Some(v))
        .map(|(k, v)| format!("{k}: MPICH {v}, ours {:?}", ours.get(k)))
        .collect();
    assert!(differ.is_empty(), "{differ:#?}");
    let extra: Vec<&String> = ours.keys().filter(|k| !theirs.contains_key(*k)).collect();
    assert!(extra.is_empty(), "only in mpi.h: {extra:?}");
}
