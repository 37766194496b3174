//! The PMI client against the in-crate server core over real sockets:
//! socketpairs (PMI_FD) and TCP (PMI_PORT + initack), PMI-1 and PMI-2.

mod pmi_support;

use oxmpi_runtime::pmi::{Modex, Pmi, PmiConfig, PmiEnv, PmiError, PmiVersion, ServerEvent};
use oxmpi_runtime::topology::ProcessMapping;
use pmi_support::{job, run_ranks, Harness};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::mpsc::channel;
use std::sync::{Arc, Mutex};

fn card(rank: u32) -> Vec<u8> {
    let mut v: Vec<u8> = (0..=255u8).collect();
    v.extend_from_slice(&rank.to_le_bytes());
    v
}

fn big(rank: u32) -> Vec<u8> {
    (0..3000u32).map(|i| (i * 13 + rank * 5) as u8).collect()
}

fn fd_env(s: &UnixStream, rank: u32, size: u32) -> PmiEnv {
    PmiEnv::from_pairs(&[
        ("PMI_FD", &s.as_raw_fd().to_string()),
        ("PMI_RANK", &rank.to_string()),
        ("PMI_SIZE", &size.to_string()),
    ])
}

fn port_env(addr: &str, rank: u32) -> PmiEnv {
    PmiEnv::from_pairs(&[
        ("PMI_PORT", addr),
        ("PMI_ID", &rank.to_string()),
        ("PMI_RANK", &rank.to_string()),
    ])
}

/// The full modex exercise one rank runs; returns its local ranks.
fn exchange(env: PmiEnv, version: PmiVersion) -> Vec<u32> {
    let pmi = Pmi::from_pmi_env(
        PmiConfig {
            version,
            ..Default::default()
        },
        &env,
    )
    .unwrap();
    assert_eq!(pmi.version(), Some(version));
    assert_eq!(pmi.kvsname(), "kvs_test_0");
    assert_eq!(pmi.universe_size(), pmi.size());
    let mut m = Modex::new(pmi).unwrap();
    let (rank, size) = (m.rank(), m.size());
    m.put("card", &card(rank)).unwrap();
    m.put("big", &big(rank)).unwrap();
    m.put("empty", &[]).unwrap();
    m.fence().unwrap();
    for r in 0..size {
        assert_eq!(m.get(r, "card").unwrap(), card(r));
        assert_eq!(m.get(r, "big").unwrap(), big(r));
        assert_eq!(m.get(r, "empty").unwrap(), Vec::<u8>::new());
        assert!(m.try_get(r, "nothing").unwrap().is_none());
        assert!(matches!(m.get(r, "nothing"), Err(PmiError::Missing { .. })));
    }
    assert!(m.pmi_mut().get_raw(None, "absent").unwrap().is_none());
    let local = m.local_ranks().to_vec();
    m.into_pmi().finalize().unwrap();
    local
}

fn over_fd(version: PmiVersion, size: u32) {
    let h = Harness::start(job(size));
    let socks: Arc<Vec<UnixStream>> = Arc::new((0..size).map(|r| h.socketpair(r)).collect());
    let s2 = socks.clone();
    let locals = run_ranks(size, move |r| {
        exchange(fd_env(&s2[r as usize], r, size), version)
    });
    let all: Vec<u32> = (0..size).collect();
    assert!(locals.iter().all(|l| *l == all));
    for _ in 0..size {
        h.wait_for(|e| matches!(e, ServerEvent::Finalized { .. }));
    }
}

fn over_port(version: PmiVersion, size: u32) {
    let h = Harness::start(job(size));
    let addr = h.listen_tcp();
    run_ranks(size, move |r| exchange(port_env(&addr, r), version));
    let mut finalized = Vec::new();
    for _ in 0..size {
        if let ServerEvent::Finalized { rank, .. } =
            h.wait_for(|e| matches!(e, ServerEvent::Finalized { .. }))
        {
            finalized.push(rank.unwrap());
        }
    }
    finalized.sort();
    assert_eq!(finalized, (0..size).collect::<Vec<_>>());
}

