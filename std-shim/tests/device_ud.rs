//! Unreliable datagrams on a real device: UD queue pairs addressed through address handles, on
//! one device (`one_device`) and across the link (`across_the_pair`), with the receive memory
//! (the datagram after the 40-byte GRH area, nothing past it) and both sides' completions
//! checked; multicast through rdma_cm (two receivers, one leaves); and the requests refused
//! with a typed error before anything reaches the device (a datagram above the path MTU, an RC
//! operation without an address handle), or dropped by the receiver (a wrong Q_Key). On rxe
//! the queues are the libibverbs fallback's; on a ConnectX, the direct path's.
//!
//! Device tests: they return at once unless `ZVERBS_TEST_DEVICE` names a device
//! (docs/testing.md); `cargo xtask test` runs them on rxe in a VM.

// They connect (or join a multicast group) through rdma_cm.
#![cfg(feature = "rdma_cm")]

mod device;

use std::net::IpAddr;
use std::time::{Duration, Instant};

use device::ud::{Expect, QKEY, check_datagram};
use device::{BUF_LEN, Link, bytes, pattern, wait, wait_some};
use zverbs::connect::Endpoint;
use zverbs::connect::cm::CmMulticast;
use zverbs::safe::SafePostError;
use zverbs::{
    AccessFlags, Completion, Context, Cq, LocalAddress, MrBuf, Pd, PollCq, Poller, PostError,
    PostSend, Qp, RecvQueue, Registered, SendFlags, SendQueue, SendWr, Sge, UdAttr, UdTarget,
    WcOpcode,
};

const SIG: SendFlags = SendFlags::SIGNALED;
/// Bytes of each receive: the GRH area, a datagram of up to 4 KiB (the largest path MTU)
/// and room to see that nothing was written past it.
const SLOT: usize = 4352;
/// What the receive buffers hold before the datagrams land.
const FILL: u8 = 0xee;

on_both_links!(
    send_and_send_with_immediate,
    gather_and_inline,
    above_the_mtu_is_refused,
    wrong_qkey_is_dropped,
    send_without_an_address_handle_is_refused,
    multicast_to_two_receivers_then_one_leaves,
);

/// One end: a UD QP in RTS with its own CQ and a 64 KiB buffer.
struct UdSide {
    local: LocalAddress,
    pd: Pd,
    buf: MrBuf,
    cq: Cq,
    qp: Qp,
}

impl UdSide {
    fn new(ctx: &Context, gid_index: u32) -> Self {
        let local = device::address(ctx, gid_index);
        let pd = ctx.alloc_pd().expect("ibv_alloc_pd");
        let buf = pd.alloc_buf(BUF_LEN, AccessFlags::ALL).expect("a buffer");
        let cq = ctx.cq_builder().cqe(64).build().expect("ibv_create_cq");
        let qp = pd
            .qp_builder(&cq, &cq)
            .ud()
            .max_send_wr(16)
            .max_recv_wr(16)
            .max_send_sge(2)
            .max_recv_sge(1)
            .max_inline_data(64)
            .build()
            .expect("ibv_create_qp (UD)");
        device::check_backend(ctx, &qp);
        let mut attr = UdAttr::new(QKEY);
        attr.port = local.port;
        qp.ready_ud(&attr).expect("UD QP to RTS");
        buf.fill(0..BUF_LEN, FILL).unwrap();
        Self {
            local,
            pd,
            buf,
            cq,
            qp,
        }
    }

    /// An address handle to `peer`'s port (with a GRH: RoCE needs one) and its QP.
    fn target(&self, peer: &UdSide, qkey: u32) -> UdTarget {
        let ep = Endpoint {
            lid: peer.local.lid,
            qpn: peer.qp.qpn(),
            psn: 0,
            gid: peer.local.gid,
        };
        self.pd
            .create_ah_to(self.local.port, &ep, self.local.gid_index)
            .expect("ibv_create_ah")
            .target(peer.qp.qpn(), qkey)
    }

    fn queues(&self) -> (SendQueue, RecvQueue, Poller) {
        (
            self.qp.send_queue().expect("the send queue"),
            self.qp.recv_queue().expect("the receive queue"),
            self.cq.poller().expect("the poller"),
        )
    }
}

