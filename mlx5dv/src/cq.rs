//! The completion queue: lock-free owner-bit polling.
//!
//! A CQE at consumer counter `ci` belongs to software when its opcode is not `INVALID` and its
//! owner bit equals the parity of the pass over the ring (`(ci >> log2(cqe_cnt)) & 1`). The
//! poller reads `op_own` alone first, then issues the
//! [`from_device`](zverbs_core::barrier::from_device) barrier, and only then reads the rest of
//! the CQE, so nothing stale from before the device's write is used. After a poll that
//! consumed CQEs the consumer counter goes to the doorbell record
//! (`dbrec[MLX5_CQ_SET_CI] = be32(ci & 0xffffff)`) with `Release`, after the reads of the CQEs
//! it frees, so the device never overwrites an entry still being read.
//!
//! A requester CQE names the first basic block of the WQE it completes (`wqe_counter`); that
//! WQE and every unsignaled WQE before it are retired and their credits handed back to the
//! send queue. Receives complete in order. Error CQEs are decoded on a cold path. A poll that
//! starts at a requester CQE runs the loop of those; one that starts at a receive, the loop of
//! receives of the QP that matched last (its receive state and the ring at hand for the
//! run); the first CQE of another kind ends either, the rest of the poll decoding everything.
//!
//! Receives whose data the device scattered into the CQE (scatter-to-CQE, `scatter.rs`): the
//! data is copied into the receive's buffers before it is reported. A poll that starts at one
//! runs a loop of its own, which decodes a run of them inline when each receive's first
//! buffer holds its message (a few fixed-size moves); the other cases (a message over
//! several buffers or longer than them, a format no CQE has room for, a scattered receive
//! after another kind of CQE in the same poll) are decoded out of line, with the exact copy.
//! A CQ created with CQE compression is polled the same way: compressed sessions are expanded
//! out of line (`mini`), into the completions the device would have written one by one. The
//! send side of its QPs must have been created without scatter-to-CQE (READ and atomic
//! responses in the CQE), and its shared receive queues' QPs without it: a CQE in those
//! formats is reported as a [`WcStatus::GeneralErr`] completion whose `vendor_err` is
//! `0x100 | op_own`, and its WQE is retired, so no completion is lost.

use core::ptr::NonNull;

mod scatter;

use zverbs_core::handover::Handover;
use zverbs_core::ring::Ring;
use zverbs_core::sync::order;
use zverbs_core::{
    BriefCompletion, Completion, PollCq, PollCqTimed, TimedCompletion, WcFlags, WcOpcode, WcStatus,
    barrier,
};

use crate::devmem::{CqeRing, DbrecWord, OwnedCqe, Reported};
use crate::layout::{CqLayout, LayoutError};
use crate::prm::cqe::{
    Cqe64, FLAGS_RQPN_GRH, FLAGS_RQPN_SL_SHIFT, FLAGS_RQPN_SRC_QP, INLINE_SCATTER_32,
    INLINE_SCATTER_64, ML_PATH_DLID_PATH_BITS, OPCODE_SHIFT, OWNER_MASK, Syndrome, op,
};
use crate::prm::{CQ_SET_CI, opcode};
use crate::state::{
    Bindings, CqBinding, Polled, RqState, RqStateRef, SqState, SqStateRef, SrqState, SrqStateRef,
};

mod mini;

/// The send queue state a binding of `B` reaches.
type SqOf<B> = SqState<<<B as Bindings>::Sq as SqStateRef>::Slots>;
/// The receive queue state a binding of `B` reaches.
type RqOf<B> = RqState<<<B as Bindings>::Rq as RqStateRef>::Slots>;
/// The shared receive queue state a binding of `B` reaches.
type SrqOf<B> = SrqState<<<B as Bindings>::Srq as SrqStateRef>::Slots>;

/// What the poller keeps of the binding that matched last (CQEs of one QP come in runs): its
/// QPN and where its states are.
///
/// The pointers come from the binding's handles, which are
/// [`StableDeref`](stable_deref_trait::StableDeref): their targets do not move while the
/// handles live, even when the handles move, and the handles live in the poller's bindings,
/// which it owns and never changes. So they stay valid as long as the poller.
struct Hit<S, R, Q> {
    qpn: u32,
    sq: Option<NonNull<S>>,
    rq: Option<NonNull<R>>,
    srq: Option<NonNull<Q>>,
}

impl<S, R, Q> Clone for Hit<S, R, Q> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<S, R, Q> Copy for Hit<S, R, Q> {}

impl<S, R, Q> core::fmt::Debug for Hit<S, R, Q> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Hit")
            .field("qpn", &self.qpn)
            .field("sq", &self.sq)
            .field("rq", &self.rq)
            .field("srq", &self.srq)
            .finish()
    }
}

impl<S, R, Q> Hit<S, R, Q> {
    /// Before any CQE matched a binding (`u32::MAX` is never a 24-bit QPN).
    const UNBOUND: Self = Self {
        qpn: u32::MAX,
        sq: None,
        rq: None,
        srq: None,
    };

    /// The states, borrowed for as long as `bindings`, the bindings of the poller whose hit
    /// this is: send, receive, shared receive.
    #[inline(always)]
    #[allow(clippy::type_complexity)]
    fn states<B: ?Sized>(
        self,
        bindings: &B,
    ) -> (
        Option<Polled<'_, S>>,
        Option<Polled<'_, R>>,
        Option<Polled<'_, Q>>,
    ) {
        let _ = bindings;
        // SAFETY: the one argument for every hit: a `Hit` is made only by `find_binding`, from
        // the poller's bindings (or is `UNBOUND`), and the poller forgets it whenever its
        // bindings change (`swap_bindings`, `adopt`); the targets of the bindings' handles are
        // `StableDeref`: they live, unmoved, as long as the bindings, which `bindings` borrows.
        // The caller is the CQ's one poller (`CompletionQueue::new`), which serves the
        // bindings' queues, and hands each state only the completions of the hit's QP (it
        // finds the hit by the QPN the CQE names).
        unsafe {
            (
                self.sq.map(|p| Polled::new(p.as_ref())),
                self.rq.map(|p| Polled::new(p.as_ref())),
                self.srq.map(|p| Polled::new(p.as_ref())),
            )
        }
    }

    /// The send queue state ([`Hit::states`]).
    #[inline(always)]
    fn sq<'s, B: ?Sized>(self, bindings: &'s B) -> Option<Polled<'s, S>>
    where
        R: 's,
        Q: 's,
    {
        self.states(bindings).0
    }

    /// The receive queue state ([`Hit::states`]).
    #[inline(always)]
    fn rq<'s, B: ?Sized>(self, bindings: &'s B) -> Option<Polled<'s, R>>
    where
        S: 's,
        Q: 's,
    {
        self.states(bindings).1
    }
}

/// `vendor_err` bit marking a CQE format the poller does not decode (compressed, or data
/// scattered into a send CQE or an SRQ receive's, or where no CQE has room for it).
pub const VENDOR_ERR_UNSUPPORTED_FORMAT: u32 = 0x100;

/// A completion queue of an mlx5 device, polled directly, for the queues in its bindings `B`
/// (`&[CqBinding<_, _>]` or an owning pointer to them: see [`Bindings`]).
#[derive(Debug)]
pub struct CompletionQueue<B: Bindings> {
    cqes: CqeRing,
    ring: Ring,
    /// The ring's size: the bit of the consumer counter above the slot bits, whose value is the
    /// pass parity (kept rather than computed from `ring`, so that the inlined empty poll
    /// tests it against the counter straight from memory).
    pass_bit: u32,
    /// Consumer counter (free-running; the device sees its low 24 bits).
    ci: u32,
    dbrec: DbrecWord,
    bindings: B,
    /// The binding that matched last; [`Hit::UNBOUND`] until the first match.
    last: Hit<SqOf<B>, RqOf<B>, SrqOf<B>>,
    cqn: u32,
    /// The CQ was created with completion timestamps: [`PollCqTimed::poll_timed`] reads them
    /// (`poll` never looks).
    timestamps: bool,
    /// Where the control path hands over new bindings (queue pairs joining or leaving), if
    /// anywhere ([`CompletionQueue::set_handover`]).
    joins: Option<NonNull<Handover<B>>>,
    /// The compressed session a poll ended inside, if any.
    session: mini::Session,
    /// The user index of the striding receive queue sharing the CQ, or `u32::MAX` (never a
    /// 24-bit index) when none does.
    striding_uidx: u32,
}

// SAFETY: the poller owns the consumer side of the CQE ring and its bindings (`B: Send`); it
// reaches the states through them (the cached `Hit` points at the same states), and a state
// it shares with a queue on another thread must be `Sync`.
unsafe impl<B> Send for CompletionQueue<B>
where
    B: Bindings + Send,
    SqOf<B>: Sync,
    RqOf<B>: Sync,
    SrqOf<B>: Sync,
{
}

impl<B: Bindings> CompletionQueue<B> {
    /// Polls the CQ that `layout` describes, for the queues in `bindings`.
    ///
    /// # Safety
    ///
    /// - `layout` is what `mlx5dv_init_obj` reported for a live CQ (or the software device's
    ///   equivalent); its ring and doorbell record stay valid while the poller lives;
    /// - nothing else polls this CQ (no `ibv_poll_cq`) while this value lives, and it is new:
    ///   its consumer counter is 0;
    /// - each binding names a QP whose completions go to this CQ, with the states its queues
    ///   were built with; no state is bound to two CQs;
    /// - if the CQ uses CQE compression, its CQEs are 64 bytes;
    /// - under `cfg(zverbs_loom)` the ring is an array of `LoomCqe` and the doorbell record a
    ///   loom atomic.
    ///
    /// # Errors
    ///
    /// A [`LayoutError`] for a CQE count that is not a power of two or a CQE size other than 64
    /// or 128.
    pub unsafe fn new(layout: &CqLayout, bindings: B) -> Result<Self, LayoutError> {
        let ring = Ring::new(layout.cqe_cnt).ok_or(LayoutError::NotPowerOfTwo {
            count: layout.cqe_cnt,
        })?;
        if layout.cqe_size != 64 && layout.cqe_size != 128 {
            return Err(LayoutError::BadStride {
                stride: layout.cqe_size,
            });
        }
        // SAFETY: (caller) the ring and the doorbell record are valid while the poller lives,
        // and only it consumes the ring and writes the record's consumer word.
        let (cqes, dbrec) = unsafe {
            (
                CqeRing::new(layout.buf, layout.cqe_size),
                DbrecWord::new(layout.dbrec, CQ_SET_CI),
            )
        };
        Ok(Self {
            cqes,
            ring,
            pass_bit: ring.size(),
            ci: 0,
            dbrec,
            bindings,
            last: Hit::UNBOUND,
            cqn: layout.cqn,
            timestamps: false,
            joins: None,
            session: mini::Session::NONE,
            striding_uidx: u32::MAX,
        })
    }

    /// Marks the CQ as created with completion timestamps
    /// (`IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`): [`PollCqTimed::poll_timed`] then reports each
    /// CQE's `timestamp`. Without it, `poll_timed` reports `None` (the field of a CQ created
    /// without timestamps means nothing). [`PollCq::poll`] is the same either way.
    pub fn set_timestamps(&mut self, on: bool) {
        self.timestamps = on;
    }

    /// Whether [`PollCqTimed::poll_timed`] reports timestamps.
    #[inline]
    pub fn has_timestamps(&self) -> bool {
        self.timestamps
    }

    /// Takes new bindings from `handover` from now on: when a CQE names a queue pair the
    /// bindings do not have (one created after the poller, whose table the control path
    /// published before the queue pair could post), and when [`CompletionQueue::adopt`] is
    /// called. The poll path itself pays nothing for it: the check is on the path of a CQE
    /// without a binding, which is out of line already.
    ///
    /// # Safety
    ///
    /// `handover` outlives the poller; this poller is its only one; every table published
    /// there obeys [`CompletionQueue::new`]'s contract for bindings.
    pub unsafe fn set_handover(&mut self, handover: NonNull<Handover<B>>) {
        self.joins = Some(handover);
    }

    /// Adopts the bindings waiting in the hand-over, if any (out of line). Returns whether
    /// there were.
    #[cold]
    #[inline(never)]
    pub fn adopt(&mut self) -> bool {
        let Some(h) = self.joins else {
            return false;
        };
        // SAFETY: (`set_handover`) the hand-over outlives the poller, this is its one poller,
        // and the tables published there obey the bindings' contract.
        unsafe {
            let h = h.as_ref();
            if !h.pending() {
                return false;
            }
            h.adopt(|t| {
                core::mem::swap(&mut self.bindings, t);
            })
        };
        self.last = Hit::UNBOUND;
        true
    }

