//! An `MPI_ANY_SOURCE` server: rank 0 serves requests from every other
//! rank in whatever order they arrive, answering each client on the tag the
//! client asked on; the clients check their answers.
//!
//! `oxmpirun -n 4 target/release/examples/server`

use oxmpi::traits::*;
use oxmpi::AnyTag;

/// Requests each client makes.
const ROUNDS: u64 = 100;
/// Tag of the "no more requests" message.
const DONE: i32 = 99;

fn main() {
    let universe = oxmpi::initialize().expect("MPI init");
    let world = universe.world();
    let (rank, size) = (world.rank(), world.size());
    if rank == 0 {
        let mut open = size - 1;
        let mut served = 0u64;
        while open > 0 {
            // Whoever is first, with any tag.
            let (req, status) = world.any_process().receive::<[u64; 2]>().expect("receive");
            if status.tag() == DONE {
                open -= 1;
                continue;
            }
            let reply = req[0] * req[1];
            world
                .process_at_rank(status.source_rank())
                .send_with_tag(&reply, status.tag())
                .expect("reply");
            served += 1;
        }
        println!("server: served {served} requests from {} clients", size - 1);
        assert_eq!(served, ROUNDS * (size as u64 - 1));
    } else {
        let server = world.process_at_rank(0);
        for i in 0..ROUNDS {
            let tag = (i % 7) as i32;
            server
                .send_with_tag(&[rank as u64, i], tag)
                .expect("request");
            let (answer, st) = server.receive_vec_with_tag::<u64>(tag).expect("answer");
            assert_eq!((answer[0], st.tag()), (rank as u64 * i, tag));
        }
        server.send_with_tag(&[0u64, 0], DONE).expect("done");
        // Nothing else may arrive.
        assert!(world
            .any_process()
            .immediate_probe_with_tag(AnyTag)
            .expect("iprobe")
            .is_none());
    }
}
