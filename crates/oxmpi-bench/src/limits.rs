//! The machine's physical limits, measured in the same run as the MPI
//! tests: what no implementation can beat on this machine.
//!
//! - `memcpy`: one core copying a buffer (what a two-copy shared-memory
//!   path does twice, and a single-copy one once);
//! - `cma`: `process_vm_readv` from another process (the single-copy
//!   kernel path, as CMA in Open MPI and MPICH);
//! - `cacheline`: half the round trip of one cache line between two cores
//!   (the floor of any shared-memory latency);
//! - `tcp_latency`, `tcp_bw`: raw TCP over loopback between two cores.
//!
//! Each one runs with its two sides pinned to cores 0 and 1 where the
//! machine has two cores.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// One measured limit: `(test, size, value, unit)`, as the MPI tests.
#[derive(Clone, Debug)]
pub struct Limit {
    /// `memcpy`, `cma`, `cacheline`, `tcp_latency` or `tcp_bw`.
    pub test: &'static str,
    /// Bytes moved per operation.
    pub size: usize,
    /// The figure.
    pub value: f64,
    /// `MB/s` or `us`.
    pub unit: &'static str,
}

/// The affinity the process started with (before any [`pin`]).
fn original() -> &'static Option<rustix::thread::CpuSet> {
    static ORIG: std::sync::OnceLock<Option<rustix::thread::CpuSet>> = std::sync::OnceLock::new();
    ORIG.get_or_init(|| rustix::thread::sched_getaffinity(None).ok())
}

/// Pins the calling thread to `cpu` when the process may run there;
/// pinning is best effort (a container may forbid it), so failure is not
/// an error.
pub fn pin(cpu: usize) {
    if let Some(orig) = original() {
        if cpu < rustix::thread::CpuSet::MAX_CPU && orig.is_set(cpu) {
            let mut set = rustix::thread::CpuSet::new();
            set.set(cpu);
            let _ = rustix::thread::sched_setaffinity(None, &set);
        }
    }
}

/// Gives the calling thread back the affinity the process started with.
pub fn unpin() {
    if let Some(orig) = original() {
        let _ = rustix::thread::sched_setaffinity(None, orig);
    }
}

/// Seconds per call of `f`: one warm-up call (page faults, caches), then
/// batches of `batch` calls until `budget` seconds are spent.
fn time_loop(budget: f64, batch: u64, mut f: impl FnMut()) -> f64 {
    f();
    let t = Instant::now();
    let mut n = 0u64;
    while t.elapsed().as_secs_f64() < budget || n < 3 {
        for _ in 0..batch {
            f();
        }
        n += batch;
    }
    t.elapsed().as_secs_f64() / n as f64
}

/// Calls per timing batch: about 1 MiB moved per batch.
fn batch_for(size: usize) -> u64 {
    ((1 << 20) / size.max(1)).max(1) as u64
}

/// Copy bandwidth of one core, in MB/s (bytes copied per second).
pub fn memcpy(size: usize, budget: f64) -> f64 {
    pin(0);
    let src = vec![1u8; size];
    let mut dst = vec![0u8; size];
    let per = time_loop(budget, batch_for(size), || {
        dst.copy_from_slice(std::hint::black_box(&src));
        std::hint::black_box(&mut dst);
    });
    size as f64 / per / 1e6
}

/// `oxmpi-bench limits-peer SIZE`: the other process of the CMA probe.
/// Fills a buffer, prints its address and waits for stdin to close.
pub fn cma_peer(size: usize) {
    pin(1);
    let buf = vec![7u8; size.max(1)];
    println!("{}", buf.as_ptr() as usize);
    let _ = std::io::stdout().flush();
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    std::hint::black_box(&buf);
}

