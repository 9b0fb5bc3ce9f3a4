//! Every request completes exactly once, on the software device through the safe API: the
//! responder's side of an error knows it (its state, its event); a QP whose last requests
//! completed unsignaled drains and resets; a CQ shared by QPs, or smaller than a receive
//! queue, cannot be overrun.
//!
//! Stepping the device is process-wide: the tests of this file take turns (`serial`) and leave
//! the progress thread running.
#![cfg(feature = "sim")]

use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use zverbs::safe::SafePostError;
use zverbs::{
    AccessFlags, AsyncEvent, Completion, ContextOptions, Error, PollCq, PostError, QpState,
    Registered, RemoteBuf, SendFlags, WcStatus,
};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn ctx() -> zverbs::Context {
    zverbs::open_device(Some(zverbs::SOFTWARE_DEVICE), &ContextOptions::default()).unwrap()
}

const WAIT: Duration = Duration::from_secs(10);

#[test]
fn a_responders_error_moves_it_to_the_error_state_and_says_so() {
    let _g = serial();
    let ctx = ctx();
    let mut events = ctx.async_events().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let buf = pd.alloc_buf(4096, AccessFlags::ALL).unwrap();
    let (cq_a, cq_b) = (
        ctx.cq_builder().build().unwrap(),
        ctx.cq_builder().build().unwrap(),
    );
    let a = pd.qp_builder(&cq_a, &cq_a).build().unwrap();
    let b = pd.qp_builder(&cq_b, &cq_b).build().unwrap();
    zverbs::connect_pair(&a, &b).unwrap();
    let mut qa = a.queues(&cq_a).unwrap();
    let bad = RemoteBuf::new(
        buf.remote(0).unwrap().addr,
        buf.remote(0).unwrap().rkey ^ 0x5a5a_0000,
    );
    qa.sq
        .write(1, buf.slice(0..8).unwrap(), bad, SendFlags::SIGNALED)
        .unwrap();
    let c = qa.cq.wait(1, Instant::now() + WAIT).unwrap()[0];
    assert_eq!((c.wr_id, c.status), (1, WcStatus::RemAccessErr));
    // B polled nothing and was told nothing by its own completions: the device says where it
    // is, and its event says why.
    assert_eq!(b.state(), QpState::Error);
    assert_eq!(a.state(), QpState::Error);
    let deadline = Instant::now() + WAIT;
    loop {
        match events.next(Duration::from_millis(100)).unwrap() {
            Some(AsyncEvent::QpAccessError { qpn }) if qpn == b.qpn() => break,
            // Other tests' devices events are the process's too.
            _ => assert!(Instant::now() < deadline, "no QpAccessError for B"),
        }
    }
}

