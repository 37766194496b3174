//! Running one job: spawn the ranks, serve PMI, forward stdio, watch for
//! failures, and end the job cleanly.
//!
//! One thread runs a `mio` event loop over every rank's PMI socket, stdout
//! and stderr pipes and pidfd (which becomes readable when the rank exits),
//! plus a self-pipe for SIGINT/SIGTERM and, with `--pmi-port`, a TCP
//! listener. A second thread copies this launcher's stdin to rank 0 (stdin
//! may be a file, which epoll cannot watch).
//!
//! Contract (what must never happen): a rank left running after the launcher
//! returns; output lines of two ranks mixed within a line; a failing rank
//! whose failure is not reported; a job that outlives its first failure by
//! more than a second (unless `--enable-recovery` keeps it going).
//!
//! Which failure is reported: a rank killed by a signal at once; an abort
//! or a non-zero exit after a short settling time (`SETTLE`), during
//! which a rank killed by a signal takes precedence. A survivor that
//! notices a peer's death (its socket closes) may abort before the
//! launcher has reaped the peer; the peer is the cause, not the survivor.
//!
//! With `--enable-recovery`, a failed rank does not end the job: it is
//! reported, the PMI server stops waiting for it in barriers and lists it
//! in `PMI_dead_processes`, and the survivors that have initialized get
//! SIGUSR1 (as Hydra's `-disable-auto-cleanup` does); the job ends when
//! every rank has, with the first failure's exit status. An abort still
//! ends the job.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use oxmpi_runtime::pmi::server::{ConnId, JobInfo, PmiServer, ServerEvent};
use rustix::process::{Pid, PidfdFlags, Signal};

use crate::args::{BindTo, LaunchArgs};
use crate::sys::{configure_child, ChildSetup};

/// Exit status used when `--timeout` ends the job (as coreutils `timeout`).
pub const EXIT_TIMEOUT: i32 = 124;
/// Exit status for a launcher error (bad arguments, a rank that cannot start).
pub const EXIT_LAUNCH_ERROR: i32 = 1;
/// How long ranks get after SIGTERM before SIGKILL.
const KILL_GRACE: Duration = Duration::from_millis(500);
/// How long to keep draining output pipes after the last rank exited (a
/// rank's own child may hold them open).
const DRAIN_GRACE: Duration = Duration::from_secs(1);
/// A line longer than this is forwarded in pieces rather than buffered.
const MAX_LINE: usize = 1 << 20;
/// How long an abort or a non-zero exit waits before it is reported as the
/// job's failure, so that a rank killed by a signal at the same time (whose
/// death the aborting rank may have noticed first) is named instead.
const SETTLE: Duration = Duration::from_millis(100);

/// Everything the launcher passes to a job besides the command line.
#[derive(Clone, Debug, Default)]
pub struct JobEnv {
    /// Extra environment for every rank (for example the encoded `--mca` list).
    pub vars: Vec<(String, String)>,
}

const KIND_PMI: usize = 0;
const KIND_STDOUT: usize = 1;
const KIND_STDERR: usize = 2;
const KIND_PIDFD: usize = 3;
const KINDS: usize = 4;
/// Signal pipes get tokens `TOKEN_SIGNAL_BASE - i`.
const TOKEN_SIGNAL_BASE: usize = usize::MAX - 16;
/// The signals forwarded to every rank.
const FORWARDED: [i32; 2] = [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM];
const TOKEN_LISTENER: Token = Token(usize::MAX - 2);
/// Accepted `--pmi-port` connections get tokens from here up.
const PORT_CONN_BASE: usize = 1 << 40;

fn rank_token(rank: u32, kind: usize) -> Token {
    Token(rank as usize * KINDS + kind)
}

/// One output stream of one rank, cut into lines.
struct LineStream {
    file: Option<File>,
    buf: Vec<u8>,
}

