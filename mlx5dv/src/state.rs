//! Bookkeeping shared between a queue's poster and the completion-queue poller.
//!
//! A send queue is written by one thread and its completions may be polled on another. What
//! they share is small and sized once at set-up:
//!
//! - one [`SqSlot`] per send basic block, written by the poster when it builds a WQE starting
//!   there (the caller's `wr_id`, where the next WQE starts, whether it asked for a CQE) and
//!   read by the poller when a CQE names that WQE;
//! - one cache-padded atomic word, written only by the poller, that hands credits back: the
//!   consumer counter (in basic blocks) and the number of signaled requests completed.
//!
//! The poller stores the word with `Release` after reading the slot; the poster loads it with
//! `Acquire` before reusing the slot. So a slot is never overwritten while the poller may still
//! read it (single producer, single consumer; modelled in `loom-tests`).
//!
//! A shared receive queue ([`SrqState`]) is posted to by one thread and freed by the poller of
//! the CQ its QPs complete receives on: its WQEs form a free list linked through their next
//! segments, which the poster takes from the head and the poller appends to at the tail. The
//! poller links a freed WQE behind the tail and then counts it in a cache-padded word with
//! `Release`; the poster loads that count with `Acquire` and takes only WQEs the count says
//! are linked (never the tail itself), so it follows no link the poller has not finished and
//! writes no slot the poller still reads (`docs/ordering.md`, modelled in `loom-tests`).
//!
//! ## Who owns the bookkeeping
//!
//! The states are generic over the storage of their slots, and the queues over the handle
//! through which they reach a state, so that no lifetime has to be invented by anyone:
//!
//! - in `no_std` code both are borrows: `SqState<&'a [SqSlot]>`, reached as `&'a SqState<_>`,
//!   and the borrow checker keeps the storage alive for as long as a queue uses it;
//! - an owner with an allocator (the `zverbs` crate) uses owning handles, for example
//!   `Arc<SqState<Box<[SqSlot]>>>`, and each queue keeps what it uses alive itself.
//!
//! Any handle that dereferences to the same place for as long as it lives, even when moved
//! ([`StableDeref`]: references, `Box`, `Arc`, `Rc`, `Vec`), will do. A handle is one pointer,
//! read as a reference is, so the choice costs nothing on the data path.

use core::ptr::NonNull;

use stable_deref_trait::StableDeref;
use zverbs_core::sync::CachePadded;
use zverbs_core::sync::atomic::{AtomicPtr, AtomicU32, Ordering};
use zverbs_core::sync::cell::UnsafeCell;
use zverbs_core::sync::order;

use crate::devmem::{OwnedCqe, Reported, SegRing};
use crate::gate::Gate;
use crate::layout::{LayoutError, SrqLayout};
use crate::prm::wqe::srq_next;

/// What the poster records for a WQE starting at a basic block.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SlotData {
    /// The caller's tag.
    pub(crate) wr_id: u64,
    /// Producer counter (basic blocks) just after this WQE: the consumer counter once it
    /// completes.
    pub(crate) next: u32,
    /// The mlx5 opcode of the WQE.
    pub(crate) opcode: u8,
    /// Whether the WQE asked for a CQE.
    pub(crate) signaled: bool,
}

/// Per-basic-block bookkeeping storage of a send queue. Allocate `sq.wqe_cnt` of them once.
#[derive(Debug, Default)]
pub struct SqSlot(UnsafeCell<SlotData>);

// SAFETY: the cell is reached only through `SqSlot::record` (the poster, `unsafe`) and
// `Polled::<SqState>::retire` (the poller, behind the tokens `Polled` and `Reported`), whose
// contracts are the hand-over protocol of the module docs: the poster writes a slot only after
// the credit word (Acquire) shows the poller is done with it, and the poller reads it only
// after the device completed the WQE the poster published. Safe code can do nothing with a shared `SqSlot`.
unsafe impl Sync for SqSlot {}

impl SqSlot {
    /// An empty slot.
    pub fn new() -> Self {
        Self(UnsafeCell::new(SlotData::default()))
    }

    /// Tests: what the slot holds (no poster or poller runs meanwhile).
    #[cfg(test)]
    pub(crate) fn peek(&self) -> SlotData {
        // SAFETY: (tests) nothing writes the slot during the read.
        self.0.with(|p| unsafe { p.read() })
    }
}

