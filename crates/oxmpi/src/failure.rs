//! Word of dead processes from the launcher.
//!
//! Hydra (with `-disable-auto-cleanup`) and `oxmpirun --enable-recovery`
//! keep the survivors of a failed rank running, send each of them SIGUSR1,
//! and publish the dead ranks in the `PMI_dead_processes` job attribute.
//! Unhandled, SIGUSR1 would kill the survivors, so a process started by a
//! launcher (not a singleton) handles it as MPICH does: the handler only
//! sets a flag, and a blocking wait that has stopped spinning asks the
//! launcher for the list and fails what needs those ranks
//! ([`oxmpi_pml::Pml::set_failure_notice`]). This is how a rank learns of
//! the death of a peer it never had a connection with (TCP connects on
//! first use; shared-memory peers are watched through pidfds anyway).
//!
//! The handler is registered with `signal-hook`, which also runs a handler
//! the program installed before `MPI_Init`.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use oxmpi_runtime::pmi::Modex;

use crate::framework::DynBtl;

/// Handles SIGUSR1 and tells the PML where to ask about dead processes.
pub(crate) fn install(pml: &oxmpi_pml::Pml<DynBtl>, modex: Arc<Mutex<Option<Modex>>>) {
    let flag = Arc::new(AtomicBool::new(false));
    if let Err(e) = signal_hook::flag::register(signal_hook::consts::SIGUSR1, Arc::clone(&flag)) {
        tracing::debug!("SIGUSR1 (failure notices) not handled: {e}");
        return;
    }
    pml.set_failure_notice(flag, Box::new(move || dead_ranks(&modex)));
}

/// Ends the job when this process cannot reach a live peer (out of
/// descriptors or memory: [`oxmpi_pml::Ob1::on_local_fault`]): that peer
/// would otherwise wait for it for ever. The launcher is told through PMI,
/// as by `MPI_Abort`, so the message reaches the user and every rank ends.
pub(crate) fn install_fault_hook(pml: &oxmpi_pml::Pml<DynBtl>, modex: Arc<Mutex<Option<Modex>>>) {
    pml.with(|o| {
        // cm's MTL reports its failures on the requests that need a peer.
        let Some(o) = o.ob1_mut() else {
            return;
        };
        o.on_local_fault(Box::new(move |msg| {
            tracing::error!("{msg}");
            // The PMI connection may be another thread's right now: do not
            // wait for it with the engine held.
            if let Ok(mut g) = modex.try_lock() {
                if let Some(m) = g.as_mut() {
                    m.pmi_mut().abort(1, msg)
                }
            }
            eprintln!("oxmpi: {msg}");
            std::process::exit(1)
        }))
    });
}

/// The dead ranks the launcher lists; `None` when the PMI connection is busy
/// (another thread's call) and the question must wait.
fn dead_ranks(modex: &Mutex<Option<Modex>>) -> Option<Vec<u32>> {
    let mut g = match modex.try_lock() {
        Ok(g) => g,
        Err(std::sync::TryLockError::WouldBlock) => return None,
        Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
    };
    // Finalized: nothing left to fail.
    let m = g.as_mut()?;
    match m.pmi_mut().dead_processes() {
        Ok(dead) => {
            tracing::debug!(?dead, "the launcher reports dead processes");
            Some(dead)
        }
        Err(e) => {
            tracing::warn!("PMI_dead_processes: {e}");
            Some(Vec::new())
        }
    }
}
