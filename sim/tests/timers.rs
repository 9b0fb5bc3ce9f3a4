//! The requester's timers between device instances (two processes behind the emulated
//! ConnectX): a peer that died leaves no answer, and its requester's transport timer and retry
//! count end the wait with "transport retry exceeded", every request after it flushed, as on a
//! ConnectX; a transition to the error state flushes the request in flight at once; an RNR NAK
//! carries the responder's RNR timer. The timers run on the host's clock (scaled for the
//! tests), so these tests wait with a generous limit and never assert a time.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Arena, End, PairCfg, Queue};
use zverbs_core::{Completion, PostRecv, PostSend, RecvWr, SendWr, WcStatus};
use zverbs_sim::wire::{Message, Status};
use zverbs_sim::{Device, QpConfig, QpStatus, SimError, vendor};

const LID_A: u16 = 1;
const LID_B: u16 = 2;

/// How long a test waits for completions before it fails: far beyond the scaled timers.
const LIMIT: Duration = Duration::from_secs(20);

/// Requests and receives each requester holds when its peer dies.
const SENDS: u64 = 16;
const RECVS: u64 = 4;

fn cfg() -> PairCfg {
    PairCfg {
        qp: QpConfig {
            max_send_wr: 32,
            max_recv_wr: 8,
            rnr_retry: zverbs_sim::RNR_RETRY_INFINITE,
            ..QpConfig::default()
        },
        cqe: 63,
        ..PairCfg::default()
    }
}

/// Two device instances joined by an in-memory wire, one QP on each, connected.
fn across<'a>(
    q: &Arc<Queue>,
    da: &'a Device,
    db: &'a Device,
    ma: &'a Arena,
    mb: &'a Arena,
) -> (End<'a>, End<'a>) {
    da.set_wire(q.clone(), LID_A);
    db.set_wire(q.clone(), LID_B);
    let (a, b) = (common::end_on(da, ma, cfg()), common::end_on(db, mb, cfg()));
    common::connect_across(da, LID_A, a.qpn(), db, LID_B, b.qpn());
    (a, b)
}

/// Posts `RECVS` receives and `SENDS` WRITEs on `a`, every fourth one signaled (ids: receives
/// 100.., sends 0..).
fn load(a: &mut End<'_>, b: &End<'_>) {
    for i in 0..RECVS {
        let sgl = [a.sge(4096 + 64 * i as usize, 64)];
        // SAFETY: an entry of the registered arena, untouched until its completion.
        unsafe { a.rq.post(&RecvWr::new(100 + i, &sgl)) }.unwrap();
    }
    for i in 0..SENDS {
        let sgl = [a.sge(64 * i as usize, 8)];
        let wr = SendWr::write(i, &sgl, b.remote(64 * i as usize));
        let wr = if i % 4 == 3 { wr.signaled() } else { wr };
        // SAFETY: as above.
        unsafe { a.sq.post(&wr) }.unwrap();
    }
}

/// Steps `dev` (throwing away what it sends: its peer is dead) until `n` completions arrived
/// on `end`, or fails after [`LIMIT`].
fn wait_alone(dev: &Device, q: &Queue, end: &mut End<'_>, n: usize) -> Vec<Completion> {
    let deadline = Instant::now() + LIMIT;
    let mut got = Vec::new();
    while got.len() < n {
        dev.run_until_idle();
        drop(q.take());
        got.extend(end.poll_all());
        assert!(
            Instant::now() < deadline,
            "{} of {n} completions after {LIMIT:?}: {got:?} ({:?})",
            got.len(),
            dev.stats()
        );
        std::thread::yield_now();
    }
    got
}

/// The first request fails with "transport retry exceeded"; every other request and receive
/// is flushed, signaled or not; nothing more.
fn check_ended(got: &[Completion], first: WcStatus) {
    let sends: Vec<u64> = (0..SENDS).collect();
    let recvs: Vec<u64> = (100..100 + RECVS).collect();
    common::assert_exactly_once(&[sends, recvs].concat(), got);
    for c in got {
        let want = if c.wr_id == 0 {
            first
        } else {
            WcStatus::WrFlushErr
        };
        assert_eq!(c.status, want, "{c:?}");
    }
}

#[test]
fn a_dead_peers_requests_time_out_then_everything_is_flushed() {
    let q = Arc::new(Queue::default());
    let (da, db) = (Device::new(), Device::new());
    let (ma, mb) = (Arena::new(64 * 1024), Arena::new(64 * 1024));
    let (mut a, b) = across(&q, &da, &db, &ma, &mb);
    da.set_retry_cnt(a.qpn(), 7).unwrap();
    load(&mut a, &b);
    // The first request leaves; the peer process dies before it answers (nothing reaches B
    // from now on, and B answers nothing). The timer runs at the specification's pace until
    // then (4.096 µs × 2^14 ≈ 67 ms a try), so that a slow machine (an emulated CPU) sends it
    // once, not again, before it is counted.
    da.run_until_idle();
    assert_eq!(q.take().len(), 1, "one request in flight");
    // Then 1000 times faster (≈ 67 µs a try, 8 tries): the scale applies to the request
    // already in flight.
    da.set_timer_scale(1000).unwrap();
    let got = wait_alone(&da, &q, &mut a, (SENDS + RECVS) as usize);
    check_ended(&got, WcStatus::RetryExcErr);
    let failed = got.iter().find(|c| c.wr_id == 0).unwrap();
    assert_eq!(failed.vendor_err, u32::from(vendor::RETRY));
    let st = da.stats();
    assert_eq!(st.timeouts, 8, "retry_cnt 7: sent 8 times, {st:?}");
    assert_eq!(da.qp_status(a.qpn()).unwrap(), QpStatus::Error);
    assert_eq!(da.cq_overruns(), 0);
}