    /// Whether the bindings have QP `qpn` now.
    pub fn serves(&self, qpn: u32) -> bool {
        self.bindings.iter().any(|b| b.qpn == qpn)
    }

    /// Whether bindings wait in the hand-over: one `Relaxed` load and a compare.
    #[inline(always)]
    pub fn bindings_pending(&self) -> bool {
        match self.joins {
            // SAFETY: (`set_handover`) the hand-over outlives the poller.
            Some(h) => unsafe { h.as_ref() }.pending(),
            None => false,
        }
    }

    /// The CQ number.
    #[inline]
    pub fn cqn(&self) -> u32 {
        self.cqn
    }

    /// Exchanges the poller's bindings with `other`: queue pairs created after the poller
    /// join it, destroyed ones leave it. The binding that matched last is forgotten (it
    /// pointed into the old bindings). A CQE of a queue pair that left is reported as one of
    /// a queue this CQ was not given (nothing retired).
    ///
    /// # Safety
    ///
    /// The bindings of `other` obey [`CompletionQueue::new`]'s contract.
    pub unsafe fn swap_bindings(&mut self, other: &mut B) {
        core::mem::swap(&mut self.bindings, other);
        self.last = Hit::UNBOUND;
    }

    /// The consumer counter.
    #[inline]
    pub fn consumer(&self) -> u32 {
        self.ci
    }

    /// Number of CQEs in the ring.
    #[inline]
    pub fn cqe_cnt(&self) -> u32 {
        self.ring.size()
    }

    /// The binding for `qpn`, trying the last match first.
    #[inline(always)]
    fn binding(&mut self, qpn: u32) -> Option<Hit<SqOf<B>, RqOf<B>, SrqOf<B>>> {
        if self.last.qpn == qpn {
            return Some(self.last);
        }
        let found = match find_binding(&self.bindings, qpn) {
            Some(f) => f,
            // A queue pair created after the bindings: its table was published before it
            // could post, so it waits in the hand-over now.
            None if self.adopt() => find_binding(&self.bindings, qpn)?,
            None => return None,
        };
        self.last = found;
        Some(found)
    }

    /// The fast path of the decoder, inlined into the poll loops: decodes the software-owned
    /// CQE in `slot` into `out` if it is what a poll loop sees all the time (a requester CQE
    /// with a send opcode the queue posts, or, when `RECEIVES`, a responder CQE, of the QP
    /// that matched last, in the plain format), reading only the fields that needs. Returns
    /// `false`, having changed nothing, for any other CQE: [`CompletionQueue::decode_slow`]
    /// decodes those (and the plain loop hands receives to the loops of receives).
    #[inline(always)]
    fn decode_fast<const RECEIVES: bool>(
        &mut self,
        cqe: OwnedCqe,
        op_own: u8,
        out: &mut Completion,
    ) -> bool {
        // Data scattered into the CQE: the loop of those decodes it (`poll_received`); without
        // `RECEIVES`, the same test takes anything but a requester CQE away.
        let not_fast = if RECEIVES {
            SCATTERED
        } else {
            OPCODE_MASK | SCATTERED
        };
        if op_own & not_fast != 0 {
            return false;
        }
        let (sop_drop_qpn, wqe_counter) = cqe.qpn_and_counter();
        let qpn = sop_drop_qpn & QPN_MASK;
        if qpn != self.last.qpn {
            return false;
        }
        let last = self.last;
        match op_own >> OPCODE_SHIFT {
            op::REQ if let Some(sq) = last.sq(&self.bindings) => {
                // Taken apart and put together again: the compiler then keeps the three in
                // registers (passed whole, the table entry costs three more instructions a
                // CQE).
                if let Some((opcode, flags, len)) = send_kind((sop_drop_qpn >> 24) as u8) {
                    let kind = (opcode, flags, len);
                    *out = requester(sq, kind, qpn, wqe_counter, cqe);
                    return true;
                }
            }
            cqe_op @ op::RESP_WR_IMM..=op::RESP_SEND_INV
                if RECEIVES && let Some(rq) = last.rq(&self.bindings) =>
            {
                responder(rq, cqe_op, qpn, cqe, out);
                return true;
            }
            _ => {}
        }
        false
    }

    /// The cold path of the decoder: every CQE the fast path leaves (the first of another QP,
    /// the formats the poller does not decode, error CQEs, unknown opcodes, CQEs of queues
    /// this CQ was not given), out of line. Nothing is dropped: each CQE becomes a
    /// completion, and retires what it completes; except a CQE of the striding receive queue
    /// sharing the CQ ([`CompletionQueue::set_striding_user_index`]), which is left for its
    /// packet poll: `false`, nothing written.
    #[cold]
    #[inline(never)]
    fn decode_slow(&mut self, cqe: OwnedCqe, op_own: u8, out: &mut Completion) -> bool {
        let (sop_drop_qpn, wqe_counter) = cqe.qpn_and_counter();
        let cqe_op = op_own >> OPCODE_SHIFT;
        let mut qpn = sop_drop_qpn & QPN_MASK;
        let mut hit = self.binding(qpn);
        if hit.is_none()
            && (cqe_op == op::RESP_ERR || (op::RESP_WR_IMM..=op::RESP_SEND_INV).contains(&cqe_op))
        {
            // An Ethernet receive CQE: bits 23..0 of `sop_drop_qpn` are the flow tag of the
            // rule that steered the frame, and the queue is named only by its user index
            // (CQE version 1), which a raw packet QP's or work queue's binding holds.
            let uidx = cqe.with(|b| Cqe64::new_unchecked(b).srqn());
            if let Some(h) = self.binding(uidx) {
                (qpn, hit) = (uidx, Some(h));
            } else {
                // The CQ's one receive queue, when it has one (`CqBinding::SOLE_RECEIVER`);
                // the completion keeps the CQE's QP number field (the flow tag).
                hit = self.binding(crate::state::SOLE_RECEIVER);
            }
        }
        let (sq, rq, srq) = match hit {
            Some(b) => b.states(&self.bindings),
            None => (None, None, None),
        };
        match (cqe_op, sq, rq) {
            (op::REQ, Some(sq), _) => {
                let kind = any_send_kind((sop_drop_qpn >> 24) as u8);
                *out = requester(sq, kind, qpn, wqe_counter, cqe);
                unsupported_format(out, op_own);
            }
            (op::RESP_WR_IMM..=op::RESP_SEND_INV, _, Some(rq)) => {
                // Data scattered into the CQE goes to the receive's buffers first, while its
                // WQE is still the poller's (before `responder` retires it).
                let copied = if op_own & SCATTERED != 0 {
                    // SAFETY: the CQE completes the oldest receive, not yet retired; the only
                    // poller.
                    unsafe { scattered_receive(rq, cqe, op_own) }
                } else {
                    Ok(())
                };
                responder(rq, cqe_op, qpn, cqe, out);
                if let Err(e) = copied {
                    out.status = e.status();
                    if e == scatter::ScatterError::Format {
                        out.vendor_err = VENDOR_ERR_UNSUPPORTED_FORMAT | u32::from(op_own);
                    }
                }
            }
            (op::RESP_WR_IMM..=op::RESP_SEND_INV, _, None) if let Some(srq) = srq => {
                let wr_id = srq.retire(wqe_counter);
                let f = cqe.with(receive_fields);
                *out = received(wr_id, cqe_op, qpn, f.0, f.1, f.2);
                receive_path(cqe, out);
                unsupported_format(out, op_own);
            }
            (op::REQ_ERR, Some(sq), _) => {
                // The QP is in the error state now: its queues refuse posts (before the
                // credits below, so a reader of the credits sees the gate closed too).
                sq.gate().close();
                if let Some(rq) = rq {
                    rq.gate().close();
                }
                // An error CQE completes the WQE it names.
                let done = sq.retire(wqe_counter);
                let (status, vendor_err) = cqe.with(error_of);
                *out = Completion {
                    wr_id: done.wr_id,
                    status,
                    vendor_err,
                    opcode: any_send_kind(done.opcode).0,
                    ..unknown(qpn, cqe_op)
                };
            }
            (op::RESP_ERR, _, rq) if rq.is_some() || srq.is_some() => {
                // As for a requester error: the QP is in the error state.
                if let Some(sq) = sq {
                    sq.gate().close();
                }
                if let Some(rq) = rq {
                    rq.gate().close();
                }
                let wr_id = match (rq, srq) {
                    // Receives complete in order, errors included.
                    (Some(rq), _) => rq.retire(&cqe),
                    // An error CQE names its WQE too, which is freed as libmlx5 frees it.
                    (None, Some(srq)) => srq.retire(wqe_counter),
                    (None, None) => 0,
                };
                let (status, vendor_err) = cqe.with(error_of);
                *out = Completion {
                    wr_id,
                    status,
                    vendor_err,
                    opcode: WcOpcode::Recv,
                    ..unknown(qpn, cqe_op)
                };
            }
            // The striding queue's: its packet poll takes it (`striding.rs`).
            _ if self.for_striding(cqe, op_own) => return false,
            // A CQE for a queue this CQ was not given, or an opcode the poller does not handle
            // (resize, signature error, unknown): reported, not dropped, and nothing retired.
            _ => *out = unknown(qpn, cqe_op),
        }
        true
    }

    /// The rest of a poll from `out[n]` on, when the CQE at the consumer counter is not for
    /// the fast path (out of line, so the inline loop keeps its registers: it makes no call it
    /// must come back from). Returns the completions of the whole poll.
    #[cold]
    #[inline(never)]
    fn poll_rest<O: PollOut>(&mut self, out: &mut [O], mut n: usize) -> usize {
        while let Some(o) = out.get_mut(n) {
            let Some((cqe, op_own)) = self.peek_owned() else {
                break;
            };
            if crate::prm::mini::is_title(op_own) {
                // SAFETY: as in `poll`.
                n = unsafe { self.expand(out, n, cqe.slot(), op_own) };
                continue;
            }
            if !o.fill(|wc| {
                self.decode_fast::<true>(cqe, op_own, wc) || self.decode_slow(cqe, op_own, wc)
            }) {
                // Left for the striding queue's poll.
                break;
            }
            o.stamp(self.timestamps, cqe);
            self.ci = self.ci.wrapping_add(1);
            n += 1;
        }
        if n > 0 {
            self.publish_ci();
        }
        n
    }

    /// The CQE at the consumer counter, if software owns it, as a token (after the owner check
    /// and the [`from_device`](barrier::from_device) barrier), with its `op_own`. Nothing is
    /// consumed: [`CompletionQueue::advance`] moves past it.
    #[inline(always)]
    pub(crate) fn peek_owned(&self) -> Option<(OwnedCqe, u8)> {
        let (slot, op_own) = owned(self.ring, self.pass_bit, self.cqes, self.ci)?;
        barrier::from_device();
        // SAFETY: the owner bit says the CQE is software's, the barrier orders the reads after
        // that check, and the consumer counter that would free the entry is published only
        // after them (by `publish_ci`, which every poll calls after its last use of a token).
        Some((unsafe { self.cqes.owned(slot) }, op_own))
    }

    /// Moves the consumer counter past the CQE at it (not published: `publish_ci`).
    #[inline(always)]
    pub(crate) fn advance(&mut self) {
        self.ci = self.ci.wrapping_add(1);
    }

    /// The entry `ahead` places after the consumer counter, inside the compressed session
    /// whose title is at (or before) the counter.
    ///
    /// # Safety
    ///
    /// A session is open: its title passed the owner check (followed by the
    /// [`from_device`](barrier::from_device) barrier) and its count, within the ring, covers
    /// the entry; the counter is published only after the token's last use.
    #[inline(always)]
    pub(crate) unsafe fn session_entry(&self, ahead: u32) -> OwnedCqe {
        // SAFETY: (caller) the session's entries are software's.
        unsafe { self.cqes.session() }.entry(self.ring.slot(self.ci.wrapping_add(ahead)))
    }

    /// Sets the user index (CQE version 1, `srqn_uidx`) of the striding receive queue whose
    /// completions share this CQ with other queues' ([`StridingRq`](crate::StridingRq)): a
    /// poll stops at its CQEs (a packet poll of that queue takes them) rather than reporting
    /// them as completions of a queue it was not given. `None` (the default): no such queue.
    /// Checked out of line, on the path of CQEs no binding takes. Such a CQ must be created
    /// without CQE compression: a compressed session of the striding queue met by this poll
    /// is not told apart (the check would cost every session's poll), and is reported as
    /// completions of an unknown queue.
    pub fn set_striding_user_index(&mut self, uidx: Option<u32>) {
        self.striding_uidx = uidx.map_or(u32::MAX, |u| u & crate::prm::cqe::SRQN_UIDX_MASK);
    }

