//! The one place the data path gets its atomics, fences and shared cells from.
//!
//! Normally these are `core`'s. Under `cfg(zverbs_loom)` they are loom's, so that a loom model
//! can run the backends' own code with a loom thread playing the device, and explore every
//! interleaving and every value a weak memory model allows a load to return.
//!
//! Words shared with the device (doorbell records, CQE ownership) and with other threads (the
//! credit counter a poller returns to a poster) are accessed only through these types.
//!
//! The orderings of the data path's protocols are named here too ([`order`]), with the fences
//! of the DMA barriers: under `cfg(zverbs_mutant = "<name>")` exactly one of them is weakened,
//! so that the loom models prove they catch its absence. This is the one file where the
//! mutants live (`mutant`); `docs/ordering.md` says which model rejects which.
//!
//! The cfg needs the crate's `loom` feature too, which brings in the `loom` crate (optional
//! and behind the cfg, so that it never reaches the lockfile of a crate depending on this
//! one); `zverbs-loom-tests` turns it on.

#[cfg(all(zverbs_loom, not(feature = "loom")))]
compile_error!(
    "`--cfg zverbs_loom` needs zverbs-core's `loom` feature, which brings in the loom crate: \
     build the models through `zverbs-loom-tests` (`cargo xtask loom`), which turns it on"
);

/// Atomic integers, orderings and fences.
pub mod atomic {
    #[cfg(not(zverbs_loom))]
    pub use core::sync::atomic::{
        AtomicBool, AtomicPtr, AtomicU8, AtomicU16, AtomicU32, AtomicU64, AtomicUsize, Ordering,
        fence,
    };
    #[cfg(zverbs_loom)]
    pub use loom::sync::atomic::{
        AtomicBool, AtomicPtr, AtomicU8, AtomicU16, AtomicU32, AtomicU64, AtomicUsize, Ordering,
        fence,
    };
}

/// The orderings of the data path's protocols, named by what they publish, and the fences of
/// the DMA barriers. Each pairs with the other party's half as `docs/ordering.md` says; the
/// mutant of each (in `mutant::ALL`) weakens it alone.
pub mod order {
    use super::atomic::{Ordering, fence};

    /// The poller hands credits back to the poster (the send queue's credit word, the receive
    /// queue's completed count) after reading the slots it frees: `Release`, pairing with
    /// [`CREDIT_ACQUIRE`]. Mutant `relaxed_credit`: `Relaxed`.
    pub const CREDIT_RELEASE: Ordering = if cfg!(zverbs_mutant = "relaxed_credit") {
        Ordering::Relaxed
    } else {
        Ordering::Release
    };

    /// The poster reads the credits back before reusing the slots and ring space they free:
    /// `Acquire`, pairing with [`CREDIT_RELEASE`].
    pub const CREDIT_ACQUIRE: Ordering = Ordering::Acquire;

    /// The poller hands shared-receive-queue WQEs back to the poster (the count of WQEs it
    /// freed) after reading their slots and linking them to the free list: `Release`, pairing
    /// with [`CREDIT_ACQUIRE`]. Mutant `relaxed_srq_free`: `Relaxed`.
    pub const SRQ_FREE_RELEASE: Ordering = if cfg!(zverbs_mutant = "relaxed_srq_free") {
        Ordering::Relaxed
    } else {
        Ordering::Release
    };

    /// The poller publishes the CQ's consumer index after reading the CQEs it frees, which the
    /// device may then overwrite: `Release`. Mutant `relaxed_cq_ci`: `Relaxed`.
    pub const CQ_CI_RELEASE: Ordering = if cfg!(zverbs_mutant = "relaxed_cq_ci") {
        Ordering::Relaxed
    } else {
        Ordering::Release
    };

    /// The poller stores a CQ's arm word in the doorbell record after publishing the consumer
    /// index of its last poll: `Release`, so a device that reads the arm word sees that index
    /// too.
    pub const CQ_ARM_RELEASE: Ordering = Ordering::Release;

