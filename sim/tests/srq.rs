//! Shared receive queues on the device: the ring libmlx5 lays out, consumption in free-list
//! order by several QPs, the receive CQE (QP, SRQ number or user index, WQE index), an empty
//! SRQ as an RNR NAK, the limit event, a QP in error leaving the SRQ to the others, and
//! malformed rings (a doorbell record claiming more than the ring, a link outside it).

mod common;
mod raw;

use common::Arena;
use raw::{Body, Dest, RawCq, RawQp, RawSrq};
use zverbs_mlx5dv::prm::cqe::{Cqe64, Syndrome, op};
use zverbs_mlx5dv::prm::{fm_ce_se, opcode};
use zverbs_sim::{
    Access, AhAttr, CqConfig, Device, Mr, QpConfig, QpStatus, QpType, SimError, SrqConfig,
    SrqEvent, vendor,
};

const SIGNALED: u8 = fm_ce_se::CQ_UPDATE;

struct Setup {
    mr: Mr,
    srq: RawSrq,
    /// Requesters, each connected to the responder of the same index.
    req: Vec<(RawQp, RawCq)>,
    /// Responders on the SRQ, sharing one receive CQ.
    resp: Vec<RawQp>,
    rcq: RawCq,
}

/// `n` RC pairs whose responders take their receives from one SRQ of `max_wr` WQEs.
fn setup(dev: &Device, mem: &Arena, n: usize, max_wr: u32, rnr_retry: u8) -> Setup {
    // SAFETY: `mem` outlives `dev` in every test.
    let mr = unsafe { dev.reg_mr(mem.ptr(0), mem.len(), Access::ALL) }.unwrap();
    let srq = dev.create_srq(SrqConfig { max_wr, max_sge: 2 }).unwrap();
    let rcq = dev.create_cq(CqConfig { cqe: 64 }).unwrap();
    let mut req = Vec::new();
    let mut resp = Vec::new();
    for p in common::srq_pairs(dev, n, srq.srqn, rcq.cqn, rnr_retry) {
        req.push((RawQp::new(p.req), RawCq::new(p.cq)));
        resp.push(RawQp::new(p.resp));
    }
    Setup {
        mr,
        srq: RawSrq::new(srq),
        req,
        resp,
        rcq: RawCq::new(rcq),
    }
}

impl Setup {
    /// A signaled SEND of `len` bytes at `off` from requester `i`.
    fn send(&mut self, i: usize, mem: &Arena, off: usize, len: u32) {
        let sg = [(mem.addr(off), len, self.mr.lkey)];
        self.req[i]
            .0
            .post_send(opcode::SEND, None, Body::Sges(&sg), 0, SIGNALED);
    }

    fn post(&mut self, mem: &Arena, off: usize, len: u32) -> u16 {
        self.srq
            .post(&[(mem.addr(off), len, self.mr.lkey)])
            .expect("room in the SRQ")
    }
}

fn cqe(c: &[u8; 64]) -> Cqe64<&[u8; 64]> {
    Cqe64::new_unchecked(c)
}

#[test]
fn the_ring_is_linked_as_libmlx5_links_it() {
    let dev = Device::new();
    let srq = dev
        .create_srq(SrqConfig {
            max_wr: 5,
            max_sge: 3,
        })
        .unwrap();
    // One WQE more than asked for, to a power of two; a next segment and 3 data segments,
    // 64 bytes.
    assert_eq!((srq.wqe_cnt, srq.stride, srq.max_gs), (8, 64, 3));
    assert_eq!((srq.head, srq.tail), (0, 7));
    let raw = RawSrq::new(srq);
    for i in 0..7 {
        assert_eq!(raw.next(i), i as u16 + 1);
    }
    assert_eq!(raw.next(7), 0);
    // SAFETY: the SRQ's doorbell record, valid while the device lives.
    assert_eq!(unsafe { srq.dbrec.as_ptr().read() }, 0);
    let bad = |cfg| {
        assert!(matches!(
            dev.create_srq(cfg),
            Err(SimError::InvalidConfig(_))
        ))
    };
    bad(SrqConfig {
        max_wr: 0,
        max_sge: 1,
    });
    bad(SrqConfig {
        max_wr: 1 << 15,
        max_sge: 1,
    });
    bad(SrqConfig {
        max_wr: 4,
        max_sge: 64,
    });
}

