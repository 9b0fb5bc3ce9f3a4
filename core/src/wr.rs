//! Work requests: what a caller asks a queue pair to do.

use crate::sge::{RemoteBuf, Sge};

/// Where a datagram goes: the destination of a SEND on an unreliable-datagram (UD) queue pair,
/// with what each backend needs to address it.
///
/// Made once per peer on the control path (from an address handle) and referenced by every
/// request to that peer; the request copies nothing of it until it writes the WQE.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct UdDest {
    /// The mlx5 address vector, 48 bytes in the device's byte order, as `mlx5dv_init_obj`
    /// reports it for the address handle (`mlx5dv_ah.av`, `struct mlx5_wqe_av`): the direct
    /// path copies it into the WQE's datagram segment.
    pub av: [u8; 48],
    /// The verbs address handle (`struct ibv_ah *`) as an address, for the libibverbs
    /// fallback (`ibv_send_wr.wr.ud.ah`); 0 when there is none. A plain number, so that a
    /// request stays `Send`: the control path that made the handle keeps it alive.
    pub ah: usize,
    /// The destination QP number (24 bits).
    pub remote_qpn: u32,
    /// The destination's Q_Key.
    pub qkey: u32,
}

impl UdDest {
    /// A destination from its address vector, verbs handle, QP number and Q_Key.
    #[inline]
    pub const fn new(av: [u8; 48], ah: usize, remote_qpn: u32, qkey: u32) -> Self {
        Self {
            av,
            ah,
            remote_qpn,
            qkey,
        }
    }
}

bitflags::bitflags! {
    /// Flags of a send work request, as `IBV_SEND_*` in `<infiniband/verbs.h>`.
    ///
    /// The values equal libibverbs' `enum ibv_send_flags`, so the fallback passes them through.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub struct SendFlags: u32 {
        /// Wait for earlier RDMA READ and atomic requests of this queue pair to complete
        /// before starting this one (`IBV_SEND_FENCE`).
        const FENCE = 1 << 0;
        /// Produce a completion when the request finishes (`IBV_SEND_SIGNALED`). Unsignaled
        /// requests are retired silently by the next signaled completion after them.
        const SIGNALED = 1 << 1;
        /// Set the solicited-event bit in the message (`IBV_SEND_SOLICITED`).
        const SOLICITED = 1 << 2;
        /// Copy the payload into the work queue entry itself (`IBV_SEND_INLINE`): the local
        /// memory need not be registered and may be reused as soon as the post returns.
        /// Valid for WRITE, WRITE with immediate, SEND and SEND with immediate.
        const INLINE = 1 << 3;
        /// Have the device compute the IPv4 header checksum and the TCP or UDP checksum of
        /// the frame (`IBV_SEND_IP_CSUM`): the frame's own checksum fields are overwritten.
        /// Only on a raw Ethernet queue ([`Transport::Ethernet`](crate::Transport::Ethernet)).
        const IP_CSUM = 1 << 4;
    }
}

impl SendFlags {
    /// No flags: an unsignaled request.
    pub const NONE: Self = Self::empty();
}

