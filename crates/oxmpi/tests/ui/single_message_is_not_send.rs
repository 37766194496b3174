// At MPI_THREAD_SINGLE a matched message stays on the thread that probed it
// (the engine takes no lock at this level: another thread must not reach it).
use oxmpi::traits::*;

fn main() {
    let universe = oxmpi::initialize().unwrap();
    let world = universe.world();
    let (msg, _) = world.any_process().matched_probe().unwrap();
    std::thread::scope(|s| {
        s.spawn(move || {
            let _ = msg.matched_receive_vec::<u8>();
        });
    });
}
