//! PMI-1 and PMI-2 wire formats: encoding, parsing and framing.
//!
//! Contract:
//! * Everything parsed here comes from untrusted bytes (a peer process or a
//!   launcher). Parsing is bounds-checked and never panics on any input; a
//!   bad message is reported as a [`WireError`].
//! * PMI-1: one line `cmd=<name> k=v ...\n`; a value ends at a space or the
//!   newline (MPICH 4.1+ may escape a space as `\ `, which is undone on parse).
//!   The multi-line `mcmd=spawn ... endcmd\n` form is framed and parsed so a
//!   server can reject it cleanly.
//! * PMI-2: a 6-character decimal length (left- or right-aligned with spaces;
//!   MPICH right-aligns, Slurm left-aligns) followed by `cmd=<name>;k=v;...;`.
//! * Which protocol a message uses is decided per message, as Hydra does:
//!   `cmd=` / `mcmd=` prefix means PMI-1, anything else PMI-2 ([`detect`]).
//!
//! Encoding is strict (it refuses what a peer could not parse back); parsing
//! is lenient where real servers differ (missing `;` at the end, a key with
//! no `=`, extra spaces).

use std::fmt;

/// The longest PMI-1 line a client should send (Slurm reads each request
/// with a single `read()` of this many bytes).
pub const MAX_V1_LINE: usize = 1024;

/// Width of the PMI-2 decimal length prefix.
pub const V2_LEN_PREFIX: usize = 6;

/// The largest PMI-2 body the 6-digit prefix can describe.
pub const V2_MAX_BODY: usize = 999_999;

/// Default bound on how many bytes a [`Decoder`] buffers for one message
/// before declaring the stream broken (protects a server from a peer that
/// never sends a newline).
pub const DEFAULT_MAX_MESSAGE: usize = 1 << 20;

/// The two PMI wire protocols.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// PMI-1 (`cmd=... k=v\n` lines; also used for the PMI-2 `init` handshake).
    V1,
    /// PMI-2 (length-prefixed `cmd=...;k=v;` messages).
    V2,
}

/// Alignment of the PMI-2 length prefix when encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// `"    34"`, as MPICH writes it.
    Right,
    /// `"34    "`, as Slurm writes it.
    Left,
}

/// A parse or encode failure. Messages name the cause.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The message does not begin with `cmd=<name>` (or `mcmd=` for PMI-1).
    #[error("message does not start with cmd=<name>")]
    MissingCmd,
    /// A key contains a character outside `[A-Za-z0-9_/-]` or is empty.
    #[error("invalid key {0:?} (keys are [A-Za-z0-9_/-]+)")]
    BadKey(String),
    /// A value contains a byte the protocol cannot carry.
    #[error("value of {key} contains {byte:#04x}, which PMI-{version} cannot carry")]
    BadValue {
        /// The key whose value is bad.
        key: String,
        /// The offending byte.
        byte: u8,
        /// 1 or 2.
        version: u8,
    },
    /// The message is not valid UTF-8.
    #[error("message is not valid UTF-8")]
    NotUtf8,
    /// The PMI-2 length prefix is not a decimal number padded with spaces.
    #[error("PMI-2 length prefix {0:?} is not a space-padded decimal number")]
    BadLength(String),
    /// A message is longer than the limit.
    #[error("message of {len} bytes exceeds the limit of {max} bytes")]
    TooLong {
        /// Its length (or the length buffered so far).
        len: usize,
        /// The limit.
        max: usize,
    },
}

/// One PMI command or reply: a command name and ordered key/value pairs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Message {
    /// The value of `cmd=` (or `mcmd=`).
    pub cmd: String,
    /// The other pairs, in wire order (duplicates kept).
    pub args: Vec<(String, String)>,
}

impl Message {
    /// A message with command `cmd` and no arguments.
    pub fn new(cmd: impl Into<String>) -> Self {
        Message {
            cmd: cmd.into(),
            args: Vec::new(),
        }
    }