/// The operation of a send work request and its operands.
///
/// `imm` values are given and reported in host byte order; backends put them on the wire in
/// network byte order, so a peer's completion reports the same number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
// `repr(C)`, and the fields in this order: every operation with a list has it first, and
// WRITE, WRITE with immediate and READ have their remote address next, so the posting code
// reads those at one place whatever the operation.
#[repr(C)]
pub enum SendOp<'a> {
    /// RDMA WRITE of the gathered local data to `remote`.
    Write {
        /// Local data, gathered in order.
        sgl: &'a [Sge],
        /// Destination in the peer's memory.
        remote: RemoteBuf,
    },
    /// RDMA WRITE that also consumes a receive request at the peer and delivers `imm` in its
    /// completion.
    WriteImm {
        /// Local data, gathered in order.
        sgl: &'a [Sge],
        /// Destination in the peer's memory.
        remote: RemoteBuf,
        /// Immediate data for the peer's completion.
        imm: u32,
    },
    /// SEND: the gathered local data lands in the buffers of the peer's next receive request.
    Send {
        /// Local data, gathered in order.
        sgl: &'a [Sge],
    },
    /// SEND that also delivers `imm` in the peer's receive completion.
    SendImm {
        /// Local data, gathered in order.
        sgl: &'a [Sge],
        /// Immediate data for the peer's completion.
        imm: u32,
    },
    /// RDMA READ of `remote` into the local entries, scattered in order.
    Read {
        /// Local destination, scattered in order.
        sgl: &'a [Sge],
        /// Source in the peer's memory.
        remote: RemoteBuf,
    },
    /// 8-byte atomic compare-and-swap at `remote` (8-byte aligned): if it equals `compare` it
    /// becomes `swap`; the original value lands in `local` (8 bytes, 8-byte aligned).
    CompareSwap {
        /// Where the original remote value is written.
        local: Sge,
        /// The 8-byte target in the peer's memory.
        remote: RemoteBuf,
        /// Value expected at `remote`.
        compare: u64,
        /// Value stored when the comparison succeeds.
        swap: u64,
    },
    /// 8-byte atomic fetch-and-add at `remote` (8-byte aligned); the original value lands in
    /// `local` (8 bytes, 8-byte aligned).
    FetchAdd {
        /// Where the original remote value is written.
        local: Sge,
        /// The 8-byte target in the peer's memory.
        remote: RemoteBuf,
        /// Value added at `remote`.
        add: u64,
    },
    /// No operation: occupies a slot and, when signaled, produces a completion.
    Nop,
    /// SEND of one datagram to `dest`, on an unreliable-datagram queue pair: the gathered
    /// local data (at most the path MTU) lands in the buffers of a receive request at the
    /// destination QP.
    SendTo {
        /// Local data, gathered in order.
        sgl: &'a [Sge],
        /// Where the datagram goes.
        dest: &'a UdDest,
    },
    /// [`SendOp::SendTo`] that also delivers `imm` in the destination's receive completion.
    SendToImm {
        /// Local data, gathered in order.
        sgl: &'a [Sge],
        /// Immediate data for the peer's completion.
        imm: u32,
        /// Where the datagram goes.
        dest: &'a UdDest,
    },
}

impl<'a> SendOp<'a> {
    /// The local scatter/gather list of the operation (one entry for atomics, none for NOP).
    #[inline]
    pub fn sgl(&self) -> &[Sge] {
        match self {
            SendOp::Write { sgl, .. }
            | SendOp::WriteImm { sgl, .. }
            | SendOp::Send { sgl }
            | SendOp::SendImm { sgl, .. }
            | SendOp::Read { sgl, .. }
            | SendOp::SendTo { sgl, .. }
            | SendOp::SendToImm { sgl, .. } => sgl,
            SendOp::CompareSwap { local, .. } | SendOp::FetchAdd { local, .. } => {
                core::slice::from_ref(local)
            }
            SendOp::Nop => &[],
        }
    }

    /// Whether the operation may carry its payload inline ([`SendFlags::INLINE`]).
    #[inline]
    pub const fn can_inline(&self) -> bool {
        matches!(
            self,
            SendOp::Write { .. }
                | SendOp::WriteImm { .. }
                | SendOp::Send { .. }
                | SendOp::SendImm { .. }
                | SendOp::SendTo { .. }
                | SendOp::SendToImm { .. }
        )
    }

    /// Whether the operation is one an unreliable-datagram queue takes: a datagram SEND or a
    /// NOP.
    #[inline]
    pub const fn is_datagram_or_nop(&self) -> bool {
        matches!(
            self,
            SendOp::SendTo { .. } | SendOp::SendToImm { .. } | SendOp::Nop
        )
    }

    /// The datagram destination, for the operations of an unreliable-datagram queue pair.
    #[inline]
    pub const fn dest(&self) -> Option<&'a UdDest> {
        match self {
            SendOp::SendTo { dest, .. } | SendOp::SendToImm { dest, .. } => Some(*dest),
            _ => None,
        }
    }

    /// The immediate value, for the operations that carry one.
    #[inline]
    pub const fn imm(&self) -> Option<u32> {
        match self {
            SendOp::WriteImm { imm, .. }
            | SendOp::SendImm { imm, .. }
            | SendOp::SendToImm { imm, .. } => Some(*imm),
            _ => None,
        }
    }
}

