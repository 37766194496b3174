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
use oxmpi_mtl::mtl::Mtl;
use oxmpi_pml::cm::Cm;
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
    // The ofi MTL's parameters (`mtl_ofi_*`), all text, checked when it opens.
    for (name, default, help) in oxmpi_mtl::ofi::params() {
        let param = name.strip_prefix("mtl_ofi_").unwrap_or(name);
        // Typed where the MTL's parser is (it parses the text again when it
        // opens); the provider lists are what users set (level 1, as Open
        // MPI's).
        let spec = match param {
            "tag_mode" => mca::ParamSpec::enumeration(
                "mtl",
                "ofi",
                param,
                &["auto", "ofi_tag_1", "ofi_tag_2", "ofi_tag_full"],
                default,
            ),
            "wait_fd" => {
                mca::ParamSpec::enumeration("mtl", "ofi", param, &["auto", "1", "0"], default)
            }
            "enable_sep" | "thread_grouping" => {
                mca::ParamSpec::bool("mtl", "ofi", param, default == "1")
            }
            "progress_event_cnt" | "num_ctxts" => {
                mca::ParamSpec::int("mtl", "ofi", param, default.parse().unwrap_or(1))
            }
            _ => mca::ParamSpec::string("mtl", "ofi", param, default),
        };
        let level = if param.starts_with("provider_") { 1 } else { 3 };
        reg.register(spec.level(level).help(help))?;
    }
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
    publish_pml(modex, "ob1")?;
    if size > 1 {
        modex.fence().map_err(intern)?;
    }
    check_same_pml(modex, "ob1")?;

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

/// The point-to-point engine a job uses (the `pml` framework), chosen by
/// [`select_pml`].
pub enum PmlPick {
    /// ob1 over the BTLs.
    Ob1,
    /// cm over this opened MTL.
    Cm(Box<dyn Mtl + Send>),
}

impl std::fmt::Debug for PmlPick {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PmlPick::Ob1 => f.write_str("ob1"),
            PmlPick::Cm(m) => write!(f, "cm ({})", m.name()),
        }
    }
}

impl PmlPick {
    /// The PML's name.
    pub fn name(&self) -> &'static str {
        match self {
            PmlPick::Ob1 => "ob1",
            PmlPick::Cm(_) => "cm",
        }
    }
}

/// Chooses the PML as Open MPI's framework does: cm when it is selected
/// (`pml` names it, or is left to choose) and an MTL of the `mtl`
/// selection opens with a usable provider; ob1 otherwise. cm named alone
/// with no MTL that opens is an error that says why each one did not.
/// (Every rank chooses alone; `check_same_pml` then makes sure they
/// agree.)
///
/// ```
/// use oxmpi::framework::{register_params, select_pml};
/// use oxmpi_runtime::mca::{Registry, Sources};
/// let mut reg = Registry::new();
/// register_params(&mut reg).unwrap();
/// reg.apply(&Sources::new().with_cli("pml", "ob1")).unwrap();
/// assert_eq!(select_pml(&reg, false).unwrap().name(), "ob1");
/// ```
///
/// `oversubscribed` (more ranks on the node than cores) settles the ofi
/// MTL's `mtl_ofi_wait_fd=auto`: queues with a wait object only then.
pub fn select_pml(reg: &Registry, oversubscribed: bool) -> Result<PmlPick> {
    let pmls: Vec<String> = reg.selection("pml").map_err(intern)?.to_vec();
    let want = |n: &str| pmls.iter().any(|p| p == n);
    if !want("cm") {
        return Ok(PmlPick::Ob1);
    }
    let mut why = Vec::new();
    for name in reg.selection("mtl").map_err(intern)? {
        match open_mtl(name, reg, oversubscribed) {
            Ok(m) => {
                tracing::info!("pml cm over mtl {name}");
                return Ok(PmlPick::Cm(m));
            }
            Err(e) => why.push(format!("mtl {name}: {e}")),
        }
    }
    let why = if why.is_empty() {
        "the mtl selection is empty".to_string()
    } else {
        why.join("; ")
    };
    if want("ob1") {
        tracing::debug!("pml cm not used ({why}): ob1");
        return Ok(PmlPick::Ob1);
    }
    Err(Error::new(
        ErrorClass::Other,
        format!("pml cm was selected but no MTL opened: {why}"),
    ))
}

/// Opens MTL component `name` with its parameters.
fn open_mtl(
    name: &str,
    reg: &Registry,
    oversubscribed: bool,
) -> std::result::Result<Box<dyn Mtl + Send>, String> {
    match name {
        "ofi" => {
            let values: Vec<(&str, String)> = oxmpi_mtl::ofi::params()
                .into_iter()
                .filter_map(|(n, _, _)| {
                    let v = match reg.param(n)?.value() {
                        mca::Value::Bool(b) => u8::from(*b).to_string(),
                        v => v.to_string(),
                    };
                    // A wait object costs every completion a signal
                    // (+1.2 us on an 8-byte tcp ping-pong here) and pays
                    // only when ranks wait for a core.
                    let v = match (n, v.as_str()) {
                        ("mtl_ofi_wait_fd", "auto") => u8::from(oversubscribed).to_string(),
                        _ => v,
                    };
                    Some((n, v))
                })
                .collect();
            let p =
                oxmpi_mtl::ofi::OfiParams::from_pairs(values.iter().map(|(n, v)| (*n, v.as_str())))
                    .map_err(|e| e.to_string())?;
            let m = oxmpi_mtl::ofi::OfiMtl::open(&p).map_err(|e| e.to_string())?;
            Ok(Box::new(m))
        }
        other => Err(format!("no MTL component {other}")),
    }
}

/// Publishes this rank's choice of PML and, after the fence that follows
/// (the cards'), compares it with rank 0's: ranks that chose differently
/// (one found a provider another did not) would never understand each
/// other, so that is an error naming both, not a hang.
fn publish_pml(modex: &mut Modex, name: &str) -> Result<()> {
    modex.put("pml", name.as_bytes()).map_err(intern)
}

/// The second half of [`publish_pml`], after the fence.
fn check_same_pml(modex: &mut Modex, name: &str) -> Result<()> {
    if modex.rank() == 0 {
        return Ok(());
    }
    let theirs = modex.try_get(0, "pml").map_err(intern)?.unwrap_or_default();
    if theirs != name.as_bytes() {
        return Err(Error::new(
            ErrorClass::Other,
            format!(
                "rank {} chose pml {name} but rank 0 chose pml {}: name one with --mca pml \
                 for every rank",
                modex.rank(),
                String::from_utf8_lossy(&theirs)
            ),
        ));
    }
    Ok(())
}

/// Opens the PML cm over `mtl`: publishes the MTL's business card, fences,
/// and hands cm every rank's card. Collective over the job.
pub fn open_cm(mtl: Box<dyn Mtl + Send>, modex: &mut Modex) -> Result<Cm> {
    let me = modex.rank();
    let size = modex.size();
    let mine = mtl.business_card();
    let key = format!("mtl-{}", mtl.name());
    modex.put(&key, &mine).map_err(intern)?;
    publish_pml(modex, "cm")?;
    if size > 1 {
        modex.fence().map_err(intern)?;
    }
    check_same_pml(modex, "cm")?;
    let mut cards = Vec::with_capacity(size as usize);
    for r in 0..size {
        cards.push(if r == me {
            mine.clone()
        } else {
            modex.get(r, &key).map_err(intern)?
        });
    }
    Cm::new(mtl, me, &cards).map_err(|e| Error::new(ErrorClass::Other, e.msg))
}