    /// Whether the CQE `cqe` (software's, `op_own`) is the striding receive queue's this CQ
    /// shares ([`CompletionQueue::set_striding_user_index`]): a receive CQE or a receive
    /// error of its user index.
    #[inline(always)]
    fn for_striding(&self, cqe: OwnedCqe, op_own: u8) -> bool {
        if self.striding_uidx == u32::MAX {
            return false;
        }
        let cqe_op = op_own >> OPCODE_SHIFT;
        ((op::RESP_WR_IMM..=op::RESP_SEND_INV).contains(&cqe_op) || cqe_op == op::RESP_ERR)
            && cqe.with(|b| Cqe64::new_unchecked(b).srqn()) == self.striding_uidx
    }

    /// Publishes the consumer counter to the CQ doorbell record.
    #[inline(always)]
    pub(crate) fn publish_ci(&self) {
        // Release: the reads of the CQEs consumed before happen before the device may see
        // their slots free and overwrite them.
        self.dbrec
            .publish(self.ci & 0x00ff_ffff, order::CQ_CI_RELEASE);
    }
}

/// The `op_own` bits of data scattered into the CQE (`scatter.rs`; both set: a compressed
/// session's title).
const SCATTERED: u8 = INLINE_SCATTER_32 | INLINE_SCATTER_64;

/// The inline decoder of [`CompletionQueue::poll_received`] for receives in the plain
/// format: a responder CQE (`RESP_WR_IMM` .. `RESP_SEND_INV`, no format bit) of QP `qpn`,
/// whose receive state is `rq`, is decoded into `out` as [`CompletionQueue::decode_slow`]
/// reports it, and its receive retired. Returns `false`, having changed nothing, for anything
/// else: `decode_slow` takes those.
#[inline(always)]
fn decode_received<S>(
    rq: Polled<'_, RqState<S>>,
    qpn: u32,
    cqe: OwnedCqe,
    op_own: u8,
    out: &mut Completion,
) -> bool
where
    S: stable_deref_trait::StableDeref<Target = [crate::RqSlot]>,
{
    // One test for the opcode and the format bits: `op_own - 0x10` has none of the bits of
    // 0xcc set exactly when the opcode is 1 ..= 4 and neither format bit is.
    if op_own.wrapping_sub(op::RESP_WR_IMM << OPCODE_SHIFT) & PLAIN_RECEIVE_TEST != 0 {
        return false;
    }
    // The QPN compared as the CQE holds it (big-endian, after the byte of `sop`): the
    // swap of `qpn` is the same for the whole run, so each CQE pays no swap for it.
    let raw = cqe.with(|b| u32::from_le_bytes([b[56], b[57], b[58], b[59]]));
    if raw & QPN_MASK_RAW != qpn.swap_bytes() {
        return false;
    }
    responder(rq, op_own >> OPCODE_SHIFT, qpn, cqe, out);
    true
}

/// [`QPN_MASK`] over `sop_drop_qpn` as it is in memory, read as a little-endian word.
const QPN_MASK_RAW: u32 = QPN_MASK.swap_bytes();

const _: () = assert!(
    crate::prm::cqe::field::SOP_DROP_QPN.start == 56
        && crate::prm::cqe::field::SOP_DROP_QPN.end == 60
);

/// The bits [`decode_received`] tests in `op_own - (RESP_WR_IMM << 4)`: the opcode's top two
/// (set when the opcode is not 1 ..= 4) and the format bits.
const PLAIN_RECEIVE_TEST: u8 = 0xc0 | SCATTERED;

const _: () = {
    let mut b = 0u32;
    while b < 256 {
        let op_own = b as u8;
        let cqe_op = op_own >> OPCODE_SHIFT;
        let plain =
            cqe_op >= op::RESP_WR_IMM && cqe_op <= op::RESP_SEND_INV && op_own & SCATTERED == 0;
        assert!(
            plain
                == (op_own.wrapping_sub(op::RESP_WR_IMM << OPCODE_SHIFT) & PLAIN_RECEIVE_TEST == 0)
        );
        b += 1;
    }
};

/// The `op_own` bits of the opcode.
const OPCODE_MASK: u8 = 0xf0;

/// The inline decoder of [`CompletionQueue::poll_received`]: a receive CQE of QP `qpn`
/// (whose receive state is `rq`, its ring `wqes`) with data scattered into it, whose receive's
/// first data segment holds the whole message (the common case: a receive of one buffer, long
/// enough). The data is copied with a few fixed-size moves
/// ([`copy_to_first_segment`](scatter::copy_to_first_segment)) before the receive is retired,
/// and the completion is what [`CompletionQueue::decode_slow`] reports for it. Returns
/// `false`, having changed nothing, for anything else (a CQE of another kind or QP, no
/// scatter bit, a message over several segments or longer than them, a format the poller
/// does not decode): `decode_slow` takes those, with the exact copy and its errors.
///
/// # Safety
///
/// As [`CqeRing::owned`] for `slot`; the only poller of the CQ calls this; `rq` is the
/// receive state of QP `qpn`'s binding, and `wqes` its ring.
#[cfg(not(zverbs_loom))]
#[inline(always)]
unsafe fn decode_scattered<S>(
    rq: Polled<'_, RqState<S>>,
    wqes: crate::state::WqeRing,
    qpn: u32,
    cqe: OwnedCqe,
    op_own: u8,
    out: &mut Completion,
) -> bool
where
    S: stable_deref_trait::StableDeref<Target = [crate::RqSlot]>,
{
    let (sop_drop_qpn, byte_cnt) = cqe.with(|b| {
        let c = Cqe64::new_unchecked(b);
        (c.sop_drop_qpn(), c.byte_cnt())
    });
    let cqe_op = op_own >> OPCODE_SHIFT;
    if sop_drop_qpn & QPN_MASK != qpn || !(op::RESP_WR_IMM..=op::RESP_SEND_INV).contains(&cqe_op) {
        return false;
    }
    // SAFETY: (caller) the CQE completes the oldest receive of `rq`, posted and not yet
    // retired (retired below, after the copy).
    if !unsafe { scatter::copy_to_first_segment(wqes, rq.oldest(), cqe, op_own, byte_cnt) } {
        return false;
    }
    responder(rq, cqe_op, qpn, cqe, out);
    true
}

/// Copies the data scattered into the receive CQE in `slot` into the oldest receive of `rq`
/// (`scatter.rs`).
///
/// # Safety
///
/// The CQE is software's and completes that receive; the only poller calls this, before the
/// receive is retired.
#[cold]
#[inline(never)]
unsafe fn scattered_receive<S>(
    rq: Polled<'_, RqState<S>>,
    cqe: OwnedCqe,
    op_own: u8,
) -> Result<(), scatter::ScatterError>
where
    S: stable_deref_trait::StableDeref<Target = [crate::RqSlot]>,
{
    #[cfg(not(zverbs_loom))]
    {
        let byte_cnt = cqe.with(|b| Cqe64::new_unchecked(b).byte_cnt());
        // SAFETY: (caller) the oldest receive, posted, not retired; its WQE is in `rq`'s ring.
        unsafe { scatter::copy_to_receive(rq.wqes(), rq.oldest(), cqe, op_own, byte_cnt) }
    }
    #[cfg(zverbs_loom)]
    {
        let _ = (rq, cqe, op_own);
        Err(scatter::ScatterError::Format)
    }
}

/// The QP number's bits of `sop_drop_qpn`.
const QPN_MASK: u32 = 0x00ff_ffff;

/// The CQE at consumer counter `ci`, if software owns it: its slot and `op_own`. The device
/// owns it while its opcode is still `INVALID` (never written) or its owner bit is not the
/// parity of the pass over the ring that `ci` is in. The one ownership check of the poller,
/// on `op_own` alone: the rest of the CQE is read only after it and the
/// [`from_device`](barrier::from_device) barrier.
#[inline(always)]
fn owned(ring: Ring, pass_bit: u32, cqes: CqeRing, ci: u32) -> Option<(u32, u8)> {
    let slot = ring.slot(ci);
    let op_own = cqes.op_own(slot);
    // The pass parity as `ci & size` (the bit above the slot bits, `pass_bit`), not
    // `ci >> log2`: one test.
    let parity = u32::from(ci & pass_bit != 0);
    if op_own >> OPCODE_SHIFT == op::INVALID || u32::from(op_own & OWNER_MASK) != parity {
        return None;
    }
    Some((slot, op_own))
}

/// An error CQE's status and vendor error.
#[inline(always)]
fn error_of(cqe: &[u8; 64]) -> (WcStatus, u32) {
    let c = Cqe64::new_unchecked(cqe);
    (status_of(c.syndrome()), u32::from(c.vendor_err_synd()))
}

/// How a requester completion's `byte_len` is found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ReqLen {
    /// 0 (writes, sends, NOP).
    Zero,
    /// 8 (atomics).
    Atomic,
    /// The CQE's `byte_cnt` (READ).
    ByteCnt,
}

/// What a requester completion reports for a send opcode: the verbs opcode, the flags and
/// how `byte_len` is found.
type SendKind = (WcOpcode, WcFlags, ReqLen);

/// [`send_kind`], and for a send opcode the queue never posts, that opcode as it is
/// ([`WcOpcode::Unknown`]) and nothing more.
#[inline(always)]
fn any_send_kind(send_opcode: u8) -> SendKind {
    send_kind(send_opcode).unwrap_or((
        WcOpcode::Unknown(send_opcode as u32),
        WcFlags::NONE,
        ReqLen::Zero,
    ))
}

/// [`send_kind_of`] for every byte (the send opcodes the queue posts, and `None` for the rest),
/// looked up without branches (a byte indexes it whole: no bounds check): the one table of
/// send opcodes, for both paths of the decoder and for error CQEs (which report the opcode
/// the queue recorded).
const SEND_KINDS: [Option<SendKind>; 256] = {
    let mut t = [None; 256];
    let mut op = 0;
    while op < 256 {
        t[op] = send_kind_of(op as u8);
        op += 1;
    }
    t
};

/// What a requester CQE of `send_opcode` reports, for the opcodes the send queue posts;
/// `None` otherwise.
#[inline(always)]
fn send_kind(send_opcode: u8) -> Option<SendKind> {
    SEND_KINDS[usize::from(send_opcode)]
}

/// [`send_kind`], by cases: the verbs opcode, flags and length rule of each send opcode.
const fn send_kind_of(send_opcode: u8) -> Option<SendKind> {
    let (opcode, imm, len) = match send_opcode {
        opcode::RDMA_WRITE => (WcOpcode::RdmaWrite, false, ReqLen::Zero),
        opcode::RDMA_WRITE_IMM => (WcOpcode::RdmaWrite, true, ReqLen::Zero),
        opcode::SEND => (WcOpcode::Send, false, ReqLen::Zero),
        opcode::SEND_IMM => (WcOpcode::Send, true, ReqLen::Zero),
        opcode::RDMA_READ => (WcOpcode::RdmaRead, false, ReqLen::ByteCnt),
        opcode::ATOMIC_CS => (WcOpcode::CompSwap, false, ReqLen::Atomic),
        opcode::ATOMIC_FA => (WcOpcode::FetchAdd, false, ReqLen::Atomic),
        opcode::NOP => (WcOpcode::Nop, false, ReqLen::Zero),
        _ => return None,
    };
    let flags = if imm {
        WcFlags::WITH_IMM
    } else {
        WcFlags::NONE
    };
    Some((opcode, flags, len))
}

/// The successful completion of a requester CQE: retires the WQE at `wqe_counter` (and the
/// unsignaled ones before it) and reports it as `kind` says.
#[inline(always)]
fn requester<S>(
    sq: Polled<'_, SqState<S>>,
    kind: SendKind,
    qpn: u32,
    wqe_counter: Reported,
    cqe: OwnedCqe,
) -> Completion
where
    S: stable_deref_trait::StableDeref<Target = [crate::SqSlot]>,
{
    let (opcode, flags, len) = kind;
    let byte_len = match len {
        ReqLen::Zero => 0,
        ReqLen::Atomic => 8,
        ReqLen::ByteCnt => cqe.with(|b| Cqe64::new_unchecked(b).byte_cnt()),
    };
    let wr_id = sq.retire(wqe_counter).wr_id;
    Completion {
        wr_id,
        byte_len,
        imm: 0,
        qp_num: qpn,
        vendor_err: 0,
        status: WcStatus::Success,
        opcode,
        flags,
        src_qp: 0,
        slid: 0,
        pkey_index: 0,
        sl: 0,
        dlid_path_bits: 0,
    }
}

