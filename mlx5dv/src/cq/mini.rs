//! Compressed sessions on the poll path: a title CQE and its arrays of mini-CQEs
//! ([`crate::prm::mini`]) expanded into completions.
//!
//! The poll loop meets a session as a CQE whose format bits say compressed, which its fast
//! path never takes; the out-of-line rest of the poll hands it to
//! [`CompletionQueue::expand`]. That reads what the completions share from the title once
//! (the QP, the opcode, the immediate, where the message came from, the timestamp), copies
//! each array of eight mini-CQEs out of the ring as it reaches it, and then writes one
//! completion per ring entry of the session: from the mini-CQE, the length (and, for a
//! requester session, the WQE and its send opcode); the receive request is the queue's next
//! one (its WQE counter is the title's plus the completion's place in the session, as the
//! device numbers them).
//!
//! Each entry consumed gets an invalid `op_own` before the consumer counter that frees it is
//! published: the device writes only the title's owner byte, and stale mini-CQE bytes must not
//! pass for a CQE of a later pass. A poll that ends inside a session keeps the session (the
//! title's fields and the current array) in the poller, and leaves the entry at the consumer
//! counter marked as a compressed CQE of the current pass: the next poll's ownership check
//! passes, its fast path declines the format, and the expansion resumes. The poll loop itself
//! carries nothing for it.

use zverbs_core::{Completion, WcFlags, WcStatus};

use super::{
    CompletionQueue, PollOut, ReqLen, VENDOR_ERR_UNSUPPORTED_FORMAT, any_send_kind, receive_path,
    received, unknown,
};
use crate::devmem::{OwnedCqe, Reported};
use crate::prm::cqe::{Cqe64, OPCODE_SHIFT, op};
use crate::prm::mini::{FORMAT_MASK, MiniCqe, PER_ARRAY};
use crate::state::Bindings;

/// `op_own` of an entry handed back: the invalid opcode, which no pass's owner check takes.
const INVALID_OP_OWN: u8 = op::INVALID << OPCODE_SHIFT;

/// What the completions of a session are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Receives of a queue pair's own receive queue, in order.
    Recv,
    /// Receives of a shared receive queue, named by WQE counter.
    Srq,
    /// Requester completions: each mini-CQE names its WQE and send opcode.
    Send,
    /// Completions of a queue this CQ was not given, or an opcode it does not decode in a
    /// session: reported, nothing retired.
    Unknown,
}

/// A compressed session the poller is expanding (between polls too, when a poll ended
/// inside one).
#[derive(Clone, Copy, Debug)]
pub(super) struct Session {
    /// Completions not delivered yet; 0 when no session is open.
    left: u32,
    /// Place in the session of the next completion.
    next: u32,
    /// WQE counter of the next completion (receives: the title's plus `next`).
    counter: u16,
    /// The queue pair the title names.
    qpn: u32,
    kind: Kind,
    /// The completion every one of the session starts from.
    template: Completion,
    /// The title's timestamp.
    timestamp: u64,
    /// The array of mini-CQEs that holds the next completion's, copied out of the ring (its
    /// entry may be handed back before the array's last completion is).
    array: [[u8; 8]; PER_ARRAY],
}

impl Session {
    /// No session open.
    pub(super) const NONE: Self = Self {
        left: 0,
        next: 0,
        counter: 0,
        qpn: 0,
        kind: Kind::Unknown,
        template: Completion::EMPTY,
        timestamp: 0,
        array: [[0; 8]; PER_ARRAY],
    };

    /// Whether a session is open (a poll ended inside it).
    #[inline]
    pub(super) fn is_open(&self) -> bool {
        self.left != 0
    }
}

/// Copies the array of mini-CQEs in the entry `cqe`.
#[inline(always)]
fn read_array(cqe: OwnedCqe) -> [[u8; 8]; PER_ARRAY] {
    cqe.with(|b| {
        let mut a = [[0u8; 8]; PER_ARRAY];
        for (i, m) in a.iter_mut().enumerate() {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[i * 8..i * 8 + 8]);
            *m = w;
        }
        a
    })
}

