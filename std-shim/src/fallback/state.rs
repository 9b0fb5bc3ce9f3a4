//! Bookkeeping the fallback's poster and poller share, sized once when the queue pair is
//! created.
//!
//! libibverbs completes requests in order and reports only the `wr_id` it was given. The
//! fallback therefore posts its own counter as the `wr_id` (bit 63 set for receives) and keeps
//! the caller's tag in a slot table indexed by that counter. The poller translates a completion
//! back through the table and hands credits back to the poster through one cache-padded atomic
//! word per queue: it reads the slot, then stores the word with `Release`; the poster loads the
//! word with `Acquire` before it reuses a slot (single producer, single consumer). A signaled
//! completion also retires the unsignaled requests before it, as on the device.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use zverbs_core::WcOpcode;

/// Tag bit of the `wr_id` the fallback posts for receives.
pub(crate) const RECV_TAG: u64 = 1 << 63;

/// A value on its own cache line (two, against the adjacent-line prefetcher).
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct CachePadded<T>(pub(crate) T);

/// What the poster records for one send request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SendSlot {
    /// The caller's tag.
    pub(crate) wr_id: u64,
    /// The completion opcode of the request.
    pub(crate) opcode: WcOpcode,
    /// Whether it carried an immediate.
    pub(crate) imm: bool,
    /// Whether it asked for a completion.
    pub(crate) signaled: bool,
}

/// The state a fallback send queue shares with the poller of its CQ.
#[derive(Debug)]
pub struct SqShared {
    slots: Box<[UnsafeCell<SendSlot>]>,
    mask: u32,
    /// Low 32 bits: requests retired (consumer counter). High 32 bits: signaled requests
    /// completed. Written only by the poller.
    done: CachePadded<AtomicU64>,
    /// Requests handed to libibverbs (the counter after the last one), stored by the poster
    /// after each post: with `done`, whether the queue is drained.
    posted: AtomicU32,
    /// Whether the queue may post (closed in RESET and the error state).
    gate: zverbs_mlx5dv::Gate,
}

// SAFETY: a slot is written by the poster only while the credit word shows it free, and read
// by the poller only after libibverbs reported the request the poster published; the word is
// atomic (protocol in the module docs).
unsafe impl Sync for SqShared {}

impl SqShared {
    /// State for a send queue of `max_send_wr` requests.
    pub fn new(max_send_wr: u32) -> Self {
        let n = max_send_wr.max(1).next_power_of_two();
        Self {
            slots: (0..n)
                .map(|_| UnsafeCell::new(SendSlot::default()))
                .collect(),
            mask: n - 1,
            done: CachePadded(AtomicU64::new(0)),
            posted: AtomicU32::new(0),
            gate: zverbs_mlx5dv::Gate::new(),
        }
    }

    /// The queue's gate.
    #[inline(always)]
    pub(crate) fn gate(&self) -> &zverbs_mlx5dv::Gate {
        &self.gate
    }

    /// Poster side: every request before counter `pi` was handed to libibverbs.
    #[inline(always)]
    pub(crate) fn note_posted(&self, pi: u32) {
        self.posted.store(pi, Ordering::Release);
    }

    /// The counter after the last request handed to libibverbs.
    #[inline(always)]
    pub(crate) fn posted(&self) -> u32 {
        self.posted.load(Ordering::Acquire)
    }

    /// Slots: the most requests that may be outstanding.
    pub(crate) fn capacity(&self) -> u32 {
        self.mask + 1
    }

    /// Requests handed to libibverbs and not yet completed.
    pub(crate) fn outstanding(&self) -> u32 {
        let posted = self.posted.load(Ordering::Acquire);
        posted.wrapping_sub(self.load_done().0)
    }

    /// Poster side: records request `counter`.
    ///
    /// # Safety
    ///
    /// The slot is free (the credit word shows every earlier request in it retired) and the
    /// request is not posted yet.
    #[inline(always)]
    pub(crate) unsafe fn record(&self, counter: u32, slot: SendSlot) {
        let cell = &self.slots[(counter & self.mask) as usize];
        // SAFETY: (caller) nobody else touches this slot now.
        unsafe { cell.get().write(slot) };
    }

