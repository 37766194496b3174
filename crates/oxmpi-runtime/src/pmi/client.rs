//! The PMI client a rank uses to talk to its launcher.
//!
//! Contract:
//! * [`Pmi::from_env`] finds the server the way MPICH's clients do
//!   ([`PmiEnv`]): an inherited socket in `PMI_FD`, else TCP to `PMI_PORT`
//!   (`host:port`, identified by `PMI_ID`), else singleton mode (size 1,
//!   rank 0, an in-process key-value store), unless the environment shows
//!   a launcher of several processes that gave none of these
//!   ([`ForeignLauncher`]: `srun --mpi=pmix`, `srun --mpi=none`, Open MPI's
//!   `mpirun`): that is [`PmiError::ForeignLauncher`], never N silent
//!   singletons ([`PmiConfig::singleton_under_foreign_launcher`] allows
//!   them). The protocol version is the
//!   caller's choice ([`PmiConfig`]); PMI-2 starts with the PMI-1 line
//!   `cmd=init pmi_version=2 pmi_subversion=0`.
//! * Strict request/reply: one `write()` per command, no pipelining, PMI-1
//!   lines at most 1024 bytes (Slurm reads each request with one `read()`).
//! * [`Pmi::put`] / [`Pmi::get`] carry arbitrary bytes: values are base64url
//!   and split over several keys when longer than the server allows (see
//!   [`super::value`]). Keys are `[A-Za-z0-9_-]`, at most
//!   [`super::value::MAX_USER_KEY`] bytes.
//! * A missing key is `Ok(None)`, never a hang (PMI-1 servers answer a
//!   missing key with `rc != 0`, which is read as "not found").
//! * Puts are visible to other ranks only after every rank called
//!   [`Pmi::fence`].

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;

use super::foreign::ForeignLauncher;
use super::value::{self, Head};
use super::wire::{self, Align, Decoder, Expect, Message, Protocol, MAX_V1_LINE};
use crate::topology::ProcessMapping;

/// Which PMI protocol the client speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PmiVersion {
    /// PMI-1.1 (what every launcher supports).
    #[default]
    V1,
    /// PMI-2.0.
    V2,
}

/// Choices the caller makes (wired to the `pmi_version` MCA parameter).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PmiConfig {
    /// Protocol version to speak when a server is present.
    pub version: PmiVersion,
    /// Run as a singleton even when the environment shows a launcher that
    /// started several processes without a PMI we speak (the
    /// `pmi_foreign_launcher` parameter set to `singleton`); by default
    /// that is an error ([`PmiError::ForeignLauncher`]).
    pub singleton_under_foreign_launcher: bool,
}

impl PmiConfig {
    /// Reads the `pmi_version` parameter of a resolved registry.
    ///
    /// ```
    /// use oxmpi_runtime::mca::{self, Registry, Sources};
    /// use oxmpi_runtime::pmi::{PmiConfig, PmiVersion};
    /// let mut reg = Registry::new();
    /// mca::register_runtime_params(&mut reg).unwrap();
    /// reg.apply(&Sources::new().with_env("pmi_version", "2")).unwrap();
    /// assert_eq!(PmiConfig::from_registry(&reg).unwrap().version, PmiVersion::V2);
    /// ```
    pub fn from_registry(
        reg: &crate::mca::Registry,
    ) -> std::result::Result<Self, crate::mca::McaError> {
        let version = match reg.get_enum(crate::mca::PMI_VERSION)? {
            "2" => PmiVersion::V2,
            _ => PmiVersion::V1,
        };
        let singleton_under_foreign_launcher =
            reg.get_enum(crate::mca::PMI_FOREIGN_LAUNCHER)? == "singleton";
        Ok(PmiConfig {
            version,
            singleton_under_foreign_launcher,
        })
    }
}

/// The PMI-related environment variables, read once so tests can build one
/// without touching the process environment. Empty values count as unset.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PmiEnv {
    /// `PMI_FD`: number of the inherited socket.
    pub fd: Option<String>,
    /// `PMI_PORT`: `host:port` of the server.
    pub port: Option<String>,
    /// `PMI_ID`: identity to send in `initack` (the rank, for Hydra).
    pub id: Option<String>,
    /// `PMI_RANK`.
    pub rank: Option<String>,
    /// `PMI_SIZE`.
    pub size: Option<String>,
    /// `PMI_JOBID` (Slurm).
    pub jobid: Option<String>,
    /// `OXMPI_PMI_AUTH`: `<PMI_PORT value> <secret>`, set by `oxmpirun
    /// --pmi-port`: the secret to present to that port (and to no other).
    pub auth: Option<String>,
    /// A launcher of several processes that gave this one no PMI server
    /// we speak (read from its other variables, see [`ForeignLauncher`]).
    pub foreign: Option<ForeignLauncher>,
}

/// The variable `oxmpirun --pmi-port` hands its ranks the PMI port's secret
/// in ([`PmiEnv::auth`]).
pub const AUTH_ENV: &str = "OXMPI_PMI_AUTH";

