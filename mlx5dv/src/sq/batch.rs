//! [`PostSend::post_all`](zverbs_core::PostSend::post_all) in one pass: each request is
//! checked and written in turn, as a verbs chain is, and a refused one rolls the queue back
//! instead of ringing.
//!
//! All or nothing, as the trait promises, by what the device may read: the producer counter
//! moves over the batch's WQEs as they are written, but the doorbell record, the BlueFlame
//! register and the counters the device and the poller see change only once the whole batch
//! is written. A refused request puts the producer counter and the signaled count back where
//! the batch found them, and the requests staged before it stay staged (their count and the
//! place of the last one are the batch's to change only at its end). What the refused batch
//! wrote lies past the producer counter, in blocks the poller has retired (room was checked
//! for each): the ring's WQEs and their slots there are scratch, which the device never reads
//! before a later doorbell record covers them, and the next request written there overwrites
//! ("nothing written" means nothing the device may read: `docs/ordering.md`, section 9).

use zverbs_core::{BatchError, PostError, SendOp, SendWr};

use super::{Room, SendQueue, SqTransport, Vouched, VouchedAll};
use crate::state::SqStateRef;

/// Where a batch found the counters it moves: what a refused batch puts back.
#[derive(Clone, Copy, Debug)]
struct Mark {
    pi: u32,
    sig_posted: u16,
}

impl<P: SqStateRef, T: SqTransport> SendQueue<P, T> {
    /// [`PostSend::post_all`](zverbs_core::PostSend::post_all): the gate as this queue last
    /// found it, then every request checked and written in one pass.
    ///
    /// `wrs` are vouched for ([`Vouched`]: the posting contract holds for every request).
    #[inline(always)]
    pub(super) fn post_batch(&mut self, wrs: VouchedAll<'_, '_>) -> Result<(), BatchError> {
        if self.state.gate().peek() != self.gate {
            return self.post_batch_gate(wrs);
        }
        // The gate is as the counters know it.
        self.post_batch_open(wrs)
    }

    /// The batch when the gate changed since this queue last looked: the first request's own
    /// fault comes first, as when posting one by one; then a closed gate refuses the batch
    /// (at its first request), and an open one of a later incarnation restarts the counters
    /// before the batch is written. An empty batch asks nothing of the gate.
    #[cold]
    #[inline(never)]
    fn post_batch_gate(&mut self, wrs: VouchedAll<'_, '_>) -> Result<(), BatchError> {
        if let Some(first) = wrs.0.first() {
            let refuse = |error| BatchError { index: 0, error };
            self.plan(first).map_err(refuse)?;
            self.pass_gate().map_err(refuse)?;
        }
        // The gate passed (or the batch is empty).
        self.post_batch_open(wrs)
    }

    /// The one pass: each request planned (checked), its room checked against the limits
    /// last read (read again out of line when they are reached), then written; the first
    /// refused request rolls the batch back. The doorbell rings once, at the end, for the
    /// batch and whatever was staged before it.
    ///
    /// With the gate as this queue last found it (the check of each request's room does not
    /// look at it again: [`SendQueue::ring`] does, at the end).
    #[inline(always)]
    fn post_batch_open(&mut self, all: VouchedAll<'_, '_>) -> Result<(), BatchError> {
        let wrs = all.0;
        let mark = Mark {
            pi: self.pi,
            sig_posted: self.sig_posted,
        };
        let (mut last_seg, mut last_blocks) = (self.last_seg, self.last_blocks);
        for wr in wrs {
            // One arm per operation (the datagram operations and NOP share one), each with
            // its own copy of the step, in which the compiler knows the operation: it is told
            // apart once, not again by the check, the plan and the writing of the segments.
            let v = all.one(wr);
            let step = match wr.op {
                SendOp::Write { .. } => self.batch_step(v, mark),
                SendOp::WriteImm { .. } => self.batch_step(v, mark),
                SendOp::Send { .. } => self.batch_step(v, mark),
                SendOp::SendImm { .. } => self.batch_step(v, mark),
                SendOp::Read { .. } => self.batch_step(v, mark),
                SendOp::CompareSwap { .. } => self.batch_step(v, mark),
                SendOp::FetchAdd { .. } => self.batch_step(v, mark),
                SendOp::Nop | SendOp::SendTo { .. } | SendOp::SendToImm { .. } => {
                    self.batch_step(v, mark)
                }
            };
            match step {
                Ok((start, blocks)) => (last_seg, last_blocks) = (start, blocks),
                Err(error) => return Err(self.roll_back(mark, index_of(wrs, wr), error)),
            }
        }
        // Staged only now: the requests staged before the batch stay as they were until the
        // batch is whole.
        self.pending = self.pending.wrapping_add(wrs.len() as u32);
        (self.last_seg, self.last_blocks) = (last_seg, last_blocks);
        self.ring();
        Ok(())
    }

