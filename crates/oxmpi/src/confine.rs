//! `MPI_THREAD_SINGLE` and `MPI_THREAD_FUNNELED`: the PML takes no lock.

use crate::runtime::{Runtime, ThreadLevel};

/// Whether a runtime of thread level `level` lets one thread alone into the
/// PML (see [`confine`]).
pub(crate) fn one_thread(level: ThreadLevel) -> bool {
    level <= ThreadLevel::Funneled
}

/// Confines `rt`'s PML to the calling thread, the one that initialized MPI,
/// when `rt`'s level lets one thread alone call MPI ([`one_thread`]) and no
/// progress thread runs (`async_progress` false).
///
/// The PML checks it (a call from another thread panics); this crate keeps
/// programs from getting there: at these levels the universe and every
/// handle made from it carry a marker that is neither `Send` nor `Sync`
/// (`Threading::Confined`), `oxmpi::universe()` hands out handles on this
/// thread only, and the progress driver shares the PML from this thread
/// before it starts (`progress::AsyncDriver`). The C layer initializes at
/// `Multiple` and confines through `Universe::confine_to_this_thread` when
/// the program asks for `MPI_THREAD_SINGLE` or `MPI_THREAD_FUNNELED`.
pub(crate) fn confine(rt: &Runtime, async_progress: bool) {
    if one_thread(rt.level) && !async_progress {
        rt.driver.confine_unless_running(&rt.pml);
    }
}
