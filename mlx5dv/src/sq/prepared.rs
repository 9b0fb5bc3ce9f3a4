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
//! 2 GiB), the queue pair open (the gate, as for every post: in the error state or RESET a
//! post is refused with nothing written), room in the ring and in the CQ, and that the
//! prepared request belongs to this queue (its QPN). A zero-length post writes what the
//! generic path writes for a zero-length entry: no data segment, one segment less in `ds`.
//!
//! The common case builds the WQE in registers from the prepared segments and words (on x86_64
//! a segment of one changing and one prepared word in one SSE2 register: `segreg.rs`), stores
//! them to the ring and the same registers to the BlueFlame buffer (the whole 64-byte block,
//! zeros past the WQE, which the device does not read), behind one compare per check (whether
//! the queue has BlueFlame is told by which of two keys the request's matches); a
//! request a compare turns away (a zero length, a full ring, a gate that changed, requests
//! staged before it, ...) goes out of line to the exact checks and the field-wise writer. The
//! WQE bytes are those the generic path writes for the same request (a property test below
//! compares them, and the emulator's differential check compares them and the BlueFlame copy
//! with libmlx5's).

use zverbs_core::{MAX_MESSAGE, PostError, SendOp, SendWr};

use super::{Connected, Room, SendQueue, put};
use crate::doorbell::{Back, Regs};
use crate::prm::wqe::words;
use crate::segreg::{BlockRegs, SegReg, SegWords};
use crate::state::SqStateRef;

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
    /// The WQE's segments as prm encodes them ([`words`]: 64-bit words holding the bytes in
    /// memory order), with the fields a post sets 0, for it to or in (see
    /// [`Prepared::block`]): the control segment with WQE index 0 and immediate 0
    /// (`opcode`, `qpn_ds`, `fm_ce_se`), with a data segment and without one (a zero-length
    /// post: one unit less); the remote-address segment with address 0 (`rkey`); the data
    /// segment with length and address 0 (`lkey`).
    ctrl: SegWords,
    ctrl_empty: SegWords,
    raddr: SegWords,
    data: words::Seg,
    /// The immediate's place in the control segment's second word ([`words::ctrl_imm`]),
    /// all ones for the operations with an immediate, else 0 (their `imm` is then 0, as the
    /// generic path writes it).
    imm_mask64: u64,
    /// The QPN in the high half, for the one compare of the post's fast path (see
    /// `SendQueue::prep_key`).
    key: u64,
    /// `signaled` as the count it adds to the queue's signaled requests.
    sig16: u16,
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

    /// The WQE of a post at producer counter `pi` with `c` (a length of at least 1): the
    /// control segment, the remote-address segment (`REMOTE`), the data segment. Each
    /// changing field is encoded alone by prm's encoder of its segment and or-ed into the
    /// prepared segment.
    #[inline(always)]
    fn block(&self, pi: u32, c: Changes) -> BlockRegs {
        let raddr = REMOTE.then(|| SegReg::or(&self.raddr, words::raddr(c.remote_addr, 0)[0], 0));
        let [len, addr] = words::data(c.len, 0, c.addr);
        let idx = words::ctrl_index(pi as u16)[0];
        let imm = words::ctrl_imm(c.imm)[1] & self.imm_mask64;
        let ctrl = SegReg::or(&self.ctrl, idx, imm);
        BlockRegs {
            ctrl,
            raddr,
            data: [self.data[0] | len, addr],
        }
    }

    /// The segments of a post at producer counter `pi` with `c` as [`Prepared::block`]
    /// builds them, as values: the control segment (with a data segment or without), the
    /// remote-address segment, the data segment.
    #[inline(always)]
    fn segs(&self, pi: u32, c: Changes) -> [words::Seg; 3] {
        let ctrl = if c.len != 0 {
            self.ctrl
        } else {
            self.ctrl_empty
        };
        let imm = [0, words::ctrl_imm(c.imm)[1] & self.imm_mask64];
        [
            words::or(words::or(ctrl.0, words::ctrl_index(pi as u16)), imm),
            words::or(self.raddr.0, words::raddr(c.remote_addr, 0)),
            words::or(self.data, words::data(c.len, 0, c.addr)),
        ]
    }
}

