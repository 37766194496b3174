//! The PML's parameters (`pml_ob1_*`).

use oxmpi_runtime::mca::{McaError, ParamSpec, Registry};

/// [`PmlConfig::idle_sleep_max`]'s default, in microseconds (measured:
/// `docs/perf/log/oversubscribed-waits.md`).
pub const IDLE_SLEEP_MAX_US: u64 = 50;

/// Tunables of the ob1 PML, read from the parameter registry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PmlConfig {
    /// Largest message (its data; the header is not counted, as in Open
    /// MPI's ob1) sent with the BTL's immediate send, when the BTL's
    /// `max_sendi_size` takes it with its header (`pml_ob1_sendi_limit`).
    pub sendi_limit: usize,
    /// Fragments of one request in flight in the send/receive pipeline
    /// (`pml_ob1_send_pipeline_depth`).
    pub send_pipeline_depth: usize,
    /// BTLs one request stripes RDMA over (`pml_ob1_max_rdma_per_request`).
    pub max_rdma_per_request: usize,
    /// BTLs one request's send/receive pipeline uses
    /// (`pml_ob1_max_send_per_range`).
    pub max_send_per_range: usize,
    /// Eager bytes one sender may have parked at one receiver before it
    /// must use rendezvous (`pml_ob1_eager_credits`).
    pub eager_credits: usize,
    /// Keep registrations cached after use (`mpi_leave_pinned`).
    pub leave_pinned: bool,
    /// Cached registrations kept per BTL, unused ones beyond it evicted
    /// least recently used first (`pml_ob1_rcache_max_entries`).
    pub rcache_max_entries: usize,
    /// Iterations a blocking wait polls before it starts yielding
    /// (`pml_ob1_spin_count`); 0 when oversubscribed.
    pub spin_count: u32,
    /// Longest sleep of a blocking wait whose yields hand the core to no
    /// other task, as under a launcher that starts each rank in a session
    /// of its own (`pml_ob1_idle_sleep_max`, microseconds; zero: never
    /// sleep, only yield). A sleep on the BTLs' doorbell ends sooner, when
    /// a peer's send rings it: this bounds what a lost wake-up costs.
    pub idle_sleep_max: std::time::Duration,
    /// Run a progress thread (`pml_ob1_progress_thread`; the runtime
    /// starts it, as for `mpi_async_progress`).
    pub progress_thread: bool,
    /// Smallest RDMA-get message the receiver splits with the sender (it
    /// gets the first part while the sender puts the rest), 0 = never
    /// (`pml_ob1_rdma_split_min`).
    pub rdma_split_min: usize,
    /// Balance split transfers by the measured speed of each side's copy
    /// (`pml_ob1_rdma_split_balance`); off: even halves.
    pub rdma_split_balance: bool,
    /// Before posting a receive from one rank, read what already arrived
    /// from it, so a message that is there goes straight into the receive
    /// (`pml_ob1_recv_arrived`).
    pub recv_arrived: bool,
}

impl Default for PmlConfig {
    fn default() -> Self {
        PmlConfig {
            sendi_limit: 256,
            send_pipeline_depth: 4,
            max_rdma_per_request: 4,
            max_send_per_range: 4,
            eager_credits: 4 << 20,
            leave_pinned: false,
            rcache_max_entries: 256,
            spin_count: 20_000,
            idle_sleep_max: std::time::Duration::from_micros(IDLE_SLEEP_MAX_US),
            progress_thread: false,
            rdma_split_min: 64 << 10,
            rdma_split_balance: true,
            recv_arrived: true,
        }
    }
}

