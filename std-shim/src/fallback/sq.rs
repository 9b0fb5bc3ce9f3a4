//! The fallback's send queue: validate, stage, post the chain at `ring`.

use std::sync::Arc;

use zverbs_core::{
    BatchError, CheckedBatch, CheckedSend, PostError, PostSend, SendOp, SendWr, Sge, SqCaps,
    WcOpcode,
};

use super::raw::{RawArray, sg_list};
use super::state::{SendSlot, SqShared};
use zverbs_ffi::types::*;

/// Requests the provider refused at [`ring`](PostSend::ring).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingError {
    /// The provider's errno.
    pub errno: i32,
    /// How many requests of the chain were not posted (they will never complete).
    pub dropped: u32,
    /// The caller's `wr_id` of the first request not posted.
    pub first_wr_id: u64,
}

/// A send queue driven through `ibv_post_send`.
#[derive(Debug)]
pub struct SendQueue {
    qp: *mut ibv_qp,
    post: PostSendFn,
    wrs: RawArray<ibv_send_wr>,
    sges: RawArray<Sge>,
    inline_buf: RawArray<u8>,
    /// Staged, not yet posted.
    staged: u32,
    /// Requests accepted (free-running); the next request's counter.
    pi: u32,
    /// Retired, last read from the credit word.
    ci: u32,
    sig_posted: u32,
    sig_done: u32,
    max_wr: u32,
    caps: SqCaps,
    shared: Arc<SqShared>,
    ring_error: Option<RingError>,
    /// What keeps the QP alive when the queue is the zverbs crate's (its `Qp`'s state);
    /// dropped last, after the staging memory.
    keep: Option<Arc<dyn std::any::Any + Send + Sync>>,
}

// SAFETY: the queue owns its staging memory; the QP pointer is only used to post, which
// libibverbs allows from any thread; shared state goes through `SqShared` (Sync).
unsafe impl Send for SendQueue {}

impl SendQueue {
    /// Drives the send queue of `qp` through its provider's `post_send`.
    ///
    /// # Safety
    ///
    /// - `qp` is a live QP (and its context live) while this value lives, and nothing else
    ///   posts to its send queue;
    /// - `max_send_wr` and `caps` are the QP's real capabilities (`ibv_qp_cap` after creation),
    ///   `caps.max_signaled` no more than its CQ can hold for it;
    /// - `shared` was made for this queue (`SqShared::new(max_send_wr)`), is bound to the
    ///   poller of the CQ that receives its send completions, and serves no other queue.
    ///
    /// Returns `None` if the provider has no `post_send` entry.
    pub unsafe fn new(
        qp: *mut ibv_qp,
        max_send_wr: u32,
        caps: SqCaps,
        shared: Arc<SqShared>,
    ) -> Option<Self> {
        // SAFETY: (caller) `qp` and its context are live.
        let post = unsafe { (*(*qp).context).ops.post_send }?;
        let max_wr = max_send_wr.max(1);
        let sges = (max_wr as usize) * (caps.max_send_sge.max(1) as usize);
        Some(Self {
            qp,
            post,
            wrs: RawArray::new(max_wr as usize, ibv_send_wr::ZERO),
            sges: RawArray::new(sges, Sge::default()),
            inline_buf: RawArray::new(max_wr as usize * caps.max_inline_data as usize, 0u8),
            staged: 0,
            pi: 0,
            ci: 0,
            sig_posted: 0,
            sig_done: 0,
            max_wr,
            caps,
            shared,
            ring_error: None,
            keep: None,
        })
    }

    /// Holds `owner` (what keeps the QP alive) for as long as the queue lives.
    pub(crate) fn keep_alive(mut self, owner: Arc<dyn std::any::Any + Send + Sync>) -> Self {
        self.keep = Some(owner);
        self
    }

    /// What keeps the QP alive, when the queue is the zverbs crate's.
    pub(crate) fn owner(&self) -> Option<&(dyn std::any::Any + Send + Sync)> {
        self.keep.as_deref()
    }

    /// The QP number.
    pub fn qpn(&self) -> u32 {
        // SAFETY: the QP is live while the queue lives (the constructor's contract).
        unsafe { (*self.qp).qp_num }
    }