impl SqSlot {
    /// Poster side: records the WQE starting at this slot's basic block.
    ///
    /// # Safety
    ///
    /// The slot is the poster's: the credit word shows the poller has consumed every earlier
    /// completion of this slot, and the WQE is not published yet.
    #[inline(always)]
    pub(crate) unsafe fn record(&self, data: SlotData) {
        // SAFETY: (caller) no one else accesses this slot now.
        self.0.with_mut(|p| unsafe { p.write(data) });
    }
}

/// Where a send queue's slots start, held by the queue so that a post reaches a slot without
/// going through its state's handle: a shared borrow of [`SqState::slots`] whose lifetime is
/// the queue's hold on the state (a [`StableDeref`] handle to a state whose storage is
/// [`StableDeref`] too, so neither moves while the queue lives).
#[derive(Clone, Copy, Debug)]
pub(crate) struct SlotsAt(NonNull<SqSlot>);

// SAFETY: a `SlotsAt` stands for a `&[SqSlot]`, which is `Send` and `Sync` because `SqSlot` is
// `Sync`; it gives access to a slot only through the unsafe `SlotsAt::slot`.
unsafe impl Send for SlotsAt {}
// SAFETY: as above.
unsafe impl Sync for SlotsAt {}

impl SlotsAt {
    /// The start of `slots`.
    #[inline]
    pub(crate) fn of(slots: &[SqSlot]) -> Self {
        Self(NonNull::from(slots).cast())
    }

    /// The slot `at` bytes from the start (16 bytes a slot; loom's slots are larger, and
    /// `at / 16` is their index).
    ///
    /// # Safety
    ///
    /// The slots this was made of are alive, and `at` is a multiple of 16 less than 16 times
    /// their number.
    #[inline(always)]
    pub(crate) unsafe fn slot<'a>(self, at: usize) -> &'a SqSlot {
        #[cfg(not(zverbs_loom))]
        const _: () = assert!(core::mem::size_of::<SqSlot>() == 16);
        // SAFETY: (caller) a slot of a live slice.
        unsafe {
            #[cfg(not(zverbs_loom))]
            let slot = &*self.0.as_ptr().byte_add(at);
            #[cfg(zverbs_loom)]
            let slot = &*self.0.as_ptr().add(at / 16);
            slot
        }
    }
}

/// Per-entry bookkeeping storage of a receive queue (the `wr_id`). Allocate `rq.wqe_cnt` once.
#[derive(Debug, Default)]
pub struct RqSlot(UnsafeCell<u64>);

// SAFETY: as for `SqSlot`: reached only through `RqState::record` and
// `Polled::<RqState>::retire`, whose contracts are the receive side's hand-over protocol.
unsafe impl Sync for RqSlot {}

impl RqSlot {
    /// An empty slot.
    pub fn new() -> Self {
        Self(UnsafeCell::new(0))
    }
}

/// What a send queue shares with the completion queue that serves it: the slots, in storage
/// `S` (`&[SqSlot]`, `Box<[SqSlot]>`, ...: see the module docs), and the credit word.
///
/// `Send` and `Sync` when the storage is: the slots are handed over between the poster and the
/// poller by the protocol of the module docs, and the credit word is atomic.
#[derive(Debug)]
pub struct SqState<S> {
    slots: Slots<S>,
    /// Low 16 bits: consumer counter in basic blocks. High 16 bits: signaled requests
    /// completed. Both wrap; written only by the poller (and by [`SqState::restart`] while
    /// the queue pair is idle).
    done: CachePadded<AtomicU32>,
    /// Whether the queue may post, and the queue pair's incarnation (`gate.rs`). Beside the
    /// slots, which every post reads: not on the poller's line.
    gate: Gate,
}

/// A handle through which a send queue or a CQ binding reaches an [`SqState`]: `&SqState<_>`,
/// `Arc<SqState<_>>`, and any other [`StableDeref`] pointer to one.
pub trait SqStateRef: StableDeref<Target = SqState<Self::Slots>> {
    /// The storage of the state's slots.
    type Slots: StableDeref<Target = [SqSlot]>;
}

impl<P, S> SqStateRef for P
where
    P: StableDeref<Target = SqState<S>>,
    S: StableDeref<Target = [SqSlot]>,
{
    type Slots = S;
}

impl<S: StableDeref<Target = [SqSlot]>> SqState<S> {
    /// State over `slots`, one per send basic block (`sq.wqe_cnt`, a power of two).
    ///
    /// # Errors
    ///
    /// [`LayoutError::NotPowerOfTwo`] when the length is not a power of two ≤ 2^15.
    pub fn new(slots: S) -> Result<Self, LayoutError> {
        Ok(Self {
            slots: Slots::new(slots)?,
            done: CachePadded(AtomicU32::new(0)),
            gate: Gate::new(),
        })
    }

