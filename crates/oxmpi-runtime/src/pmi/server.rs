//! A sans-IO PMI server core for one job (used by `oxmpirun` and tests).
//!
//! Contract (quinn-style: inputs are `handle_*`, outputs are `poll_*`):
//! * The caller owns sockets and processes. It reports connections
//!   ([`PmiServer::handle_connect`]), bytes read ([`PmiServer::handle_bytes`])
//!   and closed connections ([`PmiServer::handle_disconnect`]); it writes
//!   whatever [`PmiServer::poll_transmit`] returns, each buffer in order and
//!   whole, and acts on [`PmiServer::poll_event`] (an `Abort` must end the
//!   job).
//! * Bytes are buffered per connection and the protocol is decided per
//!   message as Hydra does (`cmd=`/`mcmd=` prefix: PMI-1, else PMI-2), so
//!   PMI-1 and PMI-2 ranks can share one job and a PMI-2 client's PMI-1
//!   `init` line just works.
//! * Nothing here panics on any input. A malformed but framed message gets
//!   an error reply and a [`ServerEvent::ProtocolError`]; a framing error
//!   (bad PMI-2 length prefix, oversized message) makes the server ignore the
//!   connection from then on (`ProtocolError` with `ignored: true`).
//! * Puts become visible to gets only when a barrier (PMI-1 `barrier_in`,
//!   PMI-2 `kvs-fence`, counted together) has been entered by every rank.
//! * Node attributes (PMI-2 `info-putnodeattr`/`info-getnodeattr`) are one
//!   table: this server serves the ranks of one node. A `getnodeattr` with
//!   `wait=TRUE` for a missing key is answered when the key is put.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use super::wire::{self, Align, Decoder, Expect, Frame, Message, Protocol};

/// What the server needs to know about the job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobInfo {
    /// Number of ranks.
    pub size: u32,
    /// PMI-1 kvsname, also the PMI-2 jobid.
    pub kvsname: String,
    /// Application number reported to every rank.
    pub appnum: u32,
    /// Universe size reported to every rank.
    pub universe_size: u32,
    /// `PMI_process_mapping`, e.g. `(vector,(0,1,4))`; empty for none.
    pub process_mapping: String,
    /// Reported as `debug=` / `debugged=`.
    pub debug: bool,
}

/// The caller's name for one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub u64);

/// Something the launcher should know or act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerEvent {
    /// A rank completed `init` (PMI-1) or `fullinit` (PMI-2).
    Initialized {
        /// Its connection.
        conn: ConnId,
        /// Its rank, if known yet (PMI-1 over a port without `initack`).
        rank: Option<u32>,
        /// Protocol it speaks.
        version: Protocol,
    },
    /// A rank finalized (it may now exit).
    Finalized {
        /// Its connection.
        conn: ConnId,
        /// Its rank, if known.
        rank: Option<u32>,
    },
    /// A rank asked to abort the job: the launcher must end every rank.
    Abort {
        /// Its connection.
        conn: ConnId,
        /// Its rank, if known.
        rank: Option<u32>,
        /// The exit code it asked for.
        exitcode: i32,
        /// Its message (may be empty).
        message: String,
    },
    /// A peer sent something the server could not use.
    ProtocolError {
        /// The connection.
        conn: ConnId,
        /// Its rank, if known.
        rank: Option<u32>,
        /// What was wrong.
        reason: String,
        /// True when the server now ignores this connection (framing lost).
        ignored: bool,
    },
    /// A connection closed.
    Disconnected {
        /// The connection.
        conn: ConnId,
        /// Its rank, if known.
        rank: Option<u32>,
        /// Whether it finalized first (if not, the rank probably died).
        finalized: bool,
    },
}

/// Limits advertised by `get_maxes` and enforced on puts.
const KVSNAME_MAX: usize = 256;
const KEYLEN_MAX: usize = 64;
const VALLEN_MAX: usize = 1024;

#[derive(Debug)]
struct Conn {
    dec: Decoder,
    rank: Option<u32>,
    finalized: bool,
    ignored: bool,
    /// Presented the job's secret, or needs none (an inherited socket, or
    /// a server without [`PmiServer::require_auth`]).
    authed: bool,
}

