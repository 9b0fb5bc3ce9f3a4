//! Who writes a BlueFlame register: one send queue alone, or several in turn.
//!
//! A BlueFlame register is two buffers of `bf.size` bytes at `bf.reg`; each ring writes the
//! buffer the previous ring did not use (the toggle), and a copy into it must reach the device
//! whole. libmlx5 gives a QP a register of its own while it has some (a low-latency bfreg, or
//! the dedicated UAR of a thread domain) and afterwards makes several QPs share one: it then
//! marks the register `need_lock` and every post on any of those QPs takes the register's lock
//! and uses its one toggle. Two threads that copied into a shared register at once would
//! interleave their stores, and the device would execute a WQE made of both (a *torn* write).
//!
//! Which case a [`SendQueue`](crate::SendQueue) is in is decided when it is built, at run
//! time, as rdma-core's `need_lock` and UCX's doorbell mode decide it ([`BfMode`]):
//!
//! - [`BfMode::Dedicated`]: the register is this queue's alone. The toggle is a field of the
//!   queue's doorbell, and ringing takes nothing: no atomic.
//! - [`BfMode::Shared`]: the register is shared, and every queue that writes it was built
//!   with the same [`SharedBf`]: a spin lock held around the copy and its flush, and the
//!   toggle. Only these queues pay for it (one uncontended compare-and-swap and one store per
//!   ring), and their posts take the out-of-line path, where the lock is taken.
//! - [`BfMode::DoorbellOnly`]: the register has no BlueFlame buffers (`bf.size == 0`): every
//!   ring is the 8-byte doorbell, which no other writer can tear.
//!
//! The lock is held for one BlueFlame copy (at most `bf.size` bytes in 64-bit stores) and a
//! write-combining flush, and never across anything that can block or fail.

use zverbs_core::sync::atomic::{AtomicBool, Ordering};
use zverbs_core::sync::cell::UnsafeCell;
use zverbs_core::sync::hint::spin_loop;
use zverbs_core::sync::order;

/// A BlueFlame register shared by several send queues: the lock each takes around its
/// doorbell write, and the buffer toggle they share (libmlx5's `struct mlx5_bf` `lock` and
/// `offset` of a `need_lock` register).
///
/// One per register, created by whoever creates the queues (the control path) and handed to
/// each of them when it is built ([`SendQueue::new`](crate::SendQueue::new)'s `shared`),
/// which keeps its address: it must outlive them (a `static`, or an `Arc` held beside the
/// queues). `Sync`: the lock orders every access to the toggle.
#[derive(Debug)]
#[repr(align(128))]
pub struct SharedBf {
    /// Held by the queue whose doorbell write is in progress.
    locked: AtomicBool,
    /// Byte offset of the buffer the next holder writes: 0 or `bf_size`. Read and written only
    /// by the holder.
    offset: UnsafeCell<u32>,
    /// The buffer size of every queue that may share the register.
    bf_size: u32,
}

// SAFETY: `offset` is accessed only by the holder of `locked`, whose Acquire (taking) and
// Release (giving back) order each holder's accesses after the previous holder's.
unsafe impl Sync for SharedBf {}
// SAFETY: plain data; moving it moves no access rights.
unsafe impl Send for SharedBf {}

impl SharedBf {
    /// The shared state of a register whose BlueFlame buffers are `bf_size` bytes each
    /// (`mlx5dv_qp.bf.size`); the first holder writes the first buffer.
    pub fn new(bf_size: u32) -> Self {
        Self {
            locked: AtomicBool::new(false),
            offset: UnsafeCell::new(0),
            bf_size,
        }
    }

    /// The buffer size the queues sharing this register must report.
    #[inline]
    pub fn bf_size(&self) -> u32 {
        self.bf_size
    }

    /// Whether a queue holds the register now.
    #[cfg(all(test, not(zverbs_loom)))]
    pub(crate) fn is_locked(&self) -> bool {
        self.locked.load(Ordering::Relaxed)
    }

    /// Takes the lock (test and test-and-set: waiting threads spin on a load, not on the
    /// cache line's ownership), then reads the buffer offset and flips it for the next holder.
    #[inline(always)]
    pub(crate) fn acquire(&self) -> u32 {
        while self
            .locked
            .compare_exchange_weak(false, true, order::BF_LOCK_ACQUIRE, Ordering::Relaxed)
            .is_err()
        {
            while self.locked.load(Ordering::Relaxed) {
                spin_loop();
            }
        }
        // SAFETY: the lock is held (above): no other access to `offset` until it is released.
        self.offset.with_mut(|p| unsafe {
            let offset = *p;
            *p = offset ^ self.bf_size;
            offset
        })
    }