impl PmiEnv {
    /// Reads the variables from the process environment.
    pub fn from_process() -> Self {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Reads the variables through `lookup` (name -> value).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Self {
        let get = |k: &str| lookup(k).filter(|v| !v.is_empty());
        PmiEnv {
            fd: get("PMI_FD"),
            port: get("PMI_PORT"),
            id: get("PMI_ID"),
            rank: get("PMI_RANK"),
            size: get("PMI_SIZE"),
            jobid: get("PMI_JOBID"),
            auth: get(AUTH_ENV),
            foreign: ForeignLauncher::detect(&lookup),
        }
    }

    /// Builds one from `(name, value)` pairs, e.g. `[("PMI_FD", "5")]`.
    pub fn from_pairs(pairs: &[(&str, &str)]) -> Self {
        Self::from_lookup(|k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        })
    }

    /// True when no server is advertised (singleton mode, or an error when
    /// [`PmiEnv::foreign`] names a launcher).
    pub fn is_singleton(&self) -> bool {
        self.fd.is_none() && self.port.is_none()
    }
}

/// Everything that can go wrong talking PMI. Messages name the cause.
#[derive(Debug, thiserror::Error)]
pub enum PmiError {
    /// A needed environment variable is not set.
    #[error("PMI environment: {0} is not set")]
    MissingEnv(&'static str),
    /// An environment variable has a value that cannot be used.
    #[error("PMI environment: {var}={value:?} is invalid: {reason}")]
    BadEnv {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
        /// Why it is unusable.
        reason: String,
    },
    /// Reading or writing the PMI socket failed.
    #[error("PMI connection: {context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The I/O error.
        source: io::Error,
    },
    /// The server closed the connection before replying.
    #[error("PMI server closed the connection while we waited for the reply to {waiting_for}")]
    Closed {
        /// The command whose reply was awaited.
        waiting_for: String,
    },
    /// The server answered with `rc != 0`.
    #[error("PMI server answered {cmd} with rc={rc} msg={msg:?}")]
    Server {
        /// The command.
        cmd: String,
        /// Its return code.
        rc: i64,
        /// The server's `msg=` / `errmsg=`, if any.
        msg: String,
    },
    /// The reply could not be understood.
    #[error("malformed PMI reply to {cmd}: {reason}")]
    Malformed {
        /// The command.
        cmd: String,
        /// What was wrong.
        reason: String,
    },
    /// The caller's key is not acceptable.
    #[error("invalid PMI key {key:?}: {reason}")]
    BadKey {
        /// The key.
        key: String,
        /// Why.
        reason: String,
    },
    /// A stored value could not be reassembled.
    #[error("PMI value under {key:?} is corrupt: {reason}")]
    Corrupt {
        /// The key.
        key: String,
        /// Why.
        reason: String,
    },
    /// A key another rank should have put is absent (from [`super::Modex::get`]).
    #[error("PMI key {key:?} of rank {rank} is missing")]
    Missing {
        /// The rank whose key was read.
        rank: u32,
        /// The key.
        key: String,
    },
    /// The operation does not exist in the protocol in use.
    #[error("{0} is not supported with this PMI version")]
    Unsupported(&'static str),
    /// No PMI server we speak, and the environment shows a launcher that
    /// started several processes: each would run alone as a singleton.
    #[error(
        "{0} (as started, every process would run alone as rank 0 of 1; \
         OXMPI_MCA_pmi_foreign_launcher=singleton runs them so anyway)"
    )]
    ForeignLauncher(ForeignLauncher),
}

type Result<T> = std::result::Result<T, PmiError>;

enum Stream {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Stream {
    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.write_all(bytes),
            Stream::Tcp(s) => s.write_all(bytes),
        }
    }
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.read(buf),
            Stream::Tcp(s) => s.read(buf),
        }
    }
}

/// A connection to a PMI server, after the handshake.
struct Wire {
    stream: Stream,
    dec: Decoder,
    proto: Protocol,
    /// PMI-1 kvsname or PMI-2 jobid.
    kvsname: String,
    /// Longest stored value we send.
    max_value: usize,
}

impl Wire {
    fn send(&mut self, msg: &Message, proto: Protocol) -> Result<()> {
        let bytes = match proto {
            Protocol::V1 => wire::encode_v1(msg),
            Protocol::V2 => wire::encode_v2(msg, Align::Right),
        }
        .map_err(|e| PmiError::Malformed {
            cmd: msg.cmd.clone(),
            reason: format!("cannot encode request: {e}"),
        })?;
        if proto == Protocol::V1 && bytes.len() > MAX_V1_LINE {
            return Err(PmiError::Malformed {
                cmd: msg.cmd.clone(),
                reason: format!("request of {} bytes exceeds {MAX_V1_LINE}", bytes.len()),
            });
        }
        // One write per command: Slurm reads each request with one read().
        self.stream
            .write_all(&bytes)
            .map_err(|source| PmiError::Io {
                context: format!("sending {}", msg.cmd),
                source,
            })
    }

