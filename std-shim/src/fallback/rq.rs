//! The fallback's receive queue: each post goes to the provider at once.

use std::sync::Arc;

use zverbs_core::{BatchError, PostError, PostRecv, RecvWr, Sge};

use super::raw::{RawArray, sg_list};
use super::state::{RECV_TAG, RqShared};
use zverbs_ffi::types::*;

/// A receive queue driven through `ibv_post_recv`.
#[derive(Debug)]
pub struct RecvQueue {
    target: Target,
    /// `RECV_TAG`, and for a keyed queue its key in bits 32..56 ([`RecvQueue::keyed`]).
    tag: u64,
    wrs: RawArray<ibv_recv_wr>,
    sges: RawArray<Sge>,
    max_wr: u32,
    max_sge: u32,
    /// Receives posted (free-running).
    head: u32,
    /// Receives completed, last read from the shared state.
    tail: u32,
    shared: Arc<RqShared>,
}

// SAFETY: the queue owns its staging memory; shared state goes through `RqShared` (Sync).
unsafe impl Send for RecvQueue {}

impl RecvQueue {
    /// Drives the receive queue of `qp` through its provider's `post_recv`.
    ///
    /// # Safety
    ///
    /// - `qp` is a live QP (and its context live) while this value lives, and nothing else
    ///   posts to its receive queue;
    /// - `max_recv_wr` and `max_recv_sge` are the QP's real capabilities;
    /// - `shared` was made for this queue (`RqShared::new(max_recv_wr)`), is bound to the poller
    ///   of the CQ that receives its completions, and serves no other queue.
    ///
    /// Returns `None` if the provider has no `post_recv` entry.
    pub unsafe fn new(
        qp: *mut ibv_qp,
        max_recv_wr: u32,
        max_recv_sge: u32,
        shared: Arc<RqShared>,
    ) -> Option<Self> {
        // SAFETY: (caller) `qp` and its context are live.
        let post = unsafe { (*(*qp).context).ops.post_recv }?;
        Some(Self::with_target(
            Target::Qp(qp, post),
            max_recv_wr,
            max_recv_sge,
            shared,
        ))
    }

    /// A receive queue posting to receive work queue `wq` (`ibv_post_wq_recv`), with
    /// `max_wr` receives of `max_sge` scatter entries, keyed with the WQ's number (its
    /// completions carry no QP number the poller knows: see [`RecvQueue::keyed`]).
    ///
    /// # Safety
    ///
    /// As [`RecvQueue::new`], for a live WQ.
    pub(crate) unsafe fn new_wq(
        wq: *mut zverbs_ffi::eth::ibv_wq,
        max_wr: u32,
        max_sge: u32,
        shared: Arc<RqShared>,
    ) -> Option<Self> {
        // SAFETY: (caller) a live WQ.
        let post = unsafe { (*wq).post_recv }?;
        // SAFETY: (caller) a live WQ.
        let wqn = unsafe { (*wq).wq_num };
        Some(Self::with_target(Target::Wq(wq, post), max_wr, max_sge, shared).keyed(wqn))
    }

    /// The same queue, its receives carrying `key` (a raw packet QP's or work queue's number,
    /// non-zero, 24 bits) in their `wr_id`: an Ethernet receive completion names no QP the
    /// poller knows (its `qp_num` is the flow tag), so the poller finds the queue by the key,
    /// in the binding [`Binding::keyed`](super::Binding::keyed) made.
    pub(crate) fn keyed(mut self, key: u32) -> Self {
        self.tag = RECV_TAG | (u64::from(key & KEY_MASK) << 32);
        self
    }

    fn with_target(
        target: Target,
        max_recv_wr: u32,
        max_recv_sge: u32,
        shared: Arc<RqShared>,
    ) -> Self {
        let max_wr = max_recv_wr.max(1);
        let max_sge = max_recv_sge;
        Self {
            target,
            tag: RECV_TAG,
            wrs: RawArray::new(max_wr as usize, ibv_recv_wr::ZERO),
            sges: RawArray::new(max_wr as usize * max_sge.max(1) as usize, Sge::default()),
            max_wr,
            max_sge,
            head: 0,
            tail: 0,
            shared,
        }
    }

    /// Scatter entries a receive may have.
    #[inline]
    pub fn max_sge(&self) -> u32 {
        self.max_sge
    }

    /// Free entries, after taking what the poller completed.
    #[inline]
    pub fn free(&mut self) -> u32 {
        self.tail = self.shared.load_tail();
        self.max_wr - self.head.wrapping_sub(self.tail)
    }

    /// Checks `wr` (the core's check) and that `needed` receives fit, this one the last.
    #[inline(always)]
    fn check(&mut self, wr: &RecvWr<'_>, needed: u32) -> Result<(), PostError> {
        wr.check(self.max_sge)?;
        if !self.shared.gate().is_open() {
            return Err(PostError::NotReady);
        }
        if self.head.wrapping_sub(self.tail) + needed > self.max_wr {
            self.tail = self.shared.load_tail();
            let free = self.max_wr - self.head.wrapping_sub(self.tail);
            if free < needed {
                return Err(PostError::QueueFull { needed, free });
            }
        }
        Ok(())
    }

