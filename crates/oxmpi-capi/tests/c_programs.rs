//! C programs compiled with oxmpi's `mpicc` against the standard-ABI
//! `mpi.h`, linked to `libmpi_abi.so.1` and run with `oxmpirun` over sm and
//! tcp (`tests/smoke/*.c`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Lays out the installation (`scripts/build-capi.sh debug`) once.
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
            "build-capi.sh failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        PathBuf::from(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .last()
                .expect("prefix")
                .trim(),
        )
    })
    .clone()
}

fn compile(name: &str) -> PathBuf {
    let prefix = install();
    let dir = std::env::temp_dir().join(format!("oxmpi-capi-tests-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join(name);
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/smoke/{name}.c"));
    let out = Command::new(prefix.join("bin/mpicc"))
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("run mpicc");
    assert!(
        out.status.success(),
        "mpicc {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// Compiles program `name` of the C suite (`tests/c`, with its `check.h`).
fn compile_suite(name: &str) -> PathBuf {
    let prefix = install();
    let dir = std::env::temp_dir().join(format!("oxmpi-capi-suite-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join(name);
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/c/{name}.c"));
    let out = Command::new(prefix.join("bin/mpicc"))
        .args(["-std=c11", "-O2", "-g", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("run mpicc");
    assert!(
        out.status.success(),
        "mpicc {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

fn run(exe: &Path, np: u32, btl: &str) -> (i32, String, String) {
    run_with(exe, &[], np, btl)
}

/// [`run`] with more launcher arguments.
fn run_with(exe: &Path, extra: &[&str], np: u32, btl: &str) -> (i32, String, String) {
    let prefix = install();
    let mut child = Command::new(prefix.join("bin/oxmpirun"))
        .args(extra)
        .args(["-n", &np.to_string(), "--mca", "btl", btl])
        .arg(exe)
        // The C suite's oxmpi-specific checks (see tests/c/README.md).
        .env("OXMPI_STRICT", "1")
        .env_remove("PMI_FD")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn oxmpirun");
    let t0 = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if t0.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            panic!("{} -n {np} {btl}: timed out", exe.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn check(name: &str, nps: &[u32], expect: &str) {
    let exe = compile(name);
    for &np in nps {
        for btl in ["self,sm", "self,tcp"] {
            let (code, out, err) = run(&exe, np, btl);
            assert!(
                code == 0 && out.contains(expect) && err.trim().is_empty(),
                "{name} -n {np} btl={btl}: exit {code}\nstdout: {out}\nstderr: {err}"
            );
        }
    }
}

#[test]
fn library_has_the_standard_soname_and_both_symbol_names() {
    let lib = install().join("lib/libmpi_abi.so.1");
    let out = Command::new("readelf").arg("-d").arg(&lib).output();
    if let Ok(out) = out {
        let s = String::from_utf8_lossy(&out.stdout);
        assert!(s.contains("Library soname: [libmpi_abi.so.1]"), "{s}");
    }
    let out = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&lib)
        .output();
    if let Ok(out) = out {
        let s = String::from_utf8_lossy(&out.stdout);
        for f in [
            "MPI_Send",
            "PMPI_Send",
            "MPI_Wtime",
            "PMPI_Wtime",
            "MPI_Init_thread",
        ] {
            assert!(
                s.lines().any(|l| l.ends_with(&format!(" {f}"))),
                "{f} not exported"
            );
        }
    }
    assert!(install().join("lib/libmpi.so").exists());
}

/// The functions a header declares (`int MPI_Send(...);` and the like,
/// `MPI_` and `PMPI_` names).
fn declared_functions(header: &str) -> std::collections::BTreeSet<String> {
    header
        .lines()
        .filter(|l| ["int ", "double ", "MPI_"].iter().any(|p| l.starts_with(p)))
        .filter_map(|l| {
            let name = l[..l.find('(')?].split_whitespace().last()?;
            (name.starts_with("MPI_") || name.starts_with("PMPI_")).then(|| name.to_string())
        })
        .collect()
}

/// The C functions the crate's source defines: the `MPI_X / PMPI_X` pairs
/// of its `entry!` and `conversions!` invocations, and its explicit
/// `extern "C" fn MPI_X` definitions.
fn implemented_functions() -> std::collections::BTreeSet<String> {
    let mut files = Vec::new();
    let mut dirs = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("src")];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                files.push(p);
            }
        }
    }
    let mut out = std::collections::BTreeSet::new();
    for f in files {
        let text = std::fs::read_to_string(f).unwrap();
        // Identifiers, and every other non-space character on its own.
        let mut toks: Vec<String> = Vec::new();
        let mut cur = String::new();
        for c in text.chars() {
            if c.is_alphanumeric() || c == '_' {
                cur.push(c);
                continue;
            }
            if !cur.is_empty() {
                toks.push(std::mem::take(&mut cur));
            }
            if !c.is_whitespace() {
                toks.push(c.to_string());
            }
        }
        let is_fn = |t: &str| t.starts_with("MPI_") || t.starts_with("PMPI_");
        for w in toks.windows(3) {
            if w[0].starts_with("MPI_") && w[1] == "/" && w[2] == format!("P{}", w[0]) {
                out.insert(w[0].clone());
                out.insert(w[2].clone());
            }
        }
        for w in toks.windows(6) {
            if w[0] == "extern"
                && w[1] == "\""
                && w[2] == "C"
                && w[3] == "\""
                && w[4] == "fn"
                && is_fn(&w[5])
            {
                out.insert(w[5].clone());
            }
        }
    }
    out
}

/// The library exports exactly the functions its source implements, each
/// under its `MPI_` and its `PMPI_` name, and nothing else; `mpi.h`
/// declares every one of them (it declares the whole standard ABI,
/// implemented or not: `abi_compat.rs` checks that against MPICH).
#[test]
fn library_exports_what_it_implements_and_the_header_declares_it() {
    let lib = install().join("lib/libmpi_abi.so.1");
    let out = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&lib)
        .output()
        .expect("run nm");
    assert!(out.status.success());
    let nm = String::from_utf8_lossy(&out.stdout);
    let functions: Vec<&str> = nm
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace().rev();
            let (name, kind) = (f.next()?, f.next()?);
            (kind == "T").then_some(name)
        })
        .collect();
    let stray: Vec<&&str> = functions
        .iter()
        .filter(|f| !f.starts_with("MPI_") && !f.starts_with("PMPI_"))
        .collect();
    assert!(
        stray.is_empty(),
        "exported besides MPI functions: {stray:?}"
    );
    let exported: std::collections::BTreeSet<String> =
        functions.iter().map(|f| f.to_string()).collect();
    let implemented = implemented_functions();
    assert!(implemented.len() > 400, "{}", implemented.len());
    assert_eq!(
        exported, implemented,
        "the exports differ from the functions the source defines"
    );
    for f in exported.iter().filter(|f| f.starts_with("MPI_")) {
        assert!(exported.contains(&format!("P{f}")), "{f} without P{f}");
    }
    for f in exported.iter().filter(|f| f.starts_with("PMPI_")) {
        assert!(exported.contains(&f[1..]), "{f} without {}", &f[1..]);
    }
    let header =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("include/mpi.h"))
            .unwrap();
    let declared = declared_functions(&header);
    let undeclared: Vec<&String> = exported.difference(&declared).collect();
    assert!(
        undeclared.is_empty(),
        "exported, not in mpi.h: {undeclared:?}"
    );
    assert!(
        declared.len() > exported.len(),
        "mpi.h declares only what the library exports ({})",
        declared.len()
    );
}

/// Every program of the C suite compiles against `mpi.h` alone, with no
/// implicit declaration (`make check-header`).
#[test]
fn c_test_suite_compiles_against_the_header() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c");
    let out = Command::new("make")
        .arg("-s")
        .arg("-C")
        .arg(&dir)
        .arg("check-header")
        .output()
        .expect("run make");
    assert!(
        out.status.success(),
        "make check-header: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn mpicc_shows_its_command() {
    let out = Command::new(install().join("bin/mpicc"))
        .args(["-show", "-o", "x", "x.c"])
        .output()
        .unwrap();
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(
        s.contains("-I") && s.contains("-lmpi_abi") && s.contains("--gc-sections"),
        "{s}"
    );
}

#[test]
fn ring_in_c() {
    check("ring", &[1, 2, 5], "ring ok");
}

#[test]
fn point_to_point_in_c() {
    check("p2p", &[2, 3, 8], "p2p ok");
}

#[test]
fn datatypes_in_c() {
    check("datatypes", &[2, 3], "datatypes ok");
}

/// Builds the C test suite (`tests/c`) with our mpicc into `build`; the
/// programs, sorted.
fn build_suite(build: &Path) -> Vec<PathBuf> {
    let prefix = install();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c");
    let out = Command::new("make")
        .arg("-s")
        .arg("-C")
        .arg(&dir)
        .arg(format!("MPICC={}", prefix.join("bin/mpicc").display()))
        .arg(format!("BUILD={}", build.display()))
        .output()
        .expect("run make");
    assert!(
        out.status.success(),
        "building tests/c: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut programs: Vec<PathBuf> = std::fs::read_dir(build)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    programs.sort();
    assert!(programs.len() >= 10, "built only {programs:?}");
    programs
}

/// The C test suite (`tests/c`, one program per group of calls; see its
/// README): built with our mpicc through its Makefile, each program run
/// with 2, 3 and 8 ranks over sm and over tcp (and with 1 rank, those
/// that run on one).
#[test]
fn c_test_suite() {
    let build = std::env::temp_dir().join(format!("oxmpi-ctests-{}", std::process::id()));
    let programs = build_suite(&build);
    // The programs that also run on one rank (their header comments say so).
    const ONE_RANK: [&str; 17] = [
        "coll_v",
        "nbc",
        "coll_persistent",
        "neighbor",
        "ctxids",
        "intercomm",
        "topology",
        "comm_create",
        "env",
        "errhandlers",
        "attrs",
        "info",
        "sessions",
        "unsupported",
        "reduce_ops",
        "buffers",
        "coll_algos",
    ];
    let mut failures = Vec::new();
    for exe in &programs {
        let name = exe.file_name().unwrap().to_string_lossy().into_owned();
        let one: &[u32] = if ONE_RANK.contains(&name.as_str()) {
            &[1]
        } else {
            &[]
        };
        for &np in one.iter().chain(&[2, 3, 8]) {
            for btl in ["self,sm", "self,tcp"] {
                let (code, out, err) = run(exe, np, btl);
                let ok = code == 0 && out.contains(&format!("ok: {name}")) && err.trim().is_empty();
                if !ok {
                    failures.push(format!("{name} -n {np} {btl}: exit {code}\n{out}{err}"));
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&build);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The whole C test suite again on the PML cm over the ofi MTL
/// (`tcp;ofi_rxm`, with Debian's libfabric), at 3 ranks (odd; more than
/// the cores of a 2-core machine, so its waits sleep on the MTL's wait
/// object): the programs do not change, only the point-to-point engine
/// under them. (`crates/oxmpi/tests/cm.rs` runs the Rust suites at 2, 3
/// and 8.)
/// Where libfabric is not installed this says so and passes.
#[test]
fn c_test_suite_on_pml_cm() {
    let cm = [
        "--mca",
        "pml",
        "cm",
        "--mca",
        "mtl_ofi_provider_include",
        "tcp",
    ];
    let build = std::env::temp_dir().join(format!("oxmpi-ctests-cm-{}", std::process::id()));
    let programs = build_suite(&build);
    let (code, _, err) = run_with(&programs[0], &cm, 2, "self");
    if code != 0 && err.contains("libfabric is not available") {
        eprintln!("skipped: {}", err.trim());
        let _ = std::fs::remove_dir_all(&build);
        return;
    }
    let mut failures = Vec::new();
    for exe in &programs {
        let name = exe.file_name().unwrap().to_string_lossy().into_owned();
        let np = 3;
        let (code, out, err) = run_with(exe, &cm, np, "self");
        let ok = code == 0 && out.contains(&format!("ok: {name}")) && err.trim().is_empty();
        if !ok {
            failures.push(format!("{name} -n {np} pml cm: exit {code}\n{out}{err}"));
        }
    }
    let _ = std::fs::remove_dir_all(&build);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Every algorithm of the tuned collectives (`coll_tuned_*_algorithm`
/// forced, all small-message ones, then all large-message ones) through
/// the collective programs of the C suite, at 3, 5 and 8 ranks (odd, and
/// not powers of two) over sm: `coll_algos` checks each against a serial
/// reference, non-commutative operations in rank order included.
#[test]
fn c_collectives_with_every_algorithm() {
    const SMALL: [(&str, &str); 6] = [
        ("bcast", "binomial"),
        ("reduce", "binomial"),
        ("allreduce", "recursive_doubling"),
        ("allgather", "bruck"),
        ("alltoall", "linear"),
        ("reduce_scatter", "recursive_doubling"),
    ];
    const LARGE: [(&str, &str); 6] = [
        ("bcast", "scatter_allgather"),
        ("reduce", "reduce_scatter_gather"),
        ("allreduce", "ring"),
        ("allgather", "ring"),
        ("alltoall", "pairwise"),
        ("reduce_scatter", "ring"),
    ];
    let programs = [
        "coll_algos",
        "collectives",
        "coll_v",
        "nbc",
        "coll_persistent",
        "reduce_ops",
    ]
    .map(|p| (p, compile_suite(p)));
    let mut failures = Vec::new();
    for set in [SMALL, LARGE] {
        let mut args: Vec<String> = Vec::new();
        for (coll, algo) in set {
            args.extend([
                "--mca".into(),
                format!("coll_tuned_{coll}_algorithm"),
                algo.into(),
            ]);
        }
        let extra: Vec<&str> = args.iter().map(String::as_str).collect();
        for (name, exe) in &programs {
            let nps: &[u32] = if *name == "coll_algos" {
                &[3, 5, 8]
            } else {
                &[3, 5]
            };
            for &np in nps {
                let (code, out, err) = run_with(exe, &extra, np, "self,sm");
                let ok = code == 0 && out.contains(&format!("ok: {name}")) && err.trim().is_empty();
                if !ok {
                    failures.push(format!(
                        "{name} -n {np} {}: exit {code}\n{out}{err}",
                        set[2].1
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn comms_in_c() {
    check("comms", &[2, 3, 8], "comms ok");
}

/// `MPI_ERRORS_ARE_FATAL` (the default): an invalid argument aborts the
/// job with a message naming the call and the cause, and nothing hangs.
#[test]
fn errors_are_fatal_by_default() {
    let exe = compile("fatal");
    for btl in ["self,sm", "self,tcp"] {
        let (code, out, err) = run(&exe, 3, btl);
        assert_ne!(code, 0, "{btl}: {out}{err}");
        assert!(!out.contains("unreachable"), "{btl}: {out}");
        assert!(
            err.contains("MPI_Send") && err.contains("rank 8 of a communicator of 3"),
            "{btl}: {err}"
        );
    }
}

/// A rank killed by a signal while the others wait for it: they abort
/// (MPI_ERRORS_ARE_FATAL), often before the launcher has noticed the death,
/// yet the launcher names the killed rank and exits with its status, in
/// every run.
#[test]
fn a_killed_rank_is_named_not_the_survivor_that_noticed() {
    let exe = compile("killed_peer");
    for btl in ["self,tcp", "self,sm"] {
        for _ in 0..6 {
            let (code, out, err) = run(&exe, 3, btl);
            assert!(!out.contains("unreachable"), "{btl}: {out}");
            assert_eq!(code, 128 + 9, "{btl}: {err}");
            assert!(
                err.contains("rank 2 (pid") && err.contains("signal 9 (SIGKILL)"),
                "{btl}: {err}"
            );
        }
    }
}

/// A rank killed while the others wait in collectives (`--enable-recovery`,
/// the survivors under `MPI_ERRORS_RETURN`): on every survivor an
/// `MPI_Iallreduce` then `MPI_Wait`, an `MPI_Allgatherv` and an
/// `MPI_Ibarrier` then `MPI_Wait` each fail with `MPI_ERR_PROC_FAILED`
/// (75), never hang, even where the survivor's own peers in the algorithm
/// are alive (the failure reaches it through them).
#[test]
fn collectives_fail_on_every_survivor_when_a_member_dies() {
    let exe = compile("coll_killed");
    for btl in ["self,sm", "self,tcp"] {
        for np in [3, 4, 8] {
            let (code, out, err) = run_with(&exe, &["--enable-recovery"], np, btl);
            assert_eq!(code, 128 + 9, "{btl} -n {np}: {out}{err}");
            for call in ["MPI_Iallreduce", "MPI_Allgatherv", "MPI_Ibarrier"] {
                let lines: Vec<&str> = out
                    .lines()
                    .filter(|l| l.starts_with(&format!("coll {call} ")))
                    .collect();
                assert_eq!(lines.len(), np as usize - 1, "{btl} -n {np}: {out}{err}");
                for l in lines {
                    assert!(l.ends_with(" class 75"), "{btl} -n {np}: {l}");
                }
            }
        }
    }
}

/// A request that fails because its peer died (`--enable-recovery`, the
/// survivors under `MPI_ERRORS_RETURN`): `MPI_Error_string` of the code
/// `MPI_Wait` returns, and of the code in `MPI_Waitall`'s status, names the
/// call and the reason the PML recorded, not the class alone.
#[test]
fn a_failed_requests_code_names_its_reason() {
    let exe = compile("failed_reason");
    for btl in ["self,sm", "self,tcp"] {
        let (code, out, err) = run_with(&exe, &["--enable-recovery"], 3, btl);
        assert_eq!(code, 128 + 9, "{btl}: {out}{err}");
        let lines: Vec<&str> = out.lines().filter(|l| l.starts_with("reason ")).collect();
        assert_eq!(lines.len(), 4, "{btl}: {out}{err}");
        for call in ["MPI_Wait ", "MPI_Waitall "] {
            let mine: Vec<&&str> = lines
                .iter()
                .filter(|l| l.starts_with(&format!("reason {call}")))
                .collect();
            assert_eq!(mine.len(), 2, "{btl}: {out}");
            for l in mine {
                let call = call.trim();
                assert!(
                    l.contains(&format!("): {call}: ")) && l.contains("rank 2 is gone"),
                    "{btl}: {l}"
                );
            }
        }
    }
}