/// Two UD ends on `link`'s devices, or `None` when the environment lacks what the link needs.
fn ud_pair(link: Link) -> Option<(UdSide, UdSide)> {
    let env = device::env()?;
    let (da, db) = env.devices(link)?;
    let ca = device::open(&da);
    let cb = if db == da {
        ca.clone()
    } else {
        device::open(&db)
    };
    let (a, b) = (
        UdSide::new(&ca, env.gid_index),
        UdSide::new(&cb, env.gid_index),
    );
    println!(
        "A: {} UD QPN {:#x} GID {}; B: {} UD QPN {:#x} GID {}; backend {}",
        ca.name(),
        a.qp.qpn(),
        a.local.gid,
        cb.name(),
        b.qp.qpn(),
        b.local.gid,
        a.qp.backend()
    );
    Some((a, b))
}

/// Posts `n` receives of [`SLOT`] bytes, `wr_id` `first + i` at `i * SLOT`.
fn post_slots(rq: RecvQueue, buf: &MrBuf, first: u64, n: usize) -> RecvQueue {
    let mut rq = rq;
    for i in 0..n {
        rq.post(
            first + i as u64,
            buf.slice(i * SLOT..(i + 1) * SLOT).unwrap(),
        )
        .unwrap();
    }
    rq
}

/// Nothing arrives on `cq` for a while (a datagram the device dropped, or never sent).
fn nothing_on<C: PollCq>(cq: &mut C) {
    let t = Instant::now();
    let mut wc = [Completion::EMPTY; 4];
    while t.elapsed() < Duration::from_millis(200) {
        let k = cq.poll(&mut wc);
        assert_eq!(k, 0, "unexpected completions: {:?}", &wc[..k]);
    }
}

/// The requester's completions of `ids`, in order, each a successful SEND.
fn sent(w: &[Completion], ids: &[u64]) {
    for (c, id) in w.iter().zip(ids) {
        assert!(c.status.is_success(), "{c:?}");
        assert_eq!((c.wr_id, c.opcode), (*id, WcOpcode::Send), "{c:?}");
    }
    assert_eq!(w.len(), ids.len());
}

/// SEND and SEND with immediate through an address handle: each lands after the GRH area of
/// the receive it consumed, nothing past it; the receiver's completions name the sender's QP,
/// carry the GRH flag (always set on RoCE; set on the software device for an address handle
/// with a GRH) and the immediate.
fn send_and_send_with_immediate(link: Link) {
    let Some((a, b)) = ud_pair(link) else {
        return;
    };
    let (sq, _, mut acq) = a.queues();
    let (_, rq, mut bcq) = b.queues();
    let _rq = post_slots(rq, &b.buf, 10, 2);
    let mut sq = sq;
    let to_b = a.target(&b, QKEY);
    let (d1, d2) = (pattern(1, 300), pattern(2, 1000));
    a.buf.write(0, &d1).unwrap();
    a.buf.write(4096, &d2).unwrap();
    sq.send_to(1, a.buf.slice(0..300).unwrap(), &to_b, SIG)
        .unwrap();
    sq.send_to_imm(2, a.buf.slice(4096..5096).unwrap(), &to_b, 0x1234_5678, SIG)
        .unwrap();
    sent(&wait(&mut acq, 2), &[1, 2]);
    let w = wait(&mut bcq, 2);
    let e = |wr_id, data, imm| Expect {
        wr_id,
        qp_num: b.qp.qpn(),
        src_qp: a.qp.qpn(),
        data,
        imm,
        grh: true,
    };
    check_datagram(&w[0], &e(10, &d1, None), &b.buf, 0, 64, FILL);
    check_datagram(
        &w[1],
        &e(11, &d2, Some(0x1234_5678)),
        &b.buf,
        SLOT,
        64,
        FILL,
    );
}