/// A request waiting in the barrier.
#[derive(Debug)]
struct BarrierWaiter {
    conn: ConnId,
    proto: Protocol,
    thrid: Option<String>,
}

#[derive(Debug)]
struct NodeWaiter {
    conn: ConnId,
    key: String,
    thrid: Option<String>,
}

/// The PMI server state machine for one job.
#[derive(Debug)]
pub struct PmiServer {
    job: JobInfo,
    conns: BTreeMap<ConnId, Conn>,
    rank_conn: HashMap<u32, ConnId>,
    kvs: HashMap<String, String>,
    pending: Vec<(String, String)>,
    barrier: Vec<BarrierWaiter>,
    /// Ranks the launcher reported lost while the job goes on
    /// ([`PmiServer::handle_rank_lost`]): barriers stop waiting for them.
    lost: BTreeSet<u32>,
    /// The secret a connection over the port must present first.
    secret: Option<String>,
    node_attrs: HashMap<String, String>,
    node_waiters: Vec<NodeWaiter>,
    transmit: VecDeque<(ConnId, Vec<u8>)>,
    events: VecDeque<ServerEvent>,
}

impl PmiServer {
    /// A server for `job`, with no connections yet.
    pub fn new(job: JobInfo) -> Self {
        PmiServer {
            job,
            conns: BTreeMap::new(),
            rank_conn: HashMap::new(),
            kvs: HashMap::new(),
            pending: Vec::new(),
            barrier: Vec::new(),
            lost: BTreeSet::new(),
            secret: None,
            node_attrs: HashMap::new(),
            node_waiters: Vec::new(),
            transmit: VecDeque::new(),
            events: VecDeque::new(),
        }
    }

    /// The job this server serves.
    pub fn job(&self) -> &JobInfo {
        &self.job
    }

    /// A new connection: `Some(rank)` for an inherited socketpair (the
    /// launcher knows the rank), `None` for a `PMI_PORT` connection (the rank
    /// is learned from `initack pmiid=` or `fullinit pmirank=`).
    pub fn handle_connect(&mut self, conn: ConnId, rank: Option<u32>) {
        let authed = rank.is_some() || self.secret.is_none();
        self.conns.insert(
            conn,
            Conn {
                dec: Decoder::new(),
                rank: None,
                finalized: false,
                ignored: false,
                authed,
            },
        );
        if let Some(r) = rank {
            if let Err(reason) = self.bind_rank(conn, r) {
                self.protocol_error(conn, reason, false);
            }
        }
    }

    /// Bytes read from `conn`. Unknown connections are registered as if
    /// connected with an unknown rank.
    pub fn handle_bytes(&mut self, conn: ConnId, bytes: &[u8]) {
        if !self.conns.contains_key(&conn) {
            self.handle_connect(conn, None);
        }
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if c.ignored {
            return;
        }
        c.dec.push(bytes);
        loop {
            let Some(c) = self.conns.get_mut(&conn) else {
                return;
            };
            match c.dec.next_frame(Expect::Auto) {
                Ok(Some(frame)) if !c.authed => {
                    let ok = authenticates(self.secret.as_deref(), &frame);
                    let Some(c) = self.conns.get_mut(&conn) else {
                        return;
                    };
                    if ok {
                        c.authed = true;
                    } else {
                        c.ignored = true;
                        c.dec = Decoder::new();
                        self.protocol_error(
                            conn,
                            "a PMI port connection that did not present the job's secret".into(),
                            true,
                        );
                        return;
                    }
                }
                Ok(Some(frame)) => self.dispatch(conn, frame),
                Ok(None) => return,
                Err(e) => {
                    c.ignored = true;
                    c.dec = Decoder::new();
                    self.protocol_error(conn, format!("unframeable input: {e}"), true);
                    return;
                }
            }
        }
    }

