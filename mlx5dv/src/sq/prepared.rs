//! Prepared requests: what does not change between posts, built once in device byte order.
//!
//! A [`Prepared`] request is a 1-SGE WRITE, WRITE with immediate or READ
//! ([`PreparedRdma`]), or SEND or SEND with immediate ([`PreparedSend`]), checked once against
//! the queue by [`SendQueue::prepare_rdma`] / [`SendQueue::prepare_send`] (the core's
//! [`SendWr::check`](zverbs_core::SendWr::check), as every post) and reduced to the bytes that stay the same from post to
//! post: the opcode, the control segment's `qpn_ds` and `fm_ce_se` (fence, signaled,
//! solicited), the remote key and the local key, already big-endian. A post
//! ([`SendQueue::post_prepared`]) then writes those bytes as they are and converts only what
//! changes ([`Changes`]: local address and length, remote address, immediate, `wr_id`).
//!
//! The checks that depend on what changes stay on every post: the message length (at most
//! 2 GiB), room in the ring and in the CQ, and that the prepared request belongs to this queue
//! (its QPN). A zero-length post writes what the generic path writes for a zero-length entry:
//! no data segment, one segment less in `ds`. The WQE bytes are those the generic path writes
//! for the same request (a property test below compares them).

use zverbs_core::{MAX_MESSAGE, PostError, SendOp, SendWr};

use super::{SendQueue, SqTransport};
use crate::bf::BfRegister;
use crate::prm::wqe::{ctrl, data, raddr};
use crate::state::{SlotData, SqStateRef};

/// A prepared request; `REMOTE` says whether its WQE has a remote-address segment (WRITE,
/// WRITE with immediate, READ: [`PreparedRdma`]) or not (SEND, SEND with immediate:
/// [`PreparedSend`]). Built by [`SendQueue::prepare_rdma`] or [`SendQueue::prepare_send`] for
/// one queue, posted on that queue only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prepared<const REMOTE: bool> {
    /// The QP number of the queue it was prepared for.
    qpn: u32,
    /// The mlx5 opcode.
    opcode: u8,
    /// Whether the request asks for a CQE.
    signaled: bool,
    /// All ones for the operations with an immediate, else 0 (the control segment's `imm`
    /// is then 0, as the generic path writes it).
    imm_mask: u32,
    /// Bytes 4..12 of the control segment (`qpn_ds`, `signature`, `dci_stream_channel_id`,
    /// `fm_ce_se`) with a data segment, and without one (a zero-length post).
    ctrl_mid: [u8; 8],
    ctrl_mid_empty: [u8; 8],
    /// Bytes 8..16 of the remote-address segment (`rkey`, `reserved`).
    raddr_tail: [u8; 8],
    /// The data segment's `lkey`.
    lkey: [u8; 4],
}

/// A prepared WRITE, WRITE with immediate or READ.
pub type PreparedRdma = Prepared<true>;
/// A prepared SEND or SEND with immediate.
pub type PreparedSend = Prepared<false>;

/// What a post of a [`Prepared`] request gives: everything that may change from one post to
/// the next.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// Returned unchanged in the request's completion.
    pub wr_id: u64,
    /// The local buffer's address.
    pub addr: u64,
    /// The local buffer's length in bytes (at most 2 GiB; 0: no data).
    pub len: u32,
    /// The remote address (WRITE, READ; ignored by a [`PreparedSend`]).
    pub remote_addr: u64,
    /// The immediate value (the operations with one; ignored by the others).
    pub imm: u32,
}

impl<const REMOTE: bool> Prepared<REMOTE> {
    /// The mlx5 opcode of the prepared WQE.
    #[inline]
    pub fn opcode(&self) -> u8 {
        self.opcode
    }

    /// Whether posts of it ask for a completion.
    #[inline]
    pub fn signaled(&self) -> bool {
        self.signaled
    }

    /// The QP number of the queue it was prepared for.
    #[inline]
    pub fn qpn(&self) -> u32 {
        self.qpn
    }
}

