//! A fake provider for unit tests: an `ibv_context` whose `ops` entries record every call.
//!
//! Recording goes into vectors reserved up front, so that the zero-allocation tests can run
//! the fake without allocating (as long as they stay within the reserved capacity).

use std::cell::RefCell;
use std::collections::VecDeque;

use zverbs_core::Sge;

use zverbs_ffi::types::*;

/// The QP number the fake QP reports.
pub(crate) const QPN: u32 = 0x1234;

/// One `ibv_send_wr` as the provider saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SeenSend {
    pub(crate) wr_id: u64,
    pub(crate) opcode: u32,
    pub(crate) send_flags: u32,
    pub(crate) imm_data: u32,
    pub(crate) sges: [Sge; 4],
    pub(crate) num_sge: i32,
    pub(crate) remote_addr: u64,
    pub(crate) rkey: u32,
    pub(crate) compare_add: u64,
    pub(crate) swap: u64,
    pub(crate) atomic_rkey: u32,
    /// The first bytes the scatter list points to, read during the call (inline payloads).
    pub(crate) payload: [u8; 32],
    /// `wr.ud` (address handle, remote QPN, remote Q_Key), read on a UD QP.
    pub(crate) ud: Option<(usize, u32, u32)>,
}

/// One `ibv_recv_wr` as the provider saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SeenRecv {
    pub(crate) wr_id: u64,
    pub(crate) sges: [Sge; 4],
    pub(crate) num_sge: i32,
}

/// What the fake saw and what it answers.
#[derive(Debug, Default)]
pub(crate) struct Fake {
    /// Every `post_send` call: the chain's requests.
    pub(crate) sends: Vec<SeenSend>,
    /// Length of each `post_send` chain, in call order.
    pub(crate) send_calls: Vec<usize>,
    pub(crate) recvs: Vec<SeenRecv>,
    pub(crate) recv_calls: Vec<usize>,
    pub(crate) poll_calls: usize,
    /// Refuse the next `post_send` at this chain index with this errno.
    pub(crate) refuse_send: Option<(usize, i32)>,
    /// Refuse the next `post_recv` at this chain index with this errno.
    pub(crate) refuse_recv: Option<(usize, i32)>,
    /// Make the next `poll_cq` fail with this (negative) value.
    pub(crate) poll_fail: Option<i32>,
    /// Completions `poll_cq` hands out.
    pub(crate) cq: VecDeque<ibv_wc>,
    /// Push a success completion for every signaled send request.
    pub(crate) auto_complete: bool,
}

thread_local! {
    pub(crate) static FAKE: RefCell<Fake> = RefCell::new(Fake::default());
}

/// Resets the fake and reserves room for `n` records of each kind.
pub(crate) fn reset(n: usize) {
    FAKE.with(|f| {
        let mut f = f.borrow_mut();
        *f = Fake::default();
        f.sends.reserve(n);
        f.send_calls.reserve(n);
        f.recvs.reserve(n);
        f.recv_calls.reserve(n);
        f.cq.reserve(n);
    });
}

/// Runs `g` on the fake's state.
pub(crate) fn with<R>(g: impl FnOnce(&mut Fake) -> R) -> R {
    FAKE.with(|f| g(&mut f.borrow_mut()))
}

unsafe extern "C" fn post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad: *mut *mut ibv_send_wr,
) -> i32 {
    with(|f| {
        let mut w = wr;
        let mut i = 0usize;
        while !w.is_null() {
            if let Some((at, errno)) = f.refuse_send
                && at == i
            {
                f.refuse_send = None;
                // SAFETY: `bad` is the caller's out-pointer.
                unsafe { *bad = w };
                f.send_calls.push(i);
                return errno;
            }
            // SAFETY: the chain is valid for the call (the code under test promises it).
            let r = unsafe { &*w };
            let mut sges = [Sge::default(); 4];
            let n = (r.num_sge.max(0) as usize).min(4);
            let mut payload = [0u8; 32];
            for (k, s) in sges.iter_mut().enumerate().take(n) {
                // SAFETY: `num_sge` entries are valid, and an `Sge` is a `struct ibv_sge`.
                *s = unsafe { *r.sg_list.add(k).cast::<Sge>() };
            }
            if n > 0 && sges[0].addr != 0 {
                let len = (sges[0].length as usize).min(32);
                // SAFETY: the first entry's bytes are readable during the call (test buffers).
                unsafe {
                    core::ptr::copy_nonoverlapping(
                        std::ptr::with_exposed_provenance(sges[0].addr as usize),
                        payload.as_mut_ptr(),
                        len,
                    )
                };
            }
            // The view of the `wr` union that the opcode selects, as a provider reads it: the
            // other view's bytes need not be initialised (the rdma view's padding is not).
            let atomic_op = matches!(
                r.opcode,
                IBV_WR_ATOMIC_CMP_AND_SWP | IBV_WR_ATOMIC_FETCH_AND_ADD
            );
            // SAFETY: `qp` is the fake QP.
            let ud = if unsafe { (*qp).qp_type } == IBV_QPT_UD {
                // SAFETY: the code under test writes the ud view for a UD QP's sends.
                let u = unsafe { r.wr.ud };
                Some((u.ah as usize, u.remote_qpn, u.remote_qkey))
            } else {
                None
            };
            let (rdma, atomic) = if ud.is_some() {
                Default::default()
            } else if atomic_op {
                // SAFETY: the code under test writes the atomic view for atomic requests.
                let a = unsafe { r.wr.atomic };
                let rdma = ibv_send_wr_rdma {
                    remote_addr: a.remote_addr,
                    rkey: a.rkey,
                };
                (rdma, a)
            } else {
                // SAFETY: and the rdma view for the others (zero for SEND and NOP).
                (unsafe { r.wr.rdma }, ibv_send_wr_atomic::default())
            };
            f.sends.push(SeenSend {
                wr_id: r.wr_id,
                opcode: r.opcode,
                send_flags: r.send_flags,
                imm_data: r.imm_data,
                sges,
                num_sge: r.num_sge,
                remote_addr: rdma.remote_addr,
                rkey: rdma.rkey,
                compare_add: atomic.compare_add,
                swap: atomic.swap,
                atomic_rkey: atomic.rkey,
                payload,
                ud,
            });
            if f.auto_complete && r.send_flags & IBV_SEND_SIGNALED != 0 {
                f.cq.push_back(ibv_wc {
                    wr_id: r.wr_id,
                    // SAFETY: `qp` is the fake QP.
                    qp_num: unsafe { (*qp).qp_num },
                    ..ibv_wc::default()
                });
            }
            w = r.next;
            i += 1;
        }
        f.send_calls.push(i);
        0
    })
}

