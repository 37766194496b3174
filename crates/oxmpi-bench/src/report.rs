//! Medians, spread and ratios; the Markdown table, the CSV files and the
//! plots of one comparison.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::compare::{Config, Outcome};
use crate::limits::Limit;

/// One value printed by one run.
#[derive(Clone, Debug)]
pub struct Sample {
    /// Implementation key.
    pub imp: String,
    /// `shm` or `tcp`.
    pub transport: String,
    /// Test label.
    pub test: String,
    /// Message size in bytes.
    pub size: usize,
    /// Repetition (from 1).
    pub rep: usize,
    /// The figure.
    pub value: f64,
    /// `us`, `MB/s` or `msg/s`.
    pub unit: String,
    /// The machine's state just before the run: half the round trip of a
    /// cache line between cores 0 and 1, in us (NaN when not probed).
    pub cacheline_us: f64,
}

/// Where a run's cache-line half round trip (`Sample::cacheline_us`) puts
/// the machine. On the 2-core virtual machines this was written on the
/// round trip is about 100 ns (usual), about 50 ns (both virtual CPUs seem to
/// share a core: less compute) or about 500 ns (slow: every line that moves
/// between the cores costs five times more).
pub fn state_band(cacheline_us: f64) -> &'static str {
    if cacheline_us.is_nan() {
        "not probed"
    } else if cacheline_us < 0.035 {
        "below 35 ns"
    } else if cacheline_us <= 0.15 {
        "35 to 150 ns"
    } else {
        "above 150 ns"
    }
}

/// The bands [`state_band`] names, in order.
pub const STATE_BANDS: [&str; 4] = ["below 35 ns", "35 to 150 ns", "above 150 ns", "not probed"];

/// The repetitions of one point summarized.
#[derive(Clone, Debug)]
pub struct Stat {
    /// Median.
    pub median: f64,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
    /// Repetitions.
    pub n: usize,
    /// Unit.
    pub unit: String,
}

impl Stat {
    /// `(max - min) / median`.
    pub fn spread(&self) -> f64 {
        if self.median > 0.0 {
            (self.max - self.min) / self.median
        } else {
            0.0
        }
    }
}

/// Whether a smaller value is better (latencies).
pub fn lower_is_better(unit: &str) -> bool {
    unit == "us"
}

/// The median of `v` (sorted in place).
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// `(transport, test, size) -> impl -> Stat`.
pub type Table = BTreeMap<(String, String, usize), BTreeMap<String, Stat>>;

/// Groups the samples by point and implementation.
pub fn summarize(samples: &[Sample]) -> Table {
    type Values = BTreeMap<String, (Vec<f64>, String)>;
    let mut raw: BTreeMap<(String, String, usize), Values> = BTreeMap::new();
    for s in samples {
        raw.entry((s.transport.clone(), s.test.clone(), s.size))
            .or_default()
            .entry(s.imp.clone())
            .or_insert_with(|| (Vec::new(), s.unit.clone()))
            .0
            .push(s.value);
    }
    raw.into_iter()
        .map(|(k, m)| {
            let m = m
                .into_iter()
                .map(|(imp, (mut v, unit))| {
                    let st = Stat {
                        median: median(&mut v),
                        min: v[0],
                        max: v[v.len() - 1],
                        n: v.len(),
                        unit,
                    };
                    (imp, st)
                })
                .collect();
            (k, m)
        })
        .collect()
}

/// The best physical limit of each `(probe, size)` over the repetitions.
pub fn best_limits(limits: &[Limit]) -> BTreeMap<(&'static str, usize), (f64, &'static str)> {
    let mut out: BTreeMap<(&'static str, usize), (f64, &'static str)> = BTreeMap::new();
    for l in limits {
        let e = out.entry((l.test, l.size)).or_insert((l.value, l.unit));
        let better = if lower_is_better(l.unit) {
            l.value < e.0
        } else {
            l.value > e.0
        };
        if better {
            e.0 = l.value;
        }
    }
    out
}

/// How many times faster `ours` is than `other` (> 1: ours is faster).
pub fn speedup(ours: f64, other: f64, unit: &str) -> f64 {
    if lower_is_better(unit) {
        other / ours
    } else {
        ours / other
    }
}