#[test]
fn qps_on_an_srq_have_no_receive_queue() {
    let dev = Device::new();
    let srq = dev.create_srq(SrqConfig::default()).unwrap();
    let cq = dev.create_cq(CqConfig { cqe: 4 }).unwrap();
    let cfg = QpConfig {
        send_cq: cq.cqn,
        recv_cq: cq.cqn,
        ..QpConfig::default()
    };
    assert!(matches!(
        dev.create_qp_ext(cfg, QpType::Rc, Some(srq.srqn)),
        Err(SimError::InvalidConfig(_))
    ));
    assert_eq!(
        dev.create_qp_ext(cfg, QpType::Rc, Some(0x00ab_cdef)),
        Err(SimError::NoSuchSrq(0x00ab_cdef))
    );
    let qp = dev
        .create_qp_ext(
            QpConfig {
                max_recv_wr: 0,
                ..cfg
            },
            QpType::Rc,
            Some(srq.srqn),
        )
        .unwrap();
    assert_eq!(qp.layout.rq.wqe_cnt, 0);
    assert!(matches!(
        dev.destroy_srq(srq.srqn),
        Err(SimError::InvalidConfig(_))
    ));
    dev.destroy_qp(qp.qpn).unwrap();
    dev.destroy_srq(srq.srqn).unwrap();
    assert_eq!(dev.srq_event(srq.srqn), Err(SimError::NoSuchSrq(srq.srqn)));
}

#[test]
fn qps_take_receives_in_free_list_order() {
    let mem = Arena::new(8192);
    let dev = Device::new();
    // 4 WQEs asked for: a ring of 8.
    let mut s = setup(&dev, &mem, 2, 4, 0);
    for i in 0..3 {
        assert_eq!(s.post(&mem, i * 256, 256), i as u16);
    }
    mem.write(4096, b"aaaa");
    mem.write(4100, b"bbbbbb");
    mem.write(4106, b"cc");
    s.send(0, &mem, 4096, 4);
    s.send(1, &mem, 4100, 6);
    dev.run_until_idle();
    s.send(0, &mem, 4106, 2);
    dev.run_until_idle();
    let srqn = s.srq.srq.srqn;
    let want = [
        (0, s.resp[0].qpn(), 4),
        (1, s.resp[1].qpn(), 6),
        (2, s.resp[0].qpn(), 2),
    ];
    for (index, qpn, len) in want {
        let c = s.rcq.poll().expect("a receive CQE");
        let v = cqe(&c);
        assert_eq!(v.op_own() >> 4, op::RESP_SEND);
        assert_eq!(v.wqe_counter(), index, "the SRQ WQE's index");
        assert_eq!(v.srqn(), srqn, "CQE version 0: the SRQ number");
        assert_eq!(v.qpn(), qpn, "the QP it arrived on");
        assert_eq!(v.byte_cnt(), len);
    }
    assert_eq!(mem.read(0, 4), b"aaaa");
    assert_eq!(mem.read(256, 6), b"bbbbbb");
    assert_eq!(mem.read(512, 2), b"cc");
    for (_, cq) in &mut s.req {
        while let Some(c) = cq.poll() {
            assert_eq!(cqe(&c).op_own() >> 4, op::REQ);
        }
    }
    // Freed WQEs are linked after the tail, here out of order (2, 0, 1), and the device
    // follows the links, not the ring order, once the list reaches them.
    for i in [2, 0, 1] {
        s.srq.free(i);
    }
    let order = [3, 4, 5, 6, 7, 2];
    for (i, want) in order.into_iter().enumerate() {
        assert_eq!(s.post(&mem, 1024 + i * 64, 64), want);
    }
    for (i, want) in order.into_iter().enumerate() {
        s.send(i % 2, &mem, 4096, 4);
        dev.run_until_idle();
        let c = s.rcq.poll().unwrap();
        assert_eq!(cqe(&c).wqe_counter(), want);
    }

    // With a user index chosen by the driver (CQE version 1), the CQE carries it instead.
    assert_eq!(s.post(&mem, 0, 64), 0);
    dev.set_user_index(s.resp[1].qpn(), 0x42).unwrap();
    s.send(1, &mem, 4096, 4);
    dev.run_until_idle();
    let c = s.rcq.poll().unwrap();
    assert_eq!((cqe(&c).srqn(), cqe(&c).wqe_counter()), (0x42, 0));
}