#[test]
fn pmi1_over_fd() {
    over_fd(PmiVersion::V1, 3);
}

#[test]
fn pmi2_over_fd() {
    over_fd(PmiVersion::V2, 3);
}

#[test]
fn pmi1_over_port_with_initack() {
    over_port(PmiVersion::V1, 3);
}

#[test]
fn pmi2_over_port() {
    over_port(PmiVersion::V2, 2);
}

#[test]
fn mixed_versions_in_one_job() {
    let h = Harness::start(job(2));
    let socks: Arc<Vec<UnixStream>> = Arc::new((0..2).map(|r| h.socketpair(r)).collect());
    run_ranks(2, move |r| {
        let v = if r == 0 {
            PmiVersion::V1
        } else {
            PmiVersion::V2
        };
        exchange(fd_env(&socks[r as usize], r, 2), v)
    });
}

fn fence_visibility(version: PmiVersion) {
    let h = Harness::start(job(2));
    let socks: Arc<Vec<UnixStream>> = Arc::new((0..2).map(|r| h.socketpair(r)).collect());
    let (tx, rx) = channel::<()>();
    let (tx, rx) = (Mutex::new(Some(tx)), Mutex::new(Some(rx)));
    run_ranks(2, move |r| {
        let env = fd_env(&socks[r as usize], r, 2);
        let mut p = Pmi::from_pmi_env(
            PmiConfig {
                version,
                ..Default::default()
            },
            &env,
        )
        .unwrap();
        if r == 0 {
            p.put("early", b"x").unwrap();
            tx.lock().unwrap().take().unwrap().send(()).unwrap();
        } else {
            rx.lock().unwrap().take().unwrap().recv().unwrap();
            // rank 0 has put, but nobody fenced: not visible yet.
            assert_eq!(p.get(Some(0), "early").unwrap(), None);
        }
        p.fence().unwrap();
        assert_eq!(p.get(Some(0), "early").unwrap().unwrap(), b"x");
        p.finalize().unwrap();
    });
}

#[test]
fn pmi1_puts_visible_only_after_fence() {
    fence_visibility(PmiVersion::V1);
}

#[test]
fn pmi2_puts_visible_only_after_fence() {
    fence_visibility(PmiVersion::V2);
}

fn abort_reaches_server(version: PmiVersion) {
    let h = Harness::start(job(1));
    let s = h.socketpair(0);
    let mut p = Pmi::from_pmi_env(
        PmiConfig {
            version,
            ..Default::default()
        },
        &fd_env(&s, 0, 1),
    )
    .unwrap();
    p.send_abort(7, "it broke; badly = yes").unwrap();
    let e = h.wait_for(|e| matches!(e, ServerEvent::Abort { .. }));
    match e {
        ServerEvent::Abort {
            rank,
            exitcode,
            message,
            ..
        } => {
            assert_eq!(rank, Some(0));
            assert_eq!(exitcode, 7);
            // Spaces arrive as sent (escaped on PMI-1); PMI-2 cannot
            // carry a `;`.
            let want = match version {
                PmiVersion::V1 => "it broke; badly = yes",
                PmiVersion::V2 => "it broke, badly = yes",
            };
            assert_eq!(message, want);
        }
        _ => unreachable!(),
    }
}

#[test]
fn pmi1_abort_event() {
    abort_reaches_server(PmiVersion::V1);
}

#[test]
fn pmi2_abort_event() {
    abort_reaches_server(PmiVersion::V2);
}