impl<P: SqStateRef> SendQueue<P, Connected> {
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
        // ctrl, raddr (RDMA), data: one basic block; see `Prepared::block` for how a post
        // completes the segments.
        let ds = if REMOTE { 3 } else { 2 };
        let ctrl = |ds: u8| {
            SegWords(words::ctrl(
                0,
                plan.opcode,
                0,
                self.qpn,
                plan.fm_ce_se,
                ds,
                0,
            ))
        };
        let imm_mask: u32 = if template.op.imm().is_some() { !0 } else { 0 };
        Ok(Prepared {
            qpn: self.qpn,
            opcode: plan.opcode,
            signaled: plan.signaled,
            ctrl: ctrl(ds),
            ctrl_empty: ctrl(ds - 1),
            raddr: SegWords(words::raddr(0, rkey)),
            data: words::data(0, sge.lkey, 0),
            imm_mask64: words::ctrl_imm(imm_mask)[1],
            key: u64::from(self.qpn) << 32,
            sig16: u16::from(plan.signaled),
        })
    }

    /// Posts a prepared request with what changes, `c`, and rings: the WQE and the doorbell of
    /// [`PostSend::post`](zverbs_core::PostSend::post) for the same request, with only the changing fields converted.
    ///
    /// The common case (a length of 1 byte to 2 GiB, the queue open and with room, nothing
    /// staged) builds the WQE's words in registers and stores them to the ring and to the
    /// BlueFlame register; everything else (refusals included) goes out of line.
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
    /// request prepared for another queue; [`PostError::NotReady`] when the queue pair is in
    /// the error state or RESET; [`PostError::QueueFull`] or [`PostError::CqFull`] when it
    /// does not fit now. Then nothing was written.
    #[inline(always)]
    pub unsafe fn post_prepared<const REMOTE: bool>(
        &mut self,
        p: &Prepared<REMOTE>,
        c: Changes,
    ) -> Result<(), PostError> {
        // One compare each, every one conservative (the slow path decides exactly): a
        // length in 1..=2^31 (a zero-length WQE has one segment less); the gate as this
        // queue last passed it, and the request's QPN, in one word (`prep_key`); the credit
        // (a free block, a free CQE whether the request is signaled or not, nothing staged).
        // (A length of exactly 2 GiB takes the slow path: `len as i32 > 0` is one test.)
        const _: () = assert!(MAX_MESSAGE == 1 << 31);
        // The key passes one of the two compares only on a queue of that kind: `prep_key`
        // with BlueFlame, `prep_key_db` without (the other is `u64::MAX`, which no key is).
        let key = u64::from(self.state.gate().peek()) | p.key;
        if (c.len as i32) > 0 {
            // SAFETY: (caller) the posting contract; a length of at least one byte, and the
            // key that passed says the doorbell's kind: `prep_key` a queue with BlueFlame,
            // `prep_key_db` one without.
            unsafe {
                if key == self.prep_key {
                    return self.post_prepared_fast::<REMOTE, true>(p, c);
                }
                if key == self.prep_key_db {
                    return self.post_prepared_fast::<REMOTE, false>(p, c);
                }
            }
        }
        self.held = c;
        // SAFETY: (caller) the posting contract.
        unsafe { self.post_prepared_slow(p) }
    }

    /// The rest of [`SendQueue::post_prepared`]'s common case, after the length and the key:
    /// the credit, then the block, on a queue with BlueFlame (`BF`) or without.
    ///
    /// # Safety
    ///
    /// As [`SendQueue::post_prepared`]; `c.len >= 1`, the gate and the request's QPN passed,
    /// and `BF` says whether the doorbell has BlueFlame.
    #[inline(always)]
    unsafe fn post_prepared_fast<const REMOTE: bool, const BF: bool>(
        &mut self,
        p: &Prepared<REMOTE>,
        c: Changes,
    ) -> Result<(), PostError> {
        // Taken down before the compare: the slow path sets a short credit again.
        let (credit, short) = self.credit.overflowing_sub(1);
        self.credit = credit;
        // SAFETY: (caller) the posting contract. Past the short credit: a length of at least
        // one byte, room checked (the credit), nothing staged, `BF` as the doorbell is; the key
        // passed: the register is the queue's own.
        unsafe {
            if short {
                self.held = c;
                return self.post_prepared_slow(p);
            }
            self.write_block_and_ring::<REMOTE, true, BF>(p, c);
        }
        Ok(())
    }

    /// Writes a prepared request with a length of at least one byte as the words of its
    /// block, stored to the ring and to the BlueFlame register, records it and rings it alone.
    ///
    /// # Safety
    ///
    /// `c.len >= 1`, [`SendQueue::check_prepared`] passed, nothing is staged, with `FIXED`
    /// the register is the queue's own and `BF` says whether it has BlueFlame, and the caller
    /// upholds the posting contract.
    #[inline(always)]
    unsafe fn write_block_and_ring<const REMOTE: bool, const FIXED: bool, const BF: bool>(
        &mut self,
        p: &Prepared<REMOTE>,
        c: Changes,
    ) {
        // Counted first, so that the count is not held in a register while the slot is
        // recorded (which then adds 0).
        self.sig_posted = self.sig_posted.wrapping_add(p.sig16);
        let pi = self.pi;
        // The block first, so that the WQE index's temporary is gone (into the control
        // segment's register) before the ring index and the next counter are taken from `pi`.
        let block = p.block(pi, c);
        // The block's first word in the ring, masked once: the ring's address is read only
        // after the slot is recorded (so that it is not held in a register across the slot's
        // stores); the ring is then addressed with this index, not masked again (the slot
        // store cannot be proved not to alias `self`, so the mask would be read again). The
        // slot is addressed from it too (16 bytes a block: the word index times 2).
        let word = self.ring.word_of_block(pi);
        let next = pi.wrapping_add(1);
        // SAFETY: (caller) block `pi` is free (room was checked) and not yet published; with
        // `FIXED`, `BF` as the doorbell is, its register the queue's own.
        unsafe {
            let wqe =
                self.take::<false, true>(Room::checked(), 1, c.wr_id, p.opcode, p.signaled, 0);
            // `word` is block `pi`'s first word in the ring.
            wqe.block_regs_at(word, &block);
            self.doorbell
                .ring(next, Regs::<FIXED, BF>::new(&block), true);
        }
    }

    /// [`SendQueue::post_prepared`] when a fast check failed: the exact checks, then the
    /// field-wise writer (a zero-length request too) and the doorbell.
    ///
    /// # Safety
    ///
    /// As [`SendQueue::post_prepared`].
    #[cold]
    #[inline(never)]
    unsafe fn post_prepared_slow<const REMOTE: bool>(
        &mut self,
        p: &Prepared<REMOTE>,
    ) -> Result<(), PostError> {
        // The changes were left in `held` by the fast path: a `Changes` by value or by
        // reference would be in memory on the fast path too, and as scalars they are more
        // arguments than registers, so that the call could not be a jump.
        let c = self.held;
        let len = c.len;
        // No credit until the checks pass (the fast path may have taken it below zero).
        self.credit = 0;
        self.check_prepared(p, c)?;
        // The gate passed (open, of this incarnation) and the request is this queue's: the
        // next posts of it take the fast path, unless the register is shared (whose lock is
        // taken here).
        let key = u64::from(self.gate) | p.key;
        let bf = self.doorbell.has_blueflame();
        let lock = self.doorbell.lock();
        match (lock, bf) {
            (Some(_), _) => {}
            (None, true) => self.prep_key = key,
            (None, false) => self.prep_key_db = key,
        }
        if self.pending != 0 {
            self.ring_pending();
        }
        // SAFETY: checked, nothing staged; the caller upholds the posting contract. A length
        // of at least one byte goes as a block, with the doorbell's own key.
        unsafe {
            if len != 0 {
                self.write_block_and_ring::<REMOTE, false, false>(p, c)
            } else {
                let start = self.write_prepared(p, c);
                let wqe = Back::new(&self.ring, start, 1);
                self.doorbell.ring(self.pi, wqe, true);
            }
        }
        self.reload_credit();
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
        let pi = self.pi;
        let start = pi.wrapping_mul(crate::prm::SEGS_PER_BB as u32);
        let [ctrl, raddr, data] = p.segs(pi, c);
        // SAFETY: block `pi` is free (room was checked: caller) and not yet published.
        let room = unsafe { Room::checked() };
        let sig = u16::from(p.signaled);
        let wqe = self.take::<false, true>(room, 1, c.wr_id, p.opcode, p.signaled, sig);
        put(&wqe, 0, ctrl);
        let mut k = 1;
        if REMOTE {
            put(&wqe, k, raddr);
            k += 1;
        }
        if c.len != 0 {
            put(&wqe, k, data);
        }
        start
    }
}

#[cfg(test)]
mod tests;
