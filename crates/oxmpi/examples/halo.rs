//! A derived-datatype halo exchange: a 2-D grid split into row blocks
//! across ranks (periodic), each rank owning an `ny x nx` block plus one
//! ghost cell all around. Rows go to the neighbours above and below as
//! contiguous data; the ghost *columns* of a second, column-split exchange
//! are described with a vector datatype and sent straight from the grid,
//! with no packing by hand. Every ghost cell is checked.
//!
//! `oxmpirun -n 4 target/release/examples/halo`

use oxmpi::{MutView, UserDatatype, View};

const NX: usize = 64;
const NY: usize = 32;
/// Row length including the two ghost columns.
const W: usize = NX + 2;

/// The value owned cell (y, x) of rank `r` holds.
fn value(r: i32, y: usize, x: usize) -> f64 {
    r as f64 * 1e6 + y as f64 * 1e3 + x as f64
}

fn main() {
    let universe = oxmpi::initialize().expect("MPI init");
    let world = universe.world();
    let (r, n) = (world.rank(), world.size());
    let up = world.process_at_rank((r + n - 1) % n);
    let down = world.process_at_rank((r + 1) % n);

    // (NY + 2) x W grid, row-major; owned cells are [1..=NY] x [1..=NX].
    let mut grid = vec![f64::NAN; (NY + 2) * W];
    for y in 1..=NY {
        for x in 1..=NX {
            grid[y * W + x] = value(r, y, x);
        }
    }

    // Ghost rows: first owned row goes up, last owned row goes down.
    let row = UserDatatype::contiguous(NX, &UserDatatype::of::<f64>()).expect("row type");
    let top: Vec<f64> = grid[W + 1..W + 1 + NX].to_vec();
    let bottom: Vec<f64> = grid[NY * W + 1..NY * W + 1 + NX].to_vec();
    {
        let (head, tail) = grid.split_at_mut((NY + 1) * W);
        let mut ghost_top =
            MutView::with_count_and_datatype(&mut head[1..], 1, &row).expect("view");
        let mut ghost_bottom =
            MutView::with_count_and_datatype(&mut tail[1..], 1, &row).expect("view");
        // Shift up: my top row to `up`, my bottom ghost from `down`.
        up.send_receive_into(&top[..], 1, &down, &mut ghost_bottom, 1)
            .expect("shift up");
        // Shift down: my bottom row to `down`, my top ghost from `up`.
        down.send_receive_into(&bottom[..], 2, &up, &mut ghost_top, 2)
            .expect("shift down");
    }

    // Ghost columns (as if the grid were also split by columns: here the
    // left and right neighbours are the same ranks). A column of the owned
    // rows is a vector type: NY blocks of one f64, W apart.
    let col =
        UserDatatype::vector(NY, 1, W as isize, &UserDatatype::of::<f64>()).expect("column type");
    let first_col = grid[W + 1..].to_vec(); // origin (1, 1)
    let last_col = grid[W + NX..].to_vec(); // origin (1, NX)
    {
        let send_left = View::with_count_and_datatype(&first_col[..], 1, &col).expect("view");
        let (_, rest) = grid.split_at_mut(W);
        let mut ghost_right =
            MutView::with_count_and_datatype(&mut rest[NX + 1..], 1, &col).expect("view");
        up.send_receive_into(&send_left, 3, &down, &mut ghost_right, 3)
            .expect("halo left");
    }
    {
        let send_right = View::with_count_and_datatype(&last_col[..], 1, &col).expect("view");
        let (_, rest) = grid.split_at_mut(W);
        let mut ghost_left =
            MutView::with_count_and_datatype(&mut rest[..], 1, &col).expect("view");
        down.send_receive_into(&send_right, 4, &up, &mut ghost_left, 4)
            .expect("halo right");
    }

    // Check every ghost cell.
    let (ru, rd) = ((r + n - 1) % n, (r + 1) % n);
    for x in 1..=NX {
        assert_eq!(grid[x], value(ru, NY, x), "top ghost at x={x}");
        assert_eq!(
            grid[(NY + 1) * W + x],
            value(rd, 1, x),
            "bottom ghost at x={x}"
        );
    }
    for y in 1..=NY {
        assert_eq!(
            grid[y * W + NX + 1],
            value(rd, y, 1),
            "right ghost at y={y}"
        );
        assert_eq!(grid[y * W], value(ru, y, NX), "left ghost at y={y}");
    }
    // Corners were not part of any exchange: untouched.
    assert!(grid[0].is_nan() && grid[W - 1].is_nan());
    world.barrier().expect("barrier");
    if r == 0 {
        println!("halo: {n} ranks exchanged rows and vector-typed columns of a {NY}x{NX} block; all ghost cells checked");
    }
}
