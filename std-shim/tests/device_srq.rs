//! Shared receive queues on a real device: RC queue pairs on the responder's side share one
//! SRQ, on one device (`one_device`) and across the link (`across_the_pair`). Each message
//! takes the SRQ's next receive; its completion names the QP it arrived on and the receive it
//! consumed, whose memory holds the message; the receives are posted again and taken again.
//! A full SRQ refuses a post with a typed error and nothing posted; a QP on an SRQ has no
//! receive queue of its own to post to.
//!
//! Device tests: they return at once unless `ZVERBS_TEST_DEVICE` names a device
//! (docs/testing.md); `cargo xtask test` runs them on rxe in a VM.

mod device;

use device::{BUF_LEN, Link, bytes, pattern, wait};
use zverbs::connect::Endpoint;
use zverbs::{
    AccessFlags, ConnectAttr, Context, Cq, Error, LocalAddress, MrBuf, PollCq, Poller, PostError,
    PostRecv, PostSend, Qp, RecvWr, Registered, SendQueue, SendWr, Srq, SrqQueue, WcOpcode,
};

/// QPs on each side.
const QPS: usize = 3;
/// Bytes of each receive.
const SLOT: usize = 1024;
/// What the receive buffer holds before messages land.
const FILL: u8 = 0xee;

on_both_links!(
    qps_on_one_srq_name_their_qp_and_receives_are_reposted,
    a_full_srq_refuses_a_post,
    a_qp_on_an_srq_has_no_receive_queue,
);

/// The requester: RC QPs with their own receive queues, one CQ.
struct Requester {
    buf: MrBuf,
    cq: Cq,
    qps: Vec<Qp>,
}

/// The responder: RC QPs on one SRQ, one CQ.
struct Responder {
    buf: MrBuf,
    cq: Cq,
    srq: Srq,
    qps: Vec<Qp>,
}

fn endpoint(local: &LocalAddress, qp: &Qp) -> Endpoint {
    Endpoint {
        lid: local.lid,
        qpn: qp.qpn(),
        psn: qp.psn(),
        gid: local.gid,
    }
}

fn attr(local: &LocalAddress, qp: &Qp, peer: &Endpoint) -> ConnectAttr {
    ConnectAttr::new(local.port, qp.psn(), peer, local.gid_index)
        .mtu(local.active_mtu.min(zverbs::Mtu::M1024))
}

/// `QPS` connected pairs on `link`'s devices, the responder's on an SRQ of `srq_wr` receives;
/// or `None` when the environment lacks what the link needs.
fn srq_pairs(link: Link, srq_wr: u32) -> Option<(Requester, Responder)> {
    let env = device::env()?;
    let (da, db) = env.devices(link)?;
    let ca = device::open(&da);
    let cb = if db == da {
        ca.clone()
    } else {
        device::open(&db)
    };
    let side = |ctx: &Context| {
        let local = device::address(ctx, env.gid_index);
        let pd = ctx.alloc_pd().expect("ibv_alloc_pd");
        let buf = pd.alloc_buf(BUF_LEN, AccessFlags::ALL).expect("a buffer");
        let cq = ctx.cq_builder().cqe(128).build().expect("ibv_create_cq");
        (local, pd, buf, cq)
    };
    let (la, pa, ba, cqa) = side(&ca);
    let (lb, pb, bb, cqb) = side(&cb);
    let srq = pb.create_srq(srq_wr, 1).expect("ibv_create_srq");
    let qa: Vec<Qp> = (0..QPS)
        .map(|_| {
            let qp = pa
                .qp_builder(&cqa, &cqa)
                .max_send_wr(16)
                .max_recv_wr(1)
                .build()
                .expect("ibv_create_qp");
            device::check_backend(&ca, &qp);
            qp
        })
        .collect();
    let qb: Vec<Qp> = (0..QPS)
        .map(|_| {
            let qp = pb
                .qp_builder(&cqb, &cqb)
                .max_send_wr(4)
                .srq(&srq)
                .build()
                .expect("ibv_create_qp on the SRQ");
            device::check_backend(&cb, &qp);
            qp
        })
        .collect();
    for (a, b) in qa.iter().zip(&qb) {
        a.connect_with(&attr(&la, a, &endpoint(&lb, b)))
            .expect("connect A");
        b.connect_with(&attr(&lb, b, &endpoint(&la, a)))
            .expect("connect B");
    }
    println!(
        "A: {} QPNs {:x?}; B: {} QPNs {:x?} on SRQ ({} receives); backend {}",
        ca.name(),
        qa.iter().map(Qp::qpn).collect::<Vec<_>>(),
        cb.name(),
        qb.iter().map(Qp::qpn).collect::<Vec<_>>(),
        srq.caps().0,
        qb[0].backend()
    );
    bb.fill(0..BUF_LEN, FILL).unwrap();
    Some((
        Requester {
            buf: ba,
            cq: cqa,
            qps: qa,
        },
        Responder {
            buf: bb,
            cq: cqb,
            srq,
            qps: qb,
        },
    ))
}

