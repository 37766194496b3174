//! `Mtl::close` on the `ofi` MTL releases what the provider holds in the
//! system: the `shm` provider's segment in `/dev/shm` is gone after it,
//! although the process keeps running (a process that exits after
//! `MPI_Finalize` never drops its PML). Its own test binary, so that no
//! other test's endpoints share the process id the segments are named by.
//! Skipped (with a printed reason) where libfabric or its `shm` provider
//! is absent.

use oxmpi_mtl::ofi::{OfiMtl, OfiParams, OpenError};
use oxmpi_mtl::Mtl;

/// The entries of `/dev/shm` the `shm` provider made for this process
/// (named `<pid>:<endpoint>:<...>`).
fn segments() -> Vec<String> {
    let pid = format!("{}:", std::process::id());
    let mut v: Vec<String> = std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&pid))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn close_releases_the_shm_segment() {
    let lib = std::env::var("OXMPI_TEST_OFI_LIBRARY").ok();
    let mut pairs = vec![("mtl_ofi_provider_include", "shm")];
    if let Some(l) = lib.as_deref() {
        pairs.push(("mtl_ofi_library", l));
    }
    let p = OfiParams::from_pairs(pairs).expect("parameters");
    let mut m = match OfiMtl::open(&p) {
        Ok(m) => m,
        Err(e @ (OpenError::NotAvailable { .. } | OpenError::NoProvider { .. })) => {
            eprintln!("skipped: {e}");
            return;
        }
        Err(e) => panic!("open shm: {e}"),
    };
    let before = segments();
    assert!(
        !before.is_empty(),
        "the shm provider ({}) made no /dev/shm entry named after pid {}: the test \
         cannot see what close releases",
        m.provider(),
        std::process::id()
    );
    m.close();
    let after = segments();
    assert!(
        after.is_empty(),
        "after close, /dev/shm still holds {after:?} (before: {before:?})"
    );
    // Still closed, nothing left to release.
    m.close();
    drop(m);
    assert!(segments().is_empty());
}
