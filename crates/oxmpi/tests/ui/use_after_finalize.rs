// A communicator borrows its universe: it cannot be used after the
// universe (MPI) is gone.
fn main() {
    let universe = oxmpi::initialize().unwrap();
    let world = universe.world();
    drop(universe);
    let _ = world.rank();
}
