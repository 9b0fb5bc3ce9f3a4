//! The fallback's completion queue poller: `ibv_poll_cq` into a preallocated `ibv_wc` array,
//! translated into [`Completion`]s.

use std::sync::Arc;

use zverbs_core::{Completion, PollCq, PollCqTimed, TimedCompletion, WcFlags, WcOpcode, WcStatus};

use super::raw::RawArray;
use super::state::{RECV_TAG, RqShared, SqShared};
use zverbs_ffi::types::*;

/// Which queues of one QP a poller serves.
#[derive(Clone, Debug)]
pub struct Binding {
    /// The QP number completions name.
    pub qpn: u32,
    /// The send queue's state, if its completions go to this CQ.
    pub sq: Option<Arc<SqShared>>,
    /// The receive queue's state, if its completions go to this CQ.
    pub rq: Option<Arc<RqShared>>,
    /// Whether the QP takes its receives from a shared receive queue and completes them on
    /// this CQ: their `wr_id`s are the caller's, as posted by [`SrqQueue`](super::SrqQueue).
    pub srq: bool,
}

/// The bit of [`Binding::qpn`] that marks a keyed binding, above every QP number.
pub(crate) const KEYED: u32 = 1 << 31;

impl Binding {
    /// The binding of a receive queue whose receives carry `key` in their `wr_id`
    /// (`RecvQueue::keyed`: a raw packet QP's or a receive work queue's), whose completions
    /// name no QP the poller knows.
    pub(crate) fn keyed(key: u32, rq: Arc<RqShared>) -> Self {
        Self {
            qpn: KEYED | (key & super::rq::KEY_MASK),
            sq: None,
            rq: Some(rq),
            srq: false,
        }
    }
}

/// A CQ polled through `ibv_poll_cq`.
#[derive(Debug)]
pub struct Poller {
    cq: *mut ibv_cq,
    poll: PollCqFn,
    wcs: RawArray<ibv_wc>,
    bindings: Box<[Binding]>,
    last: usize,
    error: Option<i32>,
    /// The CQ as an extended CQ with completion timestamps, if it was created as one.
    cq_ex: Option<core::ptr::NonNull<ibv_cq_ex>>,
    /// Where the control path hands over new bindings, if anywhere (`set_handover`).
    joins: Option<core::ptr::NonNull<zverbs_core::handover::Handover<Box<[Binding]>>>>,
}

// SAFETY: the poller owns its `ibv_wc` array; libibverbs allows polling a CQ from any thread
// (one at a time, which `&mut self` ensures); shared state goes through Sync types.
unsafe impl Send for Poller {}

impl Poller {
    /// Polls `cq`, at most `batch` completions per `ibv_poll_cq` call.
    ///
    /// # Safety
    ///
    /// - `cq` is a live CQ (and its context live) while this value lives, and nothing else polls
    ///   it;
    /// - each binding names a QP whose completions go to this CQ, with the states its fallback
    ///   queues were built with.
    ///
    /// Returns `None` if the provider has no `poll_cq` entry.
    pub unsafe fn new(cq: *mut ibv_cq, batch: u32, bindings: Box<[Binding]>) -> Option<Self> {
        // SAFETY: (caller) `cq` and its context are live.
        let poll = unsafe { (*(*cq).context).ops.poll_cq }?;
        Some(Self {
            cq,
            poll,
            wcs: RawArray::new(batch.max(1) as usize, ibv_wc::default()),
            bindings,
            last: 0,
            error: None,
            cq_ex: None,
            joins: None,
        })
    }

    /// Takes new bindings from `handover` from now on, as the direct poller does
    /// (`zverbs_mlx5dv::CompletionQueue::set_handover`): when a completion names a QP the
    /// bindings lack, and at [`Poller::adopt`].
    ///
    /// # Safety
    ///
    /// `handover` outlives the poller; this is its one poller; the tables published there
    /// obey [`Poller::new`]'s contract for bindings.
    pub unsafe fn set_handover(
        &mut self,
        handover: core::ptr::NonNull<zverbs_core::handover::Handover<Box<[Binding]>>>,
    ) {
        self.joins = Some(handover);
    }

    /// Whether the bindings have QP `qpn` now.
    pub fn serves(&self, qpn: u32) -> bool {
        self.bindings.iter().any(|b| b.qpn == qpn)
    }

    /// Adopts the bindings waiting in the hand-over, if any. Returns whether there were.
    #[cold]
    #[inline(never)]
    pub fn adopt(&mut self) -> bool {
        let Some(h) = self.joins else {
            return false;
        };
        // SAFETY: (`set_handover`) the hand-over outlives the poller.
        let h = unsafe { h.as_ref() };
        if !h.pending() {
            return false;
        }
        // SAFETY: the one poller; the tables obey the bindings' contract.
        unsafe { h.adopt(|t| core::mem::swap(&mut self.bindings, t)) };
        self.last = 0;
        true
    }

    /// The errno of the last failed `ibv_poll_cq`, if any; clears it. A failed poll returns 0
    /// completions.
    pub fn take_error(&mut self) -> Option<i32> {
        self.error.take()
    }