/// A send work request: an operation, the caller's 64-bit tag for it, and flags.
///
/// # Example
///
/// A request borrows its scatter/gather list; a constructor per operation, then the flags:
///
/// ```
/// use zverbs_core::{RemoteBuf, SendFlags, SendOp, SendWr, Sge};
///
/// let payload = [7u8; 64];
/// let sgl = [Sge::from_slice(&payload, 0x1100)]; // the registration's lkey
/// let peer = RemoteBuf::new(0x7f00_0000_1000, 0xbeef); // the peer's address and rkey
/// let wr = SendWr::write(1, &sgl, peer).signaled();
/// assert!(wr.flags.contains(SendFlags::SIGNALED));
/// assert_eq!(wr.payload_len(), 64);
/// assert!(matches!(wr.op, SendOp::Write { remote, .. } if remote.rkey == 0xbeef));
///
/// let send = SendWr::send_imm(2, &sgl, 42).with_flags(SendFlags::SIGNALED | SendFlags::SOLICITED);
/// assert_eq!(send.op.imm(), Some(42));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendWr<'a> {
    /// Returned unchanged in the request's completion.
    pub wr_id: u64,
    /// What to do.
    pub op: SendOp<'a>,
    /// How to do it.
    pub flags: SendFlags,
}

impl<'a> SendWr<'a> {
    /// A request for `op`, unsignaled.
    #[inline]
    pub const fn new(wr_id: u64, op: SendOp<'a>) -> Self {
        Self {
            wr_id,
            op,
            flags: SendFlags::NONE,
        }
    }

    /// RDMA WRITE of `sgl` to `remote`.
    #[inline]
    pub const fn write(wr_id: u64, sgl: &'a [Sge], remote: RemoteBuf) -> Self {
        Self::new(wr_id, SendOp::Write { sgl, remote })
    }

    /// RDMA WRITE with immediate.
    #[inline]
    pub const fn write_imm(wr_id: u64, sgl: &'a [Sge], remote: RemoteBuf, imm: u32) -> Self {
        Self::new(wr_id, SendOp::WriteImm { sgl, remote, imm })
    }

    /// SEND of `sgl`.
    #[inline]
    pub const fn send(wr_id: u64, sgl: &'a [Sge]) -> Self {
        Self::new(wr_id, SendOp::Send { sgl })
    }

    /// SEND with immediate.
    #[inline]
    pub const fn send_imm(wr_id: u64, sgl: &'a [Sge], imm: u32) -> Self {
        Self::new(wr_id, SendOp::SendImm { sgl, imm })
    }

    /// RDMA READ of `remote` into `sgl`.
    #[inline]
    pub const fn read(wr_id: u64, sgl: &'a [Sge], remote: RemoteBuf) -> Self {
        Self::new(wr_id, SendOp::Read { sgl, remote })
    }

    /// Atomic compare-and-swap.
    #[inline]
    pub const fn compare_swap(
        wr_id: u64,
        local: Sge,
        remote: RemoteBuf,
        compare: u64,
        swap: u64,
    ) -> Self {
        Self::new(
            wr_id,
            SendOp::CompareSwap {
                local,
                remote,
                compare,
                swap,
            },
        )
    }

    /// Atomic fetch-and-add.
    #[inline]
    pub const fn fetch_add(wr_id: u64, local: Sge, remote: RemoteBuf, add: u64) -> Self {
        Self::new(wr_id, SendOp::FetchAdd { local, remote, add })
    }

    /// SEND of the datagram `sgl` to `dest` (unreliable-datagram queue pairs).
    #[inline]
    pub const fn send_to(wr_id: u64, sgl: &'a [Sge], dest: &'a UdDest) -> Self {
        Self::new(wr_id, SendOp::SendTo { sgl, dest })
    }

    /// SEND with immediate of the datagram `sgl` to `dest`.
    #[inline]
    pub const fn send_to_imm(wr_id: u64, sgl: &'a [Sge], dest: &'a UdDest, imm: u32) -> Self {
        Self::new(wr_id, SendOp::SendToImm { sgl, dest, imm })
    }

    /// A NOP.
    #[inline]
    pub const fn nop(wr_id: u64) -> Self {
        Self::new(wr_id, SendOp::Nop)
    }

    /// The same request with `flags` added.
    #[inline]
    pub const fn with_flags(mut self, flags: SendFlags) -> Self {
        self.flags = self.flags.union(flags);
        self
    }

    /// The same request, signaled.
    #[inline]
    pub const fn signaled(self) -> Self {
        self.with_flags(SendFlags::SIGNALED)
    }

    /// The same request, with its payload inline.
    #[inline]
    pub const fn inline(self) -> Self {
        self.with_flags(SendFlags::INLINE)
    }

