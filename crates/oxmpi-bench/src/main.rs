//! `oxmpi-bench`: oxmpi's benchmark suite, side by side with Open MPI and
//! MPICH.
//!
//! - `oxmpi-bench compare [--quick]`: everything, in one command (see
//!   [`compare`]); the report lands in `target/bench/report/`.
//! - `oxmpi-bench rank TEST ...`: the Rust suite itself, as an MPI program
//!   (`oxmpirun -n 2 oxmpi-bench rank latency -s 8,4096`).
//! - `oxmpi-bench limits`: the machine's physical limits alone.
//! - `oxmpi-bench coll`: the collective latency tests (OSU's method, at
//!   2, 4 and 8 ranks) side by side (see [`coll`]); `target/bench/coll/`.
//!
//! The tests and their method are in `SUITE.md`; the C suite in
//! `c/oxbench.c` implements the same ones.
#![forbid(unsafe_code)]

mod coll;
mod compare;
mod limits;
mod paired;
mod plot;
mod report;
mod suite;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "oxmpi-bench",
    version,
    about = "oxmpi's benchmark suite, side by side with Open MPI and MPICH"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

fn parse_sizes(s: &str) -> Result<Vec<usize>, String> {
    s.split(',')
        .filter(|p| !p.is_empty())
        .map(|p| {
            p.trim()
                .parse::<usize>()
                .map_err(|_| format!("{p:?} is not a size in bytes"))
        })
        .collect()
}

#[derive(Subcommand)]
enum Cmd {
    /// Run every test on every implementation, interleaved, and write the
    /// report (Markdown, CSV, SVG and PNG plots).
    Compare {
        /// Fewer sizes and shorter timed loops (about 10 minutes).
        #[arg(long)]
        quick: bool,
        /// Two sizes per test, one repetition: checks that everything runs.
        #[arg(long)]
        smoke: bool,
        /// Repetitions of every point (default 3; 1 with --smoke).
        #[arg(long)]
        reps: Option<usize>,
        /// Implementations: oxmpi (Rust suite), oxmpi-c (C suite on oxmpi),
        /// ompi5 and mpich5 (from PyPI), ompi4 and mpich4 (Debian's).
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "oxmpi,oxmpi-c,ompi5,mpich5"
        )]
        impls: Vec<String>,
        /// Also run Debian's Open MPI 4 and MPICH 4 where installed.
        #[arg(long)]
        system: bool,
        /// Transports: shm (each implementation's default on-node path), tcp (loopback).
        #[arg(long, value_delimiter = ',', default_value = "shm,tcp")]
        transports: Vec<String>,
        /// Tests (the suite's names, and msgrate_pairs).
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "latency,latency_anysrc,bw,bibw,msgrate,msgrate_pairs,mt_latency,vec_latency,vec_bw"
        )]
        tests: Vec<String>,
        /// Pairs of ranks of msgrate_pairs.
        #[arg(long, default_value_t = 2)]
        pairs: usize,
        /// Threads per rank of mt_latency.
        #[arg(long, default_value_t = 2)]
        threads: usize,
        /// Spread above which a point is marked noisy (0.1 = 10%).
        #[arg(long, default_value_t = 0.1)]
        noise: f64,
        /// Report directory (default ROOT/target/bench/report).
        #[arg(long)]
        out: Option<PathBuf>,
        /// The oxmpi checkout (default: the one this binary was built from).
        #[arg(long)]
        root: Option<PathBuf>,
        /// Seconds before one run is killed and recorded as failed.
        #[arg(long, default_value_t = 300)]
        timeout: u64,
    },
    /// The Rust suite as an MPI program: `oxmpirun -n 2 oxmpi-bench rank TEST`.
    Rank {
        /// latency, latency_anysrc, bw, bibw, msgrate, mt_latency, vec_latency or vec_bw.
        test: String,
        /// Comma-separated sizes in bytes.
        #[arg(short, long)]
        sizes: Option<String>,
        /// Shorter timed loops.
        #[arg(short, long)]
        quick: bool,
        /// Threads per rank (mt_latency).
        #[arg(short, long, default_value_t = 2)]
        threads: usize,
    },
    /// The collective latency tests (barrier ... reduce_scatter_block and
    /// their non-blocking forms with overlap) on every C implementation,
    /// interleaved, at each rank count; writes coll.md and coll.csv.
    Coll {
        /// Shorter timed loops.
        #[arg(long)]
        quick: bool,
        /// Repetitions of every run.
        #[arg(long, default_value_t = 3)]
        reps: usize,
        /// Implementations (C suites): oxmpi-c, ompi5, mpich5, ompi4, mpich4.
        #[arg(long, value_delimiter = ',', default_value = "oxmpi-c,ompi5,mpich5")]
        impls: Vec<String>,
        /// Rank counts.
        #[arg(long, value_delimiter = ',', default_value = "2,4,8")]
        ranks: Vec<usize>,
        /// Sizes in bytes.
        #[arg(short, long, default_value = "8,4096,65536,1048576")]
        sizes: String,
        /// Tests (default: all fourteen).
        #[arg(long, value_delimiter = ',')]
        tests: Vec<String>,
        /// `NAME=VALUE`: an MCA parameter for oxmpi's runs only (repeatable).
        #[arg(long = "ox-mca")]
        ox_mca: Vec<String>,
        /// Report directory (default ROOT/target/bench/coll).
        #[arg(long)]
        out: Option<PathBuf>,
        /// The oxmpi checkout (default: the one this binary was built from).
        #[arg(long)]
        root: Option<PathBuf>,
        /// Seconds before one run is killed and recorded as failed.
        #[arg(long, default_value_t = 900)]
        timeout: u64,
    },
    /// Measure the machine's physical limits only.
    Limits {
        /// Shorter loops.
        #[arg(short, long)]
        quick: bool,
        /// Bandwidth sizes.
        #[arg(short, long, default_value = "65536,1048576,4194304")]
        sizes: String,
    },
    /// oxmpi against one anchor inside one machine state: waits for the
    /// band, runs oxmpi, the anchor, oxmpi (then the other way round), keeps
    /// a triple only if the state held, prints each ratio and their
    /// geometric mean with a 95% interval (docs/performance.md).
    Paired {
        /// The state band: low (below 35 ns), usual (35 to 150 ns) or slow
        /// (above 150 ns).
        #[arg(long, default_value = "slow")]
        state: String,
        /// shm or tcp.
        #[arg(long, default_value = "tcp")]
        transport: String,
        /// A test of the suite.
        #[arg(long, default_value = "bw")]
        test: String,
        /// Comma-separated sizes (default: the test's own).
        #[arg(short, long)]
        sizes: Option<String>,
        /// The anchor: ompi5, mpich5, ompi4 or mpich4.
        #[arg(long, default_value = "mpich5")]
        anchor: String,
        /// oxmpi's suite: oxmpi-c (the C suite) or oxmpi (the Rust suite).
        #[arg(long, default_value = "oxmpi-c")]
        oxmpi: String,
        /// How long to measure.
        #[arg(long, default_value_t = 10.0)]
        minutes: f64,
        /// The oxmpi checkout (default: the one this binary was built from).
        #[arg(long)]
        root: Option<PathBuf>,
        /// Seconds before one run is killed (an error).
        #[arg(long, default_value_t = 300)]
        timeout: u64,
    },
    /// Probe the machine's state as `compare` does before every run: half
    /// a cache-line round trip between cores 0 and 1, printed as
    /// `cacheline,64,US,us,BAND` (see docs/performance.md).
    State,
    /// The far side of the process_vm_readv probe (internal).
    #[command(hide = true)]
    LimitsPeer {
        /// Bytes to expose.
        size: usize,
    },
}