impl<B: Bindings> CompletionQueue<B> {
    /// Expands the compressed session at the consumer counter (in `slot`, whose `op_own` is
    /// `op_own`) into `out[n..]`: opens it when no session is open (the entry is its title),
    /// else resumes the open one. Returns the completions in `out` now. Publishes nothing:
    /// the caller publishes the consumer counter after the last entry it consumed.
    ///
    /// # Safety
    ///
    /// As [`CqeRing::owned`](crate::devmem::CqeRing::owned) for `slot`, which the poller's ownership check passed and
    /// followed with the `from_device` barrier.
    #[cold]
    #[inline(never)]
    pub(super) unsafe fn expand<O: PollOut>(
        &mut self,
        out: &mut [O],
        mut n: usize,
        slot: u32,
        op_own: u8,
    ) -> usize {
        if n >= out.len() {
            return n;
        }
        if !self.session.is_open() {
            // SAFETY: (caller) the title is software's.
            match unsafe { self.open(slot) } {
                Ok(()) => {}
                Err(qpn) => {
                    // Not a session this poller can take (a count of 0, 1 or more entries
                    // than the ring has): the title alone is consumed, and reported.
                    out[n].fill_all(|wc| {
                        *wc = Completion {
                            vendor_err: VENDOR_ERR_UNSUPPORTED_FORMAT | u32::from(op_own),
                            ..unknown(qpn, op_own >> OPCODE_SHIFT)
                        }
                    });
                    out[n].stamp_value(None);
                    self.ci = self.ci.wrapping_add(1);
                    return n + 1;
                }
            }
        }
        let ring = self.ring;
        // SAFETY: a session is open (opened above or by an earlier poll, which left its
        // entry at the consumer counter as it found it): its title passed the owner check
        // and its count is within the ring; only entries from the counter to the session's
        // last are asked for below, and the caller publishes the counter after this call.
        let cqes = unsafe { self.cqes.session() };
        let hit = match self.binding(self.session.qpn) {
            Some(h) => h,
            None => super::Hit::UNBOUND,
        };
        // Resolved in this call (a session keeps only the QPN: bindings may change between
        // polls).
        let (sq, rq, srq) = hit.states(&self.bindings);
        let ts = if self.timestamps {
            Some(self.session.timestamp)
        } else {
            None
        };
        let s = &mut self.session;
        let mut ci = self.ci;
        if let (Kind::Recv, Some(rq)) = (s.kind, rq) {
            // The common session, array by array: receives of the queue pair's own queue.
            let template = s.template;
            loop {
                let first = s.next as usize % PER_ARRAY;
                // Checked sub-slices (`get`), so no bounds-check panic is left in the poll path.
                let (Some(room), Some(minis)) = (out.get_mut(n..), s.array.get(first..)) else {
                    break;
                };
                let m = minis.len().min(s.left as usize).min(room.len());
                for (o, mini) in room.iter_mut().zip(minis).take(m) {
                    let entry = cqes.entry(ring.slot(ci));
                    let wr_id = rq.retire(&entry);
                    o.fill_all(|wc| {
                        *wc = Completion {
                            wr_id,
                            byte_len: MiniCqe::new_unchecked(mini).byte_cnt(),
                            ..template
                        }
                    });
                    o.stamp_value(ts);
                    entry.set_op_own(INVALID_OP_OWN);
                    ci = ci.wrapping_add(1);
                }
                n += m;
                s.next += m as u32;
                s.left -= m as u32;
                s.counter = s.counter.wrapping_add(m as u16);
                if s.left == 0 || !(s.next as usize).is_multiple_of(PER_ARRAY) {
                    break;
                }
                // The next array is in the entry of its first completion: copy it before that
                // entry is marked or handed back.
                s.array = read_array(cqes.entry(ring.slot(ci)));
                if n == out.len() {
                    break;
                }
            }
        }
        // SAFETY: the one argument for the counters below: each names a WQE the device
        // reported complete in this session, which software owns: the SRQ entries' the
        // title's counter plus the completion's place in the session, as the device numbers
        // them; the send entries' the mini-CQE's own, copied from an entry of the session.
        let in_session = |counter: u16| unsafe { Reported::in_session(counter) };
        while s.left != 0
            && let Some(o) = out.get_mut(n)
        {
            let mini = MiniCqe::new_unchecked(&s.array[s.next as usize % PER_ARRAY]);
            let byte_cnt = mini.byte_cnt();
            let entry = cqes.entry(ring.slot(ci));
            o.fill_all(|wc| match (s.kind, sq, rq, srq) {
                (Kind::Recv, _, Some(rq), _) => {
                    let wr_id = rq.retire(&entry);
                    *wc = Completion {
                        wr_id,
                        byte_len: byte_cnt,
                        ..s.template
                    };
                }
                (Kind::Srq, _, _, Some(srq)) => {
                    let wr_id = srq.retire(in_session(s.counter));
                    *wc = Completion {
                        wr_id,
                        byte_len: byte_cnt,
                        ..s.template
                    };
                }
                (Kind::Send, Some(sq), _, _) => {
                    let (opcode, flags, len) = any_send_kind(mini.s_wqe_opcode());
                    let wr_id = sq.retire(in_session(mini.wqe_counter())).wr_id;
                    *wc = Completion {
                        wr_id,
                        byte_len: match len {
                            ReqLen::Zero => 0,
                            ReqLen::Atomic => 8,
                            ReqLen::ByteCnt => byte_cnt,
                        },
                        opcode,
                        flags,
                        ..s.template
                    };
                }
                // The queue left the CQ, or the session is of nothing it decodes.
                _ => *wc = unknown(s.qpn, s.template.vendor_err as u8),
            });
            o.stamp_value(ts);
            entry.set_op_own(INVALID_OP_OWN);
            ci = ci.wrapping_add(1);
            n += 1;
            s.counter = s.counter.wrapping_add(1);
            s.next += 1;
            s.left -= 1;
            if s.left == 0 {
                break;
            }
            if (s.next as usize).is_multiple_of(PER_ARRAY) {
                // The next array is in the entry of its first completion: copy it before that
                // entry is marked or handed back.
                s.array = read_array(cqes.entry(ring.slot(ci)));
            }
        }
        if s.left != 0 {
            // Stopped inside the session: the entry at the counter (whose array, if it holds
            // one, is copied) passes the next poll's ownership check as a compressed CQE.
            let mark = FORMAT_MASK | ring.pass_parity(ci) as u8;
            cqes.entry(ring.slot(ci)).set_op_own(mark);
        }
        self.ci = ci;
        n
    }

