//! The sans-IO server core driven directly with bytes.

use oxmpi_runtime::pmi::wire::{self, Align, Decoder, Expect, Message, Protocol};
use oxmpi_runtime::pmi::{ConnId, JobInfo, PmiServer, ServerEvent};
use proptest::prelude::*;

fn job(size: u32) -> JobInfo {
    JobInfo {
        size,
        kvsname: "kvs_9".into(),
        appnum: 2,
        universe_size: 8,
        process_mapping: "(vector,(0,1,4))".into(),
        debug: false,
    }
}

/// Replies the server queued, parsed, per connection.
fn replies(s: &mut PmiServer) -> Vec<(ConnId, Message)> {
    let mut out = Vec::new();
    let mut decs: std::collections::HashMap<ConnId, Decoder> = Default::default();
    while let Some((c, bytes)) = s.poll_transmit() {
        let d = decs.entry(c).or_default();
        d.push(&bytes);
        while let Some(f) = d.next_frame(Expect::Auto).unwrap() {
            out.push((c, f.message.unwrap()));
        }
    }
    out
}

fn events(s: &mut PmiServer) -> Vec<ServerEvent> {
    std::iter::from_fn(|| s.poll_event()).collect()
}

fn send2(s: &mut PmiServer, c: ConnId, m: Message) {
    s.handle_bytes(c, &wire::encode_v2(&m, Align::Left).unwrap());
}

#[test]
fn barrier_releases_only_when_all_arrived() {
    let mut s = PmiServer::new(job(3));
    for r in 0..3 {
        s.handle_connect(ConnId(r), Some(r as u32));
    }
    s.handle_bytes(ConnId(0), b"cmd=put kvsname=kvs_9 key=a value=1\n");
    assert_eq!(replies(&mut s)[0].1.cmd, "put_result");
    s.handle_bytes(ConnId(1), b"cmd=get kvsname=kvs_9 key=a\n");
    let r = replies(&mut s);
    assert_eq!(r[0].1.rc(), Some(Ok(1)), "not visible before the barrier");
    s.handle_bytes(ConnId(0), b"cmd=barrier_in\n");
    s.handle_bytes(ConnId(1), b"cmd=barrier_in\n");
    assert!(replies(&mut s).is_empty());
    assert_eq!(s.barrier_waiting(), 2);
    // the last one arrives in two pieces
    s.handle_bytes(ConnId(2), b"cmd=barr");
    assert!(replies(&mut s).is_empty());
    s.handle_bytes(ConnId(2), b"ier_in\n");
    let r = replies(&mut s);
    assert_eq!(r.len(), 3);
    assert!(r
        .iter()
        .all(|(_, m)| m.cmd == "barrier_out" && m.rc() == Some(Ok(0))));
    s.handle_bytes(ConnId(1), b"cmd=get kvsname=kvs_9 key=a\n");
    assert_eq!(replies(&mut s)[0].1.get("value"), Some("1"));
}

#[test]
fn barrier_stops_waiting_for_a_rank_lost() {
    let mut s = PmiServer::new(job(3));
    for r in 0..3 {
        s.handle_connect(ConnId(r), Some(r as u32));
    }
    // Rank 2 entered, then died; 0 waits; 2 is reported lost: still 1 to
    // come.
    s.handle_bytes(ConnId(2), b"cmd=barrier_in\n");
    s.handle_bytes(ConnId(0), b"cmd=barrier_in\n");
    s.handle_rank_lost(2);
    assert!(replies(&mut s).is_empty());
    assert_eq!(s.barrier_waiting(), 1);
    s.handle_bytes(ConnId(1), b"cmd=barrier_in\n");
    let r = replies(&mut s);
    let to: Vec<ConnId> = r.iter().map(|(c, _)| *c).collect();
    assert_eq!(to, [ConnId(0), ConnId(1)], "{r:?}");
    // Later barriers count it as arrived too; reporting it again changes
    // nothing.
    s.handle_rank_lost(2);
    s.handle_bytes(ConnId(1), b"cmd=barrier_in\n");
    assert!(replies(&mut s).is_empty());
    // The last live rank lost while the others wait releases them.
    s.handle_rank_lost(0);
    assert_eq!(replies(&mut s).len(), 1);
    // Hydra's job attribute names them, visible at once, over both wires.
    s.handle_bytes(ConnId(1), b"cmd=get kvsname=kvs_9 key=PMI_dead_processes\n");
    assert_eq!(replies(&mut s)[0].1.get("value"), Some("0,2"));
    send2(
        &mut s,
        ConnId(1),
        Message::new("info-getjobattr").arg("key", "PMI_dead_processes"),
    );
    assert_eq!(replies(&mut s)[0].1.get("value"), Some("0,2"));
}

