//! Test harness: drives a `PmiServer` over real sockets (socketpairs and a
//! TCP listener), one reader thread per connection feeding one server thread.
#![allow(dead_code)]

use oxmpi_runtime::pmi::{ConnId, JobInfo, PmiServer, ServerEvent};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

enum Input {
    Connect(ConnId, Option<u32>, Box<dyn Write + Send>),
    Bytes(ConnId, Vec<u8>),
    Closed(ConnId),
}

/// A running in-test PMI server.
pub struct Harness {
    ctl: Sender<Input>,
    events: Receiver<ServerEvent>,
    next: Arc<AtomicU64>,
}

pub fn job(size: u32) -> JobInfo {
    JobInfo {
        size,
        kvsname: "kvs_test_0".into(),
        appnum: 0,
        universe_size: size,
        process_mapping: format!("(vector,(0,1,{size}))"),
        debug: false,
    }
}

fn reader(ctl: Sender<Input>, conn: ConnId, mut r: impl Read + Send + 'static) {
    thread::spawn(move || {
        let mut buf = [0u8; 4096];
        loop {
            match r.read(&mut buf) {
                Ok(0) | Err(_) => {
                    let _ = ctl.send(Input::Closed(conn));
                    return;
                }
                Ok(n) => {
                    if ctl.send(Input::Bytes(conn, buf[..n].to_vec())).is_err() {
                        return;
                    }
                }
            }
        }
    });
}

impl Harness {
    pub fn start(job: JobInfo) -> Harness {
        let (ctl, rx) = channel::<Input>();
        let (ev_tx, events) = channel();
        thread::spawn(move || {
            let mut server = PmiServer::new(job);
            let mut writers: HashMap<ConnId, Box<dyn Write + Send>> = HashMap::new();
            while let Ok(input) = rx.recv() {
                match input {
                    Input::Connect(c, rank, w) => {
                        writers.insert(c, w);
                        server.handle_connect(c, rank);
                    }
                    Input::Bytes(c, b) => server.handle_bytes(c, &b),
                    Input::Closed(c) => {
                        writers.remove(&c);
                        server.handle_disconnect(c);
                    }
                }
                while let Some((c, bytes)) = server.poll_transmit() {
                    if let Some(w) = writers.get_mut(&c) {
                        let _ = w.write_all(&bytes);
                    }
                }
                while let Some(e) = server.poll_event() {
                    if ev_tx.send(e).is_err() {
                        return;
                    }
                }
            }
        });
        Harness {
            ctl,
            events,
            next: Arc::new(AtomicU64::new(1)),
        }
    }

    /// A socketpair for `rank`; returns the client end (its fd goes in PMI_FD).
    pub fn socketpair(&self, rank: u32) -> UnixStream {
        let (client, server) = UnixStream::pair().unwrap();
        let conn = ConnId(self.next.fetch_add(1, Ordering::Relaxed));
        let w = server.try_clone().unwrap();
        self.ctl
            .send(Input::Connect(conn, Some(rank), Box::new(w)))
            .unwrap();
        reader(self.ctl.clone(), conn, server);
        client
    }

    /// A TCP listener; returns "127.0.0.1:port" for PMI_PORT.
    pub fn listen_tcp(&self) -> String {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let ctl = self.ctl.clone();
        let next = self.next.clone();
        thread::spawn(move || {
            for s in l.incoming() {
                let Ok(s) = s else { return };
                let conn = ConnId(next.fetch_add(1, Ordering::Relaxed));
                let w = s.try_clone().unwrap();
                if ctl.send(Input::Connect(conn, None, Box::new(w))).is_err() {
                    return;
                }
                reader(ctl.clone(), conn, s);
            }
        });
        addr
    }

    /// Waits up to 10 s for an event matching `pred`, skipping others.
    pub fn wait_for(&self, mut pred: impl FnMut(&ServerEvent) -> bool) -> ServerEvent {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.events.recv_timeout(left) {
                Ok(e) if pred(&e) => return e,
                Ok(_) => {}
                Err(e) => panic!("no matching server event: {e}"),
            }
        }
    }

    /// Every event received so far.
    pub fn drain(&self) -> Vec<ServerEvent> {
        self.events.try_iter().collect()
    }
}

/// Runs `f(rank)` on `size` threads and joins them, with a 20 s watchdog so
/// a hang fails the test instead of stalling it.
pub fn run_ranks<T: Send + 'static>(
    size: u32,
    f: impl Fn(u32) -> T + Send + Sync + 'static,
) -> Vec<T> {
    let f = Arc::new(f);
    let (tx, rx) = channel();
    for r in 0..size {
        let f = f.clone();
        let tx = tx.clone();
        thread::spawn(move || {
            let out = f(r);
            let _ = tx.send((r, out));
        });
    }
    drop(tx);
    let mut outs: Vec<Option<T>> = (0..size).map(|_| None).collect();
    for _ in 0..size {
        let (r, out) = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("a rank hung or panicked");
        outs[r as usize] = Some(out);
    }
    outs.into_iter().map(Option::unwrap).collect()
}
