//! Completion channels: arming, sleeping and waking, on the software device, and on the
//! device `ZVERBS_TEST_DEVICE` names when it is set (rxe in the rxe stage, the emulated
//! ConnectX in the connectx stage).
#![cfg(feature = "sim")]

use std::time::{Duration, Instant};

use zverbs::connect::{Endpoint, random_psn};
use zverbs::safe::WaitError;
use zverbs::{
    AccessFlags, CompChannel, Completion, ConnectAttr, ContextOptions, Cq, Error, EventError,
    MrBuf, PollCqTimed, Poller, Qp, RecvQueue, SendFlags, SendQueue, TimedCompletion, WcOpcode,
};

/// The device under test and its GID index.
fn device() -> (String, u32) {
    match std::env::var("ZVERBS_TEST_DEVICE") {
        Ok(d) if !d.is_empty() => {
            let gid = std::env::var("ZVERBS_TEST_GID_INDEX")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(1);
            (d, gid)
        }
        _ => (zverbs::SOFTWARE_DEVICE.to_owned(), 0),
    }
}

/// Arm/sleep/wake cycles: 100 000 on the software device, 1 000 on a kernel or emulated device
/// (rxe in the rxe stage's emulated VM takes about 20 ms a round trip with events), or
/// `ZVERBS_EVENT_CYCLES` (the connectx stage asks for 10 000).
fn cycles(device: &str) -> u32 {
    std::env::var("ZVERBS_EVENT_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if device == zverbs::SOFTWARE_DEVICE {
            100_000
        } else {
            1_000
        })
}

struct Side {
    qp: Qp,
    cq: Cq,
    buf: MrBuf,
    ch: CompChannel,
}

/// Two RC QPs on one device connected to each other, each with its CQ on a channel of its own.
fn pair() -> (Side, Side) {
    pair_with(false).unwrap()
}

/// As [`pair`], the first side's CQ with completion timestamps when `timestamps` (`None`: the
/// device cannot timestamp completions).
fn pair_with(timestamps: bool) -> Option<(Side, Side)> {
    let (name, gid_index) = device();
    let ctx = zverbs::open_device(Some(&name), &ContextOptions::default()).unwrap();
    let port = ctx.active_port().unwrap();
    let local = ctx.address(port, Some(gid_index)).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let side = |timestamps: bool| {
        let ch = ctx.comp_channel().unwrap();
        let cq = match ctx
            .cq_builder()
            .cqe(64)
            .channel(&ch)
            .timestamps(timestamps)
            .build()
        {
            Err(Error::NoTimestamps { reason, .. }) => {
                println!("{name}: no completion timestamps ({reason})");
                return None;
            }
            cq => cq.unwrap(),
        };
        assert_eq!(cq.has_timestamps(), timestamps);
        let qp = pd.qp_builder(&cq, &cq).build().unwrap();
        let buf = pd.alloc_buf(4096, AccessFlags::ALL).unwrap();
        Some(Side { qp, cq, buf, ch })
    };
    let (a, b) = (side(timestamps)?, side(false)?);
    let ea = Endpoint {
        lid: local.lid,
        qpn: a.qp.qpn(),
        psn: random_psn(),
        gid: local.gid,
    };
    let eb = Endpoint {
        qpn: b.qp.qpn(),
        psn: random_psn(),
        ..ea
    };
    a.qp.connect_with(&ConnectAttr::new(port, ea.psn, &eb, local.gid_index))
        .unwrap();
    b.qp.connect_with(&ConnectAttr::new(port, eb.psn, &ea, local.gid_index))
        .unwrap();
    println!("{name}: CQ backend {}", a.cq.backend());
    Some((a, b))
}

type Q = (SendQueue, RecvQueue, Poller);

fn queues(s: &Side) -> Q {
    (
        s.qp.send_queue().unwrap(),
        s.qp.recv_queue().unwrap(),
        s.cq.poller().unwrap(),
    )
}

/// The deadline of a wait that something will end (no test waits for it to pass).
fn limit() -> Instant {
    Instant::now() + Duration::from_secs(20)
}