/// A datagram gathered from two entries, and one copied into the request (inline, with an
/// immediate): each arrives whole, in order.
fn gather_and_inline(link: Link) {
    let Some((a, b)) = ud_pair(link) else {
        return;
    };
    let (mut sq, _, mut acq) = a.queues();
    let (_, rq, mut bcq) = b.queues();
    let _rq = post_slots(rq, &b.buf, 20, 2);
    let to_b = a.target(&b, QKEY);
    let data = pattern(3, 700);
    a.buf.write(100, &data[..200]).unwrap();
    a.buf.write(9000, &data[200..]).unwrap();
    let sgl = [a.buf.sge(100..300).unwrap(), a.buf.sge(9000..9500).unwrap()];
    let wr = SendWr::send_to(5, &sgl, to_b.dest()).signaled();
    // SAFETY: registered memory that outlives the completion polled below.
    unsafe { sq.post(&wr) }.unwrap();
    let small = pattern(4, 48);
    let sgl = [Sge::from_slice(&small, 0)];
    let wr = SendWr::send_to_imm(6, &sgl, to_b.dest(), 0xabcd)
        .inline()
        .signaled();
    // SAFETY: inline data is copied into the request.
    unsafe { sq.post(&wr) }.unwrap();
    sent(&wait(&mut acq, 2), &[5, 6]);
    let w = wait(&mut bcq, 2);
    let e = |wr_id, data, imm| Expect {
        wr_id,
        qp_num: b.qp.qpn(),
        src_qp: a.qp.qpn(),
        data,
        imm,
        grh: true,
    };
    check_datagram(&w[0], &e(20, &data, None), &b.buf, 0, 64, FILL);
    check_datagram(&w[1], &e(21, &small, Some(0xabcd)), &b.buf, SLOT, 64, FILL);
}

/// A datagram one byte above the path MTU (the port's active MTU) is refused with
/// `DatagramTooLong`, alone and as the second request of a batch, before anything reaches the
/// device: no completion on either side, and the next datagram takes the first receive.
fn above_the_mtu_is_refused(link: Link) {
    let Some((a, b)) = ud_pair(link) else {
        return;
    };
    let mtu = a.local.active_mtu.bytes() as usize;
    assert_eq!(
        a.qp.send_caps().transport,
        zverbs::core::Transport::Ud { mtu: mtu as u32 }
    );
    let (sq, _, mut acq) = a.queues();
    let (_, rq, mut bcq) = b.queues();
    let _rq = post_slots(rq, &b.buf, 30, 2);
    let mut sq = sq;
    let to_b = a.target(&b, QKEY);
    let e = sq
        .send_to(1, a.buf.slice(0..mtu + 1).unwrap(), &to_b, SIG)
        .unwrap_err();
    assert_eq!(
        e,
        SafePostError::Post(PostError::DatagramTooLong {
            len: mtu as u32 + 1,
            mtu: mtu as u32
        })
    );
    let mut batch = sq.batch();
    batch
        .send_to(2, a.buf.slice(0..8).unwrap(), &to_b, SIG)
        .unwrap();
    let e = batch
        .send_to(3, a.buf.slice(0..mtu + 1).unwrap(), &to_b, SIG)
        .unwrap_err();
    assert!(
        matches!(e, SafePostError::Post(PostError::DatagramTooLong { .. })),
        "{e:?}"
    );
    batch.finish();
    // The batch's accepted request went; the refused ones left nothing.
    sent(&wait(&mut acq, 1), &[2]);
    let w = wait(&mut bcq, 1);
    let head = bytes(&a.buf, 0, 8);
    let e = |wr_id, data| Expect {
        wr_id,
        qp_num: b.qp.qpn(),
        src_qp: a.qp.qpn(),
        data,
        imm: None,
        grh: true,
    };
    check_datagram(&w[0], &e(30, &head), &b.buf, 0, 64, FILL);
    // Exactly the MTU is accepted.
    let full = pattern(5, mtu);
    a.buf.write(0, &full).unwrap();
    sq.send_to(4, a.buf.slice(0..mtu).unwrap(), &to_b, SIG)
        .unwrap();
    sent(&wait(&mut acq, 1), &[4]);
    let w = wait(&mut bcq, 1);
    check_datagram(&w[0], &e(31, &full), &b.buf, SLOT, 64, FILL);
}