    /// The queue's gate: closed, posts are refused with
    /// [`PostError::NotReady`](zverbs_core::PostError) and nothing written.
    #[inline(always)]
    pub fn gate(&self) -> &Gate {
        &self.gate
    }

    /// The consumer counter's low 16 bits as the poller last handed it back: equal to the
    /// doorbell record's producer counter when every WQE rung has been retired.
    pub fn retired16(&self) -> u16 {
        self.done.load(order::CREDIT_ACQUIRE) as u16
    }

    /// Starts the queue pair's next incarnation: the credit word back to 0, as the device's
    /// counters after RESET, then the gate closed at the next incarnation (with `Release`,
    /// so that the queue that sees it open again sees the credit word reset).
    ///
    /// # Safety
    ///
    /// The queue pair is in RESET and the poller has retired every WQE of this queue it will
    /// ever see a completion for (no CQE of the old incarnation is left in the CQ, and the
    /// device writes none after RESET): nothing reads or writes the credit word meanwhile.
    pub unsafe fn restart(&self) {
        self.done.store(0, Ordering::Relaxed);
        self.gate.restart();
    }

    /// Number of slots (send basic blocks).
    #[inline]
    pub fn len(&self) -> u32 {
        self.slots.len()
    }

    /// Never true: a state has at least one slot.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.slots.storage.is_empty()
    }

    #[inline(always)]
    fn slot(&self, counter: u32) -> &SqSlot {
        self.slots.at(counter)
    }

    /// The slots, for the poster, which indexes them with the ring position it has already
    /// masked (see [`SqSlot::record`]).
    #[inline(always)]
    pub(crate) fn slots(&self) -> &[SqSlot] {
        &self.slots.storage
    }

    /// Poster side: the credit word (`Acquire`, pairing with the poller's `Release`).
    #[inline(always)]
    pub(crate) fn load_done(&self) -> u32 {
        self.done.load(order::CREDIT_ACQUIRE)
    }

    /// Tests: sets the credit word as a poller that retired everything up to consumer
    /// counter `ci` and `signaled` signaled requests would have.
    #[cfg(test)]
    pub(crate) fn force_done(&self, ci: u32, signaled: u16) {
        let word = (u32::from(signaled) << 16) | (ci & 0xffff);
        self.done.store(word, Ordering::Release);
    }
}

/// A queue's state as the one poller of its completion queue reaches it: its `retire` is the
/// poller side of the slot protocol, safe with what a CQE reports ([`Reported`], an
/// [`OwnedCqe`]). Made only where the poller resolves its bindings (one argument there).
#[derive(Debug)]
pub(crate) struct Polled<'a, T>(&'a T);

impl<T> Clone for Polled<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Polled<'_, T> {}

impl<'a, T> Polled<'a, T> {
    /// `state` as its poller's.
    ///
    /// # Safety
    ///
    /// The caller is the one poller of the completion queue that serves `state` (no other
    /// thread retires from it while any `Polled` of it lives), and the completions it passes
    /// to `retire` are of this queue.
    #[inline(always)]
    pub(crate) unsafe fn new(state: &'a T) -> Self {
        Self(state)
    }
}

impl<T> core::ops::Deref for Polled<'_, T> {
    type Target = T;
    #[inline(always)]
    fn deref(&self) -> &T {
        self.0
    }
}

impl<S: StableDeref<Target = [SqSlot]>> Polled<'_, SqState<S>> {
    /// Poller side: the WQE whose first basic block has the 16-bit counter `done` names
    /// completed (with a CQE of its own). Retires it and every unsignaled WQE before it, hands
    /// the credits back, and returns what the poster recorded.
    #[inline(always)]
    pub(crate) fn retire(&self, done: Reported) -> SlotData {
        let q = self.0;
        // SAFETY: the tokens': the device completed this WQE (`done`), so the poster wrote
        // the slot before publishing it and will not rewrite it until the credit word below
        // releases it; only this poller reads it (`Polled::new`).
        let data = q
            .slot(u32::from(done.counter()))
            .0
            .with(|p| unsafe { p.read() });
        let old = q.done.load(Ordering::Relaxed); // only this thread writes it
        let signaled = old.wrapping_add(u32::from(data.signaled) << 16) & 0xffff_0000;
        let word = signaled | (data.next & 0xffff);
        q.done.store(word, order::CREDIT_RELEASE);
        data
    }
}

