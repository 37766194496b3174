//! The TCP BTL's configuration: limits, queue bounds and the `btl_tcp_*`
//! parameters.

use std::time::Duration;

use super::iface::IfFilter;
use crate::btl::{BtlError, Limits};

/// Default limits, as Open MPI's tcp BTL (128 KiB pipeline fragments,
/// exclusivity 100, latency 100, bandwidth 100 per link) except:
/// - the eager limit: a payload of up to 256 KiB goes eagerly, headers
///   included. Open MPI's 64 KiB counts the headers, so a 64 KiB message
///   took a rendezvous round trip and a 32-byte tail fragment.
/// - a rendezvous puts everything past its first 8 KiB (not 64 KiB), with
///   no send/receive tail (`rdma_pipeline_send_length` 0, not 128 KiB): the
///   emulated put lands straight in the receive buffer, where fragments are
///   read into the module's buffer and copied again.
///
/// Both were measured against MPICH 5 over loopback (`docs/performance.md`,
/// "Tuning parameters and switch points").
///
/// Unexpected eager data stays bounded by the PML's credits.
pub const DEFAULT_LIMITS: Limits = Limits {
    eager_limit: 256 * 1024 + 64,
    rndv_eager_limit: 8 * 1024,
    max_send_size: 128 * 1024,
    max_sendi_size: 64 * 1024,
    rdma_pipeline_send_length: 0,
    rdma_pipeline_frag_size: i32::MAX as usize,
    min_rdma_pipeline_size: 0,
    exclusivity: 100,
    latency: 100,
    bandwidth: 100,
};

/// Default bound of each peer's send queue, bytes (`btl_tcp_max_queued`).
pub const DEFAULT_MAX_QUEUED: usize = 4 << 20;
/// Most fragments queued to one peer, whatever their size.
pub const MAX_QUEUED_FRAGS: usize = 4096;
/// Default time an accepted connection has to authenticate.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Configuration of the TCP BTL (one per process; every module shares it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcpConfig {
    /// This process's rank in the job.
    pub rank: u32,
    /// The per-job secret every connection must present (distributed by
    /// the launcher or the modex).
    pub secret: [u8; 16],
    /// Limits of each module (`btl_tcp_<limit>`).
    pub limits: Limits,
    /// `btl_tcp_if_include`: interface names or CIDR networks to use.
    pub if_include: Vec<String>,
    /// `btl_tcp_if_exclude`: interface names or CIDR networks not to use.
    pub if_exclude: Vec<String>,
    /// `btl_tcp_links`: modules per interface (1..=255).
    pub links: u32,
    /// `btl_tcp_port_min`: lowest listening port; 0 = ephemeral.
    pub port_min: u16,
    /// `btl_tcp_port_range`: ports tried from `port_min` on.
    pub port_range: u16,
    /// `btl_tcp_sndbuf`: `SO_SNDBUF`, 0 = the OS default.
    pub sndbuf: usize,
    /// `btl_tcp_rcvbuf`: `SO_RCVBUF`, 0 = the OS default.
    pub rcvbuf: usize,
    /// `btl_tcp_max_queued`: bytes queued per peer before `NoResource`.
    pub max_queued: usize,
    /// Time an accepted connection has to present the secret.
    pub handshake_timeout: Duration,
}

impl TcpConfig {
    /// The defaults for `rank` with `secret`.
    pub fn new(rank: u32, secret: [u8; 16]) -> TcpConfig {
        TcpConfig {
            rank,
            secret,
            limits: DEFAULT_LIMITS,
            if_include: Vec::new(),
            if_exclude: Vec::new(),
            links: 1,
            port_min: 0,
            port_range: 64511,
            sndbuf: 0,
            rcvbuf: 0,
            max_queued: DEFAULT_MAX_QUEUED,
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
        }
    }