    /// `conn` closed. Its pending barrier entry and waits are dropped.
    pub fn handle_disconnect(&mut self, conn: ConnId) {
        let Some(c) = self.conns.remove(&conn) else {
            return;
        };
        if let Some(r) = c.rank {
            if self.rank_conn.get(&r) == Some(&conn) {
                self.rank_conn.remove(&r);
            }
        }
        self.barrier.retain(|w| w.conn != conn);
        self.node_waiters.retain(|w| w.conn != conn);
        self.transmit.retain(|(c, _)| *c != conn);
        self.events.push_back(ServerEvent::Disconnected {
            conn,
            rank: c.rank,
            finalized: c.finalized,
        });
    }

    /// Connections made through the port (those [`PmiServer::handle_connect`]
    /// gets without a rank) must first send `cmd=auth secret=<secret>`;
    /// anything else makes the server ignore the connection (a
    /// `ProtocolError` event with `ignored`: the launcher closes it). The
    /// launcher hands the secret to its ranks only, so another local user
    /// who finds the port can neither end the job nor read its store.
    pub fn require_auth(&mut self, secret: String) {
        self.secret = Some(secret);
    }

    /// Rank `rank` is gone and the job goes on without it (a launcher that
    /// keeps survivors running): barriers and fences no longer wait for it,
    /// so the survivors can still finalize. The one waiting now completes
    /// if every other rank is in it.
    pub fn handle_rank_lost(&mut self, rank: u32) {
        if rank >= self.job.size || !self.lost.insert(rank) {
            return;
        }
        if let Some(&conn) = self.rank_conn.get(&rank) {
            self.barrier.retain(|w| w.conn != conn);
        }
        self.try_release_barrier();
    }

    /// Next bytes to write to a connection, in order.
    pub fn poll_transmit(&mut self) -> Option<(ConnId, Vec<u8>)> {
        self.transmit.pop_front()
    }

    /// Next event for the launcher.
    pub fn poll_event(&mut self) -> Option<ServerEvent> {
        self.events.pop_front()
    }

    /// Number of ranks currently waiting in the barrier.
    pub fn barrier_waiting(&self) -> usize {
        self.barrier.len()
    }

    fn rank_of(&self, conn: ConnId) -> Option<u32> {
        self.conns.get(&conn).and_then(|c| c.rank)
    }

    fn bind_rank(&mut self, conn: ConnId, rank: u32) -> Result<(), String> {
        if rank >= self.job.size {
            return Err(format!(
                "rank {rank} is not below the job size {}",
                self.job.size
            ));
        }
        if let Some(&other) = self.rank_conn.get(&rank) {
            if other != conn {
                return Err(format!("rank {rank} is already connected"));
            }
        }
        let Some(c) = self.conns.get_mut(&conn) else {
            return Err("unknown connection".into());
        };
        match c.rank {
            Some(old) if old != rank => {
                return Err(format!("connection of rank {old} claims to be rank {rank}"))
            }
            _ => c.rank = Some(rank),
        }
        self.rank_conn.insert(rank, conn);
        Ok(())
    }

    fn protocol_error(&mut self, conn: ConnId, reason: String, ignored: bool) {
        tracing::debug!(?conn, %reason, "PMI protocol error");
        self.events.push_back(ServerEvent::ProtocolError {
            conn,
            rank: self.rank_of(conn),
            reason,
            ignored,
        });
    }

    fn send(&mut self, conn: ConnId, proto: Protocol, msg: &Message) {
        let bytes = match proto {
            Protocol::V1 => wire::encode_v1(msg),
            Protocol::V2 => wire::encode_v2(msg, Align::Right),
        };
        match bytes {
            Ok(b) => self.transmit.push_back((conn, b)),
            // A value put over PMI-2 may hold a space, which a PMI-1 reply
            // cannot carry. The client must still get an answer (never a
            // hang), so it gets an error reply instead.
            Err(e) => {
                let fallback = Message::new(msg.cmd.clone()).arg("rc", -1);
                let fallback = match proto {
                    Protocol::V1 => {
                        wire::encode_v1(&fallback.arg("msg", "reply_not_representable_in_PMI-1"))
                    }
                    Protocol::V2 => wire::encode_v2(
                        &fallback.arg("errmsg", "reply not representable"),
                        Align::Right,
                    ),
                };
                if let Ok(b) = fallback {
                    self.transmit.push_back((conn, b));
                }
                self.protocol_error(conn, format!("cannot encode reply {}: {e}", msg.cmd), false);
            }
        }
    }

