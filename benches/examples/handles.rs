//! What the handles chosen at run time cost: the same signaled RDMA WRITE posted, and the same
//! CQ polled, through the direct backend's own types (`backend::Queues::Direct`,
//! monomorphised), through the front door's `unsafe` post and `PollCq` (`SendQueue`, `Poller`:
//! `post_any`, `poll_any`), and through its safe operations (`SendQueue::write`,
//! `Poller::ready`: `post_safe`, `poll_safe`), on the software device. Each way is one
//! function kept out of line, so callgrind can count its instructions:
//!
//! ```text
//! cargo build --release -p zverbs-benches --example handles
//! for f in post_direct post_any post_safe poll_direct poll_any poll_safe; do
//!   valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!     --toggle-collect="handles::$f" target/release/examples/handles 2000 2>&1 | grep Collected
//! done
//! ```
//!
//! Each counted call posts one request or polls one completion that is known to be there (the
//! program waits for the write to land, outside the counted functions, then polls once).
//! `Collected` divided by the number of calls (the argument) is the count per call.

use std::hint::black_box;
use std::time::{Duration, Instant};

use zverbs::backend::Queues;
use zverbs::backend::mlx5 as direct;
use zverbs::connect::Endpoint;
use zverbs::{
    AccessFlags, Completion, ConnectAttr, ContextOptions, MrBuf, PollCq, Poller, PostSend, Qp,
    Registered, RemoteBuf, SendFlags, SendQueue, SendWr, Sge,
};

#[inline(never)]
fn post_direct(sq: &mut direct::SendQueue, sge: Sge, remote: RemoteBuf, wr_id: u64) -> bool {
    let sgl = [sge];
    // SAFETY: `sge` lies in a registered buffer that outlives the request; Rust only copies
    // in and out of it.
    unsafe { sq.post(&SendWr::write(wr_id, &sgl, remote).signaled()) }.is_ok()
}

#[inline(never)]
fn post_any(sq: &mut SendQueue, sge: Sge, remote: RemoteBuf, wr_id: u64) -> bool {
    let sgl = [sge];
    // SAFETY: as in `post_direct`.
    unsafe { sq.post(&SendWr::write(wr_id, &sgl, remote).signaled()) }.is_ok()
}

#[inline(never)]
fn post_safe(sq: &mut SendQueue, buf: &MrBuf, remote: RemoteBuf, wr_id: u64) -> bool {
    sq.write(
        wr_id,
        buf.slice(0..64).unwrap(),
        remote,
        SendFlags::SIGNALED,
    )
    .is_ok()
}

#[inline(never)]
fn poll_direct(cq: &mut direct::Poller, out: &mut [Completion; 1]) -> usize {
    cq.poll(out)
}

#[inline(never)]
fn poll_any(cq: &mut Poller, out: &mut [Completion; 1]) -> usize {
    cq.poll(out)
}

#[inline(never)]
fn poll_safe(cq: &mut Poller) -> usize {
    cq.ready().len()
}

/// Waits (uncounted) until the 8-byte sequence number `seq` has landed at the start of `buf`,
/// then a little longer for its completion to be written after it.
fn landed(buf: &MrBuf, seq: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while buf.load_u64_acquire(0).unwrap() != seq {
        assert!(Instant::now() < deadline, "the write did not land");
        std::thread::yield_now();
    }
    std::thread::sleep(Duration::from_micros(200));
}

fn main() -> zverbs::Result<()> {
    let calls: u64 = std::env::args()
        .nth(1)
        .map_or(2000, |n| n.parse().expect("a number of calls"));
    let ctx = zverbs::open_device(Some("zverbs_sim0"), &ContextOptions::default())?;
    let port = ctx.active_port()?;
    let local = ctx.address(port, None)?;
    let pd = ctx.alloc_pd()?;
    let src = pd.alloc_buf(4096, AccessFlags::ALL)?;
    let dst = pd.alloc_buf(4096, AccessFlags::ALL)?;
    // Three loopback QPs (each connected to itself), one CQ each: one per way of driving it.
    let qp = || -> zverbs::Result<(Qp, zverbs::Cq)> {
        let cq = ctx.cq_builder().cqe(64).build()?;
        let qp = pd.qp_builder(&cq, &cq).max_send_wr(64).build()?;
        let me = Endpoint {
            lid: local.lid,
            qpn: qp.qpn(),
            psn: 0,
            gid: local.gid,
        };
        qp.connect_with(&ConnectAttr::new(port, 0, &me, local.gid_index))?;
        Ok((qp, cq))
    };
    let (qp1, cq1) = qp()?;
    let (qp2, cq2) = qp()?;
    let (qp3, cq3) = qp()?;
    let Queues::Direct(mut d) = Queues::take(&qp1, &cq1)? else {
        panic!("the software device is driven directly");
    };
    let mut any_sq = qp2.send_queue()?;
    let mut any_cq = cq2.poller()?;
    let mut safe = qp3.queues(&cq3)?;

    let sge = src.sge(0..64)?;
    let remote = dst.remote(0)?;
    let mut out = [Completion::EMPTY; 1];
    let mut missed = 0;
    let mut seq = 0;
    for i in 0..calls {
        // Each way in turn: post (counted), wait for the write to land (not counted), poll the
        // one completion (counted).
        for way in 0..3 {
            seq += 1;
            src.store_u64(0, seq)?;
            let posted = match way {
                0 => post_direct(&mut d.sq, sge, remote, black_box(i)),
                1 => post_any(&mut any_sq, sge, remote, black_box(i)),
                _ => post_safe(&mut safe.sq, &src, remote, black_box(i)),
            };
            assert!(posted, "the post was refused");
            landed(&dst, seq);
            let got = match way {
                0 => poll_direct(&mut d.cq, &mut out),
                1 => poll_any(&mut any_cq, &mut out),
                _ => poll_safe(&mut safe.cq),
            };
            if got != 1 {
                missed += 1;
                let end = Instant::now() + Duration::from_secs(10);
                match way {
                    0 => while d.cq.poll(&mut out) == 0 && Instant::now() < end {},
                    1 => while any_cq.poll(&mut out) == 0 && Instant::now() < end {},
                    _ => {
                        safe.cq.wait(1, end)?;
                    }
                }
            }
        }
    }
    println!("{calls} calls of each; {missed} polls found no completion yet (then retried)");
    Ok(())
}
