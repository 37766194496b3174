//! `oxmpi-bench coll`: the collective latency tests (`c/oxcoll.c`, OSU's
//! method: see `SUITE.md`, "Collectives") on every C implementation, the
//! implementations interleaved in each round (A B C, B C A, ...), at each
//! rank count; writes `coll.md` (one table per test, and oxmpi against the
//! best of the others at a glance) and `coll.csv` (every value).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use crate::compare::{self, Impl};
use crate::report::{fmt_size, median};

/// The C program of the collective tests.
const C_COLL: &str = include_str!("../c/oxcoll.c");

/// Every test of `oxcoll`, in its order.
pub const TESTS: [&str; 14] = [
    "barrier",
    "bcast",
    "reduce",
    "allreduce",
    "allgather",
    "alltoall",
    "reduce_scatter_block",
    "ibarrier",
    "ibcast",
    "ireduce",
    "iallreduce",
    "iallgather",
    "ialltoall",
    "ireduce_scatter_block",
];

/// How `coll` runs.
#[derive(Clone, Debug)]
pub struct Config {
    /// Shorter timed loops (`oxcoll -q`).
    pub quick: bool,
    /// Repetitions of every run.
    pub reps: usize,
    /// Implementation keys (C suites only: `oxmpi-c`, `ompi5`, `mpich5`, ...).
    pub impls: Vec<String>,
    /// Rank counts.
    pub ranks: Vec<usize>,
    /// Message sizes in bytes.
    pub sizes: Vec<usize>,
    /// Tests (names of [`TESTS`]).
    pub tests: Vec<String>,
    /// `--mca NAME VALUE` pairs for oxmpi's runs only.
    pub ox_mca: Vec<(String, String)>,
    /// Where `coll.md` and `coll.csv` go.
    pub out: PathBuf,
    /// The oxmpi checkout.
    pub root: PathBuf,
    /// Seconds before one run is killed and recorded as failed.
    pub timeout: u64,
    /// The command line, for the report.
    pub command: String,
}

impl Config {
    /// The smallest run that checks everything works: 2 ranks, 8 bytes,
    /// allreduce and iallreduce, quick loops, one repetition (`compare
    /// --smoke` runs it).
    pub fn smoke(root: PathBuf, out: PathBuf, impls: Vec<String>, timeout: u64) -> Config {
        Config {
            quick: true,
            reps: 1,
            impls,
            ranks: vec![2],
            sizes: vec![8],
            tests: vec!["allreduce".into(), "iallreduce".into()],
            ox_mca: Vec::new(),
            out,
            root,
            timeout,
            command: "oxmpi-bench compare --smoke (its collective part)".into(),
        }
    }
}

/// One value: `(test, ranks, size)` of an implementation in a repetition.
#[derive(Clone, Debug)]
pub struct Value {
    /// Implementation key.
    pub imp: String,
    /// Test (`TEST` or `TEST_overlap`).
    pub test: String,
    /// Ranks.
    pub ranks: usize,
    /// Bytes.
    pub size: usize,
    /// Repetition (from 1).
    pub rep: usize,
    /// The figure.
    pub value: f64,
    /// `us` or `%`.
    pub unit: String,
}

/// What one `coll` run measured.
pub struct Outcome {
    /// Implementations that ran.
    pub impls: Vec<Impl>,
    /// Ones left out, with the reason.
    pub missing: compare::Missing,
    /// Every value.
    pub values: Vec<Value>,
    /// Failed runs: implementation, ranks, repetition, why.
    pub failures: Vec<(String, usize, usize, String)>,
}

/// The tests, rank counts and sizes are ones `oxcoll` runs.
fn check(cfg: &Config) -> Result<(), String> {
    if let Some(t) = cfg.tests.iter().find(|t| !TESTS.contains(&t.as_str())) {
        return Err(format!("unknown test {t:?} (one of {})", TESTS.join(" ")));
    }
    if cfg.ranks.contains(&0) || cfg.sizes.is_empty() {
        return Err("rank counts must be at least 1, and one size is needed".into());
    }
    Ok(())
}

