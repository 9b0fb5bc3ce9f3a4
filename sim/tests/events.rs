//! Asynchronous events and the faults that raise them: the port going down mid-transfer
//! (every request completes exactly once, with an error), injected QP and device failures,
//! CQ overrun, and what a subscription sees.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{PairCfg, assert_exactly_once, with_pair};
use zverbs_core::{PostSend, SendWr, WcStatus};
use zverbs_sim::{DeviceEvent, EventSubscription, PortState, QpStatus, SimError, vendor};

/// A subscription and how many times its waker ran.
fn subscribe(dev: &zverbs_sim::Device) -> (EventSubscription, Arc<AtomicUsize>) {
    let woken = Arc::new(AtomicUsize::new(0));
    let w = Arc::clone(&woken);
    let sub = dev.subscribe_events(Box::new(move || {
        w.fetch_add(1, Ordering::Relaxed);
    }));
    (sub, woken)
}

fn drain(sub: &EventSubscription) -> Vec<DeviceEvent> {
    std::iter::from_fn(|| sub.try_next()).collect()
}

#[test]
fn port_down_mid_transfer_completes_every_request_once_with_an_error() {
    with_pair(PairCfg::default(), |p| {
        let (sub, woken) = subscribe(p.dev);
        // Two WRITEs go through with the port up.
        for i in 0..2 {
            // SAFETY: the entries lie in the registered arenas.
            unsafe {
                p.a.sq
                    .post(&SendWr::write(i, &[p.a.sge(0, 64)], p.b.remote(0)).signaled())
            }
            .unwrap();
        }
        p.dev.step();
        // The port goes down with requests in flight: some signaled, some not.
        for i in 2..8 {
            let sgl = [p.a.sge(0, 64)];
            let w = SendWr::write(i, &sgl, p.b.remote(0));
            let w = if i % 2 == 0 { w.signaled() } else { w };
            // SAFETY: as above.
            unsafe { p.a.sq.post(&w) }.unwrap();
        }
        p.dev.set_port_state(1, PortState::Down).unwrap();
        assert_eq!(p.dev.port_state(), PortState::Down);
        let (ca, cb) = p.run();
        assert!(cb.is_empty());
        // One step took request 0, with the port up; every request completes once: 1, the
        // first taken with the port down, with "retry exceeded", the rest flushed, signaled
        // or not.
        assert_exactly_once(&(0..8).collect::<Vec<_>>(), &ca);
        assert_eq!((ca[0].wr_id, ca[0].status), (0, WcStatus::Success));
        assert_eq!((ca[1].wr_id, ca[1].status), (1, WcStatus::RetryExcErr));
        assert_eq!(ca[1].vendor_err, u32::from(vendor::PORT_DOWN));
        for c in &ca[2..] {
            assert_eq!(c.status, WcStatus::WrFlushErr, "{c:?}");
        }
        assert_eq!(p.dev.qp_status(p.a.qpn()).unwrap(), QpStatus::Error);
        assert_eq!(
            drain(&sub),
            [
                DeviceEvent::PortError { port: 1 },
                DeviceEvent::QpFatal { qpn: p.a.qpn() },
            ]
        );
        assert_eq!(woken.load(Ordering::Relaxed), 2);
        // Up again: an event, and the QP stays in error, as on hardware.
        p.dev.set_port_state(1, PortState::Active).unwrap();
        p.dev.set_port_state(1, PortState::Active).unwrap();
        assert_eq!(drain(&sub), [DeviceEvent::PortActive { port: 1 }]);
        assert_eq!(p.dev.qp_status(p.a.qpn()).unwrap(), QpStatus::Error);
        assert!(matches!(
            p.dev.set_port_state(2, PortState::Down),
            Err(SimError::InvalidConfig(_))
        ));
    });
}