/// Waits (sleeping on the channel) until a receive completes; returns the wake-ups taken.
fn wait_recv(cq: &mut Poller) -> u32 {
    let mut waits = 0;
    loop {
        let got = cq
            .wait_blocking(1, limit())
            .expect("a completion within the limit");
        waits += 1;
        for c in got {
            assert!(c.is_success(), "{c:?}");
            if c.opcode == WcOpcode::Recv {
                return waits;
            }
        }
    }
}

/// Ping-pong where both sides sleep on their channels between messages: every message must
/// wake its receiver. A lost wake-up hangs the waiter until the limit and fails the test.
#[test]
#[cfg_attr(miri, ignore = "eventfd, poll(2) and the device's thread")]
fn no_wake_up_is_lost_in_arm_sleep_wake_cycles() {
    let (a, b) = pair();
    let n = cycles(&device().0);
    let (mut asq, mut arq, mut acq) = queues(&a);
    let (mut bsq, mut brq, mut bcq) = queues(&b);
    let sig = SendFlags::SIGNALED;
    arq.post(0, a.buf.slice(0..64).unwrap()).unwrap();
    brq.post(0, b.buf.slice(0..64).unwrap()).unwrap();
    let bbuf = b.buf.clone();
    let echo = std::thread::spawn(move || {
        for i in 0..n {
            wait_recv(&mut bcq);
            brq.post(u64::from(i), bbuf.slice(0..64).unwrap()).unwrap();
            bsq.send(u64::from(i), bbuf.slice(64..72).unwrap(), sig)
                .unwrap();
        }
        bcq
    });
    for i in 0..n {
        asq.send(u64::from(i), a.buf.slice(64..72).unwrap(), sig)
            .unwrap();
        wait_recv(&mut acq);
        arq.post(u64::from(i), a.buf.slice(0..64).unwrap()).unwrap();
    }
    let _bcq = echo.join().unwrap();
    println!("{n} round trips, each side asleep between messages");
}

/// A CQ armed for solicited completions sleeps through an unsolicited SEND and wakes for the
/// solicited one, returning both.
#[test]
#[cfg_attr(miri, ignore = "eventfd, poll(2) and the device's thread")]
fn solicited_only_arming_wakes_for_solicited_completions() {
    let (a, b) = pair();
    let (mut asq, _arq, mut acq) = queues(&a);
    let (_bsq, mut brq, mut bcq) = queues(&b);
    for i in 0..2 {
        brq.post(i, b.buf.slice(0..64).unwrap()).unwrap();
    }
    let mut wc = [Completion::EMPTY; 8];
    // Armed for solicited completions, with nothing there.
    assert_eq!(
        zverbs::core::event::poll_arm_poll(&mut bcq, &mut wc, |c: &mut Poller| c.arm(true))
            .unwrap(),
        0
    );
    asq.send(1, a.buf.slice(0..8).unwrap(), SendFlags::SIGNALED)
        .unwrap();
    acq.wait_blocking(1, limit()).unwrap();
    // The unsolicited receive completed but raised no event.
    let quiet = b.ch.clone();
    let mut waited = 0;
    while waited < 200 && bcq.take_events().unwrap() == 0 {
        std::thread::sleep(Duration::from_millis(1));
        waited += 1;
    }
    assert_eq!(waited, 200, "no event for an unsolicited completion");
    drop(quiet);
    asq.send(
        2,
        a.buf.slice(0..8).unwrap(),
        SendFlags::SIGNALED | SendFlags::SOLICITED,
    )
    .unwrap();
    let mut got = Vec::new();
    while got.len() < 2 {
        let done = bcq.wait_solicited(1, limit()).unwrap();
        got.extend(done.iter().map(|c| c.wr_id));
    }
    assert_eq!(got, [0, 1]);
}