#[test]
fn mixed_pmi1_and_pmi2_connections() {
    let mut s = PmiServer::new(job(2));
    s.handle_connect(ConnId(10), Some(0));
    s.handle_connect(ConnId(11), None);
    s.handle_bytes(ConnId(10), b"cmd=init pmi_version=1 pmi_subversion=1\n");
    s.handle_bytes(ConnId(11), b"cmd=init pmi_version=2 pmi_subversion=0\n");
    let r = replies(&mut s);
    assert_eq!(r[0].1.get("pmi_version"), Some("1"));
    assert_eq!(r[1].1.get("pmi_version"), Some("2"));
    send2(
        &mut s,
        ConnId(11),
        Message::new("fullinit")
            .arg("pmijobid", "j")
            .arg("pmirank", 1)
            .arg("threaded", "FALSE"),
    );
    let r = replies(&mut s);
    assert_eq!(r[0].1.cmd, "fullinit-response");
    assert_eq!(r[0].1.get("rank"), Some("1"));
    assert_eq!(r[0].1.get("size"), Some("2"));
    assert_eq!(r[0].1.get("appnum"), Some("2"));
    let ev = events(&mut s);
    assert!(ev.contains(&ServerEvent::Initialized {
        conn: ConnId(11),
        rank: Some(1),
        version: Protocol::V2
    }));
    s.handle_bytes(ConnId(10), b"cmd=put kvsname=kvs_9 key=k0 value=v0\n");
    send2(
        &mut s,
        ConnId(11),
        Message::new("kvs-put").arg("key", "k1").arg("value", "v 1"),
    );
    replies(&mut s);
    send2(
        &mut s,
        ConnId(11),
        Message::new("kvs-fence").arg("thrid", "0xabc"),
    );
    assert!(replies(&mut s).is_empty());
    s.handle_bytes(ConnId(10), b"cmd=barrier_in\n");
    let r = replies(&mut s);
    assert_eq!(r.len(), 2);
    let fence = r.iter().find(|(c, _)| *c == ConnId(11)).unwrap();
    assert_eq!(fence.1.cmd, "kvs-fence-response");
    assert_eq!(fence.1.get("thrid"), Some("0xabc"));
    s.handle_bytes(ConnId(10), b"cmd=get kvsname=kvs_9 key=k1\n");
    send2(
        &mut s,
        ConnId(11),
        Message::new("kvs-get")
            .arg("jobid", "kvs_9")
            .arg("srcid", -1)
            .arg("key", "k0"),
    );
    send2(&mut s, ConnId(11), Message::new("kvs-get").arg("key", "zz"));
    send2(
        &mut s,
        ConnId(11),
        Message::new("info-getjobattr").arg("key", "PMI_process_mapping"),
    );
    let r = replies(&mut s);
    // PMI-1 cannot carry the space: an error reply, not silence
    assert_eq!(r[0].0, ConnId(10));
    assert!(matches!(r[0].1.rc(), Some(Ok(rc)) if rc != 0));
    assert_eq!(r[1].1.get("value"), Some("v0"));
    assert_eq!(r[2].1.get("found"), Some("FALSE"));
    assert_eq!(r[3].1.get("value"), Some("(vector,(0,1,4))"));
}

