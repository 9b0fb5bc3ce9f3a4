//! The request contract, checked once for every backend.
//!
//! A send request is valid for a queue when its scatter/gather list fits the queue's entries,
//! an inline payload fits the queue's inline limit and rides on an operation that can carry
//! one, an atomic names an 8-byte, 8-byte-aligned local buffer and an aligned target, and the
//! message is at most 2 GiB. [`SendWr::check`] decides all of that against the queue's
//! [`SqCaps`] and returns what a backend needs to write the request ([`CheckedSend`]: the
//! data entries, the inline length, the effective flags), computed once; a backend maps it to
//! its own format (WQE opcode and size on mlx5, `ibv_send_wr` in the fallback) and adds what
//! only it knows (room in its ring and CQ, operations it does not implement).
//!
//! A batch is checked whole before anything of it is written: [`CheckedBatch::check`] checks
//! every request in order (with the backend's own check of each, for room), and the
//! [`CheckedBatch`] it returns hands each request back with its summary again, derived without
//! the checks it passed. So the writing pass has no error to handle, and no summary is kept in
//! storage sized in advance.
//!
//! [`RecvWr::check`] is the receive side's check (its scatter entries).
//!
//! The order of the checks, and so which error a request with several faults gets: on a raw
//! Ethernet queue its own first (the operation, [`PostError::WrongTransport`] for any but
//! SEND and NOP; a frame's length, [`PostError::FrameTooShort`], [`PostError::FrameTooLong`]);
//! then the transport ([`PostError::WrongTransport`]: a datagram on a reliable-connected queue, a
//! connected operation on a datagram queue) and a datagram's length against the path MTU
//! ([`PostError::DatagramTooLong`]), then an atomic's operands ([`PostError::AtomicSize`], then [`PostError::AtomicAlignment`]), the number of
//! entries ([`PostError::TooManySges`]), checksum offload on a queue that is not a raw
//! Ethernet one, or on one whose device does not offer it
//! ([`PostError::ChecksumNotAvailable`]), then for an inline request
//! [`PostError::InlineNotAllowed`] and [`PostError::InlineTooLarge`], otherwise
//! [`PostError::MessageTooLong`].
//!
//! A raw Ethernet queue ([`Transport::Ethernet`]) takes SEND (a whole frame) and NOP: every
//! other operation is [`PostError::WrongTransport`] there, as a datagram is on a connected
//! queue.

use core::convert::Infallible;

use crate::error::{BatchError, PostError};
use crate::sge::Sge;
use crate::wr::{RecvWr, SendFlags, SendOp, SendWr};

/// The largest message an RDMA operation can carry: 2 GiB (2^31 bytes).
pub const MAX_MESSAGE: u64 = 1 << 31;

/// The shortest frame a raw Ethernet queue sends: an Ethernet header (destination and source
/// MAC, EtherType), 14 bytes (`MLX5_ETH_L2_MIN_HEADER_SIZE`).
pub const MIN_FRAME: u32 = 14;

/// What the control path negotiated for a send queue: the limits its requests are checked
/// against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SqCaps {
    /// `ibv_qp_cap.max_send_sge`.
    pub max_send_sge: u32,
    /// `ibv_qp_cap.max_inline_data`.
    pub max_inline_data: u32,
    /// Whether the QP was created with `sq_sig_all`: every WQE asks for a CQE.
    pub sig_all: bool,
    /// How many signaled requests may be outstanding at once: this queue's share of its CQ.
    /// A post that would exceed it fails with [`PostError::CqFull`] (the backend's check of
    /// room, not [`SendWr::check`]).
    pub max_signaled: u32,
    /// The queue pair's transport: which operations it takes.
    pub transport: Transport,
}

/// The transport of a queue pair, as far as its requests are concerned: which operations it
/// takes, and how long a message may be.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Reliable connected (`IBV_QPT_RC`): WRITE, READ, SEND, atomics and NOP, to the one
    /// connected peer, messages up to 2 GiB.
    #[default]
    Rc,
    /// Unreliable datagram (`IBV_QPT_UD`): [`SendOp::SendTo`], [`SendOp::SendToImm`] and NOP,
    /// each datagram at most `mtu` bytes.
    Ud {
        /// The path MTU in bytes (256 .. 4096): the largest datagram.
        mtu: u32,
    },
    /// A raw packet queue pair (`IBV_QPT_RAW_PACKET`) on an Ethernet port: [`SendOp::Send`]
    /// of one whole frame (from the Ethernet header on, without the FCS) and NOP. A frame is
    /// at least [`MIN_FRAME`] bytes and at most `max_frame`; [`SendFlags::IP_CSUM`] has the
    /// device fill in its IPv4 and TCP/UDP checksums.
    Ethernet {
        /// The largest frame in bytes (the port's MTU plus the Ethernet header, and a VLAN
        /// tag if one is sent).
        max_frame: u32,
        /// Whether the device computes a frame's IPv4 and TCP/UDP checksums
        /// (`IBV_DEVICE_RAW_IP_CSUM`, which libmlx5 asks of a raw packet QP before it takes
        /// `IBV_SEND_IP_CSUM`): without it [`SendFlags::IP_CSUM`] is
        /// [`PostError::ChecksumNotAvailable`].
        ip_csum: bool,
    },
}

impl SqCaps {
    /// Whether the queue is an unreliable-datagram queue.
    #[inline(always)]
    pub const fn is_ud(&self) -> bool {
        matches!(self.transport, Transport::Ud { .. })
    }

    /// Whether the queue is a raw Ethernet queue.
    #[inline(always)]
    pub const fn is_ethernet(&self) -> bool {
        matches!(self.transport, Transport::Ethernet { .. })
    }
}

/// What a send request that passed [`SendWr::check`] asks of its queue.
///
/// Only the check makes one, so a backend that holds one knows the request fits the limits it
/// was checked against: at most `max_send_sge` entries, an inline payload of at most
/// `max_inline_data` bytes on an operation that can carry it, valid atomic operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckedSend<'w> {
    sgl: &'w [Sge],
    flags: SendFlags,
    /// The inline payload's length when `flags` has [`SendFlags::INLINE`], else 0.
    inline_len: u32,
    data_sges: u32,
    imm: u32,
}

impl<'w> CheckedSend<'w> {
    /// The immediate value of an operation that carries one ([`SendOp::imm`]); 0 for the
    /// others. Read where the check tells the operations apart, so that a backend need not
    /// tell them apart again for it.
    #[inline(always)]
    pub const fn imm(&self) -> u32 {
        self.imm
    }