/// A CQ with both a channel and completion timestamps: with nothing there its waiter sleeps
/// until the deadline; a completion wakes it (`wait`, `wait_timed`), and what `wait_timed` and
/// `poll_timed` return carries the device clock.
#[test]
#[cfg_attr(miri, ignore = "eventfd, poll(2) and the device's thread")]
fn a_cq_with_a_channel_and_timestamps_sleeps_wakes_and_stamps() {
    let Some((a, b)) = pair_with(true) else {
        return;
    };
    let clock = a.cq.context().clock().unwrap();
    let (_asq, mut arq, mut acq) = queues(&a);
    let (mut bsq, _brq, mut bcq) = queues(&b);
    for i in 0..3 {
        arq.post(i, a.buf.slice(0..64).unwrap()).unwrap();
    }
    let mut tw = [TimedCompletion::EMPTY; 4];
    let t = Instant::now() + Duration::from_millis(20);
    assert_eq!(
        acq.wait_timed(&mut tw, t),
        Err(WaitError::Timeout { wanted: 1, got: 0 })
    );
    let stamped = |c: &TimedCompletion| {
        assert!(c.wc.is_success(), "{c:?}");
        let ts = c.hw_timestamp().expect("a CQ with timestamps");
        assert!(ts <= clock.mask());
        // Written after the clock was read.
        assert!(clock.to_wall_ns(ts) >= clock.info().nsec, "{ts:#x}");
        ts
    };
    let mut send = |id: u64| {
        bsq.send(id, b.buf.slice(0..8).unwrap(), SendFlags::SIGNALED)
            .unwrap();
        let c = bcq.wait_blocking(1, limit()).unwrap()[0];
        assert!(c.is_success(), "{c:?}");
    };
    // Woken by `wait` (armed by the timed wait before).
    send(10);
    assert_eq!(acq.wait_blocking(1, limit()).unwrap()[0].wr_id, 0);
    assert!(acq.ready().is_empty(), "one completion");
    // Woken by `wait_timed`, stamped: the send comes from another thread while it (most
    // likely) sleeps; a wait that did not arm would sleep to the limit.
    let n = std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(20));
            send(11);
        });
        acq.wait_timed(&mut tw, limit()).unwrap()
    });
    assert_eq!((n, tw[0].wc.wr_id), (1, 1));
    let first = stamped(&tw[0]);
    // Read by `poll_timed` once the event woke nothing (no wait), stamped too.
    send(12);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while acq.poll_timed(&mut tw) == 0 {
        assert!(std::time::Instant::now() < deadline, "no completion");
    }
    assert_eq!(tw[0].wc.wr_id, 2);
    assert!(clock.elapsed_ns(first, stamped(&tw[0])) < clock.mask());
}

/// Arming a CQ made without a channel is a typed error; a wait with a deadline and nothing
/// coming ends with a typed timeout.
#[test]
#[cfg_attr(miri, ignore = "eventfd and poll(2)")]
fn no_channel_and_timeout_are_typed_errors() {
    let (name, _) = device();
    let ctx = zverbs::open_device(Some(&name), &ContextOptions::default()).unwrap();
    let cq = ctx.cq_builder().cqe(8).build().unwrap();
    let mut p = cq.poller().unwrap();
    assert!(matches!(
        p.arm(false),
        Err(Error::Event(EventError::NoChannel))
    ));
    let soon = Instant::now() + Duration::from_millis(1);
    assert_eq!(p.wait_blocking(1, soon), Err(WaitError::NoChannel));
    // The spinning wait needs no channel, and ends at the same deadline with the same error.
    assert_eq!(
        p.wait(1, soon),
        Err(WaitError::Timeout { wanted: 1, got: 0 })
    );
    assert!(p.channel().is_none());

    let ch = ctx.comp_channel().unwrap();
    let cq = ctx.cq_builder().cqe(8).channel(&ch).build().unwrap();
    let mut p = cq.poller().unwrap();
    assert!(p.channel().unwrap().is(&ch));
    let t = Instant::now() + Duration::from_millis(20);
    assert_eq!(
        p.wait_blocking(1, t),
        Err(WaitError::Timeout { wanted: 1, got: 0 })
    );
}

