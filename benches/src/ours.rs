//! The zverbs side: the direct path's queues over [`QpMem`], and the operations the benchmarks
//! time and count, each kept out of line (as the C baselines are) so that both sides pay one
//! call and their code can be read and counted (`valgrind --tool=callgrind
//! --toggle-collect='zverbs_benches::ours::post_write'`).
//!
//! Each operation is written the way an application posts: the operation is known where the
//! request is built, its operands come from run time. The requests are signaled, as the C
//! baselines' are.

use std::ptr::NonNull;
use std::sync::Arc;
use zverbs_core::{
    BatchError, BriefCompletion, Completion, PollCq, PollCqTimed, PostError, PostRecv, PostSend,
    RecvWr, RemoteBuf, SendFlags, SendWr, Sge, TimedCompletion,
};

use zverbs_mlx5dv::{
    Changes, CompletionQueue, Connected, CqBinding, Ethernet, PreparedFrame, PreparedRdma,
    PreparedSend, RecvQueue, RqSlot, RqState, SendQueue, SqCaps, SqSlot, SqState, SqTransport,
    StrideBuffer, StrideConfig, StrideSlot, StridingRq, StridingState, WqLayout,
};

use crate::mem::{QpMem, STRIDE_LOG_NUM, STRIDE_LOG_SIZE, STRIDE_WQES, StrideMem};
use crate::{Fixture, QPN};

/// The capabilities the fixtures' queues are created with (the C baseline enforces the same).
pub const CAPS: SqCaps = SqCaps {
    max_send_sge: 4,
    max_inline_data: 128,
    sig_all: false,
    max_signaled: 1 << 15,
    transport: zverbs_core::Transport::Rc,
};

/// The capabilities of the raw Ethernet fixtures' queues: [`CAPS`] on a raw packet QP, frames
/// up to 1514 bytes.
pub const ETH_CAPS: SqCaps = SqCaps {
    transport: zverbs_core::Transport::Ethernet {
        max_frame: 1514,
        ip_csum: true,
    },
    ..CAPS
};

/// Frame bytes the Ethernet fixtures' queues inline (a device whose minimum inline is L2, as
/// the C baseline's).
pub const ETH_MIN_INLINE: u16 = 18;

/// A send queue's bookkeeping as the `zverbs` crate holds it: behind an owning handle, one
/// clone in the queue and one in the CQ's binding.
pub type SqHandle = Arc<SqState<Box<[SqSlot]>>>;
/// A receive queue's bookkeeping, as [`SqHandle`].
pub type RqHandle = Arc<RqState<Box<[RqSlot]>>>;
/// The send queue, as the `zverbs` crate drives it.
pub type Sq = SendQueue<SqHandle>;
/// A raw packet QP's send queue.
pub type EthSq = SendQueue<SqHandle, Ethernet>;
/// The completion queue, as the `zverbs` crate polls it.
pub type Cq = CompletionQueue<Box<[CqBinding<SqHandle, RqHandle>]>>;

/// A send queue (of transport `T`) and the CQ serving it, driven by zverbs over [`QpMem`].
pub struct Ours<T: SqTransport = Connected> {
    /// The send queue.
    pub sq: SendQueue<SqHandle, T>,
    /// The completion queue.
    pub cq: Cq,
    /// The memory (after the queues: dropped after them).
    pub mem: QpMem,
    /// Producer counter when all credits last came back.
    completed_to: u32,
}

impl Ours {
    /// Queues over `mem` (used by nothing else), with [`CAPS`] and as many signaled requests
    /// outstanding as the CQ holds.
    pub fn new(mem: QpMem) -> Self {
        // SAFETY: `new` of an RC queue.
        Self::with(mem, CAPS, |layout, caps, state| unsafe {
            SendQueue::new(layout, caps, state, None)
        })
    }
}