    /// Builder form of [`Message::push`].
    #[must_use]
    pub fn arg(mut self, key: impl Into<String>, value: impl fmt::Display) -> Self {
        self.push(key, value);
        self
    }

    /// Appends `key=value`.
    pub fn push(&mut self, key: impl Into<String>, value: impl fmt::Display) {
        self.args.push((key.into(), value.to_string()));
    }

    /// The first value for `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.args
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The `rc=` field: `None` when absent (Hydra's `barrier_out` has none),
    /// `Some(Err(text))` when it is not an integer.
    pub fn rc(&self) -> Option<Result<i64, String>> {
        self.get("rc")
            .map(|v| v.trim().parse::<i64>().map_err(|_| v.to_string()))
    }
}

/// Whether `c` may appear in a key (MPICH's `IS_KEY`).
pub fn is_key_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'-' || c == b'/'
}

fn check_key(key: &str) -> Result<(), WireError> {
    if key.is_empty() || !key.bytes().all(is_key_byte) {
        return Err(WireError::BadKey(key.to_string()));
    }
    Ok(())
}

/// Decides the protocol of the message at the start of `buf`, as Hydra does:
/// `cmd=` or `mcmd=` means PMI-1, anything else PMI-2.
///
/// Returns `None` when `buf` is too short to tell (it is a proper prefix of
/// `cmd=` or `mcmd=`).
pub fn detect(buf: &[u8]) -> Option<Protocol> {
    if buf.starts_with(b"cmd=") || buf.starts_with(b"mcmd=") {
        Some(Protocol::V1)
    } else if b"cmd=".starts_with(buf) || b"mcmd=".starts_with(buf) {
        None
    } else {
        Some(Protocol::V2)
    }
}

/// Encodes a PMI-1 line `cmd=<name> k=v ...\n`.
///
/// Values may not contain spaces, newlines, backslashes or NUL (encode binary
/// data first, see [`super::value`]).
pub fn encode_v1(msg: &Message) -> Result<Vec<u8>, WireError> {
    check_key(&msg.cmd).map_err(|_| WireError::MissingCmd)?;
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(b"cmd=");
    out.extend_from_slice(msg.cmd.as_bytes());
    for (k, v) in &msg.args {
        check_key(k)?;
        if let Some(byte) = unescaped_v1_byte(v.as_bytes()) {
            return Err(WireError::BadValue {
                key: k.clone(),
                byte,
                version: 1,
            });
        }
        out.push(b' ');
        out.extend_from_slice(k.as_bytes());
        out.push(b'=');
        out.extend_from_slice(v.as_bytes());
    }
    out.push(b'\n');
    Ok(out)
}

/// The first byte of a PMI-1 value that a parser could not read back: a
/// space, newline, NUL or carriage return, or a backslash that does not
/// escape a space or a backslash ([`escape_v1`] writes those pairs).
fn unescaped_v1_byte(v: &[u8]) -> Option<u8> {
    let mut i = 0;
    while i < v.len() {
        match v[i] {
            b'\\' if matches!(v.get(i + 1), Some(b' ' | b'\\')) => i += 2,
            b @ (b' ' | b'\n' | b'\\' | 0 | b'\r') => return Some(b),
            _ => i += 1,
        }
    }
    None
}

/// Free text as a PMI-1 value, the way MPICH's PMI client writes one: a
/// space or backslash is escaped with a backslash (parsers undo it, as
/// [`parse_v1`] and Hydra do); other control characters become spaces.
/// Nothing is lost for printable text.
///
/// ```
/// use oxmpi_runtime::pmi::wire::{escape_v1, encode_v1, parse_v1, Message};
/// let text = "MPI_Abort called (code 3)\tby rank 1";
/// let m = Message::new("abort").arg("message", escape_v1(text));
/// let back = parse_v1(&encode_v1(&m).unwrap()).unwrap();
/// assert_eq!(back.get("message"), Some("MPI_Abort called (code 3) by rank 1"));
/// ```
pub fn escape_v1(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            ' ' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            c if c.is_control() => out.push_str("\\ "),
            c => out.push(c),
        }
    }
    out
}

