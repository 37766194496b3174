//! No segment outlives its processes: owners killed with SIGKILL leave
//! nothing behind, neither a memfd (no process holds it, its memory is
//! freed) nor a `/dev/shm` file once `unlink_name` ran. The fallback's
//! documented window (killed before `unlink_name`) is shown too, with its
//! clean-up by `reap_stale_shm_files`.
//!
//! One test in this file on purpose: it measures `Shmem` in /proc/meminfo.

mod sm_cma_support;

use oxmpi_btl::sm::segment::{reap_stale_shm_files, Segment, SegmentCard, SegmentKind};
use sm_cma_support::{child_mode, from_hex, next_command, say, to_hex, ChildProc};

const BIG: usize = 64 << 20;

/// Child: owns three segments, touches their pages, then waits to be killed.
#[test]
fn child_entry() {
    let Some(mode) = child_mode() else { return };
    assert_eq!(mode, "hold");
    let memfd = Segment::create(BIG, SegmentKind::Memfd).unwrap();
    let mut shm = Segment::create(BIG, SegmentKind::ShmFile).unwrap();
    let linked = Segment::create(4096, SegmentKind::ShmFile).unwrap();
    for seg in [&memfd, &shm] {
        // SAFETY: nobody else maps these segments yet.
        unsafe { std::ptr::write_bytes(seg.as_ptr().as_ptr(), 0x5a, seg.len()) };
    }
    // As after the fence that follows every peer's attach.
    shm.unlink_name().unwrap();
    say(&format!(
        "memfd={} shm={} linked={}",
        to_hex(&memfd.card().to_bytes()),
        to_hex(&shm.card().to_bytes()),
        to_hex(&linked.card().to_bytes())
    ));
    // Wait for SIGKILL; never reach the destructors.
    let _ = next_command();
    std::process::abort();
}

fn shmem_kib() -> u64 {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap();
    let line = text.lines().find(|l| l.starts_with("Shmem:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Every `/proc/<pid>/fd/*` link and `/proc/<pid>/maps` line that names
/// `needle`, over all processes we can see.
fn holders(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for proc_entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = proc_entry.file_name();
        if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        if let Ok(fds) = std::fs::read_dir(proc_entry.path().join("fd")) {
            for fd in fds.flatten() {
                if let Ok(target) = std::fs::read_link(fd.path()) {
                    if target.to_string_lossy().contains(needle) {
                        found.push(format!("{}: {}", fd.path().display(), target.display()));
                    }
                }
            }
        }
        if let Ok(maps) = std::fs::read_to_string(proc_entry.path().join("maps")) {
            for line in maps.lines().filter(|l| l.contains(needle)) {
                found.push(format!("{}/maps: {line}", proc_entry.path().display()));
            }
        }
    }
    found
}

fn shm_files_of(pid: u32) -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("oxmpi-") && n.contains(&format!("-{pid}-")))
        .collect()
}

fn card(line: &str, key: &str) -> SegmentCard {
    let hex = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
        .unwrap();
    SegmentCard::from_bytes(&from_hex(hex)).unwrap()
}

#[test]
fn sigkilled_owners_leave_nothing() {
    let before = shmem_kib();
    let mut child = ChildProc::spawn("hold", &[]);
    let pid = child.pid();
    let line = child.hear();
    let (memfd, shm, linked) = (
        card(&line, "memfd"),
        card(&line, "shm"),
        card(&line, "linked"),
    );
    let memfd_name = format!("oxmpi-seg-{pid}-{:016x}", memfd.cookie);

    // While the owner lives: its memfd is visible, the unlinked file is not.
    let held = holders(&memfd_name);
    assert!(
        held.iter().any(|h| h.contains(&format!("/proc/{pid}/fd/"))),
        "{held:?}"
    );
    assert_eq!(
        shm_files_of(pid),
        vec![linked
            .path()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned()]
    );
    let during = shmem_kib();
    assert!(
        during >= before + 100 * 1024,
        "Shmem {before} -> {during} KiB while 128 MiB are held"
    );

    // Also attach the memfd here: the memory must live as long as we map it.
    let map = Segment::attach(&memfd).unwrap();

    child.kill();

    // SAFETY: mapped and the owner is gone: nobody writes.
    let last = unsafe { map.as_ptr().as_ptr().add(BIG - 1).read_volatile() };
    assert_eq!(last, 0x5a);
    assert!(!holders(&memfd_name).is_empty(), "our mapping holds it");
    drop(map);

    // Nothing holds the memfd any more, anywhere.
    assert_eq!(holders(&memfd_name), Vec::<String>::new());
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
    // The unlinked shm file is gone; the one killed before unlink_name is the
    // documented residual window, removed by the reaper.
    assert!(!shm.path().exists());
    assert!(linked.path().exists());
    assert!(reap_stale_shm_files() >= 1);
    assert_eq!(shm_files_of(pid), Vec::<String>::new());

    // And the 128 MiB are free again (allow for other processes' noise).
    let after = shmem_kib();
    assert!(
        after + 100 * 1024 <= during,
        "Shmem {during} -> {after} KiB after the kill"
    );
}
