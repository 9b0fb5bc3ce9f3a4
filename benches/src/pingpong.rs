//! A full RDMA WRITE ping-pong round trip on the software mlx5 device, driven by zverbs or by
//! the C baselines over the same kind of device.
//!
//! Two connected RC QPs, each with its own send CQ and an 8-byte send and receive buffer. One
//! round trip: A writes its buffer into B's (1 SGE, signaled), the device runs until idle
//! (stepped mode: deterministic), A polls its completion, B checks the bytes landed and writes
//! back, the device runs, B polls, A checks. Everything but the device's own work is the direct
//! path under test, so the ratio shows how much of a round trip on this device the poster and
//! poller are.
//!
//! [`SendRecv`]: a SEND/RECV ping-pong of 32-byte messages between two zverbs ends, the data
//! written into the receive buffer or (scatter-to-CQE) into the receive CQE.

use std::ptr::NonNull;

use zverbs_core::{Completion, PollCq, PostRecv, PostSend, RecvWr, RemoteBuf, SendWr, Sge};
use zverbs_mlx5dv::prm::cqe::INLINE_SCATTER_32;
use zverbs_mlx5dv::{CompletionQueue, CqBinding, RecvQueue, RqState, SendQueue, SqState};
use zverbs_sim::{Access, CqConfig, Device, Mr, QpConfig, SimCq, SimQp};

use crate::ffi::{self, ZvbCq, ZvbQpTable, ZvbSq};
use zverbs_ffi::types::ibv_wc;

/// Message size.
pub const SIZE: usize = 8;

/// One side's view of an end: post a WRITE of its buffer to the peer, poll one completion.
pub trait End {
    /// Posts and rings a signaled 1-SGE RDMA WRITE of `SIZE` bytes from `addr` to `remote`.
    fn write(&mut self, addr: u64, lkey: u32, remote: RemoteBuf, wr_id: u64);
    /// Polls the send CQ once; returns whether a successful completion came.
    fn poll_one(&mut self) -> bool;
}

/// A zverbs end.
pub struct OursEnd {
    sq: crate::ours::Sq,
    cq: crate::ours::Cq,
}

impl End for OursEnd {
    #[inline]
    fn write(&mut self, addr: u64, lkey: u32, remote: RemoteBuf, wr_id: u64) {
        let sgl = [Sge::new(addr, SIZE as u32, lkey)];
        let wr = SendWr::write(wr_id, &sgl, remote).signaled();
        // SAFETY: both buffers are registered with the device, which outlives the queues, and
        // are read by this program only with volatile loads.
        let r = unsafe { self.sq.post(&wr) };
        assert!(r.is_ok(), "post: {r:?}");
    }

    #[inline]
    fn poll_one(&mut self) -> bool {
        let mut wc = [Completion::EMPTY; 1];
        self.cq.poll(&mut wc) == 1 && wc[0].is_success()
    }
}

/// A C-baseline end.
pub struct CEnd {
    sq: Box<ZvbSq>,
    cq: Box<ZvbCq>,
    table: *mut ZvbQpTable,
}

impl Drop for CEnd {
    fn drop(&mut self) {
        // SAFETY: allocated in `c_end`; the CQ pointing at it is dropped with this value.
        unsafe { ffi::zvb_qp_table_free(self.table) };
    }
}

impl End for CEnd {
    #[inline]
    fn write(&mut self, addr: u64, lkey: u32, remote: RemoteBuf, wr_id: u64) {
        // SAFETY: a live queue over the device's memory; buffers as for `OursEnd`.
        let rc = unsafe {
            ffi::zvb_post_write(
                &mut *self.sq,
                addr,
                SIZE as u32,
                lkey,
                remote.addr,
                remote.rkey,
                wr_id,
            )
        };
        assert_eq!(rc, 0, "post");
    }

    #[inline]
    fn poll_one(&mut self) -> bool {
        let mut wc = [ibv_wc::default(); 1];
        // SAFETY: a live CQ and a one-entry array.
        let n = unsafe { ffi::zvb_poll_cq(&mut *self.cq, 1, wc.as_mut_ptr()) };
        n == 1 && wc[0].status == 0
    }
}

/// 64-byte aligned buffer the device reads and writes (leaked: the device may outlive a run).
#[derive(Clone, Copy)]
struct Buf(NonNull<u8>);

impl Buf {
    fn new() -> Self {
        #[repr(C, align(64))]
        struct Line([u8; 64]);
        Self(NonNull::from(Box::leak(Box::new(Line([0; 64])))).cast())
    }
    fn addr(self) -> u64 {
        self.0.as_ptr() as u64
    }
    fn set(self, tag: u8) {
        // SAFETY: in the leaked line; the device reads it only while it steps on this thread.
        unsafe { self.0.add(SIZE - 1).write_volatile(tag) };
    }
    fn get(self) -> u8 {
        // SAFETY: as above; the device writes it only while it steps on this thread.
        unsafe { self.0.add(SIZE - 1).read_volatile() }
    }
}