#[test]
fn an_empty_srq_is_an_rnr_nak() {
    let mem = Arena::new(4096);
    let dev = Device::new();
    let mut s = setup(&dev, &mem, 1, 4, 1);
    mem.write(1024, b"late");
    s.send(0, &mem, 1024, 4);
    dev.step();
    assert_eq!(dev.stats().rnr_naks, 1);
    // Posted before the retry runs out: delivered.
    s.post(&mem, 0, 64);
    dev.run_until_idle();
    assert_eq!(cqe(&s.rcq.poll().unwrap()).byte_cnt(), 4);
    assert_eq!(cqe(&s.req[0].1.poll().unwrap()).op_own() >> 4, op::REQ);
    // Not posted: RNR retry exceeded.
    s.send(0, &mem, 1024, 4);
    dev.run_until_idle();
    let e = s.req[0].1.poll().unwrap();
    assert_eq!(cqe(&e).syndrome(), Syndrome::RnrRetryExcErr);
    assert!(s.rcq.is_empty());
}

#[test]
fn the_limit_fires_once_when_posted_receives_drop_below_it() {
    let mem = Arena::new(4096);
    let dev = Device::new();
    let mut s = setup(&dev, &mem, 1, 8, 0);
    let srqn = s.srq.srq.srqn;
    assert!(matches!(
        dev.arm_srq(srqn, 16),
        Err(SimError::InvalidConfig(_))
    ));
    dev.arm_srq(srqn, 2).unwrap();
    for i in 0..3 {
        s.post(&mem, i * 64, 64);
    }
    s.send(0, &mem, 2048, 1);
    dev.run_until_idle();
    assert_eq!(dev.srq_event(srqn).unwrap(), None, "2 posted: not below 2");
    s.send(0, &mem, 2048, 1);
    dev.run_until_idle();
    assert_eq!(dev.srq_event(srqn).unwrap(), Some(SrqEvent::LimitReached));
    assert_eq!(dev.srq_event(srqn).unwrap(), None, "read once");
    s.send(0, &mem, 2048, 1);
    dev.run_until_idle();
    assert_eq!(dev.srq_event(srqn).unwrap(), None, "disarmed");
    assert_eq!(dev.stats().recvs, 3);
}

#[test]
fn a_qp_in_error_leaves_the_srq_to_the_others() {
    let mem = Arena::new(4096);
    let dev = Device::new();
    let mut s = setup(&dev, &mem, 2, 4, 0);
    s.post(&mem, 0, 64);
    s.post(&mem, 64, 64);
    dev.set_error(s.resp[0].qpn()).unwrap();
    dev.run_until_idle();
    assert!(s.rcq.is_empty(), "no receive of the SRQ is flushed for it");
    s.send(0, &mem, 2048, 8);
    dev.run_until_idle();
    let e = s.req[0].1.poll().unwrap();
    assert_eq!(cqe(&e).syndrome(), Syndrome::TransportRetryExcErr);
    // The other QP still gets the SRQ's WQEs, from the head.
    s.send(1, &mem, 2048, 8);
    dev.run_until_idle();
    let c = s.rcq.poll().unwrap();
    assert_eq!((cqe(&c).qpn(), cqe(&c).wqe_counter()), (s.resp[1].qpn(), 0));
    assert_eq!(dev.qp_status(s.resp[1].qpn()).unwrap(), QpStatus::Rts);
}