#[test]
fn a_qp_whose_last_request_was_unsignaled_drains_and_resets() {
    let _g = serial();
    let ctx = ctx();
    let pd = ctx.alloc_pd().unwrap();
    let (buf_a, buf_b) = (
        pd.alloc_buf(4096, AccessFlags::ALL).unwrap(),
        pd.alloc_buf(4096, AccessFlags::ALL).unwrap(),
    );
    let (cq_a, cq_b) = (
        ctx.cq_builder().build().unwrap(),
        ctx.cq_builder().build().unwrap(),
    );
    let a = pd.qp_builder(&cq_a, &cq_a).build().unwrap();
    let b = pd.qp_builder(&cq_b, &cq_b).build().unwrap();
    zverbs::connect_pair(&a, &b).unwrap();
    let mut qa = a.queues(&cq_a).unwrap();
    buf_a.write(0, b"signaled").unwrap();
    qa.sq
        .write(
            1,
            buf_a.slice(0..8).unwrap(),
            buf_b.remote(0).unwrap(),
            SendFlags::SIGNALED,
        )
        .unwrap();
    assert_eq!(qa.cq.wait(1, Instant::now() + WAIT).unwrap()[0].wr_id, 1);
    // The last request is unsignaled: it completes with no completion at all.
    buf_a.write(8, b"unsigned").unwrap();
    qa.sq
        .write(
            2,
            buf_a.slice(8..16).unwrap(),
            buf_b.remote(8).unwrap(),
            SendFlags::empty(),
        )
        .unwrap();
    let deadline = Instant::now() + WAIT;
    let mut got = [0u8; 8];
    while &got != b"unsigned" {
        assert!(
            Instant::now() < deadline,
            "the unsignaled WRITE never landed"
        );
        buf_b.read(8, &mut got).unwrap();
    }
    a.to_error().unwrap();
    // to_error, then drain: poll and reset until the reset is accepted. It ends, and the one
    // completion it takes is the drain marker's flush.
    let mut extra = Vec::new();
    loop {
        match a.reset() {
            Ok(()) => break,
            Err(Error::NotDrained { send, recv }) => {
                assert!(send > 0 && recv == 0, "{send} {recv}");
                extra.extend_from_slice(qa.cq.ready());
            }
            Err(e) => panic!("{e}"),
        }
        assert!(
            Instant::now() < deadline,
            "never drained: {:?}",
            a.outstanding()
        );
    }
    assert_eq!(extra.len(), 1, "{extra:?}");
    assert_eq!(
        (extra[0].wr_id, extra[0].status, extra[0].qp_num),
        (zverbs::DRAIN_WR_ID, WcStatus::WrFlushErr, a.qpn())
    );
    assert_eq!(a.state(), QpState::Reset);
    // And the QP works again, through the same queues: B recovers too and both reconnect.
    b.to_error().unwrap();
    let mut qb_cq = cq_b.poller().unwrap();
    let mut wc = [Completion::EMPTY; 8];
    let deadline = Instant::now() + WAIT;
    while let Err(Error::NotDrained { .. }) = b.reset() {
        qb_cq.poll(&mut wc);
        assert!(Instant::now() < deadline);
    }
    zverbs::connect_pair(&a, &b).unwrap();
    qa.sq
        .write(
            3,
            buf_a.slice(0..8).unwrap(),
            buf_b.remote(64).unwrap(),
            SendFlags::SIGNALED,
        )
        .unwrap();
    let c = qa.cq.wait(1, Instant::now() + WAIT).unwrap()[0];
    assert_eq!((c.wr_id, c.status), (3, WcStatus::Success));
}

#[test]
fn a_receive_queue_larger_than_its_cq_takes_no_more_receives_than_the_cq_holds() {
    let _g = serial();
    let ctx = ctx();
    let pd = ctx.alloc_pd().unwrap();
    let buf = pd.alloc_buf(8192, AccessFlags::ALL).unwrap();
    // A CQ of 4 (7 entries on this device) under a receive queue of 32.
    let cq = ctx.cq_builder().cqe(4).build().unwrap();
    let small = pd
        .qp_builder(&cq, &cq)
        .max_recv_wr(32)
        .max_send_wr(4)
        .build()
        .unwrap();
    // Its receives take part of the CQ (half of it, with four signaled sends beside them).
    let share = small.caps().max_recv_wr;
    assert!((1..32).contains(&share), "{share}");
    let signaled = small.send_caps().max_signaled;
    assert_eq!(cq.entries_left(), cq.cqe() - share - signaled);
    let peer_cq = ctx.cq_builder().build().unwrap();
    let peer = pd.qp_builder(&peer_cq, &peer_cq).build().unwrap();
    zverbs::connect_pair(&small, &peer).unwrap();
    let mut rq = small.recv_queue().unwrap();
    for i in 0..share {
        rq.post(
            u64::from(i),
            buf.slice(64 * i as usize..64 * (i as usize + 1)).unwrap(),
        )
        .unwrap();
    }
    // One more would have no entry in the CQ for its completion: refused, nothing written.
    assert!(matches!(
        rq.post(99, buf.slice(4096..4160).unwrap()),
        Err(SafePostError::Post(PostError::CqFull { limit })) if limit == share
    ));
    let mut sq = peer.send_queue().unwrap();
    for i in 0..share {
        sq.send(u64::from(i), buf.slice(0..8).unwrap(), SendFlags::empty())
            .unwrap();
    }
    let mut poller = cq.poller().unwrap();
    let got = poller.wait(share as usize, Instant::now() + WAIT).unwrap();
    assert!(got.iter().all(|c| c.status.is_success()), "{got:?}");
    // Every receive completed, none lost: the refused one fits now.
    rq.post(99, buf.slice(4096..4160).unwrap()).unwrap();
    assert_eq!(ctx.sim().unwrap().stats().cq_overruns, 0);
    // Nothing is held for a QP that is gone.
    drop((rq, poller, small));
    assert_eq!(cq.entries_left(), cq.cqe());
}