impl Ours<Ethernet> {
    /// As [`Ours::new`], a raw packet QP's queue with [`ETH_CAPS`], inlining
    /// [`ETH_MIN_INLINE`] frame bytes.
    pub fn new_eth(mem: QpMem) -> Self {
        // SAFETY: `new_eth` of an Ethernet queue; the frames the benchmarks post are live
        // statics.
        Self::with(mem, ETH_CAPS, |layout, caps, state| unsafe {
            SendQueue::new_eth(layout, caps, ETH_MIN_INLINE, state, None)
        })
    }
}

impl<T: SqTransport> Ours<T> {
    /// The queues over `mem` with `caps`, the send queue made by `make` (given the layout, the
    /// capabilities and the state; an unsafe constructor whose contract `mem` meets: it is
    /// used by nothing else and outlives the queues, and the state is bound to the CQ below
    /// only).
    fn with(
        mem: QpMem,
        caps: SqCaps,
        make: impl FnOnce(
            &zverbs_mlx5dv::QpLayout,
            SqCaps,
            SqHandle,
        ) -> Result<SendQueue<SqHandle, T>, zverbs_mlx5dv::LayoutError>,
    ) -> Self {
        let slots: Box<[SqSlot]> = (0..mem.blocks).map(|_| SqSlot::new()).collect();
        let state = Arc::new(SqState::new(slots).expect("power of two"));
        let bindings: Box<[_]> = Box::new([CqBinding::new(QPN, Some(state.clone()), None)]);
        let caps = SqCaps {
            max_signaled: mem.cqes,
            ..caps
        };
        // The memory outlives the queues (field order of `Ours`); only this queue posts to it,
        // and `state` is bound to the CQ below only.
        let sq = make(&mem.qp_layout(QPN), caps, state).expect("layout");
        // SAFETY: as above; only this CQ polls the ring.
        let cq = unsafe { CompletionQueue::new(&mem.cq_layout(), bindings) }.expect("layout");
        Self {
            mem,
            sq,
            cq,
            completed_to: 0,
        }
    }

    /// The same queues, the CQ's entries read with their completion timestamps.
    pub fn with_timestamps(mut self) -> Self {
        self.cq.set_timestamps(true);
        self
    }
}

impl<T: SqTransport> Fixture for Ours<T> {
    fn room(&mut self, blocks_per_call: u32, requests_per_call: u32) -> u64 {
        let by_blocks = self.sq.free_blocks() / blocks_per_call;
        let signaled = self.mem.cqes - self.sq.outstanding_signaled();
        u64::from(by_blocks.min(signaled / requests_per_call))
    }

    fn complete_all(&mut self, requests: u64) {
        let from = self.completed_to;
        let posted = self.sq.producer().wrapping_sub(from);
        if requests == 0 || posted == 0 {
            return;
        }
        // Every request of a run has the same size: one CQE each, naming its first block.
        let blocks = posted / requests as u32;
        let mut left = requests as u32;
        let mut next = 0u32;
        let mut wc = [Completion::EMPTY; 64];
        while left > 0 {
            let n = left.min(64);
            // SAFETY: the CQ is polled only below, on this thread.
            unsafe {
                self.mem.write_cqes(QPN, self.cq.consumer(), n, |i| {
                    from.wrapping_add((next + i) * blocks) as u16
                })
            };
            assert_eq!(self.cq.poll(&mut wc[..n as usize]), n as usize);
            left -= n;
            next += n;
        }
        self.completed_to = self.sq.producer();
    }

    fn write_cqes(&mut self, n: u32) {
        // SAFETY: the CQ is polled only after this returns, on this thread.
        unsafe {
            self.mem
                .write_cqes(QPN, self.cq.consumer(), n, |i| (i % 8) as u16)
        };
    }

    fn cq_room(&self) -> u32 {
        self.mem.cqes
    }
}

