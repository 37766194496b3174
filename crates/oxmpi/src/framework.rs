//! The BTL framework: which transports a job uses, opened from the
//! parameters, and their business cards exchanged through the modex.
//!
//! Seed 001's component selection and seed 002's business cards:
//!
//! 1. [`register_params`] registers every component's parameters (the
//!    launcher checks `--mca` against the same list).
//! 2. [`open`] opens the components that the `btl` selection names and
//!    that make sense for this job: `self` always, `sm` when another rank
//!    shares the node, `tcp` when the job has more than one rank. Each
//!    opened component publishes one business card under `btl-<name>`.
//! 3. After one fence every rank reads the cards of every peer; the PML's
//!    `Ob1::new` asks each module whether it reaches each peer (seed 002's
//!    `match_description`); connections are bound later, on first use.
//!
//! The TCP BTL authenticates connections with a per-job secret: the
//! launcher's (`OXMPI_JOB_SECRET`, 32 hex digits, set by `oxmpirun`), or
//! else one that rank 0 draws and publishes before the cards (one more
//! fence, only under launchers that do not hand one out).
//!
//! ```
//! let mut reg = oxmpi_runtime::mca::Registry::new();
//! oxmpi::framework::register_params(&mut reg).unwrap();
//! // The `btl` selection names the transports a job may open.
//! assert_eq!(reg.selection("btl").unwrap(), ["self", "sm", "tcp"]);
//! ```

use oxmpi_btl::btl::Btl;
use oxmpi_btl::self_btl::{self, SelfBtl};
use oxmpi_btl::sm::{SmBtl, SmConfig};
use oxmpi_btl::tcp::{TcpBtl, TcpConfig};
use oxmpi_pml::{PeerDesc, PmlConfig};
use oxmpi_runtime::mca::{self, McaError, Registry};
use oxmpi_runtime::pmi::Modex;

use crate::error::{Error, ErrorClass, Result};

/// The environment variable through which a launcher hands every rank the
/// job's secret (32 hexadecimal digits).
///
/// ```
/// use oxmpi::framework::{parse_secret, random_secret, SECRET_ENV};
/// // What a launcher does: draw a secret and hand it to every rank.
/// let hex: String = random_secret().unwrap().iter().map(|b| format!("{b:02x}")).collect();
/// let mut rank = std::process::Command::new("./app");
/// rank.env(SECRET_ENV, &hex);
/// assert!(parse_secret(&hex).is_some());
/// ```
pub const SECRET_ENV: &str = "OXMPI_JOB_SECRET";

/// A BTL module as the PML holds it.
///
/// ```
/// use oxmpi::framework::DynBtl;
/// use oxmpi_btl::btl::Btl;
///
/// fn names(btls: &[Box<DynBtl>]) -> Vec<&'static str> {
///     btls.iter().map(|b| b.name()).collect()
/// }
/// assert!(names(&[]).is_empty());
/// ```
pub type DynBtl = dyn Btl + Send;

/// Registers the parameters of every oxmpi component: the runtime's, each
/// BTL's (`btl_self_*`, `btl_sm_*`, `btl_tcp_*`) and the PML's
/// (`pml_ob1_*`), and the collectives' selection (`coll_tuned_*`).
///
/// ```
/// let mut reg = oxmpi_runtime::mca::Registry::new();
/// oxmpi::framework::register_params(&mut reg).unwrap();
/// assert!(reg.param("btl_sm_eager_limit").is_some());
/// assert!(reg.param("pml_ob1_sendi_limit").is_some());
/// ```
pub fn register_params(reg: &mut Registry) -> Result<(), McaError> {
    mca::register_runtime_params(reg)?;
    self_btl::DEFAULT_LIMITS.register(reg, "self")?;
    SmConfig::register_params(reg)?;
    TcpConfig::register_params(reg)?;
    PmlConfig::register_params(reg)?;
    crate::coll_tuned::CollTuned::register_params(reg)?;
    Ok(())
}

/// The opened modules (in the order the PML sees them) and what this rank
/// knows of every peer.
///
/// ```
/// use oxmpi_btl::btl::Btl;
/// use oxmpi_runtime::pmi::{Modex, Pmi};
/// let mut reg = oxmpi_runtime::mca::Registry::new();
/// oxmpi::framework::register_params(&mut reg).unwrap();
/// let mut modex = Modex::new(Pmi::singleton()).unwrap();
/// let opened = oxmpi::framework::open(&reg, &mut modex).unwrap();
/// // A job of one rank: `self` only, and one peer (this rank).
/// assert_eq!(opened.btls.iter().map(|b| b.name()).collect::<Vec<_>>(), ["self"]);
/// assert_eq!(opened.peers.len(), 1);
/// ```
pub struct Opened {
    /// The modules, `self` first.
    pub btls: Vec<Box<DynBtl>>,
    /// Per world rank: same node or not, and its card for each module.
    pub peers: Vec<PeerDesc>,
}

impl std::fmt::Debug for Opened {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Opened")
            .field(
                "btls",
                &self.btls.iter().map(|b| b.name()).collect::<Vec<_>>(),
            )
            .field("peers", &self.peers.len())
            .finish()
    }
}

fn intern(what: impl std::fmt::Display) -> Error {
    Error::new(ErrorClass::Other, what.to_string())
}

/// Parses a secret of 32 hexadecimal digits.
///
/// ```
/// use oxmpi::framework::parse_secret;
/// let s = parse_secret("000102030405060708090a0b0c0d0e0f").unwrap();
/// assert_eq!(s[15], 15);
/// assert!(parse_secret("not hex").is_none());
/// ```
pub fn parse_secret(text: &str) -> Option<[u8; 16]> {
    let t = text.trim().as_bytes();
    if t.len() != 32 {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, pair) in t.chunks(2).enumerate() {
        let s = std::str::from_utf8(pair).ok()?;
        out[i] = u8::from_str_radix(s, 16).ok()?;
    }
    Some(out)
}