/// An event raised for a CQ whose poller and handle are then dropped: taken by the poller of
/// another CQ on the same channel, kept, and acknowledged when the CQ is destroyed (no hang in
/// `ibv_destroy_cq`, no use of the freed CQ); the channel keeps working.
#[test]
#[cfg_attr(miri, ignore = "eventfd, poll(2) and the device's thread")]
fn an_event_for_a_cq_being_destroyed() {
    let (name, gid_index) = device();
    let ctx = zverbs::open_device(Some(&name), &ContextOptions::default()).unwrap();
    let port = ctx.active_port().unwrap();
    let local = ctx.address(port, Some(gid_index)).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let ch = ctx.comp_channel().unwrap();
    // A's CQ (the sender's, waited on through a channel of its own), and two CQs on `ch`:
    // B's (armed, then destroyed), C's (survives).
    let ach = ctx.comp_channel().unwrap();
    let cqs: Vec<Cq> = (0..3)
        .map(|i| {
            let c = if i == 0 { &ach } else { &ch };
            ctx.cq_builder().cqe(16).channel(c).build().unwrap()
        })
        .collect();
    let qps: Vec<Qp> = cqs
        .iter()
        .map(|c| pd.qp_builder(c, c).build().unwrap())
        .collect();
    let buf = pd.alloc_buf(4096, AccessFlags::ALL).unwrap();
    let ep = |qp: &Qp| Endpoint {
        lid: local.lid,
        qpn: qp.qpn(),
        psn: 0x100,
        gid: local.gid,
    };
    for (x, y) in [(0, 1), (1, 0)] {
        qps[x]
            .connect_with(&ConnectAttr::new(
                port,
                0x100,
                &ep(&qps[y]),
                local.gid_index,
            ))
            .unwrap();
    }
    let mut asq = qps[0].send_queue().unwrap();
    let mut brq = qps[1].recv_queue().unwrap();
    let mut acq = cqs[0].poller().unwrap();
    let mut bcq = cqs[1].poller().unwrap();
    let mut ccq = cqs[2].poller().unwrap();
    brq.post(7, buf.slice(0..64).unwrap()).unwrap();
    let mut wc = [Completion::EMPTY; 4];
    assert_eq!(
        zverbs::core::event::poll_arm_poll(&mut bcq, &mut wc, |c: &mut Poller| c.arm(false))
            .unwrap(),
        0
    );
    asq.send(1, buf.slice(100..108).unwrap(), SendFlags::SIGNALED)
        .unwrap();
    let done = acq.wait_blocking(1, limit()).unwrap();
    assert!(done.iter().all(|c| c.is_success()), "{done:?}");
    // B's event reaches the channel: it is readable until a poller takes it. C's poller
    // takes it and keeps it for B.
    let readable = |ms| {
        let mut p = [libc_pollfd(&ch)];
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(p.as_mut_ptr(), 1, ms) > 0 }
    };
    assert!(readable(5000), "B's event");
    assert_eq!(ccq.take_events().unwrap(), 0, "the event is B's");
    assert!(!readable(0), "taken");
    // Destroy B while its event is kept unacknowledged.
    drop((brq, bcq));
    let (b_cq, b_qp) = (cqs[1].clone(), qps[1].clone());
    drop(qps);
    drop(cqs);
    drop((b_qp, b_cq));
    // The channel and C still work.
    assert_eq!(
        ccq.wait_blocking(1, Instant::now() + Duration::from_millis(10)),
        Err(WaitError::Timeout { wanted: 1, got: 0 })
    );
    drop((asq, acq, ccq));
}

/// `wait_async` on tokio: the runtime's reactor wakes the task when the channel's descriptor
/// becomes readable.
#[cfg(feature = "tokio")]
#[test]
#[cfg_attr(miri, ignore = "eventfd, epoll and the device's thread")]
fn wait_async_wakes_on_the_channel() {
    let (a, b) = pair();
    let (mut asq, _arq, _acq) = queues(&a);
    let (_bsq, mut brq, mut bcq) = queues(&b);
    brq.post(5, b.buf.slice(0..64).unwrap()).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .unwrap();
    let got = rt.block_on(async {
        let ch = zverbs::AsyncChannel::new(b.ch.clone()).unwrap();
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            asq.send(6, a.buf.slice(0..8).unwrap(), SendFlags::SIGNALED)
                .unwrap();
            (asq, a)
        });
        let mut wc = [Completion::EMPTY; 4];
        let n = bcq.wait_async(&mut wc, &ch).await.unwrap();
        let _ = sender.join().unwrap();
        wc[..n].to_vec()
    });
    assert_eq!((got.len(), got[0].wr_id), (1, 5));
}

fn libc_pollfd(ch: &CompChannel) -> libc::pollfd {
    use std::os::fd::AsRawFd;
    libc::pollfd {
        fd: ch.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    }
}