    fn recv(&mut self, proto: Protocol, waiting_for: &str) -> Result<Message> {
        let expect = match proto {
            Protocol::V1 => Expect::V1,
            Protocol::V2 => Expect::V2,
        };
        let mut buf = [0u8; 4096];
        loop {
            match self.dec.next_frame(expect) {
                Ok(Some(frame)) => {
                    return frame.message.map_err(|e| PmiError::Malformed {
                        cmd: waiting_for.to_string(),
                        reason: e.to_string(),
                    })
                }
                Ok(None) => {}
                Err(e) => {
                    return Err(PmiError::Malformed {
                        cmd: waiting_for.to_string(),
                        reason: e.to_string(),
                    })
                }
            }
            let n = match self.stream.read(&mut buf) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(source) => {
                    return Err(PmiError::Io {
                        context: format!("waiting for the reply to {waiting_for}"),
                        source,
                    })
                }
            };
            if n == 0 {
                return Err(PmiError::Closed {
                    waiting_for: waiting_for.to_string(),
                });
            }
            self.dec.push(&buf[..n]);
        }
    }

    /// Sends `msg` and reads the reply, which must be `reply_cmd`. A reply
    /// with `rc != 0` is returned as is (callers decide with [`check_rc`]),
    /// unless its command name is also wrong.
    fn request_in(&mut self, msg: Message, reply_cmd: &str, proto: Protocol) -> Result<Message> {
        self.send(&msg, proto)?;
        let reply = self.recv(proto, &msg.cmd)?;
        if reply.cmd != reply_cmd {
            check_rc(&reply, &msg.cmd)?;
            return Err(PmiError::Malformed {
                cmd: msg.cmd,
                reason: format!("expected {reply_cmd}, got {}", reply.cmd),
            });
        }
        Ok(reply)
    }

    fn request(&mut self, msg: Message, reply_cmd: &str) -> Result<Message> {
        let proto = self.proto;
        self.request_in(msg, reply_cmd, proto)
    }

    /// Like [`Wire::request`] and the reply must have `rc` 0 (or none).
    fn request_ok(&mut self, msg: Message, reply_cmd: &str) -> Result<Message> {
        let cmd = msg.cmd.clone();
        let reply = self.request(msg, reply_cmd)?;
        check_rc(&reply, &cmd)?;
        Ok(reply)
    }
}

fn check_rc(reply: &Message, cmd: &str) -> Result<()> {
    match reply.rc() {
        None | Some(Ok(0)) => Ok(()),
        Some(Ok(rc)) => Err(PmiError::Server {
            cmd: cmd.to_string(),
            rc,
            msg: reply
                .get("msg")
                .or_else(|| reply.get("errmsg"))
                .unwrap_or("")
                .to_string(),
        }),
        Some(Err(text)) => Err(PmiError::Malformed {
            cmd: cmd.to_string(),
            reason: format!("rc={text:?} is not an integer"),
        }),
    }
}

fn field<'a>(reply: &'a Message, key: &str, cmd: &str) -> Result<&'a str> {
    reply.get(key).ok_or_else(|| PmiError::Malformed {
        cmd: cmd.to_string(),
        reason: format!("reply has no {key}="),
    })
}

fn num_field<T: std::str::FromStr>(reply: &Message, key: &str, cmd: &str) -> Result<T> {
    let text = field(reply, key, cmd)?;
    text.trim().parse().map_err(|_| PmiError::Malformed {
        cmd: cmd.to_string(),
        reason: format!("{key}={text:?} is not a number"),
    })
}

fn env_num(var: &'static str, value: Option<&String>) -> Result<u32> {
    let value = value.ok_or(PmiError::MissingEnv(var))?;
    value.trim().parse().map_err(|_| PmiError::BadEnv {
        var,
        value: value.clone(),
        reason: "not a non-negative integer".into(),
    })
}

/// Free text (the abort message) as a PMI value of protocol `proto`, at
/// most 512 characters: PMI-1 escapes spaces as MPICH's client does
/// ([`wire::escape_v1`]); PMI-2 values may hold spaces and end at `;`,
/// which becomes `,`. Control characters become spaces; never empty.
fn free_text(text: &str, proto: Protocol) -> String {
    let text: String = text
        .chars()
        .take(512)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let text = text.trim();
    if text.is_empty() {
        return "-".into();
    }
    match proto {
        Protocol::V1 => wire::escape_v1(text),
        Protocol::V2 => text.replace(';', ","),
    }
}

enum Backend {
    Wire(Box<Wire>),
    Singleton {
        kvs: HashMap<String, String>,
        node: HashMap<String, String>,
    },
}

/// A PMI client: this rank's identity in the job and access to the job's
/// key-value store.
pub struct Pmi {
    backend: Backend,
    rank: u32,
    size: u32,
    appnum: u32,
    universe_size: u32,
    kvsname: String,
    version: Option<PmiVersion>,
}

impl std::fmt::Debug for Pmi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pmi")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("appnum", &self.appnum)
            .field("kvsname", &self.kvsname)
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

/// Mapping reported in singleton mode.
const SINGLETON_MAPPING: &str = "(vector,(0,1,1))";

impl Pmi {
    /// Connects using the process environment (see [`PmiEnv`]).
    pub fn from_env(config: PmiConfig) -> Result<Pmi> {
        Self::from_pmi_env(config, &PmiEnv::from_process())
    }