/// Parses one PMI-1 line (with or without its trailing newline).
pub fn parse_v1(line: &[u8]) -> Result<Message, WireError> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let text = std::str::from_utf8(line).map_err(|_| WireError::NotUtf8)?;
    if !text.starts_with("cmd=") {
        return Err(WireError::MissingCmd);
    }
    let bytes = text.as_bytes();
    let mut msg = Message::default();
    let mut have_cmd = false;
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b' ' {
            i += 1;
            continue;
        }
        // key
        let kstart = i;
        while i < bytes.len() && is_key_byte(bytes[i]) {
            i += 1;
        }
        let key = &text[kstart..i];
        if key.is_empty() || (i < bytes.len() && bytes[i] != b'=' && bytes[i] != b' ') {
            // take the whole offending token for the message
            let end = text[kstart..].find(' ').map_or(text.len(), |e| kstart + e);
            return Err(WireError::BadKey(text[kstart..end].to_string()));
        }
        let mut value = String::new();
        if i < bytes.len() && bytes[i] == b'=' {
            i += 1;
            // value: up to the next unescaped space
            while i < bytes.len() && bytes[i] != b' ' {
                if bytes[i] == b'\\' && i + 1 < bytes.len() {
                    i += 1;
                }
                // push the (possibly multi-byte) char starting at i
                let ch_len = utf8_len(bytes[i]);
                let end = (i + ch_len).min(bytes.len());
                value.push_str(text.get(i..end).ok_or(WireError::NotUtf8)?);
                i = end;
            }
        }
        if !have_cmd {
            if key != "cmd" || value.is_empty() {
                return Err(WireError::MissingCmd);
            }
            msg.cmd = value;
            have_cmd = true;
        } else {
            msg.args.push((key.to_string(), value));
        }
    }
    if !have_cmd {
        return Err(WireError::MissingCmd);
    }
    Ok(msg)
}

fn utf8_len(first: u8) -> usize {
    match first {
        0xF0..=0xFF => 4,
        0xE0..=0xEF => 3,
        0xC0..=0xDF => 2,
        _ => 1,
    }
}

/// Parses a multi-line PMI-1 `mcmd=` block (each line `key=value`, the last
/// `endcmd`). The command name is the `mcmd=` value.
pub fn parse_v1_mcmd(block: &[u8]) -> Result<Message, WireError> {
    let text = std::str::from_utf8(block).map_err(|_| WireError::NotUtf8)?;
    let mut lines = text.lines();
    let first = lines.next().ok_or(WireError::MissingCmd)?;
    let cmd = first.strip_prefix("mcmd=").ok_or(WireError::MissingCmd)?;
    if cmd.is_empty() {
        return Err(WireError::MissingCmd);
    }
    let mut msg = Message::new(cmd.trim());
    for line in lines {
        if line == "endcmd" {
            break;
        }
        if line.is_empty() {
            continue;
        }
        let (k, v) = line.split_once('=').unwrap_or((line, ""));
        check_key(k)?;
        msg.push(k, v);
    }
    Ok(msg)
}

/// Encodes the body of a PMI-2 message, `cmd=<name>;k=v;...;`, without the
/// length prefix.
pub fn encode_v2_body(msg: &Message) -> Result<Vec<u8>, WireError> {
    check_key(&msg.cmd).map_err(|_| WireError::MissingCmd)?;
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(b"cmd=");
    out.extend_from_slice(msg.cmd.as_bytes());
    out.push(b';');
    for (k, v) in &msg.args {
        check_key(k)?;
        if let Some(&byte) = v.as_bytes().iter().find(|&&b| b == b';' || b == 0) {
            return Err(WireError::BadValue {
                key: k.clone(),
                byte,
                version: 2,
            });
        }
        out.extend_from_slice(k.as_bytes());
        out.push(b'=');
        out.extend_from_slice(v.as_bytes());
        out.push(b';');
    }
    Ok(out)
}