/// Where a receive queue's WQEs are, for the poller that copies scattered data into them: set
/// once by the receive queue when it is built ([`RecvWqes::set`]), read by the poller only for
/// a scattered CQE (`cq/scatter.rs`).
#[derive(Debug)]
pub(crate) struct RecvWqes {
    /// The ring's first byte; null until set.
    base: AtomicPtr<u8>,
    /// log2 of the WQE stride in bytes.
    shift: AtomicU32,
    /// WQEs in the ring, minus one.
    mask: AtomicU32,
}

impl RecvWqes {
    /// Not set: a scattered CQE of the queue cannot be copied (reported as a format error).
    pub(crate) fn new() -> Self {
        Self {
            base: AtomicPtr::new(core::ptr::null_mut()),
            shift: AtomicU32::new(0),
            mask: AtomicU32::new(0),
        }
    }

    /// The ring of `cnt` WQEs (a power of two) of `stride` bytes (a power of two ≥ 16) at
    /// `base`. `Release`: the poller that loads `base` with `Acquire` sees the rest.
    pub(crate) fn set(&self, base: NonNull<u8>, cnt: u32, stride: u32) {
        debug_assert!(cnt.is_power_of_two() && stride.is_power_of_two() && stride >= 16);
        self.shift.store(stride.trailing_zeros(), Ordering::Relaxed);
        self.mask.store(cnt - 1, Ordering::Relaxed);
        self.base.store(base.as_ptr(), Ordering::Release);
    }

    /// The ring; `None` until set.
    #[inline(always)]
    pub(crate) fn get(&self) -> Option<WqeRing> {
        let base = NonNull::new(self.base.load(Ordering::Acquire))?;
        Some(WqeRing {
            base,
            shift: self.shift.load(Ordering::Relaxed),
            mask: self.mask.load(Ordering::Relaxed),
        })
    }
}

/// A receive queue's ring of WQEs, as [`RecvWqes`] holds it once set.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WqeRing {
    /// The ring's first byte.
    pub(crate) base: NonNull<u8>,
    /// log2 of the WQE stride in bytes (at least 4).
    pub(crate) shift: u32,
    /// WQEs in the ring, minus one.
    pub(crate) mask: u32,
}

/// What a receive queue shares with the completion queue that serves it: the slots, in
/// storage `S`, and the completed-receive counter. `Send` and `Sync` when the storage is.
#[derive(Debug)]
pub struct RqState<S> {
    slots: Slots<S>,
    /// Receive requests completed (free-running); written only by the poller (and by
    /// [`RqState::restart`] while the queue pair is idle).
    tail: CachePadded<AtomicU32>,
    /// As [`SqState`]'s.
    gate: Gate,
    /// Where the queue's WQEs are, for the poller to copy data scattered into a CQE.
    wqes: RecvWqes,
}

/// A handle through which a receive queue or a CQ binding reaches an [`RqState`].
pub trait RqStateRef: StableDeref<Target = RqState<Self::Slots>> {
    /// The storage of the state's slots.
    type Slots: StableDeref<Target = [RqSlot]>;
}

impl<P, S> RqStateRef for P
where
    P: StableDeref<Target = RqState<S>>,
    S: StableDeref<Target = [RqSlot]>,
{
    type Slots = S;
}

impl<S: StableDeref<Target = [RqSlot]>> RqState<S> {
    /// State over `slots`, one per receive entry (`rq.wqe_cnt`, a power of two).
    ///
    /// # Errors
    ///
    /// [`LayoutError::NotPowerOfTwo`] when the length is not a power of two ≤ 2^15.
    pub fn new(slots: S) -> Result<Self, LayoutError> {
        Ok(Self {
            slots: Slots::new(slots)?,
            tail: CachePadded(AtomicU32::new(0)),
            gate: Gate::new(),
            wqes: RecvWqes::new(),
        })
    }

    /// Where the queue's WQEs are (set by the receive queue built on this state).
    #[inline]
    pub(crate) fn wqes(&self) -> &RecvWqes {
        &self.wqes
    }

    /// Poller side: the counter of the oldest receive not completed (the next
    /// `Polled::<RqState>::retire` retires it).
    #[inline(always)]
    pub(crate) fn oldest(&self) -> u32 {
        self.tail.load(Ordering::Relaxed) // only the poller writes it
    }

    /// The queue's gate, as [`SqState::gate`].
    #[inline(always)]
    pub fn gate(&self) -> &Gate {
        &self.gate
    }

    /// Receives completed, as the poller last counted them (low 16 bits): equal to the
    /// doorbell record's head when every receive posted has completed.
    pub fn retired16(&self) -> u16 {
        self.tail.load(order::CREDIT_ACQUIRE) as u16
    }

