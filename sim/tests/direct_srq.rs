//! A shared receive queue end to end through the direct backend on the software device:
//! `zverbs_mlx5dv::SharedRecvQueue` posts by following the free list, the `CompletionQueue`
//! resolves each receive's `wr_id` by the WQE its CQE names and frees that WQE, completions
//! name the QP they arrived on, the list is refilled round after round, an empty SRQ is an
//! RNR NAK, and refused posts write nothing.

mod common;

use common::Arena;
use common::direct::{Cq, DirectSrq, device_with_arena, drain, send_only};
use zverbs_core::{PostError, PostRecv, PostSend, RecvWr, SendWr, Sge, WcOpcode, WcStatus};
use zverbs_mlx5dv::{
    CompletionQueue, CqBinding, SendQueue, SharedRecvQueue, SqRef, SrqLayout, SrqRef,
};
use zverbs_sim::{CqConfig, Device, Mr, RNR_RETRY_INFINITE, SimQp, SrqConfig};

type Sq = SendQueue<SqRef<'static>>;

/// `n` RC pairs: requesters with their own CQ each, responders taking their receives from one
/// SRQ of `max_wr` receives and completing them on one CQ.
struct Setup {
    dev: &'static Device,
    mem: &'static Arena,
    mr: Mr,
    srq: SharedRecvQueue<SrqRef<'static>>,
    layout: SrqLayout,
    req: Vec<(SimQp, Sq, Cq)>,
    resp: Vec<SimQp>,
    rcq: Cq,
}

fn setup(n: usize, max_wr: u32, rnr_retry: u8) -> Setup {
    let (dev, mem, mr) = device_with_arena(1 << 16);
    let s = DirectSrq::new(dev, SrqConfig { max_wr, max_sge: 2 });
    let rcq_sim = dev.create_cq(CqConfig { cqe: 64 }).unwrap();
    let mut req = Vec::new();
    let mut resp = Vec::new();
    let mut bind = Vec::new();
    for common::SrqPair {
        req: r,
        cq,
        resp: on_srq,
    } in common::srq_pairs(dev, n, s.sim.srqn, rcq_sim.cqn, rnr_retry)
    {
        let (sqs, cq) = send_only(&r, &cq.layout);
        // SAFETY: the device outlives the queue, which alone drives its ring.
        let sq = unsafe { SendQueue::new(&r.layout, r.caps(), sqs, None) }.unwrap();
        req.push((r, sq, cq));
        bind.push(CqBinding::with_srq(on_srq.qpn, None, s.state));
        resp.push(on_srq);
    }
    let bind: &'static [_] = bind.leak();
    // SAFETY: the device outlives the poller, which alone polls the receive CQ.
    let rcq = unsafe { CompletionQueue::new(&rcq_sim.layout, bind) }.unwrap();
    Setup {
        dev,
        mem,
        mr,
        srq: s.queue,
        layout: s.layout,
        req,
        resp,
        rcq,
    }
}

impl Setup {
    fn sge(&self, off: usize, len: u32) -> Sge {
        Sge::new(self.mem.addr(off), len, self.mr.lkey)
    }

    fn post_recv(&mut self, wr_id: u64, off: usize, len: u32) -> Result<(), PostError> {
        let sgl = [self.sge(off, len)];
        // SAFETY: the entry lies in the registered arena.
        unsafe { self.srq.post(&RecvWr::new(wr_id, &sgl)) }
    }

    /// A signaled SEND of `len` bytes at `off` from requester `i`.
    fn send(&mut self, i: usize, wr_id: u64, off: usize, len: u32) {
        let sgl = [self.sge(off, len)];
        // SAFETY: as above.
        unsafe { self.req[i].1.post(&SendWr::send(wr_id, &sgl).signaled()) }.unwrap();
    }
}

#[test]
fn three_qps_share_one_srq_and_each_completion_names_its_qp() {
    let mut s = setup(3, 8, 0);
    // Two entries asked for: a 64-byte stride, three data segments after the next segment.
    assert_eq!((s.layout.stride, s.srq.max_sge()), (64, 3));
    for i in 0..3u64 {
        s.post_recv(0x100 + i, 1024 * i as usize, 256).unwrap();
    }
    for i in 0..3 {
        s.mem.write(8192 + i * 64, &[i as u8 + 1; 64]);
    }
    // Requester 2 first, then 0, then 1: the receives are taken in free-list order.
    for (n, i) in [2usize, 0, 1].into_iter().enumerate() {
        s.send(i, n as u64, 8192 + i * 64, 10 + i as u32);
        s.dev.run_until_idle();
    }
    let rx = drain(&mut s.rcq);
    let got: Vec<_> = rx
        .iter()
        .map(|c| (c.wr_id, c.qp_num, c.byte_len, c.opcode, c.status))
        .collect();
    let want = |wr, i: usize| {
        (
            wr,
            s.resp[i].qpn,
            10 + i as u32,
            WcOpcode::Recv,
            WcStatus::Success,
        )
    };
    assert_eq!(got, vec![want(0x100, 2), want(0x101, 0), want(0x102, 1)]);
    assert_eq!(s.mem.read(0, 12), vec![3; 12]);
    assert_eq!(s.mem.read(1024, 10), vec![1; 10]);
    assert_eq!(s.mem.read(2048, 11), vec![2; 11]);
    for (_, _, cq) in &mut s.req {
        assert_eq!(drain(cq).len(), 1);
    }
}

