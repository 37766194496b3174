//! Helpers shared by the `tcp_*` tests: modules on loopback, a recording
//! sink, driving loops with deadlines, and child processes (the test binary
//! re-executed with a role in an environment variable) that exchange
//! business cards over their stdin/stdout as `CARD <hex>` lines.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

use oxmpi_btl::btl::{AmTag, Btl, BtlError, BtlSink, Endpoint, PeerInfo, Token};
use oxmpi_btl::tcp::{TcpBtl, TcpConfig};

/// The secret of every test job.
pub const SECRET: [u8; 16] = *b"tcp-test-secret!";
/// The variable carrying a child's role.
pub const ROLE_VAR: &str = "OXMPI_TCP_TEST_ROLE";

/// A config on loopback for `rank`.
pub fn lo_config(rank: u32) -> TcpConfig {
    let mut cfg = TcpConfig::new(rank, SECRET);
    cfg.if_include = vec!["lo".into()];
    cfg
}

/// The one module of `cfg` (which must select one interface and one link).
pub fn one_module(cfg: &TcpConfig) -> TcpBtl {
    let mut m = TcpBtl::open_all(cfg).expect("open tcp");
    assert_eq!(m.len(), 1, "expected one module");
    m.pop().unwrap()
}

/// Adds the peer `rank` with `card` (same node).
pub fn add(m: &mut TcpBtl, rank: u32, card: &[u8]) -> Endpoint {
    m.add_peer(&PeerInfo {
        rank,
        local: true,
        card: Some(card),
    })
    .expect("add_peer")
    .expect("peer reachable")
}

/// Two loopback modules (ranks 0 and 1) that know each other.
pub fn lo_pair() -> (TcpBtl, Endpoint, TcpBtl, Endpoint) {
    let mut a = one_module(&lo_config(0));
    let mut b = one_module(&lo_config(1));
    let (ca, cb) = (a.business_card(), b.business_card());
    let ab = add(&mut a, 1, &cb);
    let ba = add(&mut b, 0, &ca);
    (a, ab, b, ba)
}

/// Everything a module's progress delivered.
#[derive(Default, Debug)]
pub struct Rec {
    /// Fragments, in order.
    pub recvs: Vec<(Endpoint, AmTag, Vec<u8>)>,
    /// Completions, in order.
    pub completions: Vec<(Token, Result<(), BtlError>)>,
    /// Lost peers, in order.
    pub lost: Vec<(Endpoint, BtlError)>,
    /// Refused puts: the peer, and how many fragments had arrived then.
    pub refused: Vec<(Endpoint, usize)>,
}

impl BtlSink for Rec {
    fn on_recv(&mut self, ep: Endpoint, tag: AmTag, data: &[u8]) {
        self.recvs.push((ep, tag, data.to_vec()));
    }
    fn on_complete(&mut self, token: Token, result: Result<(), BtlError>) {
        self.completions.push((token, result));
    }
    fn on_peer_lost(&mut self, ep: Endpoint, why: &BtlError) {
        self.lost.push((ep, why.clone()));
    }
    fn on_put_refused(&mut self, ep: Endpoint) {
        self.refused.push((ep, self.recvs.len()));
    }
}

/// Progresses `a` and `b` until `done` holds; panics after `limit`.
pub fn drive2(
    a: &mut TcpBtl,
    ra: &mut Rec,
    b: &mut TcpBtl,
    rb: &mut Rec,
    limit: Duration,
    what: &str,
    mut done: impl FnMut(&Rec, &Rec) -> bool,
) {
    let start = Instant::now();
    while !done(ra, rb) {
        a.progress(ra);
        b.progress(rb);
        assert!(start.elapsed() < limit, "{what}: not done after {limit:?}");
    }
}