    /// Connects using an explicit environment.
    pub fn from_pmi_env(config: PmiConfig, env: &PmiEnv) -> Result<Pmi> {
        if let Some(fd_text) = &env.fd {
            let fd: i32 = fd_text.trim().parse().map_err(|_| PmiError::BadEnv {
                var: "PMI_FD",
                value: fd_text.clone(),
                reason: "not a descriptor number".into(),
            })?;
            let owned = super::fd::adopt_inherited(fd).map_err(|e| PmiError::BadEnv {
                var: "PMI_FD",
                value: fd_text.clone(),
                reason: format!("not an open descriptor: {e}"),
            })?;
            return Self::handshake(config, env, Stream::Unix(UnixStream::from(owned)), false);
        }
        if let Some(port) = &env.port {
            let bad = |reason: String| PmiError::BadEnv {
                var: "PMI_PORT",
                value: port.clone(),
                reason,
            };
            let (host, p) = port
                .rsplit_once(':')
                .ok_or_else(|| bad("expected host:port".into()))?;
            let p: u16 = p.parse().map_err(|_| bad("port is not a number".into()))?;
            let host = host.trim_start_matches('[').trim_end_matches(']');
            let mut stream =
                TcpStream::connect((host, p)).map_err(|e| bad(format!("connect: {e}")))?;
            let _ = stream.set_nodelay(true);
            // oxmpirun's port wants its secret first (see `AUTH_ENV`); a
            // secret given for another port (an enclosing job's) is not
            // sent anywhere else.
            let secret = env.auth.as_deref().and_then(|a| {
                let (for_port, secret) = a.split_once(' ')?;
                (for_port == port).then_some(secret)
            });
            if let Some(secret) = secret {
                use std::io::Write;
                let line = wire::encode_v1(&Message::new("auth").arg("secret", secret))
                    .map_err(|e| bad(format!("the secret in {AUTH_ENV}: {e}")))?;
                stream
                    .write_all(&line)
                    .map_err(|e| bad(format!("sending the port's secret: {e}")))?;
            }
            return Self::handshake(config, env, Stream::Tcp(stream), true);
        }
        match &env.foreign {
            Some(f) if !config.singleton_under_foreign_launcher => {
                Err(PmiError::ForeignLauncher(f.clone()))
            }
            _ => Ok(Self::singleton()),
        }
    }

    /// A singleton: size 1, rank 0, an in-process key-value store.
    pub fn singleton() -> Pmi {
        Pmi {
            backend: Backend::Singleton {
                kvs: HashMap::new(),
                node: HashMap::new(),
            },
            rank: 0,
            size: 1,
            appnum: 0,
            universe_size: 1,
            kvsname: "singleton_kvs".into(),
            version: None,
        }
    }

    fn handshake(config: PmiConfig, env: &PmiEnv, stream: Stream, by_port: bool) -> Result<Pmi> {
        let mut w = Wire {
            stream,
            dec: Decoder::new(),
            proto: Protocol::V1,
            kvsname: String::new(),
            max_value: 900,
        };
        match config.version {
            PmiVersion::V1 => Self::handshake_v1(w, env, by_port),
            PmiVersion::V2 => {
                let init = Message::new("init")
                    .arg("pmi_version", 2)
                    .arg("pmi_subversion", 0);
                let reply = w.request_ok(init, "response_to_init")?;
                if let Some(v) = reply.get("pmi_version") {
                    if v.trim() != "2" {
                        return Err(PmiError::Malformed {
                            cmd: "init".into(),
                            reason: format!("asked for PMI 2.0, server offers {v}"),
                        });
                    }
                }
                w.proto = Protocol::V2;
                Self::handshake_v2(w, env)
            }
        }
    }

    fn handshake_v1(mut w: Wire, env: &PmiEnv, by_port: bool) -> Result<Pmi> {
        let (rank, size);
        if by_port {
            let id = env.id.as_ref().ok_or(PmiError::MissingEnv("PMI_ID"))?;
            let msg = Message::new("initack").arg("pmiid", id);
            w.request_ok(msg, "initack")?;
            let (mut r, mut s, mut d) = (None, None, false);
            while r.is_none() || s.is_none() || !d {
                let set = w.recv(Protocol::V1, "initack")?;
                if set.cmd != "set" {
                    return Err(PmiError::Malformed {
                        cmd: "initack".into(),
                        reason: format!("expected cmd=set, got {}", set.cmd),
                    });
                }
                if set.get("rank").is_some() {
                    r = Some(num_field::<u32>(&set, "rank", "initack")?);
                }
                if set.get("size").is_some() {
                    s = Some(num_field::<u32>(&set, "size", "initack")?);
                }
                d |= set.get("debug").is_some();
            }
            rank = r.unwrap_or(0);
            size = s.unwrap_or(1);
        } else {
            rank = env_num("PMI_RANK", env.rank.as_ref())?;
            size = env_num("PMI_SIZE", env.size.as_ref())?;
        }
        let init = Message::new("init")
            .arg("pmi_version", 1)
            .arg("pmi_subversion", 1);
        let reply = w.request_ok(init, "response_to_init")?;
        if let Some(v) = reply.get("pmi_version") {
            if v.trim() != "1" {
                return Err(PmiError::Malformed {
                    cmd: "init".into(),
                    reason: format!("asked for PMI 1.1, server offers {v}"),
                });
            }
        }
        let maxes = w.request_ok(Message::new("get_maxes"), "maxes")?;
        let vallen: usize = num_field(&maxes, "vallen_max", "get_maxes").unwrap_or(1024);
        let kvs = w.request_ok(Message::new("get_my_kvsname"), "my_kvsname")?;
        w.kvsname = field(&kvs, "kvsname", "get_my_kvsname")?.to_string();
        let app = w.request_ok(Message::new("get_appnum"), "appnum")?;
        let appnum: i64 = num_field(&app, "appnum", "get_appnum")?;
        let uni = w.request_ok(Message::new("get_universe_size"), "universe_size")?;
        let usize_: i64 = num_field(&uni, "size", "get_universe_size")?;
        // Keep every line well under 1024 bytes: "cmd=put kvsname=K key=KEY value=V\n"
        // with KEY up to ~64 bytes.
        let line_budget = 1000usize.saturating_sub(16 + w.kvsname.len() + 5 + 64 + 7 + 1);
        w.max_value = vallen.saturating_sub(2).min(900).min(line_budget).max(64);
        if rank >= size {
            return Err(PmiError::BadEnv {
                var: "PMI_RANK",
                value: rank.to_string(),
                reason: format!("not below the job size {size}"),
            });
        }
        Ok(Pmi {
            kvsname: w.kvsname.clone(),
            backend: Backend::Wire(Box::new(w)),
            rank,
            size,
            appnum: u32::try_from(appnum).unwrap_or(0),
            universe_size: u32::try_from(usize_)
                .ok()
                .filter(|&u| u > 0)
                .unwrap_or(size),
            version: Some(PmiVersion::V1),
        })
    }