/// `process_vm_readv` bandwidth from a child process, in MB/s.
pub fn cma(size: usize, budget: f64) -> Result<f64, String> {
    use nix::sys::uio::{process_vm_readv, RemoteIoVec};
    use nix::unistd::Pid;
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let mut child = Command::new(exe)
        .args(["limits-peer", &size.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting the CMA peer: {e}"))?;
    let mut line = String::new();
    let out = child.stdout.take().ok_or("no stdout")?;
    BufReader::new(out)
        .read_line(&mut line)
        .map_err(|e| format!("reading the CMA peer's address: {e}"))?;
    let base: usize = line
        .trim()
        .parse()
        .map_err(|_| format!("CMA peer printed {line:?}"))?;
    pin(0);
    let pid = Pid::from_raw(child.id() as i32);
    let mut dst = vec![0u8; size];
    let mut err = None;
    let per = time_loop(budget, batch_for(size), || {
        let mut local = [std::io::IoSliceMut::new(&mut dst)];
        let remote = [RemoteIoVec { base, len: size }];
        match process_vm_readv(pid, &mut local, &remote) {
            Ok(n) if n == size => {}
            Ok(n) => err = Some(format!("process_vm_readv read {n} of {size} bytes")),
            Err(e) => err = Some(format!("process_vm_readv: {e}")),
        }
    });
    drop(child.stdin.take());
    let _ = child.wait();
    if let Some(e) = err {
        return Err(e);
    }
    if dst[size - 1] != 7 {
        return Err("process_vm_readv returned the wrong bytes".into());
    }
    Ok(size as f64 / per / 1e6)
}

/// Half the round trip of a cache line between cores 0 and 1, in us.
pub fn cacheline(budget: f64) -> f64 {
    #[repr(align(128))]
    struct Line(AtomicU64);
    let ping = Line(AtomicU64::new(0));
    let pong = Line(AtomicU64::new(0));
    const STOP: u64 = u64::MAX;
    std::thread::scope(|s| {
        s.spawn(|| {
            pin(1);
            let mut seen = 0;
            loop {
                let v = ping.0.load(Ordering::Acquire);
                if v == STOP {
                    break;
                }
                if v != seen {
                    seen = v;
                    pong.0.store(v, Ordering::Release);
                } else {
                    std::hint::spin_loop();
                }
            }
        });
        pin(0);
        let mut i = 0u64;
        let mut round = |n: u64| {
            for _ in 0..n {
                i += 1;
                ping.0.store(i, Ordering::Release);
                while pong.0.load(Ordering::Acquire) != i {
                    std::hint::spin_loop();
                }
            }
        };
        round(10_000);
        let t = Instant::now();
        let mut n = 0u64;
        while t.elapsed().as_secs_f64() < budget {
            round(10_000);
            n += 10_000;
        }
        let per = t.elapsed().as_secs_f64() / n as f64;
        ping.0.store(STOP, Ordering::Release);
        per * 1e6 / 2.0
    })
}

/// A connected pair over loopback, non-blocking with `TCP_NODELAY`: the
/// probes poll like an MPI progress engine instead of sleeping in the
/// kernel, which is the fastest way through loopback.
fn tcp_pair() -> std::io::Result<(Spin, Spin)> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    let a = TcpStream::connect(l.local_addr()?)?;
    let (b, _) = l.accept()?;
    for s in [&a, &b] {
        s.set_nodelay(true)?;
        s.set_nonblocking(true)?;
    }
    Ok((Spin(a), Spin(b)))
}

/// A non-blocking stream read and written by polling.
struct Spin(TcpStream);

impl Spin {
    fn read_exact(&mut self, mut buf: &mut [u8]) -> std::io::Result<()> {
        while !buf.is_empty() {
            match self.0.read(buf) {
                Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => buf = &mut buf[n..],
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::hint::spin_loop(),
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
    fn write_all(&mut self, mut buf: &[u8]) -> std::io::Result<()> {
        while !buf.is_empty() {
            match self.0.write(buf) {
                Ok(n) => buf = &buf[n..],
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::hint::spin_loop(),
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
    fn shutdown(&self) -> std::io::Result<()> {
        self.0.shutdown(std::net::Shutdown::Both)
    }
}

/// Raw TCP loopback: 8-byte half round trip in us.
pub fn tcp_latency(budget: f64) -> std::io::Result<f64> {
    let (mut a, mut b) = tcp_pair()?;
    std::thread::scope(|s| {
        s.spawn(move || {
            pin(1);
            let mut m = [0u8; 8];
            while b.read_exact(&mut m).is_ok() {
                if b.write_all(&m).is_err() {
                    break;
                }
            }
        });
        pin(0);
        let mut m = [1u8; 8];
        let mut round = |n: u32| -> std::io::Result<()> {
            for _ in 0..n {
                a.write_all(&m)?;
                a.read_exact(&mut m)?;
            }
            Ok(())
        };
        round(1000)?;
        let t = Instant::now();
        let mut n = 0u64;
        while t.elapsed().as_secs_f64() < budget {
            round(1000)?;
            n += 1000;
        }
        let per = t.elapsed().as_secs_f64() / n as f64;
        a.shutdown()?;
        Ok(per * 1e6 / 2.0)
    })
}

/// Raw TCP loopback streaming `size`-byte writes, acknowledged every 64
/// like the MPI window: MB/s.
pub fn tcp_bw(size: usize, budget: f64) -> std::io::Result<f64> {
    let (mut a, mut b) = tcp_pair()?;
    std::thread::scope(|s| {
        s.spawn(move || {
            pin(1);
            let mut buf = vec![0u8; size];
            'outer: loop {
                for _ in 0..64 {
                    if b.read_exact(&mut buf).is_err() {
                        break 'outer;
                    }
                }
                if b.write_all(&[1]).is_err() {
                    break;
                }
            }
        });
        pin(0);
        let buf = vec![2u8; size];
        let mut ack = [0u8; 1];
        let mut window = || -> std::io::Result<()> {
            for _ in 0..64 {
                a.write_all(&buf)?;
            }
            a.read_exact(&mut ack)
        };
        window()?;
        let t = Instant::now();
        let mut n = 0u64;
        while t.elapsed().as_secs_f64() < budget || n < 2 {
            window()?;
            n += 1;
        }
        let el = t.elapsed().as_secs_f64();
        a.shutdown()?;
        Ok((size as f64 * 64.0 * n as f64) / el / 1e6)
    })
}

/// Every limit at the bandwidth sizes `sizes` of 4 KiB and more (smaller
/// copies measure the loop, not the machine); a probe that cannot run (no
/// CMA permission, say) is reported on stderr and left out.
pub fn measure(sizes: &[usize], quick: bool) -> Vec<Limit> {
    let budget = if quick { 0.05 } else { 0.3 };
    let mut out = Vec::new();
    // Keeps a probe's value, or says why it could not run.
    let mut keep =
        |test: &'static str, size: usize, unit: &'static str, r: Result<f64, String>| match r {
            Ok(value) => out.push(Limit {
                test,
                size,
                value,
                unit,
            }),
            Err(e) => eprintln!("oxmpi-bench: {test} at {size} B: {e}"),
        };
    keep("cacheline", 64, "us", Ok(cacheline(budget)));
    keep(
        "tcp_latency",
        8,
        "us",
        tcp_latency(budget).map_err(|e| e.to_string()),
    );
    for &size in sizes.iter().filter(|&&s| s >= 4096) {
        keep("memcpy", size, "MB/s", Ok(memcpy(size, budget)));
        keep(
            "cma",
            size,
            "MB/s",
            cma(size, budget).map_err(|e| e.to_string()),
        );
        keep(
            "tcp_bw",
            size,
            "MB/s",
            tcp_bw(size, budget).map_err(|e| e.to_string()),
        );
    }
    unpin();
    out
}