/// Builds and installs what is needed, compiles `oxcoll.c` with every C
/// implementation's `mpicc`, runs everything and writes the report.
pub fn run(cfg: &Config) -> Result<Outcome, String> {
    check(cfg)?;
    let pcfg = compare::Config {
        quick: cfg.quick,
        smoke: false,
        reps: 1,
        impls: cfg.impls.clone(),
        transports: vec!["shm".into()],
        tests: Vec::new(),
        pairs: 1,
        threads: 1,
        noise: 0.1,
        out: cfg.out.clone(),
        root: cfg.root.clone(),
        timeout: cfg.timeout,
        command: cfg.command.clone(),
    };
    let (ready, missing) = compare::prepare(&pcfg)?;
    run_prepared(cfg, ready, missing)
}

/// [`run`] on implementations `compare::prepare` has made ready (their C
/// suite built), left out ones in `missing`.
pub fn run_prepared(
    cfg: &Config,
    ready: Vec<Impl>,
    mut missing: compare::Missing,
) -> Result<Outcome, String> {
    check(cfg)?;
    let t0 = Instant::now();
    let bench = cfg.root.join("target/bench");
    let src = bench.join("oxcoll.c");
    std::fs::write(&src, C_COLL).map_err(|e| format!("{}: {e}", src.display()))?;
    let mut impls = Vec::new();
    let mut exes = Vec::new();
    for imp in ready {
        let Some(cc) = imp.mpicc.clone() else {
            missing.push((
                imp.key.clone(),
                "the Rust suite: the Rust API has no collectives (use oxmpi-c)".into(),
            ));
            continue;
        };
        let exe = bench.join(format!("build/{}/oxcoll", imp.key));
        match compare::compile(&cc, &src, &exe) {
            Ok(()) => {
                impls.push(imp);
                exes.push(exe);
            }
            Err(e) => missing.push((imp.key.clone(), e)),
        }
    }
    if impls.is_empty() {
        return Err("no implementation could be prepared".into());
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut values = Vec::new();
    let mut failures = Vec::new();
    let runs = cfg.reps * cfg.ranks.len() * impls.len();
    let mut done = 0;
    for rep in 1..=cfg.reps {
        for &ranks in &cfg.ranks {
            let first = (rep - 1) % impls.len();
            let order: Vec<usize> = (first..impls.len()).chain(0..first).collect();
            for i in order {
                let imp = &impls[i];
                done += 1;
                eprintln!(
                    "[{done}/{runs}] rep {rep}/{}: {} ranks {}",
                    cfg.reps, ranks, imp.key
                );
                let mut cmd = compare::launch(imp, ranks, ranks <= cores, "shm");
                if imp.key.starts_with("oxmpi") {
                    for (k, v) in &cfg.ox_mca {
                        cmd.args(["--mca", k, v]);
                    }
                }
                cmd.arg(&exes[i]);
                cmd.arg("-t").arg(cfg.tests.join(","));
                let sizes: Vec<String> = cfg.sizes.iter().map(|s| s.to_string()).collect();
                cmd.arg("-s").arg(sizes.join(","));
                if cfg.quick {
                    cmd.arg("-q");
                }
                match compare::run_lines(cmd, cfg.timeout) {
                    Ok(lines) => {
                        for (test, size, value, unit) in lines {
                            values.push(Value {
                                imp: imp.key.clone(),
                                test,
                                ranks,
                                size,
                                rep,
                                value,
                                unit,
                            });
                        }
                    }
                    Err(why) => {
                        eprintln!(
                            "oxmpi-bench: coll {} at {ranks} ranks, rep {rep} failed: {why}",
                            imp.key
                        );
                        failures.push((imp.key.clone(), ranks, rep, why));
                    }
                }
            }
        }
    }
    let o = Outcome {
        impls,
        missing,
        values,
        failures,
    };
    write(cfg, &o, t0.elapsed().as_secs_f64())?;
    Ok(o)
}

type Key = (usize, String, usize, usize);

/// `(test order, test, ranks, size) -> impl -> median`.
fn medians(values: &[Value]) -> BTreeMap<Key, BTreeMap<String, (f64, usize)>> {
    let mut raw: BTreeMap<Key, BTreeMap<String, Vec<f64>>> = BTreeMap::new();
    for v in values {
        let base = v.test.trim_end_matches("_overlap");
        let order = TESTS.iter().position(|t| *t == base).unwrap_or(TESTS.len());
        raw.entry((order, v.test.clone(), v.ranks, v.size))
            .or_default()
            .entry(v.imp.clone())
            .or_default()
            .push(v.value);
    }
    raw.into_iter()
        .map(|(k, m)| {
            let m = m
                .into_iter()
                .map(|(imp, mut v)| {
                    let n = v.len();
                    (imp, (median(&mut v), n))
                })
                .collect();
            (k, m)
        })
        .collect()
}

fn us(v: f64) -> String {
    if v < 10.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.0}")
    }
}

