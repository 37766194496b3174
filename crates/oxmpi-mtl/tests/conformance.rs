//! The MTL conformance suite on the simulated MTL, in every tag mode
//! (including a provider that reserves high tag bits) and several seeds.

use oxmpi_mtl::conformance::{run_all, Job};
use oxmpi_mtl::sim::{SimConfig, SimFabric, SimMtl};
use oxmpi_mtl::{Mtl, MtlError, TagMode};

fn job(cfg: SimConfig, n: usize, cids: &[u32]) -> Job<SimMtl> {
    let fabric = SimFabric::new(cfg);
    let eps = (0..n as u32).map(|r| fabric.open(r).unwrap()).collect();
    let (f1, f2) = (fabric.clone(), fabric);
    Job::new(
        eps,
        cids,
        Box::new(move || f1.step()),
        Box::new(move |r| f2.kill(r)),
    )
}

#[test]
fn the_simulated_mtl_passes_in_every_tag_mode() {
    for mode in [TagMode::Tag1, TagMode::Tag2, TagMode::Full] {
        for reserved in [0, 4] {
            for seed in [1, 7, 42] {
                // Without and with sends that complete inside the call.
                for inject in [None, Some(64)] {
                    let cfg = SimConfig {
                        seed,
                        mode,
                        reserved,
                        inject,
                    };
                    run_all(&mut |n, cids| job(cfg, n, cids));
                }
            }
        }
    }
}

#[test]
fn a_tag_mode_that_cannot_fit_is_refused_at_open() {
    let cfg = SimConfig {
        seed: 1,
        mode: TagMode::Tag1,
        reserved: 12,
        inject: None,
    };
    let r = SimFabric::new(cfg).open(0);
    assert!(matches!(r, Err(MtlError::Tag(_))));
    let msg = r.err().unwrap().to_string();
    assert!(msg.contains("ofi_tag_1") && msg.contains("12"), "{msg}");
}

#[test]
fn limits_follow_the_mode() {
    let open = |mode| {
        SimFabric::new(SimConfig {
            seed: 1,
            mode,
            reserved: 0,
            inject: None,
        })
        .open(0)
        .unwrap()
        .limits()
    };
    assert_eq!(open(TagMode::Tag2).max_tag, 524_287);
    assert_eq!(open(TagMode::Tag1).max_cid, 4095);
    assert_eq!(open(TagMode::Full).max_rank, u32::MAX);
}