#[test]
fn the_srq_is_refilled_round_after_round() {
    // 8 WQEs: 7 outstanding at most. 25 rounds of 5 take every WQE many times over, in the
    // order the poller freed them.
    let mut s = setup(3, 7, 0);
    assert_eq!(s.layout.wqe_cnt, 8);
    let mut next = 0u64;
    for round in 0..25u64 {
        for k in 0..5 {
            s.post_recv(next + k, (k as usize) * 512, 64).unwrap();
        }
        for k in 0..5u64 {
            let i = ((round + k) % 3) as usize;
            s.mem.write(8192, &[(round * 5 + k) as u8; 16]);
            s.send(i, k, 8192, 16);
            s.dev.run_until_idle();
            let rx = drain(&mut s.rcq);
            assert_eq!(rx.len(), 1, "round {round}");
            assert_eq!((rx[0].wr_id, rx[0].qp_num), (next + k, s.resp[i].qpn));
            assert_eq!(
                s.mem.read(k as usize * 512, 16),
                vec![(round * 5 + k) as u8; 16]
            );
            assert_eq!(drain(&mut s.req[i].2).len(), 1);
        }
        next += 5;
        assert_eq!(s.srq.free(), 7, "every WQE back on the list");
    }
    assert_eq!(s.srq.posted(), 125);
}

#[test]
fn an_empty_srq_is_an_rnr_nak_until_a_receive_is_posted() {
    // Without retries: the requester's SEND fails with RNR retry exceeded.
    let mut s = setup(1, 4, 0);
    s.send(0, 7, 8192, 8);
    s.dev.run_until_idle();
    let tx = drain(&mut s.req[0].2);
    assert_eq!((tx[0].wr_id, tx[0].status), (7, WcStatus::RnrRetryExcErr));
    assert!(drain(&mut s.rcq).is_empty());
    assert_eq!(s.dev.stats().rnr_naks, 1);

    // Retrying for ever: the SEND waits, and lands once a receive is posted.
    let mut s = setup(1, 4, RNR_RETRY_INFINITE);
    s.mem.write(8192, b"patience");
    s.send(0, 8, 8192, 8);
    s.dev.run_until_idle();
    assert!(drain(&mut s.req[0].2).is_empty(), "still waiting");
    s.post_recv(0x77, 0, 64).unwrap();
    s.dev.run_until_idle();
    let rx = drain(&mut s.rcq);
    assert_eq!((rx[0].wr_id, rx[0].byte_len), (0x77, 8));
    assert_eq!(s.mem.read(0, 8), b"patience");
    let tx = drain(&mut s.req[0].2);
    assert_eq!((tx[0].wr_id, tx[0].status), (8, WcStatus::Success));
}

#[test]
fn refused_posts_write_nothing() {
    let mut s = setup(1, 3, 0);
    assert_eq!(s.layout.wqe_cnt, 4);
    let ring = s.layout.buf.as_ptr();
    let len = (s.layout.wqe_cnt * s.layout.stride) as usize;
    let dbrec = s.layout.dbrec.as_ptr();
    // SAFETY: the device's ring and doorbell record, live while it is; nothing else writes
    // them while the test reads.
    let snapshot = || unsafe {
        (
            std::slice::from_raw_parts(ring, len).to_vec(),
            dbrec.read_volatile(),
        )
    };
    // Too many entries.
    let before = snapshot();
    let four = [s.sge(0, 8); 4];
    assert_eq!(
        // SAFETY: refused before anything is written.
        unsafe { s.srq.post(&RecvWr::new(1, &four)) },
        Err(PostError::TooManySges { got: 4, max: 3 })
    );
    assert_eq!(snapshot(), before);
    // Full: three receives fill a ring of four WQEs (the tail is never taken).
    for i in 0..3 {
        s.post_recv(i, i as usize * 64, 64).unwrap();
    }
    let full = snapshot();
    assert_eq!(full.1, 3u32.to_be());
    assert_eq!(
        s.post_recv(9, 512, 64),
        Err(PostError::QueueFull { needed: 1, free: 0 })
    );
    // A batch that does not fit is refused whole.
    let one = [s.sge(0, 8)];
    let wrs = [RecvWr::new(10, &one), RecvWr::new(11, &one)];
    // SAFETY: as above.
    let e = unsafe { s.srq.post_all(&wrs) }.unwrap_err();
    assert_eq!(
        (e.index, e.error),
        (0, PostError::QueueFull { needed: 1, free: 0 })
    );
    assert_eq!(snapshot(), full);
    assert_eq!(s.srq.posted(), 3);
    // One completes: its WQE comes back, and the post that was refused now fits.
    s.send(0, 1, 8192, 4);
    s.dev.run_until_idle();
    assert_eq!(drain(&mut s.rcq)[0].wr_id, 0);
    s.post_recv(9, 512, 64).unwrap();
    assert_eq!(s.srq.free(), 0);
}