/// Sends `data` on `ep` with `send`, progressing through NoResource.
pub fn send_retry(m: &mut TcpBtl, rec: &mut Rec, ep: Endpoint, tag: u8, data: &[u8], token: u64) {
    let start = Instant::now();
    loop {
        let mut d = match m.alloc(ep, data.len()) {
            Ok(d) => d,
            Err(BtlError::NoResource) => {
                m.progress(rec);
                continue;
            }
            Err(e) => panic!("alloc: {e}"),
        };
        d.buf.copy_from_slice(data);
        match m.send(d, AmTag(tag), Token(token)) {
            Ok(_) => return,
            Err((d, BtlError::NoResource)) => {
                m.free(d);
                m.progress(rec);
            }
            Err((_, e)) => panic!("send: {e}"),
        }
        assert!(start.elapsed() < Duration::from_secs(30), "send stuck");
    }
}

/// Lowercase hex.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Parses lowercase hex.
pub fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("hex"))
        .collect()
}

/// A child process: lines of its stdout arrive on a channel.
pub struct Proc {
    /// The process.
    pub child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
}

impl Proc {
    /// Runs `cmd` (stdin and stdout piped, stderr inherited).
    pub fn spawn(mut cmd: Command) -> Proc {
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn child");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Proc {
            stdin: child.stdin.take(),
            child,
            lines: rx,
        }
    }

    /// Re-executes this test binary to run test `test` with `role`.
    pub fn reexec(test: &str, role: &str) -> Proc {
        Proc::spawn(reexec_command(None, test, role))
    }

    /// The rest of the first line containing `prefix`, after it (other
    /// lines are skipped).
    pub fn expect(&mut self, prefix: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    // libtest may print "test name ... " before our line.
                    if let Some(at) = l.find(prefix) {
                        return l[at + prefix.len()..].trim().to_owned();
                    }
                }
                Err(e) => panic!("child: no line starting with {prefix:?} ({e})"),
            }
        }
    }

    /// Writes one line to the child's stdin.
    pub fn say(&mut self, line: &str) {
        let w = self.stdin.as_mut().expect("stdin");
        writeln!(w, "{line}").expect("write to child");
        w.flush().unwrap();
    }

    /// Waits for the exit status, at most `timeout` (then kills).
    pub fn wait(&mut self, timeout: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(s) = self.child.try_wait().expect("try_wait") {
                return s;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("child did not exit within {timeout:?}");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The command re-running test `test` of this binary with `role`,
/// optionally inside network namespace `netns`.
pub fn reexec_command(netns: Option<&str>, test: &str, role: &str) -> Command {
    let exe = std::env::current_exe().expect("current_exe");
    let mut cmd = match netns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns]).arg(exe);
            c
        }
        None => Command::new(exe),
    };
    cmd.args([
        test,
        "--exact",
        "--nocapture",
        "--include-ignored",
        "--test-threads=1",
    ])
    .env(ROLE_VAR, role);
    cmd
}

/// In a child: prints this process's card.
pub fn print_card(card: &[u8]) {
    println!("CARD {}", hex(card));
}

/// In a child: reads the first stdin line starting with `prefix`.
pub fn read_stdin_line(prefix: &str) -> String {
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let line = line.expect("read stdin");
        if let Some(rest) = line.strip_prefix(prefix) {
            return rest.trim().to_owned();
        }
    }
    panic!("stdin closed before a line starting with {prefix:?}");
}

/// The payload word at byte offset `off` (a multiple of 8) of a stream.
pub fn word_at(off: u64) -> u64 {
    off.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x5555_AAAA_0F0F_F0F0
}

/// Fills `buf` with the stream's bytes from `off` on (`off` and the length
/// multiples of 8).
pub fn fill(buf: &mut [u8], off: u64) {
    for (i, w) in buf.chunks_exact_mut(8).enumerate() {
        w.copy_from_slice(&word_at(off + 8 * i as u64).to_le_bytes());
    }
}

/// Whether `buf` holds the stream's bytes from `off` on.
pub fn check(buf: &[u8], off: u64) -> bool {
    buf.len() % 8 == 0
        && buf
            .chunks_exact(8)
            .enumerate()
            .all(|(i, w)| w == word_at(off + 8 * i as u64).to_le_bytes())
}