#[test]
fn qps_sharing_a_cq_each_hold_their_share_and_posts_beyond_it_are_refused() {
    let _g = serial();
    let ctx = ctx();
    let sim = ctx.sim().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let buf = pd.alloc_buf(4096, AccessFlags::ALL).unwrap();
    // Two QPs complete everything on one CQ of 4 (7 entries on this device), each with a
    // send queue of 8: together more than the CQ holds.
    let cq = ctx.cq_builder().cqe(4).build().unwrap();
    let builder = || pd.qp_builder(&cq, &cq).max_send_wr(8).max_recv_wr(1);
    let a = builder().build().unwrap();
    let b = builder().build().unwrap();
    let shares = [&a, &b].map(|q| (q.caps().max_recv_wr, q.send_caps().max_signaled));
    let held: u32 = shares.iter().map(|(r, s)| r + s).sum();
    assert!(held <= cq.cqe(), "{shares:?}");
    assert_eq!(cq.entries_left(), cq.cqe() - held);
    // A QP asking for more signaled sends than the CQ has left is refused.
    assert!(matches!(
        builder().max_signaled(4).build(),
        Err(Error::CqTooSmall { .. })
    ));
    zverbs::connect_pair(&a, &b).unwrap();
    let mut sa = a.send_queue().unwrap();
    let mut sb = b.send_queue().unwrap();
    let (mut ra, mut rb) = (a.recv_queue().unwrap(), b.recv_queue().unwrap());
    let mut poller = cq.poller().unwrap();
    // Nothing completes while the posts are made: every signaled post holds its entry.
    sim.set_stepped(true);
    let mut accepted = 0;
    for ((sq, id), (_, limit)) in [(&mut sa, 10), (&mut sb, 20)].into_iter().zip(shares) {
        for i in 0..8 {
            match sq.write(
                id + i,
                buf.slice(0..8).unwrap(),
                buf.remote(64).unwrap(),
                SendFlags::SIGNALED,
            ) {
                Ok(()) => accepted += 1,
                Err(SafePostError::Post(PostError::CqFull { limit: l })) => assert_eq!(l, limit),
                Err(e) => panic!("{e}"),
            }
        }
    }
    ra.post(1, buf.slice(1024..1088).unwrap()).unwrap();
    rb.post(2, buf.slice(2048..2112).unwrap()).unwrap();
    // A second receive of each finds its queue full: the ring is one.
    assert!(ra.post(3, buf.slice(1024..1088).unwrap()).is_err());
    sim.run_until_idle();
    sim.set_stepped(false);
    let signaled: u32 = shares.iter().map(|(_, s)| s).sum();
    assert_eq!(accepted, signaled, "each QP's share, the rest refused");
    let got = poller
        .wait(accepted as usize, Instant::now() + WAIT)
        .unwrap();
    assert!(got.iter().all(|c| c.status.is_success()), "{got:?}");
    assert_eq!(sim.stats().cq_overruns, 0, "no completion lost");
}

#[test]
fn a_qp_gets_the_receives_it_asked_for_when_its_cq_holds_them_but_not_its_whole_ring() {
    let _g = serial();
    let ctx = ctx();
    let pd = ctx.alloc_pd().unwrap();
    // ibv_rc_pingpong's shape: 500 receives and one send on a CQ of 501. The receive ring is
    // rounded up to 512, more than the CQ holds; what was asked fits.
    let cq = ctx.cq_builder().cqe(501).build().unwrap();
    let qp = pd
        .qp_builder(&cq, &cq)
        .max_send_wr(1)
        .max_recv_wr(500)
        .build()
        .unwrap();
    println!(
        "CQ {} entries; receives {}, signaled sends {}",
        cq.cqe(),
        qp.caps().max_recv_wr,
        qp.send_caps().max_signaled
    );
    assert!(qp.caps().max_recv_wr >= 500, "{:?}", qp.caps());
    assert!(qp.send_caps().max_signaled >= 1);
}