    /// Sends a PMI-2 reply, echoing `thrid` when the request had one.
    fn send_v2(&mut self, conn: ConnId, cmd: &str, thrid: Option<&str>, args: &[(&str, String)]) {
        let mut m = Message::new(cmd);
        if let Some(t) = thrid {
            m.push("thrid", t);
        }
        for (k, v) in args {
            m.push(*k, v);
        }
        self.send(conn, Protocol::V2, &m);
    }

    fn dispatch(&mut self, conn: ConnId, frame: Frame) {
        let msg = match frame.message {
            Ok(m) => m,
            Err(e) => {
                let reason = format!("malformed PMI-{} message: {e}", proto_num(frame.protocol));
                match frame.protocol {
                    Protocol::V1 => self.send(
                        conn,
                        Protocol::V1,
                        &Message::new("error")
                            .arg("rc", -1)
                            .arg("msg", "malformed_message"),
                    ),
                    Protocol::V2 => self.send_v2(
                        conn,
                        "error-response",
                        None,
                        &[("rc", "-1".into()), ("errmsg", "malformed message".into())],
                    ),
                }
                self.protocol_error(conn, reason, false);
                return;
            }
        };
        if frame.multi {
            self.send(
                conn,
                Protocol::V1,
                &Message::new(format!("{}_result", msg.cmd))
                    .arg("rc", -1)
                    .arg("msg", "multi-line_commands_(spawn)_are_not_supported"),
            );
            self.protocol_error(conn, format!("unsupported mcmd={}", msg.cmd), false);
            return;
        }
        match frame.protocol {
            Protocol::V1 => self.dispatch_v1(conn, msg),
            Protocol::V2 => self.dispatch_v2(conn, msg),
        }
    }

    fn reply_v1(&mut self, conn: ConnId, cmd: &str, args: &[(&str, String)]) {
        let mut m = Message::new(cmd).arg("rc", 0);
        for (k, v) in args {
            m.push(*k, v);
        }
        self.send(conn, Protocol::V1, &m);
    }

    fn fail_v1(&mut self, conn: ConnId, cmd: &str, rc: i32, msg: &str) {
        let m = Message::new(cmd).arg("rc", rc).arg("msg", msg);
        self.send(conn, Protocol::V1, &m);
    }