/// A CQ serving one receive queue, driven by zverbs over [`QpMem`]: what the receive polls
/// poll, with the device's CQEs written one by one or compressed.
pub struct OursRecv {
    /// The completion queue.
    pub cq: Cq,
    /// Sessions of this many completions, or plain CQEs.
    session: Option<u32>,
    /// The memory (after the queue: dropped after it).
    pub mem: QpMem,
}

impl OursRecv {
    /// A CQ over `mem`'s ring, bound to a receive queue of as many entries; the device writes
    /// compressed sessions of `session` completions when given.
    pub fn new(mem: QpMem, session: Option<u32>) -> Self {
        let slots: Box<[RqSlot]> = (0..mem.cqes).map(|_| RqSlot::new()).collect();
        let rq: RqHandle = Arc::new(RqState::new(slots).expect("power of two"));
        let bindings: Box<[_]> = Box::new([CqBinding::new(QPN, None, Some(rq))]);
        // SAFETY: the memory outlives the CQ (field order); only this CQ polls the ring.
        let cq = unsafe { CompletionQueue::new(&mem.cq_layout(), bindings) }.expect("layout");
        Self { cq, session, mem }
    }
}

impl Fixture for OursRecv {
    fn room(&mut self, _: u32, _: u32) -> u64 {
        0
    }

    fn complete_all(&mut self, _: u64) {}

    fn write_cqes(&mut self, n: u32) {
        // SAFETY: the CQ is polled only after this returns, on this thread.
        unsafe {
            self.mem
                .write_recv_cqes(QPN, self.cq.consumer(), n, self.session)
        };
    }

    fn cq_room(&self) -> u32 {
        self.mem.cqes
    }
}

/// A striding queue's bookkeeping, as the `zverbs` crate holds it (owned by the queue).
pub type StrideHandle = Box<StridingState<Box<[StrideSlot]>>>;
/// The striding receive queue, as the `zverbs` crate drives it.
pub type Striding = StridingRq<StrideHandle>;

/// A CQ serving one striding receive work queue, driven by zverbs over [`QpMem`] and a
/// [`StrideMem`]: the CQEs of one-stride packets, received in place.
pub struct OursStride {
    /// The completion queue (no bindings: only the striding queue's CQEs come).
    pub cq: Cq,
    /// The striding queue.
    pub rq: Striding,
    /// Its memory (leaked).
    pub smem: StrideMem,
    /// The CQ's memory (after the queues: dropped after them).
    pub mem: QpMem,
}

impl OursStride {
    /// The queue over a new [`StrideMem`], all its WQEs posted, polled from `mem`'s CQ.
    pub fn new(mem: QpMem) -> Self {
        let smem = StrideMem::new();
        let slots: Box<[StrideSlot]> = (0..STRIDE_WQES).map(|_| StrideSlot::new()).collect();
        let state = Box::new(StridingState::new(slots).expect("power of two"));
        let layout = WqLayout {
            buf: smem.ring,
            wqe_cnt: STRIDE_WQES,
            stride: 32,
        };
        let strides = StrideConfig {
            log_num_strides: STRIDE_LOG_NUM,
            log_stride_size: STRIDE_LOG_SIZE,
        };
        let buffer = StrideBuffer {
            addr: smem.buf,
            len: smem.buf_len(),
            lkey: 0x1100,
        };
        // SAFETY: the ring, record and buffer are leaked (they outlive the queue), used by
        // nothing else; the CQ's memory outlives it (field order); only this CQ polls the ring.
        let (rq, cq) = unsafe {
            (
                StridingRq::new(&layout, smem.dbrec, strides, buffer, state).expect("layout"),
                CompletionQueue::new(&mem.cq_layout(), Box::new([]) as Box<[_]>).expect("layout"),
            )
        };
        Self { cq, rq, smem, mem }
    }
}

impl Fixture for OursStride {
    fn room(&mut self, _: u32, _: u32) -> u64 {
        0
    }