    /// Gives the lock back: what the holder did (its MMIO stores, flushed; the toggle) happens
    /// before whatever the next holder does.
    #[inline(always)]
    pub(crate) fn release(&self) {
        self.locked.store(false, order::BF_LOCK_RELEASE);
    }
}

/// How a send queue holds its BlueFlame register: decided when the queue is built, from its
/// layout and whether it was given a [`SharedBf`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum BfMode {
    /// No BlueFlame buffers (`bf.size == 0`): the 8-byte doorbell alone.
    DoorbellOnly = 0,
    /// BlueFlame buffers of the queue's own: its rings take no lock.
    Dedicated = 1,
    /// A register other queues write too: each ring takes the [`SharedBf`]'s lock.
    Shared = 2,
}

#[cfg(all(test, not(zverbs_loom)))]
mod tests {
    extern crate std;

    use std::sync::Arc;
    use std::vec::Vec;

    use super::*;

    #[test]
    fn shared_queues_share_one_toggle() {
        let bf = SharedBf::new(256);
        let (a, b) = (&bf, &bf);
        let mut seen = Vec::new();
        for first in [true, false, false, true] {
            let q = if first { a } else { b };
            seen.push(q.acquire());
            q.release();
            // Free for the next (checked, rather than found out by the next take spinning).
            assert!(!bf.is_locked());
        }
        // One toggle for both queues: whoever rings next takes the other buffer.
        assert_eq!(seen, [0, 256, 0, 256]);
        assert_eq!(bf.bf_size(), 256);
    }

    #[test]
    fn shared_lock_is_held_until_given_back() {
        let bf = SharedBf::new(64);
        bf.acquire();
        assert!(bf.is_locked(), "held while ringing");
        bf.release();
        assert!(!bf.is_locked(), "free after");
    }

    /// Threads ring in turn: inside the lock each one writes a whole "copy" (a sequence of
    /// words tagged with its id) into the buffer the toggle names, checks that nobody wrote in
    /// between, and flips. Without mutual exclusion the copies interleave.
    #[test]
    fn copies_under_the_lock_never_interleave() {
        const THREADS: usize = 2;
        const RINGS: usize = if cfg!(miri) { 20 } else { 1000 };
        struct Reg {
            bf: SharedBf,
            buf: [core::sync::atomic::AtomicU64; 16],
        }
        let reg = Arc::new(Reg {
            bf: SharedBf::new(64),
            buf: Default::default(),
        });
        // One ring alone first: the lock comes back free (the threads would spin for ever on a
        // lock never given back); the toggle, at the other buffer, stays shared.
        assert_eq!(reg.bf.acquire(), 0);
        reg.bf.release();
        assert!(!reg.bf.is_locked());
        let threads: Vec<_> = (0..THREADS)
            .map(|t| {
                let reg = Arc::clone(&reg);
                std::thread::spawn(move || {
                    let me = &reg.bf;
                    let mut offsets = [0usize; 2];
                    for r in 0..RINGS {
                        let offset = me.acquire() as usize;
                        offsets[offset / 64] += 1;
                        let tag = ((t as u64) << 32) | r as u64;
                        let words = &reg.buf[offset / 8..offset / 8 + 8];
                        for (i, w) in words.iter().enumerate() {
                            w.store(tag, core::sync::atomic::Ordering::Relaxed);
                            if i == 3 {
                                // Let the others run in the middle of the copy.
                                std::thread::yield_now();
                            }
                        }
                        for w in words {
                            assert_eq!(w.load(core::sync::atomic::Ordering::Relaxed), tag);
                        }
                        me.release();
                    }
                    offsets
                })
            })
            .collect();
        let mut per_buffer = [1usize, 0];
        for t in threads {
            let o = t.join().expect("no torn copy");
            per_buffer[0] += o[0];
            per_buffer[1] += o[1];
        }
        // The toggle is shared: the rings alternate between the buffers, the first alone's
        // included.
        let rings = THREADS * RINGS + 1;
        assert_eq!(per_buffer, [rings.div_ceil(2), rings / 2]);
    }
}
