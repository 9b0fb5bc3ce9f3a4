//! Completion timestamps through the zverbs API on the software device: a CQ created with
//! them reports the device clock, one without reports none, and the context's clock converts
//! them.
#![cfg(feature = "sim")]

use std::time::{Duration, Instant};

use zverbs::backend::Queues;
use zverbs::{
    AccessFlags, ContextOptions, PollCqTimed, PostSend, Registered, SendWr, TimedCompletion,
};

/// Posts `n` signaled WRITEs from a QP whose CQ was built with `timestamps`, and returns what
/// `poll_timed` reported for them, with the clock.
fn timed_writes(
    timestamps: bool,
    n: u64,
) -> zverbs::Result<(Vec<TimedCompletion>, zverbs::DeviceClock)> {
    let ctx = zverbs::open_device(Some(zverbs::SOFTWARE_DEVICE), &ContextOptions::default())?;
    let clock = ctx.clock()?;
    let pd = ctx.alloc_pd()?;
    let cq_a = ctx.cq_builder().timestamps(timestamps).build()?;
    assert_eq!(cq_a.has_timestamps(), timestamps);
    let cq_b = ctx.cq_builder().build()?;
    let (a, b) = (
        pd.qp_builder(&cq_a, &cq_a).build()?,
        pd.qp_builder(&cq_b, &cq_b).build()?,
    );
    zverbs::connect_pair(&a, &b)?;
    let buf_a = pd.alloc_buf(4096, AccessFlags::ALL)?;
    let buf_b = pd.alloc_buf(4096, AccessFlags::ALL)?;
    let Queues::Direct(mut q) = Queues::take(&a, &cq_a)? else {
        panic!("the software device is driven directly");
    };
    let mut got = Vec::new();
    for i in 0..n {
        let sgl = [buf_a.sge(0..8)?];
        // SAFETY: registered buffers, untouched by Rust until the completion.
        unsafe {
            q.sq.post(&SendWr::write(i, &sgl, buf_b.remote(0)?).signaled())
        }?;
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut out = [TimedCompletion::EMPTY; 1];
        while q.cq.poll_timed(&mut out) == 0 {
            assert!(Instant::now() < deadline, "no completion");
        }
        got.push(out[0]);
    }
    Ok((got, clock))
}

#[test]
#[cfg_attr(miri, ignore = "the software device's progress thread and clock")]
fn timestamps_are_monotonic_and_from_the_device_clock() {
    let (got, clock) = timed_writes(true, 50).unwrap();
    let mut last = 0;
    for (i, c) in got.iter().enumerate() {
        assert_eq!(c.wr_id, i as u64);
        let ts = c.hw_timestamp().expect("a CQ with timestamps");
        assert!(ts >= last, "timestamp {i} went back");
        assert!(ts <= clock.mask());
        last = ts;
    }
    // The snapshot was taken before the first post: every timestamp converts to a time at or
    // after it, and the distance agrees with the frequency's.
    let info = clock.info();
    let first = got[0].hw_timestamp().unwrap();
    assert!(clock.to_wall_ns(first) >= info.nsec);
    let d = clock.elapsed_ns(first, last);
    assert_eq!(d, clock.ticks_to_ns(last - first));
    assert!(clock.to_wall_ns(last) >= clock.to_wall_ns(first));
}

#[test]
#[cfg_attr(miri, ignore = "the software device's progress thread")]
fn a_cq_without_timestamps_reports_none() {
    let (got, _) = timed_writes(false, 3).unwrap();
    assert!(got.iter().all(|c| c.hw_timestamp().is_none()));
    assert_eq!(got.iter().map(|c| c.wr_id).collect::<Vec<_>>(), [0, 1, 2]);
}

#[test]
#[cfg_attr(miri, ignore = "the software device's clock")]
fn the_clock_refreshes_and_converts_across_the_wrap() {
    let ctx =
        zverbs::open_device(Some(zverbs::SOFTWARE_DEVICE), &ContextOptions::default()).unwrap();
    let mut clock = ctx.clock().unwrap();
    assert_eq!((clock.khz(), clock.mask()), (156_250, (1 << 41) - 1));
    assert!(
        clock.max_age_ns() > 3_600_000_000_000,
        "good for over an hour"
    );
    let before = clock.info();
    clock.refresh().unwrap();
    assert!(clock.info().last_cycles >= before.last_cycles);
    // 5 ticks are 32 ns, whether or not the counter wrapped between them.
    assert_eq!(clock.elapsed_ns(100, 105), 32);
    assert_eq!(clock.elapsed_ns(clock.mask() - 1, 3), 32);
}
