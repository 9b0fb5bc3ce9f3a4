//! One side of an RC connection as the peers exchange it, a span of a peer's memory, and a
//! fresh packet sequence number.

use super::buf::BufError;
use super::device::Gid;

/// One side of an RC connection, as `ibv_rc_pingpong` exchanges it: what
/// [`Qp::endpoint`](crate::Qp::endpoint) returns and [`Qp::connect`](crate::Qp::connect) takes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Endpoint {
    /// The port's LID (0 on RoCE).
    pub lid: u16,
    /// The QP number (24 bits).
    pub qpn: u32,
    /// The first packet sequence number the side sends (24 bits).
    pub psn: u32,
    /// The GID (zero when LID routing is used).
    pub gid: Gid,
}

/// A span of a peer's registered memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RemoteRegion {
    /// Its address in the peer's address space.
    pub addr: u64,
    /// Its remote key.
    pub rkey: u32,
    /// Its length.
    pub len: u64,
}

impl RemoteRegion {
    /// The region as a target for RDMA WRITE/READ and atomics, at `offset` (the end itself is
    /// allowed: the target of a zero-length request).
    ///
    /// # Errors
    ///
    /// [`BufError::OutOfBounds`] if `offset` is past the end of the region.
    pub fn at(&self, offset: usize) -> Result<zverbs_core::RemoteBuf, BufError> {
        let len = usize::try_from(self.len).unwrap_or(usize::MAX);
        super::buf::remote_in(self.addr, len, self.rkey, offset)
    }
}

/// A random 24-bit packet sequence number (each QP draws one when it is created:
/// [`Qp::psn`](crate::Qp::psn)).
pub fn random_psn() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    // `RandomState`'s keys come from the operating system's random source once per thread and
    // change with each `RandomState`; the counter keeps two draws apart even so. No clock: a
    // PSN must not follow from the time (and Miri, isolated, has none).
    static DRAWS: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(DRAWS.fetch_add(1, Ordering::Relaxed));
    (h.finish() as u32) & 0xff_ffff
}

#[cfg(test)]
mod tests {
    use super::RemoteRegion;
    use crate::types::buf::BufError;
    use zverbs_core::RemoteBuf;

    #[test]
    fn at_is_bounded_by_the_region() {
        let r = RemoteRegion {
            addr: 0x1000,
            rkey: 9,
            len: 64,
        };
        assert_eq!(r.at(0), Ok(RemoteBuf::new(0x1000, 9)));
        assert_eq!(r.at(8), Ok(RemoteBuf::new(0x1008, 9)));
        assert_eq!(r.at(64), Ok(RemoteBuf::new(0x1040, 9)));
        assert_eq!(
            r.at(65),
            Err(BufError::OutOfBounds {
                offset: 65,
                len: 0,
                buf_len: 64
            })
        );
        assert!(matches!(
            r.at(usize::MAX),
            Err(BufError::OutOfBounds { .. })
        ));
    }
}