fn default_root() -> PathBuf {
    let built = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    if built.join("scripts/build-capi.sh").exists() {
        built.canonicalize().unwrap_or(built)
    } else {
        std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."))
    }
}

fn main() {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Rank {
            test,
            sizes,
            quick,
            threads,
        } => {
            let sizes = match sizes.as_deref().map(parse_sizes) {
                None => suite::default_sizes(&test),
                Some(Ok(s)) => s,
                Some(Err(e)) => {
                    eprintln!("oxmpi-bench: {e}");
                    std::process::exit(1);
                }
            };
            suite::run(&suite::Options {
                test,
                sizes,
                quick,
                threads,
            });
        }
        Cmd::Limits { quick, sizes } => {
            let sizes = parse_sizes(&sizes).unwrap_or_else(|e| {
                eprintln!("oxmpi-bench: {e}");
                std::process::exit(2)
            });
            for l in limits::measure(&sizes, quick) {
                println!("{},{},{:.4},{}", l.test, l.size, l.value, l.unit);
            }
        }
        Cmd::State => {
            let us = compare::probe_state();
            println!("cacheline,64,{us:.4},us,{}", report::state_band(us));
        }
        Cmd::Paired {
            state,
            transport,
            test,
            sizes,
            anchor,
            oxmpi,
            minutes,
            root,
            timeout,
        } => {
            let fail = |e: String| -> ! {
                eprintln!("oxmpi-bench: {e}");
                std::process::exit(2)
            };
            let band = match state.as_str() {
                "low" => report::STATE_BANDS[0],
                "usual" => report::STATE_BANDS[1],
                "slow" => report::STATE_BANDS[2],
                o => fail(format!("unknown state {o:?} (low, usual or slow)")),
            };
            if transport != "shm" && transport != "tcp" {
                fail(format!("unknown transport {transport:?} (shm or tcp)"));
            }
            if !oxmpi.starts_with("oxmpi") || anchor.starts_with("oxmpi") {
                fail(format!(
                    "--oxmpi takes oxmpi or oxmpi-c, --anchor another implementation (got {oxmpi:?}, {anchor:?})"
                ));
            }
            let sizes = sizes.map(|s| parse_sizes(&s).unwrap_or_else(|e| fail(e)));
            let root = root.unwrap_or_else(default_root);
            let p = paired::Paired {
                cfg: compare::Config {
                    quick: false,
                    smoke: false,
                    reps: 1,
                    impls: vec![oxmpi, anchor],
                    transports: vec![transport],
                    tests: vec![test],
                    pairs: 1,
                    threads: 2,
                    noise: 0.1,
                    out: root.join("target/bench/paired"),
                    root,
                    timeout,
                    command: std::env::args().collect::<Vec<_>>().join(" "),
                },
                band,
                sizes,
                duration: std::time::Duration::from_secs_f64(60.0 * minutes.max(0.0)),
            };
            if let Err(e) = paired::paired(&p) {
                fail(e);
            }
        }
        Cmd::LimitsPeer { size } => limits::cma_peer(size),
        Cmd::Coll {
            quick,
            reps,
            impls,
            ranks,
            sizes,
            tests,
            ox_mca,
            out,
            root,
            timeout,
        } => {
            let fail = |e: String| -> ! {
                eprintln!("oxmpi-bench: {e}");
                std::process::exit(2)
            };
            let sizes = parse_sizes(&sizes).unwrap_or_else(|e| fail(e));
            let ox_mca = ox_mca
                .iter()
                .map(|kv| match kv.split_once('=') {
                    Some((k, v)) => (k.to_string(), v.to_string()),
                    None => fail(format!("--ox-mca takes NAME=VALUE, got {kv:?}")),
                })
                .collect();
            let root = root.unwrap_or_else(default_root);
            let cfg = coll::Config {
                quick,
                reps: reps.max(1),
                impls,
                ranks,
                sizes,
                tests: if tests.is_empty() {
                    coll::TESTS.iter().map(|t| t.to_string()).collect()
                } else {
                    tests
                },
                ox_mca,
                out: out.unwrap_or_else(|| root.join("target/bench/coll")),
                root,
                timeout,
                command: std::env::args().collect::<Vec<_>>().join(" "),
            };
            match coll::run(&cfg) {
                Ok(o) => {
                    println!(
                        "{}",
                        std::fs::read_to_string(cfg.out.join("coll.md")).unwrap_or_default()
                    );
                    eprintln!(
                        "oxmpi-bench: report in {} ({} failed runs)",
                        cfg.out.display(),
                        o.failures.len()
                    );
                    if !o.failures.is_empty() || !o.missing.is_empty() {
                        std::process::exit(1);
                    }
                }
                Err(e) => fail(e),
            }
        }
        Cmd::Compare {
            quick,
            smoke,
            reps,
            mut impls,
            system,
            transports,
            tests,
            pairs,
            threads,
            noise,
            out,
            root,
            timeout,
        } => {
            if system {
                for k in ["ompi4", "mpich4"] {
                    if !impls.iter().any(|i| i == k) {
                        impls.push(k.into());
                    }
                }
            }
            if let Some(t) = transports.iter().find(|t| *t != "shm" && *t != "tcp") {
                eprintln!("oxmpi-bench: unknown transport {t:?} (shm or tcp)");
                std::process::exit(2);
            }
            let root = root.unwrap_or_else(default_root);
            let cfg = compare::Config {
                quick,
                smoke,
                reps: reps.unwrap_or(if smoke { 1 } else { 3 }).max(1),
                impls,
                transports,
                tests,
                pairs: pairs.max(1),
                threads: threads.max(1),
                noise,
                out: out.unwrap_or_else(|| root.join("target/bench/report")),
                root,
                timeout,
                command: std::env::args().collect::<Vec<_>>().join(" "),
            };
            match compare::compare(&cfg) {
                Ok(o) => {
                    println!(
                        "{}",
                        std::fs::read_to_string(cfg.out.join("report.md")).unwrap_or_default()
                    );
                    eprintln!(
                        "oxmpi-bench: report in {} ({} failed runs)",
                        cfg.out.display(),
                        o.failures.len()
                    );
                    if !o.failures.is_empty() || !o.missing.is_empty() {
                        std::process::exit(1);
                    }
                }
                Err(e) => {
                    eprintln!("oxmpi-bench: {e}");
                    std::process::exit(1);
                }
            }
        }
    }
}