/// `4096` -> `4 KiB`.
pub fn fmt_size(s: usize) -> String {
    if s >= 1 << 20 && s % (1 << 20) == 0 {
        format!("{} MiB", s >> 20)
    } else if s >= 1024 && s % 1024 == 0 {
        format!("{} KiB", s >> 10)
    } else {
        format!("{s} B")
    }
}

fn fmt_value(v: f64, unit: &str) -> String {
    match unit {
        "us" if v < 10.0 => format!("{v:.3}"),
        "us" => format!("{v:.1}"),
        "MB/s" => format!("{v:.0}"),
        "msg/s" => format!("{:.2}M", v / 1e6),
        _ => format!("{v:.3}"),
    }
}

fn unit_label(unit: &str) -> &str {
    match unit {
        "us" => "us, lower is better",
        "MB/s" => "MB/s, higher is better",
        "msg/s" => "messages/s, higher is better",
        _ => unit,
    }
}

fn ours(key: &str) -> bool {
    key.starts_with("oxmpi")
}

/// The Markdown report.
pub fn markdown(cfg: &Config, o: &Outcome, table: &Table) -> String {
    let mut md = String::new();
    let keys: Vec<&str> = o.impls.iter().map(|i| i.key.as_str()).collect();
    let others: Vec<&str> = keys.iter().copied().filter(|k| !ours(k)).collect();
    let mine: Vec<&str> = keys.iter().copied().filter(|k| ours(k)).collect();
    let _ = writeln!(md, "# oxmpi-bench compare\n");
    let _ = writeln!(md, "Command: `{}`  ", cfg.command);
    let _ = writeln!(
        md,
        "Machine: {}; {} cores; Linux {}.  ",
        cpu_model(),
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        kernel()
    );
    let _ = writeln!(
        md,
        "Took {:.0} s; every point repeated {} time(s), the implementations interleaved in each round, each round starting with the next one.\n",
        o.elapsed.as_secs_f64(),
        cfg.reps
    );
    let _ = writeln!(md, "Implementations:\n");
    for i in &o.impls {
        let _ = writeln!(md, "- `{}`: {}", i.key, i.about);
    }
    for (k, why) in &o.missing {
        let _ = writeln!(md, "- `{k}`: **not run**: {why}");
    }
    let _ = writeln!(
        md,
        "\nEach cell is the median over the repetitions and its spread, (max - min) / median. \
         A cell marked `(noisy)` has a spread above {:.0}%: the machine was busy during that point, \
         so read it with care. `vs best` is how many times faster oxmpi is than the best of the \
         other implementations at that point (above 1: oxmpi is faster; below 1: slower). \
         `shm` is each implementation's default on-node path; `tcp` forces TCP over loopback \
         (oxmpi `btl=self,tcp`, Open MPI `pml ob1, btl tcp,self`, MPICH libfabric tcp with \
         `MPIR_CVAR_NOLOCAL=1`). Two-rank tests are pinned to cores 0 and 1; `msgrate_*pairs` and \
         `mt_latency` run unpinned (more threads than cores).\n",
        cfg.noise * 100.0
    );
    let lim = best_limits(&o.limits);
    if !lim.is_empty() {
        let _ = writeln!(md, "## Physical limits of this machine\n");
        let _ = writeln!(md, "| probe | size | value |\n|---|---:|---:|");
        for ((t, s), (v, u)) in &lim {
            let _ = writeln!(md, "| {t} | {} | {} {u} |", fmt_size(*s), fmt_value(*v, u));
        }
        let _ = writeln!(
            md,
            "\n`cacheline`: half the round trip of one cache line between two cores; `memcpy`: one \
             core copying; `cma`: process_vm_readv from another process; `tcp_*`: raw TCP over \
             loopback (8-byte ping-pong; windows of 64 writes). Best over the repetitions.\n"
        );
    }
    state_section(&mut md, &o.samples, &keys);
    let tests: Vec<String> = o.plan.iter().map(|p| p.label.clone()).collect();
    for tr in &cfg.transports {
        let _ = writeln!(md, "## {tr}\n");
        for t in &tests {
            let rows: Vec<_> = table
                .iter()
                .filter(|((tt, ts, _), _)| tt == tr && ts == t)
                .collect();
            if rows.is_empty() {
                continue;
            }
            let unit = rows[0].1.values().next().map_or("", |s| s.unit.as_str());
            let _ = writeln!(md, "### {t} ({})\n", unit_label(unit));
            let mut head = "| size |".to_string();
            let mut line = "|---:|".to_string();
            for k in &keys {
                let _ = write!(head, " {k} |");
                line.push_str("---:|");
            }
            for k in &mine {
                let _ = write!(head, " {k} vs best |");
                line.push_str("---:|");
            }
            let _ = writeln!(md, "{head}\n{line}");
            for ((_, _, size), m) in rows {
                let mut row = format!("| {} |", fmt_size(*size));
                for k in &keys {
                    match m.get(*k) {
                        Some(s) => {
                            let noisy = if s.n > 1 && s.spread() > cfg.noise {
                                " (noisy)"
                            } else {
                                ""
                            };
                            let spread = if s.n > 1 {
                                format!(" ±{:.0}%", s.spread() * 100.0)
                            } else {
                                String::new()
                            };
                            let _ =
                                write!(row, " {}{spread}{noisy} |", fmt_value(s.median, &s.unit));
                        }
                        None => row.push_str(" failed |"),
                    }
                }
                let best = others
                    .iter()
                    .filter_map(|k| m.get(*k))
                    .map(|s| s.median)
                    .reduce(|a, b| {
                        if lower_is_better(unit) {
                            a.min(b)
                        } else {
                            a.max(b)
                        }
                    });
                for k in &mine {
                    match (m.get(*k), best) {
                        (Some(s), Some(b)) => {
                            let _ = write!(row, " {:.2}x |", speedup(s.median, b, unit));
                        }
                        _ => row.push_str(" - |"),
                    }
                }
                let _ = writeln!(md, "{row}");
            }
            let _ = writeln!(md);
        }
    }
    closeness(&mut md, cfg, &keys, table, &lim);
    if !o.failures.is_empty() {
        let _ = writeln!(md, "## Failed runs\n");
        for f in &o.failures {
            let _ = writeln!(
                md,
                "- `{}` {} {} (repetition {}): {}",
                f.imp, f.transport, f.test, f.rep, f.why
            );
        }
        let _ = writeln!(md);
    }
    md
}