/// The Markdown report.
pub fn markdown(cfg: &Config, o: &Outcome, secs: f64) -> String {
    let mut md = String::new();
    let keys: Vec<&str> = o.impls.iter().map(|i| i.key.as_str()).collect();
    let mine: Vec<&str> = keys
        .iter()
        .copied()
        .filter(|k| k.starts_with("oxmpi"))
        .collect();
    let others: Vec<&str> = keys
        .iter()
        .copied()
        .filter(|k| !k.starts_with("oxmpi"))
        .collect();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let _ = writeln!(md, "# oxmpi-bench coll\n");
    let _ = writeln!(md, "Command: `{}`  ", cfg.command);
    let _ = writeln!(
        md,
        "{cores} cores; took {secs:.0} s; {} repetition(s), the implementations interleaved in each \
         round. Rank counts above {cores} share the cores (unpinned); others are pinned one per core.\n",
        cfg.reps
    );
    for i in &o.impls {
        let _ = writeln!(md, "- `{}`: {}", i.key, i.about);
    }
    for (k, why) in &o.missing {
        let _ = writeln!(md, "- `{k}`: **not run**: {why}");
    }
    let _ = writeln!(
        md,
        "\nLatency in us (lower is better): each rank's mean time per call, averaged over the \
         ranks, median over the repetitions. Sizes: the whole vector of bcast, reduce and \
         allreduce, the block per rank of allgather and alltoall, the whole vector of \
         reduce_scatter_block (divided among the ranks), in MPI_FLOAT (sum). Non-blocking \
         forms: the latency of start + wait, and `ovl` the overlap % of a computation as long \
         as that latency (OSU: max(0, 100 (1 - (t_total - t_compute) / t_pure)), no tests \
         during the computation). `vs best`: the best other latency / oxmpi's (above 1: \
         oxmpi is faster).\n"
    );
    let med = medians(&o.values);
    // oxmpi against the best of the others, at a glance.
    if !mine.is_empty() && !others.is_empty() {
        let _ = writeln!(md, "## {} vs the best of the others\n", mine[0]);
        let mut head = "| test | ranks |".to_string();
        let mut line = "|---|---:|".to_string();
        for s in &cfg.sizes {
            let _ = write!(head, " {} |", fmt_size(*s));
            line.push_str("---:|");
        }
        let _ = writeln!(md, "{head}\n{line}");
        let mut rows: BTreeMap<(usize, String, usize), BTreeMap<usize, String>> = BTreeMap::new();
        for ((ord, test, ranks, size), m) in &med {
            if test.ends_with("_overlap") {
                continue;
            }
            let best = others
                .iter()
                .filter_map(|k| m.get(*k))
                .map(|v| v.0)
                .fold(f64::NAN, f64::min);
            let cell = match m.get(mine[0]) {
                Some((v, _)) if best.is_finite() && *v > 0.0 => format!("{:.2}x", best / v),
                _ => "-".into(),
            };
            rows.entry((*ord, test.clone(), *ranks))
                .or_default()
                .insert(*size, cell);
        }
        for ((_, test, ranks), cells) in rows {
            let mut row = format!("| {test} | {ranks} |");
            for s in &cfg.sizes {
                let c = cells
                    .get(s)
                    .or_else(|| cells.values().next().filter(|_| test.ends_with("barrier")));
                let _ = write!(row, " {} |", c.map_or("-", |c| c.as_str()));
            }
            let _ = writeln!(md, "{row}");
        }
        let _ = writeln!(md);
    }
    let mut last = String::new();
    for ((_, test, ranks, size), m) in &med {
        if test.ends_with("_overlap") {
            continue;
        }
        let nb = test.starts_with('i');
        if *test != last {
            if !last.is_empty() {
                let _ = writeln!(md);
            }
            last = test.clone();
            let _ = writeln!(md, "## {test}\n");
            let mut head = "| ranks | size |".to_string();
            let mut line = "|---:|---:|".to_string();
            for k in &keys {
                let _ = write!(head, " {k} |");
                line.push_str("---:|");
            }
            for k in &mine {
                let _ = write!(head, " {k} vs best |");
                line.push_str("---:|");
            }
            let _ = writeln!(md, "{head}\n{line}");
        }
        let ovl = med
            .iter()
            .find(|((_, t, r, s), _)| {
                t.strip_suffix("_overlap") == Some(test) && r == ranks && s == size
            })
            .map(|(_, m)| m);
        let mut row = format!(
            "| {ranks} | {} |",
            if test.ends_with("barrier") {
                "-".into()
            } else {
                fmt_size(*size)
            }
        );
        for k in &keys {
            match m.get(*k) {
                Some((v, _)) => {
                    let o = ovl
                        .and_then(|o| o.get(*k))
                        .filter(|_| nb)
                        .map_or(String::new(), |(p, _)| format!(" (ovl {p:.0}%)"));
                    let _ = write!(row, " {}{o} |", us(*v));
                }
                None => row.push_str(" failed |"),
            }
        }
        let best = others
            .iter()
            .filter_map(|k| m.get(*k))
            .map(|v| v.0)
            .fold(f64::NAN, f64::min);
        for k in &mine {
            match m.get(*k) {
                Some((v, _)) if best.is_finite() && *v > 0.0 => {
                    let _ = write!(row, " {:.2}x |", best / v);
                }
                _ => row.push_str(" - |"),
            }
        }
        let _ = writeln!(md, "{row}");
    }
    let _ = writeln!(md);
    if !o.failures.is_empty() {
        let _ = writeln!(md, "## Failed runs\n");
        for (k, r, rep, why) in &o.failures {
            let _ = writeln!(md, "- `{k}` at {r} ranks (repetition {rep}): {why}");
        }
    }
    md
}

fn write(cfg: &Config, o: &Outcome, secs: f64) -> Result<(), String> {
    std::fs::create_dir_all(&cfg.out).map_err(|e| format!("{}: {e}", cfg.out.display()))?;
    let md = markdown(cfg, o, secs);
    let p = cfg.out.join("coll.md");
    std::fs::write(&p, md).map_err(|e| format!("{}: {e}", p.display()))?;
    let mut csv = "impl,test,ranks,size,rep,value,unit\n".to_string();
    for v in &o.values {
        let _ = writeln!(
            csv,
            "{},{},{},{},{},{},{}",
            v.imp, v.test, v.ranks, v.size, v.rep, v.value, v.unit
        );
    }
    let p = cfg.out.join("coll.csv");
    std::fs::write(&p, csv).map_err(|e| format!("{}: {e}", p.display()))
}
