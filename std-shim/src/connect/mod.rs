//! Connection set-up: telling each side of an RC connection where the other is.
//!
//! - [`exchange`]: an out-of-band TCP exchange of QP number, PSN, LID and GID,
//!   wire-compatible with rdma-core's `ibv_rc_pingpong`, with an optional extension record
//!   for a remote buffer (address, rkey, length) and a short application tag.
//! - [`cm`]: the RDMA connection manager (librdmacm): resolve address and route,
//!   connect/accept, with the QP created on the connection's own device context.

pub mod cm;
pub mod exchange;

use crate::device::Gid;

/// One side of an RC connection, as `ibv_rc_pingpong` exchanges it.
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
    /// The region as a target for RDMA WRITE/READ and atomics, at `offset`.
    pub fn at(&self, offset: u64) -> zverbs_core::RemoteBuf {
        zverbs_core::RemoteBuf::new(self.addr + offset, self.rkey)
    }
}

/// A random 24-bit packet sequence number.
pub fn random_psn() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.write_u32(std::process::id());
    (h.finish() as u32) & 0xff_ffff
}