/// A datagram whose Q_Key is not the receiver's is dropped by the receiving device: it
/// completes on the sender (UD has no acknowledgement), nothing completes on the receiver and
/// no receive is consumed; the next one, with the right Q_Key, takes the first receive.
fn wrong_qkey_is_dropped(link: Link) {
    let Some((a, b)) = ud_pair(link) else {
        return;
    };
    let (sq, _, mut acq) = a.queues();
    let (_, rq, mut bcq) = b.queues();
    let _rq = post_slots(rq, &b.buf, 40, 2);
    let mut sq = sq;
    let wrong = a.target(&b, QKEY ^ 0x0f0f);
    let right = a.target(&b, QKEY);
    let (d1, d2) = (pattern(6, 100), pattern(7, 120));
    a.buf.write(0, &d1).unwrap();
    a.buf.write(1024, &d2).unwrap();
    sq.send_to(1, a.buf.slice(0..100).unwrap(), &wrong, SIG)
        .unwrap();
    sent(&wait(&mut acq, 1), &[1]);
    nothing_on(&mut bcq);
    sq.send_to(2, a.buf.slice(1024..1144).unwrap(), &right, SIG)
        .unwrap();
    sent(&wait(&mut acq, 1), &[2]);
    let w = wait(&mut bcq, 1);
    let e = Expect {
        wr_id: 40,
        qp_num: b.qp.qpn(),
        src_qp: a.qp.qpn(),
        data: &d2,
        imm: None,
        grh: true,
    };
    check_datagram(&w[0], &e, &b.buf, 0, 64, FILL);
}

/// A UD send needs an address handle: `send_to` takes a `UdTarget`, which only
/// `AddressHandle::target` makes (so leaving it out does not compile), and the RC operations
/// that have none (`send`, `send_imm`, `write`) are refused on a UD queue with
/// `WrongTransport` (a typed error at run time: the queue types of both backends post RC and
/// UD requests alike), with nothing sent.
fn send_without_an_address_handle_is_refused(link: Link) {
    let Some((a, b)) = ud_pair(link) else {
        return;
    };
    let (sq, _, mut acq) = a.queues();
    let (_, rq, mut bcq) = b.queues();
    let _rq = post_slots(rq, &b.buf, 50, 1);
    let mut sq = sq;
    let wrong = SafePostError::Post(PostError::WrongTransport);
    assert_eq!(sq.send(1, a.buf.slice(0..8).unwrap(), SIG), Err(wrong));
    assert_eq!(
        sq.send_imm(2, a.buf.slice(0..8).unwrap(), 7, SIG),
        Err(wrong)
    );
    assert_eq!(
        sq.write(3, a.buf.slice(0..8).unwrap(), b.buf.remote(0).unwrap(), SIG),
        Err(wrong)
    );
    nothing_on(&mut acq);
    nothing_on(&mut bcq);
    let to_b = a.target(&b, QKEY);
    let d = pattern(8, 16);
    a.buf.write(0, &d).unwrap();
    sq.send_to(4, a.buf.slice(0..16).unwrap(), &to_b, SIG)
        .unwrap();
    sent(&wait(&mut acq, 1), &[4]);
    let w = wait(&mut bcq, 1);
    let e = Expect {
        wr_id: 50,
        qp_num: b.qp.qpn(),
        src_qp: a.qp.qpn(),
        data: &d,
        imm: None,
        grh: true,
    };
    check_datagram(&w[0], &e, &b.buf, 0, 64, FILL);
}

/// One receiver of a multicast group: its membership (rdma_cm), UD QP, buffer and queues.
struct Member {
    group: zverbs::connect::cm::McastGroup,
    qp: Qp,
    buf: MrBuf,
    rq: RecvQueue,
    cq: Poller,
    _cq: Cq,
}

fn member(group: IpAddr, bind: IpAddr, slots: usize) -> Member {
    let m = CmMulticast::resolve(group, Some(bind), Duration::from_secs(10)).expect("resolve");
    let ctx = m.context().clone();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.cq_builder().cqe(32).build().unwrap();
    let qp = pd
        .qp_builder(&cq, &cq)
        .ud()
        .max_recv_wr(16)
        .build()
        .unwrap();
    device::check_backend(&ctx, &qp);
    m.ready(&qp).expect("ready the UD QP");
    let buf = pd.alloc_buf(BUF_LEN, AccessFlags::ALL).unwrap();
    buf.fill(0..BUF_LEN, FILL).unwrap();
    let rq = post_slots(qp.recv_queue().unwrap(), &buf, 0, slots);
    let group = m.join(&qp).expect("join the group");
    Member {
        group,
        cq: cq.poller().unwrap(),
        _cq: cq,
        qp,
        buf,
        rq,
    }
}