    /// After a CQ's arm, before the poll that follows it: `fence(SeqCst)`, pairing with the
    /// software device's `SeqCst` fence between a CQE write and its look at the arm word, so
    /// that either the poll sees the CQE or the device sees the arm.
    #[inline(always)]
    pub fn arm_fence() {
        fence(Ordering::SeqCst);
    }

    /// A queue takes the lock of a BlueFlame register it shares, before reading the buffer
    /// toggle the previous holder flipped: `Acquire`, pairing with [`BF_LOCK_RELEASE`].
    /// Mutant `relaxed_bf_lock`: `Relaxed`.
    pub const BF_LOCK_ACQUIRE: Ordering = if cfg!(zverbs_mutant = "relaxed_bf_lock") {
        Ordering::Relaxed
    } else {
        Ordering::Acquire
    };

    /// A queue gives a shared BlueFlame register's lock back after its doorbell write:
    /// `Release`, pairing with [`BF_LOCK_ACQUIRE`].
    pub const BF_LOCK_RELEASE: Ordering = Ordering::Release;

    /// The fence of [`crate::barrier::to_device`]: `fence(Release)`, so that the WQE stores
    /// before it are seen before the doorbell record after it (by the software device's thread
    /// and, under loom, by the model's NIC). Mutant `no_to_device`: no fence.
    #[inline(always)]
    pub fn to_device_fence() {
        if !cfg!(zverbs_mutant = "no_to_device") {
            fence(Ordering::Release);
        }
    }

    /// The fence of [`crate::barrier::from_device`]: `fence(Acquire)`, so that the CQE reads
    /// after it see the body the device wrote before the owner byte read before it. Mutant
    /// `no_from_device`: no fence.
    #[inline(always)]
    pub fn from_device_fence() {
        if !cfg!(zverbs_mutant = "no_from_device") {
            fence(Ordering::Acquire);
        }
    }
}

/// The mutants: builds with `--cfg zverbs_mutant="<name>"`, each of which weakens exactly one
/// of the orderings in [`order`], for the loom models to reject (`cargo xtask loom`).
///
/// Hidden from the documentation: it exists for the loom models of the workspace, is not API
/// and is outside semver.
#[doc(hidden)]
pub mod mutant {
    /// Every mutant: its name and what it weakens.
    pub const ALL: [(&str, &str); 8] = [
        (
            "no_to_device",
            "no barrier between WQE stores and the doorbell record",
        ),
        (
            "no_from_device",
            "no barrier between the CQE owner check and the CQE reads",
        ),
        (
            "relaxed_credit",
            "send/receive credits handed back with Relaxed instead of Release",
        ),
        (
            "relaxed_cq_ci",
            "CQ consumer index published with Relaxed instead of Release",
        ),
        (
            "relaxed_bf_lock",
            "a shared BlueFlame register taken with Relaxed instead of Acquire",
        ),
        (
            "relaxed_srq_free",
            "shared receive queue WQEs freed with Relaxed instead of Release",
        ),
        (
            "early_retire",
            "the poller hands a replaced table back before it has finished with it",
        ),
        (
            "no_repoll_after_arm",
            "a waiter sleeps after arming a CQ without polling it again",
        ),
    ];

    /// The mutant this build was compiled with, if any.
    pub const ACTIVE: Option<&str> = if cfg!(zverbs_mutant = "no_to_device") {
        Some("no_to_device")
    } else if cfg!(zverbs_mutant = "no_from_device") {
        Some("no_from_device")
    } else if cfg!(zverbs_mutant = "relaxed_credit") {
        Some("relaxed_credit")
    } else if cfg!(zverbs_mutant = "relaxed_cq_ci") {
        Some("relaxed_cq_ci")
    } else if cfg!(zverbs_mutant = "relaxed_bf_lock") {
        Some("relaxed_bf_lock")
    } else if cfg!(zverbs_mutant = "relaxed_srq_free") {
        Some("relaxed_srq_free")
    } else if cfg!(zverbs_mutant = "early_retire") {
        Some("early_retire")
    } else if cfg!(zverbs_mutant = "no_repoll_after_arm") {
        Some("no_repoll_after_arm")
    } else {
        None
    };
}

