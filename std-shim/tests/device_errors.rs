//! Error paths on a real device: the error completions the device itself reports, and what
//! happens to the rest of the queue pair's work.
//!
//! - A WRITE with a wrong rkey completes with a remote access error; the requester's QP is
//!   then in the error state, so every request posted after it completes with "WR flushed",
//!   signaled or not; the responder's QP, which saw the bad request, flushes its receives.
//! - A SEND to a peer that posted no receive, with a small RNR retry count, completes with
//!   "RNR retry counter exceeded", and the requests behind it flush.
//! - A request to a peer whose QP is gone completes with "transport retry counter exceeded".
//!
//! Device tests: they return at once unless `ZVERBS_TEST_DEVICE` names a device
//! (docs/testing.md).

mod device;

use device::{Caps, Link, bytes, connected, pattern, wait, wait_some};
use zverbs::safe::SafePostError;
use zverbs::{
    Completion, PollCq, PostError, QpState, Registered, RemoteBuf, SendFlags, WcOpcode, WcStatus,
};

const SIG: SendFlags = SendFlags::SIGNALED;

on_both_links!(
    bad_rkey_then_flush,
    rnr_retry_exceeded,
    peer_gone_retry_exceeded,
);

fn ids_and_status(w: &[Completion]) -> Vec<(u64, WcStatus)> {
    w.iter().map(|c| (c.wr_id, c.status)).collect()
}

fn bad_rkey_then_flush(link: Link) {
    let Some((a, b)) = connected(link, Caps::default(), |_, _| {}) else {
        return;
    };
    let (qa, qb) = (a.queues(), b.queues());
    let mut sq = qa.sq;
    let mut rq = qb.rq;
    let (mut acq, mut bcq) = (qa.cq, qb.cq);
    rq.post(50, b.buf.slice(0..1024).unwrap()).unwrap();
    rq.post(51, b.buf.slice(1024..2048).unwrap()).unwrap();
    a.buf.write(0, &pattern(30, 512)).unwrap();
    let bad = RemoteBuf::new(b.buf.addr(), b.buf.rkey() ^ 0x5a5a_5a00);
    // One doorbell for the bad request and the work behind it.
    let mut batch = sq.batch();
    batch
        .write(1, a.buf.slice(0..64).unwrap(), bad, SIG)
        .unwrap();
    // Work behind the bad request: unsignaled and signaled, of several kinds.
    batch
        .write(
            2,
            a.buf.slice(0..64).unwrap(),
            b.buf.remote(4096).unwrap(),
            SendFlags::NONE,
        )
        .unwrap();
    batch.send(3, a.buf.slice(0..32).unwrap(), SIG).unwrap();
    batch
        .read(
            4,
            a.buf.slice(8192..8256).unwrap(),
            b.buf.remote(0).unwrap(),
            SIG,
        )
        .unwrap();
    batch
        .write(
            5,
            a.buf.slice(0..16).unwrap(),
            b.buf.remote(4096).unwrap(),
            SendFlags::NONE,
        )
        .unwrap();
    batch.finish();
    let w = wait(&mut acq, 5);
    assert_eq!(
        ids_and_status(&w),
        [
            (1, WcStatus::RemAccessErr),
            (2, WcStatus::WrFlushErr),
            (3, WcStatus::WrFlushErr),
            (4, WcStatus::WrFlushErr),
            (5, WcStatus::WrFlushErr),
        ],
        "{w:?}"
    );
    assert_eq!(w[0].opcode, WcOpcode::RdmaWrite);
    assert!(w.iter().all(|c| c.qp_num == a.qp.qpn()));
    // The responder rejected the request and went to the error state too: its receives flush.
    let r = wait(&mut bcq, 2);
    assert_eq!(
        ids_and_status(&r),
        [(50, WcStatus::WrFlushErr), (51, WcStatus::WrFlushErr)],
        "{r:?}"
    );
    assert!(
        bytes(&b.buf, 0, 8192).iter().all(|&x| x == 0),
        "nothing behind the rejected request reached the responder's memory"
    );

    // A request posted to the QP in the error state is refused, with nothing written (the
    // poller closed the queue when it met the error completion): no completion follows.
    for round in 0..3u64 {
        let e = sq.write(
            10 + round,
            a.buf.slice(0..8).unwrap(),
            b.buf.remote(0).unwrap(),
            SIG,
        );
        assert!(
            matches!(e, Err(SafePostError::Post(PostError::NotReady))),
            "{e:?}"
        );
    }
    let mut wc = [Completion::EMPTY; 4];
    assert_eq!(acq.poll(&mut wc), 0);
    assert_eq!(a.qp.state(), QpState::Error);
}

fn rnr_retry_exceeded(link: Link) {
    // A: one RNR retry; B: the shortest RNR timer (0.01 ms) in its NAKs.
    let Some((a, b)) = connected(link, Caps::default(), |aa, ab| {
        aa.rts.rnr_retry = 1;
        ab.rtr.min_rnr_timer = 1;
    }) else {
        return;
    };
    let (qa, qb) = (a.queues(), b.queues());
    let mut sq = qa.sq;
    let (mut acq, mut bcq) = (qa.cq, qb.cq);
    let _rq = qb.rq; // no receive posted
    sq.send(1, a.buf.slice(0..100).unwrap(), SIG).unwrap();
    sq.write(
        2,
        a.buf.slice(0..100).unwrap(),
        b.buf.remote(0).unwrap(),
        SIG,
    )
    .unwrap();
    let w = wait(&mut acq, 2);
    assert_eq!(
        ids_and_status(&w),
        [(1, WcStatus::RnrRetryExcErr), (2, WcStatus::WrFlushErr)],
        "{w:?}"
    );
    assert_eq!(w[0].opcode, WcOpcode::Send);
    // The responder only said "not ready": no completion there.
    let mut wc = [Completion::EMPTY; 2];
    assert_eq!(bcq.poll(&mut wc), 0, "{:?}", &wc);
}

fn peer_gone_retry_exceeded(link: Link) {
    // A: the shortest ACK timeout (8 µs, rounded up by the device) and one retry.
    let Some((a, b)) = connected(link, Caps::default(), |aa, _| {
        aa.rts.timeout = 1;
        aa.rts.retry_cnt = 1;
    }) else {
        return;
    };
    let remote = b.buf.remote(0).unwrap();
    drop(b);
    let qa = a.queues();
    let mut sq = qa.sq;
    let mut acq = qa.cq;
    sq.write(1, a.buf.slice(0..100).unwrap(), remote, SIG)
        .unwrap();
    sq.send(2, a.buf.slice(0..100).unwrap(), SendFlags::NONE)
        .unwrap();
    let w = wait_some(&mut acq, 2);
    assert_eq!(
        ids_and_status(&w),
        [(1, WcStatus::RetryExcErr), (2, WcStatus::WrFlushErr)],
        "{w:?}"
    );
}