#[test]
fn pmi1_info_commands_and_initack() {
    let mut s = PmiServer::new(job(4));
    s.handle_connect(ConnId(1), None);
    s.handle_bytes(ConnId(1), b"cmd=initack pmiid=3\n");
    let mut all = Vec::new();
    while let Some((_, b)) = s.poll_transmit() {
        all.extend(b);
    }
    assert_eq!(
        String::from_utf8(all).unwrap(),
        "cmd=initack rc=0\ncmd=set size=4\ncmd=set rank=3\ncmd=set debug=0\n"
    );
    for line in [
        "cmd=init pmi_version=1 pmi_subversion=1\n",
        "cmd=get_maxes\n",
        "cmd=get_appnum\n",
        "cmd=get_universe_size\n",
        "cmd=get_my_kvsname\n",
        "cmd=get kvsname=kvs_9 key=PMI_process_mapping\n",
        "cmd=put kvsname=kvs_9 key=PMI_x value=1\n",
        "cmd=frobnicate\n",
        "mcmd=spawn\nnprocs=1\nexecname=x\nendcmd\n",
        "cmd=init pmi_version=3 pmi_subversion=0\n",
        "cmd=finalize\n",
    ] {
        s.handle_bytes(ConnId(1), line.as_bytes());
    }
    let r: Vec<Message> = replies(&mut s).into_iter().map(|(_, m)| m).collect();
    assert_eq!(r[0].cmd, "response_to_init");
    assert_eq!(r[1].get("vallen_max"), Some("1024"));
    assert_eq!(r[2].get("appnum"), Some("2"));
    assert_eq!(r[3].get("size"), Some("8"));
    assert_eq!(r[4].get("kvsname"), Some("kvs_9"));
    assert_eq!(r[5].get("value"), Some("(vector,(0,1,4))"));
    assert_eq!(r[6].rc(), Some(Ok(1)));
    assert!(matches!(r[7].rc(), Some(Ok(rc)) if rc != 0));
    assert_eq!(r[8].cmd, "spawn_result");
    assert!(matches!(r[8].rc(), Some(Ok(rc)) if rc != 0));
    assert!(matches!(r[9].rc(), Some(Ok(rc)) if rc != 0));
    assert_eq!(r[10].cmd, "finalize_ack");
    let ev = events(&mut s);
    assert!(ev.contains(&ServerEvent::Finalized {
        conn: ConnId(1),
        rank: Some(3)
    }));
    assert!(ev.iter().any(
        |e| matches!(e, ServerEvent::ProtocolError { reason, .. } if reason.contains("frobnicate"))
    ));
    s.handle_disconnect(ConnId(1));
    assert_eq!(
        events(&mut s),
        vec![ServerEvent::Disconnected {
            conn: ConnId(1),
            rank: Some(3),
            finalized: true
        }]
    );
}

#[test]
fn duplicate_and_out_of_range_ranks_are_errors() {
    let mut s = PmiServer::new(job(2));
    s.handle_connect(ConnId(1), Some(0));
    s.handle_connect(ConnId(2), None);
    s.handle_bytes(ConnId(2), b"cmd=initack pmiid=0\n");
    s.handle_connect(ConnId(3), None);
    s.handle_bytes(ConnId(3), b"cmd=initack pmiid=7\n");
    let r = replies(&mut s);
    assert!(r.iter().all(|(_, m)| m.rc() != Some(Ok(0))));
    assert_eq!(
        events(&mut s)
            .iter()
            .filter(|e| matches!(e, ServerEvent::ProtocolError { .. }))
            .count(),
        2
    );
}

#[test]
fn abort_event() {
    let mut s = PmiServer::new(job(2));
    s.handle_connect(ConnId(1), Some(1));
    s.handle_bytes(ConnId(1), b"cmd=abort exitcode=42 message=bye\n");
    assert!(replies(&mut s).is_empty());
    assert_eq!(
        events(&mut s),
        vec![ServerEvent::Abort {
            conn: ConnId(1),
            rank: Some(1),
            exitcode: 42,
            message: "bye".into()
        }]
    );
}

#[test]
fn node_attributes_with_wait() {
    let mut s = PmiServer::new(job(3));
    for r in 0..3 {
        s.handle_connect(ConnId(r), Some(r as u32));
    }
    send2(
        &mut s,
        ConnId(1),
        Message::new("info-getnodeattr")
            .arg("key", "seg")
            .arg("wait", "TRUE")
            .arg("thrid", "t1"),
    );
    send2(
        &mut s,
        ConnId(2),
        Message::new("info-getnodeattr")
            .arg("key", "seg")
            .arg("wait", "FALSE"),
    );
    let r = replies(&mut s);
    assert_eq!(r.len(), 1, "the waiting get is deferred");
    assert_eq!(r[0].0, ConnId(2));
    assert_eq!(r[0].1.get("found"), Some("FALSE"));
    send2(
        &mut s,
        ConnId(0),
        Message::new("info-putnodeattr")
            .arg("key", "other")
            .arg("value", "x"),
    );
    assert_eq!(replies(&mut s).len(), 1, "only the put reply");
    send2(
        &mut s,
        ConnId(0),
        Message::new("info-putnodeattr")
            .arg("key", "seg")
            .arg("value", "/dev/shm/x"),
    );
    let r = replies(&mut s);
    assert_eq!(r.len(), 2);
    let got = r.iter().find(|(c, _)| *c == ConnId(1)).unwrap();
    assert_eq!(got.1.get("value"), Some("/dev/shm/x"));
    assert_eq!(got.1.get("thrid"), Some("t1"));
}