    fn dispatch_v1(&mut self, conn: ConnId, msg: Message) {
        match msg.cmd.as_str() {
            "init" => {
                let v = msg
                    .get("pmi_version")
                    .and_then(|v| v.trim().parse::<i32>().ok());
                let s = msg
                    .get("pmi_subversion")
                    .and_then(|v| v.trim().parse::<i32>().ok());
                match (v, s) {
                    (Some(1), Some(0..=1)) => {
                        self.reply_v1(
                            conn,
                            "response_to_init",
                            &[("pmi_version", "1".into()), ("pmi_subversion", "1".into())],
                        );
                        let rank = self.rank_of(conn);
                        self.events.push_back(ServerEvent::Initialized {
                            conn,
                            rank,
                            version: Protocol::V1,
                        });
                    }
                    (Some(2), Some(0)) => self.reply_v1(
                        conn,
                        "response_to_init",
                        &[("pmi_version", "2".into()), ("pmi_subversion", "0".into())],
                    ),
                    _ => {
                        let m = Message::new("response_to_init")
                            .arg("rc", -1)
                            .arg("pmi_version", 1)
                            .arg("pmi_subversion", 1)
                            .arg("msg", "only_PMI_1.1_and_2.0_are_supported");
                        self.send(conn, Protocol::V1, &m);
                        self.protocol_error(
                            conn,
                            format!(
                                "unsupported PMI version {}.{}",
                                msg.get("pmi_version").unwrap_or("?"),
                                msg.get("pmi_subversion").unwrap_or("?")
                            ),
                            false,
                        );
                    }
                }
            }
            "initack" => {
                let id = msg.get("pmiid").and_then(|v| v.trim().parse::<u32>().ok());
                let bound = match id {
                    Some(r) => self.bind_rank(conn, r),
                    None => Err("initack without a numeric pmiid".into()),
                };
                match bound {
                    Ok(()) => {
                        let rank = self.rank_of(conn).unwrap_or(0);
                        // One buffer: the client reads all four lines.
                        let text = format!(
                            "cmd=initack rc=0\ncmd=set size={}\ncmd=set rank={}\ncmd=set debug={}\n",
                            self.job.size,
                            rank,
                            u8::from(self.job.debug)
                        );
                        self.transmit.push_back((conn, text.into_bytes()));
                    }
                    Err(reason) => {
                        self.fail_v1(conn, "initack", -1, "bad_pmiid");
                        self.protocol_error(conn, reason, false);
                    }
                }
            }
            "get_maxes" => self.reply_v1(
                conn,
                "maxes",
                &[
                    ("kvsname_max", KVSNAME_MAX.to_string()),
                    ("keylen_max", KEYLEN_MAX.to_string()),
                    ("vallen_max", VALLEN_MAX.to_string()),
                ],
            ),
            "get_appnum" => {
                let a = self.job.appnum.to_string();
                self.reply_v1(conn, "appnum", &[("appnum", a)]);
            }
            "get_universe_size" => {
                let u = self.job.universe_size.to_string();
                self.reply_v1(conn, "universe_size", &[("size", u)]);
            }
            "get_my_kvsname" => {
                let k = self.job.kvsname.clone();
                self.reply_v1(conn, "my_kvsname", &[("kvsname", k)]);
            }
            "put" => match self.check_put(&msg) {
                Ok((k, v)) => {
                    self.pending.push((k, v));
                    self.reply_v1(conn, "put_result", &[]);
                }
                Err((rc, why)) => self.fail_v1(conn, "put_result", rc, why),
            },
            "barrier_in" => self.enter_barrier(conn, Protocol::V1, None),
            "get" => {
                let key = msg.get("key").unwrap_or("");
                match self.lookup(key) {
                    Some(v) => self.reply_v1(conn, "get_result", &[("value", v)]),
                    None => self.fail_v1(conn, "get_result", 1, "key_not_found"),
                }
            }
            "finalize" => {
                self.reply_v1(conn, "finalize_ack", &[]);
                self.finalized(conn);
            }
            "abort" => self.abort(conn, &msg),
            other => {
                let m = Message::new("error")
                    .arg("rc", -1)
                    .arg("msg", format!("unknown_command_{other}"));
                self.send(conn, Protocol::V1, &m);
                self.protocol_error(conn, format!("unknown PMI-1 command {other}"), false);
            }
        }
    }