/// The successful completion of a responder CQE (`cqe_op` one of `RESP_WR_IMM` ..
/// `RESP_SEND_INV`): retires the oldest receive and reports what arrived.
#[inline(always)]
fn responder<S>(
    rq: Polled<'_, RqState<S>>,
    cqe_op: u8,
    qpn: u32,
    cqe: OwnedCqe,
    out: &mut Completion,
) where
    S: stable_deref_trait::StableDeref<Target = [crate::RqSlot]>,
{
    let wr_id = rq.retire(&cqe);
    let (byte_len, imm, flags_rqpn) = cqe.with(receive_fields);
    *out = received(wr_id, cqe_op, qpn, byte_len, imm, flags_rqpn);
    receive_path(cqe, out);
}

/// The fields of a responder CQE a receive completion reports first: `byte_cnt`,
/// `imm_inval_pkey`, `flags_rqpn`.
#[inline(always)]
fn receive_fields(cqe: &[u8; 64]) -> (u32, u32, u32) {
    let c = Cqe64::new_unchecked(cqe);
    (c.byte_cnt(), c.imm_inval_pkey(), c.flags_rqpn())
}

/// Adds to the receive completion `out` where the message came from (`src_qp`, `slid`,
/// `pkey_index`, `sl`, `dlid_path_bits`), read from the CQE in `slot` after the rest of the
/// completion is written: the poll loop then holds fewer values at once, and keeps its own in
/// registers. As libmlx5's `handle_responder` reports them; the P_Key index shares its field
/// with the immediate, and is reported as 0 when the message carried one: the field less
/// the immediate `out` reports (the field itself, or 0).
#[inline(always)]
fn receive_path(cqe: OwnedCqe, out: &mut Completion) {
    let (flags_rqpn, pkey, slid, ml_path) = cqe.with(|b| {
        let c = Cqe64::new_unchecked(b);
        (c.flags_rqpn(), c.imm_inval_pkey(), c.slid(), c.ml_path())
    });
    out.src_qp = flags_rqpn & FLAGS_RQPN_SRC_QP;
    out.slid = slid;
    out.pkey_index = (pkey ^ out.imm) as u16;
    out.sl = ((flags_rqpn >> FLAGS_RQPN_SL_SHIFT) & 0xf) as u8;
    out.dlid_path_bits = ml_path & ML_PATH_DLID_PATH_BITS;
}

/// The successful receive completion of a responder CQE (`cqe_op` one of `RESP_WR_IMM` ..
/// `RESP_SEND_INV`) whose receive request was `wr_id`, from the CQE's fields: what arrived.
/// Without where it came from (0: [`receive_path`] adds that).
#[inline(always)]
fn received(
    wr_id: u64,
    cqe_op: u8,
    qpn: u32,
    byte_len: u32,
    imm: u32,
    flags_rqpn: u32,
) -> Completion {
    // The two opcodes with an immediate, RESP_WR_IMM (1) and RESP_SEND_IMM (3), are the odd
    // ones of the range: its low bit says it (a mask, where comparing with each costs a
    // compare and a set each, and a select).
    let with_imm = cqe_op & 1;
    let grh = u8::from(flags_rqpn & FLAGS_RQPN_GRH != 0);
    // `vendor_err` 0 and `status` Success, as in `EMPTY`.
    Completion {
        wr_id,
        byte_len,
        imm: imm & 0u32.wrapping_sub(u32::from(with_imm)),
        qp_num: qpn,
        opcode: if cqe_op == op::RESP_WR_IMM {
            WcOpcode::RecvRdmaWithImm
        } else {
            WcOpcode::Recv
        },
        flags: WcFlags::from_bits_retain(
            (with_imm * WcFlags::WITH_IMM.bits()) | (grh * WcFlags::GRH.bits()),
        ),
        ..Completion::EMPTY
    }
}

const _: () = assert!(
    op::RESP_WR_IMM == 1
        && op::RESP_SEND == 2
        && op::RESP_SEND_IMM == 3
        && op::RESP_SEND_INV == 4
        && WcFlags::WITH_IMM.bits() == 2
        && WcFlags::GRH.bits() == 1
);

/// A requester or responder CQE in a format the poller does not decode (data scattered into
/// the CQE): its WQE was retired, and the completion, which says what it was, becomes an
/// error whose `vendor_err` carries [`VENDOR_ERR_UNSUPPORTED_FORMAT`] and `op_own`.
#[inline(always)]
fn unsupported_format(out: &mut Completion, op_own: u8) {
    if op_own & SCATTERED != 0 {
        out.status = WcStatus::GeneralErr;
        out.vendor_err = VENDOR_ERR_UNSUPPORTED_FORMAT | u32::from(op_own);
    }
}

/// The completion of a CQE that completes nothing this CQ knows of: an opcode it does not
/// handle, or a queue it was not given. `GeneralErr`, the opcode in `vendor_err` and in
/// [`WcOpcode::Unknown`].
#[inline(always)]
fn unknown(qpn: u32, cqe_op: u8) -> Completion {
    // `wr_id`, `byte_len` and `imm` 0, as in `EMPTY`.
    Completion {
        qp_num: qpn,
        vendor_err: u32::from(cqe_op) << OPCODE_SHIFT,
        status: WcStatus::GeneralErr,
        opcode: WcOpcode::Unknown(u32::from(cqe_op)),
        ..Completion::EMPTY
    }
}

/// The binding for `qpn`, as a [`Hit`].
#[inline(never)]
fn find_binding<Sq: SqStateRef, Rq: RqStateRef, Srq: SrqStateRef>(
    bindings: &[CqBinding<Sq, Rq, Srq>],
    qpn: u32,
) -> Option<Hit<Sq::Target, Rq::Target, Srq::Target>> {
    bindings.iter().find(|b| b.qpn == qpn).map(|b| Hit {
        qpn,
        sq: b.sq.as_ref().map(|h| NonNull::from(&**h)),
        rq: b.rq.as_ref().map(|h| NonNull::from(&**h)),
        srq: b.srq.as_ref().map(|h| NonNull::from(&**h)),
    })
}

/// The verbs status for an error CQE's syndrome, as libmlx5 maps it.
pub fn status_of(syndrome: Syndrome) -> WcStatus {
    match syndrome {
        Syndrome::LocalLengthErr => WcStatus::LocLenErr,
        Syndrome::LocalQpOpErr => WcStatus::LocQpOpErr,
        Syndrome::LocalProtErr => WcStatus::LocProtErr,
        Syndrome::WrFlushErr => WcStatus::WrFlushErr,
        Syndrome::MwBindErr => WcStatus::MwBindErr,
        Syndrome::BadRespErr => WcStatus::BadRespErr,
        Syndrome::LocalAccessErr => WcStatus::LocAccessErr,
        Syndrome::RemoteInvalReqErr => WcStatus::RemInvReqErr,
        Syndrome::RemoteAccessErr => WcStatus::RemAccessErr,
        Syndrome::RemoteOpErr => WcStatus::RemOpErr,
        Syndrome::TransportRetryExcErr => WcStatus::RetryExcErr,
        Syndrome::RnrRetryExcErr => WcStatus::RnrRetryExcErr,
        Syndrome::RemoteAbortedErr => WcStatus::RemAbortErr,
        Syndrome::Unknown(_) => WcStatus::GeneralErr,
    }
}

/// What a poll writes for each CQE: a [`Completion`], or a [`TimedCompletion`] that adds the
/// CQE's timestamp. One poll loop for both, compiled once for each: the plain one has no
/// trace of timestamps.
trait PollOut {
    /// Calls `decode` with the completion to decode into, and keeps what the output holds of
    /// it; returns what `decode` returns. An output that holds part of a completion decodes
    /// into one of its own on the stack: inlined, the fields it drops are never computed.
    fn fill(&mut self, decode: impl FnOnce(&mut Completion) -> bool) -> bool;

    /// As [`PollOut::fill`], for a decoder that cannot fail.
    #[inline(always)]
    fn fill_all(&mut self, decode: impl FnOnce(&mut Completion)) {
        self.fill(|wc| {
            decode(wc);
            true
        });
    }

    /// Adds what the output carries besides the completion, from `cqe` of a CQ whose CQEs
    /// carry timestamps when `timestamps` is true (the CQEs of successful completions: an
    /// error CQE's syndromes are where the timestamp would be).
    fn stamp(&mut self, timestamps: bool, cqe: OwnedCqe);

    /// Adds the timestamp `ts` (a compressed session's, its title's).
    fn stamp_value(&mut self, ts: Option<u64>);
}

impl PollOut for Completion {
    #[inline(always)]
    fn fill(&mut self, decode: impl FnOnce(&mut Completion) -> bool) -> bool {
        decode(self)
    }

    #[inline(always)]
    fn stamp(&mut self, _: bool, _: OwnedCqe) {}

    #[inline(always)]
    fn stamp_value(&mut self, _: Option<u64>) {}
}

impl PollOut for TimedCompletion {
    #[inline(always)]
    fn fill(&mut self, decode: impl FnOnce(&mut Completion) -> bool) -> bool {
        decode(&mut self.wc)
    }

    #[inline(always)]
    fn stamp(&mut self, timestamps: bool, cqe: OwnedCqe) {
        // An error CQE has no timestamp: its syndromes share those bytes. Read either way
        // (the entry is software's), kept or not in one test.
        let ts = cqe.with(|b| Cqe64::new_unchecked(b).timestamp());
        self.timestamp = (timestamps & (self.wc.status == WcStatus::Success)).then_some(ts);
    }

    #[inline(always)]
    fn stamp_value(&mut self, ts: Option<u64>) {
        self.timestamp = ts;
    }
}

impl PollOut for BriefCompletion {
    #[inline(always)]
    fn fill(&mut self, decode: impl FnOnce(&mut Completion) -> bool) -> bool {
        let mut wc = Completion::EMPTY;
        let done = decode(&mut wc);
        *self = BriefCompletion::from(&wc);
        done
    }

    #[inline(always)]
    fn stamp(&mut self, _: bool, _: OwnedCqe) {}

    #[inline(always)]
    fn stamp_value(&mut self, _: Option<u64>) {}
}

impl<B: Bindings> CompletionQueue<B> {
    /// A poll, for either output. Inlined into the caller: an empty poll is the loads of the
    /// ring state, the owner check of the CQE at the consumer counter and a return (no stack
    /// frame, nothing stored); the loop is out of line, entered with that CQE software's (the
    /// plain loop for a requester CQE in the plain format, the loops of receives for anything
    /// else).
    #[inline(always)]
    fn poll_out<O: PollOut>(&mut self, out: &mut [O]) -> usize {
        // Whether `out` has room is the loops' to see (they check it anyway): here it would
        // cost every poll a test.
        match owned(self.ring, self.pass_bit, self.cqes, self.ci) {
            // Anything but a requester CQE in the plain format first (a receive, plain or with
            // data scattered into it, a compressed session's title, an error): the loops of
            // receives. One test of `op_own` (the opcode's bits and the format bits), here
            // rather than in the plain loop, which would save its registers before it.
            Some(first) if first.1 & (OPCODE_MASK | SCATTERED) != 0 => {
                self.poll_received(out, first)
            }
            Some(first) => self.poll_loop(out, first),
            None => 0,
        }
    }

    /// The poll loop of requester CQEs, from the software-owned CQE `first` (slot and
    /// `op_own`) at the consumer counter; the first CQE of another kind ends it,
    /// [`CompletionQueue::poll_rest`] going on from there (requester CQEs alone, it keeps
    /// fewer values than a loop that decodes receives too). The first pass takes `first` rather than checking the CQE again (the compiler
    /// peels it off the loop), after checking that `out` has room for it: when it has none,
    /// nothing is decoded and the counter published is the one the record holds already.
    /// Otherwise the loop ends with at least one CQE consumed, so the record is always
    /// written.
    #[inline(never)]
    fn poll_loop<O: PollOut>(&mut self, out: &mut [O], first: (u32, u8)) -> usize {
        // Locals, which the compiler need not reload after each completion it writes.
        let (ring, cqes, mut ci) = (self.ring, self.cqes, self.ci);
        let mut first = Some(first);
        let mut n = 0;
        while let Some(o) = out.get_mut(n) {
            let found = match first.take() {
                Some(f) => Some(f),
                None => owned(ring, self.pass_bit, cqes, ci),
            };
            let Some((slot, op_own)) = found else {
                break;
            };
            barrier::from_device();
            // SAFETY: the owner bit says the CQE is software's, the barrier orders the reads
            // after that check, and the consumer counter that would free the entry is
            // published only after them.
            let cqe = unsafe { cqes.owned(slot) };
            if !o.fill(|wc| self.decode_fast::<false>(cqe, op_own, wc)) {
                self.ci = ci;
                return self.poll_rest(out, n);
            }
            o.stamp(self.timestamps, cqe);
            ci = ci.wrapping_add(1);
            n += 1;
        }
        self.ci = ci;
        self.publish_ci();
        n
    }

