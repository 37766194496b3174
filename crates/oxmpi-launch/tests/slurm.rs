//! Slurm launches oxmpi jobs: the test starts a cluster of one node (this
//! host, its name and CPUs from `slurmd -C`) with its own munge daemon and
//! key, a generated `slurm.conf` (`MpiDefault=pmi2`) and free ports, all in
//! a temporary directory, then runs
//!
//! * `srun --mpi=pmi2 -n 4` of the `transports` example (PMI-2): one job of
//!   4 ranks, every peer over sm;
//! * `srun -n 4` of the C program `tests/c/world.c` (the default PMI plugin,
//!   pmi2, spoken as PMI-1): one job of 4 ranks, its allreduce right;
//! * `srun --mpi=pmix -n 2` of both (oxmpi does not speak PMIx) and
//!   `srun --mpi=none -n 2`: they fail, naming the launcher and what to use
//!   (`srun --mpi=pmi2`), instead of running as 2 silent singletons;
//! * `srun --mpi=none -n 1`: a job of one task is a singleton, and runs.
//!
//! Afterwards it stops every daemon it started, checks that no process of
//! the cluster (a `slurmstepd`, a rank) is left, and removes the directory.
//!
//! Needs root and Slurm (`slurmctld`, `slurmd`, `srun`, `sinfo`, `munged`;
//! Debian's slurmctld, slurmd, slurm-client and munge, with libpmix-dev for
//! the PMIx plugin: scripts/test-all.sh installs them). Without them the
//! test says so loudly and passes without running, except in CI (`CI` set),
//! where that is a failure.

mod common;

use std::fs;
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{assert_world, parse_transports, Out};

const TOOLS: [&str; 7] = [
    "slurmctld",
    "slurmd",
    "srun",
    "sinfo",
    "munged",
    "squeue",
    "setpriv",
];

/// Why Slurm cannot run here, if it cannot.
fn unavailable() -> Option<String> {
    if !rustix::process::geteuid().is_root() {
        return Some("not running as root (slurmd must be)".into());
    }
    let missing: Vec<&str> = TOOLS
        .iter()
        .copied()
        .filter(|t| {
            Command::new("sh")
                .args(["-c", &format!("command -v {t}")])
                .stdout(Stdio::null())
                .status()
                .map_or(true, |s| !s.success())
        })
        .collect();
    (!missing.is_empty()).then(|| format!("{} not installed", missing.join(", ")))
}

