//! Zero allocation on the data path: a counting global allocator around a million post + poll
//! round trips through the direct backend on the stepped device (posting, the doorbell, the
//! device's execution and CQE write, polling and credit return), after set-up.
//!
//! `ZVERBS_SIM_ALLOC_ITERS` overrides the count (at least 1 000 000 unless set).

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

use common::{PairCfg, env_u64, with_pair};
use zverbs_core::{Completion, PollCq, PostRecv, PostSend, RecvWr, SendWr};

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);
static FREES: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Count only what the measuring thread does while measuring.
    static MEASURING: Cell<bool> = const { Cell::new(false) };
}

fn measuring() -> bool {
    MEASURING.try_with(Cell::get).unwrap_or(false)
}

// SAFETY: every call is forwarded to the system allocator unchanged; the counters are atomics.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if measuring() {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if measuring() {
            FREES.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: forwarded; `ptr` came from `alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if measuring() {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
            FREES.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: forwarded.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn a_million_round_trips_allocate_nothing() {
    let iters = env_u64("ZVERBS_SIM_ALLOC_ITERS", 1_000_000);
    with_pair(PairCfg::default(), |p| {
        let write_sgl = [p.a.sge(0, 8)];
        let send_sgl = [p.a.sge(64, 16)];
        let recv_sgl = [p.b.sge(0, 64)];
        let remote = p.b.remote(128);
        let mut wc = [Completion::EMPTY; 4];
        let mut polled = 0u64;
        MEASURING.with(|m| m.set(true));
        for i in 0..iters {
            // Alternate a signaled 1-SGE WRITE and a SEND/RECV pair.
            // SAFETY: entries in the registered arenas, not touched by this loop.
            unsafe {
                if i % 2 == 0 {
                    p.a.sq
                        .post(&SendWr::write(i, &write_sgl, remote).signaled())
                        .unwrap();
                } else {
                    p.b.rq.post(&RecvWr::new(i, &recv_sgl)).unwrap();
                    p.a.sq.post(&SendWr::send(i, &send_sgl).signaled()).unwrap();
                }
            }
            p.dev.step();
            let n = p.a.cqp.poll(&mut wc);
            assert!(n == 1 && wc[0].wr_id == i && wc[0].is_success());
            if i % 2 == 1 {
                let n = p.b.cqp.poll(&mut wc);
                assert!(n == 1 && wc[0].wr_id == i && wc[0].byte_len == 16);
            }
            polled += 1;
        }
        MEASURING.with(|m| m.set(false));
        let (allocs, frees) = (
            ALLOCS.load(Ordering::Relaxed),
            FREES.load(Ordering::Relaxed),
        );
        println!(
            "{polled} post+poll round trips: {allocs} allocations, {frees} frees during the loop"
        );
        assert_eq!(polled, iters);
        assert_eq!((allocs, frees), (0, 0));
    });
}
