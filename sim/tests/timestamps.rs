//! Completion timestamps: the device clock stamps the CQEs of a CQ created with them, and the
//! direct poller reports them.

mod common;

use common::{PairCfg, with_pair};
use zverbs_core::{PollCqTimed, PostSend, SendWr, TimedCompletion};
use zverbs_mlx5dv::clock::{ClockInfo, TickRate};
use zverbs_sim::clock::{CLOCK_KHZ, CLOCK_MASK};

#[test]
fn completions_carry_monotonic_timestamps_from_the_device_clock() {
    with_pair(PairCfg::default(), |p| {
        p.dev.enable_cq_timestamps(p.a.cq.cqn).unwrap();
        p.a.cqp.set_timestamps(true);
        let clock = p.dev.clock();
        let sgl = [p.a.sge(0, 8)];
        let mut last = 0;
        for i in 0..20u64 {
            let before = clock.ticks();
            // SAFETY: the entry lies in the registered arena.
            unsafe {
                p.a.sq
                    .post(&SendWr::write(i, &sgl, p.b.remote(64)).signaled())
            }
            .unwrap();
            p.dev.run_until_idle();
            let mut out = [TimedCompletion::EMPTY; 2];
            assert_eq!(p.a.cqp.poll_timed(&mut out), 1);
            let after = clock.ticks();
            let ts = out[0].hw_timestamp().expect("a CQ with timestamps");
            assert_eq!(out[0].wr_id, i);
            // Written between the post and the poll, by the clock the device reports; never
            // before the previous one.
            assert!(before <= ts && ts <= after, "{before} <= {ts} <= {after}");
            assert!(ts >= last);
            assert!(ts <= CLOCK_MASK);
            last = ts;
        }
    });
}

#[test]
fn a_cq_without_timestamps_reports_none_and_its_cqes_are_unstamped() {
    with_pair(PairCfg::default(), |p| {
        // The poller asked for timestamps, the CQ was not created with them: the field the
        // device leaves 0. And the poller of a CQ created with them but not told reports None.
        p.a.cqp.set_timestamps(true);
        let sgl = [p.a.sge(0, 8)];
        // SAFETY: as above.
        unsafe {
            p.a.sq
                .post(&SendWr::write(1, &sgl, p.b.remote(64)).signaled())
        }
        .unwrap();
        p.dev.enable_cq_timestamps(p.b.cq.cqn).unwrap();
        // SAFETY: as above.
        unsafe {
            p.b.sq
                .post(&SendWr::write(2, &[p.b.sge(0, 8)], p.a.remote(64)).signaled())
        }
        .unwrap();
        p.dev.run_until_idle();
        let mut out = [TimedCompletion::EMPTY; 1];
        assert_eq!(p.a.cqp.poll_timed(&mut out), 1);
        assert_eq!(out[0].hw_timestamp(), Some(0), "no timestamp written");
        assert_eq!(p.b.cqp.poll_timed(&mut out), 1);
        assert_eq!((out[0].wr_id, out[0].hw_timestamp()), (2, None));
        assert_ne!(&p.b.last_cqe(1)[48..56], &[0; 8], "the device stamped it");
    });
}

#[test]
fn the_clock_info_page_converts_timestamps_to_wall_clock_time() {
    with_pair(PairCfg::default(), |p| {
        p.dev.enable_cq_timestamps(p.a.cq.cqn).unwrap();
        p.a.cqp.set_timestamps(true);
        let page = p.dev.clock().clock_info();
        let info = ClockInfo::from_page(&page);
        let sgl = [p.a.sge(0, 8)];
        // SAFETY: as above.
        unsafe {
            p.a.sq
                .post(&SendWr::write(1, &sgl, p.b.remote(64)).signaled())
        }
        .unwrap();
        p.dev.run_until_idle();
        let mut out = [TimedCompletion::EMPTY; 1];
        assert_eq!(p.a.cqp.poll_timed(&mut out), 1);
        let ts = out[0].hw_timestamp().unwrap();
        // After the snapshot, so its wall-clock time is not before the page's, and the two
        // conversions agree on the distance (to the ns per tick of rounding).
        assert!(ts >= info.last_cycles);
        let wall = info.ts_to_ns(ts);
        assert!(wall >= info.nsec);
        let rate = TickRate::from_khz(CLOCK_KHZ).unwrap();
        let d = rate.ticks_to_ns(ts - info.last_cycles);
        assert!(
            (wall - info.nsec).abs_diff(d) <= 1 + d / 1_000_000,
            "{wall} {d}"
        );
    });
}

#[test]
fn an_error_cqe_keeps_its_syndromes() {
    // The bytes a timestamp would take hold an error CQE's vendor syndrome and syndrome: the
    // device leaves them, and the poller reports no timestamp.
    with_pair(PairCfg::default(), |p| {
        p.dev.enable_cq_timestamps(p.a.cq.cqn).unwrap();
        p.a.cqp.set_timestamps(true);
        let sgl = [p.a.sge(0, 8)];
        let bad = zverbs_core::RemoteBuf::new(p.b.mem.addr(64), p.b.mr.rkey ^ 0x100);
        // SAFETY: the entry lies in the registered arena.
        unsafe { p.a.sq.post(&SendWr::write(9, &sgl, bad).signaled()) }.unwrap();
        p.dev.run_until_idle();
        let mut out = [TimedCompletion::EMPTY; 1];
        assert_eq!(p.a.cqp.poll_timed(&mut out), 1);
        assert_eq!(
            (out[0].wr_id, out[0].status, out[0].hw_timestamp()),
            (9, zverbs_core::WcStatus::RemAccessErr, None)
        );
        assert_eq!(p.a.last_cqe(1)[55], 0x13, "the remote access syndrome");
    });
}
