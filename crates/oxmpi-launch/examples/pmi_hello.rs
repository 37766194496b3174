//! PMI smoke test: every rank publishes binary business cards (all 256 byte
//! values, and a 3000-byte one that must be split over several keys), fences,
//! reads every other rank's cards back and checks them byte for byte.
//!
//! Prints exactly one line on success:
//! `rank R of N: modex ok (local ranks: [..])`; exits 1 with a message on
//! stderr on any mismatch.
//!
//! Protocol: the `pmi_version` MCA parameter (`--mca pmi_version 2` or
//! `OXMPI_MCA_pmi_version=2`; default 1).
//! `--skip-finalize-rank K`: rank K exits 0 without finalizing (a failure the
//! launcher must report).
//! `--abort-rank K --abort-code C`: after the fence rank K calls PMI abort
//! with code C; the other ranks check the cards, then block in a second
//! fence (and sleep), so only the launcher ending the job stops them.

use oxmpi_runtime::mca::{self, Registry, Sources};
use oxmpi_runtime::pmi::{Modex, Pmi, PmiConfig};
use std::process::exit;
use std::time::Duration;

fn card(rank: u32) -> Vec<u8> {
    let mut v: Vec<u8> = (0..=255u8).collect();
    v.extend_from_slice(&rank.to_le_bytes());
    v.extend_from_slice(b" ;=\n\\");
    v
}

fn big(rank: u32) -> Vec<u8> {
    (0..3000u32)
        .map(|i| (i.wrapping_mul(31).wrapping_add(rank.wrapping_mul(7))) as u8)
        .collect()
}

fn die(what: impl std::fmt::Display) -> ! {
    eprintln!("pmi_hello: {what}");
    exit(1)
}

fn arg_value(args: &[String], name: &str) -> Option<i64> {
    let i = args.iter().position(|a| a == name)?;
    let v = args
        .get(i + 1)
        .unwrap_or_else(|| die(format!("{name} needs a value")));
    Some(
        v.parse()
            .unwrap_or_else(|_| die(format!("{name} {v}: not a number"))),
    )
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let abort_rank = arg_value(&args, "--abort-rank");
    let abort_code = arg_value(&args, "--abort-code").unwrap_or(1) as i32;
    let skip_finalize_rank = arg_value(&args, "--skip-finalize-rank");
    let mut reg = Registry::new();
    mca::register_runtime_params(&mut reg).unwrap_or_else(|e| die(e));
    reg.apply(&Sources::from_process().unwrap_or_else(|e| die(e)))
        .unwrap_or_else(|e| die(e));
    let config = PmiConfig::from_registry(&reg).unwrap_or_else(|e| die(e));
    let pmi = Pmi::from_env(config).unwrap_or_else(|e| die(e));
    let mut modex = Modex::new(pmi).unwrap_or_else(|e| die(e));
    let (rank, size) = (modex.rank(), modex.size());

    modex.put("card", &card(rank)).unwrap_or_else(|e| die(e));
    modex.put("big", &big(rank)).unwrap_or_else(|e| die(e));
    modex.fence().unwrap_or_else(|e| die(e));

    if abort_rank == Some(i64::from(rank)) {
        modex
            .pmi_mut()
            .abort(abort_code, "pmi_hello: abort requested");
    }

    for r in (0..size).filter(|&r| r != rank) {
        let got = modex.get(r, "card").unwrap_or_else(|e| die(e));
        if got != card(r) {
            die(format!("rank {rank}: card of rank {r} differs: {got:?}"));
        }
        let got = modex.get(r, "big").unwrap_or_else(|e| die(e));
        if got != big(r) {
            die(format!("rank {rank}: big card of rank {r} differs"));
        }
        match modex.try_get(r, "never-put") {
            Ok(None) => {}
            other => die(format!(
                "rank {rank}: missing key of rank {r} gave {other:?}"
            )),
        }
    }

    if abort_rank.is_some() {
        // The aborting rank never arrives: only the launcher can end this.
        let _ = modex.fence();
        std::thread::sleep(Duration::from_secs(60));
        die(format!(
            "rank {rank}: still alive 60 s after rank {abort_rank:?} aborted"
        ));
    }

    println!(
        "rank {rank} of {size}: modex ok (local ranks: {:?})",
        modex.local_ranks()
    );
    if skip_finalize_rank == Some(i64::from(rank)) {
        exit(0);
    }
    modex.into_pmi().finalize().unwrap_or_else(|e| die(e));
}