    /// Starts the next incarnation, as [`SqState::restart`].
    ///
    /// # Safety
    ///
    /// As [`SqState::restart`], for receives.
    pub unsafe fn restart(&self) {
        self.tail.store(0, Ordering::Relaxed);
        self.gate.restart();
    }

    /// Number of slots.
    #[inline]
    pub fn len(&self) -> u32 {
        self.slots.len()
    }

    /// Never true: a state has at least one slot.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.slots.storage.is_empty()
    }

    #[inline(always)]
    fn slot(&self, counter: u32) -> &RqSlot {
        self.slots.at(counter)
    }

    /// Poster side: records `wr_id` for the receive entry `head`.
    ///
    /// # Safety
    ///
    /// The slot is free (the tail shows it completed) and not yet published.
    #[inline(always)]
    pub(crate) unsafe fn record(&self, head: u32, wr_id: u64) {
        // SAFETY: (caller) no one else accesses this slot now.
        self.slot(head).0.with_mut(|p| unsafe { p.write(wr_id) });
    }

    /// Poster side: completed receives (`Acquire`, pairing with the poller's `Release`).
    #[inline(always)]
    pub(crate) fn load_tail(&self) -> u32 {
        self.tail.load(order::CREDIT_ACQUIRE)
    }
}

impl<S: StableDeref<Target = [RqSlot]>> Polled<'_, RqState<S>> {
    /// Poller side: the oldest receive completed, as the receive CQE `cqe` (or an entry of a
    /// compressed session) reports; returns its `wr_id` and frees its slot. Once per CQE.
    #[inline(always)]
    pub(crate) fn retire(&self, cqe: &OwnedCqe) -> u64 {
        let _ = cqe;
        let q = self.0;
        let tail = q.tail.load(Ordering::Relaxed); // only this thread writes it
        // SAFETY: the tokens': the device completed this receive (`cqe`, one of this queue's:
        // `Polled::new`), which the poster recorded before publishing it; only this poller
        // reads it.
        let wr_id = q.slot(tail).0.with(|p| unsafe { p.read() });
        q.tail.store(tail.wrapping_add(1), order::CREDIT_RELEASE);
        wr_id
    }
}

/// Per-WQE bookkeeping storage of a shared receive queue (the `wr_id`). Allocate
/// `SrqLayout::wqe_cnt` once.
#[derive(Debug, Default)]
pub struct SrqSlot(UnsafeCell<u64>);

// SAFETY: as for `SqSlot`: reached only through `SrqState::record` and
// `Polled::<SrqState>::retire`, whose contracts are the free list's hand-over protocol (module
// docs).
unsafe impl Sync for SrqSlot {}

impl SrqSlot {
    /// An empty slot.
    pub fn new() -> Self {
        Self(UnsafeCell::new(0))
    }
}

/// What a shared receive queue shares with the completion queue that frees its WQEs: the
/// slots (one per WQE, indexed by WQE index), the poller's end of the free list and the count
/// of WQEs freed. `Send` and `Sync` when the storage is.
#[derive(Debug)]
pub struct SrqState<S> {
    slots: Slots<S>,
    /// The ring, for the poller's links (next segments of free WQEs only).
    ring: SegRing,
    /// log2 of 16-byte segments per WQE.
    seg_shift: u32,
    /// The SRQ number.
    srqn: u32,
    /// The last WQE of the free list; read and written by the poller alone.
    tail: UnsafeCell<u32>,
    /// WQEs freed (free-running); written only by the poller, with `Release`.
    freed: CachePadded<AtomicU32>,
}

// SAFETY: the ring pointer is used by the poller alone, for next segments of WQEs on the free
// list that the poster does not touch (see `retire`); everything else is `Sync` slots
// (hand-over protocol), a poller-only cell and an atomic.
unsafe impl<S: Send> Send for SrqState<S> {}
// SAFETY: as above.
unsafe impl<S: Sync> Sync for SrqState<S> {}

/// A handle through which a shared receive queue or a CQ binding reaches an [`SrqState`].
pub trait SrqStateRef: StableDeref<Target = SrqState<Self::Slots>> {
    /// The storage of the state's slots.
    type Slots: StableDeref<Target = [SrqSlot]>;
}

impl<P, S> SrqStateRef for P
where
    P: StableDeref<Target = SrqState<S>>,
    S: StableDeref<Target = [SrqSlot]>,
{
    type Slots = S;
}