/// Multicast through rdma_cm: one sender, two receiver QPs attached to the group (on the
/// sender's device, or on the other device of the pair); a datagram to the group reaches
/// both, each after its receive's GRH area, naming the sender's QP. One receiver then
/// leaves (`ibv_detach_mcast`, `rdma_leave_multicast`): the next datagrams reach the other
/// only. Needs the devices' IPv4 addresses (`ZVERBS_TEST_ADDR`, `ZVERBS_TEST_PAIR_ADDRS`).
fn multicast_to_two_receivers_then_one_leaves(link: Link) {
    let Some(env) = device::env() else {
        return;
    };
    if env.devices(link).is_none() {
        return;
    }
    let Some((from, to)) = env.addrs(link) else {
        println!(
            "skipped: no IPv4 address for rdma_cm (ZVERBS_TEST_ADDR / ZVERBS_TEST_PAIR_ADDRS)"
        );
        return;
    };
    let group: IpAddr = match link {
        Link::OneDevice => "239.1.4.1",
        Link::Pair => "239.1.4.2",
    }
    .parse()
    .unwrap();
    let mut r1 = member(group, to.into(), 4);
    let mut r2 = member(group, to.into(), 4);
    // The sender joins too: its join gives the address handle to the group.
    let m = CmMulticast::resolve(group, Some(from.into()), Duration::from_secs(10)).unwrap();
    let ctx = m.context().clone();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.cq_builder().cqe(32).build().unwrap();
    let qp = pd.qp_builder(&cq, &cq).ud().max_recv_wr(1).build().unwrap();
    m.ready(&qp).unwrap();
    let sender = m.join(&qp).expect("the sender joins");
    let j = sender.join_info();
    let to_group = pd.create_ah(&j.ah).unwrap().target(j.qpn, j.qkey);
    let buf = pd.alloc_buf(4096, AccessFlags::ALL).unwrap();
    let mut sq = qp.send_queue().unwrap();
    let mut scq = cq.poller().unwrap();
    let d1 = pattern(9, 200);
    buf.write(0, &d1).unwrap();
    sq.send_to(1, buf.slice(0..200).unwrap(), &to_group, SIG)
        .unwrap();
    sent(&wait_some(&mut scq, 1), &[1]);
    for r in [&mut r1, &mut r2] {
        let w = wait(&mut r.cq, 1);
        let e = Expect {
            wr_id: 0,
            qp_num: r.qp.qpn(),
            src_qp: qp.qpn(),
            data: &d1,
            imm: None,
            grh: true,
        };
        check_datagram(&w[0], &e, &r.buf, 0, 64, FILL);
    }
    // Receiver 2 leaves; receiver 1 takes the next two, receiver 2 nothing.
    drop(r2.group);
    let d2 = pattern(10, 64);
    buf.write(1024, &d2).unwrap();
    for id in [2, 3] {
        sq.send_to_imm(id, buf.slice(1024..1088).unwrap(), &to_group, 0x77, SIG)
            .unwrap();
        sent(&wait_some(&mut scq, 1), &[id]);
    }
    let w = wait(&mut r1.cq, 2);
    for (k, c) in w.iter().enumerate() {
        let e = Expect {
            wr_id: 1 + k as u64,
            qp_num: r1.qp.qpn(),
            src_qp: qp.qpn(),
            data: &d2,
            imm: Some(0x77),
            grh: true,
        };
        check_datagram(c, &e, &r1.buf, (1 + k) * SLOT, 64, FILL);
    }
    nothing_on(&mut r2.cq);
    assert!(
        bytes(&r2.buf, SLOT, SLOT).iter().all(|&x| x == FILL),
        "a receive of the receiver that left was written"
    );
    drop((r1.rq, r2.rq));
}
