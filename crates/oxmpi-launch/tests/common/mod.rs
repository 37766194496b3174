//! Helpers shared by the launcher's integration tests.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The result of one launcher run.
#[derive(Debug)]
pub struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

/// Path of the `oxmpirun` binary under test.
pub fn oxmpirun() -> &'static str {
    env!("CARGO_BIN_EXE_oxmpirun")
}

/// Path of an example of this crate (cargo test builds them).
pub fn example(name: &str) -> String {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(|d| d.parent()).unwrap();
    let path = profile_dir.join("examples").join(name);
    assert!(
        path.exists(),
        "{} is missing: build it with `cargo build -p oxmpi-launch --examples` (cargo test does)",
        path.display()
    );
    path.display().to_string()
}

/// Runs `oxmpirun args...` with stdin closed and a 60 s safety limit.
pub fn run(args: &[String]) -> Out {
    run_with(Command::new(oxmpirun()).args(args))
}

/// Runs a prepared command with stdin closed and a 60 s safety limit: a
/// launcher still running after that is killed, so a hang fails the test
/// instead of blocking the suite.
pub fn run_with(cmd: &mut Command) -> Out {
    use std::io::Read;
    let t0 = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the launcher");
    let mut so = child.stdout.take().unwrap();
    let mut se = child.stderr.take().unwrap();
    let t_out = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = so.read_to_end(&mut v);
        v
    });
    let t_err = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = se.read_to_end(&mut v);
        v
    });
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t0.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            break child.wait().unwrap();
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let elapsed = t0.elapsed();
    Out {
        code: status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&t_out.join().unwrap()).into_owned(),
        stderr: String::from_utf8_lossy(&t_err.join().unwrap()).into_owned(),
        elapsed,
    }
}

/// A fresh temporary directory (removed at the end of the test process is
/// not needed: it lives under the target directory).
pub fn tempdir() -> PathBuf {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let exe = std::env::current_exe().unwrap();
    let base = exe.parent().unwrap().parent().unwrap().join("test-tmp");
    let dir = base.join(format!(
        "{}-{}",
        std::process::id(),
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Whether a process exists (and is not a zombie).
pub fn pid_alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat.rsplit(')').next().unwrap_or("").trim_start();
            !state.starts_with('Z')
        }
        Err(_) => false,
    }
}

/// What one rank of the `transports` example printed: its rank, the job
/// size, the sum of ranks it computed, and per peer (peer, BTLs, bytes
/// sent, bytes received).
#[derive(Debug)]
pub struct RankReport {
    pub rank: u32,
    pub size: u32,
    pub sum: u64,
    pub peers: Vec<(u32, String, u64, u64)>,
}

/// Parses the `transports` example's output (any order of ranks); panics
/// with the whole output on a line it does not understand.
pub fn parse_transports(stdout: &str) -> Vec<RankReport> {
    let bad = |l: &str| -> ! { panic!("transports: unexpected line {l:?} in:\n{stdout}") };
    let mut out: Vec<RankReport> = Vec::new();
    for l in stdout.lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        match w.as_slice() {
            ["rank", r, "of", n, "sum", s] => out.push(RankReport {
                rank: r.parse().unwrap_or_else(|_| bad(l)),
                size: n.trim_end_matches(':').parse().unwrap_or_else(|_| bad(l)),
                sum: s.parse().unwrap_or_else(|_| bad(l)),
                peers: Vec::new(),
            }),
            ["rank", r, "peer", p, "via", via, "sent", s, "received", v] => {
                let r: u32 = r.parse().unwrap_or_else(|_| bad(l));
                let peer = (
                    p.trim_end_matches(':').parse().unwrap_or_else(|_| bad(l)),
                    via.to_string(),
                    s.parse().unwrap_or_else(|_| bad(l)),
                    v.parse().unwrap_or_else(|_| bad(l)),
                );
                match out.iter_mut().find(|x| x.rank == r) {
                    Some(x) => x.peers.push(peer),
                    None => bad(l),
                }
            }
            _ => bad(l),
        }
    }
    out.sort_by_key(|r| r.rank);
    out
}

/// Checks that `stdout` holds exactly the lines `rank R of N: sum S` of
/// one job of `n` ranks (any order), as the C program `tests/c/world.c`
/// and the `transports` example print them.
pub fn assert_world(stdout: &str, n: u32, what: &str) {
    let mut lines: Vec<&str> = stdout.lines().filter(|l| !l.contains(" peer ")).collect();
    lines.sort();
    let sum = n * (n - 1) / 2;
    let want: Vec<String> = (0..n)
        .map(|r| format!("rank {r} of {n}: sum {sum}"))
        .collect();
    assert_eq!(lines, want, "{what}: stdout:\n{stdout}");
}

/// The C installation for the tests (`scripts/build-capi.sh debug`, laid
/// out once per test process): its prefix.
pub fn capi_install() -> PathBuf {
    static ONCE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    ONCE.get_or_init(|| {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let out = Command::new("sh")
            .arg(root.join("scripts/build-capi.sh"))
            .arg("debug")
            .output()
            .expect("run build-capi.sh");
        assert!(
            out.status.success(),
            "build-capi.sh failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        PathBuf::from(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .last()
                .expect("the prefix")
                .trim(),
        )
    })
    .clone()
}

/// Compiles `tests/c/<name>.c` with the C installation's `mpicc` into
/// `dir`; the executable's path.
pub fn mpicc(name: &str, dir: &std::path::Path) -> PathBuf {
    let exe = dir.join(name);
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/c/{name}.c"));
    let out = Command::new(capi_install().join("bin/mpicc"))
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("run mpicc");
    assert!(
        out.status.success(),
        "mpicc {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}