impl PmlConfig {
    /// Registers `pml_ob1_*` with their defaults.
    pub fn register_params(reg: &mut Registry) -> Result<(), McaError> {
        let d = PmlConfig::default();
        reg.register(
            ParamSpec::size("pml", "ob1", "sendi_limit", d.sendi_limit as u64)
                .level(4)
                .help(
                    "largest message (data bytes, header not counted) sent with an immediate send",
                ),
        )?;
        reg.register(
            ParamSpec::int(
                "pml",
                "ob1",
                "send_pipeline_depth",
                d.send_pipeline_depth as i64,
            )
            .level(5)
            .help("fragments of one request in flight in the send/receive pipeline"),
        )?;
        reg.register(
            ParamSpec::int(
                "pml",
                "ob1",
                "max_rdma_per_request",
                d.max_rdma_per_request as i64,
            )
            .level(5)
            .help("BTLs one request stripes RDMA over"),
        )?;
        reg.register(
            ParamSpec::int(
                "pml",
                "ob1",
                "max_send_per_range",
                d.max_send_per_range as i64,
            )
            .level(5)
            .help("BTLs one request's send/receive pipeline uses"),
        )?;
        reg.register(
            ParamSpec::size("pml", "ob1", "eager_credits", d.eager_credits as u64)
                .level(5)
                .help(
                    "eager bytes one sender may park at one receiver before rendezvous is forced",
                ),
        )?;
        reg.register(
            ParamSpec::int("pml", "ob1", "spin_count", i64::from(d.spin_count))
                .level(6)
                .help("polls of a blocking wait before it yields (0 when oversubscribed)"),
        )?;
        reg.register(
            ParamSpec::int(
                "pml",
                "ob1",
                "idle_sleep_max",
                d.idle_sleep_max.as_micros() as i64,
            )
            .level(6)
            .help(
                "longest sleep (us) of a blocking wait whose yields give the core to no other \
                 task (ranks each in a session of their own, as Hydra starts them; a sleep on \
                 the sm doorbell ends when a peer sends); 0: only yield",
            ),
        )?;
        reg.register(
            ParamSpec::size("pml", "ob1", "rdma_split_min", d.rdma_split_min as u64)
                .level(5)
                .help("smallest RDMA-get message whose copy the receiver splits with the sender (0: never)"),
        )?;
        reg.register(
            ParamSpec::bool("pml", "ob1", "rdma_split_balance", d.rdma_split_balance)
                .level(6)
                .help(
                    "divide split copies by the measured speed of each side (false: even halves)",
                ),
        )?;
        reg.register(
            ParamSpec::int(
                "pml",
                "ob1",
                "rcache_max_entries",
                d.rcache_max_entries as i64,
            )
            .level(5)
            .help("cached registrations kept per BTL with mpi_leave_pinned (unused ones past it are evicted)"),
        )?;
        reg.register(
            ParamSpec::bool("pml", "ob1", "recv_arrived", d.recv_arrived)
                .level(6)
                .help("read what already arrived from a receive's source before posting it, so a message there completes the receive at once"),
        )?;
        reg.register(
            ParamSpec::bool("pml", "ob1", "progress_thread", d.progress_thread)
                .level(6)
                .help("drive progress from a background thread (the same thread as mpi_async_progress)"),
        )?;
        Ok(())
    }

    /// Reads the configuration (the registry must hold the parameters of
    /// [`PmlConfig::register_params`] and the runtime's `mpi_leave_pinned`).
    pub fn from_registry(reg: &Registry) -> Result<PmlConfig, McaError> {
        let us = |v: i64| usize::try_from(v.max(1)).unwrap_or(1);
        Ok(PmlConfig {
            sendi_limit: usize::try_from(reg.get_size("pml_ob1_sendi_limit")?).unwrap_or(256),
            send_pipeline_depth: us(reg.get_int("pml_ob1_send_pipeline_depth")?),
            max_rdma_per_request: us(reg.get_int("pml_ob1_max_rdma_per_request")?),
            max_send_per_range: us(reg.get_int("pml_ob1_max_send_per_range")?),
            eager_credits: usize::try_from(reg.get_size("pml_ob1_eager_credits")?)
                .unwrap_or(usize::MAX)
                .max(1024),
            leave_pinned: reg.get_bool("mpi_leave_pinned").unwrap_or(false),
            rcache_max_entries: usize::try_from(reg.get_int("pml_ob1_rcache_max_entries")?.max(0))
                .unwrap_or(0),
            spin_count: u32::try_from(reg.get_int("pml_ob1_spin_count")?.max(0)).unwrap_or(0),
            idle_sleep_max: std::time::Duration::from_micros(
                u64::try_from(reg.get_int("pml_ob1_idle_sleep_max")?.max(0)).unwrap_or(0),
            ),
            progress_thread: reg.get_bool("pml_ob1_progress_thread")?,
            rdma_split_min: usize::try_from(reg.get_size("pml_ob1_rdma_split_min")?)
                .unwrap_or(usize::MAX),
            rdma_split_balance: reg.get_bool("pml_ob1_rdma_split_balance")?,
            recv_arrived: reg.get_bool("pml_ob1_recv_arrived")?,
        })
    }
}
