//! Asynchronous events on the emulated ConnectX, read by Debian's unmodified libibverbs
//! (`ibv_get_async_event` on the context's async fd, through `zverbs`'s rdma-core provider):
//! an injected port-down (and the port coming up), the QP fatal a request on the down port
//! brings, an injected QP fatal, the SRQ limit, and destroys that wait for acknowledged events
//! (`events_reported` in the destroy answer) and drop unread ones.
//!
//! Needs the shim (`libzverbs_emu.so`); run by `cargo xtask test --only connectx` (see
//! `differential.rs`).

mod common;

use std::time::{Duration, Instant};

use common::in_emulator;
use zverbs::connect::{Endpoint, random_psn};
use zverbs::{
    AccessFlags, AsyncEvent, Completion, ConnectAttr, ContextOptions, PollCq, PortState, PostRecv,
    PostSend, RecvWr, Registered, SendWr, WcStatus,
};
use zverbs_emu::async_events::{Fault, inject};

const WAIT: Duration = Duration::from_secs(20);

/// Connects `a` to `b` and `b` to `a` on this process's device.
fn connect(ctx: &zverbs::Context, a: &zverbs::Qp, b: &zverbs::Qp) {
    let port = ctx.active_port().unwrap();
    let local = ctx.address(port, None).unwrap();
    let ends = [a, b].map(|q| Endpoint {
        lid: local.lid,
        qpn: q.qpn(),
        psn: random_psn(),
        gid: local.gid,
    });
    a.connect_with(&ConnectAttr::new(
        port,
        ends[0].psn,
        &ends[1],
        local.gid_index,
    ))
    .unwrap();
    b.connect_with(&ConnectAttr::new(
        port,
        ends[1].psn,
        &ends[0],
        local.gid_index,
    ))
    .unwrap();
}

/// Polls `cq` until one completion arrives.
fn one(cq: &mut impl PollCq) -> Completion {
    let end = Instant::now() + WAIT;
    let mut wc = [Completion::EMPTY; 4];
    while Instant::now() < end {
        if let [c, ..] = cq.poll_into(&mut wc) {
            return *c;
        }
    }
    panic!("no completion within {WAIT:?}");
}

#[test]
fn libibverbs_reads_injected_port_and_qp_events() {
    if !in_emulator(
        "libibverbs_reads_injected_port_and_qp_events",
        &[],
        Duration::from_secs(60),
    ) {
        return;
    }
    let ctx = zverbs::open_device(Some("mlx5_0"), &ContextOptions::default()).unwrap();
    let mut events = ctx.async_events().unwrap();
    assert_eq!(events.try_next().unwrap(), None);
    let pd = ctx.alloc_pd().unwrap();
    let buf = pd.alloc_buf(4096, AccessFlags::ALL).unwrap();
    let cq = ctx.cq_builder().cqe(64).build().unwrap();
    let a = pd.qp_builder(&cq, &cq).build().unwrap();
    let b = pd.qp_builder(&cq, &cq).build().unwrap();
    connect(&ctx, &a, &b);

    // The port goes down: PORT_ERR, ibv_query_port says so, and a request fails with retry
    // exceeded and its QP reports QP_FATAL.
    inject(Fault::PortDown).unwrap();
    assert_eq!(
        events.next(WAIT).unwrap(),
        Some(AsyncEvent::PortError { port: 1 })
    );
    assert_eq!(ctx.port(1).unwrap().state, PortState::Down);
    let mut sq = a.send_queue().unwrap();
    let mut poller = cq.poller().unwrap();
    let sgl = [buf.sge(0..64).unwrap()];
    // SAFETY: registered memory that outlives the request's completion.
    unsafe { sq.post(&SendWr::write(7, &sgl, buf.remote(1024).unwrap()).signaled()) }.unwrap();
    let c = one(&mut poller);
    assert_eq!((c.wr_id, c.status), (7, WcStatus::RetryExcErr));
    let ev = events.next(WAIT).unwrap().unwrap();
    assert_eq!(ev, AsyncEvent::QpFatal { qpn: a.qpn() });
    assert!(ev.concerns_qp(&a));
    inject(Fault::PortUp).unwrap();
    assert_eq!(
        events.next(WAIT).unwrap(),
        Some(AsyncEvent::PortActive { port: 1 })
    );
    assert_eq!(ctx.port(1).unwrap().state, PortState::Active);

    // An injected QP fatal names its QP (libibverbs' ibv_qp, whose number we read).
    inject(Fault::QpFatal(b.qpn())).unwrap();
    let ev = events.next(WAIT).unwrap().unwrap();
    assert_eq!(ev, AsyncEvent::QpFatal { qpn: b.qpn() });
    assert!(ev.concerns_qp(&b) && !ev.concerns_qp(&a));
    assert!(inject(Fault::QpFatal(0xff_fff0)).is_err());
    assert_eq!(events.try_next().unwrap(), None);
}