    fn handshake_v2(mut w: Wire, env: &PmiEnv) -> Result<Pmi> {
        let id = env
            .rank
            .as_ref()
            .or(env.id.as_ref())
            .ok_or(PmiError::MissingEnv("PMI_RANK"))?;
        let mut full = Message::new("fullinit");
        if let Some(j) = &env.jobid {
            full.push("pmijobid", j);
        }
        full.push("pmirank", id.trim());
        full.push("threaded", "FALSE");
        let reply = w.request_ok(full, "fullinit-response")?;
        let rank: u32 = num_field(&reply, "rank", "fullinit")?;
        let size: u32 = num_field(&reply, "size", "fullinit")?;
        let appnum: i64 = num_field(&reply, "appnum", "fullinit").unwrap_or(0);
        if rank >= size {
            return Err(PmiError::Malformed {
                cmd: "fullinit".into(),
                reason: format!("rank {rank} is not below size {size}"),
            });
        }
        let job = w.request_ok(Message::new("job-getid"), "job-getid-response")?;
        w.kvsname = field(&job, "jobid", "job-getid")?.to_string();
        let uni = w.request(
            Message::new("info-getjobattr").arg("key", "universeSize"),
            "info-getjobattr-response",
        )?;
        let rc_ok = matches!(uni.rc(), None | Some(Ok(0)));
        let universe_size = if rc_ok && uni.get("found") == Some("TRUE") {
            uni.get("value")
                .and_then(|v| v.trim().parse::<u32>().ok())
                .filter(|&u| u > 0)
                .unwrap_or(size)
        } else {
            size
        };
        // "cmd=kvs-put;key=KEY;value=V;" plus the 6-byte prefix, well under 1024.
        w.max_value = 900;
        Ok(Pmi {
            kvsname: w.kvsname.clone(),
            backend: Backend::Wire(Box::new(w)),
            rank,
            size,
            appnum: u32::try_from(appnum).unwrap_or(0),
            universe_size,
            version: Some(PmiVersion::V2),
        })
    }

    /// This process's rank in the job.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Number of ranks in the job.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// Which application (of an MPMD launch) this rank belongs to.
    pub fn appnum(&self) -> u32 {
        self.appnum
    }

    /// The universe size the launcher reports (the job size if it reports none).
    pub fn universe_size(&self) -> u32 {
        self.universe_size
    }

    /// The PMI-1 kvsname / PMI-2 jobid of this job.
    pub fn kvsname(&self) -> &str {
        &self.kvsname
    }

    /// Protocol in use; `None` in singleton mode.
    pub fn version(&self) -> Option<PmiVersion> {
        self.version
    }

    /// Whether this is a singleton (no launcher).
    pub fn is_singleton(&self) -> bool {
        matches!(self.backend, Backend::Singleton { .. })
    }

    /// Stores `value` under `key` for this job (visible to others after the
    /// next [`Pmi::fence`]). Long values are split over several keys.
    pub fn put(&mut self, key: &str, value: &[u8]) -> Result<()> {
        value::check_user_key(key).map_err(|reason| PmiError::BadKey {
            key: key.into(),
            reason,
        })?;
        let max = match &self.backend {
            Backend::Wire(w) => w.max_value,
            Backend::Singleton { .. } => usize::MAX,
        };
        let plan = value::plan(value, max);
        for (i, chunk) in plan.chunks.iter().enumerate() {
            self.put_raw(&value::chunk_key(key, i), chunk)?;
        }
        self.put_raw(key, &plan.head)
    }