/// Atomics laid over raw memory (`from_ptr`): `core`'s, under loom too, which cannot lay its
/// own atomics over memory it did not allocate. For bytes of buffers shared with a device
/// ([`crate::shared`]), not for the words of a protocol, which loom must see.
pub mod raw {
    pub use core::sync::atomic::{AtomicU8, AtomicU64, Ordering};
}

/// Spin-wait hints: under loom a spinning thread must yield, or loom would explore its loop
/// for ever.
pub mod hint {
    #[cfg(not(zverbs_loom))]
    pub use core::hint::spin_loop;
    #[cfg(zverbs_loom)]
    pub use loom::hint::spin_loop;
}

/// Shared mutable cells with loom's closure API.
pub mod cell {
    #[cfg(zverbs_loom)]
    pub use loom::cell::UnsafeCell;

    /// `core::cell::UnsafeCell` with the `with`/`with_mut` API of loom's `UnsafeCell`, so the
    /// same code compiles against both. `repr(transparent)`: a pointer to `T` in memory the
    /// device shares may be cast to a pointer to `UnsafeCell<T>`.
    #[cfg(not(zverbs_loom))]
    #[derive(Debug, Default)]
    #[repr(transparent)]
    pub struct UnsafeCell<T: ?Sized>(core::cell::UnsafeCell<T>);

    #[cfg(not(zverbs_loom))]
    impl<T> UnsafeCell<T> {
        /// A cell holding `data`.
        #[inline(always)]
        pub const fn new(data: T) -> Self {
            Self(core::cell::UnsafeCell::new(data))
        }

        /// The value, consuming the cell.
        #[inline(always)]
        pub fn into_inner(self) -> T {
            self.0.into_inner()
        }
    }

    #[cfg(not(zverbs_loom))]
    impl<T: ?Sized> UnsafeCell<T> {
        /// Calls `f` with a shared raw pointer to the contents.
        #[inline(always)]
        pub fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
            f(self.0.get())
        }

        /// Calls `f` with a mutable raw pointer to the contents.
        #[inline(always)]
        pub fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
            f(self.0.get())
        }
    }
}

/// Pads and aligns a value to 128 bytes (two cache lines, as adjacent-line prefetchers fetch
/// pairs), so that an index written by one thread does not share a line with data another
/// thread writes.
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct CachePadded<T>(pub T);

impl<T> core::ops::Deref for CachePadded<T> {
    type Target = T;
    #[inline(always)]
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> core::ops::DerefMut for CachePadded<T> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0
    }
}

#[cfg(all(test, not(zverbs_loom)))]
mod tests {
    use super::atomic::{AtomicU32, Ordering};
    use super::cell::UnsafeCell;
    use super::*;

    #[test]
    fn cell_round_trips() {
        let c = UnsafeCell::new(5u32);
        // SAFETY: no other access to the cell is live.
        c.with_mut(|p| unsafe { *p += 1 });
        // SAFETY: as above.
        assert_eq!(c.with(|p| unsafe { *p }), 6);
        assert_eq!(c.into_inner(), 6);
    }

    #[test]
    fn the_orderings_are_the_protocols_when_no_mutant_is_built() {
        use super::atomic::Ordering::{Acquire, Release};
        // The normal build (every test build but the loom stage's mutant runs).
        assert_eq!(mutant::ACTIVE, None);
        assert_eq!(
            [
                order::CREDIT_RELEASE,
                order::CREDIT_ACQUIRE,
                order::CQ_CI_RELEASE,
                order::BF_LOCK_ACQUIRE,
                order::BF_LOCK_RELEASE,
                order::SRQ_FREE_RELEASE,
            ],
            [Release, Acquire, Release, Acquire, Release, Release]
        );
        order::to_device_fence();
        order::from_device_fence();
        // Every mutant has a name of its own.
        for (i, (a, _)) in mutant::ALL.iter().enumerate() {
            assert!(mutant::ALL[i + 1..].iter().all(|(b, _)| a != b), "{a}");
        }
    }

    #[test]
    fn padded_is_two_lines() {
        let p = CachePadded(AtomicU32::new(3));
        assert_eq!(core::mem::align_of_val(&p), 128);
        assert_eq!(p.load(Ordering::Relaxed), 3);
    }
}