/// Encodes a complete PMI-2 message: length prefix plus body.
pub fn encode_v2(msg: &Message, align: Align) -> Result<Vec<u8>, WireError> {
    let body = encode_v2_body(msg)?;
    if body.len() > V2_MAX_BODY {
        return Err(WireError::TooLong {
            len: body.len(),
            max: V2_MAX_BODY,
        });
    }
    let prefix = match align {
        Align::Right => format!("{:>6}", body.len()),
        Align::Left => format!("{:<6}", body.len()),
    };
    let mut out = Vec::with_capacity(V2_LEN_PREFIX + body.len());
    out.extend_from_slice(prefix.as_bytes());
    out.extend_from_slice(&body);
    Ok(out)
}

/// Parses a PMI-2 length prefix (exactly [`V2_LEN_PREFIX`] bytes; digits
/// padded with spaces on either side).
pub fn parse_v2_len(prefix: &[u8]) -> Result<usize, WireError> {
    let bad = || WireError::BadLength(String::from_utf8_lossy(prefix).into_owned());
    if prefix.len() != V2_LEN_PREFIX {
        return Err(bad());
    }
    let text = std::str::from_utf8(prefix).map_err(|_| bad())?;
    let digits = text.trim_matches(' ');
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    digits.parse::<usize>().map_err(|_| bad())
}

/// Parses a PMI-2 body `cmd=<name>;k=v;...;` (the part after the prefix).
pub fn parse_v2_body(body: &[u8]) -> Result<Message, WireError> {
    let text = std::str::from_utf8(body).map_err(|_| WireError::NotUtf8)?;
    // Tolerate a trailing newline some clients add.
    let text = text.trim_end_matches(['\n', '\r']);
    let mut msg = Message::default();
    let mut have_cmd = false;
    for pair in text.split(';') {
        let pair = pair.trim_start_matches(' ');
        if pair.is_empty() {
            continue;
        }
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        if !have_cmd {
            if k != "cmd" || v.is_empty() {
                return Err(WireError::MissingCmd);
            }
            msg.cmd = v.to_string();
            have_cmd = true;
            continue;
        }
        check_key(k)?;
        msg.push(k, v);
    }
    if !have_cmd {
        return Err(WireError::MissingCmd);
    }
    Ok(msg)
}

/// One framed message taken from a [`Decoder`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// Which protocol the message was framed as.
    pub protocol: Protocol,
    /// True for a multi-line PMI-1 `mcmd=` block.
    pub multi: bool,
    /// The parsed message, or why its (correctly framed) body is bad. A bad
    /// body leaves the stream usable: the next frame starts after it.
    pub message: Result<Message, WireError>,
}

/// What a [`Decoder`] expects next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// Decide per message ([`detect`]): what a server does.
    Auto,
    /// A PMI-1 line: what a client reading PMI-1 replies does.
    V1,
    /// A PMI-2 length-prefixed message.
    V2,
}

/// Accumulates bytes from a stream and cuts them into messages.
///
/// A framing error (a bad PMI-2 length prefix, a message over the size limit)
/// is returned as `Err` from [`Decoder::next_frame`]: the stream cannot be
/// resynchronised after it and should be dropped.
#[derive(Debug, Clone)]
pub struct Decoder {
    buf: Vec<u8>,
    max_message: usize,
}

impl Default for Decoder {
    fn default() -> Self {
        Self::new()
    }
}

impl Decoder {
    /// A decoder with the [`DEFAULT_MAX_MESSAGE`] limit.
    pub fn new() -> Self {
        Self::with_max_message(DEFAULT_MAX_MESSAGE)
    }

    /// A decoder that refuses messages longer than `max_message` bytes.
    pub fn with_max_message(max_message: usize) -> Self {
        Decoder {
            buf: Vec::new(),
            max_message: max_message.max(V2_LEN_PREFIX + 8),
        }
    }

