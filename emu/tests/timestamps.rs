//! Completion timestamps on the emulated ConnectX, through zverbs over the unmodified
//! libibverbs and libmlx5: the device reports its clock (`hca_core_clock`,
//! `completion_timestamp_mask`), libmlx5 maps the clock-info page (`mlx5dv_get_clock_info`),
//! and the CQEs of a CQ created with timestamps carry the device clock, on the direct path
//! and on the fallback (`ibv_start_poll`, `ibv_wc_read_completion_ts`).
//!
//! Run by the `connectx` stage (`cargo test --release -p zverbs-emu --test timestamps`).

mod common;

use std::time::{Duration, Instant};

use common::in_emulator;
use zverbs::backend::Queues;
use zverbs::{
    AccessFlags, BackendKind, BackendRequest, ContextOptions, PollCqTimed, PostSend, Registered,
    SendWr, TimedCompletion,
};
use zverbs_sim::clock::{CLOCK_KHZ, CLOCK_MASK, CLOCK_MULT, CLOCK_SHIFT};

/// Posts 200 signaled WRITEs between two QPs of the emulated device, on `backend`, and checks
/// the timestamps of their completions against the device's clock.
fn run(backend: BackendRequest) {
    let ctx = zverbs::open_device(Some("mlx5_0"), &ContextOptions::default()).unwrap();
    // The clock as libmlx5 reports it: the device's frequency and mask, and the clock-info page
    // the emulator filled (its mult and shift are the software device's).
    let clock = ctx.clock().unwrap();
    assert_eq!((clock.khz(), clock.mask()), (CLOCK_KHZ, CLOCK_MASK));
    let info = clock.info();
    assert_eq!(
        (info.mult, info.shift),
        (CLOCK_MULT, CLOCK_SHIFT),
        "{info:?}"
    );
    let pd = ctx.alloc_pd().unwrap();
    let build = |ts: bool| {
        ctx.cq_builder()
            .backend(backend)
            .timestamps(ts)
            .build()
            .unwrap()
    };
    let (cq_a, cq_b) = (build(true), build(false));
    let qp = |cq: &zverbs::Cq| pd.qp_builder(cq, cq).backend(backend).build().unwrap();
    let (a, b) = (qp(&cq_a), qp(&cq_b));
    zverbs::connect_pair(&a, &b).unwrap();
    let buf_a = pd.alloc_buf(4096, AccessFlags::ALL).unwrap();
    let buf_b = pd.alloc_buf(4096, AccessFlags::ALL).unwrap();
    let mut queues = Queues::take(&a, &cq_a).unwrap();
    let direct = queues.kind() == BackendKind::Direct;
    assert_eq!(direct, backend == BackendRequest::Direct);
    let mut stamps = Vec::new();
    let started = Instant::now();
    for i in 0..200u64 {
        let sgl = [buf_a.sge(0..8).unwrap()];
        let wr = SendWr::write(i, &sgl, buf_b.remote(0).unwrap()).signaled();
        let mut out = [TimedCompletion::EMPTY; 1];
        let deadline = Instant::now() + Duration::from_secs(30);
        let got = |out: &mut [TimedCompletion; 1], q: &mut Queues| match q {
            Queues::Direct(q) => q.cq.poll_timed(out),
            Queues::DirectUd(q) => q.cq.poll_timed(out),
            Queues::Verbs(q) => q.cq.poll_timed(out),
        };
        match &mut queues {
            // SAFETY: registered buffers, which Rust does not touch while the request runs.
            Queues::Direct(q) => unsafe { q.sq.post(&wr) }.unwrap(),
            // SAFETY: as above.
            Queues::DirectUd(q) => unsafe { q.sq.post(&wr) }.unwrap(),
            // SAFETY: as above.
            Queues::Verbs(q) => unsafe { q.sq.post(&wr) }.unwrap(),
        }
        while got(&mut out, &mut queues) == 0 {
            assert!(Instant::now() < deadline, "no completion for WRITE {i}");
        }
        assert!(out[0].is_success(), "{:?}", out[0]);
        assert_eq!(out[0].wr_id, i);
        stamps.push(out[0].hw_timestamp().expect("a CQ with timestamps"));
    }
    let host_ns = started.elapsed().as_nanos() as u64;
    // Monotonic, after the clock-info snapshot (taken when the context was opened), and no
    // further apart than the host's clock saw them (one tick of rounding allowed): the device
    // clock runs at the rate it reports.
    assert!(stamps.windows(2).all(|w| w[0] <= w[1]), "not monotonic");
    let (first, last) = (stamps[0], stamps[stamps.len() - 1]);
    assert!(first >= info.last_cycles && last <= CLOCK_MASK);
    assert!(
        clock.elapsed_ns(first, last) <= host_ns + 7,
        "{} > {host_ns}",
        clock.elapsed_ns(first, last)
    );
    assert!(clock.to_wall_ns(first) >= info.nsec);
    // The CQ created without timestamps says so.
    assert!(!cq_b.has_timestamps() && cq_a.has_timestamps());
}

#[test]
fn direct_completions_carry_the_device_clock() {
    if in_emulator(
        "direct_completions_carry_the_device_clock",
        &[],
        Duration::from_secs(120),
    ) {
        run(BackendRequest::Direct);
    }
}

#[test]
fn fallback_completions_carry_the_device_clock() {
    if in_emulator(
        "fallback_completions_carry_the_device_clock",
        &[],
        Duration::from_secs(120),
    ) {
        run(BackendRequest::Verbs);
    }
}
