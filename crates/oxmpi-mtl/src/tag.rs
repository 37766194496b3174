//! The 64-bit network tag of a tagged transport (libfabric's `fi_tagged`),
//! as seed 004 lays it out: MPI needs 96 bits per message (communicator,
//! source rank, tag), the network carries 64, two of which the
//! synchronous-send protocol takes. [`TagMode`] chooses how the other 62
//! are shared:
//!
//! | mode | communicator id | source rank | MPI tag |
//! |---|---|---|---|
//! | `ofi_tag_1` | 12 bits | 18 bits | 32 bits |
//! | `ofi_tag_2` | 24 bits | 18 bits | 20 bits |
//! | `ofi_tag_full` | 28 bits | in the completion's CQ data (32 bits) | 32 bits |
//!
//! From the top bit down: the communicator id, the two protocol bits, the
//! source rank (not in `ofi_tag_full`), the MPI tag. A provider that
//! reserves high bits of the tag for itself (zeros at the top of its
//! `mem_tag_format`) takes them from the communicator id, which is
//! therefore the top field. Everything that does not fit (a communicator
//! id, a rank or a tag beyond its field, or no room left for the
//! communicator id) is a [`TagError`] at the call that needs it, never a
//! silent collision.
//!
//! A receive matches with a tag and an ignore mask (`fi_trecv`'s `ignore`):
//! `MPI_ANY_SOURCE` and `MPI_ANY_TAG` ignore their fields, and the
//! synchronous-send bit is always ignored, so a synchronous send matches
//! any receive that its standard form would. The acknowledgement bit is
//! not: an acknowledgement travels through the same tag space on a real
//! provider and must never match an MPI receive (only the sender's receive
//! for it, [`Layout::ack_tag`]).

/// How the 62 bits are shared (`mtl_ofi_tag_mode`, once the provider is
/// chosen: `auto` is resolved by the caller to [`TagMode::Full`] when the
/// provider has `FI_REMOTE_CQ_DATA` and `FI_DIRECTED_RECV`, else
/// [`TagMode::Tag1`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TagMode {
    /// `ofi_tag_1`: 12 / 18 / 32 bits.
    Tag1,
    /// `ofi_tag_2`: 24 / 18 / 20 bits.
    Tag2,
    /// `ofi_tag_full`: 28-bit communicator id and 32-bit tag in the tag,
    /// the source rank in the remote CQ data.
    Full,
}

impl TagMode {
    /// The parameter value that names this mode.
    pub fn name(self) -> &'static str {
        match self {
            TagMode::Tag1 => "ofi_tag_1",
            TagMode::Tag2 => "ofi_tag_2",
            TagMode::Full => "ofi_tag_full",
        }
    }

    /// The mode a parameter value names (`auto` is the caller's to
    /// resolve).
    pub fn from_name(s: &str) -> Option<TagMode> {
        match s {
            "ofi_tag_1" => Some(TagMode::Tag1),
            "ofi_tag_2" => Some(TagMode::Tag2),
            "ofi_tag_full" => Some(TagMode::Full),
            _ => None,
        }
    }
}

/// The synchronous-send protocol's bits of a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Proto {
    /// A standard (or ready, or buffered) send.
    Plain,
    /// A synchronous send: the receiver answers with [`Proto::SyncAck`]
    /// once it matched.
    Sync,
    /// The answer to a synchronous send.
    SyncAck,
}

/// A field does not fit the layout.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TagError {
    /// A communicator id beyond the field.
    #[error("communicator id {cid} does not fit {mode}'s {bits}-bit field (at most {max})")]
    Cid {
        /// The id.
        cid: u32,
        /// The layout.
        mode: &'static str,
        /// Its width.
        bits: u32,
        /// The largest that fits.
        max: u32,
    },
    /// A source rank beyond the field.
    #[error("rank {rank} does not fit {mode}'s {bits}-bit source field (at most {max})")]
    Source {
        /// The rank.
        rank: u32,
        /// The layout.
        mode: &'static str,
        /// Its width.
        bits: u32,
        /// The largest that fits.
        max: u32,
    },
    /// A tag beyond the field.
    #[error("tag {tag} does not fit {mode}'s {bits}-bit tag field (at most {max})")]
    Tag {
        /// The tag.
        tag: i32,
        /// The layout.
        mode: &'static str,
        /// Its width.
        bits: u32,
        /// The largest that fits.
        max: i64,
    },
    /// The provider reserves so many high bits that no communicator id
    /// field is left.
    #[error("the provider reserves {reserved} high tag bits: {mode} has no room left for communicator ids")]
    NoRoom {
        /// Bits the provider reserves.
        reserved: u32,
        /// The layout.
        mode: &'static str,
    },
}