    fn dispatch_v2(&mut self, conn: ConnId, msg: Message) {
        let thrid = msg.get("thrid").map(str::to_string);
        let t = thrid.as_deref();
        match msg.cmd.as_str() {
            "fullinit" => {
                let claimed = msg
                    .get("pmirank")
                    .or_else(|| msg.get("pmiid"))
                    .and_then(|v| v.trim().parse::<u32>().ok());
                let bound = match (claimed, self.rank_of(conn)) {
                    (Some(r), _) => self.bind_rank(conn, r),
                    (None, Some(_)) => Ok(()),
                    (None, None) => Err("fullinit without pmirank or pmiid".into()),
                };
                match bound {
                    Ok(()) => {
                        let rank = self.rank_of(conn).unwrap_or(0);
                        let dbg = if self.job.debug { "TRUE" } else { "FALSE" };
                        let args = [
                            ("pmi-version", "2".to_string()),
                            ("pmi-subversion", "0".into()),
                            ("rank", rank.to_string()),
                            ("size", self.job.size.to_string()),
                            ("appnum", self.job.appnum.to_string()),
                            ("debugged", dbg.into()),
                            ("pmiverbose", dbg.into()),
                            ("rc", "0".into()),
                        ];
                        self.send_v2(conn, "fullinit-response", t, &args);
                        self.events.push_back(ServerEvent::Initialized {
                            conn,
                            rank: Some(rank),
                            version: Protocol::V2,
                        });
                    }
                    Err(reason) => {
                        self.send_v2(
                            conn,
                            "fullinit-response",
                            t,
                            &[("rc", "-1".into()), ("errmsg", reason.clone())],
                        );
                        self.protocol_error(conn, reason, false);
                    }
                }
            }
            "job-getid" => {
                let args = [("jobid", self.job.kvsname.clone()), ("rc", "0".into())];
                self.send_v2(conn, "job-getid-response", t, &args);
            }
            "kvs-put" => match self.check_put(&msg) {
                Ok((k, v)) => {
                    self.pending.push((k, v));
                    self.send_v2(conn, "kvs-put-response", t, &[("rc", "0".into())]);
                }
                Err((rc, why)) => self.send_v2(
                    conn,
                    "kvs-put-response",
                    t,
                    &[("rc", rc.to_string()), ("errmsg", why.replace('_', " "))],
                ),
            },
            "kvs-fence" => self.enter_barrier(conn, Protocol::V2, thrid),
            "kvs-get" => {
                let key = msg.get("key").unwrap_or("");
                let args: Vec<(&str, String)> = match self.kvs.get(key) {
                    Some(v) => vec![
                        ("found", "TRUE".into()),
                        ("value", v.clone()),
                        ("rc", "0".into()),
                    ],
                    None => vec![("found", "FALSE".into()), ("rc", "0".into())],
                };
                self.send_v2(conn, "kvs-get-response", t, &args);
            }
            "info-getjobattr" => {
                let key = msg.get("key").unwrap_or("");
                let val = match key {
                    "PMI_process_mapping" if !self.job.process_mapping.is_empty() => {
                        Some(self.job.process_mapping.clone())
                    }
                    "universeSize" => Some(self.job.universe_size.to_string()),
                    "PMI_dead_processes" => self.dead_processes(),
                    _ => None,
                };
                let args: Vec<(&str, String)> = match val {
                    Some(v) => vec![("found", "TRUE".into()), ("value", v), ("rc", "0".into())],
                    None => vec![("found", "FALSE".into()), ("rc", "0".into())],
                };
                self.send_v2(conn, "info-getjobattr-response", t, &args);
            }
            "info-putnodeattr" => {
                let (Some(key), Some(val)) = (msg.get("key"), msg.get("value")) else {
                    self.send_v2(
                        conn,
                        "info-putnodeattr-response",
                        t,
                        &[
                            ("rc", "-1".into()),
                            ("errmsg", "key and value are required".into()),
                        ],
                    );
                    return;
                };
                let (key, val) = (key.to_string(), val.to_string());
                self.node_attrs.insert(key.clone(), val.clone());
                self.send_v2(conn, "info-putnodeattr-response", t, &[("rc", "0".into())]);
                let (ready, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.node_waiters)
                    .into_iter()
                    .partition(|w| w.key == key);
                self.node_waiters = rest;
                for w in ready {
                    self.send_v2(
                        w.conn,
                        "info-getnodeattr-response",
                        w.thrid.as_deref(),
                        &[
                            ("found", "TRUE".into()),
                            ("value", val.clone()),
                            ("rc", "0".into()),
                        ],
                    );
                }
            }
            "info-getnodeattr" => {
                let key = msg.get("key").unwrap_or("").to_string();
                if let Some(v) = self.node_attrs.get(&key).cloned() {
                    self.send_v2(
                        conn,
                        "info-getnodeattr-response",
                        t,
                        &[("found", "TRUE".into()), ("value", v), ("rc", "0".into())],
                    );
                } else if msg.get("wait") == Some("TRUE") {
                    self.node_waiters.push(NodeWaiter { conn, key, thrid });
                } else {
                    self.send_v2(
                        conn,
                        "info-getnodeattr-response",
                        t,
                        &[("found", "FALSE".into()), ("rc", "0".into())],
                    );
                }
            }
            "finalize" => {
                self.send_v2(conn, "finalize-response", t, &[("rc", "0".into())]);
                self.finalized(conn);
            }
            "abort" => self.abort(conn, &msg),
            other => {
                let cmd = format!("{other}-response");
                self.send_v2(
                    conn,
                    &cmd,
                    t,
                    &[
                        ("rc", "-1".into()),
                        ("errmsg", format!("unknown command {other}")),
                    ],
                );
                self.protocol_error(conn, format!("unknown PMI-2 command {other}"), false);
            }
        }
    }