/// Posts the receive `wr_id` of [`SLOT`] bytes at slot `slot`.
fn post_slot(rq: &mut SrqQueue, buf: &MrBuf, wr_id: u64, slot: usize) -> Result<(), PostError> {
    let sgl = [buf.sge(slot * SLOT..(slot + 1) * SLOT).unwrap()];
    // SAFETY: registered memory that outlives the receive, read only after its completion.
    unsafe { PostRecv::post(rq, &RecvWr::new(wr_id, &sgl)) }
}

/// Message `k`: `10 + k` bytes of pattern `k`, sent by requester QP `k % QPS`.
fn send_message(sqs: &mut [SendQueue], a: &Requester, k: usize) {
    let data = pattern(k as u8, 10 + k);
    a.buf.write(k * SLOT, &data).unwrap();
    let sgl = [a.buf.sge(k * SLOT..k * SLOT + data.len()).unwrap()];
    let wr = SendWr::send(k as u64, &sgl).signaled();
    // SAFETY: registered memory that outlives the completion polled by the caller.
    unsafe { sqs[k % QPS].post(&wr) }.unwrap();
}

/// Sends messages `ks` and checks each one's receive: on the responder QP it was sent to,
/// from a receive in `slot_of` (wr_id to slot), holding the message and nothing after it.
/// Returns the receives' `wr_id`s, sorted.
fn exchange(
    a: &Requester,
    b: &Responder,
    sqs: &mut [SendQueue],
    acq: &mut Poller,
    bcq: &mut Poller,
    ks: std::ops::Range<usize>,
    slot_of: impl Fn(u64) -> usize,
) -> Vec<u64> {
    for k in ks.clone() {
        send_message(sqs, a, k);
    }
    let sent = wait(acq, ks.len());
    assert!(sent.iter().all(|c| c.is_success()), "{sent:?}");
    let got = wait(bcq, ks.len());
    let mut ids = Vec::new();
    for c in &got {
        assert!(c.status.is_success(), "{c:?}");
        assert_eq!(c.opcode, WcOpcode::Recv, "{c:?}");
        let k = c.byte_len as usize - 10;
        assert!(ks.contains(&k), "{c:?}");
        assert_eq!(c.qp_num, b.qps[k % QPS].qpn(), "message {k}: {c:?}");
        let at = slot_of(c.wr_id) * SLOT;
        assert_eq!(bytes(&b.buf, at, 10 + k), pattern(k as u8, 10 + k), "{c:?}");
        assert!(
            bytes(&b.buf, at + 10 + k, 16).iter().all(|&x| x == FILL),
            "written past message {k}"
        );
        ids.push(c.wr_id);
    }
    ids.sort_unstable();
    ids
}