    /// The same request, fenced behind earlier READs and atomics.
    #[inline]
    pub const fn fenced(self) -> Self {
        self.with_flags(SendFlags::FENCE)
    }

    /// The same request, with the solicited-event bit.
    #[inline]
    pub const fn solicited(self) -> Self {
        self.with_flags(SendFlags::SOLICITED)
    }

    /// Sum of the lengths of the local entries (the message size of a WRITE or SEND).
    #[inline]
    pub fn payload_len(&self) -> u64 {
        self.op.sgl().iter().map(|s| u64::from(s.length)).sum()
    }
}

/// A receive work request: buffers for one incoming SEND (or WRITE with immediate).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecvWr<'a> {
    /// Returned unchanged in the request's completion.
    pub wr_id: u64,
    /// Buffers the incoming message is scattered over, in order.
    pub sgl: &'a [Sge],
}

impl<'a> RecvWr<'a> {
    /// A receive request for `sgl`.
    #[inline]
    pub const fn new(wr_id: u64, sgl: &'a [Sge]) -> Self {
        Self { wr_id, sgl }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_values_match_libibverbs() {
        // enum ibv_send_flags: FENCE 1, SIGNALED 2, SOLICITED 4, INLINE 8, IP_CSUM 16.
        assert_eq!(SendFlags::FENCE.bits(), 1);
        assert_eq!(SendFlags::SIGNALED.bits(), 2);
        assert_eq!(SendFlags::SOLICITED.bits(), 4);
        assert_eq!(SendFlags::INLINE.bits(), 8);
        assert_eq!(SendFlags::IP_CSUM.bits(), 16);
        assert_eq!(SendFlags::from_bits_truncate(0xff).bits(), 0x1f);
    }

    #[test]
    fn builders_compose_flags() {
        let sgl = [Sge::new(0x1000, 8, 1)];
        let wr = SendWr::send(3, &sgl)
            .signaled()
            .inline()
            .fenced()
            .solicited();
        assert!(wr.flags.contains(SendFlags::SIGNALED | SendFlags::INLINE));
        assert!(wr.flags.contains(SendFlags::FENCE | SendFlags::SOLICITED));
        assert_eq!(wr.payload_len(), 8);
        assert!(wr.op.can_inline());
        assert!(!SendWr::read(1, &sgl, RemoteBuf::default()).op.can_inline());
    }

    #[test]
    fn sgl_of_each_op() {
        let sgl = [Sge::new(0x1000, 8, 1), Sge::new(0x2000, 4, 1)];
        let r = RemoteBuf::new(0x10, 2);
        assert_eq!(SendWr::write(0, &sgl, r).op.sgl().len(), 2);
        assert_eq!(SendWr::fetch_add(0, sgl[0], r, 1).op.sgl(), &sgl[..1]);
        assert!(SendWr::nop(0).op.sgl().is_empty());
        assert_eq!(SendWr::send_imm(0, &sgl, 5).op.imm(), Some(5));
        assert_eq!(SendWr::send(0, &sgl).op.imm(), None);
    }

    #[test]
    fn datagram_ops_and_their_destination() {
        let sgl = [Sge::new(0x1000, 8, 1)];
        let (r, local) = (RemoteBuf::new(0x10, 2), Sge::new(0x2000, 8, 1));
        let dest = UdDest::new([7; 48], 0, 0x12, 0x8000_0001);
        let datagrams = [
            SendWr::send_to(0, &sgl, &dest),
            SendWr::send_to_imm(1, &sgl, &dest, 9),
        ];
        for wr in &datagrams {
            assert!(wr.op.is_datagram_or_nop(), "{wr:?}");
            assert!(core::ptr::eq(wr.op.dest().unwrap(), &dest), "{wr:?}");
        }
        assert!(SendWr::nop(2).op.is_datagram_or_nop());
        assert_eq!(SendWr::nop(2).op.dest(), None);
        let connected = [
            SendWr::write(3, &sgl, r),
            SendWr::write_imm(4, &sgl, r, 5),
            SendWr::send(5, &sgl),
            SendWr::send_imm(6, &sgl, 6),
            SendWr::read(7, &sgl, r),
            SendWr::compare_swap(8, local, r, 1, 2),
            SendWr::fetch_add(9, local, r, 3),
        ];
        for wr in &connected {
            assert!(!wr.op.is_datagram_or_nop(), "{wr:?}");
            assert_eq!(wr.op.dest(), None, "{wr:?}");
        }
    }
}
