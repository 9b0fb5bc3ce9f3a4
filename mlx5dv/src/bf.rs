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
//! A [`SendQueue`](crate::SendQueue) says which case it is in with its register type:
//!
//! - [`Dedicated`]: the register is this queue's alone. The toggle is a field of the queue,
//!   and ringing takes nothing: no atomic, no branch.
//! - [`Shared`]: the register is shared, and every queue that writes it holds a handle to the
//!   same [`SharedBf`]: a spin lock held around the copy and its flush, and the toggle. Only
//!   these queues pay for it (one uncontended compare-and-swap and one store per ring).
//!
//! The lock is held for one BlueFlame copy (at most `bf.size` bytes in 64-bit stores) and a
//! write-combining flush, and never across anything that can block or fail.

use core::ops::Deref;

use zverbs_core::sync::atomic::{AtomicBool, Ordering};
use zverbs_core::sync::cell::UnsafeCell;
use zverbs_core::sync::hint::spin_loop;
use zverbs_core::sync::order;

/// A BlueFlame register shared by several send queues: the lock each takes around its
/// doorbell write, and the buffer toggle they share (libmlx5's `struct mlx5_bf` `lock` and
/// `offset` of a `need_lock` register).
///
/// One per register, created by whoever creates the queues (the control path) and handed to
/// each of them ([`SendQueue::new_shared`](crate::SendQueue::new_shared)) through a handle:
/// `&SharedBf` without an allocator, `Arc<SharedBf>` with one. `Sync`: the lock orders every
/// access to the toggle.
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
    fn acquire(&self) -> u32 {
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
    fn release(&self) {
        self.locked.store(false, order::BF_LOCK_RELEASE);
    }
}

mod sealed {
    pub trait Sealed {}
}

/// How a send queue holds its BlueFlame register while it rings: [`Dedicated`] or
/// [`Shared`]. Sealed: the two are the only ways.
pub trait BfRegister: sealed::Sealed {
    /// Takes the register for one doorbell write and returns the byte offset of the buffer to
    /// write (0 or `bf_size`), flipped for the next write.
    #[doc(hidden)]
    fn take(&mut self, bf_size: u32) -> u32;
    /// Gives the register back, after the write-combining flush.
    #[doc(hidden)]
    fn give_back(&mut self);
    /// Whether other queues may write the same register.
    #[doc(hidden)]
    fn is_shared(&self) -> bool;
}

/// A register of the queue's own (a thread domain's dedicated UAR, a low-latency bfreg): the
/// toggle is the queue's and ringing takes no lock.
#[derive(Debug, Default)]
pub struct Dedicated {
    offset: u32,
}

impl sealed::Sealed for Dedicated {}

impl BfRegister for Dedicated {
    #[inline(always)]
    fn take(&mut self, bf_size: u32) -> u32 {
        let offset = self.offset;
        self.offset = offset ^ bf_size;
        offset
    }

    #[inline(always)]
    fn give_back(&mut self) {}

    #[inline(always)]
    fn is_shared(&self) -> bool {
        false
    }
}

/// A register shared with other queues, through a handle `H` to their common [`SharedBf`].
#[derive(Debug)]
pub struct Shared<H>(pub(crate) H);

impl<H> Shared<H> {
    /// The handle to the shared state.
    pub fn handle(&self) -> &H {
        &self.0
    }
}

impl<H: Deref<Target = SharedBf>> sealed::Sealed for Shared<H> {}

impl<H: Deref<Target = SharedBf>> BfRegister for Shared<H> {
    #[inline(always)]
    fn take(&mut self, bf_size: u32) -> u32 {
        debug_assert_eq!(bf_size, self.0.bf_size);
        self.0.acquire()
    }

    #[inline(always)]
    fn give_back(&mut self) {
        self.0.release();
    }

    #[inline(always)]
    fn is_shared(&self) -> bool {
        true
    }
}

#[cfg(all(test, not(zverbs_loom)))]
mod tests {
    extern crate std;

    use std::sync::Arc;
    use std::vec::Vec;

    use super::*;

    #[test]
    fn dedicated_toggles_without_sharing() {
        let mut d = Dedicated::default();
        assert_eq!(
            [d.take(256), d.take(256), d.take(256)],
            [0, 256, 0],
            "each ring the other buffer"
        );
        d.give_back();
        assert!(!d.is_shared());
        // Doorbell only: the offset stays 0.
        let mut d = Dedicated::default();
        assert_eq!([d.take(0), d.take(0)], [0, 0]);
    }

    #[test]
    fn shared_queues_share_one_toggle() {
        let bf = SharedBf::new(256);
        let (mut a, mut b) = (Shared(&bf), Shared(&bf));
        let mut seen = Vec::new();
        for first in [true, false, false, true] {
            let q = if first { &mut a } else { &mut b };
            seen.push(q.take(256));
            q.give_back();
            // Free for the next (checked, rather than found out by the next take spinning).
            assert!(!bf.is_locked());
        }
        // One toggle for both queues: whoever rings next takes the other buffer.
        assert_eq!(seen, [0, 256, 0, 256]);
        assert!(a.is_shared());
        assert_eq!(bf.bf_size(), 256);
    }

    #[test]
    fn shared_lock_is_held_until_given_back() {
        let bf = SharedBf::new(64);
        let mut a = Shared(&bf);
        a.take(64);
        assert!(bf.is_locked(), "held while ringing");
        a.give_back();
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
        let mut first = Shared(&reg.bf);
        assert_eq!(first.take(64), 0);
        first.give_back();
        assert!(!reg.bf.is_locked());
        let threads: Vec<_> = (0..THREADS)
            .map(|t| {
                let reg = Arc::clone(&reg);
                std::thread::spawn(move || {
                    let mut me = Shared(&reg.bf);
                    let mut offsets = [0usize; 2];
                    for r in 0..RINGS {
                        let offset = me.take(64) as usize;
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
                        me.give_back();
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