/// 16 bytes from the kernel's random source.
///
/// ```
/// let a = oxmpi::framework::random_secret().unwrap();
/// let b = oxmpi::framework::random_secret().unwrap();
/// assert_ne!(a, b); // 128 random bits
/// ```
pub fn random_secret() -> Result<[u8; 16]> {
    use std::io::Read;
    let mut out = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut out))
        .map_err(|e| intern(format!("reading /dev/urandom for the job secret: {e}")))?;
    Ok(out)
}

/// The job's secret: the launcher's, or rank 0's published through the
/// key-value store (collective: every rank calls it, or none).
fn job_secret(modex: &mut Modex) -> Result<[u8; 16]> {
    if let Ok(text) = std::env::var(SECRET_ENV) {
        return parse_secret(&text).ok_or_else(|| {
            Error::new(
                ErrorClass::Arg,
                format!("{SECRET_ENV} must be 32 hexadecimal digits"),
            )
        });
    }
    if modex.rank() == 0 {
        let s = random_secret()?;
        modex.put("job-secret", &s).map_err(intern)?;
    }
    modex.fence().map_err(intern)?;
    let v = modex.get(0, "job-secret").map_err(intern)?;
    v.try_into()
        .map_err(|_| intern("rank 0 published a malformed job secret"))
}

fn card_key(name: &str) -> String {
    format!("btl-{name}")
}

/// Opens the selected BTLs, publishes their cards, fences, and reads every
/// peer's cards. Collective over the job.
///
/// ```
/// use oxmpi_runtime::mca::Registry;
/// use oxmpi_runtime::pmi::{Modex, Pmi};
/// let mut reg = Registry::new();
/// oxmpi::framework::register_params(&mut reg).unwrap();
/// // A singleton (no launcher): the modex is in-process, nothing to fence.
/// let mut modex = Modex::new(Pmi::singleton()).unwrap();
/// let opened = oxmpi::framework::open(&reg, &mut modex).unwrap();
/// assert!(!opened.btls.is_empty());
/// ```
pub fn open(reg: &Registry, modex: &mut Modex) -> Result<Opened> {
    let me = modex.rank();
    let size = modex.size();
    let local = modex.local_ranks().to_vec();
    let local_index = local
        .iter()
        .position(|&r| r == me)
        .ok_or_else(|| intern("this rank is not among its node's ranks"))?
        as u32;
    let selected: Vec<String> = reg.selection("btl").map_err(intern)?.to_vec();
    let want = |name: &str| selected.iter().any(|s| s == name);
    let mca_err = |e: McaError| Error::new(ErrorClass::Arg, e.to_string());

    // The secret first: its fence (if any) must come before the cards'.
    let secret = if want("tcp") && size > 1 {
        Some(job_secret(modex)?)
    } else {
        None
    };

    let mut btls: Vec<Box<DynBtl>> = Vec::new();
    let mut names: Vec<&'static str> = Vec::new();
    // Self is always open: a rank always reaches itself (as Open MPI adds
    // its self BTL unless told otherwise, a job excluding it cannot send to
    // itself).
    if want("self") {
        let limits = oxmpi_btl::btl::Limits::from_registry(reg, "self").map_err(mca_err)?;
        btls.push(Box::new(SelfBtl::new(me, limits)));
        names.push("self");
    }
    for name in &selected {
        match name.as_str() {
            "sm" if local.len() > 1 => {
                let cfg = SmConfig::from_registry(reg, local_index, local.len() as u32)
                    .map_err(mca_err)?;
                let sm = SmBtl::new(cfg).map_err(|e| intern(format!("btl sm: {e}")))?;
                btls.push(Box::new(sm));
                names.push("sm");
            }
            "tcp" if size > 1 => {
                let secret = secret.expect("drawn above when tcp is selected");
                let cfg = TcpConfig::from_registry(reg, me, secret)
                    .map_err(|e| Error::new(ErrorClass::Arg, format!("btl tcp: {e}")))?;
                let mods = TcpBtl::open_all(&cfg).map_err(|e| intern(format!("btl tcp: {e}")))?;
                if mods.is_empty() {
                    tracing::debug!("btl tcp: no usable interface");
                }
                for m in mods {
                    btls.push(Box::new(m));
                    names.push("tcp");
                }
            }
            _ => {}
        }
    }

    // One card per component (every tcp module publishes the same one).
    let mut published: Vec<&str> = Vec::new();
    for (b, name) in btls.iter().zip(&names) {
        if published.contains(name) {
            continue;
        }
        modex
            .put(&card_key(name), &b.business_card())
            .map_err(intern)?;
        published.push(name);
    }
    if size > 1 {
        modex.fence().map_err(intern)?;
    }

    let mut peers = Vec::with_capacity(size as usize);
    for rank in 0..size {
        let is_local = modex.is_local(rank);
        let mut cards = Vec::with_capacity(btls.len());
        let mut cache: Vec<(&str, Option<Vec<u8>>)> = Vec::new();
        for name in &names {
            let card = if rank == me {
                None
            } else if let Some((_, c)) = cache.iter().find(|(n, _)| n == name) {
                c.clone()
            } else if *name == "self" || (*name == "sm" && !is_local) {
                None
            } else {
                let c = modex.try_get(rank, &card_key(name)).map_err(intern)?;
                cache.push((name, c.clone()));
                c
            };
            cards.push(card);
        }
        peers.push(PeerDesc {
            local: is_local,
            cards,
        });
    }
    Ok(Opened { btls, peers })
}