enum PmiSock {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl PmiSock {
    fn raw_fd(&self) -> RawFd {
        match self {
            PmiSock::Unix(s) => s.as_raw_fd(),
            PmiSock::Tcp(s) => s.as_raw_fd(),
        }
    }
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            PmiSock::Unix(s) => s.read(buf),
            PmiSock::Tcp(s) => s.read(buf),
        }
    }
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            PmiSock::Unix(s) => s.write(buf),
            PmiSock::Tcp(s) => s.write(buf),
        }
    }
}

struct PmiConn {
    sock: PmiSock,
    token: Token,
    outbox: Vec<u8>,
    want_write: bool,
}

struct Rank {
    child: Child,
    pid: Pid,
    pidfd: Option<OwnedFd>,
    status: Option<ExitStatus>,
    initialized: bool,
    finalized: bool,
    out: LineStream,
    err: LineStream,
}

/// A failure waiting to be reported (see [`SETTLE`]).
#[derive(Clone, Debug)]
struct Blame {
    code: i32,
    why: String,
    rank: Option<usize>,
    /// Reported at this time at the latest.
    at: Instant,
}

/// How the job is ending, once it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ending {
    Running,
    /// Ending with this exit status; the first cause has been reported.
    Ending(i32),
}

struct Job {
    poll: Poll,
    ranks: Vec<Rank>,
    server: PmiServer,
    conns: HashMap<u64, PmiConn>,
    conn_by_token: HashMap<Token, u64>,
    listener: Option<TcpListener>,
    next_port_conn: u64,
    /// One self-pipe per forwarded signal (signal-hook writes a byte, not
    /// which signal it was).
    signal_pipes: Vec<(i32, UnixStream)>,
    tag_output: bool,
    ending: Ending,
    kill_at: Option<Instant>,
    killed: bool,
    timeout_at: Option<Instant>,
    timeout: Option<Duration>,
    all_exited_at: Option<Instant>,
    /// An abort or non-zero exit not reported yet (see [`SETTLE`]).
    pending: Option<Blame>,
    /// `--enable-recovery`: a failed rank does not end the job.
    recovery: bool,
    /// With recovery: the exit status of the first failure.
    lost_code: Option<i32>,
}

/// Runs one job to the end and returns the launcher's exit status.
pub fn run(args: &LaunchArgs, env: &JobEnv) -> i32 {
    match Job::start(args, env) {
        Ok(mut job) => job.event_loop(),
        Err(e) => {
            eprintln!("oxmpirun: {e}");
            EXIT_LAUNCH_ERROR
        }
    }
}

/// The CPUs this launcher may run on, in order.
pub fn allowed_cpus() -> Vec<usize> {
    match rustix::thread::sched_getaffinity(None) {
        Ok(set) => (0..CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).collect(),
        Err(_) => (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect(),
    }
}

use rustix::thread::CpuSet;

fn signal_name(sig: i32) -> &'static str {
    match sig {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        _ => "a signal",
    }
}

