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
use zverbs_core::{Completion, PollCq, Sge};

const BLOCKS: u32 = 4096;

fn post(c: &mut Criterion) {
    let mut g = c.benchmark_group("post_ring");
    for (name, bf) in [("write_1sge_blueflame", 256), ("write_1sge_doorbell", 0)] {
        let mut qp = MemQp::new(BLOCKS, 64, bf);
        let sgl = [Sge::new(0x10_0000, 64, 0x1100)];
        let wr = write_1sge(&sgl);
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                let mut left = iters;
                while left > 0 {
                    let n = left.min(u64::from(qp.sq.free_blocks()));
                    let t = Instant::now();
                    for _ in 0..n {
                        // SAFETY: the fixture has no device; nothing reads the memory.
                        unsafe { post_ring(&mut qp.sq, black_box(&wr)) };
                    }
                    total += t.elapsed();
                    left -= n;
                    let last = qp.sq.producer().wrapping_sub(1) as u16;
                    qp.complete_all(last);
                }
                total
            })
        });
    }
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
