//! Recording a latency never allocates: the timed loops of `zverbs-perf` and `pingpong` record
//! between two clock reads, so an allocation there would be measured. A counting allocator
//! watches every value a run can record, from 0 to `u64::MAX`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

use zverbs_tools::latency::Recorder;

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// Set on the thread under watch: the test harness's own threads allocate as they like.
    static WATCHED: Cell<bool> = const { Cell::new(false) };
}

fn count() {
    if WATCHED.with(Cell::get) {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: every call is passed on to the system allocator unchanged; only a count is kept.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: the caller's contract for `alloc` is the system allocator's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `alloc` above, that is, from the system allocator.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: as for `dealloc`, and the caller's contract for `realloc`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn recording_never_allocates_whatever_the_value() {
    let mut r = Recorder::new();
    let values: Vec<u64> = (0..64)
        .map(|shift| 1u64 << shift)
        .chain([0, 999, Recorder::HIGHEST, Recorder::HIGHEST + 1, u64::MAX])
        .collect();
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    WATCHED.with(|w| w.set(true));
    for _ in 0..1000 {
        for &v in &values {
            r.record(v);
        }
    }
    WATCHED.with(|w| w.set(false));
    let after = ALLOCATIONS.load(Ordering::Relaxed);
    assert_eq!(after - before, 0, "allocations while recording");
    assert_eq!(r.len(), 1000 * values.len() as u64);
}