/// A tag layout: field widths and positions, fixed once the provider and
/// the mode are chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    mode: TagMode,
    cid_bits: u32,
    src_bits: u32,
    tag_bits: u32,
}

/// The fields of a received network tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fields {
    /// The communicator id.
    pub cid: u32,
    /// The source rank (`None` in [`TagMode::Full`]: it is in the CQ data).
    pub source: Option<u32>,
    /// The MPI tag.
    pub tag: i32,
    /// The protocol bits.
    pub proto: Proto,
}

const PROTO_BITS: u32 = 2;

fn mask(bits: u32) -> u64 {
    if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    }
}

impl Layout {
    /// The layout of `mode` for a provider whose `mem_tag_format` leaves
    /// `reserved` high bits to itself (0: all 64 are ours).
    pub fn new(mode: TagMode, reserved: u32) -> Result<Layout, TagError> {
        let (cid, src, tag) = match mode {
            TagMode::Tag1 => (12, 18, 32),
            TagMode::Tag2 => (24, 18, 20),
            TagMode::Full => (28, 0, 32),
        };
        // The fields below the communicator id, and what is left above.
        let below = PROTO_BITS + src + tag;
        let room = 64u32.saturating_sub(reserved).saturating_sub(below);
        let cid_bits = cid.min(room);
        if cid_bits == 0 {
            return Err(TagError::NoRoom {
                reserved,
                mode: mode.name(),
            });
        }
        Ok(Layout {
            mode,
            cid_bits,
            src_bits: src,
            tag_bits: tag,
        })
    }

    /// The layout's mode.
    pub fn mode(&self) -> TagMode {
        self.mode
    }

    /// Width of the communicator id field.
    pub fn cid_bits(&self) -> u32 {
        self.cid_bits
    }

    /// The largest communicator id.
    pub fn max_cid(&self) -> u32 {
        mask(self.cid_bits) as u32
    }

    /// The largest source rank (`u32::MAX` when the source travels in the
    /// CQ data).
    pub fn max_source(&self) -> u32 {
        if self.src_bits == 0 {
            u32::MAX
        } else {
            mask(self.src_bits) as u32
        }
    }

    /// The largest MPI tag (`MPI_TAG_UB`): the field's top bit is the
    /// sign, so that the negative tags of internal traffic fit too.
    pub fn max_tag(&self) -> i32 {
        (mask(self.tag_bits - 1)) as i32
    }

    /// The smallest (internal, negative) tag.
    pub fn min_tag(&self) -> i32 {
        -(self.max_tag()) - 1
    }

    /// Whether the source rank travels in the CQ data (the sender must
    /// send it, the receive must be directed for a named source).
    pub fn source_in_data(&self) -> bool {
        self.src_bits == 0
    }

    fn src_shift(&self) -> u32 {
        self.tag_bits
    }

    fn proto_shift(&self) -> u32 {
        self.tag_bits + self.src_bits
    }

    fn cid_shift(&self) -> u32 {
        self.proto_shift() + PROTO_BITS
    }

    fn check_cid(&self, cid: u32) -> Result<u64, TagError> {
        if cid > self.max_cid() {
            return Err(TagError::Cid {
                cid,
                mode: self.mode.name(),
                bits: self.cid_bits,
                max: self.max_cid(),
            });
        }
        Ok(u64::from(cid) << self.cid_shift())
    }

    fn check_source(&self, rank: u32) -> Result<u64, TagError> {
        if self.src_bits == 0 {
            return Ok(0);
        }
        if rank > self.max_source() {
            return Err(TagError::Source {
                rank,
                mode: self.mode.name(),
                bits: self.src_bits,
                max: self.max_source(),
            });
        }
        Ok(u64::from(rank) << self.src_shift())
    }