/// A one-node Slurm cluster and its munge daemon, stopped and removed on
/// drop.
struct Slurm {
    dir: PathBuf,
    conf: PathBuf,
    /// The daemons, in the order they stop (slurmd, slurmctld, munged).
    daemons: Vec<(&'static str, Child)>,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

fn wait_for(what: &str, limit: Duration, mut ok: impl FnMut() -> bool) -> Result<(), String> {
    let t0 = Instant::now();
    while !ok() {
        if t0.elapsed() > limit {
            return Err(format!("{what}: not ready after {limit:?}"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

impl Slurm {
    fn start() -> Result<Slurm, String> {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        // Short: the munge socket's path must fit a sockaddr_un.
        let dir = std::env::temp_dir().join(format!(
            "oxmpi-slurm-{}-{}",
            std::process::id(),
            N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&dir);
        for d in ["", "state", "spool"] {
            fs::create_dir_all(dir.join(d)).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        let mut s = Slurm {
            conf: dir.join("slurm.conf"),
            dir,
            daemons: Vec::new(),
        };
        s.start_daemons()?;
        Ok(s)
    }

    fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    fn spawn(&mut self, name: &'static str, args: &[String]) -> Result<(), String> {
        let log = fs::File::create(self.dir.join(format!("{name}.out")))
            .map_err(|e| format!("{name} log: {e}"))?;
        // Through setpriv (util-linux, always there on Debian): the daemon
        // dies with the thread that started it, should this test process
        // be killed before it stops them.
        let child = Command::new("setpriv")
            .args(["--pdeathsig", "KILL", "--", name])
            .args(args)
            .env("SLURM_CONF", &self.conf)
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("start {name}: {e}"))?;
        // Stopped in reverse order of starting.
        self.daemons.insert(0, (name, child));
        Ok(())
    }

    fn start_daemons(&mut self) -> Result<(), String> {
        fs::set_permissions(&self.dir, fs::Permissions::from_mode(0o700))
            .map_err(|e| e.to_string())?;
        // Our own munge key and daemon: nothing of the host's is used.
        let key: Vec<u8> = {
            use std::io::Read;
            let mut k = vec![0u8; 1024];
            fs::File::open("/dev/urandom")
                .and_then(|mut f| f.read_exact(&mut k))
                .map_err(|e| format!("munge key: {e}"))?;
            k
        };
        let key_path = self.dir.join("munge.key");
        fs::write(&key_path, key).map_err(|e| e.to_string())?;
        fs::set_permissions(&key_path, fs::Permissions::from_mode(0o600))
            .map_err(|e| e.to_string())?;
        let sock = self.path("munge.sock");
        self.spawn(
            "munged",
            &[
                "--foreground".into(),
                "--force".into(),
                format!("--socket={sock}"),
                format!("--key-file={}", key_path.display()),
                format!("--pid-file={}", self.path("munged.pid")),
                format!("--seed-file={}", self.path("munged.seed")),
            ],
        )?;
        wait_for("munged", Duration::from_secs(10), || {
            Path::new(&sock).exists()
        })
        .map_err(|e| format!("{e}\n{}", self.logs()))?;

        // This host as the one node, as slurmd sees it.
        let out = Command::new("slurmd")
            .arg("-C")
            .output()
            .map_err(|e| format!("slurmd -C: {e}"))?;
        let node = String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap_or("")
            .trim()
            .to_string();
        let host = node
            .strip_prefix("NodeName=")
            .and_then(|r| r.split_whitespace().next())
            .ok_or_else(|| format!("slurmd -C printed {node:?}"))?
            .to_string();
        let (ctld_port, slurmd_port) = (free_port(), free_port());
        let conf = format!(
            "ClusterName=oxmpitest\n\
             SlurmctldHost={host}(127.0.0.1)\n\
             SlurmctldPort={ctld_port}\n\
             SlurmdPort={slurmd_port}\n\
             SlurmUser=root\n\
             SlurmdUser=root\n\
             AuthType=auth/munge\n\
             CredType=cred/munge\n\
             AuthInfo=socket={sock}\n\
             StateSaveLocation={state}\n\
             SlurmdSpoolDir={spool}\n\
             SlurmctldPidFile={dir}/slurmctld.pid\n\
             SlurmdPidFile={dir}/slurmd.pid\n\
             SlurmctldLogFile={dir}/slurmctld.log\n\
             SlurmdLogFile={dir}/slurmd.log\n\
             PlugStackConfig={dir}/plugstack.conf\n\
             ProctrackType=proctrack/linuxproc\n\
             TaskPlugin=task/none\n\
             SwitchType=switch/none\n\
             MpiDefault=pmi2\n\
             SelectType=select/cons_tres\n\
             SelectTypeParameters=CR_Core\n\
             SchedulerType=sched/builtin\n\
             JobCompType=jobcomp/none\n\
             AccountingStorageType=accounting_storage/none\n\
             JobAcctGatherType=jobacct_gather/none\n\
             ReturnToService=2\n\
             {node} NodeAddr=127.0.0.1 State=UNKNOWN\n\
             PartitionName=oxmpi Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n",
            state = self.path("state"),
            spool = self.path("spool"),
            dir = self.dir.display(),
        );
        fs::write(&self.conf, conf).map_err(|e| e.to_string())?;
        fs::write(self.dir.join("plugstack.conf"), "").map_err(|e| e.to_string())?;
        let conf = self.conf.display().to_string();
        self.spawn(
            "slurmctld",
            &["-D".into(), "-i".into(), "-f".into(), conf.clone()],
        )?;
        self.spawn("slurmd", &["-D".into(), "-f".into(), conf])?;
        let sinfo = || {
            Command::new("sinfo")
                .args(["-h", "-o", "%T"])
                .env("SLURM_CONF", &self.conf)
                .stderr(Stdio::null())
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "idle")
                .unwrap_or(false)
        };
        wait_for("the node", Duration::from_secs(30), sinfo)
            .map_err(|e| format!("{e}\n{}", self.logs()))
    }

    /// The daemons' output and logs, for a failure message.
    fn logs(&self) -> String {
        let mut s = String::new();
        for f in [
            "munged.out",
            "slurmctld.out",
            "slurmctld.log",
            "slurmd.out",
            "slurmd.log",
        ] {
            if let Ok(t) = fs::read_to_string(self.dir.join(f)) {
                s.push_str(&format!("--- {f}\n{t}"));
            }
        }
        s
    }

    /// `srun args...` with `env` set (60 s limit, as every launcher test).
    fn srun(&self, args: &[&str], env: &[(&str, &str)]) -> Out {
        let mut cmd = Command::new("srun");
        cmd.args(["--overcommit", "--time=1"])
            .args(args)
            .env("SLURM_CONF", &self.conf)
            .envs(env.iter().copied());
        common::run_with(&mut cmd)
    }

    /// Pids of the processes of this cluster: those whose environment
    /// names its `slurm.conf` (the daemons, their children such as
    /// `slurmscriptd` and `slurmstepd`, and the ranks of its jobs).
    fn members(&self) -> Vec<i32> {
        let mark = format!("SLURM_CONF={}", self.conf.display());
        let Ok(procs) = fs::read_dir("/proc") else {
            return Vec::new();
        };
        procs
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| {
                fs::read(format!("/proc/{pid}/environ"))
                    .is_ok_and(|env| env.split(|&b| b == 0).any(|v| v == mark.as_bytes()))
            })
            .collect()
    }

    /// Stops every daemon (SIGTERM, SIGKILL after 10 s) once the steps of
    /// its jobs have ended, and waits for each to exit; what was still
    /// left of the cluster then (killed).
    fn stop(&mut self) -> Vec<i32> {
        if self.daemons.is_empty() {
            return Vec::new();
        }
        // A job completes (and its slurmstepd ends) a moment after its
        // srun returned: wait until the queue is empty.
        let _ = wait_for("jobs", Duration::from_secs(10), || {
            Command::new("squeue")
                .args(["-h", "-o", "%i"])
                .env("SLURM_CONF", &self.conf)
                .stderr(Stdio::null())
                .output()
                .is_ok_and(|o| o.status.success() && o.stdout.trim_ascii().is_empty())
        });
        for (name, child) in &mut self.daemons {
            let pid = rustix::process::Pid::from_raw(child.id() as i32).expect("pid");
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            let t0 = Instant::now();
            while child.try_wait().ok().flatten().is_none() {
                if t0.elapsed() > Duration::from_secs(10) {
                    eprintln!("{name} ignored SIGTERM; killing it");
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        self.daemons.clear();
        // Children of the daemons (slurmscriptd) go with them.
        let _ = wait_for("daemons", Duration::from_secs(5), || {
            self.members().is_empty()
        });
        let left = self.members();
        for &pid in &left {
            if let Some(p) = rustix::process::Pid::from_raw(pid) {
                let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
            }
        }
        left
    }
}

impl Drop for Slurm {
    fn drop(&mut self) {
        let left = self.stop();
        if !left.is_empty() {
            eprintln!("slurm test: killed leftover processes {left:?}");
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// The outcome of a job that must fail: a non-zero exit, no rank that ran
/// as a singleton, and stderr that names `cause` and says what to use.
fn assert_refused(out: &Out, cause: &str, what: &str) {
    assert_ne!(out.code, 0, "{what}: {out:?}");
    assert!(
        !out.stdout.contains("of 1:"),
        "{what}: ran as singletons: {out:?}"
    );
    assert!(
        out.stderr.contains(cause) && out.stderr.contains("srun --mpi=pmi2"),
        "{what}: stderr does not name {cause:?} and `srun --mpi=pmi2`: {out:?}"
    );
}

#[test]
fn srun_runs_jobs_and_refuses_pmix_and_no_pmi() {
    if let Some(why) = unavailable() {
        assert!(
            std::env::var_os("CI").is_none(),
            "Slurm test cannot run in CI: {why}"
        );
        eprintln!("\n*** SKIPPED srun_runs_jobs_and_refuses_pmix_and_no_pmi: {why} ***\n");
        return;
    }
    let t0 = Instant::now();
    let mut slurm = Slurm::start().unwrap_or_else(|e| panic!("cannot start Slurm: {e}"));
    let transports = common::example("transports");
    let world = common::mpicc("world", &slurm.dir);
    let world = world.to_str().unwrap();

    // srun --mpi=pmi2, the example speaking PMI-2: one job, sm to every peer.
    let out = slurm.srun(
        &["--mpi=pmi2", "-n", "4", &transports],
        &[("OXMPI_MCA_pmi_version", "2")],
    );
    assert_eq!(out.code, 0, "srun --mpi=pmi2 transports: {out:?}");
    assert_world(&out.stdout, 4, "srun --mpi=pmi2 transports");
    for r in parse_transports(&out.stdout) {
        assert_eq!(r.peers.len(), 3, "{r:?}");
        for (p, via, sent, recvd) in &r.peers {
            assert!(
                via == "sm" && *sent > 0 && *recvd > 0,
                "rank {} to {p}: {via} {sent} {recvd}",
                r.rank
            );
        }
    }
    // The C program under the default plugin (MpiDefault=pmi2), PMI-1.
    let out = slurm.srun(&["-n", "4", world], &[]);
    assert_eq!(out.code, 0, "srun world.c: {out:?}");
    assert_world(&out.stdout, 4, "srun world.c");

    // PMIx, which oxmpi does not speak: an error naming it, not 2
    // singletons.
    for prog in [transports.as_str(), world] {
        let out = slurm.srun(&["--mpi=pmix", "-n", "2", prog], &[]);
        assert_refused(&out, "srun with its PMIx plugin", "srun --mpi=pmix");
    }
    // No PMI at all.
    let out = slurm.srun(&["--mpi=none", "-n", "2", &transports], &[]);
    assert_refused(&out, "srun gave it no PMI", "srun --mpi=none -n 2");
    // ... unless the escape hatch says singletons are wanted.
    let out = slurm.srun(
        &["--mpi=none", "-n", "2", &transports],
        &[("OXMPI_MCA_pmi_foreign_launcher", "singleton")],
    );
    assert_eq!(out.code, 0, "pmi_foreign_launcher=singleton: {out:?}");
    assert_eq!(
        out.stdout.matches("rank 0 of 1: sum 0").count(),
        2,
        "{out:?}"
    );
    // One task: a singleton is the right answer.
    let out = slurm.srun(&["--mpi=none", "-n", "1", &transports], &[]);
    assert_eq!(out.code, 0, "srun --mpi=none -n 1: {out:?}");
    assert_world(&out.stdout, 1, "srun --mpi=none -n 1");

    let left = slurm.stop();
    assert!(left.is_empty(), "processes of the cluster left: {left:?}");
    drop(slurm);
    eprintln!("slurm test: {:?}", t0.elapsed());
}
