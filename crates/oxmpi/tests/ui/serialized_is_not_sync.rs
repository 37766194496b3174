// At MPI_THREAD_SERIALIZED a communicator can move between threads but
// not be shared by two at once.
fn main() {
    let universe =
        oxmpi::initialize_with_threading(oxmpi::Threading::Serialized).unwrap();
    let world = universe.world();
    std::thread::scope(|s| {
        s.spawn(|| world.rank());
        s.spawn(|| world.rank());
    });
}