    /// Opens the session whose title is in `slot` (at the consumer counter): reads what its
    /// completions share and its first array. Returns the title's QPN when the session cannot
    /// be taken (its count is below 2 or above the ring's size).
    ///
    /// # Safety
    ///
    /// As [`CompletionQueue::expand`].
    unsafe fn open(&mut self, slot: u32) -> Result<(), u32> {
        // SAFETY: (caller) the title is software's.
        let title = unsafe { self.cqes.owned(slot) };
        let (count, qpn, counter, cqe_op, imm, flags_rqpn, timestamp) = title.with(|b| {
            let c = Cqe64::new_unchecked(b);
            (
                c.byte_cnt(),
                c.sop_drop_qpn() & super::QPN_MASK,
                c.wqe_counter(),
                c.op_own() >> OPCODE_SHIFT,
                c.imm_inval_pkey(),
                c.flags_rqpn(),
                c.timestamp(),
            )
        });
        if count < 2 || count > self.ring.size() {
            return Err(qpn);
        }
        let (sq, rq, srq) = match self.binding(qpn) {
            Some(h) => {
                let (sq, rq, srq) = h.states(&self.bindings);
                (sq.is_some(), rq.is_some(), srq.is_some())
            }
            None => (false, false, false),
        };
        let (kind, mut template) = match cqe_op {
            op::RESP_WR_IMM..=op::RESP_SEND_INV if rq || srq => {
                let mut t = received(0, cqe_op, qpn, 0, imm, flags_rqpn);
                receive_path(title, &mut t);
                (if rq { Kind::Recv } else { Kind::Srq }, t)
            }
            op::REQ if sq => (
                Kind::Send,
                Completion {
                    qp_num: qpn,
                    status: WcStatus::Success,
                    flags: WcFlags::NONE,
                    ..Completion::EMPTY
                },
            ),
            _ => (Kind::Unknown, Completion::EMPTY),
        };
        if kind == Kind::Unknown {
            // Where the reported opcode is kept (the template is not used otherwise).
            template.vendor_err = u32::from(cqe_op);
        }
        // SAFETY: the first array is in the entry after the title, inside the session (its
        // count, at least 2, is within the ring): software's with the title.
        let first = unsafe { self.cqes.owned(self.ring.slot(self.ci.wrapping_add(1))) };
        let array = read_array(first);
        self.session = Session {
            left: count,
            next: 0,
            counter,
            qpn,
            kind,
            template,
            timestamp,
            array,
        };
        Ok(())
    }
}

#[cfg(test)]
mod tests;