    /// Stores a raw string value (must be non-empty and carry no spaces,
    /// `;` or newlines). Most callers want [`Pmi::put`].
    pub fn put_raw(&mut self, key: &str, val: &str) -> Result<()> {
        match &mut self.backend {
            Backend::Singleton { kvs, .. } => {
                kvs.insert(key.to_string(), val.to_string());
                Ok(())
            }
            Backend::Wire(w) => match w.proto {
                Protocol::V1 => {
                    let msg = Message::new("put")
                        .arg("kvsname", &w.kvsname)
                        .arg("key", key)
                        .arg("value", val);
                    w.request_ok(msg, "put_result").map(drop)
                }
                Protocol::V2 => {
                    let msg = Message::new("kvs-put").arg("key", key).arg("value", val);
                    w.request_ok(msg, "kvs-put-response").map(drop)
                }
            },
        }
    }

    /// Waits until every rank called `fence`; afterwards every put made
    /// before it is visible.
    pub fn fence(&mut self) -> Result<()> {
        match &mut self.backend {
            Backend::Singleton { .. } => Ok(()),
            Backend::Wire(w) => match w.proto {
                Protocol::V1 => w
                    .request_ok(Message::new("barrier_in"), "barrier_out")
                    .map(drop),
                Protocol::V2 => w
                    .request_ok(Message::new("kvs-fence"), "kvs-fence-response")
                    .map(drop),
            },
        }
    }

    /// Reads a value stored with [`Pmi::put`]. `rank` is a hint for PMI-2
    /// servers (`srcid`); `Ok(None)` when the key does not exist.
    pub fn get(&mut self, rank: Option<u32>, key: &str) -> Result<Option<Vec<u8>>> {
        let Some(head) = self.get_raw(rank, key)? else {
            return Ok(None);
        };
        let corrupt = |reason: String| PmiError::Corrupt {
            key: key.into(),
            reason,
        };
        match value::parse_head(&head).map_err(|e| corrupt(e.to_string()))? {
            Head::Inline(bytes) => Ok(Some(bytes)),
            Head::Chunked(n) => {
                let mut text = String::new();
                for i in 0..n {
                    let part = self
                        .get_raw(rank, &value::chunk_key(key, i))?
                        .ok_or_else(|| corrupt(format!("chunk {i} of {n} is missing")))?;
                    text.push_str(&part);
                }
                value::decode(&text)
                    .map(Some)
                    .map_err(|e| corrupt(e.to_string()))
            }
        }
    }

    /// Reads a raw string value; `Ok(None)` when absent.
    pub fn get_raw(&mut self, rank: Option<u32>, key: &str) -> Result<Option<String>> {
        match &mut self.backend {
            Backend::Singleton { kvs, .. } => {
                if key == "PMI_process_mapping" {
                    return Ok(Some(SINGLETON_MAPPING.into()));
                }
                Ok(kvs.get(key).cloned())
            }
            Backend::Wire(w) => match w.proto {
                Protocol::V1 => {
                    let msg = Message::new("get")
                        .arg("kvsname", &w.kvsname)
                        .arg("key", key);
                    let reply = w.request(msg, "get_result")?;
                    match reply.rc() {
                        None | Some(Ok(0)) => Ok(Some(reply.get("value").unwrap_or("").into())),
                        // Slurm says rc=1, Hydra rc=-1: both mean "no such key".
                        Some(Ok(rc)) => {
                            tracing::debug!(
                                key,
                                rc,
                                msg = reply.get("msg").unwrap_or(""),
                                "PMI get: key not found"
                            );
                            Ok(None)
                        }
                        Some(Err(_)) => check_rc(&reply, "get").map(|_| None),
                    }
                }
                Protocol::V2 => {
                    let srcid = rank.map_or_else(|| "-1".to_string(), |r| r.to_string());
                    let msg = Message::new("kvs-get")
                        .arg("jobid", &w.kvsname)
                        .arg("srcid", srcid)
                        .arg("key", key);
                    let reply = w.request_ok(msg, "kvs-get-response")?;
                    if reply.get("found") == Some("TRUE") {
                        Ok(Some(reply.get("value").unwrap_or("").into()))
                    } else {
                        Ok(None)
                    }
                }
            },
        }
    }

    /// The ranks the launcher says are dead (Hydra's `PMI_dead_processes`
    /// job attribute, which `oxmpirun --enable-recovery` serves too); empty
    /// when none is, or when the launcher does not say.
    pub fn dead_processes(&mut self) -> Result<Vec<u32>> {
        let raw = match &mut self.backend {
            Backend::Singleton { .. } => None,
            Backend::Wire(w) if w.proto == Protocol::V2 => {
                let msg = Message::new("info-getjobattr").arg("key", "PMI_dead_processes");
                let reply = w.request_ok(msg, "info-getjobattr-response")?;
                (reply.get("found") == Some("TRUE"))
                    .then(|| reply.get("value").unwrap_or("").to_string())
            }
            Backend::Wire(_) => self.get_raw(None, "PMI_dead_processes")?,
        };
        let Some(raw) = raw else {
            return Ok(Vec::new());
        };
        super::parse_rank_list(&raw).ok_or_else(|| PmiError::Malformed {
            cmd: "get".into(),
            reason: format!("PMI_dead_processes is not a rank list: {raw:?}"),
        })
    }