    /// Poster side: reads back what was recorded for request `counter`.
    ///
    /// # Safety
    ///
    /// The request was recorded and never posted: its slot is the poster's alone.
    #[inline]
    pub(crate) unsafe fn peek(&self, counter: u32) -> SendSlot {
        let cell = &self.slots[(counter & self.mask) as usize];
        // SAFETY: (caller) nobody else touches this slot now.
        unsafe { cell.get().read() }
    }

    /// Poster side: `(retired, signaled completed)`, `Acquire`.
    #[inline(always)]
    pub(crate) fn load_done(&self) -> (u32, u32) {
        let w = self.done.0.load(Ordering::Acquire);
        (w as u32, (w >> 32) as u32)
    }

    /// Poller side: request `counter` completed; retires it and everything before it.
    ///
    /// # Safety
    ///
    /// Only the one poller of the queue calls this, for a request libibverbs reported.
    #[inline(always)]
    pub(crate) unsafe fn retire(&self, counter: u32) -> SendSlot {
        let cell = &self.slots[(counter & self.mask) as usize];
        // SAFETY: (caller) the request was posted, so the poster wrote the slot before, and it
        // will not rewrite it until the store below.
        let slot = unsafe { cell.get().read() };
        let w = self.done.0.load(Ordering::Relaxed); // only this thread writes it
        let sig = ((w >> 32) as u32).wrapping_add(u32::from(slot.signaled));
        let word = (u64::from(sig) << 32) | u64::from(counter.wrapping_add(1));
        self.done.0.store(word, Ordering::Release);
        slot
    }
}

/// The state a fallback receive queue shares with the poller of its CQ.
#[derive(Debug)]
pub struct RqShared {
    slots: Box<[UnsafeCell<u64>]>,
    mask: u32,
    /// Receives completed; written only by the poller.
    tail: CachePadded<AtomicU32>,
    /// As [`SqShared`]'s.
    posted: AtomicU32,
    /// As [`SqShared`]'s.
    gate: zverbs_mlx5dv::Gate,
}

// SAFETY: as for `SqShared`.
unsafe impl Sync for RqShared {}

impl RqShared {
    /// State for a receive queue of `max_recv_wr` requests.
    pub fn new(max_recv_wr: u32) -> Self {
        let n = max_recv_wr.max(1).next_power_of_two();
        Self {
            slots: (0..n).map(|_| UnsafeCell::new(0)).collect(),
            mask: n - 1,
            tail: CachePadded(AtomicU32::new(0)),
            posted: AtomicU32::new(0),
            gate: zverbs_mlx5dv::Gate::new(),
        }
    }

    /// The queue's gate.
    #[inline(always)]
    pub(crate) fn gate(&self) -> &zverbs_mlx5dv::Gate {
        &self.gate
    }

    /// Poster side: every receive before counter `head` was handed to libibverbs.
    #[inline(always)]
    pub(crate) fn note_posted(&self, head: u32) {
        self.posted.store(head, Ordering::Release);
    }

    /// Receives handed to libibverbs and not yet completed.
    pub(crate) fn outstanding(&self) -> u32 {
        self.posted
            .load(Ordering::Acquire)
            .wrapping_sub(self.load_tail())
    }

    /// Poster side: records `wr_id` for receive `counter`.
    ///
    /// # Safety
    ///
    /// The slot is free and the receive not yet posted.
    #[inline(always)]
    pub(crate) unsafe fn record(&self, counter: u32, wr_id: u64) {
        let cell = &self.slots[(counter & self.mask) as usize];
        // SAFETY: (caller) nobody else touches this slot now.
        unsafe { cell.get().write(wr_id) };
    }

    /// Poster side: receives completed, `Acquire`.
    #[inline(always)]
    pub(crate) fn load_tail(&self) -> u32 {
        self.tail.0.load(Ordering::Acquire)
    }

    /// Poller side: the oldest receive completed; returns its tag.
    ///
    /// # Safety
    ///
    /// Only the one poller calls this, once per receive completion.
    #[inline(always)]
    pub(crate) unsafe fn retire(&self) -> u64 {
        let tail = self.tail.0.load(Ordering::Relaxed);
        let cell = &self.slots[(tail & self.mask) as usize];
        // SAFETY: (caller) the receive was posted after its slot was written.
        let wr_id = unsafe { cell.get().read() };
        self.tail.0.store(tail.wrapping_add(1), Ordering::Release);
        wr_id
    }
}