    fn complete_all(&mut self, _: u64) {}

    fn write_cqes(&mut self, n: u32) {
        // SAFETY: the CQ is polled only after this returns, on this thread.
        unsafe { self.smem.write_cqes(&self.mem, self.cq.consumer(), n) };
    }

    fn cq_room(&self) -> u32 {
        self.mem.cqes
    }
}

/// Receives up to `max` packets of `rq` from `cq` in place: each packet's first 8 bytes (0 for
/// a shorter one) and length added to `sum` (the touch), its strides given back when it is dropped (a WQE posted
/// again once all of its are). The packets received.
#[inline(never)]
pub fn rx_stride(rq: &Striding, cq: &mut Cq, max: usize, sum: &mut u64) -> usize {
    let mut acc = 0u64;
    let n = rq.poll_packets(cq, max, |p| {
        let b = p.bytes();
        let first = b.first_chunk::<8>().map_or(0, |c| u64::from_ne_bytes(*c));
        acc = acc.wrapping_add(first.wrapping_add(b.len() as u64));
    });
    *sum = sum.wrapping_add(acc);
    n
}

/// Bytes of each message [`OursSmall`] receives.
pub const SMALL: usize = 32;

/// The message [`OursSmall`] receives (recognisable, no zero byte).
pub const SMALL_MSG: [u8; SMALL] = {
    let mut m = [0u8; SMALL];
    let mut i = 0;
    while i < SMALL {
        m[i] = 0xa0 + i as u8;
        i += 1;
    }
    m
};

/// A CQ serving a receive queue with posted receives of [`SMALL`] bytes each (one buffer
/// per ring entry), driven by zverbs over [`QpMem`] and a receive ring of its own: the device
/// writes a receive CQE for a [`SMALL`]-byte SEND to each, with the data scattered into the
/// CQE (the poller copies it into the receive's buffer) or not (the device wrote the buffer).
pub struct OursSmall {
    /// The completion queue.
    pub cq: Cq,
    /// The receive queue.
    pub rq: RecvQueue<RqHandle>,
    /// Whether the data is scattered into the CQEs.
    pub scatter: bool,
    /// The receive buffers, [`SMALL`] bytes each, one per ring entry (leaked).
    bufs: NonNull<u8>,
    /// The memory (after the queues: dropped after them).
    pub mem: QpMem,
}

impl OursSmall {
    /// The queues over `mem`'s CQ ring and doorbell record and a receive ring of as many
    /// 16-byte (1-SGE) entries as the CQ has CQEs.
    pub fn new(mem: QpMem, scatter: bool) -> Self {
        let n = mem.cqes as usize;
        let ring = NonNull::from(Box::leak(
            vec![crate::mem::Block([0; 64]); n / 4].into_boxed_slice(),
        ))
        .cast();
        let bufs = NonNull::from(Box::leak(
            vec![crate::mem::Block([0; 64]); n / 2].into_boxed_slice(),
        ))
        .cast();
        let mut layout = mem.qp_layout(QPN);
        layout.rq = WqLayout {
            buf: ring,
            wqe_cnt: mem.cqes,
            stride: 16,
        };
        let slots: Box<[RqSlot]> = (0..mem.cqes).map(|_| RqSlot::new()).collect();
        let state: RqHandle = Arc::new(RqState::new(slots).expect("power of two"));
        let bindings: Box<[_]> = Box::new([CqBinding::new(QPN, None, Some(state.clone()))]);
        // SAFETY: the rings, the buffers and the doorbell records are leaked, so they outlive
        // the queues; only these queues use them; `state` is bound to this CQ only.
        let (rq, cq) = unsafe {
            (
                RecvQueue::new(&layout, state).expect("layout"),
                CompletionQueue::new(&mem.cq_layout(), bindings).expect("layout"),
            )
        };
        Self {
            cq,
            rq,
            scatter,
            bufs,
            mem,
        }
    }