/// Six messages over three QPs into six SRQ receives: each completion names the QP the
/// message arrived on and the receive it took; then the six receives are posted again (new
/// `wr_id`s, same memory) and six more messages take them.
fn qps_on_one_srq_name_their_qp_and_receives_are_reposted(link: Link) {
    let Some((a, b)) = srq_pairs(link, 16) else {
        return;
    };
    let mut rq = b.srq.queue().expect("the SRQ's queue");
    let mut sqs: Vec<SendQueue> = a.qps.iter().map(|q| q.send_queue().unwrap()).collect();
    let (mut acq, mut bcq) = (a.cq.poller().unwrap(), b.cq.poller().unwrap());
    for i in 0..6 {
        post_slot(&mut rq, &b.buf, 100 + i as u64, i).unwrap();
    }
    let ids = exchange(&a, &b, &mut sqs, &mut acq, &mut bcq, 0..6, |id| {
        (id - 100) as usize
    });
    assert_eq!(ids, (100..106).collect::<Vec<u64>>());
    // Repost the same memory under new wr_ids.
    b.buf.fill(0..BUF_LEN, FILL).unwrap();
    for i in 0..6 {
        post_slot(&mut rq, &b.buf, 200 + i as u64, i).unwrap();
    }
    let ids = exchange(&a, &b, &mut sqs, &mut acq, &mut bcq, 6..12, |id| {
        (id - 200) as usize
    });
    assert_eq!(ids, (200..206).collect::<Vec<u64>>());
}

/// An SRQ holds as many receives as it was made for (the device may round up): the post
/// after the last that fits is refused with a typed error (`QueueFull` on the direct path,
/// the provider's `ENOMEM` through libibverbs) and posts nothing: the receives that fit are
/// all taken by as many messages, the refused one by none, and once one was taken the same
/// post succeeds.
fn a_full_srq_refuses_a_post(link: Link) {
    let Some((a, b)) = srq_pairs(link, 4) else {
        return;
    };
    let mut rq = b.srq.queue().expect("the SRQ's queue");
    let mut sqs: Vec<SendQueue> = a.qps.iter().map(|q| q.send_queue().unwrap()).collect();
    let (mut acq, mut bcq) = (a.cq.poller().unwrap(), b.cq.poller().unwrap());
    let mut n = 0usize;
    let refused = loop {
        assert!(n < 48, "an SRQ made for 4 receives took {n}");
        match post_slot(&mut rq, &b.buf, n as u64, n) {
            Ok(()) => n += 1,
            Err(e) => break e,
        }
    };
    println!(
        "an SRQ made for 4 receives (reported {}) took {n}",
        b.srq.caps().0
    );
    assert!(n >= 4, "{n} receives fit");
    assert!(
        matches!(
            refused,
            PostError::QueueFull { .. } | PostError::Verbs { errno: 12 }
        ),
        "{refused:?}"
    );
    // The first message takes receive 0; the refused post then fits (into slot n).
    let ids = exchange(&a, &b, &mut sqs, &mut acq, &mut bcq, 0..1, |id| id as usize);
    assert_eq!(ids, [0]);
    post_slot(&mut rq, &b.buf, n as u64, n).unwrap();
    // n more messages take receives 1..=n: each once, the refused one never twice.
    let ids = exchange(&a, &b, &mut sqs, &mut acq, &mut bcq, 1..n + 1, |id| {
        id as usize
    });
    assert_eq!(ids, (1..=n as u64).collect::<Vec<u64>>());
}

/// A QP on an SRQ takes its receives from the SRQ: its own receive queue is refused with
/// `InvalidArgument` (alone and through `Qp::queues`), while its send queue works.
fn a_qp_on_an_srq_has_no_receive_queue(link: Link) {
    let Some((_a, b)) = srq_pairs(link, 4) else {
        return;
    };
    let qp = &b.qps[0];
    assert_eq!(qp.caps().max_recv_wr, 0);
    assert!(qp.srq().is_some());
    assert!(
        matches!(qp.recv_queue(), Err(Error::InvalidArgument(_))),
        "a receive queue of a QP on an SRQ"
    );
    assert!(matches!(qp.queues(&b.cq), Err(Error::InvalidArgument(_))));
    assert!(matches!(
        zverbs::backend::Queues::take(qp, &b.cq),
        Err(Error::InvalidArgument(_))
    ));
    assert!(qp.send_queue().is_ok());
    let mut wc = [zverbs::Completion::EMPTY; 1];
    assert_eq!(b.cq.poller().unwrap().poll(&mut wc), 0);
}