    /// The index of the binding for `qpn`, trying the last match first.
    #[inline(always)]
    fn binding(&mut self, qpn: u32) -> Option<usize> {
        if let Some(x) = self.bindings.get(self.last)
            && x.qpn == qpn
        {
            return Some(self.last);
        }
        let i = match self.bindings.iter().position(|x| x.qpn == qpn) {
            Some(i) => i,
            // A QP created after the bindings: its table waits in the hand-over.
            None if self.adopt() => self.bindings.iter().position(|x| x.qpn == qpn)?,
            None => return None,
        };
        self.last = i;
        Some(i)
    }

    /// The index of the binding `wc` is for: a keyed receive's ([`Binding::keyed`]) by the
    /// key in its `wr_id`, else by its QP number.
    #[inline(always)]
    fn binding_of(&mut self, wc: &ibv_wc) -> Option<usize> {
        let key = (wc.wr_id >> 32) as u32 & super::rq::KEY_MASK;
        if wc.wr_id & RECV_TAG != 0
            && key != 0
            && let Some(i) = self.binding(KEYED | key)
        {
            return Some(i);
        }
        self.binding(wc.qp_num)
    }

    /// Translates one work completion.
    #[inline(always)]
    fn convert(&mut self, wc: &ibv_wc, out: &mut Completion) {
        let status = WcStatus::from_raw(wc.status);
        out.status = status;
        out.qp_num = wc.qp_num;
        out.vendor_err = wc.vendor_err;
        out.imm = 0;
        out.flags = WcFlags::NONE;
        out.byte_len = 0;
        out.src_qp = 0;
        out.slid = 0;
        out.pkey_index = 0;
        out.sl = 0;
        out.dlid_path_bits = 0;
        let counter = wc.wr_id as u32;
        let found = self.binding_of(wc);
        let binding = found.and_then(|i| self.bindings.get(i));
        if !status.is_success() {
            error_closes(binding);
        }
        match (wc.wr_id & RECV_TAG != 0, binding) {
            (_, Some(Binding { srq: true, sq, .. }))
                if wc.opcode & WC_RECV != 0 || sq.is_none() =>
            {
                // A receive from the SRQ: the caller's `wr_id`, as posted. (An error completion's
                // opcode is the provider's guess; a QP whose send queue completes here too has
                // its flushed receives told from its sends by it.)
                out.wr_id = wc.wr_id;
                out.opcode = WcOpcode::Recv;
                if status.is_success() {
                    out.opcode = WcOpcode::from_raw(wc.opcode);
                    received(wc, out);
                }
            }
            (false, Some(Binding { sq: Some(sq), .. })) => {
                // SAFETY: the only poller of this queue; libibverbs reported the request.
                let slot = unsafe { sq.retire(counter) };
                out.wr_id = slot.wr_id;
                out.opcode = slot.opcode;
                if status.is_success() {
                    out.byte_len = match slot.opcode {
                        WcOpcode::RdmaRead => wc.byte_len,
                        WcOpcode::CompSwap | WcOpcode::FetchAdd => 8,
                        _ => 0,
                    };
                    if slot.imm {
                        out.flags = WcFlags::WITH_IMM;
                    }
                }
            }
            (true, Some(Binding { rq: Some(rq), .. })) => {
                // SAFETY: the only poller of this queue; receives complete in order.
                out.wr_id = unsafe { rq.retire() };
                out.opcode = WcOpcode::Recv;
                if status.is_success() {
                    out.opcode = WcOpcode::from_raw(wc.opcode);
                    received(wc, out);
                }
            }
            _ => unknown(wc, out),
        }
    }
}

/// What a successful receive completion says of the message: its length, flags and
/// immediate, and where it came from (the sending QP, LID, SL, P_Key index and path bits: a
/// datagram's source, as the direct path reports them).
#[inline(always)]
fn received(wc: &ibv_wc, out: &mut Completion) {
    out.byte_len = wc.byte_len;
    out.flags = WcFlags::from_ibv(wc.wc_flags);
    if out.flags.contains(WcFlags::WITH_IMM) {
        out.imm = u32::from_be(wc.imm_data);
    }
    out.src_qp = wc.src_qp;
    out.slid = wc.slid;
    out.pkey_index = wc.pkey_index;
    out.sl = wc.sl;
    out.dlid_path_bits = wc.dlid_path_bits;
}

/// `IBV_WC_RECV`: the bit every receive opcode of `enum ibv_wc_opcode` has.
const WC_RECV: u32 = 1 << 7;

/// An error completion: the QP is in the error state, so its queues refuse posts from now on.
#[cold]
fn error_closes(binding: Option<&Binding>) {
    if let Some(b) = binding {
        if let Some(sq) = &b.sq {
            sq.gate().close();
        }
        if let Some(rq) = &b.rq {
            rq.gate().close();
        }
    }
}

/// A completion for a queue this poller was not given: reported, nothing retired.
#[cold]
fn unknown(wc: &ibv_wc, out: &mut Completion) {
    out.wr_id = wc.wr_id;
    out.status = WcStatus::GeneralErr;
    out.opcode = WcOpcode::from_raw(wc.opcode);
}

