//! The cost of copying into and out of an `MrBuf` (its accessors read and write the buffer with
//! atomic words, so that the device or another thread may touch it at the same time), against
//! a plain `copy_from_slice` between two vectors of the same size.
//!
//! `cargo bench -p zverbs-benches --bench mrbuf`. The buffer comes from the software device
//! (`zverbs_sim0`), so no NIC is needed; its progress thread runs on another core meanwhile.

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput};
use zverbs::{AccessFlags, ContextOptions};

const SIZES: [usize; 2] = [4096, 65536];

fn main() {
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30)
        .configure_from_args();
    let ctx = zverbs::open_device(Some("zverbs_sim0"), &ContextOptions::default())
        .expect("the software device is always there");
    let pd = ctx.alloc_pd().expect("a protection domain");
    let buf = pd
        .alloc_buf(SIZES[1], AccessFlags::ALL)
        .expect("a 64 KiB buffer");
    let mut g = c.benchmark_group("mrbuf");
    for size in SIZES {
        let src = vec![0x5au8; size];
        let mut dst = vec![0u8; size];
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_with_input(BenchmarkId::new("write", size), &size, |b, _| {
            b.iter(|| buf.write(0, black_box(&src)).unwrap())
        });
        g.bench_with_input(BenchmarkId::new("read", size), &size, |b, _| {
            b.iter(|| buf.read(0, black_box(&mut dst)).unwrap())
        });
        g.bench_with_input(BenchmarkId::new("fill", size), &size, |b, _| {
            b.iter(|| buf.fill(0..black_box(size), 0xa5).unwrap())
        });
        g.bench_with_input(BenchmarkId::new("memcpy", size), &size, |b, _| {
            b.iter(|| black_box(&mut dst).copy_from_slice(black_box(&src)))
        });
    }
    g.throughput(Throughput::Elements(1));
    g.bench_function("store_u8", |b| {
        b.iter(|| buf.store_u8(black_box(4095), 7).unwrap())
    });
    g.bench_function("load_u8", |b| {
        b.iter(|| buf.load_u8(black_box(4095)).unwrap())
    });
    g.finish();
    c.final_summary();
}