    /// The limits the queue enforces.
    #[inline]
    pub fn caps(&self) -> SqCaps {
        self.caps
    }

    /// Requests staged and not yet rung.
    #[inline]
    pub fn pending(&self) -> u32 {
        self.staged
    }

    /// Free request slots, after taking the credits the poller returned.
    #[inline]
    pub fn free(&mut self) -> u32 {
        self.refresh();
        self.max_wr - self.pi.wrapping_sub(self.ci)
    }

    /// Signaled requests posted whose completions have not been polled.
    #[inline]
    pub fn outstanding_signaled(&mut self) -> u32 {
        self.refresh();
        self.sig_posted.wrapping_sub(self.sig_done)
    }

    /// The last refusal by the provider at `ring`, if not yet reported; clears it.
    pub fn take_ring_error(&mut self) -> Option<RingError> {
        self.ring_error.take()
    }

    #[inline(always)]
    fn refresh(&mut self) {
        let (ci, sig) = self.shared.load_done();
        self.ci = ci;
        self.sig_done = sig;
    }

    /// Checks `wr` against the queue's limits (the core's check) and that libibverbs has its
    /// operation. Writes nothing.
    #[inline(always)]
    fn check<'w>(&self, wr: &SendWr<'w>) -> Result<CheckedSend<'w>, PostError> {
        let checked = wr.check(&self.caps)?;
        supported(wr)?;
        Ok(checked)
    }

    /// Checks that `n` more requests, `signaled` of them signaled, fit now.
    #[inline(always)]
    fn check_room(&mut self, n: u32, signaled: u32) -> Result<(), PostError> {
        let fits = |q: &Self| {
            q.pi.wrapping_sub(q.ci) + n <= q.max_wr
                && q.sig_posted.wrapping_sub(q.sig_done) + signaled <= q.caps.max_signaled
        };
        if fits(self) {
            return Ok(());
        }
        self.refresh();
        let free = self.max_wr - self.pi.wrapping_sub(self.ci);
        if free < n {
            return Err(PostError::QueueFull { needed: n, free });
        }
        if self.sig_posted.wrapping_sub(self.sig_done) + signaled > self.caps.max_signaled {
            return Err(PostError::CqFull {
                limit: self.caps.max_signaled,
            });
        }
        Ok(())
    }

    /// Stages the checked request and records it.
    ///
    /// # Safety
    ///
    /// `checked` is the request's check against `self.caps`, the operation is supported (not a
    /// NOP: [`SendQueue::check`]), and room was checked; inline sources are readable (the
    /// posting contract of [`PostSend`]).
    #[inline(always)]
    unsafe fn stage_checked(&mut self, wr: &SendWr<'_>, checked: &CheckedSend<'_>) {
        let i = self.staged as usize;
        let slot_sges = self.caps.max_send_sge.max(1) as usize;
        let sg_base = self.sges.at(i * slot_sges);
        let sgl = checked.sgl();
        let signaled = checked.signaled();
        let mut out = ibv_send_wr::ZERO;
        out.wr_id = u64::from(self.pi);
        out.sg_list = sg_list(sg_base);
        // The flags pass through (`SendFlags` has libibverbs' values), SIGNALED as the check
        // says (the queue's `sig_all`).
        out.send_flags = checked.flags().bits();
        if let Some(imm) = wr.op.imm() {
            out.imm_data = imm.to_be();
        }
        let wc_opcode = match &wr.op {
            SendOp::Write { remote, .. } => {
                out.opcode = IBV_WR_RDMA_WRITE;
                out.wr.rdma = rdma(remote);
                WcOpcode::RdmaWrite
            }
            SendOp::WriteImm { remote, .. } => {
                out.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
                out.wr.rdma = rdma(remote);
                WcOpcode::RdmaWrite
            }
            SendOp::Send { .. } => {
                out.opcode = IBV_WR_SEND;
                WcOpcode::Send
            }
            SendOp::SendImm { .. } => {
                out.opcode = IBV_WR_SEND_WITH_IMM;
                WcOpcode::Send
            }
            SendOp::Read { remote, .. } => {
                out.opcode = IBV_WR_RDMA_READ;
                out.wr.rdma = rdma(remote);
                WcOpcode::RdmaRead
            }
            SendOp::CompareSwap {
                remote,
                compare,
                swap,
                ..
            } => {
                out.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
                out.wr.atomic = ibv_send_wr_atomic {
                    remote_addr: remote.addr,
                    compare_add: *compare,
                    swap: *swap,
                    rkey: remote.rkey,
                };
                WcOpcode::CompSwap
            }
            SendOp::FetchAdd { remote, add, .. } => {
                out.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
                out.wr.atomic = ibv_send_wr_atomic {
                    remote_addr: remote.addr,
                    compare_add: *add,
                    swap: 0,
                    rkey: remote.rkey,
                };
                WcOpcode::FetchAdd
            }
            // Refused before staging (the caller's contract): libibverbs has no NOP.
            SendOp::Nop => WcOpcode::Nop,
            SendOp::SendTo { dest, .. } => {
                out.opcode = IBV_WR_SEND;
                out.wr.ud = ud(dest);
                WcOpcode::Send
            }
            SendOp::SendToImm { dest, .. } => {
                out.opcode = IBV_WR_SEND_WITH_IMM;
                out.wr.ud = ud(dest);
                WcOpcode::Send
            }
        };
        if checked.is_inline() {
            let len = checked.inline_len();
            // Copy the payload now: the caller may reuse it when the post returns, and the
            // provider reads it only at `ring`.
            let dst = self.inline_buf.at(i * self.caps.max_inline_data as usize);
            let mut off = 0usize;
            for s in sgl {
                // SAFETY: (caller) each inline source is readable for `length` bytes; the
                // destination area holds `max_inline_data >= len` bytes for this request
                // (the check), and the two do not overlap (ours is private).
                unsafe {
                    core::ptr::copy_nonoverlapping(
                        std::ptr::with_exposed_provenance(s.addr as usize),
                        dst.add(off),
                        s.length as usize,
                    )
                };
                off += s.length as usize;
            }
            if len > 0 {
                // SAFETY: the request's first scatter entry is inside `sges`.
                unsafe { sg_base.write(Sge::new(dst as u64, len, 0)) };
                out.num_sge = 1;
            }
        } else {
            // The list (an atomic's one local entry): at most `max_send_sge` entries (the
            // check), or one.
            let local = wr.op.sgl();
            for (k, s) in local.iter().enumerate() {
                // SAFETY: `k < max(max_send_sge, 1)` (the check; atomics have one entry), so the
                // entry is inside this request's part of `sges`.
                unsafe { sg_base.add(k).write(*s) };
            }
            out.num_sge = local.len() as i32;
        }
        let this = self.wrs.at(i);
        // SAFETY: `i < max_wr`: every staged request holds a credit, and credits are at most
        // `max_wr`. The previous element, if any, is staged and ours.
        unsafe {
            this.write(out);
            if i > 0 {
                (*self.wrs.at(i - 1)).next = this;
            }
        }
        let slot = SendSlot {
            wr_id: wr.wr_id,
            opcode: wc_opcode,
            imm: wr.op.imm().is_some(),
            signaled,
        };
        // SAFETY: room was checked, so the slot of `pi` is retired; the request is unposted.
        unsafe { self.shared.record(self.pi, slot) };
        self.pi = self.pi.wrapping_add(1);
        self.sig_posted = self.sig_posted.wrapping_add(u32::from(signaled));
        self.staged += 1;
    }

    /// Reports a refusal left from the last `ring`.
    #[inline(always)]
    fn pending_refusal(&mut self) -> Result<(), PostError> {
        match self.ring_error {
            None => Ok(()),
            Some(e) => {
                self.ring_error = None;
                Err(PostError::Verbs { errno: e.errno })
            }
        }
    }
}