impl<P: SqStateRef, R: BfRegister, T: SqTransport> SendQueue<P, R, T> {
    /// Prepares `template`, a 1-SGE WRITE, WRITE with immediate or READ, for posting with
    /// [`SendQueue::post_prepared`]: checks it as a post would and keeps its opcode, flags,
    /// remote key and local key. Its `wr_id`, addresses, length and immediate are ignored
    /// (each post gives its own).
    ///
    /// # Errors
    ///
    /// What posting `template` would return for the request itself (the core's check against
    /// this queue: transport, flags, entries); [`PostError::Unsupported`] for another
    /// operation, an inline request, or a number of entries other than one.
    pub fn prepare_rdma(&self, template: &SendWr<'_>) -> Result<PreparedRdma, PostError> {
        let rkey = match &template.op {
            SendOp::Write { remote, .. }
            | SendOp::WriteImm { remote, .. }
            | SendOp::Read { remote, .. } => remote.rkey,
            _ => return Err(PostError::Unsupported),
        };
        self.prepare(template, rkey)
    }

    /// Prepares `template`, a 1-SGE SEND or SEND with immediate, as
    /// [`SendQueue::prepare_rdma`] does.
    ///
    /// # Errors
    ///
    /// As [`SendQueue::prepare_rdma`].
    pub fn prepare_send(&self, template: &SendWr<'_>) -> Result<PreparedSend, PostError> {
        match &template.op {
            SendOp::Send { .. } | SendOp::SendImm { .. } => self.prepare(template, 0),
            _ => Err(PostError::Unsupported),
        }
    }

    /// The common part of the two `prepare_*`: the check, then the bytes.
    fn prepare<const REMOTE: bool>(
        &self,
        template: &SendWr<'_>,
        rkey: u32,
    ) -> Result<Prepared<REMOTE>, PostError> {
        let plan = self.plan(template)?;
        let [sge] = template.op.sgl() else {
            return Err(PostError::Unsupported);
        };
        if plan.inline.is_some() {
            return Err(PostError::Unsupported);
        }
        // ctrl, raddr (RDMA), data: one basic block.
        let ds = if REMOTE { 3 } else { 2 };
        let mid = |ds: u32| {
            let mut b = [0u8; 8];
            b[..4].copy_from_slice(&((self.qpn << 8) | ds).to_be_bytes());
            b[4..].copy_from_slice(&u32::from(plan.fm_ce_se).to_be_bytes());
            b
        };
        let mut raddr_tail = [0u8; 8];
        raddr_tail[..4].copy_from_slice(&rkey.to_be_bytes());
        Ok(Prepared {
            qpn: self.qpn,
            opcode: plan.opcode,
            signaled: plan.signaled,
            imm_mask: if template.op.imm().is_some() { !0 } else { 0 },
            ctrl_mid: mid(ds),
            ctrl_mid_empty: mid(ds - 1),
            raddr_tail,
            lkey: sge.lkey.to_be_bytes(),
        })
    }

    /// Posts a prepared request with what changes, `c`, and rings: the WQE and the doorbell of
    /// [`PostSend::post`](zverbs_core::PostSend::post) for the same request, with only the changing fields converted.
    ///
    /// # Safety
    ///
    /// The posting contract of [`PostSend`](zverbs_core::PostSend) for the request (the local buffer
    /// `c.addr..c.addr + c.len` is registered under the prepared key and stays valid until
    /// the request completes, and so on).
    ///
    /// # Errors
    ///
    /// [`PostError::MessageTooLong`] for a length over 2 GiB; [`PostError::Unsupported`] for a
    /// request prepared for another queue; [`PostError::QueueFull`] or [`PostError::CqFull`]
    /// when it does not fit now. Then nothing was written.
    #[inline(always)]
    pub unsafe fn post_prepared<const REMOTE: bool>(
        &mut self,
        p: &Prepared<REMOTE>,
        c: Changes,
    ) -> Result<(), PostError> {
        self.check_prepared(p, c)?;
        if self.pending != 0 {
            self.ring_pending();
        }
        // SAFETY: checked; the caller upholds the posting contract.
        let start = unsafe { self.write_prepared(p, c) };
        self.doorbell.ring(self.ring, self.pi, start, 1, true);
        Ok(())
    }

