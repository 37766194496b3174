// A bool has byte patterns that are not valid values: a receive could
// write one, so a struct holding one is not Equivalence.
#[derive(oxmpi::Equivalence, Clone, Copy)]
#[repr(C)]
struct Flagged {
    value: f64,
    set: bool,
}

fn main() {}
