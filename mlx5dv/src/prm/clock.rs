//! The device clock's shared page and the values `mlx5dv_get_clock_info` copies out of it.
//!
//! The kernel keeps a timecounter over the device's free-running cycle counter
//! (`hca_core_clock`, kHz) and publishes its state in a page the context maps read-only
//! (`struct ib_uverbs_clock_info`, `MLX5_IB_MMAP_CLOCK_INFO` with index
//! `MLX5_IB_CLOCK_INFO_V1`). Host byte order, not the device's: the kernel writes it.
//!
//! `sign` is a sequence word: the writer sets [`MLX5_IB_CLOCK_INFO_KERNEL_UPDATING`] before it changes
//! the page and advances the word when done; a reader copies the fields between two loads of
//! `sign` that are equal and even, else reads again. `mlx5dv_get_clock_info` gives up with
//! `EBUSY` after ten loads that all see an update in progress.
//!
//! Converting a CQE timestamp (`mlx5dv_ts_to_ns`): the distance from `cycles` masked by `mask`;
//! when it exceeds `mask / 2` the timestamp is taken as older than `cycles`, and
//! `nsec ∓ ((delta · mult) ∓ frac) >> shift` is the wall-clock time in nanoseconds
//! (`CLOCK_REALTIME`, which the kernel's timecounter follows). The page must be read again at
//! least every `overflow_period` ns (`max_clock_info_update_nsec` of `mlx5dv_query_device`).

/// The `sign` bit set while the kernel updates the page (`MLX5_IB_CLOCK_INFO_KERNEL_UPDATING`).
pub const MLX5_IB_CLOCK_INFO_KERNEL_UPDATING: u32 = 1;

/// The mmap command of the clock-info page (`MLX5_IB_MMAP_CLOCK_INFO`).
pub const MLX5_IB_MMAP_CLOCK_INFO: u64 = 7;
/// The mmap command of the raw core-clock register page (`MLX5_IB_MMAP_CORE_CLOCK`).
pub const MLX5_IB_MMAP_CORE_CLOCK: u64 = 5;
/// The shift of an mmap command in the page offset (`MLX5_IB_MMAP_CMD_SHIFT`).
pub const MLX5_IB_MMAP_CMD_SHIFT: u64 = 8;
/// The page index of the first clock-info version (`MLX5_IB_CLOCK_INFO_V1`), and its bit in
/// `clock_info_versions` of the context answer.
pub const MLX5_IB_CLOCK_INFO_V1: u64 = 0;

/// The page offset (in pages) at which libmlx5 maps the clock-info page:
/// `MLX5_IB_MMAP_CLOCK_INFO << MLX5_IB_MMAP_CMD_SHIFT | MLX5_IB_CLOCK_INFO_V1`.
pub const CLOCK_INFO_PGOFF: u64 =
    (MLX5_IB_MMAP_CLOCK_INFO << MLX5_IB_MMAP_CMD_SHIFT) | MLX5_IB_CLOCK_INFO_V1;

/// `struct ib_uverbs_clock_info` (the page the kernel shares), field for field.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[allow(non_camel_case_types)]
pub struct ib_uverbs_clock_info {
    /// `__u32 sign`: the sequence word.
    pub sign: u32,
    /// `__u32 resv`.
    pub resv: u32,
    /// `__aligned_u64 nsec`: the time, in ns, at `cycles`.
    pub nsec: u64,
    /// `__aligned_u64 cycles`: the counter at the last update.
    pub cycles: u64,
    /// `__aligned_u64 frac`: the fractional nanoseconds at `cycles` (scaled by `2^shift`).
    pub frac: u64,
    /// `__u32 mult`: nanoseconds per cycle, scaled by `2^shift`.
    pub mult: u32,
    /// `__u32 shift`.
    pub shift: u32,
    /// `__aligned_u64 mask`: the counter's width.
    pub mask: u64,
    /// `__aligned_u64 overflow_period`: ns after which the page must be read again.
    pub overflow_period: u64,
}

/// `struct mlx5dv_clock_info` (what `mlx5dv_get_clock_info` fills), field for field.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[allow(non_camel_case_types)]
pub struct mlx5dv_clock_info {
    /// `uint64_t nsec`.
    pub nsec: u64,
    /// `uint64_t last_cycles`.
    pub last_cycles: u64,
    /// `uint64_t frac`.
    pub frac: u64,
    /// `uint32_t mult`.
    pub mult: u32,
    /// `uint32_t shift`.
    pub shift: u32,
    /// `uint64_t mask`.
    pub mask: u64,
}

const _: () = assert!(core::mem::size_of::<ib_uverbs_clock_info>() == 56);
const _: () = assert!(core::mem::offset_of!(ib_uverbs_clock_info, nsec) == 8);
const _: () = assert!(core::mem::offset_of!(ib_uverbs_clock_info, cycles) == 16);
const _: () = assert!(core::mem::offset_of!(ib_uverbs_clock_info, frac) == 24);
const _: () = assert!(core::mem::offset_of!(ib_uverbs_clock_info, mult) == 32);
const _: () = assert!(core::mem::offset_of!(ib_uverbs_clock_info, shift) == 36);
const _: () = assert!(core::mem::offset_of!(ib_uverbs_clock_info, mask) == 40);
const _: () = assert!(core::mem::offset_of!(ib_uverbs_clock_info, overflow_period) == 48);
const _: () = assert!(core::mem::size_of::<mlx5dv_clock_info>() == 40);
const _: () = assert!(core::mem::offset_of!(mlx5dv_clock_info, mult) == 24);
const _: () = assert!(core::mem::offset_of!(mlx5dv_clock_info, mask) == 32);
const _: () = assert!(CLOCK_INFO_PGOFF == 0x700);
