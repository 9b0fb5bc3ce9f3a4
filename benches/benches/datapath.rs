//! The direct path's CPU cost over ordinary memory: post+ring of one RDMA WRITE, and poll of
//! one CQE.
//!
//! `cargo bench -p zverbs-benches --bench datapath`. Each measurement times whole runs of
//! back-to-back operations (as many as the ring holds) and leaves the bookkeeping between runs
//! (handing credits back, refilling CQEs) out of the time.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use zverbs_benches::{MemQp, post_ring, write_1sge};
use zverbs_core::{Completion, PollCq, RemoteBuf, SendWr, Sge};

const BLOCKS: u32 = 4096;

/// Times `op` run back to back as long as the send queue has room, handing credits back
/// (untimed) whenever it fills.
fn timed_posts(qp: &mut MemQp, iters: u64, mut op: impl FnMut(&mut MemQp)) -> Duration {
    let mut total = Duration::ZERO;
    let mut left = iters;
    while left > 0 {
        let n = left.min(u64::from(qp.sq.free_blocks()));
        let t = Instant::now();
        for _ in 0..n {
            op(qp);
        }
        total += t.elapsed();
        left -= n;
        let last = qp.sq.producer().wrapping_sub(1) as u16;
        qp.complete_all(last);
    }
    total
}

fn post(c: &mut Criterion) {
    let mut g = c.benchmark_group("post_ring");
    for (name, bf) in [("write_1sge_blueflame", 256), ("write_1sge_doorbell", 0)] {
        let mut qp = MemQp::new(BLOCKS, 64, bf);
        // The operation is known where the request is built, as in an application; its
        // operands come from run time.
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                timed_posts(&mut qp, iters, |qp| {
                    let sgl = [Sge::new(
                        black_box(0x10_0000),
                        black_box(64),
                        black_box(0x1100),
                    )];
                    let wr = SendWr::write(
                        black_box(7),
                        &sgl,
                        RemoteBuf::new(black_box(0x7f00_0000_1000), black_box(0xdead_beef)),
                    );
                    // SAFETY: the fixture has no device; nothing reads the memory.
                    unsafe { post_ring(&mut qp.sq, &wr) };
                })
            })
        });
    }
    // A request whose operation the compiler cannot see: the generic post path.
    let mut qp = MemQp::new(BLOCKS, 64, 256);
    let sgl = [Sge::new(0x10_0000, 64, 0x1100)];
    let wr = write_1sge(&sgl);
    g.bench_function("write_1sge_opaque_request", |b| {
        b.iter_custom(|iters| {
            timed_posts(&mut qp, iters, |qp| {
                // SAFETY: the fixture has no device; nothing reads the memory.
                unsafe { post_ring(&mut qp.sq, black_box(&wr)) };
            })
        })
    });
    g.finish();
}

fn poll(c: &mut Criterion) {
    let mut g = c.benchmark_group("poll");
    let cqes = 4096u32;
    let mut qp = MemQp::new(8, cqes, 256);
    g.bench_function("one_cqe", |b| {
        let mut wc = [Completion::EMPTY; 1];
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                let n = left.min(u64::from(cqes));
                qp.write_cqes(n as u32, |i| (i % 8) as u16);
                let t = Instant::now();
                for _ in 0..n {
                    black_box(qp.cq.poll(black_box(&mut wc)));
                }
                total += t.elapsed();
                left -= n;
            }
            total
        })
    });
    g.finish();
}

criterion_group!(benches, post, poll);
criterion_main!(benches);