struct Side<E> {
    end: E,
    tx: Buf,
    rx: Buf,
    mr_tx: Mr,
    /// The peer's receive buffer.
    remote: RemoteBuf,
}

/// Two connected ends on a device of their own.
pub struct PingPong<E> {
    a: Side<E>,
    b: Side<E>,
    round: u64,
    /// Last: dropped after the ends that point into its memory.
    dev: Device,
}

const SEND_WR: u32 = 64;
const CQE: u32 = 64;

fn qp_config(send_cq: u32, recv_cq: u32) -> QpConfig {
    QpConfig {
        send_cq,
        recv_cq,
        max_send_wr: SEND_WR,
        max_send_sge: 1,
        max_inline_data: 0,
        max_recv_wr: 0,
        max_recv_sge: 1,
        bf_size: 256,
        ..QpConfig::default()
    }
}

impl<E: End> PingPong<E> {
    fn build(make: impl Fn(&SimQp, &SimCq) -> E) -> Self {
        let dev = Device::new();
        let cq = |_| dev.create_cq(CqConfig { cqe: CQE }).expect("create CQ");
        let (cq_a, cq_b) = (cq(0), cq(1));
        let qa = dev
            .create_qp(qp_config(cq_a.cqn, cq_a.cqn))
            .expect("create QP");
        let qb = dev
            .create_qp(qp_config(cq_b.cqn, cq_b.cqn))
            .expect("create QP");
        dev.connect(qa.qpn, qb.qpn).expect("connect");
        let bufs = [Buf::new(), Buf::new(), Buf::new(), Buf::new()];
        // SAFETY: the buffers are leaked, so they outlive the device.
        let reg = |b: Buf| unsafe { dev.reg_mr(b.0.as_ptr(), 64, Access::ALL) }.expect("reg");
        let mrs = bufs.map(reg);
        let a = Side {
            end: make(&qa, &cq_a),
            tx: bufs[0],
            rx: bufs[1],
            mr_tx: mrs[0],
            remote: RemoteBuf::new(bufs[3].addr(), mrs[3].rkey),
        };
        let b = Side {
            end: make(&qb, &cq_b),
            tx: bufs[2],
            rx: bufs[3],
            mr_tx: mrs[2],
            remote: RemoteBuf::new(bufs[1].addr(), mrs[1].rkey),
        };
        Self {
            a,
            b,
            round: 0,
            dev,
        }
    }

    /// One round trip. Panics if a message or a completion is missing.
    #[inline]
    pub fn round_trip(&mut self) {
        self.round += 1;
        let tag = (self.round % 255) as u8 + 1;
        let (a_rx, b_rx) = (self.a.rx, self.b.rx);
        leg(&self.dev, &mut self.a, b_rx, tag, self.round);
        leg(&self.dev, &mut self.b, a_rx, tag, self.round);
    }
}

/// One way: `from` writes `tag` into `to`, the device runs, `from` polls, `to` is checked.
#[inline]
fn leg<E: End>(dev: &Device, from: &mut Side<E>, to: Buf, tag: u8, round: u64) {
    from.tx.set(tag);
    from.end
        .write(from.tx.addr(), from.mr_tx.lkey, from.remote, round);
    dev.run_until_idle();
    assert!(from.end.poll_one(), "completion of round {round}");
    assert_eq!(to.get(), tag, "bytes of round {round}");
}

impl PingPong<OursEnd> {
    /// Two zverbs ends.
    pub fn ours() -> Self {
        Self::build(|qp, cq| {
            let state =
                std::sync::Arc::new(SqState::new(qp.sq_slots().into_boxed_slice()).expect("slots"));
            let bindings: Box<[_]> = Box::new([CqBinding::new(qp.qpn, Some(state.clone()), None)]);
            // SAFETY: the layouts are the device's, which the ends never outlive (they are
            // fields of the same value and the device's memory lives as long as it does);
            // each queue is its ring's only driver; the state is bound to this CQ only.
            unsafe {
                OursEnd {
                    sq: SendQueue::new(&qp.layout, qp.caps(), state, None).expect("SQ"),
                    cq: CompletionQueue::new(&cq.layout, bindings).expect("CQ"),
                }
            }
        })
    }
}