    /// The scatter/gather list of a WRITE, SEND or READ (the request's own); empty for an
    /// atomic (whose one local entry is its own) and a NOP.
    #[inline(always)]
    pub const fn sgl(&self) -> &'w [Sge] {
        self.sgl
    }

    /// The request's flags, with [`SendFlags::SIGNALED`] added when the queue signals every
    /// request (`sig_all`).
    #[inline(always)]
    pub const fn flags(&self) -> SendFlags {
        self.flags
    }

    /// Whether the request produces a completion (its own flag or the queue's `sig_all`).
    #[inline(always)]
    pub const fn signaled(&self) -> bool {
        self.flags.contains(SendFlags::SIGNALED)
    }

    /// Whether the payload is copied inline ([`SendFlags::INLINE`]).
    #[inline(always)]
    pub const fn is_inline(&self) -> bool {
        self.flags.contains(SendFlags::INLINE)
    }

    /// The inline payload's length (the sum of the entries) for an inline request; 0 for one
    /// whose entries are given by reference.
    #[inline(always)]
    pub const fn inline_len(&self) -> u32 {
        self.inline_len
    }

    /// The entries of the scatter/gather list that carry data (a non-zero length), for a
    /// WRITE, SEND or READ not sent inline: the data segments a WQE holds. 0 for an inline
    /// request, an atomic (whose one local entry is its own) and a NOP.
    #[inline(always)]
    pub const fn data_sges(&self) -> u32 {
        self.data_sges
    }
}

/// Whether [`SendWr::summarize`] refuses an invalid request or trusts that it is valid.
trait Mode {
    /// [`PostError`], or nothing at all.
    type Error;
    /// Whether the checks are made: false when every one would pass.
    const CHECKS: bool;
    /// What a failed check becomes.
    fn refuse(error: PostError) -> Result<(), Self::Error>;
}

/// Every check is made: [`SendWr::check`].
enum Checking {}

impl Mode for Checking {
    type Error = PostError;
    const CHECKS: bool = true;
    #[inline(always)]
    fn refuse(error: PostError) -> Result<(), PostError> {
        Err(error)
    }
}

/// The request already passed the checks against the same limits ([`CheckedBatch`]): none is
/// made again, and none can fail.
enum Trusted {}

impl Mode for Trusted {
    type Error = Infallible;
    const CHECKS: bool = false;
    #[inline(always)]
    fn refuse(_: PostError) -> Result<(), Infallible> {
        Ok(())
    }
}

/// The transport as [`SendWr::summarize`] knows it: at run time (`ANY`: as `caps.transport`
/// says) or at compile time, for a backend whose queue is one type per transport.
mod kind {
    /// Read from `caps.transport` at run time.
    pub const ANY: u8 = 0;
    /// Reliable connected, known at compile time.
    pub const RC: u8 = 1;
    /// Unreliable datagram, known at compile time.
    pub const UD: u8 = 2;
    /// Raw Ethernet, known at compile time.
    pub const ETH: u8 = 3;
}