    /// The raw `PMI_process_mapping` value, `None` if the launcher gives none.
    pub fn process_mapping_raw(&mut self) -> Result<Option<String>> {
        match &mut self.backend {
            Backend::Wire(w) if w.proto == Protocol::V2 => {
                let msg = Message::new("info-getjobattr").arg("key", "PMI_process_mapping");
                let reply = w.request_ok(msg, "info-getjobattr-response")?;
                Ok((reply.get("found") == Some("TRUE"))
                    .then(|| reply.get("value").unwrap_or("").to_string()))
            }
            _ => self.get_raw(None, "PMI_process_mapping"),
        }
    }

    /// The parsed `PMI_process_mapping` (`Unknown` when absent or not understood).
    pub fn process_mapping(&mut self) -> Result<ProcessMapping> {
        Ok(self
            .process_mapping_raw()?
            .map_or(ProcessMapping::Unknown, |m| ProcessMapping::parse(&m)))
    }

    /// Stores a node-local attribute (PMI-2 `info-putnodeattr`; kept in
    /// process in singleton mode). Any bytes, up to ~600.
    pub fn put_node_attr(&mut self, key: &str, value: &[u8]) -> Result<()> {
        value::check_user_key(key).map_err(|reason| PmiError::BadKey {
            key: key.into(),
            reason,
        })?;
        let text = format!("v{}", value::encode(value));
        if text.len() > 900 {
            return Err(PmiError::BadKey {
                key: key.into(),
                reason: format!("node attribute of {} bytes is too long", value.len()),
            });
        }
        match &mut self.backend {
            Backend::Singleton { node, .. } => {
                node.insert(key.into(), text);
                Ok(())
            }
            Backend::Wire(w) if w.proto == Protocol::V2 => {
                let msg = Message::new("info-putnodeattr")
                    .arg("key", key)
                    .arg("value", text);
                w.request_ok(msg, "info-putnodeattr-response").map(drop)
            }
            Backend::Wire(_) => Err(PmiError::Unsupported("info-putnodeattr")),
        }
    }

    /// Reads a node-local attribute; with `wait` the server answers only once
    /// some rank on the node has put it.
    pub fn get_node_attr(&mut self, key: &str, wait: bool) -> Result<Option<Vec<u8>>> {
        let text = match &mut self.backend {
            Backend::Singleton { node, .. } => node.get(key).cloned(),
            Backend::Wire(w) if w.proto == Protocol::V2 => {
                let msg = Message::new("info-getnodeattr")
                    .arg("key", key)
                    .arg("wait", if wait { "TRUE" } else { "FALSE" });
                let reply = w.request_ok(msg, "info-getnodeattr-response")?;
                (reply.get("found") == Some("TRUE"))
                    .then(|| reply.get("value").unwrap_or("").to_string())
            }
            Backend::Wire(_) => return Err(PmiError::Unsupported("info-getnodeattr")),
        };
        let Some(text) = text else { return Ok(None) };
        match value::parse_head(&text) {
            Ok(Head::Inline(bytes)) => Ok(Some(bytes)),
            _ => Err(PmiError::Corrupt {
                key: key.into(),
                reason: "node attribute was not stored by oxmpi".into(),
            }),
        }
    }

    /// Sends the abort request (the launcher should then end the whole job)
    /// without exiting. Most callers want [`Pmi::abort`].
    pub fn send_abort(&mut self, code: i32, message: &str) -> Result<()> {
        match &mut self.backend {
            Backend::Singleton { .. } => Ok(()),
            Backend::Wire(w) => {
                let text = free_text(message, w.proto);
                let (msg, proto) = match w.proto {
                    Protocol::V1 => (
                        Message::new("abort")
                            .arg("exitcode", code)
                            .arg("message", text),
                        Protocol::V1,
                    ),
                    Protocol::V2 => (
                        Message::new("abort")
                            .arg("isworld", "TRUE")
                            .arg("exitcode", code)
                            .arg("message", text),
                        Protocol::V2,
                    ),
                };
                w.send(&msg, proto)
            }
        }
    }

    /// Asks the launcher to end the job, then exits this process with `code`.
    pub fn abort(&mut self, code: i32, message: &str) -> ! {
        if let Err(e) = self.send_abort(code, message) {
            eprintln!("oxmpi: PMI abort could not be sent: {e}");
        }
        if self.is_singleton() {
            eprintln!("oxmpi: abort({code}): {message}");
        }
        std::process::exit(code)
    }