impl PingPong<CEnd> {
    /// Two C-baseline ends.
    pub fn c() -> Self {
        Self::build(|qp, cq| {
            let l = &qp.layout;
            let n = l.sq.wqe_cnt as usize;
            let leak = |n: usize| Box::leak(vec![0u64; n].into_boxed_slice()).as_mut_ptr();
            let leak32 = |n: usize| Box::leak(vec![0u32; n].into_boxed_slice()).as_mut_ptr();
            let buf = l.sq.buf.as_ptr();
            let mut sq = Box::new(ZvbSq {
                buf,
                // SAFETY: one past the end of the device's ring.
                qend: unsafe { buf.add(n * 64) },
                wrid: leak(n),
                wqe_head: leak32(n),
                wr_data: leak32(n),
                dbrec: l.dbrec.as_ptr(),
                bf_reg: l.bf.reg.as_ptr(),
                bf_size: l.bf.size,
                bf_offset: 0,
                wqe_cnt: l.sq.wqe_cnt,
                max_post: SEND_WR,
                max_gs: 1,
                max_inline: qp.max_inline_data,
                cur_post: 0,
                head: 0,
                tail: 0,
                qpn: qp.qpn,
                rq_wrid: std::ptr::null_mut(),
                rq_wqe_cnt: 0,
                rq_tail: 0,
                rq_buf: std::ptr::null_mut(),
                rq_wqe_shift: 0,
                rq_max_gs: 0,
            });
            // SAFETY: allocation; then `sq` is boxed, so its address is stable while the table
            // (freed with the end) points at it.
            let table = unsafe { ffi::zvb_qp_table_new() };
            assert!(!table.is_null());
            // SAFETY: as above.
            assert_eq!(unsafe { ffi::zvb_qp_table_add(table, &mut *sq) }, 0);
            let cq = Box::new(ZvbCq {
                buf: cq.layout.buf.as_ptr(),
                dbrec: cq.layout.dbrec.as_ptr(),
                qps: table,
                cqe_mask: cq.layout.cqe_cnt - 1,
                cqe_sz: cq.layout.cqe_size,
                cons_index: 0,
            });
            CEnd { sq, cq, table }
        })
    }
}

/// Message size of the SEND/RECV round trip: as much as a 64-byte CQE holds scattered.
pub const SEND_SIZE: usize = 32;

/// One end of the SEND/RECV round trip: its queues (one CQ for both directions) and buffers.
struct SrSide {
    sq: crate::ours::Sq,
    rq: RecvQueue<crate::ours::RqHandle>,
    cq: crate::ours::Cq,
    tx: Buf,
    rx: Buf,
    lkey_tx: u32,
    lkey_rx: u32,
}

impl SrSide {
    /// Posts the receive of `SEND_SIZE` bytes into `rx`.
    #[inline]
    fn post_recv(&mut self, wr_id: u64) {
        let sgl = [Sge::new(self.rx.addr(), SEND_SIZE as u32, self.lkey_rx)];
        // SAFETY: the buffer is registered with the device, which outlives the queues, and is
        // read by this program only with volatile loads.
        let r = unsafe { self.rq.post(&RecvWr::new(wr_id, &sgl)) };
        assert!(r.is_ok(), "post receive: {r:?}");
    }

    /// Polls one completion; returns it if it is successful.
    #[inline]
    fn poll_one(&mut self) -> Option<Completion> {
        let mut wc = [Completion::EMPTY; 1];
        (self.cq.poll(&mut wc) == 1 && wc[0].is_success()).then_some(wc[0])
    }
}

/// A SEND/RECV ping-pong between two connected RC QPs of the software device, driven by
/// zverbs, with `SEND_SIZE`-byte messages: written by the device into the receive buffer, or
/// (scatter-to-CQE) into the receive CQE, from which the poller copies them into the buffer.
///
/// One round trip: A sends its buffer (1 SGE, signaled), the device runs until idle, A polls
/// its send completion, B polls its receive completion, checks the bytes and posts the
/// receive again; then the same from B to A.
pub struct SendRecv {
    a: SrSide,
    b: SrSide,
    round: u64,
    /// Last: dropped after the ends that point into its memory.
    dev: Device,
}