impl PostSend for SendQueue {
    #[inline]
    unsafe fn stage(&mut self, wr: &SendWr<'_>) -> Result<(), PostError> {
        self.pending_refusal()?;
        let checked = self.check(wr)?;
        if !self.shared.gate().is_open() {
            return Err(PostError::NotReady);
        }
        if self.staged == 0 {
            self.take_markers();
        }
        self.check_room(1, u32::from(checked.signaled()))?;
        // SAFETY: checked, supported, room checked; the caller upholds the posting contract.
        unsafe { self.stage_checked(wr, &checked) };
        Ok(())
    }

    /// Stages and rings; a refusal by the provider is this post's error at once (not the
    /// next one's, as after a batch's ring).
    #[inline]
    unsafe fn post(&mut self, wr: &SendWr<'_>) -> Result<(), PostError> {
        // SAFETY: (caller) the posting contract.
        unsafe { self.stage(wr) }?;
        self.ring();
        self.pending_refusal()
    }

    #[inline]
    fn ring(&mut self) {
        if self.staged == 0 {
            return;
        }
        let head = self.wrs.at(0);
        // SAFETY: the last staged request ends the chain.
        unsafe { (*self.wrs.at(self.staged as usize - 1)).next = core::ptr::null_mut() };
        let mut bad: *mut ibv_send_wr = core::ptr::null_mut();
        // SAFETY: (constructor) the QP is live and only this queue posts to it; the chain and
        // its scatter lists are in our staging arrays, which outlive the call.
        let ret = unsafe { (self.post)(self.qp, head, &mut bad) };
        if ret != 0 {
            self.refused(ret, bad);
        }
        self.shared.note_posted(self.pi);
        self.staged = 0;
    }