    /// The poll of receives, for a poll whose first CQE, `first` (software's, at the consumer
    /// counter), is not a requester CQE in the plain format. Apart from the plain loop, so
    /// that it keeps its registers: a run of receives of the QP that matched last is decoded
    /// with that QP's receive state at hand, the first here in straight-line code (a poll of
    /// one CQE pays for no loop), the rest in a loop of its own, which loads the state (and
    /// the ring) once: [`CompletionQueue::poll_received_run`] for receives in the plain
    /// format, [`CompletionQueue::poll_scattered_run`] for receives whose data was scattered
    /// into the CQE (small messages to one QP), decoded inline ([`decode_scattered`]). The
    /// first CQE neither decodes (another kind, another QP, or a scattered one of the unusual
    /// cases) ends the run, [`CompletionQueue::poll_rest`] going on from there; so does a
    /// compressed session's title (both format bits) at once. A scattered receive after
    /// another kind of CQE in one poll is the plain loop's, which hands it to `poll_rest`,
    /// where it is copied out of line; a poll that starts at it takes it inline.
    #[inline(never)]
    fn poll_received<O: PollOut>(&mut self, out: &mut [O], first: (u32, u8)) -> usize {
        let (slot, op_own) = first;
        let cqes = self.cqes;
        let hit = self.last;
        match op_own & SCATTERED {
            0 => {
                let Some(wc_out) = out.first_mut() else {
                    return 0;
                };
                let Some(rq) = hit.rq(&self.bindings) else {
                    return self.poll_rest(out, 0);
                };
                barrier::from_device();
                // SAFETY: the CQE is software's (its owner bit checked, then the barrier), and
                // the consumer counter that would free the entry is published only after the
                // reads; `rq` is QP `hit.qpn`'s.
                let cqe = unsafe { cqes.owned(slot) };
                if !wc_out.fill(|wc| decode_received(rq, hit.qpn, cqe, op_own, wc)) {
                    return self.poll_rest(out, 0);
                }
                wc_out.stamp(self.timestamps, cqe);
                self.ci = self.ci.wrapping_add(1);
                if out.len() > 1
                    && let Some(next) = owned(self.ring, self.pass_bit, cqes, self.ci)
                {
                    return self.poll_received_run(out, next);
                }
                self.publish_ci();
                1
            }
            // A compressed session's title (both format bits): out of line at once, before
            // anything else is loaded (the expansion is `poll_rest`'s).
            SCATTERED => self.poll_rest(out, 0),
            #[cfg(zverbs_loom)]
            _ => self.poll_rest(out, 0),
            #[cfg(not(zverbs_loom))]
            _ => {
                let Some(wc_out) = out.first_mut() else {
                    return 0;
                };
                let Some((rq, wqes)) = hit
                    .rq(&self.bindings)
                    .and_then(|rq| rq.wqes().get().map(|w| (rq, w)))
                else {
                    return self.poll_rest(out, 0);
                };
                barrier::from_device();
                // SAFETY: the CQE is software's (its owner bit checked, then the barrier), and
                // the consumer counter that would free the entry is published only after the
                // reads; `rq` and `wqes` are those of QP `hit.qpn`; the only poller.
                let (cqe, decoded) = unsafe {
                    let cqe = cqes.owned(slot);
                    let decoded =
                        wc_out.fill(|wc| decode_scattered(rq, wqes, hit.qpn, cqe, op_own, wc));
                    (cqe, decoded)
                };
                if !decoded {
                    return self.poll_rest(out, 0);
                }
                wc_out.stamp(self.timestamps, cqe);
                self.ci = self.ci.wrapping_add(1);
                if out.len() > 1
                    && let Some(next) = owned(self.ring, self.pass_bit, cqes, self.ci)
                {
                    return self.poll_scattered_run(out, next);
                }
                self.publish_ci();
                1
            }
        }
    }

    /// The rest of [`CompletionQueue::poll_received`] for receives in the plain format, from
    /// `out[1]` and the software-owned CQE `next` at the consumer counter: the loop, out of
    /// line, so that a poll of one CQE does not pay for the registers it holds.
    #[inline(never)]
    fn poll_received_run<O: PollOut>(&mut self, out: &mut [O], next: (u32, u8)) -> usize {
        let hit = self.last;
        let Some(rq) = hit.rq(&self.bindings) else {
            return self.poll_rest(out, 1);
        };
        let (ring, cqes, pass_bit) = (self.ring, self.cqes, self.pass_bit);
        // The counter of the CQE `out[1]` takes: the completions so far are one more than
        // the counter's advance past it.
        let start = self.ci;
        let mut ci = start;
        let (mut slot, mut op_own) = next;
        let Some(outs) = out.get_mut(1..) else {
            return self.poll_rest(out, 1);
        };
        let mut outs = outs.iter_mut();
        barrier::from_device();
        // Rotated: the check of the next CQE is at the end of a pass, so the first pass takes
        // `next` as it is.
        while let Some(wc_out) = outs.next() {
            // SAFETY: the CQE is software's (its owner bit checked before the pass, then the
            // barrier), and the consumer counter that would free the entry is published only
            // after the reads.
            let cqe = unsafe { cqes.owned(slot) };
            if !wc_out.fill(|wc| decode_received(rq, hit.qpn, cqe, op_own, wc)) {
                self.ci = ci;
                return self.poll_rest(out, 1 + ci.wrapping_sub(start) as usize);
            }
            wc_out.stamp(self.timestamps, cqe);
            ci = ci.wrapping_add(1);
            if outs.len() == 0 {
                break;
            }
            let Some(c) = owned(ring, pass_bit, cqes, ci) else {
                break;
            };
            barrier::from_device();
            (slot, op_own) = c;
        }
        self.ci = ci;
        self.publish_ci();
        1 + ci.wrapping_sub(start) as usize
    }

    /// The rest of [`CompletionQueue::poll_received`] for scattered receives, from `out[1]` and the software-owned
    /// CQE `next` at the consumer counter: the loop, out of line, so that a poll of one CQE
    /// does not pay for the registers it holds.
    #[cfg(not(zverbs_loom))]
    #[inline(never)]
    fn poll_scattered_run<O: PollOut>(&mut self, out: &mut [O], next: (u32, u8)) -> usize {
        let mut n = 1;
        let hit = self.last;
        let Some(rq) = hit.rq(&self.bindings) else {
            return self.poll_rest(out, n);
        };
        let Some(wqes) = rq.wqes().get() else {
            return self.poll_rest(out, n);
        };
        let (ring, cqes, mut ci) = (self.ring, self.cqes, self.ci);
        let (mut slot, mut op_own) = next;
        let mut outs = out.iter_mut().skip(1);
        let mut o = outs.next();
        barrier::from_device();
        // Rotated: the check of the next CQE is at the end of a pass, so the first pass takes
        // `next` as it is.
        while let Some(wc_out) = o {
            // SAFETY: as in `poll_received` (the CQE's owner bit checked before the pass).
            let (cqe, decoded) = unsafe {
                let cqe = cqes.owned(slot);
                let decoded =
                    wc_out.fill(|wc| decode_scattered(rq, wqes, hit.qpn, cqe, op_own, wc));
                (cqe, decoded)
            };
            if !decoded {
                self.ci = ci;
                return self.poll_rest(out, n);
            }
            wc_out.stamp(self.timestamps, cqe);
            ci = ci.wrapping_add(1);
            n += 1;
            o = outs.next();
            if o.is_none() {
                break;
            }
            let Some(c) = owned(ring, self.pass_bit, cqes, ci) else {
                break;
            };
            barrier::from_device();
            (slot, op_own) = c;
        }
        self.ci = ci;
        self.publish_ci();
        n
    }
}

impl<B: Bindings> PollCq for CompletionQueue<B> {
    #[inline]
    fn poll(&mut self, out: &mut [Completion]) -> usize {
        self.poll_out(out)
    }

    /// The same poll loop, compiled for [`BriefCompletion`]: the fields it leaves out are
    /// never read from the CQE (where a receive came from, its immediate and flags).
    #[inline]
    fn poll_brief(&mut self, out: &mut [BriefCompletion]) -> usize {
        self.poll_out(out)
    }
}

impl<B: Bindings> PollCqTimed for CompletionQueue<B> {
    #[inline]
    fn poll_timed(&mut self, out: &mut [TimedCompletion]) -> usize {
        self.poll_out(out)
    }
}