impl Job {
    fn start(args: &LaunchArgs, env: &JobEnv) -> io::Result<Job> {
        let poll = Poll::new()?;
        let np = args.np;
        let cpus = allowed_cpus();
        let oversubscribed = np as usize > cpus.len();
        let bind = match args.bind_to {
            BindTo::Core => true,
            BindTo::None => false,
            BindTo::Auto => !oversubscribed,
        };
        let launcher = rustix::process::getpid();
        let kvsname = format!("oxmpi-{}", launcher.as_raw_nonzero());
        let server = PmiServer::new(JobInfo {
            size: np,
            kvsname,
            appnum: 0,
            universe_size: np,
            process_mapping: format!("(vector,(0,1,{np}))"),
            debug: false,
        });

        // Signals first, so a SIGINT during start-up is not lost.
        let mut signal_pipes = Vec::new();
        for (i, sig) in FORWARDED.into_iter().enumerate() {
            let (sig_read, sig_write) = UnixStream::pair()?;
            sig_read.set_nonblocking(true)?;
            sig_write.set_nonblocking(true)?;
            signal_hook::low_level::pipe::register(sig, sig_write)?;
            poll.registry().register(
                &mut SourceFd(&sig_read.as_raw_fd()),
                Token(TOKEN_SIGNAL_BASE - i),
                Interest::READABLE,
            )?;
            signal_pipes.push((sig, sig_read));
        }

        let listener = if args.pmi_port {
            // Anyone on this host can connect to the port: the server
            // serves only connections that present the job's secret first,
            // which only the ranks get (`OXMPI_PMI_AUTH`).
            let l = TcpListener::bind("127.0.0.1:0")?;
            l.set_nonblocking(true)?;
            poll.registry().register(
                &mut SourceFd(&l.as_raw_fd()),
                TOKEN_LISTENER,
                Interest::READABLE,
            )?;
            Some(l)
        } else {
            None
        };
        let mut server = server;
        let pmi_auth = match &listener {
            Some(l) => {
                let secret = oxmpi::framework::random_secret()
                    .map_err(|e| io::Error::other(e.to_string()))?;
                let hex: String = secret.iter().map(|b| format!("{b:02x}")).collect();
                server.require_auth(hex.clone());
                Some(format!("{} {hex}", l.local_addr()?))
            }
            None => None,
        };

        let mut job = Job {
            poll,
            ranks: Vec::with_capacity(np as usize),
            server,
            conns: HashMap::new(),
            conn_by_token: HashMap::new(),
            listener,
            next_port_conn: PORT_CONN_BASE as u64,
            signal_pipes,
            tag_output: args.tag_output,
            ending: Ending::Running,
            kill_at: None,
            killed: false,
            timeout_at: None,
            timeout: args.timeout,
            all_exited_at: None,
            pending: None,
            recovery: args.enable_recovery,
            lost_code: None,
        };

        let mut stdin_for_rank0: Option<ChildStdin> = None;
        for rank in 0..np {
            let mut cmd = Command::new(&args.program);
            cmd.args(&args.program_args);
            for (k, v) in &args.export {
                match v {
                    Some(v) => {
                        cmd.env(k, v);
                    }
                    None => {
                        if let Some(v) = std::env::var_os(k) {
                            cmd.env(k, v);
                        }
                    }
                }
            }
            for (k, v) in &env.vars {
                cmd.env(k, v);
            }
            cmd.env("PMI_RANK", rank.to_string())
                .env("PMI_SIZE", np.to_string())
                .env(
                    "OXMPI_OVERSUBSCRIBED",
                    if oversubscribed { "1" } else { "0" },
                )
                .env("OXMPI_LOCAL_RANK", rank.to_string())
                .env("OXMPI_LOCAL_SIZE", np.to_string());
            cmd.stdin(if rank == 0 {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
            let mut child_end = None;
            let mut parent_end = None;
            if let Some(l) = &job.listener {
                cmd.env("PMI_PORT", l.local_addr()?.to_string())
                    .env("PMI_ID", rank.to_string())
                    .env(
                        oxmpi_runtime::pmi::client::AUTH_ENV,
                        pmi_auth.as_deref().unwrap_or_default(),
                    );
                cmd.env_remove("PMI_FD");
            } else {
                let (parent, child) = UnixStream::pair()?;
                cmd.env("PMI_FD", child.as_raw_fd().to_string());
                cmd.env_remove("PMI_PORT");
                cmd.env_remove(oxmpi_runtime::pmi::client::AUTH_ENV);
                child_end = Some(child);
                parent_end = Some(parent);
            }
            configure_child(
                &mut cmd,
                ChildSetup {
                    launcher,
                    keep_fd: child_end.as_ref().map(|c| c.as_raw_fd()),
                    cpu: bind.then(|| cpus[rank as usize % cpus.len()]),
                },
            );
            let mut child = match cmd.spawn() {
                Ok(c) => c,
                Err(e) => {
                    let prog = PathDisplay(&args.program);
                    let e = if matches!(e.raw_os_error(), Some(24 | 23)) {
                        // EMFILE, ENFILE
                        oxmpi_runtime::limits::fd_limit_hint()
                    } else {
                        e.to_string()
                    };
                    job.begin_ending(
                        EXIT_LAUNCH_ERROR,
                        &format!("cannot start rank {rank} ({prog}): {e}"),
                        None,
                    );
                    break;
                }
            };
            drop(child_end);
            let pid = Pid::from_child(&child);
            let pidfd = rustix::process::pidfd_open(pid, PidfdFlags::empty())?;
            job.poll.registry().register(
                &mut SourceFd(&pidfd.as_raw_fd()),
                rank_token(rank, KIND_PIDFD),
                Interest::READABLE,
            )?;
            let mut streams = [None, None];
            for (i, fd) in [
                child.stdout.take().map(OwnedFd::from),
                child.stderr.take().map(OwnedFd::from),
            ]
            .into_iter()
            .enumerate()
            {
                if let Some(fd) = fd {
                    rustix::io::ioctl_fionbio(fd.as_fd(), true)?;
                    job.poll.registry().register(
                        &mut SourceFd(&fd.as_raw_fd()),
                        rank_token(rank, KIND_STDOUT + i),
                        Interest::READABLE,
                    )?;
                    streams[i] = Some(File::from(fd));
                }
            }
            if rank == 0 {
                stdin_for_rank0 = child.stdin.take();
            }
            let [out, err] = streams;
            job.ranks.push(Rank {
                child,
                pid,
                pidfd: Some(pidfd),
                status: None,
                initialized: false,
                finalized: false,
                out: LineStream {
                    file: out,
                    buf: Vec::new(),
                },
                err: LineStream {
                    file: err,
                    buf: Vec::new(),
                },
            });
            if let Some(sock) = parent_end {
                sock.set_nonblocking(true)?;
                let id = u64::from(rank);
                let token = rank_token(rank, KIND_PMI);
                job.poll.registry().register(
                    &mut SourceFd(&sock.as_raw_fd()),
                    token,
                    Interest::READABLE,
                )?;
                job.conns.insert(
                    id,
                    PmiConn {
                        sock: PmiSock::Unix(sock),
                        token,
                        outbox: Vec::new(),
                        want_write: false,
                    },
                );
                job.conn_by_token.insert(token, id);
                job.server.handle_connect(ConnId(id), Some(rank));
            }
        }
        if let Some(stdin) = stdin_for_rank0 {
            forward_stdin(stdin);
        }
        job.timeout_at = job.timeout.map(|t| Instant::now() + t);
        Ok(job)
    }

    fn event_loop(&mut self) -> i32 {
        let mut events = Events::with_capacity(256);
        loop {
            self.pump_server();
            let now = Instant::now();
            if let Some(t) = self.timeout_at {
                if now >= t && self.ending == Ending::Running {
                    let secs = self.timeout.map_or(0.0, |d| d.as_secs_f64());
                    self.begin_ending(
                        EXIT_TIMEOUT,
                        &format!("the job exceeded --timeout {secs} s; ending it"),
                        None,
                    );
                }
            }
            if let Some(t) = self.kill_at {
                if now >= t && !self.killed {
                    self.signal_all(Signal::KILL);
                    self.killed = true;
                }
            }
            let all_exited = self.ranks.iter().all(|r| r.status.is_some());
            if self
                .pending
                .as_ref()
                .is_some_and(|b| now >= b.at || all_exited)
            {
                let b = self.pending.take().expect("checked");
                self.fail(b);
            }
            if all_exited {
                let since = *self.all_exited_at.get_or_insert(now);
                let open = self
                    .ranks
                    .iter()
                    .any(|r| r.out.file.is_some() || r.err.file.is_some());
                if !open || now.duration_since(since) >= DRAIN_GRACE {
                    break;
                }
            }
            let deadline = [
                self.timeout_at,
                self.kill_at.filter(|_| !self.killed),
                self.all_exited_at.map(|t| t + DRAIN_GRACE),
                self.pending.as_ref().map(|b| b.at),
            ]
            .into_iter()
            .flatten()
            .min();
            let wait = deadline.map(|d| d.saturating_duration_since(now));
            if let Err(e) = self.poll.poll(&mut events, wait) {
                if e.kind() != io::ErrorKind::Interrupted {
                    self.begin_ending(EXIT_LAUNCH_ERROR, &format!("event loop failed: {e}"), None);
                    self.signal_all(Signal::KILL);
                }
                continue;
            }
            for ev in events.iter() {
                self.dispatch(ev.token(), ev.is_writable());
            }
        }
        // Flush partial last lines and make sure no rank's process group
        // survives us (a rank may have left children behind).
        for r in 0..self.ranks.len() {
            self.flush_partial(r, KIND_STDOUT);
            self.flush_partial(r, KIND_STDERR);
            let _ = rustix::process::kill_process_group(self.ranks[r].pid, Signal::KILL);
        }
        match self.ending {
            Ending::Running => self.lost_code.unwrap_or(0),
            Ending::Ending(code) => code,
        }
    }

    fn dispatch(&mut self, token: Token, writable: bool) {
        if token.0 <= TOKEN_SIGNAL_BASE && token.0 > TOKEN_SIGNAL_BASE - FORWARDED.len() {
            self.on_signal(TOKEN_SIGNAL_BASE - token.0);
            return;
        }
        if token == TOKEN_LISTENER {
            self.accept_port_conns();
            return;
        }
        if let Some(&id) = self.conn_by_token.get(&token) {
            if writable {
                self.flush_conn(id);
            }
            self.read_conn(id);
            return;
        }
        let rank = (token.0 / KINDS) as u32;
        if rank as usize >= self.ranks.len() {
            return;
        }
        match token.0 % KINDS {
            KIND_STDOUT | KIND_STDERR => self.read_output(rank as usize, token.0 % KINDS),
            KIND_PIDFD => self.reap(rank as usize),
            _ => {}
        }
    }

    fn on_signal(&mut self, index: usize) {
        let mut buf = [0u8; 64];
        let (sig, pipe) = &mut self.signal_pipes[index];
        let sig = *sig;
        if pipe.read(&mut buf).unwrap_or(0) == 0 {
            return;
        }
        if self.ending == Ending::Running {
            self.ending = Ending::Ending(128 + sig);
            eprintln!("oxmpirun: received {}; ending the job", signal_name(sig));
            // Forward the same signal; SIGKILL whatever is left after the grace.
            if let Some(s) = Signal::from_named_raw(sig) {
                self.signal_all(s);
            }
            self.kill_at = Some(Instant::now() + KILL_GRACE);
        } else {
            // A second interrupt: no more grace.
            self.signal_all(Signal::KILL);
            self.killed = true;
        }
    }

    fn accept_port_conns(&mut self) {
        let Some(listener) = &self.listener else {
            return;
        };
        loop {
            match listener.accept() {
                Ok((sock, _)) => {
                    if sock.set_nonblocking(true).is_err() {
                        continue;
                    }
                    let _ = sock.set_nodelay(true);
                    let id = self.next_port_conn;
                    self.next_port_conn += 1;
                    let token = Token(id as usize);
                    if self
                        .poll
                        .registry()
                        .register(&mut SourceFd(&sock.as_raw_fd()), token, Interest::READABLE)
                        .is_err()
                    {
                        continue;
                    }
                    self.conns.insert(
                        id,
                        PmiConn {
                            sock: PmiSock::Tcp(sock),
                            token,
                            outbox: Vec::new(),
                            want_write: false,
                        },
                    );
                    self.conn_by_token.insert(token, id);
                    self.server.handle_connect(ConnId(id), None);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::warn!("accepting a PMI connection failed: {e}");
                    return;
                }
            }
        }
    }

    fn read_conn(&mut self, id: u64) {
        let mut buf = [0u8; 4096];
        loop {
            let Some(conn) = self.conns.get_mut(&id) else {
                return;
            };
            match conn.sock.read(&mut buf) {
                Ok(0) => {
                    self.close_conn(id);
                    return;
                }
                Ok(n) => self.server.handle_bytes(ConnId(id), &buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    self.close_conn(id);
                    return;
                }
            }
        }
    }

    fn close_conn(&mut self, id: u64) {
        if let Some(conn) = self.conns.remove(&id) {
            let _ = self
                .poll
                .registry()
                .deregister(&mut SourceFd(&conn.sock.raw_fd()));
            self.conn_by_token.remove(&conn.token);
            self.server.handle_disconnect(ConnId(id));
        }
    }

    fn flush_conn(&mut self, id: u64) {
        let Some(conn) = self.conns.get_mut(&id) else {
            return;
        };
        while !conn.outbox.is_empty() {
            match conn.sock.write(&conn.outbox) {
                Ok(n) => {
                    conn.outbox.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    // The rank's end is gone; its exit is reported via pidfd.
                    conn.outbox.clear();
                    break;
                }
            }
        }
        let want = !conn.outbox.is_empty();
        if want != conn.want_write {
            conn.want_write = want;
            let interest = if want {
                Interest::READABLE | Interest::WRITABLE
            } else {
                Interest::READABLE
            };
            let fd = conn.sock.raw_fd();
            let _ = self
                .poll
                .registry()
                .reregister(&mut SourceFd(&fd), conn.token, interest);
        }
    }

    /// Moves replies from the PMI server core to the sockets and acts on its
    /// events.
    fn pump_server(&mut self) {
        while let Some((ConnId(id), bytes)) = self.server.poll_transmit() {
            if let Some(conn) = self.conns.get_mut(&id) {
                conn.outbox.extend_from_slice(&bytes);
                self.flush_conn(id);
            }
        }
        while let Some(ev) = self.server.poll_event() {
            match ev {
                ServerEvent::Initialized {
                    rank: Some(rank), ..
                } => {
                    if let Some(r) = self.ranks.get_mut(rank as usize) {
                        r.initialized = true;
                    }
                }
                ServerEvent::Finalized {
                    rank: Some(rank), ..
                } => {
                    if let Some(r) = self.ranks.get_mut(rank as usize) {
                        r.finalized = true;
                    }
                }
                ServerEvent::Abort {
                    rank,
                    exitcode,
                    message,
                    ..
                } => {
                    let rank_index = rank.map(|r| r as usize);
                    let rank = rank.map_or_else(
                        || "an unidentified rank".to_string(),
                        |r| format!("rank {r}"),
                    );
                    let msg = if message.is_empty() {
                        format!("{rank} called abort with exit code {exitcode}")
                    } else {
                        format!("{rank} called abort with exit code {exitcode}: {message}")
                    };
                    self.blame(Blame {
                        code: exitcode,
                        why: msg,
                        rank: rank_index,
                        at: Instant::now() + SETTLE,
                    });
                }
                ServerEvent::ProtocolError {
                    conn,
                    rank,
                    reason,
                    ignored,
                } => {
                    tracing::warn!(
                        "PMI protocol error on connection {} (rank {rank:?}): {reason}",
                        conn.0
                    );
                    // A port connection the server gave up on (a stranger
                    // without the secret, or garbage): closed, so it holds
                    // nothing of ours.
                    if ignored && conn.0 >= PORT_CONN_BASE as u64 {
                        self.close_conn(conn.0);
                    }
                }
                ServerEvent::Initialized { .. }
                | ServerEvent::Finalized { .. }
                | ServerEvent::Disconnected { .. } => {}
            }
        }
    }

    fn read_output(&mut self, rank: usize, kind: usize) {
        let mut buf = [0u8; 16 * 1024];
        loop {
            let stream = self.stream(rank, kind);
            let Some(file) = stream.file.as_mut() else {
                return;
            };
            match file.read(&mut buf) {
                Ok(0) => {
                    let fd = file.as_raw_fd();
                    let _ = self.poll.registry().deregister(&mut SourceFd(&fd));
                    self.stream(rank, kind).file = None;
                    self.flush_partial(rank, kind);
                    return;
                }
                Ok(n) => {
                    let stream = self.stream(rank, kind);
                    stream.buf.extend_from_slice(&buf[..n]);
                    self.emit_lines(rank, kind);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    let stream = self.stream(rank, kind);
                    if let Some(f) = stream.file.take() {
                        let _ = self
                            .poll
                            .registry()
                            .deregister(&mut SourceFd(&f.as_raw_fd()));
                    }
                    return;
                }
            }
        }
    }

    fn stream(&mut self, rank: usize, kind: usize) -> &mut LineStream {
        let r = &mut self.ranks[rank];
        if kind == KIND_STDOUT {
            &mut r.out
        } else {
            &mut r.err
        }
    }

    /// Writes every complete line buffered for one stream, each with one
    /// `write_all` on our own stream, so lines of different ranks never mix.
    fn emit_lines(&mut self, rank: usize, kind: usize) {
        let tag = self.tag_output;
        let stream = self.stream(rank, kind);
        let end = match stream.buf.iter().rposition(|&b| b == b'\n') {
            Some(i) => i + 1,
            None if stream.buf.len() >= MAX_LINE => stream.buf.len(),
            None => return,
        };
        let chunk: Vec<u8> = stream.buf.drain(..end).collect();
        write_lines(rank, kind, tag, &chunk);
    }

    fn flush_partial(&mut self, rank: usize, kind: usize) {
        let tag = self.tag_output;
        let stream = self.stream(rank, kind);
        if stream.buf.is_empty() {
            return;
        }
        let mut chunk = std::mem::take(&mut stream.buf);
        chunk.push(b'\n');
        write_lines(rank, kind, tag, &chunk);
    }

    fn reap(&mut self, rank: usize) {
        let r = &mut self.ranks[rank];
        let status = match r.child.try_wait() {
            Ok(Some(s)) => s,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!("waiting for rank {rank} failed: {e}");
                return;
            }
        };
        r.status = Some(status);
        // The rank's last PMI messages (abort, finalize) may still sit in its
        // socket: handle them before judging how it ended, or an abort would
        // be reported as a plain non-zero exit.
        let ids: Vec<u64> = self.conns.keys().copied().collect();
        for id in ids {
            self.read_conn(id);
        }
        self.pump_server();
        let r = &mut self.ranks[rank];
        if let Some(fd) = r.pidfd.take() {
            let _ = self
                .poll
                .registry()
                .deregister(&mut SourceFd(&fd.as_raw_fd()));
        }
        let pid = r.pid.as_raw_nonzero();
        if let Some(sig) = status.signal() {
            // Killed: the cause, reported now (over any settling blame).
            let why = format!(
                "rank {rank} (pid {pid}) was killed by signal {sig} ({})",
                signal_name(sig)
            );
            let b = Blame {
                code: 128 + sig,
                why,
                rank: Some(rank),
                at: Instant::now(),
            };
            if self.ending == Ending::Running && !self.recovery {
                self.pending = None;
            }
            self.fail(b);
            return;
        }
        let failure = {
            match status.code() {
                Some(0) if r.initialized && !r.finalized => Some((
                    1,
                    format!(
                        "rank {rank} (pid {pid}) exited with status 0 without calling finalize"
                    ),
                )),
                Some(0) | None => None,
                Some(code) => Some((
                    code,
                    format!("rank {rank} (pid {pid}) exited with status {code}"),
                )),
            }
        };
        if let Some((code, why)) = failure {
            self.blame(Blame {
                code,
                why,
                rank: Some(rank),
                at: Instant::now() + SETTLE,
            });
        }
    }

    /// A failure to report once [`SETTLE`] has passed, unless one is
    /// waiting already (the first stands) or the job is ending. With
    /// `--enable-recovery` a rank's exit is reported at once (it ends
    /// nothing); an abort waits as it would without.
    fn blame(&mut self, b: Blame) {
        if self.ending != Ending::Running {
            return;
        }
        let is_exit = b.rank.is_some_and(|r| self.ranks[r].status.is_some());
        if self.recovery && is_exit {
            self.fail(b);
        } else if self.pending.is_none() {
            self.pending = Some(b);
        }
    }

    /// Reports failure `b`. Without recovery (or for an abort, whose rank
    /// is still running) it ends the job; with recovery a rank that has
    /// exited is only reported and its death made known to the others.
    fn fail(&mut self, b: Blame) {
        let exited = b.rank.filter(|&r| self.ranks[r].status.is_some());
        match exited {
            Some(rank) if self.recovery && self.ending == Ending::Running => {
                self.lost_code.get_or_insert(b.code);
                eprintln!(
                    "oxmpirun: {}; the job goes on without it (--enable-recovery)",
                    b.why
                );
                self.server.handle_rank_lost(rank as u32);
                self.pump_server();
                // Hydra's notice: the survivors' handlers ask for
                // PMI_dead_processes (an uninitialized rank could not
                // handle the signal, and finds out at start-up).
                for r in &self.ranks {
                    if r.status.is_none() && r.initialized {
                        let _ = rustix::process::kill_process(r.pid, Signal::USR1);
                    }
                }
            }
            _ => self.begin_ending(b.code, &b.why, b.rank),
        }
    }

    /// Records the first failure, reports it, and starts ending the job:
    /// SIGTERM now, SIGKILL after [`KILL_GRACE`]. `culprit`, the rank that
    /// failed, is not counted among the ranks still to end.
    fn begin_ending(&mut self, code: i32, why: &str, culprit: Option<usize>) {
        if self.ending != Ending::Running {
            return;
        }
        self.ending = Ending::Ending(code);
        let running = (0..self.ranks.len())
            .filter(|&r| self.ranks[r].status.is_none() && Some(r) != culprit)
            .count();
        if running > 0 {
            eprintln!("oxmpirun: {why}; ending the {running} remaining rank(s)");
        } else {
            eprintln!("oxmpirun: {why}");
        }
        self.signal_all(Signal::TERM);
        self.kill_at = Some(Instant::now() + KILL_GRACE);
    }

    fn signal_all(&self, sig: Signal) {
        for r in &self.ranks {
            if r.status.is_none() {
                let _ = rustix::process::kill_process_group(r.pid, sig);
            }
        }
    }
}

fn write_lines(rank: usize, kind: usize, tag: bool, chunk: &[u8]) {
    let label = if kind == KIND_STDOUT {
        "stdout"
    } else {
        "stderr"
    };
    let bytes: std::borrow::Cow<'_, [u8]> = if tag {
        let mut out = Vec::with_capacity(chunk.len() + 32);
        for line in chunk.split_inclusive(|&b| b == b'\n') {
            out.extend_from_slice(format!("[1,{rank}]<{label}>:").as_bytes());
            out.extend_from_slice(line);
        }
        out.into()
    } else {
        chunk.into()
    };
    // A closed stdout (for example `oxmpirun ... | head -1`) must not stop
    // the job: the output is dropped.
    let _ = if kind == KIND_STDOUT {
        let mut o = io::stdout().lock();
        o.write_all(&bytes).and_then(|()| o.flush())
    } else {
        io::stderr().lock().write_all(&bytes)
    };
}

/// Copies this launcher's stdin to rank 0 on a thread of its own (stdin may
/// be a regular file, which epoll cannot watch). Rank 0 sees end of file
/// when our stdin ends.
fn forward_stdin(mut to_rank0: ChildStdin) {
    let _ = std::thread::Builder::new()
        .name("oxmpirun-stdin".into())
        .spawn(move || {
            let mut buf = [0u8; 64 * 1024];
            let mut stdin = io::stdin().lock();
            loop {
                match stdin.read(&mut buf) {
                    Ok(0) => return,
                    Ok(n) => {
                        if to_rank0.write_all(&buf[..n]).is_err() {
                            return;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => return,
                }
            }
        });
}

struct PathDisplay<'a>(&'a OsString);

impl std::fmt::Display for PathDisplay<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0.to_string_lossy())
    }
}