#[test]
fn moving_to_the_error_state_flushes_the_request_in_flight() {
    let q = Arc::new(Queue::default());
    let (da, db) = (Device::new(), Device::new());
    let (ma, mb) = (Arena::new(64 * 1024), Arena::new(64 * 1024));
    let (mut a, b) = across(&q, &da, &db, &ma, &mb);
    // The specification's timer (67 ms a try): the flush must not wait for it.
    load(&mut a, &b);
    da.run_until_idle();
    let request = q.take();
    assert_eq!(request.len(), 1, "one request in flight");
    da.set_error(a.qpn()).unwrap();
    da.run_until_idle();
    let got = a.poll_all();
    // The request in flight is flushed too: its peer may still carry it out, which a flush
    // does not deny.
    let sends: Vec<u64> = (0..SENDS).collect();
    let recvs: Vec<u64> = (100..100 + RECVS).collect();
    common::assert_exactly_once(&[sends, recvs].concat(), &got);
    assert!(
        got.iter().all(|c| c.status == WcStatus::WrFlushErr),
        "{got:?}"
    );
    assert_eq!(da.stats().timeouts, 0);
    // The peer carries it out after all; its answer matches nothing and completes nothing.
    for (lid, m) in request {
        assert_eq!(lid, LID_B);
        db.deliver(&m);
    }
    let bad = da.stats().bad_messages;
    let answers = q.take();
    assert_eq!(answers.len(), 1);
    for (_, m) in answers {
        da.deliver(&m);
    }
    da.run_until_idle();
    assert!(a.poll_all().is_empty());
    assert_eq!(
        da.stats().bad_messages,
        bad + 1,
        "the late answer is counted, not used"
    );
}

#[test]
fn a_disabled_timer_waits_until_the_error_state() {
    let q = Arc::new(Queue::default());
    let (da, db) = (Device::new(), Device::new());
    let (ma, mb) = (Arena::new(64 * 1024), Arena::new(64 * 1024));
    let (mut a, b) = across(&q, &da, &db, &ma, &mb);
    da.set_timer_scale(1_000_000).unwrap();
    da.set_timeout(a.qpn(), 0).unwrap();
    load(&mut a, &b);
    da.run_until_idle();
    assert_eq!(q.take().len(), 1);
    // Timeout 0 disables the timer (as the specification says): a long wait changes nothing.
    let until = Instant::now() + Duration::from_millis(20);
    while Instant::now() < until {
        da.run_until_idle();
        assert!(a.poll_all().is_empty());
        assert!(q.take().is_empty(), "nothing sent again");
    }
    da.set_error(a.qpn()).unwrap();
    let got = wait_alone(&da, &q, &mut a, (SENDS + RECVS) as usize);
    check_ended(&got, WcStatus::WrFlushErr);
    assert_eq!(da.stats().timeouts, 0);
}

#[test]
fn an_rnr_nak_carries_the_responders_timer_and_the_retries_run_out() {
    let q = Arc::new(Queue::default());
    let (da, db) = (Device::new(), Device::new());
    let (ma, mb) = (Arena::new(64 * 1024), Arena::new(64 * 1024));
    let (mut a, b) = across(&q, &da, &db, &ma, &mb);
    da.set_timer_scale(1000).unwrap();
    da.set_rnr_retry(a.qpn(), 2).unwrap();
    db.set_min_rnr_timer(b.qpn(), 17).unwrap();
    let sgl = [a.sge(0, 8)];
    // SAFETY: an entry of the registered arena, untouched until its completion.
    unsafe { a.sq.post(&SendWr::send(7, &sgl).signaled()) }.unwrap();
    let deadline = Instant::now() + LIMIT;
    let mut naks = 0;
    let mut got = Vec::new();
    while got.is_empty() {
        da.run_until_idle();
        for (lid, m) in q.take() {
            assert_eq!(lid, LID_B, "only requests from A");
            db.deliver(&m);
            for (lid, m) in q.take() {
                assert_eq!(lid, LID_A);
                match Message::decode(&m) {
                    Some(Message::Response(r)) => {
                        // B has no receive posted: an RNR NAK with B's timer.
                        assert_eq!(r.status, Status::Rnr(17));
                        naks += 1;
                    }
                    other => panic!("{other:?}"),
                }
                da.deliver(&m);
            }
        }
        got = a.poll_all();
        assert!(Instant::now() < deadline, "{:?}", da.stats());
        std::thread::yield_now();
    }
    assert_eq!(naks, 3, "sent once and retried twice");
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].wr_id, got[0].status), (7, WcStatus::RnrRetryExcErr));
    assert_eq!(da.stats().rnr_naks, 3);
}

#[test]
fn the_timer_scale_is_a_divisor_of_bounded_size() {
    let dev = Device::new();
    for bad in [0, 1_000_001, u32::MAX] {
        assert!(
            matches!(dev.set_timer_scale(bad), Err(SimError::InvalidConfig(_))),
            "{bad}"
        );
    }
    for good in [1, 1000, 1_000_000] {
        dev.set_timer_scale(good).unwrap();
    }
    assert!(matches!(
        dev.set_timeout(0x100, 32),
        Err(SimError::InvalidConfig(_))
    ));
    assert!(matches!(
        dev.set_min_rnr_timer(0x100, 32),
        Err(SimError::InvalidConfig(_))
    ));
}