#[test]
fn a_link_outside_the_ring_puts_the_srq_in_error() {
    let mem = Arena::new(4096);
    let dev = Device::new();
    let mut s = setup(&dev, &mem, 1, 4, 0);
    let srqn = s.srq.srq.srqn;
    let idx = s.post(&mem, 0, 64);
    s.srq.set_next(u32::from(idx), 0x7fff);
    s.send(0, &mem, 2048, 8);
    dev.run_until_idle();
    let e = s.req[0].1.poll().unwrap();
    let v = cqe(&e);
    assert_eq!(v.syndrome(), Syndrome::RemoteOpErr);
    assert_eq!(v.vendor_err_synd(), vendor::SRQ_ERROR);
    assert!(s.rcq.is_empty());
    assert_eq!(mem.read(0, 8), vec![0; 8], "nothing placed");
    assert_eq!(dev.srq_event(srqn).unwrap(), Some(SrqEvent::Error));
    assert_eq!(dev.srq_event(srqn).unwrap(), None);
}

#[test]
fn a_doorbell_record_claiming_more_than_the_ring_puts_the_srq_in_error() {
    let mem = Arena::new(4096);
    let dev = Device::new();
    let mut s = setup(&dev, &mem, 1, 4, 0);
    // An SRQ of 8 WQEs told 9 are posted.
    s.srq.counter = s.srq.srq.wqe_cnt + 1;
    s.srq.ring();
    s.send(0, &mem, 2048, 8);
    dev.run_until_idle();
    let e = s.req[0].1.poll().unwrap();
    assert_eq!(cqe(&e).vendor_err_synd(), vendor::SRQ_ERROR);
    assert_eq!(dev.stats().bad_doorbells, 1);
    assert_eq!(
        dev.srq_event(s.srq.srq.srqn).unwrap(),
        Some(SrqEvent::Error)
    );
    // The driver's own check: a full free list refuses the post.
    let mut full = RawSrq::new(
        dev.create_srq(SrqConfig {
            max_wr: 1,
            max_sge: 1,
        })
        .unwrap(),
    );
    assert!(full.post(&[(mem.addr(0), 8, s.mr.lkey)]).is_some());
    assert!(full.post(&[(mem.addr(0), 8, s.mr.lkey)]).is_none());
}

#[test]
fn ud_qps_take_datagrams_from_an_srq() {
    let mem = Arena::new(4096);
    let dev = Device::new();
    // SAFETY: `mem` outlives `dev`.
    let mr = unsafe { dev.reg_mr(mem.ptr(0), 4096, Access::ALL) }.unwrap();
    let srq = dev.create_srq(SrqConfig::default()).unwrap();
    let mut raw_srq = RawSrq::new(srq);
    let cq = dev.create_cq(CqConfig { cqe: 16 }).unwrap();
    let mut rcq = RawCq::new(cq);
    let cfg = QpConfig {
        send_cq: cq.cqn,
        recv_cq: cq.cqn,
        max_recv_wr: 0,
        ..QpConfig::default()
    };
    let a = dev.create_qp_ext(cfg, QpType::Ud, Some(srq.srqn)).unwrap();
    let b = dev.create_qp_ext(cfg, QpType::Ud, Some(srq.srqn)).unwrap();
    for q in [a.qpn, b.qpn] {
        dev.init_ud(q, 7, 0).unwrap();
        dev.ready_ud(q).unwrap();
    }
    raw_srq.post(&[(mem.addr(0), 128, mr.lkey)]).unwrap();
    let av = dev
        .create_ah(&AhAttr {
            dlid: dev.lid(),
            ..AhAttr::default()
        })
        .unwrap()
        .av;
    let mut a = RawQp::new(a);
    let dest = Dest {
        av,
        dqpn: b.qpn,
        qkey: 7,
    };
    a.post_send(opcode::SEND, Some(&dest), Body::Inline(b"shared"), 0, 0);
    dev.run_until_idle();
    let c = rcq.poll().unwrap();
    let v = cqe(&c);
    assert_eq!((v.qpn(), v.srqn(), v.wqe_counter()), (b.qpn, srq.srqn, 0));
    assert_eq!((v.src_qp(), v.byte_cnt()), (a.qpn(), 46));
    assert_eq!(mem.read(40, 6), b"shared");
}