#[test]
fn destroys_wait_for_acknowledged_events_and_drop_unread_ones() {
    if !in_emulator(
        "destroys_wait_for_acknowledged_events_and_drop_unread_ones",
        &[],
        Duration::from_secs(60),
    ) {
        return;
    }
    let ctx = zverbs::open_device(Some("mlx5_0"), &ContextOptions::default()).unwrap();
    let mut events = ctx.async_events().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.cq_builder().cqe(16).build().unwrap();
    // Read (and so acknowledged) before the destroy: the destroy answer reports one event,
    // libibverbs has one acknowledgement, and ibv_destroy_qp returns.
    let qp = pd.qp_builder(&cq, &cq).build().unwrap();
    inject(Fault::QpFatal(qp.qpn())).unwrap();
    assert_eq!(
        events.next(WAIT).unwrap(),
        Some(AsyncEvent::QpFatal { qpn: qp.qpn() })
    );
    drop(qp);
    // Not read before the destroy: the event is dropped with the QP, never read.
    let qp = pd.qp_builder(&cq, &cq).build().unwrap();
    inject(Fault::QpFatal(qp.qpn())).unwrap();
    drop(qp);
    assert_eq!(events.try_next().unwrap(), None);
    // The async fd still works.
    inject(Fault::PortDown).unwrap();
    inject(Fault::PortUp).unwrap();
    assert_eq!(
        events.next(WAIT).unwrap(),
        Some(AsyncEvent::PortError { port: 1 })
    );
    assert_eq!(
        events.next(WAIT).unwrap(),
        Some(AsyncEvent::PortActive { port: 1 })
    );
}

#[test]
fn the_srq_limit_reaches_libibverbs() {
    if !in_emulator(
        "the_srq_limit_reaches_libibverbs",
        &[],
        Duration::from_secs(60),
    ) {
        return;
    }
    let ctx = zverbs::open_device(Some("mlx5_0"), &ContextOptions::default()).unwrap();
    let mut events = ctx.async_events().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let srq = pd.create_srq(16, 1).unwrap();
    let cq = ctx.cq_builder().cqe(64).build().unwrap();
    let peer_cq = ctx.cq_builder().cqe(64).build().unwrap();
    let ours = pd.qp_builder(&cq, &cq).srq(&srq).build().unwrap();
    let peer = pd.qp_builder(&peer_cq, &peer_cq).build().unwrap();
    connect(&ctx, &ours, &peer);
    let buf = pd.alloc_buf(4096, AccessFlags::ALL).unwrap();
    let mut rq = srq.queue().unwrap();
    for i in 0..3u64 {
        let sgl = [buf.sge(i as usize * 64..(i as usize + 1) * 64).unwrap()];
        // SAFETY: registered, outlives the receives, read only after their completions.
        unsafe { PostRecv::post(&mut rq, &RecvWr::new(i, &sgl)) }.unwrap();
    }
    srq.arm(2).unwrap();
    let mut sq = peer.send_queue().unwrap();
    let mut poller = cq.poller().unwrap();
    let mut peer_poller = peer_cq.poller().unwrap();
    let sgl = [buf.sge(2048..2056).unwrap()];
    for id in 0..2 {
        // SAFETY: registered memory that outlives the request's completion.
        unsafe { sq.post(&SendWr::send(id, &sgl).signaled()) }.unwrap();
        assert!(one(&mut peer_poller).status.is_success());
        assert!(one(&mut poller).status.is_success());
        if id == 0 {
            // Two left: not below the limit.
            assert_eq!(events.try_next().unwrap(), None);
        }
    }
    let ev = events.next(WAIT).unwrap().unwrap();
    assert_eq!(
        ev,
        AsyncEvent::SrqLimitReached {
            srq: srq.event_id()
        }
    );
    assert!(ev.concerns_srq(&srq));
}
