//! Runs oxmpi programs (this crate's examples) through `oxmpirun`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Once;
use std::time::{Duration, Instant};

/// The result of one job.
#[derive(Debug)]
pub struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

fn profile_dir() -> PathBuf {
    // target/<profile>/deps/<test binary>
    let exe = std::env::current_exe().unwrap();
    exe.parent().and_then(Path::parent).unwrap().to_path_buf()
}

static BUILD: Once = Once::new();

/// Builds `oxmpirun` and this crate's examples if this test binary was
/// built without them (`cargo test --workspace` builds both; a single
/// `--test` does not).
fn ensure_built() {
    BUILD.call_once(|| {
        let dir = profile_dir();
        if dir.join("oxmpirun").exists() && dir.join("examples/p2p_suite").exists() {
            return;
        }
        let release = dir.ends_with("release");
        for args in [
            &["build", "-p", "oxmpi-launch", "--bin", "oxmpirun"][..],
            &["build", "-p", "oxmpi", "--examples"][..],
        ] {
            let mut c = Command::new(env!("CARGO"));
            c.args(args);
            if release {
                c.arg("--release");
            }
            assert!(c.status().unwrap().success(), "cargo {args:?} failed");
        }
    });
}

/// `oxmpirun` of this build.
pub fn oxmpirun() -> PathBuf {
    ensure_built();
    let p = profile_dir().join("oxmpirun");
    assert!(p.exists(), "{} is missing", p.display());
    p
}

/// Path of an example of this crate.
pub fn example(name: &str) -> PathBuf {
    ensure_built();
    let p = profile_dir().join("examples").join(name);
    assert!(p.exists(), "{} is missing", p.display());
    p
}

/// Runs `oxmpirun -n np --mca btl <btl> <example> args...` with a time limit;
/// a job still running after it is killed (so a hang fails the test).
pub fn run(np: u32, btl: &str, prog: &str, args: &[&str], limit: Duration) -> Out {
    let mut cmd = Command::new(oxmpirun());
    cmd.arg("-n")
        .arg(np.to_string())
        .args(["--mca", "btl", btl])
        .arg("--timeout")
        .arg(limit.as_secs().max(1).to_string())
        .arg(example(prog))
        .args(args);
    run_cmd(&mut cmd, limit + Duration::from_secs(10))
}

/// Runs a prepared command, killing it after `limit`.
pub fn run_cmd(cmd: &mut Command, limit: Duration) -> Out {
    use std::io::Read;
    let t0 = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start oxmpirun");
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
        if t0.elapsed() > limit {
            let _ = child.kill();
            break child.wait().unwrap();
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Out {
        code: status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&t_out.join().unwrap()).into_owned(),
        stderr: String::from_utf8_lossy(&t_err.join().unwrap()).into_owned(),
        elapsed: t0.elapsed(),
    }
}

/// Asserts a job succeeded with `expect` on stdout and nothing on stderr.
pub fn assert_ok(out: &Out, expect: &str, what: &str) {
    assert!(
        out.code == 0 && out.stdout.contains(expect),
        "{what}: exit {} after {:?}\nstdout:\n{}\nstderr:\n{}",
        out.code,
        out.elapsed,
        out.stdout,
        out.stderr
    );
    assert!(
        out.stderr.is_empty(),
        "{what}: a healthy run printed on stderr:\n{}",
        out.stderr
    );
}