#[test]
fn malformed_input_examples() {
    let mut s = PmiServer::new(job(2));
    s.handle_connect(ConnId(1), Some(0));
    s.handle_bytes(ConnId(1), b"cmd=put k!y=3\n");
    let r = replies(&mut s);
    assert!(matches!(r[0].1.rc(), Some(Ok(rc)) if rc != 0));
    // still usable after a bad line
    s.handle_bytes(ConnId(1), b"cmd=get_appnum\n");
    assert_eq!(replies(&mut s)[0].1.get("appnum"), Some("2"));
    // a bad PMI-2 prefix loses framing: the connection is ignored
    s.handle_bytes(ConnId(1), b"zzzzzzcmd=x;");
    let ev = events(&mut s);
    assert!(ev
        .iter()
        .any(|e| matches!(e, ServerEvent::ProtocolError { ignored: true, .. })));
    s.handle_bytes(ConnId(1), b"cmd=get_appnum\n");
    assert!(replies(&mut s).is_empty());
    // bytes from a connection never announced are accepted
    s.handle_bytes(ConnId(99), b"cmd=get_appnum\n");
    assert_eq!(replies(&mut s).len(), 1);
    s.handle_disconnect(ConnId(12345));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn server_never_panics(inputs in prop::collection::vec((0u64..3, prop::collection::vec(any::<u8>(), 0..80)), 0..20)) {
        let mut s = PmiServer::new(job(3));
        for c in 0..3 { s.handle_connect(ConnId(c), if c == 2 { None } else { Some(c as u32) }); }
        for (c, bytes) in inputs {
            s.handle_bytes(ConnId(c), &bytes);
            while s.poll_transmit().is_some() {}
            while s.poll_event().is_some() {}
        }
        s.handle_disconnect(ConnId(0));
    }

    #[test]
    fn server_never_panics_on_plausible_commands(
        lines in prop::collection::vec("(cmd=(init|put|get|barrier_in|initack|abort|finalize|get_maxes)( [a-z_]{1,8}=[ -~&&[^ ]]{0,8}){0,3}\n)|([ 0-9]{6}cmd=(fullinit|kvs-put|kvs-get|kvs-fence|info-getnodeattr|info-putnodeattr)(;[a-z-]{1,6}=[a-zA-Z0-9]{0,6}){0,3};)", 0..20),
        conn in 0u64..2) {
        let mut s = PmiServer::new(job(2));
        s.handle_connect(ConnId(0), Some(0));
        for l in lines {
            s.handle_bytes(ConnId(conn), l.as_bytes());
            while s.poll_transmit().is_some() {}
            while s.poll_event().is_some() {}
        }
    }
}

#[test]
fn port_connections_must_present_the_secret_first() {
    let mut s = PmiServer::new(job(2));
    s.require_auth("s3cret".into());
    // An inherited socket needs no secret.
    s.handle_connect(ConnId(0), Some(0));
    s.handle_bytes(ConnId(0), b"cmd=get_maxes\n");
    assert_eq!(replies(&mut s)[0].1.cmd, "maxes");
    // A stranger: ignored from its first line on, whatever it sends.
    for (c, first) in [
        (1, &b"cmd=abort exitcode=9\n"[..]),
        (2, &b"cmd=auth secret=s3creT\ncmd=abort exitcode=9\n"[..]),
        (3, &b"cmd=auth secret=s3cret_\n"[..]),
    ] {
        s.handle_connect(ConnId(c), None);
        s.handle_bytes(ConnId(c), first);
        s.handle_bytes(
            ConnId(c),
            b"cmd=get kvsname=kvs_9 key=PMI_process_mapping\n",
        );
        assert!(replies(&mut s).is_empty(), "connection {c} was answered");
        let ev = events(&mut s);
        assert!(
            ev.iter().all(|e| !matches!(e, ServerEvent::Abort { .. })),
            "{ev:?}"
        );
        assert!(
            ev.iter()
                .any(|e| matches!(e, ServerEvent::ProtocolError { ignored: true, .. })),
            "{ev:?}"
        );
    }
    // The secret, then anything.
    s.handle_connect(ConnId(4), None);
    s.handle_bytes(ConnId(4), b"cmd=auth secret=s3cret\ncmd=get_maxes\n");
    assert_eq!(replies(&mut s)[0].1.cmd, "maxes");
}