    /// Builds element `i` of the chain for receive counter `counter`.
    ///
    /// # Safety
    ///
    /// `i < max_wr`, `check` passed, and the slot of `counter` is free.
    #[inline(always)]
    unsafe fn build(&mut self, i: usize, counter: u32, wr: &RecvWr<'_>) -> *mut ibv_recv_wr {
        let per = self.max_sge.max(1) as usize;
        let sg = self.sges.at(i * per);
        for (k, s) in wr.sgl.iter().enumerate() {
            // SAFETY: `k < max_sge` (checked), inside element `i`'s scatter entries.
            unsafe { sg.add(k).write(*s) };
        }
        let this = self.wrs.at(i);
        // SAFETY: `i < max_wr` (caller), inside the array.
        unsafe {
            this.write(ibv_recv_wr {
                wr_id: self.tag | u64::from(counter),
                next: core::ptr::null_mut(),
                sg_list: sg_list(sg),
                num_sge: wr.sgl.len() as i32,
            })
        };
        // SAFETY: (caller) the slot is free and the receive not yet posted.
        unsafe { self.shared.record(counter, wr.wr_id) };
        this
    }
}

/// The bits of a keyed receive's `wr_id` that hold its queue's key (above the counter).
pub(crate) const KEY_MASK: u32 = 0x00ff_ffff;

/// Where a receive queue posts.
#[derive(Debug)]
enum Target {
    /// A QP's receive queue (`ibv_post_recv`).
    Qp(*mut ibv_qp, PostRecvFn),
    /// A receive work queue (`ibv_post_wq_recv`).
    Wq(*mut zverbs_ffi::eth::ibv_wq, zverbs_ffi::eth::WqPostRecvFn),
}

impl Target {
    /// Posts the chain at `first`.
    ///
    /// # Safety
    ///
    /// The target is live and only this queue posts to it; the chain is valid.
    #[inline(always)]
    unsafe fn post(&self, first: *mut ibv_recv_wr, bad: *mut *mut ibv_recv_wr) -> i32 {
        match *self {
            // SAFETY: (caller) a live QP, a valid chain.
            Target::Qp(qp, f) => unsafe { f(qp, first, bad) },
            // SAFETY: (caller) a live WQ, a valid chain.
            Target::Wq(wq, f) => unsafe { f(wq, first, bad) },
        }
    }
}

impl PostRecv for RecvQueue {
    #[inline]
    unsafe fn post(&mut self, wr: &RecvWr<'_>) -> Result<(), PostError> {
        self.check(wr, 1)?;
        // SAFETY: element 0 exists; checked; the slot of `head` is free (room checked).
        let first = unsafe { self.build(0, self.head, wr) };
        let mut bad = core::ptr::null_mut();
        // SAFETY: (constructor) the QP is live and only this queue posts receives to it; the
        // request is in our arrays. (Caller) the buffers obey the posting contract.
        let ret = unsafe { self.target.post(first, &mut bad) };
        if ret != 0 {
            return Err(PostError::Verbs { errno: ret.abs() });
        }
        self.head = self.head.wrapping_add(1);
        self.shared.note_posted(self.head);
        Ok(())
    }

    unsafe fn post_all(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), BatchError> {
        if wrs.is_empty() {
            return Ok(());
        }
        for (index, wr) in wrs.iter().enumerate() {
            self.check(wr, index as u32 + 1)
                .map_err(|error| BatchError { index, error })?;
        }
        let mut prev: *mut ibv_recv_wr = core::ptr::null_mut();
        for (i, wr) in wrs.iter().enumerate() {
            // SAFETY: `i < len <= max_wr` (room checked for the whole batch); the slots of
            // `head..head+len` are free.
            let this = unsafe { self.build(i, self.head.wrapping_add(i as u32), wr) };
            if !prev.is_null() {
                // SAFETY: `prev` is element `i - 1`, ours.
                unsafe { (*prev).next = this };
            }
            prev = this;
        }
        let first = self.wrs.at(0);
        let mut bad: *mut ibv_recv_wr = core::ptr::null_mut();
        // SAFETY: as in `post_recv`, for the whole chain.
        let ret = unsafe { self.target.post(first, &mut bad) };
        if ret != 0 {
            // The provider posted the requests before `bad` and none from it on.
            let index = super::sq::chain_index(bad, first, wrs.len()).unwrap_or(0);
            self.head = self.head.wrapping_add(index as u32);
            self.shared.note_posted(self.head);
            return Err(BatchError {
                index,
                error: PostError::Verbs { errno: ret.abs() },
            });
        }
        self.head = self.head.wrapping_add(wrs.len() as u32);
        self.shared.note_posted(self.head);
        Ok(())
    }
}