    /// The buffer of receive ring entry `i`.
    pub fn buf(&self, i: u32) -> [u8; SMALL] {
        let at = (i % self.mem.cqes) as usize * SMALL;
        // SAFETY: in the leaked buffers; the fixtures are single-threaded.
        core::array::from_fn(|k| unsafe { self.bufs.as_ptr().add(at + k).read_volatile() })
    }

    fn buf_ptr(&self, i: u32) -> *mut u8 {
        // SAFETY: entry `i % cqes` of the leaked buffers.
        unsafe { self.bufs.as_ptr().add((i % self.mem.cqes) as usize * SMALL) }
    }
}

impl Fixture for OursSmall {
    fn room(&mut self, _: u32, _: u32) -> u64 {
        0
    }

    fn complete_all(&mut self, _: u64) {}

    /// Posts `n` receives, then writes their CQEs as the device would: the buffers hold the
    /// message (written by the device) or are cleared (the message is in the CQE), so the
    /// buffers' lines are equally warm either way.
    fn write_cqes(&mut self, n: u32) {
        for _ in 0..n {
            let head = self.rq.head();
            let p = self.buf_ptr(head);
            let fill = if self.scatter { [0; SMALL] } else { SMALL_MSG };
            // SAFETY: a buffer of the leaked area, not referenced elsewhere.
            unsafe { p.cast::<[u8; SMALL]>().write_volatile(fill) };
            let sgl = [Sge::new(p as u64, SMALL as u32, 0x1100)];
            // SAFETY: the buffer is leaked, so it outlives the receive; it is written by the
            // poller (scattered data) or, before, by this fixture in the device's stead.
            let r = unsafe { self.rq.post(&RecvWr::new(u64::from(head), &sgl)) };
            assert!(r.is_ok(), "post receive: {r:?}");
        }
        // SAFETY: the CQ is polled only after this returns, on this thread.
        unsafe {
            self.mem
                .write_small_recv_cqes(QPN, self.cq.consumer(), n, &SMALL_MSG, self.scatter)
        };
    }

    fn cq_room(&self) -> u32 {
        self.mem.cqes
    }
}

/// A signaled 1-SGE RDMA WRITE, posted and rung.
///
/// # Safety
///
/// The posting contract of [`PostSend`] (the fixtures have no device: nothing reads the
/// memory the request names).
///
/// # Errors
///
/// As [`PostSend::post`].
#[inline(never)]
pub unsafe fn post_write(
    sq: &mut Sq,
    addr: u64,
    len: u32,
    lkey: u32,
    raddr: u64,
    rkey: u32,
    wr_id: u64,
) -> Result<(), PostError> {
    let sgl = [Sge::new(addr, len, lkey)];
    let wr = SendWr::write(wr_id, &sgl, RemoteBuf::new(raddr, rkey)).signaled();
    // SAFETY: (caller) the posting contract.
    unsafe { sq.post(&wr) }
}

/// A prepared 1-SGE RDMA WRITE or READ (`p`) of `addr`/`len` to or from `raddr`, posted and
/// rung: only what changes is given.
///
/// # Safety
///
/// As [`post_write`].
///
/// # Errors
///
/// As [`SendQueue::post_prepared`].
#[inline(never)]
pub unsafe fn post_prepared_rdma(
    sq: &mut Sq,
    p: &PreparedRdma,
    addr: u64,
    len: u32,
    raddr: u64,
    wr_id: u64,
) -> Result<(), PostError> {
    let c = Changes {
        wr_id,
        addr,
        len,
        remote_addr: raddr,
        imm: 0,
    };
    // SAFETY: (caller) the posting contract.
    unsafe { sq.post_prepared(p, c) }
}