    /// Appends bytes read from the stream.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes buffered but not yet framed.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Takes the next complete message, `Ok(None)` if more bytes are needed.
    pub fn next_frame(&mut self, expect: Expect) -> Result<Option<Frame>, WireError> {
        if self.buf.is_empty() {
            return Ok(None);
        }
        let proto = match expect {
            Expect::V1 => Protocol::V1,
            Expect::V2 => Protocol::V2,
            Expect::Auto => match detect(&self.buf) {
                Some(p) => p,
                None => return Ok(None),
            },
        };
        match proto {
            Protocol::V1 if self.buf.starts_with(b"mcmd=") => self.next_mcmd(),
            Protocol::V1 => self.next_line(),
            Protocol::V2 => self.next_v2(),
        }
    }

    fn too_long(&self) -> WireError {
        WireError::TooLong {
            len: self.buf.len(),
            max: self.max_message,
        }
    }

    fn next_line(&mut self) -> Result<Option<Frame>, WireError> {
        let Some(nl) = self.buf.iter().position(|&b| b == b'\n') else {
            if self.buf.len() > self.max_message {
                return Err(self.too_long());
            }
            return Ok(None);
        };
        if nl > self.max_message {
            return Err(self.too_long());
        }
        let line: Vec<u8> = self.buf.drain(..=nl).collect();
        Ok(Some(Frame {
            protocol: Protocol::V1,
            multi: false,
            message: parse_v1(&line),
        }))
    }

    fn next_mcmd(&mut self) -> Result<Option<Frame>, WireError> {
        // The block ends with the line "endcmd".
        let mut start = 0;
        let mut end = None;
        while let Some(off) = self.buf[start..].iter().position(|&b| b == b'\n') {
            let line = &self.buf[start..start + off];
            if line == b"endcmd" {
                end = Some(start + off + 1);
                break;
            }
            start += off + 1;
        }
        let Some(end) = end else {
            if self.buf.len() > self.max_message {
                return Err(self.too_long());
            }
            return Ok(None);
        };
        // The same bound as a block still arriving (and as a line: its
        // bytes before the last newline), whatever the reads' sizes.
        if end - 1 > self.max_message {
            return Err(self.too_long());
        }
        let block: Vec<u8> = self.buf.drain(..end).collect();
        Ok(Some(Frame {
            protocol: Protocol::V1,
            multi: true,
            message: parse_v1_mcmd(&block),
        }))
    }