    unsafe fn post_all(&mut self, wrs: &[SendWr<'_>]) -> Result<(), BatchError> {
        self.pending_refusal()
            .map_err(|error| BatchError { index: 0, error })?;
        if self.staged == 0 && self.shared.gate().is_open() {
            self.take_markers();
        }
        let caps = self.caps;
        let (mut n, mut signaled) = (0u32, 0u32);
        let batch = CheckedBatch::check(wrs, &caps, |wr, checked| {
            supported(wr)?;
            n += 1;
            signaled += u32::from(checked.signaled());
            if !self.shared.gate().is_open() {
                return Err(PostError::NotReady);
            }
            self.check_room(n, signaled)
        })?;
        for (wr, checked) in batch.iter() {
            // SAFETY: checked and supported (the batch's check), room for the whole batch
            // checked; the caller upholds the posting contract for every request.
            unsafe { self.stage_checked(wr, &checked) };
        }
        self.ring();
        Ok(())
    }
}

impl SendQueue {
    /// Counts the drain markers the control path posted since this queue last rang (each one
    /// signaled request with a counter of its own, [`post_drain_marker`]): the next request's
    /// counter follows them. One load and a compare when there are none.
    #[inline(always)]
    fn take_markers(&mut self) {
        let posted = self.shared.posted();
        if posted != self.pi {
            self.skip_markers(posted);
        }
    }

    #[cold]
    fn skip_markers(&mut self, posted: u32) {
        let markers = posted.wrapping_sub(self.pi);
        self.pi = posted;
        self.sig_posted = self.sig_posted.wrapping_add(markers);
    }