    /// Registers the tcp BTL's parameters: the limits
    /// (`btl_tcp_eager_limit`...), `btl_tcp_if_include`,
    /// `btl_tcp_if_exclude`, `btl_tcp_links`, `btl_tcp_port_min`,
    /// `btl_tcp_port_range`, `btl_tcp_sndbuf`, `btl_tcp_rcvbuf`,
    /// `btl_tcp_max_queued`.
    pub fn register_params(
        reg: &mut oxmpi_runtime::mca::Registry,
    ) -> Result<(), oxmpi_runtime::mca::McaError> {
        use oxmpi_runtime::mca::ParamSpec;
        DEFAULT_LIMITS.register(reg, "tcp")?;
        reg.register(
            ParamSpec::list("btl", "tcp", "if_include", &[])
                .level(1)
                .help(
                    "Interfaces to use, by name or CIDR network (e.g. \"eth0,10.1.0.0/16\"); \
             exclusive with btl_tcp_if_exclude",
                ),
        )?;
        reg.register(
            ParamSpec::list("btl", "tcp", "if_exclude", &[])
                .level(1)
                .help(
                    "Interfaces not to use, by name or CIDR network; exclusive with \
             btl_tcp_if_include. Loopback is used only if no other interface \
             remains or it is included explicitly",
                ),
        )?;
        reg.register(
            ParamSpec::int("btl", "tcp", "links", 1)
                .level(4)
                .help("Modules (connections per peer) per interface, 1..255"),
        )?;
        reg.register(
            ParamSpec::int("btl", "tcp", "port_min", 0)
                .level(2)
                .help("Lowest listening port; 0 lets the OS choose"),
        )?;
        reg.register(
            ParamSpec::int("btl", "tcp", "port_range", 64511)
                .level(2)
                .help("Ports tried from btl_tcp_port_min on"),
        )?;
        reg.register(
            ParamSpec::size("btl", "tcp", "sndbuf", 0)
                .level(4)
                .help("Socket send buffer size (SO_SNDBUF); 0 = the OS default"),
        )?;
        reg.register(
            ParamSpec::size("btl", "tcp", "rcvbuf", 0)
                .level(4)
                .help("Socket receive buffer size (SO_RCVBUF); 0 = the OS default"),
        )?;
        reg.register(
            ParamSpec::size("btl", "tcp", "max_queued", DEFAULT_MAX_QUEUED as u64)
                .level(5)
                .help("Bytes queued per peer before sends are refused (back-pressure)"),
        )?;
        Ok(())
    }

    /// The configuration a resolved registry describes (after
    /// [`TcpConfig::register_params`] and `apply`). Fails on a value out of
    /// range, a malformed interface list, or both interface lists set.
    pub fn from_registry(
        reg: &oxmpi_runtime::mca::Registry,
        rank: u32,
        secret: [u8; 16],
    ) -> Result<TcpConfig, BtlError> {
        let mca = |e: oxmpi_runtime::mca::McaError| BtlError::Invalid(e.to_string());
        let int_in = |name: &str, lo: i64, hi: i64| -> Result<i64, BtlError> {
            let v = reg.get_int(name).map_err(mca)?;
            if (lo..=hi).contains(&v) {
                Ok(v)
            } else {
                Err(BtlError::Invalid(format!(
                    "{name} = {v} is outside {lo}..={hi}"
                )))
            }
        };
        let size = |name: &str| -> Result<usize, BtlError> {
            let v = reg.get_size(name).map_err(mca)?;
            usize::try_from(v).map_err(|_| BtlError::Invalid(format!("{name} = {v} is too large")))
        };
        let cfg = TcpConfig {
            rank,
            secret,
            limits: Limits::from_registry(reg, "tcp").map_err(mca)?,
            if_include: reg.get_list("btl_tcp_if_include").map_err(mca)?.to_vec(),
            if_exclude: reg.get_list("btl_tcp_if_exclude").map_err(mca)?.to_vec(),
            links: int_in("btl_tcp_links", 1, 255)? as u32,
            port_min: int_in("btl_tcp_port_min", 0, 65535)? as u16,
            port_range: int_in("btl_tcp_port_range", 1, 65535)? as u16,
            sndbuf: size("btl_tcp_sndbuf")?,
            rcvbuf: size("btl_tcp_rcvbuf")?,
            max_queued: size("btl_tcp_max_queued")?,
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
        };
        cfg.filter()?;
        Ok(cfg)
    }

    /// The parsed interface lists (an error if both are set).
    pub fn filter(&self) -> Result<IfFilter, BtlError> {
        IfFilter::new(&self.if_include, &self.if_exclude)
    }

    /// The largest fragment a module sends or accepts, header of the layer
    /// above included.
    pub fn frame_max(&self) -> usize {
        let l = &self.limits;
        l.eager_limit
            .max(l.rndv_eager_limit)
            .max(l.max_send_size)
            .max(l.max_sendi_size)
    }
}