impl<S: StableDeref<Target = [SrqSlot]>> SrqState<S> {
    /// State over `slots`, one per WQE of the SRQ that `layout` describes.
    ///
    /// # Safety
    ///
    /// - `layout` is what `mlx5dv_init_obj` reported for a live SRQ (or the software device's
    ///   equivalent), with its true WQE count, and its ring stays valid while the state lives;
    /// - the SRQ is new: its free list runs from `layout.head` through every WQE to
    ///   `layout.tail`, and nothing was posted;
    /// - under `cfg(zverbs_loom)` the ring is an array of loom segment cells.
    ///
    /// # Errors
    ///
    /// [`LayoutError::NotPowerOfTwo`] or [`LayoutError::RingTooLarge`] for the WQE count,
    /// [`LayoutError::BadStride`] for a stride that is not a power of two ≥ 32,
    /// [`LayoutError::StorageLength`] when `slots` does not have one slot per WQE,
    /// [`LayoutError::SrqFreeList`] when `head` or `tail` is outside the ring or they are equal.
    pub unsafe fn new(layout: &SrqLayout, slots: S) -> Result<Self, LayoutError> {
        let cnt = layout.wqe_cnt;
        if cnt < 2 || !cnt.is_power_of_two() {
            return Err(LayoutError::NotPowerOfTwo { count: cnt });
        }
        if slots.len() != cnt as usize {
            return Err(LayoutError::StorageLength {
                needed: cnt,
                given: slots.len(),
            });
        }
        let stride = layout.stride;
        if stride < 32 || !stride.is_power_of_two() {
            return Err(LayoutError::BadStride { stride });
        }
        if layout.tail >= cnt || layout.head >= cnt || layout.head == layout.tail {
            return Err(LayoutError::SrqFreeList {
                head: layout.head,
                tail: layout.tail,
            });
        }
        let segs_per = stride / 16;
        Ok(Self {
            slots: Slots::new(slots)?,
            // SAFETY: (caller) the ring holds `cnt × stride` bytes while the state lives.
            ring: unsafe { SegRing::new(layout.buf, cnt * segs_per) },
            seg_shift: segs_per.trailing_zeros(),
            srqn: layout.srqn,
            tail: UnsafeCell::new(layout.tail),
            freed: CachePadded(AtomicU32::new(0)),
        })
    }

    /// Number of WQEs.
    #[inline]
    pub fn len(&self) -> u32 {
        self.slots.len()
    }

    /// Never true: a state has at least two slots.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.slots.storage.is_empty()
    }

    /// The SRQ number.
    #[inline]
    pub fn srqn(&self) -> u32 {
        self.srqn
    }

    /// Poster side: records `wr_id` for WQE `index`.
    ///
    /// # Safety
    ///
    /// The WQE was taken from the free list (the freed count, `Acquire`, showed it linked
    /// before the tail) and is not yet published.
    #[inline(always)]
    pub(crate) unsafe fn record(&self, index: u32, wr_id: u64) {
        // SAFETY: (caller) no one else accesses this slot now.
        self.slots
            .at(index)
            .0
            .with_mut(|p| unsafe { p.write(wr_id) });
    }

    /// Poster side: WQEs freed (`Acquire`, pairing with the poller's `Release`).
    #[inline(always)]
    pub(crate) fn load_freed(&self) -> u32 {
        self.freed.load(order::CREDIT_ACQUIRE)
    }
}

impl<S: StableDeref<Target = [SrqSlot]>> Polled<'_, SrqState<S>> {
    /// Poller side: the receive in the WQE `done` names completed. Reads its `wr_id`, links the
    /// WQE behind the tail of the free list (`next_wqe_index` of the tail WQE, as libmlx5's
    /// `mlx5_free_srq_wqe`), makes it the tail, and counts it freed.
    /// Once per receive CQE.
    #[inline]
    pub(crate) fn retire(&self, done: Reported) -> u64 {
        let q = self.0;
        let index = u32::from(done.counter()) & q.slots.mask;
        // SAFETY: the tokens': the device completed this WQE (`done`), which the poster
        // recorded before publishing it and will not take again before the count below frees
        // it; only this poller, the one of the CQ all QPs on the SRQ complete their receives
        // on (`Polled::new`), reads its slot. Only the poller touches `tail`; the tail WQE is
        // on the free list and is never taken by the poster (it takes only WQEs before the
        // tail), and the device does not read a WQE that is not posted: its next segment is
        // the poller's.
        let wr_id = q.tail.with_mut(|p| unsafe {
            let wr_id = q.slots.at(index).0.with(|s| s.read());
            let seg = p.read().wrapping_shl(q.seg_shift);
            q.ring.with_mut(seg, |b| {
                b[srq_next::NEXT_WQE_INDEX].copy_from_slice(&(index as u16).to_be_bytes())
            });
            p.write(index);
            wr_id
        });
        let freed = q.freed.load(Ordering::Relaxed); // only this thread writes it
        q.freed
            .store(freed.wrapping_add(1), order::SRQ_FREE_RELEASE);
        wr_id
    }
}