#[test]
fn an_idle_qp_is_untouched_until_it_posts_while_the_port_is_down() {
    with_pair(PairCfg::default(), |p| {
        let (sub, _) = subscribe(p.dev);
        p.dev.set_port_state(1, PortState::Down).unwrap();
        p.dev.run_until_idle();
        assert_eq!(p.dev.qp_status(p.b.qpn()).unwrap(), QpStatus::Rts);
        // SAFETY: a NOP touches no memory.
        unsafe { p.b.sq.post(&SendWr::nop(9)) }.unwrap();
        let (_, cb) = p.run();
        assert_eq!(cb.len(), 1);
        assert_eq!((cb[0].wr_id, cb[0].status), (9, WcStatus::RetryExcErr));
        assert_eq!(
            drain(&sub),
            [
                DeviceEvent::PortError { port: 1 },
                DeviceEvent::QpFatal { qpn: p.b.qpn() }
            ]
        );
    });
}

#[test]
fn injected_qp_events_move_the_qp_to_error_and_reach_every_subscriber() {
    with_pair(PairCfg::default(), |p| {
        let (one, _) = subscribe(p.dev);
        let (two, _) = subscribe(p.dev);
        let gone = subscribe(p.dev).0;
        drop(gone);
        p.dev.inject_qp_fatal(p.a.qpn()).unwrap();
        p.dev
            .inject_qp_event(DeviceEvent::QpAccessError { qpn: p.b.qpn() })
            .unwrap();
        p.dev
            .inject_qp_event(DeviceEvent::QpLastWqeReached { qpn: p.b.qpn() })
            .unwrap();
        assert!(matches!(
            p.dev.inject_qp_event(DeviceEvent::DeviceFatal),
            Err(SimError::InvalidConfig(_))
        ));
        assert_eq!(
            p.dev.inject_qp_fatal(0xabcdef),
            Err(SimError::NoSuchQp(0xabcdef))
        );
        let want = [
            DeviceEvent::QpFatal { qpn: p.a.qpn() },
            DeviceEvent::QpAccessError { qpn: p.b.qpn() },
            DeviceEvent::QpLastWqeReached { qpn: p.b.qpn() },
        ];
        assert_eq!(drain(&one), want);
        assert_eq!(drain(&two), want);
        assert_eq!(p.dev.qp_status(p.a.qpn()).unwrap(), QpStatus::Error);
        // A request posted now is flushed.
        // SAFETY: a NOP touches no memory.
        unsafe { p.a.sq.post(&SendWr::nop(5)) }.unwrap();
        let (ca, _) = p.run();
        assert_eq!((ca[0].wr_id, ca[0].status), (5, WcStatus::WrFlushErr));
    });
}

#[test]
fn device_fatal_fails_every_qp() {
    with_pair(PairCfg::default(), |p| {
        let (sub, _) = subscribe(p.dev);
        p.dev.inject_device_fatal();
        assert_eq!(drain(&sub), [DeviceEvent::DeviceFatal]);
        for q in [p.a.qpn(), p.b.qpn()] {
            assert_eq!(p.dev.qp_status(q).unwrap(), QpStatus::Error);
        }
    });
}

#[test]
fn a_cq_overrun_raises_one_cq_error() {
    let mem_a = common::Arena::new(4096);
    let mem_b = common::Arena::new(4096);
    let dev = zverbs_sim::Device::new();
    let (sub, _) = subscribe(&dev);
    let cfg = PairCfg {
        cqe: 3, // 4 CQEs
        max_signaled: Some(64),
        ..PairCfg::default()
    };
    common::with_pair_on(&dev, &mem_a, &mem_b, cfg, |p| {
        for i in 0..4 {
            // SAFETY: a NOP touches no memory.
            unsafe { p.a.sq.post(&SendWr::nop(i).signaled()) }.unwrap();
        }
        p.dev.run_until_idle();
        assert!(drain(&sub).is_empty(), "a full CQ is no overrun");
        for i in 4..7 {
            // SAFETY: a NOP touches no memory.
            unsafe { p.a.sq.post(&SendWr::nop(i).signaled()) }.unwrap();
        }
        p.dev.run_until_idle();
        assert_eq!(p.dev.cq_overruns(), 3);
        assert_eq!(drain(&sub), [DeviceEvent::CqError { cqn: p.a.cq.cqn }]);
    });
}