    /// Writes a prepared request without ringing, as [`PostSend::stage`](zverbs_core::PostSend::stage) does; the doorbell
    /// is [`PostSend::ring`](zverbs_core::PostSend::ring).
    ///
    /// # Safety
    ///
    /// As [`SendQueue::post_prepared`].
    ///
    /// # Errors
    ///
    /// As [`SendQueue::post_prepared`].
    #[inline(always)]
    pub unsafe fn stage_prepared<const REMOTE: bool>(
        &mut self,
        p: &Prepared<REMOTE>,
        c: Changes,
    ) -> Result<(), PostError> {
        self.check_prepared(p, c)?;
        // SAFETY: checked; the caller upholds the posting contract.
        let start = unsafe { self.write_prepared(p, c) };
        self.note_pending(start, 1);
        Ok(())
    }

    /// The per-post checks of a prepared request. Writes nothing.
    #[inline(always)]
    fn check_prepared<const REMOTE: bool>(
        &mut self,
        p: &Prepared<REMOTE>,
        c: Changes,
    ) -> Result<(), PostError> {
        if u64::from(c.len) > MAX_MESSAGE {
            return Err(PostError::MessageTooLong);
        }
        if p.qpn != self.qpn {
            return Err(PostError::Unsupported);
        }
        self.check_room(1, u32::from(p.signaled))
    }

    /// Writes the prepared WQE (one basic block) at the producer counter, records it and
    /// advances the counters. Returns the segment counter of its control segment.
    ///
    /// # Safety
    ///
    /// [`SendQueue::check_prepared`] passed; the caller upholds the posting contract.
    #[inline(always)]
    unsafe fn write_prepared<const REMOTE: bool>(
        &mut self,
        p: &Prepared<REMOTE>,
        c: Changes,
    ) -> u32 {
        // Locals, not fields, as in `SendQueue::write`.
        let (ring, pi) = (&{ self.ring }, self.pi);
        let slots = self.state.slots();
        let start = pi.wrapping_mul(crate::prm::SEGS_PER_BB as u32);
        let has_data = c.len != 0;
        let mid = if has_data {
            p.ctrl_mid
        } else {
            p.ctrl_mid_empty
        };
        // `opmod_idx_opcode`: opmod 0, the WQE index (16 bits), the opcode.
        let idx_opcode = (u32::from(pi as u16) << 8) | u32::from(p.opcode);
        // SAFETY: this and every write below are to segments `0..3` of the WQE at `start` (a
        // block boundary), in block `pi`, which is free (room was checked) and not yet
        // published.
        unsafe {
            ring.with_mut_wqe(start, 0, |b| {
                b[ctrl::OPMOD_IDX_OPCODE].copy_from_slice(&idx_opcode.to_be_bytes());
                b[ctrl::QPN_DS.start..ctrl::IMM.start].copy_from_slice(&mid);
                b[ctrl::IMM].copy_from_slice(&(c.imm & p.imm_mask).to_be_bytes());
            });
        }
        let mut k = 1;
        if REMOTE {
            // SAFETY: as above.
            unsafe {
                ring.with_mut_wqe(start, k, |b| {
                    b[raddr::RADDR].copy_from_slice(&c.remote_addr.to_be_bytes());
                    b[raddr::RKEY.start..].copy_from_slice(&p.raddr_tail);
                });
            }
            k += 1;
        }
        if has_data {
            // SAFETY: as above.
            unsafe {
                ring.with_mut_wqe(start, k, |b| {
                    b[data::BYTE_COUNT].copy_from_slice(&c.len.to_be_bytes());
                    b[data::LKEY].copy_from_slice(&p.lkey);
                    b[data::ADDR].copy_from_slice(&c.addr.to_be_bytes());
                });
            }
        }
        let next = pi.wrapping_add(1);
        let slot = ring.block_of(start) as usize;
        debug_assert!(slot < slots.len());
        // SAFETY: in bounds (one slot per block, checked by `new`); the slot is free (room
        // was checked) and the WQE is not published yet.
        unsafe {
            slots.get_unchecked(slot).record(SlotData {
                wr_id: c.wr_id,
                next,
                opcode: p.opcode,
                signaled: p.signaled,
            })
        };
        self.sig_posted = self.sig_posted.wrapping_add(u16::from(p.signaled));
        self.pi = next;
        start
    }
}

#[cfg(test)]
mod tests;
