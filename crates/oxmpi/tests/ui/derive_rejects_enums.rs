#[derive(oxmpi::Equivalence, Clone, Copy)]
#[repr(C)]
enum State {
    On,
    Off,
}

fn main() {}
