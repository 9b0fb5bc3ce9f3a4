//! The software device's progress thread lives as long as a context is open on it, and a
//! context can step the device by hand instead. One test: the device is one per process, so
//! the steps below must not interleave with another test's.
#![cfg(feature = "sim")]

use zverbs::backend::Queues;
use zverbs::connect::Endpoint;
use zverbs::sim::Idle;
use zverbs::{
    AccessFlags, Completion, ConnectAttr, ContextOptions, PollCq, Registered, SendFlags, WcStatus,
};

/// Threads of this process (the test's own threads, and the device's progress thread while
/// it runs; the test starts no other).
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

/// `threads()` once it shows `n`, or after two seconds whatever it shows: a thread that has
/// been joined can still be listed for a moment (the kernel wakes the joiner as the thread
/// exits, before it removes the thread's entry), and a thread just started shows at once.
fn settled(n: usize, threads: impl Fn() -> usize) -> usize {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    loop {
        let now = threads();
        if now == n || std::time::Instant::now() >= deadline {
            return now;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

fn open() -> zverbs::Context {
    zverbs::open_device(Some(zverbs::SOFTWARE_DEVICE), &ContextOptions::default()).unwrap()
}

#[test]
fn the_progress_thread_runs_while_a_context_is_open_and_stepping_replaces_it() {
    let base = threads();
    let progress_threads = || threads() - base;
    let first = open();
    assert_eq!(progress_threads(), 1);
    let second = open();
    assert!(second.sim().unwrap().progress_running());
    drop(first);
    assert_eq!(progress_threads(), 1, "one context is still open");
    drop(second);
    assert_eq!(
        settled(0, progress_threads),
        0,
        "gone with the last context"
    );

    // Stepped by hand: no thread, and nothing happens until a step.
    let ctx = open();
    let sim = ctx.sim().expect("the software device");
    sim.set_idle(Idle::Yield);
    sim.set_stepped(true);
    assert!(sim.is_stepped() && !sim.progress_running());
    assert_eq!(settled(0, progress_threads), 0);
    let port = ctx.active_port().unwrap();
    let local = ctx.address(port, None).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let buf = pd.alloc_buf(4096, AccessFlags::ALL).unwrap();
    let send_cq = ctx.cq_builder().cqe(16).build().unwrap();
    let qp = pd.qp_builder(&send_cq, &send_cq).build().unwrap();
    let me = Endpoint {
        lid: local.lid,
        qpn: qp.qpn(),
        psn: 0xff_ffff,
        gid: local.gid,
    };
    qp.connect_with(&ConnectAttr::new(port, me.psn, &me, local.gid_index))
        .unwrap();
    let Queues::Direct(q) = Queues::take(&qp, &send_cq).unwrap() else {
        panic!("the software device has only the direct backend");
    };
    let mut sq = zverbs::SendQueue::from(q.sq);
    let (rq, mut cq) = (q.rq, q.cq);
    let mut wc = [Completion::EMPTY; 4];
    buf.write(0, b"stepped").unwrap();
    sq.write(
        1,
        buf.slice(0..7).unwrap(),
        buf.remote(100).unwrap(),
        SendFlags::SIGNALED,
    )
    .unwrap();
    assert_eq!(cq.poll(&mut wc), 0, "nothing moves without a step");
    assert_eq!(sim.step(), 1, "one WQE taken");
    assert_eq!(cq.poll(&mut wc), 1);
    assert_eq!(wc[0].status, WcStatus::Success);
    let mut got = [0u8; 7];
    buf.read(100, &mut got).unwrap();
    assert_eq!(&got, b"stepped");

    // A fault on demand: the acknowledgement of the next request is lost, the request is
    // sent again and not carried out again.
    let before = sim.stats();
    sim.lose_next_ack(qp.qpn()).unwrap();
    sq.write(
        2,
        buf.slice(0..7).unwrap(),
        buf.remote(200).unwrap(),
        SendFlags::SIGNALED,
    )
    .unwrap();
    assert_eq!(sim.run_until_idle(), 2, "sent, then sent again");
    assert_eq!(cq.poll(&mut wc), 1);
    assert_eq!((wc[0].wr_id, wc[0].status), (2, WcStatus::Success));
    let after = sim.stats();
    assert_eq!(after.retries - before.retries, 1);
    assert_eq!(after.duplicates - before.duplicates, 1);

    sim.set_stepped(false);
    assert_eq!(progress_threads(), 1, "running again");
    // Every object made from the context keeps it open; the last one closes it.
    drop((sq, rq, cq, qp, send_cq, buf, pd));
    assert_eq!(progress_threads(), 1);
    drop(ctx);
    assert_eq!(settled(0, progress_threads), 0);
}
