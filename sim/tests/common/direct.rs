//! Queues of the direct path (`zverbs_mlx5dv`) over objects of the software device, leaked so
//! that they live as long as the device (which the tests leak too): a registered arena, a
//! shared receive queue, a send queue's state with the CQ that completes it, and draining a
//! CQ.

use zverbs_core::{Completion, PollCq};
use zverbs_mlx5dv::{
    CompletionQueue, CqBinding, CqLayout, RqRef, SharedRecvQueue, SqRef, SqState, SrqLayout,
    SrqRef, SrqSlot, SrqState,
};
use zverbs_sim::{Access, CqConfig, Device, Mr, QpConfig, QpType, SimCq, SimQp, SimSrq, SrqConfig};

use super::Arena;

/// `v`, leaked.
pub fn leak<T>(v: T) -> &'static T {
    Box::leak(Box::new(v))
}

/// A poller of the direct path whose bindings live as long as the process.
pub type Cq =
    CompletionQueue<&'static [CqBinding<SqRef<'static>, RqRef<'static>, SrqRef<'static>>]>;

/// A new device and an arena of `len` bytes, both leaked, the arena registered on the device
/// with every right.
pub fn device_with_arena(len: usize) -> (&'static Device, &'static Arena, Mr) {
    let mem = leak(Arena::new(len));
    let dev = leak(Device::new());
    // SAFETY: both are leaked: the arena outlives the device's use of it.
    let mr = unsafe { dev.reg_mr(mem.ptr(0), mem.len(), Access::ALL) }.unwrap();
    (dev, mem, mr)
}

/// The layout of the software device's SRQ `s`, as `mlx5dv_init_obj` would report it.
pub fn srq_layout(s: &SimSrq) -> SrqLayout {
    SrqLayout {
        srqn: s.srqn,
        buf: s.buf,
        dbrec: s.dbrec,
        stride: s.stride,
        wqe_cnt: s.wqe_cnt,
        head: s.head,
        tail: s.tail,
    }
}

/// A new SRQ on `dev` driven by the direct path.
pub struct DirectSrq {
    /// The device's SRQ.
    pub sim: SimSrq,
    /// Its layout.
    pub layout: SrqLayout,
    /// Its state: bind it to the CQ its QPs complete receives on.
    pub state: SrqRef<'static>,
    /// The queue that posts to it (the only one).
    pub queue: SharedRecvQueue<SrqRef<'static>>,
}

impl DirectSrq {
    /// Creates the SRQ of `cfg` on `dev` and its queue.
    pub fn new(dev: &'static Device, cfg: SrqConfig) -> Self {
        let sim = dev.create_srq(cfg).unwrap();
        let layout = srq_layout(&sim);
        let slots: &'static [SrqSlot] = (0..sim.wqe_cnt)
            .map(|_| SrqSlot::new())
            .collect::<Vec<_>>()
            .leak();
        // SAFETY: the device (leaked) keeps the ring alive; the SRQ is new.
        let state: SrqRef<'static> = leak(unsafe { SrqState::new(&layout, slots) }.unwrap());
        // SAFETY: as above; only this queue posts to the SRQ, and the caller binds its state
        // to the CQ its QPs complete receives on.
        let queue = unsafe { SharedRecvQueue::new(&layout, state) }.unwrap();
        Self {
            sim,
            layout,
            state,
            queue,
        }
    }
}

/// A QP of type `ty` on `dev` with a new CQ of 64 entries as both its send and its receive CQ;
/// `cfg` gives the rest (its CQ numbers are replaced).
pub fn qp_with_cq(dev: &Device, ty: QpType, cfg: QpConfig) -> (SimQp, SimCq) {
    let cq = dev.create_cq(CqConfig { cqe: 64 }).unwrap();
    let cfg = QpConfig {
        send_cq: cq.cqn,
        recv_cq: cq.cqn,
        ..cfg
    };
    (dev.create_qp_ext(cfg, ty, None).unwrap(), cq)
}

/// The send-queue state of `qp` and the poller of its CQ (`cq`, which completes nothing
/// else), bound to each other.
pub fn send_only(qp: &SimQp, cq: &CqLayout) -> (SqRef<'static>, Cq) {
    let sqs: SqRef<'static> = leak(SqState::new(&*qp.sq_slots().leak()).unwrap());
    let b: &'static [CqBinding<SqRef<'static>, RqRef<'static>, SrqRef<'static>>] =
        Box::leak(Box::new([CqBinding::send_only(qp.qpn, sqs)]));
    // SAFETY: the device outlives the poller, which alone polls the CQ; the state is bound to
    // the CQ that serves it.
    let cq = unsafe { CompletionQueue::new(cq, b) }.unwrap();
    (sqs, cq)
}

/// Every completion `cq` has now, polled eight at a time until it gives none.
pub fn drain(cq: &mut impl PollCq) -> Vec<Completion> {
    let mut out = Vec::new();
    let mut wc = [Completion::EMPTY; 8];
    loop {
        let n = cq.poll(&mut wc);
        out.extend_from_slice(&wc[..n]);
        if n == 0 {
            return out;
        }
    }
}
