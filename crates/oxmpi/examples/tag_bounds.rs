//! `MPI_TAG_UB` as the job's PML gives it, used: rank 0 sends rank 1 a
//! message with the largest tag, which must arrive, and, where the bound is
//! below `i32::MAX` (cm on an MTL whose tag layout is narrower), one with
//! the bound plus one, which must fail at the call with `MPI_ERR_TAG`.
//!
//! `oxmpirun -n 2 --mca pml cm --mca mtl_ofi_tag_mode ofi_tag_2 target/release/examples/tag_bounds`

use oxmpi::traits::*;
use oxmpi::ErrorClass;

fn fail(what: String) -> ! {
    eprintln!("tag_bounds: FAILED: {what}");
    std::process::exit(3)
}

fn main() {
    let universe = oxmpi::initialize().unwrap_or_else(|e| fail(format!("init: {e}")));
    let world = universe.world();
    if world.size() < 2 {
        fail("needs 2 ranks".into());
    }
    let ub = universe.tag_ub();
    if ub < 32767 {
        fail(format!("MPI_TAG_UB {ub} is below the standard's 32767"));
    }
    match world.rank() {
        0 => {
            let peer = world.process_at_rank(1);
            peer.send_with_tag(&[7u8; 3][..], ub)
                .unwrap_or_else(|e| fail(format!("send with tag {ub}: {e}")));
            if ub < i32::MAX {
                match peer.send_with_tag(&[8u8; 3][..], ub + 1) {
                    Err(e) if e.class() == ErrorClass::Tag => {}
                    Err(e) => fail(format!("tag {}: wrong error {e}", ub + 1)),
                    Ok(()) => fail(format!("tag {} past MPI_TAG_UB was sent", ub + 1)),
                }
            }
        }
        1 => {
            let mut b = [0u8; 3];
            let st = world
                .process_at_rank(0)
                .receive_into_with_tag(&mut b[..], ub)
                .unwrap_or_else(|e| fail(format!("receive with tag {ub}: {e}")));
            if b != [7; 3] || st.tag() != ub {
                fail(format!("got {b:?} with tag {}", st.tag()));
            }
        }
        _ => {}
    }
    world.barrier().unwrap();
    if world.rank() == 0 {
        println!("tag_bounds ok: MPI_TAG_UB {ub}");
    }
}