#[test]
fn pmi2_node_attr_wait() {
    let h = Harness::start(job(2));
    let socks: Arc<Vec<UnixStream>> = Arc::new((0..2).map(|r| h.socketpair(r)).collect());
    let (tx, rx) = channel::<()>();
    let (tx, rx) = (Mutex::new(Some(tx)), Mutex::new(Some(rx)));
    run_ranks(2, move |r| {
        let env = fd_env(&socks[r as usize], r, 2);
        let mut p = Pmi::from_pmi_env(
            PmiConfig {
                version: PmiVersion::V2,
                ..Default::default()
            },
            &env,
        )
        .unwrap();
        if r == 1 {
            assert_eq!(p.get_node_attr("shm", false).unwrap(), None);
            tx.lock().unwrap().take().unwrap().send(()).unwrap();
            // Blocks until rank 0 puts it.
            assert_eq!(p.get_node_attr("shm", true).unwrap().unwrap(), b"/seg 1");
        } else {
            rx.lock().unwrap().take().unwrap().recv().unwrap();
            std::thread::sleep(std::time::Duration::from_millis(50));
            p.put_node_attr("shm", b"/seg 1").unwrap();
        }
        p.fence().unwrap();
        p.finalize().unwrap();
    });
}

#[test]
fn pmi1_has_no_node_attrs() {
    let h = Harness::start(job(1));
    let s = h.socketpair(0);
    let mut p = Pmi::from_pmi_env(PmiConfig::default(), &fd_env(&s, 0, 1)).unwrap();
    assert!(matches!(
        p.put_node_attr("a", b"b"),
        Err(PmiError::Unsupported(_))
    ));
    assert_eq!(p.process_mapping().unwrap(), ProcessMapping::single_node(1));
}

#[test]
fn server_errors_are_reported() {
    let h = Harness::start(job(1));
    let s = h.socketpair(0);
    let mut p = Pmi::from_pmi_env(PmiConfig::default(), &fd_env(&s, 0, 1)).unwrap();
    let e = p.put_raw("PMI_mine", "v").unwrap_err();
    assert!(matches!(e, PmiError::Server { rc: 1, .. }), "{e}");
    assert!(e.to_string().contains("reserved"), "{e}");
    assert!(matches!(
        p.put("bad key", b""),
        Err(PmiError::BadKey { .. })
    ));
    assert!(matches!(p.put("a/b", b""), Err(PmiError::BadKey { .. })));
}

#[test]
fn closed_connection_is_an_error_not_a_hang() {
    let (client, server) = UnixStream::pair().unwrap();
    drop(server);
    let e = Pmi::from_pmi_env(PmiConfig::default(), &fd_env(&client, 0, 1)).unwrap_err();
    assert!(
        matches!(e, PmiError::Closed { .. } | PmiError::Io { .. }),
        "{e}"
    );
}

#[test]
fn missing_env_is_named() {
    // PMI-1 over PMI_FD needs PMI_RANK/PMI_SIZE; checked before any I/O.
    let (client, _server) = UnixStream::pair().unwrap();
    let env = PmiEnv::from_pairs(&[("PMI_FD", &client.as_raw_fd().to_string())]);
    let e = Pmi::from_pmi_env(PmiConfig::default(), &env).unwrap_err();
    assert!(e.to_string().contains("PMI_RANK"), "{e}");
    let e = Pmi::from_pmi_env(
        PmiConfig::default(),
        &PmiEnv::from_pairs(&[("PMI_FD", "99999")]),
    )
    .unwrap_err();
    assert!(e.to_string().contains("PMI_FD"), "{e}");
}

#[test]
fn singleton_mode() {
    let mut p = Pmi::from_pmi_env(
        PmiConfig {
            version: PmiVersion::V2,
            ..Default::default()
        },
        &PmiEnv::default(),
    )
    .unwrap();
    assert!(p.is_singleton());
    assert_eq!(
        (p.rank(), p.size(), p.appnum(), p.universe_size()),
        (0, 1, 0, 1)
    );
    let mut m = Modex::new(p).unwrap();
    m.put("card", &card(0)).unwrap();
    m.put("big", &big(0)).unwrap();
    m.fence().unwrap();
    assert_eq!(m.get(0, "card").unwrap(), card(0));
    assert_eq!(m.get(0, "big").unwrap(), big(0));
    assert_eq!(m.local_ranks(), &[0]);
    assert!(m.try_get(0, "none").unwrap().is_none());
    p = m.into_pmi();
    p.put_node_attr("n", b"v").unwrap();
    assert_eq!(p.get_node_attr("n", true).unwrap().unwrap(), b"v");
    p.finalize().unwrap();
}
