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