/// "How close to the physical limits": latency as limit / value, bandwidth
/// as value / limit, in percent.
fn closeness(
    md: &mut String,
    cfg: &Config,
    keys: &[&str],
    table: &Table,
    lim: &BTreeMap<(&'static str, usize), (f64, &'static str)>,
) {
    let mut rows = Vec::new();
    for tr in &cfg.transports {
        let lat_probe = if tr == "tcp" {
            "tcp_latency"
        } else {
            "cacheline"
        };
        if let Some((l, _)) = lim
            .iter()
            .find(|((p, _), _)| *p == lat_probe)
            .map(|(_, v)| *v)
        {
            if let Some(m) = table.get(&(tr.clone(), "latency".into(), 8)) {
                rows.push((
                    format!("{tr} latency 8 B vs {lat_probe} {l:.3} us"),
                    m,
                    l,
                    true,
                ));
            }
        }
        for ((t, tt, size), m) in table.iter() {
            if t != tr || tt != "bw" || *size < 65536 {
                continue;
            }
            let probe = if tr == "tcp" {
                vec!["tcp_bw"]
            } else {
                vec!["memcpy", "cma"]
            };
            let best = probe
                .iter()
                .filter_map(|p| lim.get(&(*p, *size)))
                .map(|(v, _)| *v)
                .fold(f64::NAN, f64::max);
            if best.is_finite() {
                rows.push((
                    format!(
                        "{tr} bw {} vs {} {best:.0} MB/s",
                        fmt_size(*size),
                        probe.join("/")
                    ),
                    m,
                    best,
                    false,
                ));
            }
        }
    }
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(md, "## How close each implementation gets to the limits\n");
    let mut head = "| point |".to_string();
    let mut line = "|---|".to_string();
    for k in keys {
        let _ = write!(head, " {k} |");
        line.push_str("---:|");
    }
    let _ = writeln!(md, "{head}\n{line}");
    for (name, m, l, lat) in rows {
        let mut row = format!("| {name} |");
        for k in keys {
            match m.get(*k) {
                Some(s) if lat => {
                    let _ = write!(row, " {:.0}% |", l / s.median * 100.0);
                }
                Some(s) => {
                    let _ = write!(row, " {:.0}% |", s.median / l * 100.0);
                }
                None => row.push_str(" - |"),
            }
        }
        let _ = writeln!(md, "{row}");
    }
    let _ = writeln!(
        md,
        "\n100% would be the hardware itself; the `cma` and `memcpy` limits are one copy, so a \
         protocol that has both sides copy halves at once can pass 100% of them.\n"
    );
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}