/// The slots of a queue's state, indexed by a free-running counter: storage `S` of a
/// power-of-two length and its mask. One definition for the send and the receive side.
#[derive(Debug)]
struct Slots<S> {
    storage: S,
    /// `storage.len() - 1`.
    mask: u32,
}

impl<S: StableDeref<Target = [T]>, T> Slots<S> {
    /// `storage`, checked to be a power of two ≤ 2^15 long.
    fn new(storage: S) -> Result<Self, LayoutError> {
        let len = storage.len();
        if len == 0 || !len.is_power_of_two() {
            return Err(LayoutError::NotPowerOfTwo { count: len as u32 });
        }
        if len > 1 << 15 {
            return Err(LayoutError::RingTooLarge { count: len as u32 });
        }
        Ok(Self {
            storage,
            mask: len as u32 - 1,
        })
    }

    #[inline(always)]
    fn len(&self) -> u32 {
        self.mask + 1
    }

    /// The slot of counter value `counter`.
    #[inline(always)]
    fn at(&self, counter: u32) -> &T {
        let i = (counter & self.mask) as usize;
        debug_assert!(i < self.storage.len());
        // SAFETY: the length is a power of two (checked in `new`) and `mask` is one less, so
        // the masked index is in bounds.
        unsafe { self.storage.get_unchecked(i) }
    }
}

/// Which queues of one QP a completion queue serves, through handles `Sq`, `Rq` and `Srq` to
/// their states (`&SqState<_>`, `Arc<SqState<_>>`, ...).
#[derive(Clone, Copy, Debug)]
pub struct CqBinding<Sq, Rq, Srq = SrqRef<'static>> {
    /// The QP number CQEs name (low 24 bits of `sop_drop_qpn`).
    pub qpn: u32,
    /// The QP's send queue state, if its send completions go to this CQ.
    pub sq: Option<Sq>,
    /// The QP's receive queue state, if its receive completions go to this CQ.
    pub rq: Option<Rq>,
    /// The shared receive queue the QP takes its receives from, if it has one and its receive
    /// completions go to this CQ (then `rq` is `None`).
    pub srq: Option<Srq>,
}

/// The `qpn` of a binding that takes every receive completion no other binding names
/// ([`CqBinding::SOLE_RECEIVER`]): above the 24 bits a CQE's QP number or user index has, so no
/// CQE names it, and not `u32::MAX`, which the poller keeps for "no binding yet".
pub(crate) const SOLE_RECEIVER: u32 = 1 << 31;

impl<Sq, Rq, Srq> CqBinding<Sq, Rq, Srq> {
    /// The `qpn` under which a binding takes every receive completion (and receive error)
    /// whose CQE names no binding, by its QP number or by its user index (`srqn_uidx`, CQE
    /// version 1): an Ethernet receive CQE carries the steering rule's flow tag where the QP
    /// number would be, and names its queue only by the user index, which libmlx5 chooses and
    /// no verb reports. Bind a raw packet QP's or a work queue's receive queue under it when
    /// it is the only receive queue whose completions go to the CQ (the caller makes sure of
    /// that): each such CQE is then its. Found on the poller's out-of-line path, as a CQE of
    /// an unknown queue is; the fast path never sees it.
    pub const SOLE_RECEIVER: u32 = SOLE_RECEIVER;
}

impl<Sq, Rq> CqBinding<Sq, Rq> {
    /// A binding of both queues of QP `qpn`.
    pub const fn new(qpn: u32, sq: Option<Sq>, rq: Option<Rq>) -> Self {
        Self {
            qpn,
            sq,
            rq,
            srq: None,
        }
    }
}

impl<Sq, Srq> CqBinding<Sq, RqRef<'static>, Srq> {
    /// A binding of QP `qpn` that takes its receives from the shared receive queue `srq`, and
    /// of its send queue if `sq`. Every QP on one SRQ must complete its receives on the same
    /// CQ: its poller frees the SRQ's WQEs.
    pub const fn with_srq(qpn: u32, sq: Option<Sq>, srq: Srq) -> Self {
        Self {
            qpn,
            sq,
            rq: None,
            srq: Some(srq),
        }
    }
}

