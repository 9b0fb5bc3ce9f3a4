//! Memory barriers named by purpose, one definition per architecture.
//!
//! | purpose | x86_64 | aarch64 | rdma-core name |
//! |---|---|---|---|
//! | [`to_device`]: CPU stores to host memory are visible to the device before a later store (the doorbell record) | compiler barrier | `dmb oshst` | `udma_to_device_barrier` |
//! | [`from_device`]: a later load does not read host memory the device wrote before an earlier load (the CQE owner byte) | compiler barrier | `dmb oshld` | `udma_from_device_barrier` |
//! | [`wc_start`]: earlier stores (the doorbell record) reach memory before writes to write-combining MMIO | `sfence` | `dsb st` | `mmio_wc_start` |
//! | [`wc_flush`]: write-combining buffers are flushed to the device now | `sfence` | `dsb st` | `mmio_flush_writes` |
//!
//! On x86_64 stores are not reordered with other stores, nor loads with other loads, and DMA is
//! cache-coherent, so the two DMA barriers only have to stop the compiler. rdma-core uses
//! `lfence` for `from_device`; Linux's mlx5 driver (`dma_rmb()`) and UCX use a compiler barrier,
//! which is what this module does: the `lfence` makes a poll about four times slower and buys
//! nothing on x86's load ordering.
//!
//! Under `cfg(zverbs_loom)` the DMA barriers become loom's `fence(Release)` / `fence(Acquire)`
//! so that loom can check that the backends put them where they are needed, and the
//! write-combining barriers (which order MMIO, invisible to loom) compile to nothing.
//! Under `cfg(zverbs_mutant = "no_to_device")` / `"no_from_device"` the named barrier is
//! removed, for the loom tests that prove the models catch its absence.

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!(
    "zverbs-core defines device memory barriers for x86_64 and aarch64 only; \
     add this architecture's barriers to barrier.rs"
);

/// Orders earlier stores to DMA memory (work queue entries) before later stores (a doorbell
/// record) as seen by the device.
#[inline(always)]
pub fn to_device() {
    #[cfg(zverbs_mutant = "no_to_device")]
    return;
    #[cfg(all(zverbs_loom, not(zverbs_mutant = "no_to_device")))]
    crate::sync::atomic::fence(crate::sync::atomic::Ordering::Release);
    #[cfg(all(not(zverbs_loom), target_arch = "x86_64"))]
    core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::SeqCst);
    #[cfg(all(not(zverbs_loom), target_arch = "aarch64"))]
    // SAFETY: `dmb oshst` is a barrier instruction; it touches no memory or registers.
    unsafe {
        core::arch::asm!("dmb oshst", options(nostack, preserves_flags))
    };
}

/// Orders an earlier load of DMA memory (a CQE's owner byte) before later loads (the rest of
/// the CQE), so that nothing is read from before the device's write of it.
#[inline(always)]
pub fn from_device() {
    #[cfg(zverbs_mutant = "no_from_device")]
    return;
    #[cfg(all(zverbs_loom, not(zverbs_mutant = "no_from_device")))]
    crate::sync::atomic::fence(crate::sync::atomic::Ordering::Acquire);
    #[cfg(all(not(zverbs_loom), target_arch = "x86_64"))]
    core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::SeqCst);
    #[cfg(all(not(zverbs_loom), target_arch = "aarch64"))]
    // SAFETY: `dmb oshld` is a barrier instruction; it touches no memory or registers.
    unsafe {
        core::arch::asm!("dmb oshld", options(nostack, preserves_flags))
    };
}

/// Orders earlier stores (the doorbell record) before the stores to write-combining MMIO that
/// follow (BlueFlame or the doorbell register).
#[inline(always)]
pub fn wc_start() {
    #[cfg(zverbs_loom)]
    core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::SeqCst);
    #[cfg(all(not(zverbs_loom), target_arch = "x86_64"))]
    // SAFETY: `sfence` is a store barrier; it touches no memory or registers.
    unsafe {
        core::arch::asm!("sfence", options(nostack, preserves_flags))
    };
    #[cfg(all(not(zverbs_loom), target_arch = "aarch64"))]
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
