//! Fuzz target: the sans-IO PMI server core (`pmi::server::PmiServer`) fed
//! arbitrary bytes on several connections, as a launcher drives it.
//!
//! The input is a list of operations: connect (with or without a rank),
//! bytes on a connection (any bytes, in any chunks), disconnect, a rank
//! lost; the first byte says whether port connections must authenticate.
//! Checked: no panic; everything the server sends is well-formed PMI that
//! a client's decoder frames and parses, message by message and whole
//! (nothing left half-sent), and only to connections that are open (the
//! harness closes a connection the server says it ignores, as the
//! launcher does).
#![no_main]

use std::collections::{BTreeMap, BTreeSet};

use libfuzzer_sys::fuzz_target;
use oxmpi_runtime::pmi::server::{ConnId, JobInfo, PmiServer, ServerEvent};
use oxmpi_runtime::pmi::wire::{Decoder, Expect};

/// Reads the input's bytes in order.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> u8 {
        let (&b, rest) = self.0.split_first().unwrap_or((&0, &[]));
        self.0 = rest;
        b
    }
    fn take(&mut self, n: usize) -> &[u8] {
        let (a, b) = self.0.split_at(n.min(self.0.len()));
        self.0 = b;
        a
    }
}

/// Drains the server as the launcher does: every buffer must go to an open
/// connection and frame into complete, parseable messages; a connection
/// the server ignores from now on is closed.
fn drain(s: &mut PmiServer, open: &mut BTreeSet<u64>, clients: &mut BTreeMap<u64, Decoder>) {
    loop {
        while let Some((conn, bytes)) = s.poll_transmit() {
            assert!(
                open.contains(&conn.0),
                "bytes for closed connection {conn:?}"
            );
            assert!(!bytes.is_empty());
            let dec = clients.entry(conn.0).or_default();
            dec.push(&bytes);
            loop {
                match dec.next_frame(Expect::Auto) {
                    Ok(Some(f)) => {
                        let m = f.message.unwrap_or_else(|e| {
                            panic!("the server sent a malformed message ({e}): {bytes:?}")
                        });
                        assert!(!m.cmd.is_empty());
                    }
                    Ok(None) => break,
                    Err(e) => panic!("the server sent unframeable bytes ({e}): {bytes:?}"),
                }
            }
            assert_eq!(dec.buffered(), 0, "half a message sent: {bytes:?}");
        }
        let mut closed = false;
        while let Some(ev) = s.poll_event() {
            if let ServerEvent::ProtocolError {
                conn,
                ignored: true,
                ..
            } = ev
            {
                s.handle_disconnect(conn);
                open.remove(&conn.0);
                clients.remove(&conn.0);
                closed = true;
            }
        }
        if !closed {
            return;
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input(data);
    let flags = input.byte();
    let mut s = PmiServer::new(JobInfo {
        size: 3,
        kvsname: "kvs_fuzz_0".into(),
        appnum: 0,
        universe_size: 3,
        process_mapping: "(vector,(0,1,3))".into(),
        debug: flags & 2 != 0,
    });
    if flags & 1 != 0 {
        s.require_auth("s3cret".into());
    }
    let mut open = BTreeSet::new();
    let mut clients = BTreeMap::new();
    while !input.0.is_empty() {
        let op = input.byte();
        let conn = u64::from(op >> 4 & 3);
        match op & 15 {
            0 => {
                let rank = input.byte();
                s.handle_connect(ConnId(conn), (rank < 8).then_some(u32::from(rank)));
                open.insert(conn);
                clients.remove(&conn);
            }
            1 => {
                s.handle_disconnect(ConnId(conn));
                open.remove(&conn);
                clients.remove(&conn);
            }
            2 => s.handle_rank_lost(u32::from(input.byte() % 5)),
            _ => {
                // Bytes: a length, then that many bytes of the input. An
                // unknown connection is registered by its bytes.
                let n = usize::from(input.byte());
                let bytes = input.take(n).to_vec();
                open.insert(conn);
                s.handle_bytes(ConnId(conn), &bytes);
            }
        }
        drain(&mut s, &mut open, &mut clients);
    }
});
