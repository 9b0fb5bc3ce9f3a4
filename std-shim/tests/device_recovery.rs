//! Recovery on a device: a QP driven into the error state mid-transfer (a WRITE with a bad
//! rkey) completes every request it holds exactly once, the failed one with its error and every
//! other with a flush; its queues then refuse posts; once drained it is reset (with a new PSN),
//! connected to another peer, and the same queue handles transfer again (memory checked); a QP
//! whose last request completed unsignaled drains and resets, and both sides of a pair recover
//! and connect to each other again; and a QP reset and reconnected many times leaks no device
//! object.
//!
//! Each scenario runs on the software device (with the `sim` feature) and on the device the
//! environment names (`ZVERBS_TEST_DEVICE`: rxe in `cargo xtask test --only rxe`, or the
//! emulated ConnectX; docs/testing.md).

mod device;

use std::collections::HashMap;
use std::time::Instant;

use device::{COMPLETION_LIMIT, env, open, serial};
use zverbs::connect::Endpoint;
use zverbs::{
    AccessFlags, Completion, ConnectAttr, Context, Cq, Error, MrBuf, Pd, PollCq, Poller, PostError,
    Qp, QpState, Registered, RemoteBuf, SendFlags, WcStatus,
};

const SIG: SendFlags = SendFlags::SIGNALED;

/// One QP with its CQ and buffer.
struct End {
    qp: Qp,
    cq: Cq,
    buf: MrBuf,
}

fn end(pd: &Pd) -> End {
    let cq = pd.context().cq_builder().cqe(64).build().unwrap();
    let qp = pd
        .qp_builder(&cq, &cq)
        .max_send_wr(16)
        .max_recv_wr(16)
        .build()
        .unwrap();
    let buf = pd.alloc_buf(4096, AccessFlags::ALL).unwrap();
    End { qp, cq, buf }
}

/// The endpoint of `qp` on `ctx`'s port, with the GID index the environment names.
fn endpoint(ctx: &Context, gid_index: Option<u32>, qp: &Qp) -> (Endpoint, u8, Option<u32>) {
    let port = ctx.active_port().unwrap();
    let local = ctx.address(port, gid_index).unwrap();
    (
        Endpoint {
            lid: local.lid,
            qpn: qp.qpn(),
            psn: qp.psn(),
            gid: local.gid,
        },
        port,
        local.gid_index,
    )
}

/// Connects `a` and `b` both ways.
fn connect(ctx: &Context, gid: Option<u32>, a: &Qp, b: &Qp) {
    let (ea, port, gi) = endpoint(ctx, gid, a);
    let (eb, _, _) = endpoint(ctx, gid, b);
    a.connect_with(&ConnectAttr::new(port, a.psn(), &eb, gi).rnr(7, 1))
        .unwrap();
    b.connect_with(&ConnectAttr::new(port, b.psn(), &ea, gi).rnr(7, 1))
        .unwrap();
}

/// Polls `cq` until `n` completions arrived (failing after the limit).
fn wait(cq: &mut Poller, n: usize) -> Vec<Completion> {
    let deadline = Instant::now() + COMPLETION_LIMIT;
    let mut got = Vec::new();
    let mut wc = [Completion::EMPTY; 16];
    while got.len() < n {
        let k = cq.poll(&mut wc);
        got.extend_from_slice(&wc[..k]);
        assert!(
            Instant::now() < deadline,
            "{} of {n} completions: {got:?}",
            got.len()
        );
    }
    got
}

/// Nothing more arrives on `cq` (polled a while).
fn nothing_more(cq: &mut Poller) {
    let mut wc = [Completion::EMPTY; 4];
    for _ in 0..10_000 {
        assert_eq!(cq.poll(&mut wc), 0, "an extra completion: {:?}", wc[0]);
    }
}