    fn check_tag(&self, tag: i32) -> Result<u64, TagError> {
        // Two's complement in the field's width.
        if tag < self.min_tag() || tag > self.max_tag() {
            return Err(TagError::Tag {
                tag,
                mode: self.mode.name(),
                bits: self.tag_bits,
                max: i64::from(self.max_tag()),
            });
        }
        Ok(u64::from(tag as u32) & mask(self.tag_bits))
    }

    fn proto_bits(&self, p: Proto) -> u64 {
        let v = match p {
            Proto::Plain => 0,
            Proto::Sync => 1,
            Proto::SyncAck => 2,
        };
        v << self.proto_shift()
    }

    /// The network tag of a message on communicator `cid` from rank
    /// `source` with MPI tag `tag` (in [`TagMode::Full`] the source is not
    /// in the tag: send it as CQ data).
    pub fn send_tag(&self, cid: u32, source: u32, tag: i32, proto: Proto) -> Result<u64, TagError> {
        Ok(self.check_cid(cid)?
            | self.check_source(source)?
            | self.check_tag(tag)?
            | self.proto_bits(proto))
    }

    /// The tag and ignore mask of a receive on `cid` from `source` (`None`:
    /// any source) with `tag` (`None`: any tag). The protocol bits are
    /// ignored but for the acknowledgement's (see the module doc); in
    /// [`TagMode::Full`] a named source is matched by a directed receive,
    /// not by the tag.
    pub fn recv_match(
        &self,
        cid: u32,
        source: Option<u32>,
        tag: Option<i32>,
    ) -> Result<(u64, u64), TagError> {
        let mut bits = self.check_cid(cid)?;
        let mut ignore = self.proto_bits(Proto::Sync);
        match source {
            Some(r) => bits |= self.check_source(r)?,
            None => ignore |= mask(self.src_bits) << self.src_shift(),
        }
        match tag {
            Some(t) => bits |= self.check_tag(t)?,
            None => ignore |= mask(self.tag_bits),
        }
        Ok((bits, ignore))
    }

    /// The tag that matches only the answer to a synchronous send
    /// `send_tag` made (the same fields, the [`Proto::SyncAck`] bits).
    pub fn ack_tag(&self, send_tag: u64) -> u64 {
        let p = mask(PROTO_BITS) << self.proto_shift();
        (send_tag & !p) | self.proto_bits(Proto::SyncAck)
    }

    /// The fields of network tag `t`.
    pub fn decode(&self, t: u64) -> Fields {
        // Sign-extend the field.
        let shift = 64 - self.tag_bits;
        let tag = (((t & mask(self.tag_bits)) << shift) as i64 >> shift) as i32;
        let proto = match (t >> self.proto_shift()) & mask(PROTO_BITS) {
            1 => Proto::Sync,
            2 => Proto::SyncAck,
            _ => Proto::Plain,
        };
        Fields {
            cid: ((t >> self.cid_shift()) & mask(self.cid_bits)) as u32,
            source: (self.src_bits > 0)
                .then(|| ((t >> self.src_shift()) & mask(self.src_bits)) as u32),
            tag,
            proto,
        }
    }
}

