//! `paired`: oxmpi against one anchor inside one machine state.
//!
//! The machine's state changes from launch to launch (see
//! [`report::state_band`]), so a whole-run median depends on which state each
//! run drew. This waits until the probe `compare` takes before every run
//! ([`compare::probe_state`]) is in the wanted band, runs oxmpi, the anchor and
//! oxmpi again (the next triple the other way round), probes after every run
//! and keeps a triple only if every probe stayed in the band. Each kept
//! triple gives one ratio per size (each side's mean; above 1: oxmpi
//! faster, whichever way the unit points); the summary is their geometric
//! mean with a 95% confidence interval. Commands come from
//! [`compare::command`], as in `compare`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::compare::{self, Config, Impl, Plan};
use crate::report;

/// What one paired comparison runs.
#[derive(Clone, Debug)]
pub struct Paired {
    /// `compare`'s settings: `impls` holds oxmpi's key, then the anchor's;
    /// `tests` and `transports` one each.
    pub cfg: Config,
    /// The state band to measure in (one of [`report::STATE_BANDS`]).
    pub band: &'static str,
    /// Sizes, replacing the test's default ones when given.
    pub sizes: Option<Vec<usize>>,
    /// How long to keep measuring.
    pub duration: Duration,
}

/// One run: `(size, value)` and the unit, or why it failed.
fn run(imp: &Impl, plan: &Plan, p: &Paired) -> Result<(BTreeMap<usize, f64>, String), String> {
    let cmd = compare::command(imp, plan, &p.cfg.transports[0], false);
    let lines = compare::run_one(cmd, p.cfg.timeout).map_err(|e| format!("{}: {e}", imp.key))?;
    let unit = lines.first().map(|l| l.2.clone()).unwrap_or_default();
    Ok((lines.into_iter().map(|(s, v, _)| (s, v)).collect(), unit))
}

/// Runs the comparison, printing each kept triple and the summary.
pub fn paired(p: &Paired) -> Result<(), String> {
    let (impls, missing) = compare::prepare(&p.cfg)?;
    if let Some((key, why)) = missing.first() {
        return Err(format!("{key}: {why}"));
    }
    let (ox, anchor) = (&impls[0], &impls[1]);
    let mut plan = compare::plan(&p.cfg)?.remove(0);
    if let Some(s) = &p.sizes {
        plan.sizes = s.clone();
    }
    let in_band = |us: f64| report::state_band(us) == p.band;
    let mut ratios: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
    let (mut dropped, mut flip) = (0, false);
    let end = Instant::now() + p.duration;
    while Instant::now() < end {
        if !in_band(compare::probe_state()) {
            std::thread::sleep(Duration::from_secs(2));
            continue;
        }
        let (first, second) = if flip { (anchor, ox) } else { (ox, anchor) };
        flip = !flip;
        let mut runs = Vec::with_capacity(3);
        let mut kept = true;
        for imp in [first, second, first] {
            runs.push(run(imp, &plan, p)?);
            kept &= in_band(compare::probe_state());
        }
        if !kept {
            dropped += 1;
            continue;
        }
        let (oxs, ans) = if first.key == ox.key {
            (vec![&runs[0], &runs[2]], vec![&runs[1]])
        } else {
            (vec![&runs[1]], vec![&runs[0], &runs[2]])
        };
        let mean = |rs: &[&(BTreeMap<usize, f64>, String)], s: usize| {
            rs.iter()
                .map(|r| r.0.get(&s).copied().unwrap_or(f64::NAN))
                .sum::<f64>()
                / rs.len() as f64
        };
        let unit = &oxs[0].1;
        let mut line = Vec::new();
        for &s in oxs[0].0.keys() {
            let (o, a) = (mean(&oxs, s), mean(&ans, s));
            let r = if report::lower_is_better(unit) {
                a / o
            } else {
                o / a
            };
            ratios.entry(s).or_default().push(r);
            line.push(format!(
                "{s}: oxmpi {o:.3} {} {a:.3} {unit} ratio {r:.3}",
                anchor.key
            ));
        }
        println!("{}", line.join("; "));
    }
    println!(
        "# state {}, {} {}, oxmpi against {}: {dropped} triples dropped (state changed)",
        p.band, p.cfg.transports[0], plan.label, anchor.key
    );
    for (s, rs) in &ratios {
        let (g, lo, hi) = geometric_mean_ci(rs);
        println!(
            "{s}: {} triples, geometric mean ratio {g:.3} (95% CI {lo:.3}-{hi:.3}), oxmpi ahead in {}",
            rs.len(),
            rs.iter().filter(|&&r| r > 1.0).count()
        );
    }
    Ok(())
}

/// The geometric mean of `rs` with a normal 95% interval over the logs
/// (NaN bounds with fewer than two values).
pub fn geometric_mean_ci(rs: &[f64]) -> (f64, f64, f64) {
    let n = rs.len() as f64;
    let logs: Vec<f64> = rs.iter().map(|r| r.ln()).collect();
    let m = logs.iter().sum::<f64>() / n;
    let se = if rs.len() > 1 {
        (logs.iter().map(|l| (l - m).powi(2)).sum::<f64>() / (n - 1.0)).sqrt() / n.sqrt()
    } else {
        f64::NAN
    };
    (m.exp(), (m - 1.96 * se).exp(), (m + 1.96 * se).exp())
}

#[cfg(test)]
mod tests {
    use super::geometric_mean_ci;

    #[test]
    fn the_interval_is_around_the_geometric_mean() {
        let (g, lo, hi) = geometric_mean_ci(&[0.5, 2.0, 1.0, 1.0]);
        assert!((g - 1.0).abs() < 1e-12);
        assert!(lo < 1.0 && hi > 1.0 && (lo * hi - 1.0).abs() < 1e-12);
        let (g, lo, hi) = geometric_mean_ci(&[2.0]);
        assert!((g - 2.0).abs() < 1e-12 && lo.is_nan() && hi.is_nan());
    }
}