impl<'w> SendWr<'w> {
    /// Checks the request against a queue's limits and sums up what it asks of the queue.
    /// Reads the request alone: the queue's room is the backend's to check.
    ///
    /// # Errors
    ///
    /// The first fault, in the order of the module's documentation: on a raw Ethernet queue
    /// [`PostError::WrongTransport`], [`PostError::FrameTooShort`] or
    /// [`PostError::FrameTooLong`]; then [`PostError::WrongTransport`],
    /// [`PostError::DatagramTooLong`], [`PostError::AtomicSize`],
    /// [`PostError::AtomicAlignment`], [`PostError::TooManySges`], on the other queues
    /// [`PostError::ChecksumNotAvailable`], [`PostError::InlineNotAllowed`],
    /// [`PostError::InlineTooLarge`] or [`PostError::MessageTooLong`].
    #[inline(always)]
    pub fn check(&self, caps: &SqCaps) -> Result<CheckedSend<'w>, PostError> {
        self.summarize::<Checking, { kind::ANY }>(caps)
    }

    /// [`SendWr::check`] for a queue whose transport is known at compile time: a datagram
    /// queue when `DATAGRAM`, a reliable-connected one otherwise (and `caps.transport` says
    /// the same: the backend checked that when it made the queue). The transport test is
    /// then no test at all: on a connected queue a datagram is refused where the operation is
    /// told apart, at no cost to the connected operations, and the code after the check has
    /// no datagram to handle (and the other way round on a datagram queue).
    ///
    /// # Errors
    ///
    /// As [`SendWr::check`].
    #[inline(always)]
    pub fn check_as<const DATAGRAM: bool>(
        &self,
        caps: &SqCaps,
    ) -> Result<CheckedSend<'w>, PostError> {
        if DATAGRAM {
            self.summarize::<Checking, { kind::UD }>(caps)
        } else {
            self.summarize::<Checking, { kind::RC }>(caps)
        }
    }

    /// [`SendWr::check`] for a queue known at compile time to be a raw Ethernet queue
    /// (`caps.transport` is [`Transport::Ethernet`]: the backend checked that when it made the
    /// queue), as [`SendWr::check_as`] is for the other transports.
    ///
    /// # Errors
    ///
    /// As [`SendWr::check`].
    #[inline(always)]
    pub fn check_ethernet(&self, caps: &SqCaps) -> Result<CheckedSend<'w>, PostError> {
        self.summarize::<Checking, { kind::ETH }>(caps)
    }

    /// The check, and the summary; under [`Trusted`] the summary alone. `KIND` is the
    /// queue's transport when known at compile time, or [`kind::ANY`]: as `caps.transport`
    /// says.
    #[inline(always)]
    fn summarize<M: Mode, const KIND: u8>(
        &self,
        caps: &SqCaps,
    ) -> Result<CheckedSend<'w>, M::Error> {
        // A raw Ethernet queue's own checks first (SEND or NOP, a frame's length); on the other
        // queues, checksum offload refused: one flag test.
        let ethernet = KIND == kind::ETH || (KIND == kind::ANY && caps.is_ethernet());
        // Whether checksum offload is refused on this Ethernet queue (its device has none):
        // then it is tested with the inline flag below, as on the other queues.
        let mut no_csum = false;
        if M::CHECKS && ethernet {
            no_csum = !frame::<M>(self, caps)?;
        }
        // Whether the queue is known at compile time, and then whether it is a datagram queue
        // (an Ethernet queue refused every operation but SEND and NOP above, so it takes the
        // connected queue's path from here).
        let known = KIND != kind::ANY;
        let on_ud = KIND == kind::UD;
        // Whether connected operations are refused: on a datagram queue.
        let refuse_connected = if known { on_ud } else { caps.is_ud() };
        let (sgl, imm): (&'w [Sge], u32) = match self.op {
            SendOp::Write { sgl, .. } | SendOp::Send { sgl } | SendOp::Read { sgl, .. } => {
                if refuse_connected {
                    M::refuse(PostError::WrongTransport)?;
                }
                (sgl, 0)
            }
            SendOp::WriteImm { sgl, imm, .. } | SendOp::SendImm { sgl, imm } => {
                if refuse_connected {
                    M::refuse(PostError::WrongTransport)?;
                }
                (sgl, imm)
            }
            SendOp::SendTo { sgl, .. } | SendOp::SendToImm { sgl, .. } => {
                if known && !on_ud {
                    M::refuse(PostError::WrongTransport)?;
                } else if M::CHECKS {
                    // Out of line: the reliable-connected operations pay nothing for it.
                    datagram::<M>(sgl, caps)?;
                }
                (sgl, self.op.imm().unwrap_or(0))
            }
            SendOp::CompareSwap { local, remote, .. } | SendOp::FetchAdd { local, remote, .. } => {
                if refuse_connected {
                    M::refuse(PostError::WrongTransport)?;
                }
                if local.length != 8 {
                    M::refuse(PostError::AtomicSize { len: local.length })?;
                }
                if !local.addr.is_multiple_of(8) || !remote.addr.is_multiple_of(8) {
                    M::refuse(PostError::AtomicAlignment)?;
                }
                (&[], 0)
            }
            SendOp::Nop => (&[], 0),
        };
        if sgl.len() > caps.max_send_sge as usize {
            M::refuse(PostError::TooManySges {
                got: sgl.len().min(u32::MAX as usize) as u32,
                max: caps.max_send_sge,
            })?;
        }
        // Checksum offload is an Ethernet queue's alone. On a queue known at compile time not
        // to be one, it is tested with the inline flag, in the one test a request pays for
        // both (neither flag: the entries by reference, as before there was checksum
        // offload); told at run time, it is a test of its own.
        let known_other = KIND == kind::RC || KIND == kind::UD;
        if KIND == kind::ANY && !ethernet && self.flags.contains(SendFlags::IP_CSUM) {
            M::refuse(PostError::ChecksumNotAvailable)?;
        }
        // On an Ethernet queue the flag joins the test when the device has no checksum
        // offload (a flag set from the queue's transport: no branch of its own).
        let refuse_csum = known_other || no_csum;
        let unusual = SendFlags::INLINE.union(SendFlags::from_bits_retain(
            SendFlags::IP_CSUM.bits() * u32::from(refuse_csum),
        ));
        let mut inline_len = 0;
        let mut data_sges = 0;
        if self.flags.intersects(unusual) {
            // One branch for both refusals: checksum offload (on a queue known not to be an
            // Ethernet one), an operation that carries nothing inline.
            let csum = refuse_csum && self.flags.contains(SendFlags::IP_CSUM);
            if csum || !self.op.can_inline() {
                M::refuse(if csum {
                    PostError::ChecksumNotAvailable
                } else {
                    PostError::InlineNotAllowed
                })?;
            }
            let len: u64 = sgl.iter().map(|s| u64::from(s.length)).sum();
            if len > u64::from(caps.max_inline_data) {
                M::refuse(PostError::InlineTooLarge {
                    len: len.min(u64::from(u32::MAX)) as u32,
                    max: caps.max_inline_data,
                })?;
            }
            inline_len = len as u32;
        } else if let [s] = sgl {
            // One entry, the common case, without a loop. (On an Ethernet queue the frame's
            // own limit, checked above, is the smaller.)
            data_sges = u32::from(s.length != 0);
            if KIND != kind::ETH && u64::from(s.length) > MAX_MESSAGE {
                M::refuse(PostError::MessageTooLong)?;
            }
        } else {
            let mut len = 0u64;
            for s in sgl {
                len += u64::from(s.length);
                // Zero-length entries carry nothing (and a zero byte count means 2 GiB to an
                // mlx5 device): the backends skip them, as libmlx5 does.
                data_sges += u32::from(s.length != 0);
            }
            if len > MAX_MESSAGE {
                M::refuse(PostError::MessageTooLong)?;
            }
        }
        let flags = if caps.sig_all {
            self.flags.union(SendFlags::SIGNALED)
        } else {
            self.flags
        };
        Ok(CheckedSend {
            sgl,
            flags,
            inline_len,
            data_sges,
            imm,
        })
    }
}

/// The checks of a raw Ethernet queue's own, before the others: the operation is a SEND (a
/// frame, at least [`MIN_FRAME`] bytes and at most the queue's largest frame, its entries
/// summed) or a NOP; anything else is [`PostError::WrongTransport`]. Returns whether the
/// queue's device offers checksum offload.
#[inline(always)]
fn frame<M: Mode>(wr: &SendWr<'_>, caps: &SqCaps) -> Result<bool, M::Error> {
    let Transport::Ethernet {
        max_frame: max,
        ip_csum,
    } = caps.transport
    else {
        // (Called for Ethernet queues only.)
        return M::refuse(PostError::WrongTransport).map(|()| true);
    };
    let sgl = match wr.op {
        SendOp::Send { sgl } => sgl,
        SendOp::Nop => return Ok(ip_csum),
        _ => return M::refuse(PostError::WrongTransport).map(|()| ip_csum),
    };
    let len = match sgl {
        [s] => u64::from(s.length),
        _ => sgl.iter().map(|s| u64::from(s.length)).sum(),
    };
    if len < u64::from(MIN_FRAME) {
        return M::refuse(PostError::FrameTooShort {
            len: len as u32,
            min: MIN_FRAME,
        })
        .map(|()| ip_csum);
    }
    if len > u64::from(max) {
        return M::refuse(PostError::FrameTooLong {
            len: len.min(u64::from(u32::MAX)) as u32,
            max,
        })
        .map(|()| ip_csum);
    }
    Ok(ip_csum)
}

/// The checks of a datagram's own: the queue is a UD queue, and the datagram fits its path MTU.
#[inline(never)]
fn datagram<M: Mode>(sgl: &[Sge], caps: &SqCaps) -> Result<(), M::Error> {
    let Transport::Ud { mtu } = caps.transport else {
        return M::refuse(PostError::WrongTransport);
    };
    let len: u64 = sgl.iter().map(|s| u64::from(s.length)).sum();
    if len > u64::from(mtu) {
        return M::refuse(PostError::DatagramTooLong {
            len: len.min(u64::from(u32::MAX)) as u32,
            mtu,
        });
    }
    Ok(())
}

impl RecvWr<'_> {
    /// Checks the request against a receive queue's scatter entries per request.
    ///
    /// # Errors
    ///
    /// [`PostError::TooManySges`] when the list has more than `max_sge` entries.
    #[inline(always)]
    pub fn check(&self, max_sge: u32) -> Result<(), PostError> {
        if self.sgl.len() > max_sge as usize {
            return Err(PostError::TooManySges {
                got: self.sgl.len().min(u32::MAX as usize) as u32,
                max: max_sge,
            });
        }
        Ok(())
    }
}

