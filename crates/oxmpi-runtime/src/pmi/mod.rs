//! PMI: how a rank learns its identity and exchanges addresses.
//!
//! * [`wire`]: PMI-1 / PMI-2 encoding, parsing and framing (untrusted input,
//!   never panics).
//! * [`value`]: how arbitrary bytes are stored in PMI values (base64url,
//!   split over several keys when long).
//! * [`client`]: [`Pmi`], the rank side (inherited `PMI_FD`, `PMI_PORT`, or
//!   singleton), PMI-1 or PMI-2 as configured.
//! * [`foreign`]: [`ForeignLauncher`], a launcher of several processes that
//!   gave this one no PMI we speak (PMIx, `srun --mpi=none`, Open MPI's
//!   `mpirun`): an error, not a silent singleton.
//! * [`server`]: [`PmiServer`], a sans-IO server core for `oxmpirun` and tests.
//! * [`modex`]: [`Modex`], per-rank namespaced business cards plus which
//!   ranks share this node.

pub mod client;
mod fd;
pub mod foreign;
pub mod modex;
pub mod server;
pub mod value;
pub mod wire;

pub use client::{Pmi, PmiConfig, PmiEnv, PmiError, PmiVersion};
pub use foreign::{ForeignLauncher, PmixLauncher};
pub use modex::Modex;
pub use server::{ConnId, JobInfo, PmiServer, ServerEvent};

/// Formats ranks in increasing order as Hydra's rank lists
/// (`PMI_dead_processes`): comma-separated ranks and `lo-hi` ranges.
///
/// ```
/// use oxmpi_runtime::pmi::format_rank_list;
/// assert_eq!(format_rank_list([1, 3, 4, 5, 9]), "1,3-5,9");
/// assert_eq!(format_rank_list([]), "");
/// ```
pub fn format_rank_list(ranks: impl IntoIterator<Item = u32>) -> String {
    let mut out = String::new();
    let mut run: Option<(u32, u32)> = None;
    let flush = |out: &mut String, (lo, hi): (u32, u32)| {
        if !out.is_empty() {
            out.push(',');
        }
        if lo == hi {
            out.push_str(&lo.to_string());
        } else {
            out.push_str(&format!("{lo}-{hi}"));
        }
    };
    for r in ranks {
        run = match run {
            Some((lo, hi)) if r == hi + 1 => Some((lo, r)),
            Some(prev) => {
                flush(&mut out, prev);
                Some((r, r))
            }
            None => Some((r, r)),
        };
    }
    if let Some(last) = run {
        flush(&mut out, last);
    }
    out
}

/// Parses a rank list as [`format_rank_list`] writes it (spaces around
/// items are ignored); `None` when an item is not a rank or a range.
///
/// ```
/// use oxmpi_runtime::pmi::parse_rank_list;
/// assert_eq!(parse_rank_list("1,3-5, 9"), Some(vec![1, 3, 4, 5, 9]));
/// assert_eq!(parse_rank_list(""), Some(vec![]));
/// assert_eq!(parse_rank_list("2-x"), None);
/// ```
pub fn parse_rank_list(text: &str) -> Option<Vec<u32>> {
    let mut out = Vec::new();
    for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        match item.split_once('-') {
            Some((lo, hi)) => {
                let (lo, hi): (u32, u32) = (lo.trim().parse().ok()?, hi.trim().parse().ok()?);
                if hi < lo || hi - lo > 1 << 24 {
                    return None;
                }
                out.extend(lo..=hi);
            }
            None => out.push(item.parse().ok()?),
        }
    }
    Some(out)
}
