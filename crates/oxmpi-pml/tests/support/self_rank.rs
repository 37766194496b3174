//! One rank talking to itself over the self BTL, with an 8-byte send buffer
//! and `window` 8-byte receive slots: the PML's small-message path in one
//! process (shared by `tests/no_alloc.rs` and `examples/hot_path.rs`).

use oxmpi_btl::btl::Btl;
use oxmpi_btl::mem::MemRegion;
use oxmpi_btl::self_btl::{SelfBtl, DEFAULT_LIMITS};
use oxmpi_pml::{Buffer, Ob1, PeerDesc, PmlConfig};

/// The engine and its buffers (context 0, one rank).
pub struct SelfRank {
    /// The engine.
    pub o: Ob1<dyn Btl>,
    /// 8 bytes of `fill`.
    pub send: Buffer,
    /// `window` receive slots of 8 bytes.
    pub slots: Vec<Buffer>,
    // The memory behind `send` and `slots`, kept alive and untouched.
    _sbuf: Vec<u8>,
    rbuf: Vec<u8>,
}

impl SelfRank {
    /// A rank whose sends carry 8 bytes of `fill`.
    pub fn new(window: usize, fill: u8) -> SelfRank {
        let peers = vec![PeerDesc {
            local: true,
            cards: vec![None],
        }];
        let btls: Vec<Box<dyn Btl>> = vec![Box::new(SelfBtl::new(0, DEFAULT_LIMITS))];
        let mut o = Ob1::new(PmlConfig::default(), 0, btls, &peers).expect("engine");
        o.add_comm(0, vec![0], 0).expect("communicator");
        let mut sbuf = vec![fill; 8];
        let mut rbuf = vec![0u8; 8 * window];
        // SAFETY: `sbuf` lives in the returned value, which nothing else
        // touches while the engine may read it.
        let send = Buffer::Contig(unsafe { MemRegion::new(sbuf.as_mut_ptr(), 8) });
        let slots = rbuf
            .chunks_mut(8)
            // SAFETY: as above for `rbuf`; the caller completes each receive
            // before giving its slot to another.
            .map(|c| Buffer::Contig(unsafe { MemRegion::new(c.as_mut_ptr(), c.len()) }))
            .collect();
        SelfRank {
            o,
            send,
            slots,
            _sbuf: sbuf,
            rbuf,
        }
    }

    /// The last received byte of the last slot.
    pub fn last_byte(&self) -> u8 {
        self.rbuf[self.rbuf.len() - 1]
    }
}
