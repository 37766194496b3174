//! Shared by the segment_* and cma_* tests: running this very test binary as
//! a child process in a "child mode", and a fast deterministic byte pattern.
//!
//! A test file declares a test named `child_entry` that calls
//! [`child_entry`]; the parent runs the binary again with `--exact
//! child_entry` and `OXMPI_TEST_CHILD=<mode>`. The child talks on stdout with
//! lines prefixed by [`PREFIX`] (libtest prints its own lines too) and reads
//! commands from stdin; it exits when stdin closes.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

/// Prefix of every line a child writes for its parent.
pub const PREFIX: &str = "OXMPI-CHILD ";
/// Environment variable selecting the child mode.
pub const MODE_VAR: &str = "OXMPI_TEST_CHILD";

/// In a child: the mode, if this process is one.
pub fn child_mode() -> Option<String> {
    std::env::var(MODE_VAR).ok()
}

/// In a child: one line to the parent.
pub fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{PREFIX}{line}").unwrap();
    out.flush().unwrap();
}

/// In a child: the next command line from the parent, `None` at EOF.
pub fn next_command() -> Option<String> {
    let mut line = String::new();
    match std::io::stdin().read_line(&mut line) {
        Ok(0) | Err(_) => None,
        Ok(_) => Some(line.trim().to_string()),
    }
}

/// A running child, killed (SIGKILL) and reaped when dropped.
pub struct ChildProc {
    pub child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl ChildProc {
    /// Runs this test binary's `child_entry` test in `mode`, with extra
    /// environment variables.
    pub fn spawn(mode: &str, env: &[(&str, String)]) -> ChildProc {
        let exe = std::env::current_exe().unwrap();
        let mut cmd = Command::new(exe);
        cmd.args([
            "child_entry",
            "--exact",
            "--nocapture",
            "--test-threads=1",
            "-q",
        ])
        .env(MODE_VAR, mode)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        ChildProc {
            child,
            stdin,
            stdout,
        }
    }

    /// The child's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The next line the child said (without the prefix); panics at EOF.
    pub fn hear(&mut self) -> String {
        loop {
            let mut line = String::new();
            let n = self.stdout.read_line(&mut line).unwrap();
            assert!(n > 0, "child exited before saying anything more");
            if let Some(rest) = line.trim_end().strip_prefix(PREFIX) {
                return rest.to_string();
            }
        }
    }

    /// Sends one command line.
    pub fn tell(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }

    /// Closes stdin and waits for a clean exit.
    pub fn finish(mut self) {
        drop(self.stdin.take());
        let status = self.child.wait().unwrap();
        assert!(status.success(), "child failed: {status}");
    }

    /// SIGKILL and reap.
    pub fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for ChildProc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Parses `key=value` words of a child's line.
pub fn field<T: std::str::FromStr>(line: &str, key: &str) -> T
where
    T::Err: std::fmt::Debug,
{
    let word = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
        .unwrap_or_else(|| panic!("no {key}= in {line:?}"));
    word.parse().unwrap()
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Bytes `[off, off + len)` of the pattern with `seed`: byte `i` is byte
/// `i % 8` of `splitmix(seed * 2^40 + i / 8)`. Generated a word at a time so
/// that it is quick in debug builds.
pub fn pattern(seed: u64, off: usize, len: usize) -> Vec<u8> {
    let first = off / 8;
    let last = (off + len).div_ceil(8);
    let mut words = Vec::with_capacity((last - first) * 8);
    for k in first..last {
        words.extend_from_slice(&splitmix((seed << 40) + k as u64).to_le_bytes());
    }
    let skip = off - first * 8;
    words.drain(..skip);
    words.truncate(len);
    words
}

/// Hex of bytes (to pass a card in the environment).
pub fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Bytes of a hex string.
pub fn from_hex(text: &str) -> Vec<u8> {
    (0..text.len() / 2)
        .map(|i| u8::from_str_radix(&text[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}