unsafe extern "C" fn post_recv(
    _qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> i32 {
    with(|f| {
        let mut w = wr;
        let mut i = 0usize;
        while !w.is_null() {
            if let Some((at, errno)) = f.refuse_recv
                && at == i
            {
                f.refuse_recv = None;
                // SAFETY: `bad` is the caller's out-pointer.
                unsafe { *bad = w };
                f.recv_calls.push(i);
                return errno;
            }
            // SAFETY: the chain is valid for the call.
            let r = unsafe { &*w };
            let mut sges = [Sge::default(); 4];
            for (k, s) in sges
                .iter_mut()
                .enumerate()
                .take((r.num_sge.max(0) as usize).min(4))
            {
                // SAFETY: `num_sge` entries are valid, and an `Sge` is a `struct ibv_sge`.
                *s = unsafe { *r.sg_list.add(k).cast::<Sge>() };
            }
            f.recvs.push(SeenRecv {
                wr_id: r.wr_id,
                sges,
                num_sge: r.num_sge,
            });
            w = r.next;
            i += 1;
        }
        f.recv_calls.push(i);
        0
    })
}

unsafe extern "C" fn post_srq_recv(
    _srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> i32 {
    // SAFETY: the receive recorder ignores its queue argument; the chain is the caller's.
    unsafe { post_recv(core::ptr::null_mut(), wr, bad) }
}

unsafe extern "C" fn poll_cq(_cq: *mut ibv_cq, n: i32, wc: *mut ibv_wc) -> i32 {
    with(|f| {
        f.poll_calls += 1;
        if let Some(r) = f.poll_fail.take() {
            return r;
        }
        let mut k = 0;
        while k < n {
            let Some(c) = f.cq.pop_front() else { break };
            // SAFETY: the caller gave room for `n` entries.
            unsafe { wc.add(k as usize).write(c) };
            k += 1;
        }
        k
    })
}

/// A fake context, QP and CQ, heap-allocated once so their addresses are stable; freed on
/// drop.
pub(crate) struct FakeDevice {
    ctx: *mut ibv_context,
    qp: *mut ibv_qp,
    cq: *mut ibv_cq,
    srq: *mut ibv_srq,
}

impl FakeDevice {
    pub(crate) fn new() -> Self {
        // SAFETY: these structs are plain data for which all-zero bytes are valid (null
        // pointers, `None` function entries, zeroed pthread objects).
        let mut ctx: Box<ibv_context> = Box::new(unsafe { core::mem::zeroed() });
        ctx.ops.post_send = Some(post_send);
        ctx.ops.post_recv = Some(post_recv);
        ctx.ops.poll_cq = Some(poll_cq);
        ctx.ops.post_srq_recv = Some(post_srq_recv);
        // SAFETY: as above.
        let mut qp: Box<ibv_qp> = Box::new(unsafe { core::mem::zeroed() });
        // SAFETY: as above.
        let mut cq: Box<ibv_cq> = Box::new(unsafe { core::mem::zeroed() });
        let ctx = Box::into_raw(ctx);
        qp.context = ctx;
        qp.qp_num = QPN;
        cq.context = ctx;
        // SAFETY: as above.
        let mut srq: Box<ibv_srq> = Box::new(unsafe { core::mem::zeroed() });
        srq.context = ctx;
        Self {
            ctx,
            qp: Box::into_raw(qp),
            cq: Box::into_raw(cq),
            srq: Box::into_raw(srq),
        }
    }

    pub(crate) fn qp(&self) -> *mut ibv_qp {
        self.qp
    }

    pub(crate) fn cq(&self) -> *mut ibv_cq {
        self.cq
    }

    pub(crate) fn srq(&self) -> *mut ibv_srq {
        self.srq
    }

    /// Makes the fake QP a UD QP: its sends are read through `wr.ud`.
    pub(crate) fn set_ud(&self) {
        // SAFETY: the QP is ours, and no call is running on it.
        unsafe { (*self.qp).qp_type = IBV_QPT_UD };
    }
}

impl Drop for FakeDevice {
    fn drop(&mut self) {
        // SAFETY: each pointer came from `Box::into_raw` in `new` and is freed once.
        unsafe {
            drop(Box::from_raw(self.qp));
            drop(Box::from_raw(self.cq));
            drop(Box::from_raw(self.srq));
            drop(Box::from_raw(self.ctx));
        }
    }
}
