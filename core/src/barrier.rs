//! Memory barriers named by purpose, one definition per architecture.
//!
//! Each DMA barrier has two jobs. Towards a **device** it is the instruction rdma-core uses.
//! Towards the **software device** (`zverbs-sim`, a Rust thread that reads the rings and writes
//! the CQEs) it must also be a fence in Rust's memory model, or the hand-off is a data race and
//! undefined behaviour whatever the hardware does. So [`to_device`] is `fence(Release)` and
//! [`from_device`] is `fence(Acquire)` on every architecture, plus the device-domain
//! instruction where the fence does not already emit one that covers the device:
//!
//! | purpose | Rust fence | x86_64 | aarch64 | rdma-core name |
//! |---|---|---|---|---|
//! | [`to_device`]: CPU stores to host memory are visible to the device before a later store (the doorbell record) | `Release` | nothing (stores are not reordered with stores; the fence only stops the compiler) | `dmb ish` (the fence) + `dmb oshst` | `udma_to_device_barrier` |
//! | [`from_device`]: a later load does not read host memory the device wrote before an earlier load (the CQE owner byte) | `Acquire` | nothing (loads are not reordered with loads) | `dmb ishld` (the fence) + `dmb oshld` | `udma_from_device_barrier` |
//! | [`wc_start`]: earlier stores (the doorbell record) reach memory before writes to write-combining MMIO | | `sfence` | `dsb st` | `mmio_wc_start` |
//! | [`wc_flush`]: write-combining buffers are flushed to the device now | | `sfence` | `dsb st` | `mmio_flush_writes` |
//!
//! On x86_64 DMA is cache-coherent and the two fences emit no instruction, so the direct path
//! costs what rdma-core's compiler barriers cost (the instruction counts in
//! docs/performance.md are unchanged by the fences). rdma-core uses `lfence` for
//! `from_device`; Linux's mlx5 driver (`dma_rmb()`) and UCX use a compiler barrier only: the
//! `lfence` makes a poll about four times slower and buys nothing on x86's load ordering.
//!
//! On aarch64 the fence orders the inner-shareable domain (other CPUs, the software device's
//! thread) and `dmb osh*` the outer-shareable one (the NIC): the first is what Rust's model
//! asks for, the second what rdma-core and UCX use for a device.
//!
//! Under Miri the write-combining barriers, which order MMIO and have no meaning for ordinary
//! memory, are compiler fences (Miri runs no inline assembly); the DMA barriers are the same
//! fences as everywhere, which Miri checks.
//!
//! Under `cfg(zverbs_loom)` the DMA barriers are loom's `fence(Release)` / `fence(Acquire)`,
//! so that loom checks that the backends put them where they are needed. Their fences are
//! [`sync::order`](crate::sync::order)'s, where the mutants `no_to_device` / `no_from_device`
//! remove them, for the loom tests that prove the models catch their absence.

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!(
    "zverbs-core defines device memory barriers for x86_64 and aarch64 only; \
     add this architecture's barriers to barrier.rs"
);

use crate::sync::order;

/// Orders earlier stores to DMA memory (work queue entries) before later stores (a doorbell
/// record) as seen by the device, and by the software device's thread.
#[inline(always)]
pub fn to_device() {
    order::to_device_fence();
    #[cfg(all(target_arch = "aarch64", not(zverbs_loom), not(miri)))]
    // SAFETY: `dmb oshst` is a barrier instruction; it touches no memory or registers.
    unsafe {
        core::arch::asm!("dmb oshst", options(nostack, preserves_flags))
    };
}

/// Orders an earlier load of DMA memory (a CQE's owner byte) before later loads (the rest of
/// the CQE), so that nothing is read from before the device's write of it.
#[inline(always)]
pub fn from_device() {
    order::from_device_fence();
    #[cfg(all(target_arch = "aarch64", not(zverbs_loom), not(miri)))]
    // SAFETY: `dmb oshld` is a barrier instruction; it touches no memory or registers.
    unsafe {
        core::arch::asm!("dmb oshld", options(nostack, preserves_flags))
    };
}

/// Orders earlier stores (the doorbell record) before the stores to write-combining MMIO that
/// follow (BlueFlame or the doorbell register).
#[inline(always)]
pub fn wc_start() {
    #[cfg(any(zverbs_loom, miri))]
    core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::SeqCst);
    #[cfg(all(not(zverbs_loom), not(miri), target_arch = "x86_64"))]
    // SAFETY: `sfence` is a store barrier; it touches no memory or registers.
    unsafe {
        core::arch::asm!("sfence", options(nostack, preserves_flags))
    };
    #[cfg(all(not(zverbs_loom), not(miri), target_arch = "aarch64"))]
    // SAFETY: `dsb st` is a barrier instruction; it touches no memory or registers.
    unsafe {
        core::arch::asm!("dsb st", options(nostack, preserves_flags))
    };
}

/// Flushes this CPU's write-combining buffers towards the device, so a BlueFlame write is not
/// held back and is not merged with a later one.
#[inline(always)]
pub fn wc_flush() {
    wc_start();
}

#[cfg(test)]
mod tests {
    #[test]
    fn barriers_execute() {
        // They have no observable effect on one thread; this runs each instruction once on
        // the host architecture so an invalid encoding would fault here.
        super::to_device();
        super::from_device();
        super::wc_start();
        super::wc_flush();
    }
}