    /// Unwinds the requests from `bad` on, which the provider did not post.
    #[cold]
    fn refused(&mut self, ret: i32, bad: *mut ibv_send_wr) {
        let base = self.wrs.at(0);
        let staged = self.staged as usize;
        let mut first = 0usize;
        if let Some(i) = chain_index(bad, base, staged) {
            first = i;
        }
        let dropped = (staged - first) as u32;
        let mut sig = 0u32;
        for i in first..staged {
            // SAFETY: `i < staged`, inside the array.
            sig += u32::from(unsafe { (*self.wrs.at(i)).send_flags } & IBV_SEND_SIGNALED != 0);
        }
        self.pi = self.pi.wrapping_sub(dropped);
        self.sig_posted = self.sig_posted.wrapping_sub(sig);
        // SAFETY: `first < staged`, inside the array.
        let counter = unsafe { (*self.wrs.at(first)).wr_id } as u32;
        // SAFETY: the request was recorded by `stage` and never posted, so its slot is still
        // the poster's alone.
        let first_wr_id = unsafe { self.shared.peek(counter) }.wr_id;
        self.ring_error = Some(RingError {
            errno: ret.abs(),
            dropped,
            first_wr_id,
        });
    }
}

/// The index of `bad` in the chain of `len` elements starting at `base`, computed on addresses
/// (the provider's pointer is not trusted to be in the array).
pub(super) fn chain_index<T>(bad: *const T, base: *const T, len: usize) -> Option<usize> {
    let size = core::mem::size_of::<T>();
    let off = (bad as usize).checked_sub(base as usize)?;
    (off.is_multiple_of(size) && off / size < len).then_some(off / size)
}

/// [`PostError::Unsupported`] for a NOP, which libibverbs has not, and for a datagram whose
/// destination has no verbs address handle; checked after the core's
/// check, so a request that is also invalid gets the same error from both backends.
#[inline(always)]
fn supported(wr: &SendWr<'_>) -> Result<(), PostError> {
    match wr.op {
        SendOp::Nop => Err(PostError::Unsupported),
        // A destination without a verbs address handle (made for the direct path alone).
        SendOp::SendTo { dest, .. } | SendOp::SendToImm { dest, .. } if dest.ah == 0 => {
            Err(PostError::Unsupported)
        }
        _ => Ok(()),
    }
}

/// The datagram half of a UD SEND: the verbs address handle, the QPN and the Q_Key.
#[inline(always)]
fn ud(dest: &zverbs_core::UdDest) -> ibv_send_wr_ud {
    ibv_send_wr_ud {
        ah: dest.ah as *mut _,
        remote_qpn: dest.remote_qpn & 0xff_ffff,
        remote_qkey: dest.qkey,
    }
}

/// The remote half of an RDMA WRITE or READ.
#[inline(always)]
fn rdma(remote: &zverbs_core::RemoteBuf) -> ibv_send_wr_rdma {
    ibv_send_wr_rdma {
        remote_addr: remote.addr,
        rkey: remote.rkey,
    }
}

/// Posts a drain marker to the send queue of `qp`, a queue pair in the error state (see
/// `zverbs_mlx5dv::post_drain_marker`, which the direct path uses): a zero-length RDMA WRITE
/// asking for a completion, with the next counter of `shared` as its `wr_id`, recorded with
/// [`DRAIN_WR_ID`](zverbs_mlx5dv::DRAIN_WR_ID). The device flushes it, and its completion
/// retires every request before it. Returns `Ok(false)`, having posted nothing, when the
/// slot table is full; the provider's errno when it refuses.
///
/// # Safety
///
/// `qp` is a live QP whose send queue `shared` serves; no send queue posts to it from before
/// this call until the next post after it is reset (the queue then counts the marker,
/// `SendQueue::take_markers`).
pub(crate) unsafe fn post_drain_marker(qp: *mut ibv_qp, shared: &SqShared) -> Result<bool, i32> {
    // SAFETY: (caller) `qp` and its context are live.
    let Some(post) = (unsafe { (*(*qp).context).ops.post_send }) else {
        return Err(libc::EOPNOTSUPP);
    };
    let counter = shared.posted();
    if counter.wrapping_sub(shared.load_done().0) >= shared.capacity() {
        return Ok(false);
    }
    let slot = SendSlot {
        wr_id: zverbs_mlx5dv::DRAIN_WR_ID,
        opcode: zverbs_core::WcOpcode::RdmaWrite,
        imm: false,
        signaled: true,
    };
    // SAFETY: the slot of `counter` is retired (checked above) and (caller) no queue posts.
    unsafe { shared.record(counter, slot) };
    let mut wr = ibv_send_wr::ZERO;
    wr.wr_id = u64::from(counter);
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    let mut bad: *mut ibv_send_wr = core::ptr::null_mut();
    // SAFETY: (caller) a live QP; the request has no scatter list and lives for the call.
    let ret = unsafe { post(qp, &mut wr, &mut bad) };
    if ret != 0 {
        return Err(ret.abs());
    }
    shared.note_posted(counter.wrapping_add(1));
    Ok(true)
}