/// A batch of send requests every one of which passed [`SendWr::check`] against the same
/// limits (and the backend's own check of it): what a backend writes once the whole batch is
/// known to be valid.
#[derive(Clone, Copy, Debug)]
pub struct CheckedBatch<'a, 'w> {
    wrs: &'a [SendWr<'w>],
    /// The limits' `sig_all`: all that the summaries need of them once the checks passed.
    sig_all: bool,
}

impl<'a, 'w> CheckedBatch<'a, 'w> {
    /// Checks every request of `wrs` in order against `caps`, and hands each valid one with its
    /// summary to `each`, the backend's check (of room: the requests before it and this one
    /// must fit together). Stops at the first request either refuses.
    ///
    /// # Errors
    ///
    /// A [`BatchError`] naming the first request that [`SendWr::check`] or `each` refused,
    /// with its error.
    #[inline(always)]
    pub fn check<F>(wrs: &'a [SendWr<'w>], caps: &SqCaps, each: F) -> Result<Self, BatchError>
    where
        F: FnMut(&SendWr<'w>, CheckedSend<'w>) -> Result<(), PostError>,
    {
        Self::check_with::<{ kind::ANY }, F>(wrs, caps, each)
    }

    /// [`CheckedBatch::check`] with [`SendWr::check_as`] for each request: for a backend whose
    /// queue's transport is known at compile time (a datagram queue when `DATAGRAM`).
    ///
    /// # Errors
    ///
    /// As [`CheckedBatch::check`].
    #[inline(always)]
    pub fn check_as<const DATAGRAM: bool, F>(
        wrs: &'a [SendWr<'w>],
        caps: &SqCaps,
        each: F,
    ) -> Result<Self, BatchError>
    where
        F: FnMut(&SendWr<'w>, CheckedSend<'w>) -> Result<(), PostError>,
    {
        if DATAGRAM {
            Self::check_with::<{ kind::UD }, F>(wrs, caps, each)
        } else {
            Self::check_with::<{ kind::RC }, F>(wrs, caps, each)
        }
    }

    #[inline(always)]
    fn check_with<const KIND: u8, F>(
        wrs: &'a [SendWr<'w>],
        caps: &SqCaps,
        mut each: F,
    ) -> Result<Self, BatchError>
    where
        F: FnMut(&SendWr<'w>, CheckedSend<'w>) -> Result<(), PostError>,
    {
        for (index, wr) in wrs.iter().enumerate() {
            let checked = wr
                .summarize::<Checking, KIND>(caps)
                .map_err(|error| BatchError { index, error })?;
            each(wr, checked).map_err(|error| BatchError { index, error })?;
        }
        Ok(Self {
            wrs,
            sig_all: caps.sig_all,
        })
    }

    /// The requests, in order.
    #[inline(always)]
    pub fn requests(&self) -> &'a [SendWr<'w>] {
        self.wrs
    }

    /// Each request with its summary, in order. The summaries are derived again, without the
    /// checks, which every request passed.
    #[inline(always)]
    pub fn iter(&self) -> impl Iterator<Item = (&'a SendWr<'w>, CheckedSend<'w>)> + use<'a, 'w> {
        // The limits under which nothing is refused (`Trusted` makes no check): only `sig_all`
        // matters to the summaries.
        let caps = SqCaps {
            max_send_sge: u32::MAX,
            max_inline_data: u32::MAX,
            sig_all: self.sig_all,
            max_signaled: u32::MAX,
            transport: Transport::Rc,
        };
        self.wrs.iter().map(move |wr| {
            let Ok(checked) = wr.summarize::<Trusted, { kind::ANY }>(&caps);
            (wr, checked)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RemoteBuf;

    const CAPS: SqCaps = SqCaps {
        max_send_sge: 3,
        max_inline_data: 64,
        sig_all: false,
        max_signaled: 16,
        transport: Transport::Rc,
    };

    fn summary<'w>(
        wr: &SendWr<'w>,
        sgl: &'w [Sge],
        flags: SendFlags,
        inline: Option<u32>,
        data_sges: u32,
    ) -> CheckedSend<'w> {
        assert_eq!(flags.contains(SendFlags::INLINE), inline.is_some());
        CheckedSend {
            sgl,
            flags,
            inline_len: inline.unwrap_or(0),
            data_sges,
            imm: wr.op.imm().unwrap_or(0),
        }
    }

    /// Every operation of `sgl` that takes a list, as the same request would be built by a
    /// caller.
    fn with_list<'a>(sgl: &'a [Sge]) -> [SendWr<'a>; 5] {
        let r = RemoteBuf::new(0x1000, 1);
        [
            SendWr::write(1, sgl, r),
            SendWr::write_imm(1, sgl, r, 5),
            SendWr::send(1, sgl),
            SendWr::send_imm(1, sgl, 5),
            SendWr::read(1, sgl, r),
        ]
    }

    #[test]
    fn entries_zero_one_and_the_limit_pass_one_more_does_not() {
        let e = Sge::new(0x2000, 16, 1);
        for n in 0..=3usize {
            let sgl = [e; 3];
            for wr in with_list(&sgl[..n]) {
                assert_eq!(
                    wr.check(&CAPS),
                    Ok(summary(&wr, &sgl[..n], SendFlags::NONE, None, n as u32)),
                    "{wr:?}"
                );
            }
        }
        let four = [e; 4];
        for wr in with_list(&four) {
            assert_eq!(
                wr.check(&CAPS),
                Err(PostError::TooManySges { got: 4, max: 3 })
            );
        }
        // A queue created without entries takes atomics and NOPs (they name no list) but no
        // list of one.
        let none = SqCaps {
            max_send_sge: 0,
            ..CAPS
        };
        assert_eq!(
            SendWr::write(1, &four[..1], RemoteBuf::default()).check(&none),
            Err(PostError::TooManySges { got: 1, max: 0 })
        );
        assert!(SendWr::nop(1).check(&none).is_ok());
        let local = Sge::new(0x3000, 8, 1);
        assert!(
            SendWr::fetch_add(1, local, RemoteBuf::new(0x10, 2), 1)
                .check(&none)
                .is_ok()
        );
    }

    #[test]
    fn zero_length_entries_carry_no_data() {
        let sgl = [
            Sge::new(0x10, 0, 1),
            Sge::new(0x20, 5, 1),
            Sge::new(0x30, 0, 1),
        ];
        for wr in with_list(&sgl) {
            assert_eq!(wr.check(&CAPS).unwrap().data_sges(), 1);
        }
        for wr in with_list(&sgl[..1]) {
            assert_eq!(wr.check(&CAPS).unwrap().data_sges(), 0);
        }
    }

    #[test]
    fn inline_at_the_limit_passes_one_byte_more_does_not() {
        let buf = [0u8; 65];
        for (len, parts) in [(0usize, 1usize), (1, 1), (64, 1), (64, 3), (65, 1), (65, 2)] {
            // `len` bytes in `parts` entries.
            let cut = len / parts;
            let sgl: [Sge; 3] = core::array::from_fn(|i| {
                let (from, to) = match i {
                    i if i + 1 < parts => (i * cut, (i + 1) * cut),
                    i if i + 1 == parts => (i * cut, len),
                    _ => (len, len),
                };
                Sge::from_slice(&buf[from..to], 0)
            });
            for wr in with_list(&sgl[..parts]).into_iter().take(4) {
                let got = wr.inline().check(&CAPS);
                if len <= 64 {
                    assert_eq!(
                        got,
                        Ok(summary(
                            &wr,
                            &sgl[..parts],
                            SendFlags::INLINE,
                            Some(len as u32),
                            0
                        )),
                        "{len} bytes in {parts}"
                    );
                } else {
                    assert_eq!(
                        got,
                        Err(PostError::InlineTooLarge { len: 65, max: 64 }),
                        "{len} bytes in {parts}"
                    );
                }
            }
        }
        // A sum beyond 32 bits is reported as the largest length there is.
        let huge = [Sge::new(0, u32::MAX, 0), Sge::new(0, 2, 0)];
        assert_eq!(
            SendWr::send(1, &huge).inline().check(&CAPS),
            Err(PostError::InlineTooLarge {
                len: u32::MAX,
                max: 64
            })
        );
    }

    #[test]
    fn inline_only_on_writes_and_sends() {
        let sgl = [Sge::new(0x10, 4, 0)];
        let r = RemoteBuf::new(0x1000, 1);
        let local = Sge::new(0x3000, 8, 1);
        for wr in [
            SendWr::read(1, &sgl, r),
            SendWr::compare_swap(1, local, r, 1, 2),
            SendWr::fetch_add(1, local, r, 1),
            SendWr::nop(1),
        ] {
            assert_eq!(
                wr.inline().check(&CAPS),
                Err(PostError::InlineNotAllowed),
                "{wr:?}"
            );
        }
        for wr in with_list(&sgl).into_iter().take(4) {
            assert!(wr.inline().check(&CAPS).is_ok(), "{wr:?}");
        }
    }

    #[test]
    fn two_gib_exactly_passes_one_byte_more_does_not() {
        let two_gib = (MAX_MESSAGE) as u32;
        let halves = [Sge::new(0, two_gib / 2, 1), Sge::new(0, two_gib / 2, 1)];
        let one = [Sge::new(0, two_gib, 1)];
        for sgl in [&one[..], &halves[..]] {
            for wr in with_list(sgl) {
                assert!(wr.check(&CAPS).is_ok(), "{wr:?}");
            }
        }
        let one_more = [Sge::new(0, two_gib + 1, 1)];
        let halves_more = [
            Sge::new(0, two_gib / 2, 1),
            Sge::new(0, two_gib / 2, 1),
            Sge::new(0, 1, 1),
        ];
        let widest = [Sge::new(0, u32::MAX, 1); 3];
        for sgl in [&one_more[..], &halves_more[..], &widest[..]] {
            for wr in with_list(sgl) {
                assert_eq!(wr.check(&CAPS), Err(PostError::MessageTooLong), "{wr:?}");
            }
        }
    }

    #[test]
    fn atomic_size_and_alignment() {
        let r = RemoteBuf::new(0x1000, 1);
        let atomics = |local: Sge, r: RemoteBuf| {
            [
                SendWr::compare_swap(1, local, r, 1, 2),
                SendWr::fetch_add(1, local, r, 3),
            ]
        };
        for wr in atomics(Sge::new(0x2000, 8, 1), r) {
            assert_eq!(
                wr.check(&CAPS),
                Ok(summary(&wr, &[], SendFlags::NONE, None, 0))
            );
        }
        for len in [0, 4, 7, 9, 16] {
            for wr in atomics(Sge::new(0x2000, len, 1), r) {
                assert_eq!(wr.check(&CAPS), Err(PostError::AtomicSize { len }));
            }
        }
        for (local, remote) in [(0x2004, 0x1000), (0x2001, 0x1000), (0x2000, 0x1004)] {
            for wr in atomics(Sge::new(local, 8, 1), RemoteBuf::new(remote, 1)) {
                assert_eq!(wr.check(&CAPS), Err(PostError::AtomicAlignment), "{wr:?}");
            }
        }
        // The size is checked before the alignment.
        for wr in atomics(Sge::new(0x2004, 4, 1), r) {
            assert_eq!(wr.check(&CAPS), Err(PostError::AtomicSize { len: 4 }));
        }
    }

    #[test]
    fn the_order_of_the_checks() {
        let r = RemoteBuf::new(0x1000, 1);
        // Too many entries before inline: four entries of 100 bytes on a READ, inline.
        let four = [Sge::new(0, 100, 1); 4];
        assert_eq!(
            SendWr::read(1, &four, r).inline().check(&CAPS),
            Err(PostError::TooManySges { got: 4, max: 3 })
        );
        // Inline not allowed before inline too large.
        let big = [Sge::new(0, 100, 1)];
        assert_eq!(
            SendWr::read(1, &big, r).inline().check(&CAPS),
            Err(PostError::InlineNotAllowed)
        );
        // An atomic's operands before inline.
        assert_eq!(
            SendWr::fetch_add(1, Sge::new(0, 4, 1), r, 1)
                .inline()
                .check(&CAPS),
            Err(PostError::AtomicSize { len: 4 })
        );
        // Inline: no message-length check (the inline limit is the smaller).
        let wide = [Sge::new(0, u32::MAX, 1)];
        assert_eq!(
            SendWr::send(1, &wide).inline().check(&CAPS),
            Err(PostError::InlineTooLarge {
                len: u32::MAX,
                max: 64
            })
        );
    }

    #[test]
    fn flags_and_signaling() {
        let sgl = [Sge::new(0x10, 4, 0)];
        let all = SendFlags::FENCE | SendFlags::SOLICITED;
        let wr = SendWr::send(1, &sgl).with_flags(all);
        let c = wr.check(&CAPS).unwrap();
        assert_eq!((c.flags(), c.signaled()), (all, false));
        let c = wr.signaled().check(&CAPS).unwrap();
        assert_eq!((c.flags(), c.signaled()), (all | SendFlags::SIGNALED, true));
        let sig_all = SqCaps {
            sig_all: true,
            ..CAPS
        };
        let c = wr.check(&sig_all).unwrap();
        assert_eq!((c.flags(), c.signaled()), (all | SendFlags::SIGNALED, true));
        assert!(SendWr::nop(1).check(&sig_all).unwrap().signaled());
    }

    #[test]
    fn receive_entries_up_to_the_limit() {
        let e = [Sge::new(0x10, 4, 0); 3];
        for n in 0..=2 {
            assert_eq!(RecvWr::new(1, &e[..n]).check(2), Ok(()));
        }
        assert_eq!(
            RecvWr::new(1, &e).check(2),
            Err(PostError::TooManySges { got: 3, max: 2 })
        );
        assert_eq!(
            RecvWr::new(1, &e[..1]).check(0),
            Err(PostError::TooManySges { got: 1, max: 0 })
        );
        assert_eq!(RecvWr::new(1, &[]).check(0), Ok(()));
    }

    /// Requests of every kind, valid against [`CAPS`].
    fn valid<'a>(sgl: &'a [Sge], inline: &'a [Sge]) -> [SendWr<'a>; 11] {
        let r = RemoteBuf::new(0x1000, 1);
        let local = Sge::new(0x2000, 8, 1);
        [
            SendWr::write(1, sgl, r),
            SendWr::write_imm(2, sgl, r, 5).signaled(),
            SendWr::send(3, sgl).fenced(),
            SendWr::send_imm(4, sgl, 5).solicited(),
            SendWr::read(5, sgl, r),
            SendWr::write(6, inline, r).inline(),
            SendWr::send(7, inline).inline().signaled(),
            SendWr::send(8, &[]),
            SendWr::compare_swap(9, local, r, 1, 2),
            SendWr::fetch_add(10, local, r, 3).signaled(),
            SendWr::nop(11),
        ]
    }

    #[test]
    fn a_checked_batch_gives_back_the_summaries_of_the_check() {
        let sgl = [
            Sge::new(0x10, 0, 1),
            Sge::new(0x20, 9, 1),
            Sge::new(0, 1, 1),
        ];
        let inline = [Sge::new(0x10, 30, 0), Sge::new(0x40, 34, 0)];
        let wrs = valid(&sgl, &inline);
        for caps in [
            CAPS,
            SqCaps {
                sig_all: true,
                ..CAPS
            },
        ] {
            let mut seen = 0;
            let batch = CheckedBatch::check(&wrs, &caps, |wr, c| {
                assert_eq!(wr.wr_id, seen + 1);
                assert_eq!(Ok(c), wr.check(&caps));
                seen += 1;
                Ok(())
            })
            .unwrap();
            assert_eq!(seen, wrs.len() as u64);
            assert_eq!(batch.requests(), &wrs[..]);
            let mut n = 0;
            for ((wr, c), orig) in batch.iter().zip(&wrs) {
                assert!(core::ptr::eq(wr, orig));
                assert_eq!(Ok(c), wr.check(&caps), "{wr:?}");
                n += 1;
            }
            assert_eq!(n, wrs.len());
        }
    }

    #[test]
    fn a_transport_known_at_compile_time_refuses_the_other_transports_operations() {
        let sgl = [Sge::new(0x10, 100, 1)];
        let (r, local) = (RemoteBuf::new(0x1000, 1), Sge::new(0x2000, 8, 1));
        let dest = crate::UdDest::new([0; 48], 0, 7, 0x11);
        let ud = SqCaps {
            transport: Transport::Ud { mtu: 256 },
            ..CAPS
        };
        let connected = [
            SendWr::write(1, &sgl, r),
            SendWr::write_imm(2, &sgl, r, 5),
            SendWr::send(3, &sgl),
            SendWr::send_imm(4, &sgl, 6),
            SendWr::read(5, &sgl, r),
            SendWr::compare_swap(6, local, r, 1, 2),
            SendWr::fetch_add(7, local, r, 3),
        ];
        for wr in &connected {
            let checked = wr.check(&CAPS);
            assert!(checked.is_ok(), "{wr:?}");
            assert_eq!(wr.check_as::<false>(&CAPS), checked, "{wr:?}");
            assert_eq!(checked.unwrap().imm(), wr.op.imm().unwrap_or(0));
            assert_eq!(wr.check(&ud), Err(PostError::WrongTransport), "{wr:?}");
            assert_eq!(
                wr.check_as::<true>(&ud),
                Err(PostError::WrongTransport),
                "{wr:?}"
            );
        }
        let datagrams = [
            SendWr::send_to(8, &sgl, &dest),
            SendWr::send_to_imm(9, &sgl, &dest, 10),
        ];
        for wr in &datagrams {
            let checked = wr.check(&ud);
            assert!(checked.is_ok(), "{wr:?}");
            assert_eq!(wr.check_as::<true>(&ud), checked, "{wr:?}");
            assert_eq!(checked.unwrap().imm(), wr.op.imm().unwrap_or(0));
            assert_eq!(wr.check(&CAPS), Err(PostError::WrongTransport), "{wr:?}");
            assert_eq!(
                wr.check_as::<false>(&CAPS),
                Err(PostError::WrongTransport),
                "{wr:?}"
            );
        }
        assert_eq!(datagrams[1].check(&ud).unwrap().imm(), 10);
        // NOP on both; a datagram above the path MTU on neither.
        let nop = SendWr::nop(11);
        assert_eq!(nop.check_as::<false>(&CAPS), nop.check(&CAPS));
        assert_eq!(nop.check_as::<true>(&ud), nop.check(&ud));
        let long = [Sge::new(0x10, 257, 1)];
        assert_eq!(
            SendWr::send_to(12, &long, &dest).check_as::<true>(&ud),
            Err(PostError::DatagramTooLong { len: 257, mtu: 256 })
        );
        // A batch on a connected queue stops at its datagram.
        let wrs = [connected[0], datagrams[0], connected[1]];
        let e = CheckedBatch::check_as::<false, _>(&wrs, &CAPS, |_, _| Ok(())).unwrap_err();
        assert_eq!(
            e,
            BatchError {
                index: 1,
                error: PostError::WrongTransport
            }
        );
    }

    #[test]
    fn a_datagram_of_exactly_the_path_mtu_fits() {
        let dest = crate::UdDest::new([0; 48], 0, 7, 0x11);
        let ud = SqCaps {
            transport: Transport::Ud { mtu: 256 },
            ..CAPS
        };
        // 256 bytes over two entries: the MTU to the byte, on both checks.
        let sgl = [Sge::new(0x10, 200, 1), Sge::new(0x200, 56, 1)];
        let wr = SendWr::send_to(1, &sgl, &dest);
        assert!(wr.check(&ud).is_ok());
        assert!(wr.check_as::<true>(&ud).is_ok());
        let over = [Sge::new(0x10, 200, 1), Sge::new(0x200, 57, 1)];
        assert_eq!(
            SendWr::send_to(2, &over, &dest).check(&ud),
            Err(PostError::DatagramTooLong { len: 257, mtu: 256 })
        );
    }

    #[test]
    fn a_batch_stops_at_the_first_refusal_of_either_check() {
        let sgl = [Sge::new(0x10, 4, 1)];
        let four = [sgl[0]; 4];
        let mut wrs = [SendWr::send(0, &sgl); 5];
        wrs[3] = SendWr::send(3, &four);
        // The request's own fault, at index 3; `each` saw the three before it.
        let mut seen = 0;
        let e = CheckedBatch::check(&wrs, &CAPS, |_, _| {
            seen += 1;
            Ok(())
        })
        .unwrap_err();
        assert_eq!(
            e,
            BatchError {
                index: 3,
                error: PostError::TooManySges { got: 4, max: 3 }
            }
        );
        assert_eq!(seen, 3);
        // The backend's refusal, at index 1, comes first.
        let mut seen = 0;
        let e = CheckedBatch::check(&wrs, &CAPS, |_, _| {
            seen += 1;
            if seen == 2 {
                Err(PostError::QueueFull { needed: 2, free: 1 })
            } else {
                Ok(())
            }
        })
        .unwrap_err();
        assert_eq!(
            e,
            BatchError {
                index: 1,
                error: PostError::QueueFull { needed: 2, free: 1 }
            }
        );
        // An empty batch is valid and has nothing to write.
        let empty = CheckedBatch::check(&[], &CAPS, |_, _| Err(PostError::Unsupported)).unwrap();
        assert_eq!(empty.iter().count(), 0);
    }

    const ETH: SqCaps = SqCaps {
        max_send_sge: 3,
        max_inline_data: 64,
        sig_all: false,
        max_signaled: 16,
        transport: Transport::Ethernet {
            max_frame: 1514,
            ip_csum: true,
        },
    };

    /// Both checks of an Ethernet queue (at run time and known at compile time) give the same
    /// answer; returns it.
    fn eth_check<'w>(wr: &SendWr<'w>, caps: &SqCaps) -> Result<CheckedSend<'w>, PostError> {
        let got = wr.check(caps);
        assert_eq!(wr.check_ethernet(caps), got, "{wr:?}");
        got
    }

    #[test]
    fn a_frame_is_an_ethernet_header_to_the_largest_frame() {
        let buf = [0u8; 1515];
        for (len, parts) in [(14usize, 1usize), (14, 2), (60, 1), (1514, 1), (1514, 3)] {
            let cut = len / parts;
            // `len` bytes in `parts` entries (the last takes the rest).
            let sgl: [Sge; 3] = core::array::from_fn(|i| {
                let from = (i * cut).min(len);
                let to = if i + 1 >= parts { len } else { (i + 1) * cut };
                Sge::from_slice(&buf[from..to.max(from)], 1)
            });
            let wr = SendWr::send(1, &sgl[..parts]);
            let c = eth_check(&wr, &ETH).unwrap();
            assert_eq!(c.data_sges(), parts as u32, "{len} bytes in {parts}");
            assert_eq!(c.flags(), SendFlags::NONE);
        }
        for (len, err) in [
            (0u32, PostError::FrameTooShort { len: 0, min: 14 }),
            (13, PostError::FrameTooShort { len: 13, min: 14 }),
            (
                1515,
                PostError::FrameTooLong {
                    len: 1515,
                    max: 1514,
                },
            ),
        ] {
            let sgl = [Sge::new(0x1000, len, 1)];
            assert_eq!(eth_check(&SendWr::send(1, &sgl), &ETH), Err(err));
            // Split over two entries, the sum counts.
            let two = [
                Sge::new(0x1000, len / 2, 1),
                Sge::new(0x2000, len - len / 2, 1),
            ];
            assert_eq!(eth_check(&SendWr::send(1, &two), &ETH), Err(err));
        }
        // Inline: the same bounds, under the inline limit first.
        let small = [Sge::from_slice(&buf[..13], 0)];
        assert_eq!(
            eth_check(&SendWr::send(1, &small).inline(), &ETH),
            Err(PostError::FrameTooShort { len: 13, min: 14 })
        );
        let fits = [Sge::from_slice(&buf[..64], 0)];
        assert_eq!(
            eth_check(&SendWr::send(1, &fits).inline(), &ETH)
                .unwrap()
                .inline_len(),
            64
        );
        let tiny = SqCaps {
            transport: Transport::Ethernet {
                max_frame: 60,
                ip_csum: true,
            },
            ..ETH
        };
        assert_eq!(
            eth_check(&SendWr::send(1, &fits).inline(), &tiny),
            Err(PostError::FrameTooLong { len: 64, max: 60 })
        );
        // A NOP has no frame.
        assert!(eth_check(&SendWr::nop(1), &ETH).is_ok());
    }

    #[test]
    fn an_ethernet_queue_takes_send_and_nop_alone() {
        let sgl = [Sge::new(0x10, 64, 1)];
        let (r, local) = (RemoteBuf::new(0x1000, 1), Sge::new(0x2000, 8, 1));
        let dest = crate::UdDest::new([0; 48], 0, 7, 0x11);
        for wr in [
            SendWr::write(1, &sgl, r),
            SendWr::write_imm(2, &sgl, r, 5),
            SendWr::send_imm(4, &sgl, 6),
            SendWr::read(5, &sgl, r),
            SendWr::compare_swap(6, local, r, 1, 2),
            SendWr::fetch_add(7, local, r, 3),
            SendWr::send_to(8, &sgl, &dest),
            SendWr::send_to_imm(9, &sgl, &dest, 10),
        ] {
            assert_eq!(
                eth_check(&wr, &ETH),
                Err(PostError::WrongTransport),
                "{wr:?}"
            );
        }
        // A frame's SEND is a connected SEND elsewhere: fine on RC, refused on UD.
        let ud = SqCaps {
            transport: Transport::Ud { mtu: 4096 },
            ..CAPS
        };
        assert!(SendWr::send(1, &sgl).check(&CAPS).is_ok());
        assert_eq!(
            SendWr::send(1, &sgl).check(&ud),
            Err(PostError::WrongTransport)
        );
    }

    #[test]
    fn checksum_offload_only_on_an_ethernet_queue() {
        let sgl = [Sge::new(0x10, 64, 1)];
        let two = [Sge::new(0x10, 30, 1), Sge::new(0x40, 34, 1)];
        let ud = SqCaps {
            transport: Transport::Ud { mtu: 4096 },
            ..CAPS
        };
        let dest = crate::UdDest::new([0; 48], 0, 7, 0x11);
        for list in [&sgl[..], &two[..]] {
            for inline in [false, true] {
                let mut wr = SendWr::send(1, list).with_flags(SendFlags::IP_CSUM);
                if inline {
                    wr = wr.inline();
                }
                let c = eth_check(&wr, &ETH).unwrap();
                assert!(c.flags().contains(SendFlags::IP_CSUM), "{wr:?}");
                assert_eq!(c.is_inline(), inline);
                assert_eq!(
                    wr.check(&CAPS),
                    Err(PostError::ChecksumNotAvailable),
                    "{wr:?}"
                );
                assert_eq!(
                    wr.check_as::<false>(&CAPS),
                    Err(PostError::ChecksumNotAvailable),
                    "{wr:?}"
                );
                let mut d = SendWr::send_to(1, list, &dest).with_flags(SendFlags::IP_CSUM);
                if inline {
                    d = d.inline();
                }
                assert_eq!(d.check(&ud), Err(PostError::ChecksumNotAvailable), "{d:?}");
                assert_eq!(
                    d.check_as::<true>(&ud),
                    Err(PostError::ChecksumNotAvailable),
                    "{d:?}"
                );
            }
        }
        // A NOP with the flag too: the flag is the queue's question, not the operation's.
        assert_eq!(
            SendWr::nop(1)
                .with_flags(SendFlags::IP_CSUM)
                .check_as::<false>(&CAPS),
            Err(PostError::ChecksumNotAvailable)
        );
    }

    /// An Ethernet queue whose device computes no checksums refuses the flag (single and
    /// gathered frames, inline or not, a NOP), at run time and known at compile time, and
    /// takes the same requests without it.
    #[test]
    fn checksum_offload_only_where_the_device_has_it() {
        let sgl = [Sge::new(0x10, 64, 1)];
        let two = [Sge::new(0x10, 30, 1), Sge::new(0x40, 34, 1)];
        let no_csum = SqCaps {
            transport: Transport::Ethernet {
                max_frame: 1514,
                ip_csum: false,
            },
            ..ETH
        };
        for list in [&sgl[..], &two[..]] {
            for inline in [false, true] {
                let mut wr = SendWr::send(1, list);
                if inline {
                    wr = wr.inline();
                }
                let plain = eth_check(&wr, &no_csum).unwrap();
                assert!(!plain.flags().contains(SendFlags::IP_CSUM));
                let wr = wr.with_flags(SendFlags::IP_CSUM | SendFlags::SIGNALED);
                assert_eq!(
                    eth_check(&wr, &no_csum),
                    Err(PostError::ChecksumNotAvailable),
                    "{wr:?}"
                );
                assert!(eth_check(&wr, &ETH).is_ok(), "{wr:?}");
            }
        }
        assert_eq!(
            eth_check(&SendWr::nop(1).with_flags(SendFlags::IP_CSUM), &no_csum),
            Err(PostError::ChecksumNotAvailable)
        );
        // A frame's own faults come first.
        let short = [Sge::new(0x10, 13, 1)];
        assert_eq!(
            eth_check(
                &SendWr::send(1, &short).with_flags(SendFlags::IP_CSUM),
                &no_csum
            ),
            Err(PostError::FrameTooShort { len: 13, min: 14 })
        );
    }

    #[test]
    fn a_checked_ethernet_batch_gives_back_the_summaries_of_the_check() {
        let sgl = [
            Sge::new(0x10, 0, 1),
            Sge::new(0x20, 9, 1),
            Sge::new(0, 60, 1),
        ];
        let frame = [0u8; 60];
        let inline = [Sge::from_slice(&frame, 0)];
        let wrs = [
            SendWr::send(1, &sgl).with_flags(SendFlags::IP_CSUM),
            SendWr::send(2, &inline).inline().signaled(),
            SendWr::nop(3),
        ];
        let batch = CheckedBatch::check(&wrs, &ETH, |_, _| Ok(())).unwrap();
        for (wr, c) in batch.iter() {
            assert_eq!(Ok(c), wr.check(&ETH), "{wr:?}");
        }
        let bad = [wrs[0], SendWr::send(4, &sgl[..2])];
        assert_eq!(
            CheckedBatch::check(&bad, &ETH, |_, _| Ok(())).unwrap_err(),
            BatchError {
                index: 1,
                error: PostError::FrameTooShort { len: 9, min: 14 }
            }
        );
    }

    #[test]
    fn the_order_of_the_ethernet_checks() {
        let four = [Sge::new(0x10, 4, 1); 4];
        let dest = crate::UdDest::new([0; 48], 0, 7, 0x11);
        // Checksum offload after the number of entries, before inline.
        let wr = SendWr::send(1, &four).with_flags(SendFlags::IP_CSUM);
        let many = Err(PostError::TooManySges { got: 4, max: 3 });
        assert_eq!(wr.check(&CAPS), many);
        assert_eq!(wr.check_as::<false>(&CAPS), many);
        let big = [Sge::new(0x10, 100, 1)];
        for wr in [
            SendWr::send(1, &big)
                .with_flags(SendFlags::IP_CSUM)
                .inline(),
            SendWr::read(1, &big, RemoteBuf::new(0, 1))
                .with_flags(SendFlags::IP_CSUM)
                .inline(),
        ] {
            assert_eq!(
                wr.check(&CAPS),
                Err(PostError::ChecksumNotAvailable),
                "{wr:?}"
            );
            assert_eq!(
                wr.check_as::<false>(&CAPS),
                Err(PostError::ChecksumNotAvailable),
                "{wr:?}"
            );
        }
        // The transport before it.
        let d = SendWr::send_to(1, &four[..1], &dest).with_flags(SendFlags::IP_CSUM);
        assert_eq!(d.check_as::<false>(&CAPS), Err(PostError::WrongTransport));
        // On an Ethernet queue the operation and the frame come first: too many entries of a
        // good frame (16 bytes) are too many; a short frame of too many entries is short.
        assert_eq!(
            eth_check(&SendWr::send(1, &four), &ETH),
            Err(PostError::TooManySges { got: 4, max: 3 })
        );
        let short = [Sge::new(0x10, 2, 1); 4];
        assert_eq!(
            eth_check(&SendWr::send(1, &short), &ETH),
            Err(PostError::FrameTooShort { len: 8, min: 14 })
        );
        assert_eq!(
            eth_check(&SendWr::read(1, &short, RemoteBuf::new(0, 1)), &ETH),
            Err(PostError::WrongTransport)
        );
    }
}