/// The QP `a` is driven into the error state mid-transfer; every request it holds completes
/// once; it is reset, connected to `c`, and transfers again with the same queue handles.
fn drain_reset_reconnect(ctx: &Context, gid: Option<u32>) {
    let pd = ctx.alloc_pd().unwrap();
    let (a, b, c) = (end(&pd), end(&pd), end(&pd));
    println!("QP {:#x}: {}", a.qp.qpn(), a.qp.backend());
    connect(ctx, gid, &a.qp, &b.qp);
    let mut sq = a.qp.send_queue().unwrap();
    let mut rq = a.qp.recv_queue().unwrap();
    let mut cq = a.cq.poller().unwrap();
    // Receives held by A, then a good WRITE, a WRITE with a bad rkey, and three more behind
    // it (one unsignaled): all posted before the device fails the bad one.
    for i in 0..3 {
        rq.post(100 + i, a.buf.slice(2048..2112).unwrap()).unwrap();
    }
    a.buf.write(0, b"before").unwrap();
    sq.write(1, a.buf.slice(0..6).unwrap(), b.buf.remote(0).unwrap(), SIG)
        .unwrap();
    let good = wait(&mut cq, 1);
    assert_eq!((good[0].wr_id, good[0].status), (1, WcStatus::Success));
    let bad = RemoteBuf::new(
        b.buf.remote(0).unwrap().addr,
        b.buf.remote(0).unwrap().rkey ^ 0x5a5a_0000,
    );
    let mut batch = sq.batch();
    batch
        .write(2, a.buf.slice(0..8).unwrap(), bad, SIG)
        .unwrap();
    batch
        .write(
            3,
            a.buf.slice(0..8).unwrap(),
            b.buf.remote(64).unwrap(),
            SIG,
        )
        .unwrap();
    batch
        .write(
            4,
            a.buf.slice(0..8).unwrap(),
            b.buf.remote(128).unwrap(),
            SendFlags::empty(),
        )
        .unwrap();
    batch
        .write(
            5,
            a.buf.slice(0..8).unwrap(),
            b.buf.remote(192).unwrap(),
            SIG,
        )
        .unwrap();
    batch.finish();
    // Exactly one completion per request: the bad WRITE's error, a flush for each other.
    let got = wait(&mut cq, 7);
    nothing_more(&mut cq);
    let by_id: HashMap<u64, WcStatus> = got.iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(by_id.len(), 7, "one completion per request: {got:?}");
    assert_eq!(by_id[&2], WcStatus::RemAccessErr, "{got:?}");
    for id in [3, 4, 5, 100, 101, 102] {
        assert_eq!(by_id[&id], WcStatus::WrFlushErr, "request {id}: {got:?}");
    }
    // The QP is in the error state: its queues refuse posts, with nothing written.
    assert_eq!(a.qp.state(), QpState::Error);
    // So is the responder, B, which the bad rkey put there (a class C error): its state is
    // what its device says, though B polled nothing.
    assert_eq!(b.qp.state(), QpState::Error);
    let e = sq.write(6, a.buf.slice(0..8).unwrap(), c.buf.remote(0).unwrap(), SIG);
    assert!(
        matches!(
            e,
            Err(zverbs::safe::SafePostError::Post(PostError::NotReady))
        ),
        "{e:?}"
    );
    assert!(a.qp.is_drained(), "{:?}", a.qp.outstanding());
    let old_psn = a.qp.psn();
    a.qp.reset().unwrap();
    assert_eq!(a.qp.state(), QpState::Reset);
    // A new incarnation sends from a new PSN, which its endpoint announces.
    assert_ne!(a.qp.psn(), old_psn);
    assert_eq!(endpoint(ctx, gid, &a.qp).0.psn, a.qp.psn());
    let e = rq.post(7, a.buf.slice(0..8).unwrap());
    assert!(
        matches!(
            e,
            Err(zverbs::safe::SafePostError::Post(PostError::NotReady))
        ),
        "{e:?}"
    );
    // A new peer: C. The same handles restart with the device's counters.
    connect(ctx, gid, &a.qp, &c.qp);
    a.buf.write(0, b"after reset").unwrap();
    sq.write(
        8,
        a.buf.slice(0..11).unwrap(),
        c.buf.remote(512).unwrap(),
        SIG,
    )
    .unwrap();
    let done = wait(&mut cq, 1);
    assert_eq!((done[0].wr_id, done[0].status), (8, WcStatus::Success));
    let mut got = [0u8; 11];
    c.buf.read(512, &mut got).unwrap();
    assert_eq!(&got, b"after reset");
    // And receives: C sends into A's receive queue.
    let mut cs = c.qp.send_queue().unwrap();
    let mut ccq = c.cq.poller().unwrap();
    rq.post(9, a.buf.slice(1024..1088).unwrap()).unwrap();
    c.buf.write(0, b"hello A").unwrap();
    cs.send(10, c.buf.slice(0..7).unwrap(), SIG).unwrap();
    assert_eq!(wait(&mut ccq, 1)[0].status, WcStatus::Success);
    let r = wait(&mut cq, 1);
    assert_eq!(
        (r[0].wr_id, r[0].byte_len, r[0].status),
        (9, 7, WcStatus::Success)
    );
    let mut got = [0u8; 7];
    a.buf.read(1024, &mut got).unwrap();
    assert_eq!(&got, b"hello A");
}