/// A prepared 1-SGE SEND (`p`) of `addr`/`len`, posted and rung.
///
/// # Safety
///
/// As [`post_write`].
///
/// # Errors
///
/// As [`SendQueue::post_prepared`].
#[inline(never)]
pub unsafe fn post_prepared_send(
    sq: &mut Sq,
    p: &PreparedSend,
    addr: u64,
    len: u32,
    wr_id: u64,
) -> Result<(), PostError> {
    let c = Changes {
        wr_id,
        addr,
        len,
        ..Changes::default()
    };
    // SAFETY: (caller) the posting contract.
    unsafe { sq.post_prepared(p, c) }
}

/// A signaled RDMA WRITE of `data`, inline, posted and rung.
///
/// # Safety
///
/// As [`post_write`].
///
/// # Errors
///
/// As [`PostSend::post`].
#[inline(never)]
pub unsafe fn post_write_inline(
    sq: &mut Sq,
    data: &[u8],
    raddr: u64,
    rkey: u32,
    wr_id: u64,
) -> Result<(), PostError> {
    let sgl = [Sge::from_slice(data, 0)];
    let wr = SendWr::write(wr_id, &sgl, RemoteBuf::new(raddr, rkey))
        .inline()
        .signaled();
    // SAFETY: (caller) the posting contract; `data` is readable for the call.
    unsafe { sq.post(&wr) }
}

/// A signaled SEND of one frame on a raw packet QP with checksum offload (`IP_CSUM`), its
/// first 18 bytes inlined, posted and rung.
///
/// # Safety
///
/// As [`post_write`]; and the frame's first 18 bytes are readable.
///
/// # Errors
///
/// As [`PostSend::post`].
#[inline(never)]
pub unsafe fn post_eth(
    sq: &mut EthSq,
    addr: u64,
    len: u32,
    lkey: u32,
    wr_id: u64,
) -> Result<(), PostError> {
    let sgl = [Sge::new(addr, len, lkey)];
    let wr = SendWr::send(wr_id, &sgl).with_flags(SendFlags::IP_CSUM | SendFlags::SIGNALED);
    // SAFETY: (caller) the posting contract.
    unsafe { sq.post(&wr) }
}

/// A prepared frame posted with its payload and rung.
///
/// # Safety
///
/// As [`post_write`].
///
/// # Errors
///
/// As [`EthSq::post_frame`].
#[inline(never)]
pub unsafe fn post_prepared_frame(
    sq: &mut EthSq,
    p: &PreparedFrame,
    addr: u64,
    len: u32,
    lkey: u32,
    wr_id: u64,
) -> Result<(), PostError> {
    // SAFETY: (caller) the posting contract.
    unsafe { sq.post_frame(p, wr_id, Sge::new(addr, len, lkey)) }
}

/// A signaled 1-SGE SEND, posted and rung.
///
/// # Safety
///
/// As [`post_write`].
///
/// # Errors
///
/// As [`PostSend::post`].
#[inline(never)]
pub unsafe fn post_send(
    sq: &mut Sq,
    addr: u64,
    len: u32,
    lkey: u32,
    wr_id: u64,
) -> Result<(), PostError> {
    let sgl = [Sge::new(addr, len, lkey)];
    let wr = SendWr::send(wr_id, &sgl).signaled();
    // SAFETY: (caller) the posting contract.
    unsafe { sq.post(&wr) }
}

/// A signaled 1-SGE RDMA READ, posted and rung.
///
/// # Safety
///
/// As [`post_write`].
///
/// # Errors
///
/// As [`PostSend::post`].
#[inline(never)]
pub unsafe fn post_read(
    sq: &mut Sq,
    addr: u64,
    len: u32,
    lkey: u32,
    raddr: u64,
    rkey: u32,
    wr_id: u64,
) -> Result<(), PostError> {
    let sgl = [Sge::new(addr, len, lkey)];
    let wr = SendWr::read(wr_id, &sgl, RemoteBuf::new(raddr, rkey)).signaled();
    // SAFETY: (caller) the posting contract.
    unsafe { sq.post(&wr) }
}