    /// Says goodbye to the server and closes the connection.
    pub fn finalize(self) -> Result<()> {
        match self.backend {
            Backend::Singleton { .. } => Ok(()),
            Backend::Wire(mut w) => match w.proto {
                Protocol::V1 => w
                    .request_ok(Message::new("finalize"), "finalize_ack")
                    .map(drop),
                Protocol::V2 => w
                    .request_ok(Message::new("finalize"), "finalize-response")
                    .map(drop),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_parsing_and_singleton() {
        let env = PmiEnv::from_pairs(&[("PMI_FD", ""), ("PMI_RANK", "0")]);
        assert!(env.is_singleton());
        assert_eq!(env.rank.as_deref(), Some("0"));
        assert_eq!(env.foreign, None);
        let mut p = Pmi::from_pmi_env(PmiConfig::default(), &env).unwrap();
        assert!(p.is_singleton());
        assert_eq!((p.rank(), p.size()), (0, 1));
        p.put("k", &[0, 1, 255]).unwrap();
        p.fence().unwrap();
        assert_eq!(p.get(Some(0), "k").unwrap().unwrap(), vec![0, 1, 255]);
        assert!(p.get(None, "nope").unwrap().is_none());
        assert_eq!(p.process_mapping().unwrap(), ProcessMapping::single_node(1));
    }

    #[test]
    fn bad_env_is_a_named_error() {
        let env = PmiEnv::from_pairs(&[("PMI_FD", "x")]);
        let e = Pmi::from_pmi_env(PmiConfig::default(), &env).unwrap_err();
        assert!(e.to_string().contains("PMI_FD"), "{e}");
        let env = PmiEnv::from_pairs(&[("PMI_PORT", "nohostport")]);
        let e = Pmi::from_pmi_env(PmiConfig::default(), &env).unwrap_err();
        assert!(e.to_string().contains("PMI_PORT"), "{e}");
    }

    #[test]
    fn free_text_keeps_its_spaces() {
        assert_eq!(free_text("a b;c=d", Protocol::V1), "a\\ b;c=d");
        assert_eq!(free_text("a b;c=d", Protocol::V2), "a b,c=d");
        assert_eq!(free_text(" \n", Protocol::V1), "-");
        for proto in [Protocol::V1, Protocol::V2] {
            let m =
                Message::new("abort").arg("message", free_text("MPI_Abort called; x\\y", proto));
            let bytes = match proto {
                Protocol::V1 => wire::encode_v1(&m).unwrap(),
                Protocol::V2 => wire::encode_v2(&m, Align::Right).unwrap(),
            };
            let back = match proto {
                Protocol::V1 => wire::parse_v1(&bytes).unwrap(),
                Protocol::V2 => wire::parse_v2_body(&bytes[6..]).unwrap(),
            };
            let want = match proto {
                Protocol::V1 => "MPI_Abort called; x\\y",
                Protocol::V2 => "MPI_Abort called, x\\y",
            };
            assert_eq!(back.get("message"), Some(want), "{proto:?}");
        }
    }

    #[test]
    fn foreign_launcher_is_an_error_unless_allowed() {
        // `srun --mpi=none -n 2`: no server, a step of two tasks.
        let env = PmiEnv::from_pairs(&[
            ("SLURM_STEP_ID", "0"),
            ("SLURM_STEP_NUM_TASKS", "2"),
            ("SLURM_PROCID", "1"),
        ]);
        assert!(env.is_singleton());
        let e = Pmi::from_pmi_env(PmiConfig::default(), &env).unwrap_err();
        assert!(matches!(e, PmiError::ForeignLauncher(_)), "{e}");
        let text = e.to_string();
        assert!(
            text.contains("srun --mpi=pmi2") && text.contains("pmi_foreign_launcher=singleton"),
            "{text}"
        );
        // A rank of a job whose PMI_FD was lost.
        let env = PmiEnv::from_pairs(&[("PMI_FD", ""), ("PMI_RANK", "3"), ("PMI_SIZE", "4")]);
        let e = Pmi::from_pmi_env(PmiConfig::default(), &env).unwrap_err();
        assert!(e.to_string().contains("PMI_RANK=3"), "{e}");
        // The escape hatch.
        let allow = PmiConfig {
            singleton_under_foreign_launcher: true,
            ..Default::default()
        };
        let p = Pmi::from_pmi_env(allow, &env).unwrap();
        assert!(p.is_singleton());
        // A server wins over whatever else the environment says.
        let env = PmiEnv::from_pairs(&[("PMI_FD", "x"), ("PMIX_RANK", "0")]);
        let e = Pmi::from_pmi_env(PmiConfig::default(), &env).unwrap_err();
        assert!(matches!(e, PmiError::BadEnv { var: "PMI_FD", .. }), "{e}");
    }

    #[test]
    fn foreign_launcher_parameter() {
        use crate::mca::{self, Registry, Sources};
        let mut reg = Registry::new();
        mca::register_runtime_params(&mut reg).unwrap();
        reg.apply(&Sources::new()).unwrap();
        assert!(
            !PmiConfig::from_registry(&reg)
                .unwrap()
                .singleton_under_foreign_launcher
        );
        let mut reg = Registry::new();
        mca::register_runtime_params(&mut reg).unwrap();
        reg.apply(&Sources::new().with_env("pmi_foreign_launcher", "singleton"))
            .unwrap();
        assert!(
            PmiConfig::from_registry(&reg)
                .unwrap()
                .singleton_under_foreign_launcher
        );
        let mut reg = Registry::new();
        mca::register_runtime_params(&mut reg).unwrap();
        let e = reg
            .apply(&Sources::new().with_env("pmi_foreign_launcher", "ignore"))
            .unwrap_err();
        assert!(e.to_string().contains("pmi_foreign_launcher"), "{e}");
    }
}
