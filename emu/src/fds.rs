//! Which file descriptors are the emulator's uverbs devices: one bit per descriptor below 4096,
//! and a second bit for those opened on the Ethernet function. The interposed `open` marks a
//! descriptor, `close` clears it, and the device asks which function a descriptor belongs to.

use core::ffi::c_int;
use core::sync::atomic::{AtomicU64, Ordering};

/// Descriptors below 4096 opened for a uverbs device, one bit each.
static FDS: [AtomicU64; 64] = [const { AtomicU64::new(0) }; 64];

/// Of those, the descriptors opened for the Ethernet function's uverbs device
/// ([`crate::sysfs::ETH_UVERBS`]).
static ETH_FDS: [AtomicU64; 64] = [const { AtomicU64::new(0) }; 64];

fn fd_bit(fd: c_int) -> Option<(usize, u64)> {
    let fd = usize::try_from(fd).ok()?;
    (fd < 64 * 64).then(|| (fd / 64, 1u64 << (fd % 64)))
}

/// Whether `fd` is an emulated uverbs device.
pub(crate) fn is_fake(fd: c_int) -> bool {
    fd_bit(fd).is_some_and(|(w, b)| FDS[w].load(Ordering::Relaxed) & b != 0)
}

/// Whether `fd` is a context of the emulated Ethernet function (`mlx5_1`).
pub(crate) fn is_ethernet(fd: c_int) -> bool {
    fd_bit(fd).is_some_and(|(w, b)| ETH_FDS[w].load(Ordering::Relaxed) & b != 0)
}

/// Marks `fd` as an emulated uverbs device of the Ethernet function or the InfiniBand one;
/// false when the descriptor is too high to be served.
pub(crate) fn mark(fd: c_int, ethernet: bool) -> bool {
    let Some((w, b)) = fd_bit(fd) else {
        return false;
    };
    FDS[w].fetch_or(b, Ordering::Relaxed);
    if ethernet {
        ETH_FDS[w].fetch_or(b, Ordering::Relaxed);
    } else {
        ETH_FDS[w].fetch_and(!b, Ordering::Relaxed);
    }
    true
}

/// Clears `fd`'s mark; whether it was an emulated uverbs device.
pub(crate) fn forget(fd: c_int) -> bool {
    fd_bit(fd).is_some_and(|(w, b)| FDS[w].fetch_and(!b, Ordering::Relaxed) & b != 0)
}
