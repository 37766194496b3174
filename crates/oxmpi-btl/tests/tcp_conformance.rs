//! The BTL conformance suite against two TCP modules of one process,
//! connected over loopback (`btl_tcp_if_include=lo`).

use oxmpi_btl::btl::{Btl, PeerInfo};
use oxmpi_btl::conformance::{run_all, Pair, Side};
use oxmpi_btl::tcp::{TcpBtl, TcpConfig};

const SECRET: [u8; 16] = *b"conformance-0001";

fn module(rank: u32) -> TcpBtl {
    let mut cfg = TcpConfig::new(rank, SECRET);
    cfg.if_include = vec!["lo".into()];
    let mut m = TcpBtl::open_all(&cfg).expect("open tcp on lo");
    assert_eq!(m.len(), 1, "one module on lo");
    m.pop().unwrap()
}

fn pair() -> Pair<TcpBtl> {
    let mut a = module(0);
    let mut b = module(1);
    let (ca, cb) = (a.business_card(), b.business_card());
    let ab = a
        .add_peer(&PeerInfo {
            rank: 1,
            local: true,
            card: Some(&cb),
        })
        .unwrap()
        .expect("0 reaches 1 over lo");
    let ba = b
        .add_peer(&PeerInfo {
            rank: 0,
            local: true,
            card: Some(&ca),
        })
        .unwrap()
        .expect("1 reaches 0 over lo");
    Pair::Two(Side { btl: a, ep: ab }, Side { btl: b, ep: ba })
}

#[test]
fn tcp_conforms() {
    run_all(pair);
}