    fn next_v2(&mut self) -> Result<Option<Frame>, WireError> {
        if self.buf.len() < V2_LEN_PREFIX {
            // Fail early on garbage so a server does not wait forever.
            if !self.buf.iter().all(|&b| b == b' ' || b.is_ascii_digit()) {
                let n = self.buf.len();
                return Err(WireError::BadLength(
                    String::from_utf8_lossy(&self.buf[..n]).into_owned(),
                ));
            }
            return Ok(None);
        }
        let len = parse_v2_len(&self.buf[..V2_LEN_PREFIX])?;
        if len > self.max_message {
            return Err(WireError::TooLong {
                len,
                max: self.max_message,
            });
        }
        let total = V2_LEN_PREFIX + len;
        if self.buf.len() < total {
            return Ok(None);
        }
        let frame: Vec<u8> = self.buf.drain(..total).collect();
        Ok(Some(Frame {
            protocol: Protocol::V2,
            multi: false,
            message: parse_v2_body(&frame[V2_LEN_PREFIX..]),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1_round_trip() {
        let m = Message::new("put")
            .arg("kvsname", "kvs_1")
            .arg("key", "a/b-c_d")
            .arg("value", "xyz=");
        let bytes = encode_v1(&m).unwrap();
        assert_eq!(bytes, b"cmd=put kvsname=kvs_1 key=a/b-c_d value=xyz=\n");
        assert_eq!(parse_v1(&bytes).unwrap(), m);
    }

    #[test]
    fn v1_escapes_and_bare_keys() {
        let m = parse_v1(b"cmd=abort  exitcode=3 message=a\\ b flag\n").unwrap();
        assert_eq!(m.cmd, "abort");
        assert_eq!(m.get("exitcode"), Some("3"));
        assert_eq!(m.get("message"), Some("a b"));
        assert_eq!(m.get("flag"), Some(""));
        assert!(encode_v1(&Message::new("x").arg("v", "a b")).is_err());
        assert!(parse_v1(b"put key=1\n").is_err());
        assert!(parse_v1(b"cmd=\n").is_err());
        assert!(parse_v1(b"cmd=x k!=1\n").is_err());
    }

    #[test]
    fn v2_both_alignments() {
        let m = Message::new("kvs-put").arg("key", "k").arg("value", "v v");
        let r = encode_v2(&m, Align::Right).unwrap();
        let l = encode_v2(&m, Align::Left).unwrap();
        assert_eq!(&r[..6], b"    28");
        assert_eq!(&l[..6], b"28    ");
        for bytes in [r, l] {
            let mut d = Decoder::new();
            d.push(&bytes);
            let f = d.next_frame(Expect::Auto).unwrap().unwrap();
            assert_eq!(f.protocol, Protocol::V2);
            assert_eq!(f.message.unwrap(), m);
        }
        assert!(parse_v2_len(b" 1 2  ").is_err());
        assert!(parse_v2_len(b"      ").is_err());
    }

    #[test]
    fn detect_per_message() {
        assert_eq!(detect(b"cmd=init"), Some(Protocol::V1));
        assert_eq!(detect(b"mcmd=spawn"), Some(Protocol::V1));
        assert_eq!(detect(b"cm"), None);
        assert_eq!(detect(b"    12cmd="), Some(Protocol::V2));
        assert_eq!(detect(b"12    cmd="), Some(Protocol::V2));
    }

    #[test]
    fn an_mcmd_block_over_the_limit_fails_whole_or_in_pieces() {
        let block = b"mcmd=spawn\nnprocs=1\nexecname=a.out\nendcmd\n";
        let max = block.len() - 2; // 1 byte short of the block without its newline
        let mut whole = Decoder::with_max_message(max);
        whole.push(block);
        assert!(matches!(
            whole.next_frame(Expect::Auto),
            Err(WireError::TooLong { .. })
        ));
        let mut pieces = Decoder::with_max_message(max);
        let mut end = Ok(None);
        for b in block {
            pieces.push(std::slice::from_ref(b));
            end = pieces.next_frame(Expect::Auto);
            if end.is_err() {
                break;
            }
        }
        assert!(matches!(end, Err(WireError::TooLong { .. })));
        // One byte more of room: both frame it.
        let mut fits = Decoder::with_max_message(max + 1);
        fits.push(block);
        assert!(fits.next_frame(Expect::Auto).unwrap().unwrap().multi);
    }

    #[test]
    fn decoder_mixed_and_split() {
        let mut all = b"cmd=init pmi_version=2 pmi_subversion=0\n".to_vec();
        all.extend(encode_v2(&Message::new("fullinit").arg("pmirank", 0), Align::Right).unwrap());
        all.extend_from_slice(b"mcmd=spawn\nnprocs=1\nendcmd\n");
        let mut d = Decoder::new();
        let mut frames = Vec::new();
        for b in &all {
            d.push(std::slice::from_ref(b));
            while let Some(f) = d.next_frame(Expect::Auto).unwrap() {
                frames.push(f);
            }
        }
        assert_eq!(frames.len(), 3);
        assert_eq!(frames[0].protocol, Protocol::V1);
        assert_eq!(frames[1].protocol, Protocol::V2);
        assert_eq!(frames[1].message.as_ref().unwrap().cmd, "fullinit");
        assert!(frames[2].multi);
        assert_eq!(frames[2].message.as_ref().unwrap().get("nprocs"), Some("1"));
    }
}