/// A signaled compare-and-swap, posted and rung.
///
/// # Safety
///
/// As [`post_write`].
///
/// # Errors
///
/// As [`PostSend::post`].
#[allow(clippy::too_many_arguments)]
#[inline(never)]
pub unsafe fn post_cas(
    sq: &mut Sq,
    addr: u64,
    lkey: u32,
    raddr: u64,
    rkey: u32,
    compare: u64,
    swap: u64,
    wr_id: u64,
) -> Result<(), PostError> {
    let local = Sge::new(addr, 8, lkey);
    let wr =
        SendWr::compare_swap(wr_id, local, RemoteBuf::new(raddr, rkey), compare, swap).signaled();
    // SAFETY: (caller) the posting contract.
    unsafe { sq.post(&wr) }
}

/// A signaled fetch-and-add, posted and rung.
///
/// # Safety
///
/// As [`post_write`].
///
/// # Errors
///
/// As [`PostSend::post`].
#[inline(never)]
pub unsafe fn post_faa(
    sq: &mut Sq,
    addr: u64,
    lkey: u32,
    raddr: u64,
    rkey: u32,
    add: u64,
    wr_id: u64,
) -> Result<(), PostError> {
    let local = Sge::new(addr, 8, lkey);
    let wr = SendWr::fetch_add(wr_id, local, RemoteBuf::new(raddr, rkey), add).signaled();
    // SAFETY: (caller) the posting contract.
    unsafe { sq.post(&wr) }
}

/// A request whose operation the compiler cannot see at the call (built elsewhere), posted and
/// rung: the generic post path.
///
/// # Safety
///
/// As [`post_write`].
///
/// # Errors
///
/// As [`PostSend::post`].
#[inline(never)]
pub unsafe fn post_opaque(sq: &mut Sq, wr: &SendWr<'_>) -> Result<(), PostError> {
    // SAFETY: (caller) the posting contract.
    unsafe { sq.post(wr) }
}

/// A batch of requests behind one doorbell.
///
/// # Safety
///
/// As [`post_write`].
///
/// # Errors
///
/// As [`PostSend::post_all`].
#[inline(never)]
pub unsafe fn post_batch(sq: &mut Sq, wrs: &[SendWr<'_>]) -> Result<(), BatchError> {
    // SAFETY: (caller) the posting contract.
    unsafe { sq.post_all(wrs) }
}

/// Requests staged one by one in a batch, then one doorbell for all: what `ibv_post_send` does
/// with a chain (each request checked and written in turn; a refused one stops the loop, and
/// the batch rings what was staged before it as it is dropped).
///
/// # Safety
///
/// As [`post_write`].
///
/// # Errors
///
/// The first refused request's error and index.
#[inline(never)]
pub unsafe fn post_chain(sq: &mut Sq, wrs: &[SendWr<'_>]) -> Result<(), BatchError> {
    let mut batch = sq.batch();
    for (index, wr) in wrs.iter().enumerate() {
        // SAFETY: (caller) the posting contract.
        unsafe { batch.post(wr) }.map_err(|error| BatchError { index, error })?;
    }
    batch.finish();
    Ok(())
}

/// Polls up to `out.len()` completions.
#[inline(never)]
pub fn poll(cq: &mut Cq, out: &mut [Completion]) -> usize {
    cq.poll(out)
}

/// Polls up to `out.len()` completions with their timestamps (a CQ created with them).
#[inline(never)]
pub fn poll_timed(cq: &mut Cq, out: &mut [TimedCompletion]) -> usize {
    cq.poll_timed(out)
}

/// Polls up to `out.len()` completions, only their `wr_id`, status, opcode and length
/// ([`PollCq::poll_brief`]).
#[inline(never)]
pub fn poll_brief(cq: &mut Cq, out: &mut [BriefCompletion]) -> usize {
    cq.poll_brief(out)
}