impl PollCq for Poller {
    #[inline]
    fn poll(&mut self, out: &mut [Completion]) -> usize {
        let n = out.len().min(self.wcs.len());
        if n == 0 {
            return 0;
        }
        let wcs = self.wcs.at(0);
        // SAFETY: (constructor) the CQ is live and polled only here; `wcs` has room for `n`.
        let ret = unsafe { (self.poll)(self.cq, n as i32, wcs) };
        if ret < 0 {
            self.error = Some(-ret);
            return 0;
        }
        let got = (ret as usize).min(n);
        for (i, o) in out.iter_mut().enumerate().take(got) {
            // SAFETY: the provider filled the first `got` entries.
            let wc = unsafe { *self.wcs.at(i) };
            self.convert(&wc, o);
        }
        got
    }
}

impl Poller {
    /// Reads timestamps from now on: [`PollCqTimed::poll_timed`] polls `cq_ex` with
    /// `ibv_start_poll` / `ibv_next_poll` / `ibv_end_poll` and reports each completion's
    /// `ibv_wc_read_completion_ts`. Without it, `poll_timed` polls as
    /// [`PollCq::poll`] and reports no timestamps.
    ///
    /// # Safety
    ///
    /// `cq_ex` is this poller's CQ (`ibv_cq_ex_to_cq(cq_ex)` is the CQ it was made with),
    /// created by `ibv_create_cq_ex` with `IBV_WC_STANDARD_FLAGS` and
    /// `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`.
    pub unsafe fn set_cq_ex(&mut self, cq_ex: *mut ibv_cq_ex) {
        self.cq_ex = core::ptr::NonNull::new(cq_ex);
    }

    /// The current completion of the extended CQ `cq` as an `ibv_wc`, and its timestamp.
    ///
    /// # Safety
    ///
    /// `cq` is between a successful `start_poll` / `next_poll` and `end_poll`, with the
    /// readers of the fields it was created with.
    unsafe fn read_ex(cq: *mut ibv_cq_ex) -> (ibv_wc, u64) {
        // SAFETY: (caller) a current completion; each reader is the provider's for it.
        unsafe {
            let c = &*cq;
            let u32_of = |f: Option<CqExReadU32>| f.map_or(0, |f| f(cq));
            let u8_of = |f: Option<CqExReadU8>| f.map_or(0, |f| f(cq));
            let wc = ibv_wc {
                wr_id: c.wr_id,
                status: c.status,
                opcode: u32_of(c.read_opcode),
                vendor_err: u32_of(c.read_vendor_err),
                byte_len: u32_of(c.read_byte_len),
                imm_data: u32_of(c.read_imm_data),
                qp_num: u32_of(c.read_qp_num),
                src_qp: u32_of(c.read_src_qp),
                wc_flags: u32_of(c.read_wc_flags),
                pkey_index: 0,
                slid: u32_of(c.read_slid) as u16,
                sl: u8_of(c.read_sl),
                dlid_path_bits: u8_of(c.read_dlid_path_bits),
            };
            (wc, c.read_completion_ts.map_or(0, |f| f(cq)))
        }
    }
}

impl PollCqTimed for Poller {
    fn poll_timed(&mut self, out: &mut [TimedCompletion]) -> usize {
        let Some(cq) = self.cq_ex.map(|p| p.as_ptr()) else {
            // A CQ without timestamps: as `poll`, one batch at a time.
            let mut n = 0;
            let mut wc = [Completion::EMPTY; 16];
            while n < out.len() {
                let want = (out.len() - n).min(wc.len());
                let got = self.poll(&mut wc[..want]);
                for (o, w) in out[n..].iter_mut().zip(&wc[..got]) {
                    *o = TimedCompletion {
                        wc: *w,
                        timestamp: None,
                    };
                }
                n += got;
                if got < want {
                    break;
                }
            }
            return n;
        };
        if out.is_empty() {
            return 0;
        }
        // SAFETY: (set_cq_ex) a live extended CQ polled only here; the entries are the
        // provider's, read between start and end.
        unsafe {
            let (Some(start), Some(next), Some(end)) =
                ((*cq).start_poll, (*cq).next_poll, (*cq).end_poll)
            else {
                self.error = Some(libc::EOPNOTSUPP);
                return 0;
            };
            let mut attr = ibv_poll_cq_attr::default();
            match start(cq, &mut attr) {
                0 => {}
                libc::ENOENT => return 0,
                e => {
                    self.error = Some(e);
                    return 0;
                }
            }
            let mut n = 0;
            loop {
                let (wc, ts) = Self::read_ex(cq);
                self.convert(&wc, &mut out[n].wc);
                // As the direct path: an error CQE has no timestamp.
                out[n].timestamp = (wc.status == 0).then_some(ts);
                n += 1;
                if n == out.len() {
                    break;
                }
                match next(cq) {
                    0 => {}
                    libc::ENOENT => break,
                    e => {
                        self.error = Some(e);
                        break;
                    }
                }
            }
            end(cq);
            n
        }
    }
}