    /// One request of a batch: planned (checked), its room checked against the limits last
    /// read (read again out of line when they are reached), then written. Returns where its
    /// WQE starts and its size in basic blocks.
    #[inline(always)]
    fn batch_step(&mut self, v: Vouched<'_, '_>, mark: Mark) -> Result<(u32, u32), PostError> {
        let plan = self.plan(v.wr())?;
        // The credit, taken down before its compare as by a single post; a short one is set
        // again by the exact checks. (Requests staged before the batch do not matter to it:
        // the batch rings them with its own at its end.)
        let (credit, short) = self.credit.overflowing_sub(plan.blocks);
        self.credit = credit;
        if short {
            self.batch_room_again(mark, plan.blocks, u32::from(plan.signaled))?;
            self.credit -= plan.blocks;
        }
        // SAFETY: its blocks (and its CQE) fit after the requests before it.
        let room = unsafe { Room::checked() };
        Ok(self.write_staged(v, &plan, room, |_, start, blocks| (start, blocks)))
    }

    /// A batch's request is not covered by the credit: reads the credit word and checks
    /// again, then sets the credit from the limits read, to at least `blocks` (which the
    /// request takes down at once), whether or not requests were staged before the batch. The errors count from where the batch started, as if the batch's requests up
    /// to this one were posted together: `needed` is their blocks, `free` the blocks free
    /// before the batch.
    #[cold]
    #[inline(never)]
    fn batch_room_again(
        &mut self,
        mark: Mark,
        blocks: u32,
        signaled: u32,
    ) -> Result<(), PostError> {
        // No credit until the checks pass (the request may have taken it below zero).
        self.credit = 0;
        self.refresh();
        if self.limit.wrapping_sub(self.pi) < blocks {
            return Err(PostError::QueueFull {
                needed: self.pi.wrapping_sub(mark.pi).wrapping_add(blocks),
                free: self.limit.wrapping_sub(mark.pi),
            });
        }
        let outstanding = u32::from(self.sig_posted.wrapping_sub(self.sig_done));
        if outstanding + signaled > self.caps.max_signaled {
            return Err(PostError::CqFull {
                limit: self.caps.max_signaled,
            });
        }
        let free = self.limit.wrapping_sub(self.pi);
        let cqes = u32::from(self.sig_limit.wrapping_sub(self.sig_posted));
        self.credit = free.min(cqes).max(blocks);
        Ok(())
    }

    /// Puts the counters back where the batch found them: the WQEs and slots it wrote are
    /// past the producer counter again, unpublished scratch. Returns the refusal.
    #[cold]
    #[inline(never)]
    fn roll_back(&mut self, mark: Mark, index: usize, error: PostError) -> BatchError {
        self.pi = mark.pi;
        self.sig_posted = mark.sig_posted;
        // The next post sets it again (requests may be staged).
        self.credit = 0;
        BatchError { index, error }
    }
}

/// The index of `wr`, an element of `wrs`: computed only for a refused request, so that the
/// loop over the batch counts nothing.
#[inline(always)]
fn index_of(wrs: &[SendWr<'_>], wr: &SendWr<'_>) -> usize {
    (core::ptr::from_ref(wr).addr() - wrs.as_ptr().addr()) / size_of::<SendWr<'_>>()
}