impl SendRecv {
    /// Two connected ends, their receives posted; with `scatter`, the device scatters the
    /// messages into the receive CQEs. Runs one round trip and checks that the messages took
    /// the path asked for (the device's count of scattered messages, the CQE's `op_own`) and
    /// arrived whole.
    pub fn new(scatter: bool) -> Self {
        let dev = Device::new();
        let cq_a = dev.create_cq(CqConfig { cqe: CQE }).expect("create CQ");
        let cq_b = dev.create_cq(CqConfig { cqe: CQE }).expect("create CQ");
        let config = |cq: u32| QpConfig {
            max_recv_wr: 16,
            ..qp_config(cq, cq)
        };
        let qa = dev.create_qp(config(cq_a.cqn)).expect("create QP");
        let qb = dev.create_qp(config(cq_b.cqn)).expect("create QP");
        dev.connect(qa.qpn, qb.qpn).expect("connect");
        dev.set_scatter_to_cqe(qa.qpn, scatter).expect("scatter");
        dev.set_scatter_to_cqe(qb.qpn, scatter).expect("scatter");
        let side = |qp: &SimQp, cq: &SimCq| {
            let (tx, rx) = (Buf::new(), Buf::new());
            // SAFETY: the buffers are leaked, so they outlive the device.
            let reg = |b: Buf| unsafe { dev.reg_mr(b.0.as_ptr(), 64, Access::ALL) }.expect("reg");
            let (mr_tx, mr_rx) = (reg(tx), reg(rx));
            let sq_state =
                std::sync::Arc::new(SqState::new(qp.sq_slots().into_boxed_slice()).expect("slots"));
            let rq_state =
                std::sync::Arc::new(RqState::new(qp.rq_slots().into_boxed_slice()).expect("slots"));
            let bindings: Box<[_]> = Box::new([CqBinding::new(
                qp.qpn,
                Some(sq_state.clone()),
                Some(rq_state.clone()),
            )]);
            // SAFETY: the layouts are the device's, which the ends never outlive (fields of
            // the same value, the device last); each queue is its ring's only driver; the
            // states are bound to this CQ only.
            unsafe {
                SrSide {
                    sq: SendQueue::new(&qp.layout, qp.caps(), sq_state, None).expect("SQ"),
                    rq: RecvQueue::new(&qp.layout, rq_state).expect("RQ"),
                    cq: CompletionQueue::new(&cq.layout, bindings).expect("CQ"),
                    tx,
                    rx,
                    lkey_tx: mr_tx.lkey,
                    lkey_rx: mr_rx.lkey,
                }
            }
        };
        let mut s = Self {
            a: side(&qa, &cq_a),
            b: side(&qb, &cq_b),
            round: 0,
            dev,
        };
        s.a.post_recv(0);
        s.b.post_recv(0);
        // The whole message once: every byte must arrive, by either path.
        let msg: [u8; SEND_SIZE] = core::array::from_fn(|i| 0x40 + i as u8);
        for b in [s.a.tx, s.b.tx] {
            // SAFETY: in the leaked line; the device reads it only while it steps here.
            unsafe { b.0.cast::<[u8; SEND_SIZE]>().write_volatile(msg) };
        }
        s.round_trip();
        let mut want = msg;
        want[SEND_SIZE - 1] = 2;
        for b in [s.a.rx, s.b.rx] {
            // SAFETY: as above.
            let got = unsafe { b.0.cast::<[u8; SEND_SIZE]>().read_volatile() };
            assert_eq!(got, want, "the message arrived whole");
        }
        assert_eq!(
            s.dev.stats().scattered,
            if scatter { 2 } else { 0 },
            "messages scattered into CQEs"
        );
        // B's first CQE is its receive of A's message.
        // SAFETY: byte 63 of the first CQE of the device's ring, which outlives this read.
        let op_own = unsafe { cq_b.layout.buf.add(63).read_volatile() };
        assert_eq!(
            op_own & INLINE_SCATTER_32 != 0,
            scatter,
            "op_own {op_own:#x} of the receive CQE"
        );
        s
    }

    /// One round trip. Panics if a message or a completion is missing.
    #[inline]
    pub fn round_trip(&mut self) {
        self.round += 1;
        let tag = (self.round % 255) as u8 + 1;
        send_leg(&self.dev, &mut self.a, &mut self.b, tag, self.round);
        send_leg(&self.dev, &mut self.b, &mut self.a, tag, self.round);
    }
}

/// One way: `from` sends `tag` (in the last byte of its message) to `to`, the device runs,
/// `from` polls its send completion, `to` its receive, checks the byte and posts again.
#[inline]
fn send_leg(dev: &Device, from: &mut SrSide, to: &mut SrSide, tag: u8, round: u64) {
    // SAFETY: in the leaked line; the device reads it only while it steps on this thread.
    unsafe { from.tx.0.add(SEND_SIZE - 1).write_volatile(tag) };
    let sgl = [Sge::new(from.tx.addr(), SEND_SIZE as u32, from.lkey_tx)];
    let wr = SendWr::send(round, &sgl).signaled();
    // SAFETY: the buffer is registered with the device, which outlives the queues.
    let r = unsafe { from.sq.post(&wr) };
    assert!(r.is_ok(), "post: {r:?}");
    dev.run_until_idle();
    assert!(
        from.poll_one().is_some(),
        "send completion of round {round}"
    );
    let wc = to.poll_one().expect("receive completion");
    assert_eq!(wc.byte_len, SEND_SIZE as u32, "length of round {round}");
    // SAFETY: as above; the device (or the poller) wrote it before the completion.
    let got = unsafe { to.rx.0.add(SEND_SIZE - 1).read_volatile() };
    assert_eq!(got, tag, "bytes of round {round}");
    to.post_recv(round);
}
