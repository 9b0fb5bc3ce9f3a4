//! Asynchronous events on the software device, through `Context::async_events`: each kind the
//! device raises, a port that goes down mid-transfer, the SRQ limit, readers that each see
//! every event, and events about objects already destroyed.
//!
//! The port and the stepping are the device's, shared by the whole process: the tests of this
//! file take turns (`serial`) and leave the port up.
#![cfg(feature = "sim")]

use std::os::fd::AsRawFd;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use zverbs::sim::{DeviceEvent, PortState};
use zverbs::{
    AccessFlags, AsyncEvent, AsyncEvents, Completion, ContextOptions, PollCq, PostRecv, PostSend,
    RecvWr, Registered, SendFlags, SendWr, WcStatus,
};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn ctx() -> zverbs::Context {
    zverbs::open_device(Some(zverbs::SOFTWARE_DEVICE), &ContextOptions::default()).unwrap()
}

const WAIT: Duration = Duration::from_secs(10);

/// Every event pending now.
fn drain(ev: &mut AsyncEvents) -> Vec<AsyncEvent> {
    std::iter::from_fn(|| ev.try_next().unwrap()).collect()
}

/// Whether the fd is readable now (`poll` with no wait).
fn readable(ev: &AsyncEvents) -> bool {
    let mut p = libc::pollfd {
        fd: ev.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let r = unsafe { libc::poll(&mut p, 1, 0) };
    assert!(r >= 0);
    r == 1 && p.revents & libc::POLLIN != 0
}

#[test]
fn a_port_that_goes_down_mid_transfer_fails_every_request_once_and_reports_its_qps() {
    let _g = serial();
    let ctx = ctx();
    let sim = ctx.sim().unwrap();
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
    let (mut qa, _qb) = (a.queues(&cq_a).unwrap(), b.queues(&cq_b).unwrap());
    let deadline = Instant::now() + WAIT;
    qa.sq
        .write(
            0,
            buf.slice(0..64).unwrap(),
            buf.remote(1024).unwrap(),
            SendFlags::SIGNALED,
        )
        .unwrap();
    assert!(qa.cq.wait(1, deadline).unwrap()[0].status.is_success());
    assert_eq!(ctx.port(1).unwrap().state, zverbs::PortState::Active);

    // Requests in flight when the port goes down: the device is stepped, so none has been
    // taken yet.
    sim.set_stepped(true);
    for i in 1..=6 {
        qa.sq
            .write(
                i,
                buf.slice(0..64).unwrap(),
                buf.remote(2048).unwrap(),
                SendFlags::SIGNALED,
            )
            .unwrap();
    }
    sim.set_port_state(1, PortState::Down).unwrap();
    sim.set_stepped(false);
    let got: Vec<Completion> = qa.cq.wait(6, deadline).unwrap().to_vec();
    let ids: Vec<u64> = got.iter().map(|c| c.wr_id).collect();
    assert_eq!(ids, [1, 2, 3, 4, 5, 6], "each request completes once");
    assert_eq!(got[0].status, WcStatus::RetryExcErr);
    for c in &got[1..] {
        assert_eq!(c.status, WcStatus::WrFlushErr);
    }
    assert_eq!(ctx.port(1).unwrap().state, zverbs::PortState::Down);
    let port = events.next(WAIT).unwrap();
    assert_eq!(port, Some(AsyncEvent::PortError { port: 1 }));
    let fatal = events.next(WAIT).unwrap().unwrap();
    assert_eq!(fatal, AsyncEvent::QpFatal { qpn: a.qpn() });
    assert!(fatal.concerns_qp(&a) && !fatal.concerns_qp(&b));
    assert_eq!(drain(&mut events), []);

    sim.set_port_state(1, PortState::Active).unwrap();
    assert_eq!(
        events.next(WAIT).unwrap(),
        Some(AsyncEvent::PortActive { port: 1 })
    );
    assert_eq!(ctx.port(1).unwrap().state, zverbs::PortState::Active);
}

#[test]
fn the_fd_is_readable_while_events_are_pending_and_every_reader_sees_them() {
    let _g = serial();
    let ctx = ctx();
    let sim = ctx.sim().unwrap();
    let mut one = ctx.async_events().unwrap();
    let mut two = ctx.async_events().unwrap();
    assert!(!readable(&one));
    assert_eq!(one.try_next().unwrap(), None);
    assert_eq!(one.next(Duration::from_millis(1)).unwrap(), None);
    sim.set_port_state(1, PortState::Down).unwrap();
    sim.set_port_state(1, PortState::Active).unwrap();
    assert!(readable(&one) && readable(&two));
    // One read leaves the other event pending: still readable.
    assert_eq!(
        one.try_next().unwrap(),
        Some(AsyncEvent::PortError { port: 1 })
    );
    assert!(readable(&one));
    assert_eq!(
        one.try_next().unwrap(),
        Some(AsyncEvent::PortActive { port: 1 })
    );
    assert_eq!(one.try_next().unwrap(), None);
    assert!(!readable(&one));
    assert_eq!(
        drain(&mut two),
        [
            AsyncEvent::PortError { port: 1 },
            AsyncEvent::PortActive { port: 1 }
        ]
    );
    // A reader made later sees only later events.
    let mut late = ctx.async_events().unwrap();
    assert_eq!(late.try_next().unwrap(), None);
}

#[test]
fn injected_qp_events_name_their_qp_even_after_it_is_destroyed() {
    let _g = serial();
    let ctx = ctx();
    let sim = ctx.sim().unwrap();
    let mut events = ctx.async_events().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.cq_builder().build().unwrap();
    let qp = pd.qp_builder(&cq, &cq).build().unwrap();
    let qpn = qp.qpn();
    sim.inject_qp_fatal(qpn).unwrap();
    sim.inject_qp_event(DeviceEvent::QpRequestError { qpn })
        .unwrap();
    sim.inject_qp_event(DeviceEvent::QpAccessError { qpn })
        .unwrap();
    // Destroyed with its events unread: nothing waits for them.
    drop(qp);
    assert_eq!(
        drain(&mut events),
        [
            AsyncEvent::QpFatal { qpn },
            AsyncEvent::QpRequestError { qpn },
            AsyncEvent::QpAccessError { qpn },
        ]
    );
    assert!(sim.inject_qp_fatal(qpn).is_err());
}

#[test]
fn a_qp_on_an_srq_that_fails_reports_its_last_wqe() {
    let _g = serial();
    let ctx = ctx();
    let sim = ctx.sim().unwrap();
    let mut events = ctx.async_events().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let srq = pd.create_srq(16, 1).unwrap();
    let cq = ctx.cq_builder().build().unwrap();
    let qp = pd.qp_builder(&cq, &cq).srq(&srq).build().unwrap();
    sim.inject_qp_fatal(qp.qpn()).unwrap();
    assert_eq!(
        drain(&mut events),
        [
            AsyncEvent::QpFatal { qpn: qp.qpn() },
            AsyncEvent::QpLastWqeReached { qpn: qp.qpn() },
        ]
    );
}

#[test]
fn device_fatal_reaches_the_reader() {
    let _g = serial();
    let ctx = ctx();
    let sim = ctx.sim().unwrap();
    let mut events = ctx.async_events().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.cq_builder().build().unwrap();
    let qp = pd.qp_builder(&cq, &cq).build().unwrap();
    sim.inject_device_fatal();
    assert_eq!(drain(&mut events), [AsyncEvent::DeviceFatal]);
    drop(qp);
}

#[test]
fn a_cq_that_overruns_reports_a_cq_error() {
    let _g = serial();
    let ctx = ctx();
    let sim = ctx.sim().unwrap();
    let mut events = ctx.async_events().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let small = ctx.cq_builder().cqe(4).build().unwrap();
    let other = ctx.cq_builder().build().unwrap();
    let a = pd
        .qp_builder(&small, &small)
        .max_send_wr(64)
        .build()
        .unwrap();
    let b = pd.qp_builder(&other, &other).build().unwrap();
    zverbs::connect_pair(&a, &b).unwrap();
    let mut sq = a.send_queue().unwrap();
    // Unsignaled NOPs: none asks for a CQE, but each fails or is flushed with one once the
    // port is down; more than the CQ holds.
    let n = small.cqe() as u64 + 4;
    sim.set_stepped(true);
    for i in 0..n {
        // SAFETY: a NOP touches no memory.
        unsafe { sq.post(&SendWr::nop(i)) }.unwrap();
    }
    sim.set_port_state(1, PortState::Down).unwrap();
    sim.run_until_idle();
    sim.set_port_state(1, PortState::Active).unwrap();
    sim.set_stepped(false);
    let got = drain(&mut events);
    let cq_err = got
        .iter()
        .find(|e| matches!(e, AsyncEvent::CqError { .. }))
        .expect("a CQ error");
    assert!(cq_err.concerns_cq(&small) && !cq_err.concerns_cq(&other));
    assert_eq!(
        got.iter()
            .filter(|e| matches!(e, AsyncEvent::CqError { .. }))
            .count(),
        1
    );
}

#[test]
fn the_srq_limit_event_reaches_the_reader_once_and_disarms_it() {
    let _g = serial();
    let ctx = ctx();
    let mut events = ctx.async_events().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let srq = pd.create_srq(16, 1).unwrap();
    let other_srq = pd.create_srq(16, 1).unwrap();
    let cq = ctx.cq_builder().build().unwrap();
    let peer_cq = ctx.cq_builder().build().unwrap();
    let ours = pd.qp_builder(&cq, &cq).srq(&srq).build().unwrap();
    let peer = pd.qp_builder(&peer_cq, &peer_cq).build().unwrap();
    zverbs::connect_pair(&ours, &peer).unwrap();
    let buf = pd.alloc_buf(4096, AccessFlags::ALL).unwrap();
    let mut rq = srq.queue().unwrap();
    for i in 0..4u64 {
        let sgl = [buf.sge(i as usize * 64..(i as usize + 1) * 64).unwrap()];
        // SAFETY: registered, outlives the receives, read only after their completions.
        unsafe { PostRecv::post(&mut rq, &RecvWr::new(i, &sgl)) }.unwrap();
    }
    srq.arm(3).unwrap();
    let mut sq = peer.send_queue().unwrap();
    let mut poller = cq.poller().unwrap();
    let mut peer_poller = peer_cq.poller().unwrap();
    let src = pd.alloc_buf(64, AccessFlags::ALL).unwrap();
    let mut send_one = |id: u64| {
        let sgl = [src.sge(0..8).unwrap()];
        // SAFETY: registered memory that lives until the completion is polled below.
        unsafe { sq.post(&SendWr::send(id, &sgl).signaled()) }.unwrap();
        let end = Instant::now() + WAIT;
        let mut out = [Completion::default(); 4];
        let (mut mine, mut theirs) = (0, 0);
        while (mine < 1 || theirs < 1) && Instant::now() < end {
            mine += poller.poll(&mut out);
            theirs += peer_poller.poll(&mut out);
        }
        assert_eq!((mine, theirs), (1, 1));
    };
    send_one(0); // 3 left: not below 3
    assert_eq!(events.try_next().unwrap(), None);
    send_one(1); // 2 left
    let ev = events.next(WAIT).unwrap().expect("the limit event");
    assert_eq!(
        ev,
        AsyncEvent::SrqLimitReached {
            srq: srq.event_id()
        }
    );
    assert!(ev.concerns_srq(&srq) && !ev.concerns_srq(&other_srq));
    send_one(2); // disarmed
    assert_eq!(events.try_next().unwrap(), None);
}