fn kernel() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// "Machine state": how many runs of each implementation started in each
/// state band (`samples.csv` has the probe of every run).
fn state_section(md: &mut String, samples: &[Sample], keys: &[&str]) {
    // One probe per run: count each (impl, transport, test, rep) once.
    type Run<'a> = (&'a str, &'a str, usize);
    let mut runs: BTreeMap<(&str, &str), std::collections::BTreeSet<Run<'_>>> = BTreeMap::new();
    for s in samples {
        runs.entry((s.imp.as_str(), state_band(s.cacheline_us)))
            .or_default()
            .insert((s.transport.as_str(), s.test.as_str(), s.rep));
    }
    if runs.is_empty() {
        return;
    }
    let _ = writeln!(
        md,
        "## Machine state
"
    );
    let _ = writeln!(
        md,
        "Runs by the cache-line half round trip between cores 0 and 1 measured just before \
         each run (`cacheline_us` in `samples.csv`). On a virtual machine it changes from one \
         launch to the next; runs in a slower state than another implementation's are not \
         comparable with them.\n"
    );
    let mut head = "| state |".to_string();
    let mut line = "|---|".to_string();
    for k in keys {
        let _ = write!(head, " {k} |");
        line.push_str("---:|");
    }
    let _ = writeln!(md, "{head}\n{line}");
    for band in STATE_BANDS {
        if !keys.iter().any(|k| runs.contains_key(&(*k, band))) {
            continue;
        }
        let mut row = format!("| {band} |");
        for k in keys {
            let n = runs.get(&(*k, band)).map_or(0, |m| m.len());
            let _ = write!(row, " {n} |");
        }
        let _ = writeln!(md, "{row}");
    }
    let _ = writeln!(md);
}