/// A reset is refused while completions are still to be polled, and changes nothing.
fn reset_waits_for_the_poller(ctx: &Context, gid: Option<u32>) {
    let pd = ctx.alloc_pd().unwrap();
    let (a, b) = (end(&pd), end(&pd));
    connect(ctx, gid, &a.qp, &b.qp);
    let mut sq = a.qp.send_queue().unwrap();
    let mut cq = a.cq.poller().unwrap();
    sq.write(1, a.buf.slice(0..8).unwrap(), b.buf.remote(0).unwrap(), SIG)
        .unwrap();
    a.qp.to_error().unwrap();
    // Not polled yet: the WRITE's completion (success or flush) is still the old incarnation's.
    match a.qp.reset() {
        Err(Error::NotDrained { send, recv }) => assert!(send > 0 && recv == 0, "{send} {recv}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(a.qp.state(), QpState::Error);
    let got = wait(&mut cq, 1);
    assert_eq!(got[0].wr_id, 1, "{got:?}");
    // The refused reset posted the drain marker (the QP was in the error state with a request
    // outstanding): its flush is the one more completion a reset may still wait for, and it may
    // come after the WRITE's, in another poll.
    let rest = drain_and_reset(&a.qp, &mut cq);
    assert!(
        rest.iter().all(|c| c.wr_id == zverbs::DRAIN_WR_ID) && rest.len() <= 1,
        "after the WRITE, only the drain marker's flush: {rest:?}"
    );
}

/// `n` rounds of: connect A to B, WRITE (memory checked), error, drain, reset, all through
/// the same queue handles. Returns with A and B in RESET.
fn reuse(ctx: &Context, gid: Option<u32>, a: &End, b: &End, n: u32) {
    connect(ctx, gid, &a.qp, &b.qp);
    let mut sq = a.qp.send_queue().unwrap();
    let mut cq = a.cq.poller().unwrap();
    for round in 0..n {
        if round > 0 {
            connect(ctx, gid, &a.qp, &b.qp);
        }
        let word = round.to_le_bytes();
        a.buf.write(0, &word).unwrap();
        sq.write(
            u64::from(round),
            a.buf.slice(0..4).unwrap(),
            b.buf.remote(0).unwrap(),
            SIG,
        )
        .unwrap();
        let c = wait(&mut cq, 1);
        assert_eq!(
            (c[0].wr_id, c[0].status),
            (u64::from(round), WcStatus::Success)
        );
        let mut got = [0u8; 4];
        b.buf.read(0, &mut got).unwrap();
        assert_eq!(got, word, "round {round}");
        a.qp.to_error().unwrap();
        b.qp.to_error().unwrap();
        let psns = (a.qp.psn(), b.qp.psn());
        a.qp.reset().unwrap();
        b.qp.reset().unwrap();
        assert!(
            a.qp.psn() != psns.0 && b.qp.psn() != psns.1,
            "round {round}"
        );
    }
}

/// Polls `cq` and resets `qp` until the reset is accepted (`to_error`, then drain): returns
/// the completions polled meanwhile.
fn drain_and_reset(qp: &Qp, cq: &mut Poller) -> Vec<Completion> {
    let deadline = Instant::now() + COMPLETION_LIMIT;
    let mut got = Vec::new();
    let mut wc = [Completion::EMPTY; 16];
    loop {
        match qp.reset() {
            Ok(()) => return got,
            Err(Error::NotDrained { .. }) => {
                let n = cq.poll(&mut wc);
                got.extend_from_slice(&wc[..n]);
            }
            Err(e) => panic!("reset: {e}"),
        }
        assert!(
            Instant::now() < deadline,
            "never drained: {:?}, polled {got:?}",
            qp.outstanding()
        );
    }
}

/// The last request of A is unsignaled: it completes with no completion. Taken down on
/// purpose, A still drains and resets (the reset's drain marker retires it), and both sides,
/// recovered, transfer again: A's peer B was healthy, but it expects the PSNs of A's old
/// incarnation, so it recovers too and the two connect to each other's new endpoints.
fn unsignaled_last_request_then_both_sides_recover(ctx: &Context, gid: Option<u32>) {
    let pd = ctx.alloc_pd().unwrap();
    let (a, b) = (end(&pd), end(&pd));
    connect(ctx, gid, &a.qp, &b.qp);
    let mut sq = a.qp.send_queue().unwrap();
    let mut cq = a.cq.poller().unwrap();
    let mut bcq = b.cq.poller().unwrap();
    a.buf.write(0, b"first").unwrap();
    sq.write(1, a.buf.slice(0..5).unwrap(), b.buf.remote(0).unwrap(), SIG)
        .unwrap();
    assert_eq!(wait(&mut cq, 1)[0].status, WcStatus::Success);
    a.buf.write(8, b"unsignaled").unwrap();
    sq.write(
        2,
        a.buf.slice(8..18).unwrap(),
        b.buf.remote(8).unwrap(),
        SendFlags::empty(),
    )
    .unwrap();
    let deadline = Instant::now() + COMPLETION_LIMIT;
    let mut got = [0u8; 10];
    while &got != b"unsignaled" {
        assert!(
            Instant::now() < deadline,
            "the unsignaled WRITE never landed"
        );
        b.buf.read(8, &mut got).unwrap();
    }
    a.qp.to_error().unwrap();
    let extra = drain_and_reset(&a.qp, &mut cq);
    // The unsignaled WRITE had completed: the one completion is the drain marker's flush.
    assert_eq!(extra.len(), 1, "{extra:?}");
    assert_eq!(
        (extra[0].wr_id, extra[0].status),
        (zverbs::DRAIN_WR_ID, WcStatus::WrFlushErr)
    );
    b.qp.to_error().unwrap();
    assert!(drain_and_reset(&b.qp, &mut bcq).is_empty());
    connect(ctx, gid, &a.qp, &b.qp);
    a.buf.write(64, b"both again").unwrap();
    sq.write(
        3,
        a.buf.slice(64..74).unwrap(),
        b.buf.remote(64).unwrap(),
        SIG,
    )
    .unwrap();
    let c = wait(&mut cq, 1);
    assert_eq!((c[0].wr_id, c[0].status), (3, WcStatus::Success));
    let mut got = [0u8; 10];
    b.buf.read(64, &mut got).unwrap();
    assert_eq!(&got, b"both again");
    nothing_more(&mut cq);
}

/// The software-device variants run in the test stage; where a device is named (the rxe and
/// connectx stages) they would repeat that run, and return at once.
#[cfg(feature = "sim")]
fn on_a_named_device() -> bool {
    std::env::var_os("ZVERBS_TEST_DEVICE").is_some_and(|v| !v.is_empty())
}

#[cfg(feature = "sim")]
mod software_device {
    use super::*;

    fn sim() -> Context {
        open(zverbs::SOFTWARE_DEVICE)
    }

    #[test]
    fn error_mid_transfer_drains_then_reset_reconnects_to_a_new_peer() {
        if on_a_named_device() {
            return;
        }
        drain_reset_reconnect(&sim(), None);
    }

    #[test]
    fn reset_is_refused_until_the_poller_has_every_completion() {
        if on_a_named_device() {
            return;
        }
        reset_waits_for_the_poller(&sim(), None);
    }

    #[test]
    fn an_unsignaled_last_request_drains_then_both_sides_recover() {
        if on_a_named_device() {
            return;
        }
        unsignaled_last_request_then_both_sides_recover(&sim(), None);
    }

    #[test]
    fn a_qp_reset_and_reconnected_a_thousand_times() {
        if on_a_named_device() {
            return;
        }
        let ctx = sim();
        let pd = ctx.alloc_pd().unwrap();
        let (a, b) = (end(&pd), end(&pd));
        reuse(&ctx, None, &a, &b, 1000);
    }
}

#[test]
fn error_mid_transfer_drains_then_reset_reconnects_on_the_device() {
    let Some(env) = env() else { return };
    let _s = serial();
    drain_reset_reconnect(&open(&env.device), Some(env.gid_index));
}

#[test]
fn reset_is_refused_until_polled_on_the_device() {
    let Some(env) = env() else { return };
    let _s = serial();
    reset_waits_for_the_poller(&open(&env.device), Some(env.gid_index));
}

#[test]
fn an_unsignaled_last_request_drains_then_both_sides_recover_on_the_device() {
    let Some(env) = env() else { return };
    let _s = serial();
    unsignaled_last_request_then_both_sides_recover(&open(&env.device), Some(env.gid_index));
}

/// `ZVERBS_TEST_REUSE` rounds (default 1000) of reset and reconnection; the kernel's objects
/// of this process (RDMA netlink) are the same before and after.
#[test]
fn reuse_leaks_no_kernel_object_on_the_device() {
    let Some(env) = env() else { return };
    let _s = serial();
    let rounds = std::env::var("ZVERBS_TEST_REUSE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let ctx = open(&env.device);
    let pd = ctx.alloc_pd().unwrap();
    let (a, b) = (end(&pd), end(&pd));
    // The emulated ConnectX has no kernel objects (and this machine may have no RDMA netlink):
    // there the rounds run without the kernel's count.
    let mut sock = match device::netlink::Socket::open(&env.device) {
        Ok(s) => Some(s),
        Err(e) if e.raw_os_error() == Some(libc::EPROTONOSUPPORT) => {
            println!("no RDMA netlink here ({e}): the kernel's objects are not counted");
            None
        }
        Err(e) => panic!("RDMA netlink: {e}"),
    };
    let me = [std::process::id()];
    let before = sock.as_mut().map(|s| s.objects(&me).unwrap());
    reuse(&ctx, Some(env.gid_index), &a, &b, rounds);
    let after = sock.as_mut().map(|s| s.objects(&me).unwrap());
    assert_eq!(
        before, after,
        "kernel objects before and after {rounds} resets"
    );
    println!("{rounds} resets: kernel objects {after:?}");
}
