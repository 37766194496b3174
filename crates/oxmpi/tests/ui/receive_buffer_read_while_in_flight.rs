// A receive buffer cannot be read while a receive into it is in flight.
use oxmpi::traits::*;

fn main() {
    let universe = oxmpi::initialize().unwrap();
    let world = universe.world();
    let mut buf = [0u8; 16];
    oxmpi::request::scope(|s| {
        let req = world.any_process().immediate_receive_into(s, &mut buf).unwrap();
        println!("{}", buf[0]);
        req.wait().unwrap();
    });
}
