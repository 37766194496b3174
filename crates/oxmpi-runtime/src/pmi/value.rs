//! How arbitrary bytes are stored in PMI values.
//!
//! Contract: any byte string survives a put/get through any PMI server.
//! * Bytes are encoded as URL-safe base64 without padding (`[A-Za-z0-9_-]`
//!   only: no spaces, no `=`, no `;`, which some servers mishandle).
//! * The value stored under the user's key always starts with a tag byte so
//!   it is never empty (Hydra rejects `value=` with nothing after it):
//!   `v<base64>` holds the data inline; `c<n>` says the data is split over
//!   `n` chunk keys `<key>/0` .. `<key>/<n-1>`, each holding a piece of the
//!   base64 text, so no single value exceeds the server's limit.
//! * `/` is therefore reserved in user keys (see [`check_user_key`]).

/// Longest user key accepted: leaves room for a rank namespace and a chunk
/// suffix under the usual 64-byte `keylen_max`.
pub const MAX_USER_KEY: usize = 40;

/// Why a stored value could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValueError {
    /// The text is not URL-safe base64.
    #[error("byte {0:#04x} is not URL-safe base64")]
    BadByte(u8),
    /// The base64 text has an impossible length.
    #[error("base64 text of length {0} is truncated")]
    BadLength(usize),
    /// The value does not start with a known tag.
    #[error("stored value has an unknown header {0:?}")]
    BadHeader(String),
}

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// Encodes bytes as URL-safe base64 without padding.
pub fn encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        let chars = chunk.len() + 1;
        for i in 0..chars {
            let idx = (n >> (18 - 6 * i)) & 0x3f;
            out.push(ALPHABET[idx as usize] as char);
        }
    }
    out
}

fn sextet(c: u8) -> Result<u32, ValueError> {
    Ok(match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'-' => 62,
        b'_' => 63,
        _ => return Err(ValueError::BadByte(c)),
    } as u32)
}

/// Decodes URL-safe base64 without padding.
pub fn decode(text: &str) -> Result<Vec<u8>, ValueError> {
    let bytes = text.as_bytes();
    if bytes.len() % 4 == 1 {
        return Err(ValueError::BadLength(bytes.len()));
    }
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3 + 2);
    for chunk in bytes.chunks(4) {
        let mut n = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            n |= sextet(c)? << (18 - 6 * i);
        }
        let produced = chunk.len() - 1;
        for i in 0..produced {
            out.push((n >> (16 - 8 * i)) as u8);
        }
    }
    Ok(out)
}

/// Checks a caller's key: 1..=[`MAX_USER_KEY`] bytes of `[A-Za-z0-9_-]`
/// (`/` is reserved for chunk keys, and `PMI_` for the launcher).
pub fn check_user_key(key: &str) -> Result<(), String> {
    if key.is_empty() || key.len() > MAX_USER_KEY {
        return Err(format!("length must be 1..={MAX_USER_KEY}"));
    }
    if !key
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        return Err("only [A-Za-z0-9_-] are allowed".into());
    }
    if key.starts_with("PMI_") {
        return Err("the PMI_ prefix is reserved for the launcher".into());
    }
    Ok(())
}

/// The key under which chunk `i` of `key` is stored.
pub fn chunk_key(key: &str, i: usize) -> String {
    format!("{key}/{i}")
}

/// What to store for one value: the header under the key itself and the
/// chunk texts under [`chunk_key`]`(key, 0..)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Value for the key itself (`v...` or `c<n>`).
    pub head: String,
    /// Values for the chunk keys, in order (empty when inline).
    pub chunks: Vec<String>,
}

/// Splits `bytes` into stored values no longer than `max_value` characters
/// (at least 8).
pub fn plan(bytes: &[u8], max_value: usize) -> Plan {
    let max_value = max_value.max(8);
    let text = encode(bytes);
    if text.len() < max_value {
        return Plan {
            head: format!("v{text}"),
            chunks: Vec::new(),
        };
    }
    // base64 text is ASCII, so byte-slicing is safe.
    let chunks: Vec<String> = text
        .as_bytes()
        .chunks(max_value)
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .collect();
    Plan {
        head: format!("c{}", chunks.len()),
        chunks,
    }
}

/// A parsed header value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Head {
    /// The data itself.
    Inline(Vec<u8>),
    /// The data is split over this many chunk keys.
    Chunked(usize),
}

/// Upper bound on chunk counts accepted from a peer (a 3000-byte value
/// needs 5; this allows values of tens of megabytes).
pub const MAX_CHUNKS: usize = 100_000;

/// Parses the value stored under a key.
pub fn parse_head(stored: &str) -> Result<Head, ValueError> {
    let bad = || ValueError::BadHeader(stored.chars().take(16).collect());
    match stored.as_bytes().first() {
        Some(b'v') => Ok(Head::Inline(decode(&stored[1..])?)),
        Some(b'c') => {
            let n: usize = stored[1..].parse().map_err(|_| bad())?;
            if n == 0 || n > MAX_CHUNKS {
                return Err(bad());
            }
            Ok(Head::Chunked(n))
        }
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trip_all_lengths() {
        let data: Vec<u8> = (0..=255u8).collect();
        for n in 0..data.len() {
            let t = encode(&data[..n]);
            assert!(t
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
            assert_eq!(decode(&t).unwrap(), &data[..n]);
        }
        assert_eq!(encode(b"foobar"), "Zm9vYmFy");
        assert_eq!(encode(b"fo"), "Zm8");
        assert!(decode("Zm9vY").is_err());
        assert!(decode("Zm+v").is_err());
    }

    #[test]
    fn plan_splits_and_rejoins() {
        let data: Vec<u8> = (0..3000u32).map(|i| (i * 7) as u8).collect();
        let p = plan(&data, 900);
        assert_eq!(p.head, "c5");
        assert!(p.chunks.iter().all(|c| c.len() <= 900));
        let text: String = p.chunks.concat();
        assert_eq!(decode(&text).unwrap(), data);
        assert_eq!(parse_head(&p.head).unwrap(), Head::Chunked(5));
        let small = plan(b"", 900);
        assert_eq!(small.head, "v");
        assert_eq!(parse_head("v").unwrap(), Head::Inline(vec![]));
        assert!(parse_head("").is_err());
        assert!(parse_head("c0").is_err());
    }
}