impl<Sq> CqBinding<Sq, RqRef<'static>> {
    /// A binding of the send queue of QP `qpn` alone (its receive completions go to another
    /// CQ, or it has none). The receive side's handle type is fixed to [`RqRef`], which lets
    /// the binding share an array with borrowed bindings of both queues.
    pub const fn send_only(qpn: u32, sq: Sq) -> Self {
        Self {
            qpn,
            sq: Some(sq),
            rq: None,
            srq: None,
        }
    }
}

impl<Rq> CqBinding<SqRef<'static>, Rq> {
    /// A binding of the receive queue of QP `qpn` alone; see [`CqBinding::send_only`].
    pub const fn recv_only(qpn: u32, rq: Rq) -> Self {
        Self {
            qpn,
            sq: None,
            rq: Some(rq),
            srq: None,
        }
    }
}

/// A send queue's state as `no_std` code reaches it: borrowed, over borrowed slots.
pub type SqRef<'a> = &'a SqState<&'a [SqSlot]>;

/// A receive queue's state as `no_std` code reaches it: borrowed, over borrowed slots.
pub type RqRef<'a> = &'a RqState<&'a [RqSlot]>;

/// A shared receive queue's state as `no_std` code reaches it: borrowed, over borrowed slots.
pub type SrqRef<'a> = &'a SrqState<&'a [SrqSlot]>;

/// The bindings a completion queue polls for: a [`StableDeref`] handle to a slice of
/// [`CqBinding`]s (`&[CqBinding<_, _>]`, `Box<[CqBinding<_, _>]>`, ...).
pub trait Bindings: StableDeref<Target = [CqBinding<Self::Sq, Self::Rq, Self::Srq>]> {
    /// The handle to a send queue's state.
    type Sq: SqStateRef;
    /// The handle to a receive queue's state.
    type Rq: RqStateRef;
    /// The handle to a shared receive queue's state.
    type Srq: SrqStateRef;
}

impl<B, Sq, Rq, Srq> Bindings for B
where
    B: StableDeref<Target = [CqBinding<Sq, Rq, Srq>]>,
    Sq: SqStateRef,
    Rq: RqStateRef,
    Srq: SrqStateRef,
{
    type Sq = Sq;
    type Rq = Rq;
    type Srq = Srq;
}

#[cfg(all(test, not(zverbs_loom)))]
mod tests {
    extern crate std;

    use std::boxed::Box;

    use super::*;

    fn slots<T>(n: usize, new: fn() -> T) -> Box<[T]> {
        (0..n).map(|_| new()).collect()
    }

    /// Empty slots for the states under Miri, where making 2^16 of them one by one takes most
    /// of a minute (a constant array is laid out at once).
    static SQ_SLOTS: [SqSlot; 1 << 16] = [const {
        SqSlot(UnsafeCell::new(SlotData {
            wr_id: 0,
            next: 0,
            opcode: 0,
            signaled: false,
        }))
    }; 1 << 16];
    static RQ_SLOTS: [RqSlot; 1 << 16] = [const { RqSlot(UnsafeCell::new(0)) }; 1 << 16];

    #[test]
    fn states_take_a_power_of_two_of_slots_up_to_2_15() {
        for (n, want) in [
            (0, Err(LayoutError::NotPowerOfTwo { count: 0 })),
            (3, Err(LayoutError::NotPowerOfTwo { count: 3 })),
            (1, Ok(1)),
            (64, Ok(64)),
            (1 << 15, Ok(1 << 15)),
            (1 << 16, Err(LayoutError::RingTooLarge { count: 1 << 16 })),
        ] {
            // Under Miri, every length, the slots borrowed from the arrays above (the checks
            // look at the length alone, whatever holds the slots).
            let sq = if cfg!(miri) {
                SqState::new(&SQ_SLOTS[..n]).map(|s| {
                    assert!(!s.is_empty());
                    s.len()
                })
            } else {
                SqState::new(slots(n, SqSlot::new)).map(|s| {
                    assert!(!s.is_empty());
                    s.len()
                })
            };
            assert_eq!(sq, want, "{n} send slots");
            let rq = if cfg!(miri) {
                RqState::new(&RQ_SLOTS[..n]).map(|s| {
                    assert!(!s.is_empty());
                    s.len()
                })
            } else {
                RqState::new(slots(n, RqSlot::new)).map(|s| {
                    assert!(!s.is_empty());
                    s.len()
                })
            };
            assert_eq!(rq, want, "{n} receive slots");
        }
    }
}
