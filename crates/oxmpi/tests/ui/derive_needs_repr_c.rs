// The field layout of a struct without #[repr(C)] is not defined.
#[derive(oxmpi::Equivalence, Clone, Copy)]
struct Point {
    x: f64,
    y: f64,
}

fn main() {}
