// At MPI_THREAD_SINGLE the universe cannot move to another thread.
fn main() {
    let universe = oxmpi::initialize().unwrap();
    std::thread::spawn(move || {
        let _ = universe.world().rank();
    });
}