/// Writes `report.md`, `samples.csv`, `summary.csv`, `limits.csv` and the
/// plots under `cfg.out`.
pub fn write(cfg: &Config, o: &Outcome) -> Result<(), String> {
    let out = &cfg.out;
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let table = summarize(&o.samples);
    let put = |name: &str, text: String| -> Result<(), String> {
        let p = out.join(name);
        std::fs::write(&p, text).map_err(|e| format!("{}: {e}", p.display()))
    };
    put("report.md", markdown(cfg, o, &table))?;
    let mut csv = "impl,transport,test,size,rep,value,unit,cacheline_us\n".to_string();
    for s in &o.samples {
        let _ = writeln!(
            csv,
            "{},{},{},{},{},{},{},{:.4}",
            s.imp, s.transport, s.test, s.size, s.rep, s.value, s.unit, s.cacheline_us
        );
    }
    put("samples.csv", csv)?;
    let mut csv = "transport,test,size,impl,median,min,max,spread,noisy,reps,unit,vs_best_other\n"
        .to_string();
    for ((tr, t, size), m) in &table {
        for (imp, s) in m {
            let best = m
                .iter()
                .filter(|(k, _)| !ours(k))
                .map(|(_, s)| s.median)
                .reduce(|a, b| {
                    if lower_is_better(&s.unit) {
                        a.min(b)
                    } else {
                        a.max(b)
                    }
                });
            let vs = match best {
                Some(b) if ours(imp) => format!("{:.4}", speedup(s.median, b, &s.unit)),
                _ => String::new(),
            };
            let _ = writeln!(
                csv,
                "{tr},{t},{size},{imp},{},{},{},{:.4},{},{},{},{vs}",
                s.median,
                s.min,
                s.max,
                s.spread(),
                s.n > 1 && s.spread() > cfg.noise,
                s.n,
                s.unit
            );
        }
    }
    put("summary.csv", csv)?;
    let mut csv = "probe,size,rep_value,unit\n".to_string();
    for l in &o.limits {
        let _ = writeln!(csv, "{},{},{},{}", l.test, l.size, l.value, l.unit);
    }
    put("limits.csv", csv)?;
    crate::plot::all(out, &cfg.transports, &table, &o.impls)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(imp: &str, test: &str, size: usize, rep: usize, value: f64, unit: &str) -> Sample {
        Sample {
            imp: imp.into(),
            transport: "shm".into(),
            test: test.into(),
            size,
            rep,
            value,
            unit: unit.into(),
            cacheline_us: 0.05,
        }
    }

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(&mut []).is_nan());
    }

    #[test]
    fn speedup_is_above_one_when_oxmpi_is_faster() {
        // Latency: smaller is better.
        assert_eq!(speedup(0.5, 1.0, "us"), 2.0);
        // Bandwidth: larger is better.
        assert_eq!(speedup(2000.0, 1000.0, "MB/s"), 2.0);
        assert_eq!(speedup(1.0, 2.0, "msg/s"), 0.5);
    }

    #[test]
    fn summary_groups_repetitions_per_point() {
        let s = vec![
            sample("oxmpi", "latency", 8, 1, 0.30, "us"),
            sample("oxmpi", "latency", 8, 2, 0.20, "us"),
            sample("oxmpi", "latency", 8, 3, 0.40, "us"),
            sample("ompi5", "latency", 8, 1, 0.25, "us"),
        ];
        let t = summarize(&s);
        let m = &t[&("shm".to_string(), "latency".to_string(), 8)];
        let ox = &m["oxmpi"];
        assert_eq!((ox.median, ox.min, ox.max, ox.n), (0.30, 0.20, 0.40, 3));
        assert!((ox.spread() - 0.2 / 0.3).abs() < 1e-12);
        assert_eq!(m["ompi5"].n, 1);
    }

    #[test]
    fn best_limit_keeps_the_fastest_repetition() {
        let l = [
            Limit {
                test: "memcpy",
                size: 4096,
                value: 10.0,
                unit: "MB/s",
            },
            Limit {
                test: "memcpy",
                size: 4096,
                value: 30.0,
                unit: "MB/s",
            },
            Limit {
                test: "cacheline",
                size: 64,
                value: 0.1,
                unit: "us",
            },
            Limit {
                test: "cacheline",
                size: 64,
                value: 0.05,
                unit: "us",
            },
        ];
        let b = best_limits(&l);
        assert_eq!(b[&("memcpy", 4096)].0, 30.0);
        assert_eq!(b[&("cacheline", 64)].0, 0.05);
    }

    #[test]
    fn runs_are_counted_once_per_state_band() {
        assert_eq!(state_band(0.025), "below 35 ns");
        assert_eq!(state_band(0.05), "35 to 150 ns");
        assert_eq!(state_band(0.25), "above 150 ns");
        assert_eq!(state_band(f64::NAN), "not probed");
        let mut v = Vec::new();
        // oxmpi: two runs (two sizes each) in the usual state, one slow;
        // ompi5: one run of each.
        for (imp, rep, state) in [
            ("oxmpi", 1, 0.05),
            ("oxmpi", 2, 0.05),
            ("oxmpi", 3, 0.25),
            ("ompi5", 1, 0.05),
            ("ompi5", 2, 0.25),
        ] {
            for size in [8, 64] {
                let mut s = sample(imp, "latency", size, rep, 1.0, "us");
                s.cacheline_us = state;
                v.push(s);
            }
        }
        let mut md = String::new();
        state_section(&mut md, &v, &["oxmpi", "ompi5"]);
        assert!(md.contains("| 35 to 150 ns | 2 | 1 |"), "{md}");
        assert!(md.contains("| above 150 ns | 1 | 1 |"), "{md}");
        assert!(!md.contains("below 35 ns"), "{md}");
    }

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(fmt_size(0), "0 B");
        assert_eq!(fmt_size(8), "8 B");
        assert_eq!(fmt_size(4096), "4 KiB");
        assert_eq!(fmt_size(4 << 20), "4 MiB");
        assert_eq!(fmt_size(1000), "1000 B");
    }
}