    /// Validates a put: `(key, value)` or `(rc, msg)` for the error reply.
    fn check_put(&self, msg: &Message) -> Result<(String, String), (i32, &'static str)> {
        let Some(key) = msg.get("key") else {
            return Err((-1, "key_is_required"));
        };
        let val = msg.get("value").unwrap_or("");
        if key.starts_with("PMI_") {
            return Err((1, "keys_with_PMI_prefix_are_reserved"));
        }
        if key.is_empty() || key.len() > KEYLEN_MAX {
            return Err((-1, "key_too_long"));
        }
        if val.len() > VALLEN_MAX {
            return Err((-1, "value_too_long"));
        }
        Ok((key.to_string(), val.to_string()))
    }

    fn lookup(&self, key: &str) -> Option<String> {
        if key == "PMI_process_mapping" {
            return (!self.job.process_mapping.is_empty())
                .then(|| self.job.process_mapping.clone());
        }
        if key == "PMI_dead_processes" {
            return self.dead_processes();
        }
        self.kvs.get(key).cloned()
    }

    /// Hydra's `PMI_dead_processes` job attribute: the ranks lost so far, as
    /// a rank list (`1,3-5`), visible at once (no fence); absent while none
    /// is.
    fn dead_processes(&self) -> Option<String> {
        (!self.lost.is_empty()).then(|| super::format_rank_list(self.lost.iter().copied()))
    }

    fn enter_barrier(&mut self, conn: ConnId, proto: Protocol, thrid: Option<String>) {
        if self.barrier.iter().any(|w| w.conn == conn) {
            self.protocol_error(conn, "entered the barrier twice".into(), false);
            return;
        }
        self.barrier.push(BarrierWaiter { conn, proto, thrid });
        self.try_release_barrier();
    }

    /// Releases the barrier once every rank not lost has entered it.
    fn try_release_barrier(&mut self) {
        if self.barrier.is_empty() || self.barrier.len() + self.lost.len() < self.job.size as usize
        {
            return;
        }
        // Everyone is here: publish the puts, then release everyone.
        for (k, v) in self.pending.drain(..) {
            self.kvs.insert(k, v);
        }
        for w in std::mem::take(&mut self.barrier) {
            match w.proto {
                Protocol::V1 => self.reply_v1(w.conn, "barrier_out", &[]),
                Protocol::V2 => self.send_v2(
                    w.conn,
                    "kvs-fence-response",
                    w.thrid.as_deref(),
                    &[("rc", "0".into())],
                ),
            }
        }
    }

    fn finalized(&mut self, conn: ConnId) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.finalized = true;
        }
        let rank = self.rank_of(conn);
        self.events.push_back(ServerEvent::Finalized { conn, rank });
    }

    fn abort(&mut self, conn: ConnId, msg: &Message) {
        let exitcode = msg
            .get("exitcode")
            .and_then(|v| v.trim().parse::<i32>().ok())
            .unwrap_or(1);
        let message = msg.get("message").unwrap_or("").to_string();
        let rank = self.rank_of(conn);
        self.events.push_back(ServerEvent::Abort {
            conn,
            rank,
            exitcode,
            message,
        });
    }
}

/// Whether `frame` is the `auth` line with the job's secret `want`
/// (compared in time independent of where they differ).
fn authenticates(want: Option<&str>, frame: &Frame) -> bool {
    let (Some(want), Ok(m)) = (want, &frame.message) else {
        return false;
    };
    if frame.protocol != Protocol::V1 || m.cmd != "auth" {
        return false;
    }
    let got = m.get("secret").unwrap_or("").as_bytes();
    let want = want.as_bytes();
    got.len() == want.len() && got.iter().zip(want).fold(0u8, |a, (x, y)| a | (x ^ y)) == 0
}

fn proto_num(p: Protocol) -> u8 {
    match p {
        Protocol::V1 => 1,
        Protocol::V2 => 2,
    }
}