/// Whether a message with network tag `t` matches a receive's `(tag,
/// ignore)` (`fi_trecv`'s rule).
pub fn matches(t: u64, want: (u64, u64)) -> bool {
    (t | want.1) == (want.0 | want.1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn all() -> [Layout; 3] {
        [
            Layout::new(TagMode::Tag1, 0).unwrap(),
            Layout::new(TagMode::Tag2, 0).unwrap(),
            Layout::new(TagMode::Full, 0).unwrap(),
        ]
    }

    #[test]
    fn the_seeds_field_widths() {
        let [a, b, c] = all();
        assert_eq!(
            (a.max_cid(), a.max_source(), a.max_tag()),
            (4095, 262_143, i32::MAX)
        );
        assert_eq!(
            (b.max_cid(), b.max_source(), b.max_tag()),
            (16_777_215, 262_143, 524_287)
        );
        assert_eq!(
            (c.max_cid(), c.max_source(), c.max_tag()),
            (268_435_455, u32::MAX, i32::MAX)
        );
        assert!(c.source_in_data() && !a.source_in_data());
    }

    #[test]
    fn every_edge_of_every_field_round_trips_and_one_past_is_an_error() {
        for l in all() {
            for cid in [0, 1, l.max_cid()] {
                for src in [0, 1, l.max_source().min(1 << 20)] {
                    for tag in [0, 1, l.max_tag(), -1, l.min_tag()] {
                        for p in [Proto::Plain, Proto::Sync, Proto::SyncAck] {
                            let t = l.send_tag(cid, src, tag, p).unwrap();
                            let f = l.decode(t);
                            assert_eq!((f.cid, f.tag, f.proto), (cid, tag, p), "{l:?}");
                            if !l.source_in_data() {
                                assert_eq!(f.source, Some(src));
                            }
                        }
                    }
                }
            }
            assert!(matches!(
                l.send_tag(l.max_cid() + 1, 0, 0, Proto::Plain),
                Err(TagError::Cid { .. })
            ));
            if !l.source_in_data() {
                assert!(matches!(
                    l.send_tag(0, l.max_source() + 1, 0, Proto::Plain),
                    Err(TagError::Source { .. })
                ));
            }
            if l.max_tag() < i32::MAX {
                assert!(matches!(
                    l.send_tag(0, 0, l.max_tag() + 1, Proto::Plain),
                    Err(TagError::Tag { .. })
                ));
                assert!(matches!(
                    l.send_tag(0, 0, l.min_tag() - 1, Proto::Plain),
                    Err(TagError::Tag { .. })
                ));
            }
        }
    }

    #[test]
    fn reserved_provider_bits_shrink_the_communicator_id() {
        let l = Layout::new(TagMode::Tag1, 4).unwrap();
        assert_eq!(l.cid_bits(), 8);
        assert_eq!(l.max_cid(), 255);
        let t = l.send_tag(255, 262_143, -1, Proto::SyncAck).unwrap();
        assert_eq!(t >> 60, 0, "the provider's bits stay clear");
        assert!(Layout::new(TagMode::Tag1, 12).is_err());
        assert!(matches!(
            Layout::new(TagMode::Full, 2),
            Ok(l) if l.cid_bits() == 28
        ));
        assert!(matches!(
            Layout::new(TagMode::Full, 4),
            Ok(l) if l.cid_bits() == 26
        ));
    }

    #[test]
    fn wildcards_and_the_protocol_bits_are_ignored() {
        for l in all() {
            let sync = l.send_tag(7, 3, 42, Proto::Sync).unwrap();
            let plain = l.send_tag(7, 3, 42, Proto::Plain).unwrap();
            for (src, tag) in [
                (Some(3), Some(42)),
                (None, Some(42)),
                (Some(3), None),
                (None, None),
            ] {
                let want = l.recv_match(7, src, tag).unwrap();
                assert!(matches(sync, want) && matches(plain, want), "{l:?}");
            }
            assert!(!matches(plain, l.recv_match(8, None, None).unwrap()));
            assert!(!matches(plain, l.recv_match(7, None, Some(43)).unwrap()));
            if !l.source_in_data() {
                assert!(!matches(plain, l.recv_match(7, Some(4), None).unwrap()));
            }
            let ack = l.ack_tag(sync);
            assert_eq!(l.decode(ack).proto, Proto::SyncAck);
            assert!(
                !matches(ack, l.recv_match(7, None, None).unwrap()),
                "{l:?}: an acknowledgement matched an MPI receive"
            );
            assert!(matches(ack, (ack, 0)));
        }
    }

    proptest! {
        #[test]
        fn distinct_fields_never_collide(
            c1 in 0u32..4096, c2 in 0u32..4096,
            s1 in 0u32..262_144, s2 in 0u32..262_144,
            t1 in any::<i32>(), t2 in any::<i32>(),
        ) {
            let l = Layout::new(TagMode::Tag1, 0).unwrap();
            let a = l.send_tag(c1, s1, t1, Proto::Plain).unwrap();
            let b = l.send_tag(c2, s2, t2, Proto::Plain).unwrap();
            prop_assert_eq!(a == b, (c1, s1, t1) == (c2, s2, t2));
            let want = l.recv_match(c1, Some(s1), Some(t1)).unwrap();
            prop_assert_eq!(matches(b, want), (c1, s1, t1) == (c2, s2, t2));
        }
    }
}