#[cfg(test)]
mod scatter_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{QPN, Rig, RigBindings, caps, err_cqe, req_cqe, resp_cqe};
    extern crate std;
    use zverbs_core::{PostRecv, PostSend, RecvWr, RemoteBuf, SendWr, Sge};

    fn wcs() -> [Completion; 8] {
        [Completion::EMPTY; 8]
    }

    fn send(rig: &mut Rig, wr: &SendWr<'_>) {
        // SAFETY: never executed by a device.
        unsafe { rig.sq.post(wr) }.unwrap();
    }

    #[test]
    fn empty_ring_polls_nothing() {
        let mut rig = Rig::new(8, 256, caps(1, 0));
        assert_eq!(rig.cq.poll(&mut wcs()), 0);
        assert_eq!(rig.mem.cq_dbrec(), 0, "nothing consumed, nothing published");
        // Not even the same counter again: an empty poll stores nothing to the record (a
        // value the poller never wrote stays).
        rig.mem.set_cq_dbrec(0x00ab_cdef);
        assert_eq!(rig.cq.poll(&mut wcs()), 0);
        assert_eq!(rig.mem.cq_dbrec(), 0x00ab_cdef);
    }

    #[test]
    fn unsignaled_work_is_retired_by_the_next_completion() {
        let mut rig = Rig::new(8, 256, caps(2, 0));
        let sgl = [Sge::new(0x1000, 8, 1)];
        for i in 0..3 {
            send(&mut rig, &SendWr::write(i, &sgl, RemoteBuf::new(0, 1)));
        }
        send(
            &mut rig,
            &SendWr::read(3, &sgl, RemoteBuf::new(0, 1)).signaled(),
        );
        assert_eq!(rig.sq.free_blocks(), 4);
        rig.mem.put_cqe(0, req_cqe(QPN, opcode::RDMA_READ, 3, 8, 0));
        let mut wc = wcs();
        assert_eq!(rig.cq.poll(&mut wc), 1);
        assert_eq!(wc[0].wr_id, 3);
        assert_eq!(wc[0].opcode, WcOpcode::RdmaRead);
        assert_eq!(wc[0].byte_len, 8);
        assert_eq!(wc[0].qp_num, QPN);
        assert!(wc[0].is_success());
        assert_eq!(rig.sq.free_blocks(), 8, "all four WQEs retired");
        assert_eq!(rig.sq.outstanding_signaled(), 0);
        assert_eq!(rig.mem.cq_dbrec(), 1);
    }

    #[test]
    fn owner_bit_follows_the_pass() {
        let mut rig = Rig::with_cq(8, 256, caps(1, 0), 2);
        let mut wc = wcs();
        for i in 0..5u16 {
            send(&mut rig, &SendWr::nop(u64::from(i)).signaled());
            let pass = (i / 2) & 1;
            let slot = usize::from(i % 2);
            // A CQE with the previous pass's owner bit is still the device's.
            rig.mem
                .put_cqe(slot, req_cqe(QPN, opcode::NOP, i, 0, (pass ^ 1) as u8));
            assert_eq!(rig.cq.poll(&mut wc), 0, "stale owner at {i}");
            rig.mem
                .put_cqe(slot, req_cqe(QPN, opcode::NOP, i, 0, pass as u8));
            assert_eq!(rig.cq.poll(&mut wc), 1);
            assert_eq!((wc[0].wr_id, wc[0].opcode), (u64::from(i), WcOpcode::Nop));
        }
        assert_eq!(rig.mem.cq_dbrec(), 5);
    }

    #[test]
    fn polls_no_more_than_the_slice_holds() {
        let mut rig = Rig::new(8, 256, caps(1, 0));
        for i in 0..5u16 {
            send(&mut rig, &SendWr::nop(u64::from(i)).signaled());
            rig.mem
                .put_cqe(usize::from(i), req_cqe(QPN, opcode::NOP, i, 0, 0));
        }
        let mut two = [Completion::EMPTY; 2];
        assert_eq!(rig.cq.poll(&mut two), 2);
        assert_eq!(rig.mem.cq_dbrec(), 2);
        let mut wc = wcs();
        assert_eq!(rig.cq.poll(&mut wc), 3);
        assert_eq!(wc[2].wr_id, 4);
        assert_eq!(rig.cq.poll(&mut []), 0);
    }

    #[test]
    fn requester_opcodes_and_immediates() {
        let mut rig = Rig::new(16, 256, caps(1, 0));
        let sgl = [Sge::new(0x1000, 8, 1)];
        let local = Sge::new(0x1000, 8, 1);
        let r = RemoteBuf::new(0, 1);
        let wrs = [
            (SendWr::write(0, &sgl, r), WcOpcode::RdmaWrite, false, 0),
            (
                SendWr::write_imm(1, &sgl, r, 7),
                WcOpcode::RdmaWrite,
                true,
                0,
            ),
            (SendWr::send(2, &sgl), WcOpcode::Send, false, 0),
            (SendWr::send_imm(3, &sgl, 7), WcOpcode::Send, true, 0),
            (
                SendWr::compare_swap(4, local, r, 1, 2),
                WcOpcode::CompSwap,
                false,
                8,
            ),
            (
                SendWr::fetch_add(5, local, r, 1),
                WcOpcode::FetchAdd,
                false,
                8,
            ),
        ];
        let ops = [
            opcode::RDMA_WRITE,
            opcode::RDMA_WRITE_IMM,
            opcode::SEND,
            opcode::SEND_IMM,
            opcode::ATOMIC_CS,
            opcode::ATOMIC_FA,
        ];
        for (i, (wr, _, _, _)) in wrs.iter().enumerate() {
            send(&mut rig, &wr.signaled());
            rig.mem.put_cqe(i, req_cqe(QPN, ops[i], i as u16, 99, 0));
        }
        let mut wc = wcs();
        assert_eq!(rig.cq.poll(&mut wc), 6);
        for (i, (_, op, imm, len)) in wrs.iter().enumerate() {
            assert_eq!(wc[i].wr_id, i as u64);
            assert_eq!(wc[i].opcode, *op);
            assert_eq!(wc[i].flags.contains(WcFlags::WITH_IMM), *imm);
            assert_eq!(wc[i].byte_len, *len);
        }
    }

    #[test]
    fn error_then_flushes() {
        let mut rig = Rig::new(8, 256, caps(1, 0));
        let sgl = [Sge::new(0x1000, 8, 1)];
        send(&mut rig, &SendWr::write(10, &sgl, RemoteBuf::new(0, 1)));
        send(&mut rig, &SendWr::read(11, &sgl, RemoteBuf::new(0, 1)));
        send(&mut rig, &SendWr::send(12, &sgl).signaled());
        rig.mem.put_cqe(0, err_cqe(QPN, 13, 1, 0x13, 0x88, 0));
        rig.mem.put_cqe(1, err_cqe(QPN, 13, 2, 0x05, 0xf9, 0));
        let mut wc = wcs();
        assert_eq!(rig.cq.poll(&mut wc), 2);
        assert_eq!(
            (wc[0].wr_id, wc[0].status, wc[0].vendor_err, wc[0].opcode),
            (11, WcStatus::RemAccessErr, 0x88, WcOpcode::RdmaRead)
        );
        assert_eq!(
            (wc[1].wr_id, wc[1].status, wc[1].opcode),
            (12, WcStatus::WrFlushErr, WcOpcode::Send)
        );
        assert_eq!(rig.sq.free_blocks(), 8);
        assert_eq!(rig.sq.outstanding_signaled(), 0);
    }

    #[test]
    fn receive_completions_in_order() {
        let mut rig = Rig::new(8, 256, caps(1, 0));
        let sgl = [Sge::new(0x1000, 64, 1)];
        for i in 0..4 {
            // SAFETY: never executed.
            unsafe { rig.rq.post(&RecvWr::new(100 + i, &sgl)) }.unwrap();
        }
        assert_eq!(rig.rq.free(), 4);
        rig.mem.put_cqe(0, resp_cqe(QPN, 2, 17, 0, 0));
        rig.mem.put_cqe(1, resp_cqe(QPN, 3, 18, 0xdead_beef, 0));
        rig.mem.put_cqe(2, resp_cqe(QPN, 1, 19, 0x1234, 0));
        rig.mem.put_cqe(3, err_cqe(QPN, 14, 3, 0x01, 0x51, 0));
        let mut wc = wcs();
        assert_eq!(rig.cq.poll(&mut wc), 4);
        assert_eq!(
            (wc[0].wr_id, wc[0].opcode, wc[0].byte_len, wc[0].imm()),
            (100, WcOpcode::Recv, 17, None)
        );
        assert_eq!(
            (wc[1].wr_id, wc[1].opcode, wc[1].imm()),
            (101, WcOpcode::Recv, Some(0xdead_beef))
        );
        assert_eq!(
            (wc[2].wr_id, wc[2].opcode, wc[2].imm()),
            (102, WcOpcode::RecvRdmaWithImm, Some(0x1234))
        );
        assert_eq!(
            (wc[3].wr_id, wc[3].status, wc[3].vendor_err),
            (103, WcStatus::LocLenErr, 0x51)
        );
        assert!(wc[..4].iter().all(|c| c.qp_num == QPN), "{wc:?}");
        assert_eq!(rig.rq.free(), 8);
    }

    /// A responder CQE of the rig's QP (0x000100), owner bit 0, as literal bytes: `op_own`
    /// `cqe_op << 4`, `byte_cnt` 0x40, immediate 0x0000_1234, and `flags_rqpn` (bytes 24..28)
    /// starting with the byte `flags_hi` (GRH bits 29..28, SL 27..24) over source QP 0x000abc.
    fn grh_cqe(cqe_op: u8, flags_hi: u8) -> [u8; 64] {
        let mut c = [0u8; 64];
        c[24..28].copy_from_slice(&[flags_hi, 0x00, 0x0a, 0xbc]); // flags_rqpn
        c[36..40].copy_from_slice(&[0x00, 0x00, 0x12, 0x34]); // imm_inval_pkey
        c[44..48].copy_from_slice(&[0x00, 0x00, 0x00, 0x40]); // byte_cnt
        c[56..60].copy_from_slice(&[0x00, 0x00, 0x01, 0x00]); // sop_drop_qpn: QPN 0x100
        c[63] = cqe_op << 4; // op_own, owner 0
        c
    }

    /// (CQE opcode, top byte of `flags_rqpn`, the flags libmlx5 reports for it).
    const GRH_CASES: [(u8, u8, WcFlags); 6] = [
        (2, 0x10, WcFlags::GRH),                          // SEND, GRH bits 01
        (2, 0x0f, WcFlags::NONE),                         // SEND, SL 15, no GRH
        (3, 0x20, WcFlags::GRH.union(WcFlags::WITH_IMM)), // SEND_IMM, GRH bits 10
        (1, 0x00, WcFlags::WITH_IMM),                     // WRITE_IMM, nothing
        (1, 0x3f, WcFlags::GRH.union(WcFlags::WITH_IMM)), // WRITE_IMM, GRH bits 11, SL 15
        (2, 0xc0, WcFlags::NONE),                         // SEND, only bits 31..30
    ];

    fn post_receives(rig: &mut Rig, n: u64) {
        let sgl = [Sge::new(0x1000, 64, 1)];
        for i in 0..n {
            // SAFETY: never executed.
            unsafe { rig.rq.post(&RecvWr::new(100 + i, &sgl)) }.unwrap();
        }
    }

    fn check_grh_cases(wc: &[Completion]) {
        for (w, &(cqe_op, hi, flags)) in wc.iter().zip(&GRH_CASES) {
            assert_eq!(
                w.flags, flags,
                "CQE opcode {cqe_op}, flags_rqpn {hi:#04x}_000abc"
            );
            assert_eq!((w.byte_len, w.status), (0x40, WcStatus::Success));
            assert_eq!(w.imm(), (cqe_op != 2).then_some(0x1234));
        }
    }

    #[test]
    fn receive_grh_flag_on_the_general_path() {
        // A new poller knows no binding yet: the first CQE, and with it the rest of the poll,
        // is decoded out of line (`decode_slow`).
        let mut rig = Rig::new(8, 256, caps(1, 0));
        post_receives(&mut rig, GRH_CASES.len() as u64);
        for (i, &(cqe_op, hi, _)) in GRH_CASES.iter().enumerate() {
            rig.mem.put_cqe(i, grh_cqe(cqe_op, hi));
        }
        let mut wc = wcs();
        assert_eq!(rig.cq.poll(&mut wc), GRH_CASES.len());
        check_grh_cases(&wc);
    }

    #[test]
    fn receive_grh_flag_on_the_inline_path() {
        // Once a CQE of the QP has been polled, its binding is cached and every plain CQE of it
        // is decoded inline (`decode_fast`).
        let mut rig = Rig::new(8, 256, caps(1, 0));
        post_receives(&mut rig, 1 + GRH_CASES.len() as u64);
        rig.mem.put_cqe(0, grh_cqe(2, 0));
        let mut wc = wcs();
        assert_eq!(rig.cq.poll(&mut wc), 1);
        for (i, &(cqe_op, hi, _)) in GRH_CASES.iter().enumerate() {
            rig.mem.put_cqe(1 + i, grh_cqe(cqe_op, hi));
        }
        assert_eq!(rig.cq.poll(&mut wc), GRH_CASES.len());
        check_grh_cases(&wc);
    }

    /// A responder CQE of the rig's QP with every field a receive reports set: `op_own`
    /// `cqe_op << 4`, `byte_cnt` 0x20 + `i`, `imm_inval_pkey` 0x8000 + `i`, `flags_rqpn`
    /// GRH bits 01 and SL 5 over source QP 0x000abc + `i`, `slid` 0x0102, `ml_path` 0xff.
    fn full_resp_cqe(cqe_op: u8, i: u32) -> [u8; 64] {
        let mut c = resp_cqe(QPN, cqe_op, 0x20 + i, 0x8000 + i, 0);
        c[24..28].copy_from_slice(&(0x1500_0abc + i).to_be_bytes()); // flags_rqpn
        c[22..24].copy_from_slice(&0x0102u16.to_be_bytes()); // slid
        c[17] = 0xff; // ml_path
        c
    }

    /// What libmlx5 reports for [`full_resp_cqe`] `(cqe_op, i)` taking receive `wr_id`.
    fn full_resp_completion(cqe_op: u8, i: u32, wr_id: u64) -> Completion {
        let with_imm = cqe_op == op::RESP_WR_IMM || cqe_op == op::RESP_SEND_IMM;
        Completion {
            wr_id,
            status: WcStatus::Success,
            opcode: if cqe_op == op::RESP_WR_IMM {
                WcOpcode::RecvRdmaWithImm
            } else {
                WcOpcode::Recv
            },
            byte_len: 0x20 + i,
            qp_num: QPN,
            imm: if with_imm { 0x8000 + i } else { 0 },
            vendor_err: 0,
            src_qp: 0x000abc + i,
            slid: 0x0102,
            // The immediate's field: the P_Key index only without one.
            pkey_index: if with_imm { 0 } else { 0x8000 + i as u16 },
            sl: 5,
            dlid_path_bits: 0x7f,
            flags: if with_imm {
                WcFlags::GRH.union(WcFlags::WITH_IMM)
            } else {
                WcFlags::GRH
            },
        }
    }

    #[test]
    fn receive_runs_and_requester_cqes_in_one_poll() {
        // A poll that starts at receives (their own loop once the QP's binding is cached) and
        // meets a requester CQE, then receives again; and one that starts at a requester CQE
        // (the plain loop) and meets receives: every field of each as libmlx5 reports it.
        let mut rig = Rig::new(8, 256, caps(2, 0));
        post_receives(&mut rig, 7);
        send(&mut rig, &SendWr::nop(50).signaled());
        send(&mut rig, &SendWr::nop(51).signaled());
        let mut wc = wcs();
        rig.mem.put_cqe(0, full_resp_cqe(op::RESP_SEND, 0));
        assert_eq!(rig.cq.poll(&mut wc), 1);
        assert_eq!(wc[0], full_resp_completion(op::RESP_SEND, 0, 100));
        let first = [
            op::RESP_SEND_IMM,
            op::RESP_WR_IMM,
            op::RESP_SEND,
            op::REQ,
            op::RESP_SEND_INV,
        ];
        let second = [op::REQ, op::RESP_SEND_IMM, op::RESP_SEND];
        let (mut slot, mut recv, mut nop) = (1, 1, 0);
        for cqes in [&first[..], &second[..]] {
            let (r0, n0) = (recv, nop);
            for &cqe_op in cqes {
                if cqe_op == op::REQ {
                    rig.mem.put_cqe(slot, req_cqe(QPN, opcode::NOP, nop, 0, 0));
                    nop += 1;
                } else {
                    rig.mem.put_cqe(slot, full_resp_cqe(cqe_op, recv));
                    recv += 1;
                }
                slot += 1;
            }
            assert_eq!(rig.cq.poll(&mut wc), cqes.len());
            let (mut r, mut n) = (r0, n0);
            for (k, &cqe_op) in cqes.iter().enumerate() {
                if cqe_op == op::REQ {
                    assert_eq!(
                        (wc[k].wr_id, wc[k].opcode),
                        (50 + u64::from(n), WcOpcode::Nop)
                    );
                    assert!(wc[k].is_success() && wc[k].flags == WcFlags::NONE);
                    n += 1;
                } else {
                    let want = full_resp_completion(cqe_op, r, 100 + u64::from(r));
                    assert_eq!(wc[k], want, "{cqes:?} at {k}");
                    r += 1;
                }
            }
        }
        assert_eq!(rig.rq.free(), 8);
        assert_eq!(rig.mem.cq_dbrec(), slot as u32);
    }

    /// Polls `cqe` after `post` on a new rig, as the first CQE the poller sees (the cold path:
    /// no binding cached yet) or after a NOP's (the fast path).
    fn decode_one(
        fast: bool,
        post: impl Fn(&mut Rig),
        cqe: impl Fn(u16) -> [u8; 64],
    ) -> Completion {
        let mut rig = Rig::new(8, 256, caps(1, 0));
        let mut wc = wcs();
        let mut at = 0;
        if fast {
            send(&mut rig, &SendWr::nop(99).signaled());
            rig.mem.put_cqe(0, req_cqe(QPN, opcode::NOP, 0, 0, 0));
            assert_eq!(rig.cq.poll(&mut wc), 1);
            at = 1;
        }
        post(&mut rig);
        rig.mem.put_cqe(usize::from(at), cqe(at));
        assert_eq!(rig.cq.poll(&mut wc), 1);
        wc[0]
    }

    #[test]
    fn both_paths_of_the_decoder_agree() {
        let sgl = [Sge::new(0x1000, 8, 1)];
        let local = Sge::new(0x1000, 8, 1);
        let r = RemoteBuf::new(0, 1);
        let requests = [
            (SendWr::write(1, &sgl, r), opcode::RDMA_WRITE),
            (SendWr::write_imm(2, &sgl, r, 5), opcode::RDMA_WRITE_IMM),
            (SendWr::send(3, &sgl), opcode::SEND),
            (SendWr::send_imm(4, &sgl, 5), opcode::SEND_IMM),
            (SendWr::read(5, &sgl, r), opcode::RDMA_READ),
            (SendWr::compare_swap(6, local, r, 1, 2), opcode::ATOMIC_CS),
            (SendWr::fetch_add(7, local, r, 1), opcode::ATOMIC_FA),
            (SendWr::nop(8), opcode::NOP),
        ];
        for (wr, send_opcode) in requests {
            let [cold, fast] = [false, true].map(|fast| {
                decode_one(
                    fast,
                    |rig| send(rig, &wr.signaled()),
                    |at| req_cqe(QPN, send_opcode, at, 0x99, 0),
                )
            });
            assert_eq!(cold, fast, "send opcode {send_opcode:#x}");
            assert_eq!((cold.wr_id, cold.status), (wr.wr_id, WcStatus::Success));
            assert!(!matches!(cold.opcode, WcOpcode::Unknown(_)));
        }
        for cqe_op in [
            op::RESP_WR_IMM,
            op::RESP_SEND,
            op::RESP_SEND_IMM,
            op::RESP_SEND_INV,
        ] {
            for grh in [0, 0x10] {
                let [cold, fast] = [false, true].map(|fast| {
                    decode_one(
                        fast,
                        |rig| post_receives(rig, 1),
                        |_| {
                            let mut c = resp_cqe(QPN, cqe_op, 0x40, 0x1234, 0);
                            c[24] = grh;
                            c
                        },
                    )
                });
                assert_eq!(cold, fast, "CQE opcode {cqe_op}, GRH byte {grh:#x}");
                assert_eq!((cold.wr_id, cold.status), (100, WcStatus::Success));
            }
        }
    }

    #[test]
    fn a_scattered_cqe_is_reported_on_either_path() {
        // Data scattered into the CQE: not decoded, not dropped; the WQE is retired, on the cold
        // path and when the QP's binding is cached as well.
        let sgl = [Sge::new(0x1000, 8, 1)];
        for fast in [false, true] {
            for scatter in [INLINE_SCATTER_32, INLINE_SCATTER_64] {
                let wc = decode_one(
                    fast,
                    |rig| send(rig, &SendWr::read(7, &sgl, RemoteBuf::new(0, 1)).signaled()),
                    |at| {
                        let mut c = req_cqe(QPN, opcode::RDMA_READ, at, 8, 0);
                        c[63] |= scatter;
                        c
                    },
                );
                assert_eq!(
                    (wc.wr_id, wc.status, wc.vendor_err, wc.opcode),
                    (
                        7,
                        WcStatus::GeneralErr,
                        VENDOR_ERR_UNSUPPORTED_FORMAT | u32::from(scatter),
                        WcOpcode::RdmaRead
                    ),
                    "fast {fast}"
                );
            }
        }
    }

    #[test]
    fn requester_completions_never_carry_the_grh_flag() {
        // libmlx5 reads flags_rqpn for receives only; a requester CQE's bytes 24..28 mean
        // nothing to it.
        let mut rig = Rig::new(8, 256, caps(1, 0));
        let mut wc = wcs();
        for i in 0..2u16 {
            send(&mut rig, &SendWr::nop(u64::from(i)).signaled());
            let mut c = req_cqe(QPN, opcode::NOP, i, 0, 0);
            c[24] = 0x30;
            rig.mem.put_cqe(usize::from(i), c);
            // The first poll decodes out of line, the second inline.
            assert_eq!(rig.cq.poll(&mut wc), 1);
            assert_eq!(wc[0].flags, WcFlags::NONE);
        }
    }

    /// Ethernet receive CQEs carry a flow tag where the QP number would be, and a user index
    /// no binding holds (libmlx5's, which no verb reports): the receive queue bound under
    /// `CqBinding::SOLE_RECEIVER` takes them, in order, errors included, while the QP's
    /// send completions are still found by its number.
    #[test]
    fn the_sole_receiver_takes_receives_that_name_no_binding() {
        let mut rig = Rig::new(8, 256, caps(1, 0));
        let (sq, rq) = (rig.bindings[0].sq.clone(), rig.bindings[0].rq.clone());
        let mut table: RigBindings = std::boxed::Box::new([
            CqBinding::new(QPN, sq, rq.clone()),
            CqBinding::new(CqBinding::<(), ()>::SOLE_RECEIVER, None, rq),
        ]);
        // SAFETY: the same states, of the rig's QP, on the rig's CQ.
        unsafe { rig.cq.swap_bindings(&mut table) };
        post_receives(&mut rig, 3);
        send(&mut rig, &SendWr::nop(5).signaled());
        let mut with_uidx = resp_cqe(0x77, 2, 60, 0, 0);
        with_uidx[48..52].copy_from_slice(&0x0abc_u32.to_be_bytes()); // srqn_uidx
        rig.mem.put_cqe(0, with_uidx);
        rig.mem.put_cqe(1, req_cqe(QPN, opcode::NOP, 0, 0, 0));
        rig.mem.put_cqe(2, resp_cqe(0, 2, 61, 0, 0));
        rig.mem.put_cqe(3, err_cqe(0x77, 14, 2, 0x01, 0x51, 0));
        let mut wc = wcs();
        assert_eq!(rig.cq.poll(&mut wc), 4);
        let got: std::vec::Vec<_> = wc[..4]
            .iter()
            .map(|c| (c.wr_id, c.status, c.opcode, c.qp_num))
            .collect();
        assert_eq!(
            got,
            [
                (100, WcStatus::Success, WcOpcode::Recv, 0x77),
                (5, WcStatus::Success, WcOpcode::Nop, QPN),
                (101, WcStatus::Success, WcOpcode::Recv, 0),
                (102, WcStatus::LocLenErr, WcOpcode::Recv, 0x77),
            ]
        );
        assert_eq!((wc[0].byte_len, wc[2].byte_len), (60, 61));
        assert_eq!(rig.rq.free(), 8);
    }

    #[test]
    fn unknown_queue_and_formats_are_reported_not_dropped() {
        let mut rig = Rig::new(8, 256, caps(1, 0));
        send(&mut rig, &SendWr::nop(5).signaled());
        rig.mem.put_cqe(0, req_cqe(0x999, opcode::NOP, 0, 0, 0));
        let mut scattered = req_cqe(QPN, opcode::RDMA_READ, 0, 4, 0);
        scattered[63] |= INLINE_SCATTER_32;
        rig.mem.put_cqe(1, scattered);
        let mut resize = [0u8; 64];
        resize[63] = 5 << 4;
        rig.mem.put_cqe(2, resize);
        let mut wc = wcs();
        assert_eq!(rig.cq.poll(&mut wc), 3);
        assert_eq!(
            (wc[0].qp_num, wc[0].status, wc[0].wr_id),
            (0x999, WcStatus::GeneralErr, 0)
        );
        assert_eq!((wc[1].wr_id, wc[1].status), (5, WcStatus::GeneralErr));
        assert_eq!(
            wc[1].vendor_err,
            VENDOR_ERR_UNSUPPORTED_FORMAT | u32::from(INLINE_SCATTER_32)
        );
        // The opcode also in `vendor_err`, where `op_own` holds it.
        assert_eq!(
            (wc[2].opcode, wc[2].status, wc[2].vendor_err),
            (WcOpcode::Unknown(5), WcStatus::GeneralErr, 5 << 4)
        );
        assert_eq!(
            rig.sq.free_blocks(),
            8,
            "the scattered CQE still retired its WQE"
        );
    }

    #[test]
    fn status_mapping_matches_libmlx5() {
        let pairs = [
            (0x01, WcStatus::LocLenErr),
            (0x02, WcStatus::LocQpOpErr),
            (0x04, WcStatus::LocProtErr),
            (0x05, WcStatus::WrFlushErr),
            (0x06, WcStatus::MwBindErr),
            (0x10, WcStatus::BadRespErr),
            (0x11, WcStatus::LocAccessErr),
            (0x12, WcStatus::RemInvReqErr),
            (0x13, WcStatus::RemAccessErr),
            (0x14, WcStatus::RemOpErr),
            (0x15, WcStatus::RetryExcErr),
            (0x16, WcStatus::RnrRetryExcErr),
            (0x22, WcStatus::RemAbortErr),
            (0x77, WcStatus::GeneralErr),
        ];
        for (raw, st) in pairs {
            assert_eq!(status_of(Syndrome::from_raw(raw)), st);
        }
    }

    #[test]
    fn one_cq_serves_several_queue_pairs() {
        extern crate std;
        use crate::state::{SlotData, SqSlot, SqState};
        // The rig's QP (QPN 0x100) and a second QP (0x200) whose send completions go to the
        // same CQ; their CQEs interleave, so the binding cache switches back and forth.
        let mut rig = Rig::new(8, 256, caps(1, 0));
        let slots: std::boxed::Box<[SqSlot]> = (0..8).map(|_| SqSlot::new()).collect();
        let other = std::sync::Arc::new(SqState::new(slots).unwrap());
        for (i, s) in other.slots().iter().enumerate() {
            let data = SlotData {
                wr_id: 200 + i as u64,
                next: i as u32 + 1,
                opcode: opcode::SEND,
                signaled: true,
            };
            // SAFETY: no poller runs yet; these stand in for the second QP's posts.
            unsafe { s.record(data) };
        }
        let bindings = [
            CqBinding::new(0x200, Some(other.clone()), None),
            rig.bindings[0].clone(),
        ];
        let layout = rig.mem.cq_layout();
        // SAFETY: the rig's CQ memory; the rig's own poller is not used again.
        let mut cq = unsafe { CompletionQueue::new(&layout, &bindings[..]) }.unwrap();
        for i in 0..3u16 {
            send(&mut rig, &SendWr::nop(u64::from(i)).signaled());
        }
        let order = [
            (0x200, 0u16),
            (QPN, 0),
            (0x200, 1),
            (0x200, 2),
            (QPN, 1),
            (QPN, 2),
        ];
        for (k, (qpn, wqe)) in order.iter().enumerate() {
            let op = if *qpn == QPN {
                opcode::NOP
            } else {
                opcode::SEND
            };
            rig.mem.put_cqe(k, req_cqe(*qpn, op, *wqe, 0, 0));
        }
        let mut wc = [Completion::EMPTY; 8];
        assert_eq!(cq.poll(&mut wc), 6);
        let got: std::vec::Vec<(u32, u64)> = wc[..6].iter().map(|c| (c.qp_num, c.wr_id)).collect();
        assert_eq!(
            got,
            [
                (0x200, 200),
                (QPN, 0),
                (0x200, 201),
                (0x200, 202),
                (QPN, 1),
                (QPN, 2)
            ]
        );
        assert_eq!(rig.sq.free_blocks(), 8, "the rig's QP got its credits back");
    }

    #[test]
    fn a_queue_pair_that_joined_through_the_handover_is_served() {
        extern crate std;
        use std::boxed::Box;
        use zverbs_core::handover::{Handover, Node};
        // A poller created with no binding; the rig's QP joins it through the hand-over, as
        // one created after the poller does.
        let mut rig = Rig::new(8, 256, caps(1, 0));
        let layout = rig.mem.cq_layout();
        let none: crate::testutil::RigBindings = Box::new([]);
        // SAFETY: the rig's CQ memory; the rig's own poller is not used again.
        let mut cq = unsafe { CompletionQueue::new(&layout, none) }.unwrap();
        assert!(!cq.adopt(), "no hand-over: nothing to adopt");
        assert!(!cq.bindings_pending());
        let handover: Handover<crate::testutil::RigBindings> = Handover::new();
        // SAFETY: the hand-over outlives the poller (dropped first, below); its only poller.
        unsafe { cq.set_handover(NonNull::from(&handover)) };
        assert!(!cq.bindings_pending());
        assert!(!cq.adopt(), "nothing published: nothing adopted");
        assert!(!cq.serves(QPN));
        let node = Box::into_raw(Box::new(Node::new(rig.bindings.clone())));
        // SAFETY: the node is this test's until reclaimed; no other publication.
        assert!(unsafe { handover.publish(node) }.is_null());
        assert!(cq.bindings_pending());
        // A CQE of the QP the bindings lack: the poll adopts the waiting table and retires
        // the send.
        send(&mut rig, &SendWr::nop(9).signaled());
        rig.mem.put_cqe(0, req_cqe(QPN, opcode::NOP, 0, 0, 0));
        let mut wc = wcs();
        assert_eq!(cq.poll(&mut wc), 1);
        assert_eq!(
            (wc[0].wr_id, wc[0].qp_num, wc[0].status),
            (9, QPN, WcStatus::Success)
        );
        assert_eq!(rig.sq.free_blocks(), 8, "the send got its credit back");
        assert!(!cq.bindings_pending());
        assert!(cq.serves(QPN));
        assert!(!cq.serves(0x999), "only the QPs bound");
        assert!(!cq.adopt(), "adopted once");
        // The node came back holding the old (empty) table.
        let back = handover.reclaim();
        assert_eq!(back, node);
        // SAFETY: the node came back from `reclaim`; allocated above, freed once.
        let (next, old) = unsafe { (Node::next_reclaimed(back), Box::from_raw(back)) };
        assert!(next.is_null());
        assert!(old.into_table().is_empty());
        // A second table published is adopted when asked, outside a poll.
        let node = Box::into_raw(Box::new(Node::new(
            Box::new([]) as crate::testutil::RigBindings
        )));
        // SAFETY: as above.
        assert!(unsafe { handover.publish(node) }.is_null());
        assert!(cq.adopt());
        assert!(!cq.serves(QPN), "the QP left");
        drop(cq);
        let back = handover.reclaim();
        // SAFETY: as above.
        assert_eq!(unsafe { Box::from_raw(back) }.into_table().len(), 1);
    }

    #[test]
    fn big_cqes_use_the_second_half() {
        let mut rig = Rig::new(8, 256, caps(1, 0));
        // Re-layout the CQ memory as 4 CQEs of 128 bytes.
        let mut layout = rig.mem.cq_layout();
        layout.cqe_cnt = 4;
        layout.cqe_size = 128;
        // A fresh CQ over the same memory and bindings; the rig's CQ is not polled again.
        let bindings = rig.bindings.clone();
        // SAFETY: the memory outlives this CQ, which alone polls it from now on.
        let mut cq = unsafe { CompletionQueue::new(&layout, bindings) }.unwrap();
        send(&mut rig, &SendWr::nop(42).signaled());
        for i in 0..rig.mem.cq_entries() {
            rig.mem.set_op_own(i, 0xf0);
        }
        // First half: garbage that would decode as a valid CQE; second half: the real one.
        rig.mem.put_cqe(0, req_cqe(0x555, opcode::NOP, 0, 0, 0));
        rig.mem.put_cqe(1, req_cqe(QPN, opcode::NOP, 0, 0, 0));
        let mut wc = wcs();
        assert_eq!(cq.poll(&mut wc), 1);
        assert_eq!((wc[0].wr_id, wc[0].qp_num), (42, QPN));
    }

    /// A NOP's requester CQE at `wqe` with `ts` in its `timestamp` field (bytes 48..56).
    fn stamped(wqe: u16, ts: u64) -> [u8; 64] {
        let mut c = req_cqe(QPN, opcode::NOP, wqe, 0, 0);
        c[48..56].copy_from_slice(&ts.to_be_bytes());
        c
    }

    #[test]
    fn timed_poll_reads_the_timestamp_on_both_paths() {
        // The first CQE is decoded out of line (no binding cached yet), the rest inline.
        let mut rig = Rig::new(8, 256, caps(1, 0));
        let layout = rig.mem.cq_layout();
        let bindings = rig.bindings.clone();
        // SAFETY: the rig's CQ memory; the rig's own poller is not used again.
        let mut cq = unsafe { CompletionQueue::new(&layout, bindings) }.unwrap();
        cq.set_timestamps(true);
        assert!(cq.has_timestamps());
        let stamps = [0x0123_4567_89ab_cdef, 0x0123_4567_89ab_ce00, u64::MAX];
        for (i, ts) in stamps.iter().enumerate() {
            send(&mut rig, &SendWr::nop(i as u64).signaled());
            rig.mem.put_cqe(i, stamped(i as u16, *ts));
        }
        let mut out = [TimedCompletion::EMPTY; 4];
        assert_eq!(cq.poll_timed(&mut out[..1]), 1);
        assert_eq!(cq.poll_timed(&mut out[1..]), 2);
        for (i, ts) in stamps.iter().enumerate() {
            assert_eq!((out[i].wr_id, out[i].hw_timestamp()), (i as u64, Some(*ts)));
        }
        assert_eq!(
            out[3],
            TimedCompletion::EMPTY,
            "nothing past the CQEs polled"
        );
    }

    #[test]
    fn an_error_cqe_has_no_timestamp() {
        // Its vendor syndrome and syndrome are bytes 54 and 55, inside `timestamp`.
        let mut rig = Rig::new(8, 256, caps(1, 0));
        rig.cq.set_timestamps(true);
        send(&mut rig, &SendWr::nop(4).signaled());
        rig.mem.put_cqe(0, err_cqe(QPN, 13, 0, 0x13, 0x88, 0));
        let mut out = [TimedCompletion::EMPTY; 1];
        assert_eq!(rig.cq.poll_timed(&mut out), 1);
        assert_eq!(
            (out[0].status, out[0].vendor_err, out[0].hw_timestamp()),
            (WcStatus::RemAccessErr, 0x88, None)
        );
    }

    #[test]
    fn timed_poll_of_a_cq_without_timestamps_reports_none() {
        let mut rig = Rig::new(8, 256, caps(1, 0));
        for i in 0..2u16 {
            send(&mut rig, &SendWr::nop(u64::from(i)).signaled());
            rig.mem.put_cqe(usize::from(i), stamped(i, 77));
        }
        assert!(!rig.cq.has_timestamps());
        let mut out = [TimedCompletion {
            timestamp: Some(1),
            ..TimedCompletion::EMPTY
        }; 2];
        assert_eq!(rig.cq.poll_timed(&mut out[..1]), 1);
        assert_eq!(rig.cq.poll_timed(&mut out[1..]), 1);
        assert_eq!(
            out.map(|o| (o.wr_id, o.hw_timestamp())),
            [(0, None), (1, None)]
        );
    }

    #[test]
    fn the_poller_names_its_queue_and_the_binding_it_matched_last() {
        extern crate std;
        let mut rig = Rig::new(8, 256, caps(1, 0));
        assert_eq!(
            (rig.cq.cqn(), rig.cq.cqe_cnt(), rig.cq.consumer()),
            (7, 64, 0)
        );
        send(&mut rig, &SendWr::nop(1).signaled());
        rig.mem.put_cqe(0, req_cqe(QPN, opcode::NOP, 0, 0, 0));
        assert_eq!(rig.cq.poll(&mut wcs()), 1);
        assert_eq!(rig.cq.consumer(), 1);
        let shown = std::format!("{:?}", rig.cq);
        assert!(
            shown.contains(&std::format!("last: Hit {{ qpn: {QPN}, sq: Some(")),
            "{shown}"
        );
    }

    #[test]
    fn a_brief_poll_reports_what_a_full_one_does() {
        extern crate std;
        use zverbs_core::BriefCompletion;
        // The same CQEs on two rigs: requester CQEs of each kind, receives, an error, a CQE
        // of an unknown QP; polled one at a time (each poll's first CQE) and in one poll (the
        // rest of the loop and its cold path), briefly on one rig and in full on the other.
        let sgl = [Sge::new(0x1000, 8, 1)];
        let r = RemoteBuf::new(0, 1);
        let fill = |rig: &mut Rig| {
            send(rig, &SendWr::read(1, &sgl, r).signaled());
            send(rig, &SendWr::send_imm(2, &sgl, 5).signaled());
            send(
                rig,
                &SendWr::fetch_add(3, Sge::new(0x1000, 8, 1), r, 1).signaled(),
            );
            post_receives(rig, 2);
            rig.mem
                .put_cqe(0, req_cqe(QPN, opcode::RDMA_READ, 0, 0x44, 0));
            rig.mem.put_cqe(1, req_cqe(QPN, opcode::SEND_IMM, 1, 0, 0));
            rig.mem
                .put_cqe(2, resp_cqe(QPN, op::RESP_SEND_IMM, 0x30, 0x1234, 0));
            rig.mem.put_cqe(3, req_cqe(0x999, opcode::NOP, 0, 0, 0));
            rig.mem.put_cqe(4, req_cqe(QPN, opcode::ATOMIC_FA, 2, 0, 0));
            rig.mem
                .put_cqe(5, err_cqe(QPN, op::RESP_ERR, 0, 0x13, 0x88, 0));
        };
        for per_poll in [1, 8] {
            let (mut full, mut brief) =
                (Rig::new(8, 256, caps(1, 0)), Rig::new(8, 256, caps(1, 0)));
            fill(&mut full);
            fill(&mut brief);
            let mut got = std::vec::Vec::new();
            let mut want = std::vec::Vec::new();
            for polls in 0.. {
                // Six CQEs: a poll that never comes back empty is a fault, not a wait.
                assert!(polls <= 6, "the CQ never runs dry");
                let mut wc = [Completion::EMPTY; 8];
                let mut b = [BriefCompletion::EMPTY; 8];
                let n = full.cq.poll(&mut wc[..per_poll]);
                assert_eq!(brief.cq.poll_brief(&mut b[..per_poll]), n);
                if n == 0 {
                    break;
                }
                want.extend(wc[..n].iter().map(BriefCompletion::from));
                got.extend_from_slice(&b[..n]);
            }
            assert_eq!(got.len(), 6);
            assert_eq!(got, want, "{per_poll} a poll");
            assert_eq!(
                got.iter()
                    .map(|c| (c.wr_id, c.byte_len))
                    .collect::<std::vec::Vec<_>>(),
                [(1, 0x44), (2, 0), (100, 0x30), (0, 0), (3, 8), (101, 0)]
            );
            assert_eq!(
                (got[5].status, got[5].vendor_err),
                (WcStatus::RemAccessErr, 0x88)
            );
            assert_eq!(brief.mem.cq_dbrec(), 6);
            assert_eq!(
                brief.sq.free_blocks(),
                8,
                "the brief poll retired the sends"
            );
        }
    }
}
