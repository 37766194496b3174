// A scoped request borrows its buffer for the whole scope: the buffer
// cannot be dropped (or moved) while the request may still use it.
fn main() {
    let universe = oxmpi::initialize().unwrap();
    let world = universe.world();
    oxmpi::request::scope(|s| {
        let buf = vec![0u8; 16];
        let req = world.process_at_rank(0).immediate_send(s, &buf[..]).unwrap();
        drop(buf);
        req.wait().unwrap();
    });
}
