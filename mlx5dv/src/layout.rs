//! The raw layouts `mlx5dv_init_obj` reports, from which the queues are built.
//!
//! These mirror `struct mlx5dv_qp` and `struct mlx5dv_cq` of `mlx5dv.h`, keeping only what the
//! data path uses, plus what the control path knows from queue-pair creation (the QP number and
//! the negotiated capabilities).

use core::ptr::NonNull;

/// One work queue's ring, as in `mlx5dv_qp.sq` / `mlx5dv_qp.rq`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WqLayout {
    /// First byte of the ring.
    pub buf: NonNull<u8>,
    /// Number of entries (basic blocks for the send queue); a power of two.
    pub wqe_cnt: u32,
    /// Bytes per entry: 64 for the send queue, `16 × max_recv_sge` rounded up to a power of
    /// two for the receive queue.
    pub stride: u32,
}

/// The BlueFlame / doorbell register, as in `mlx5dv_qp.bf`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BfLayout {
    /// The register: the doorbell, and when `size > 0` the first of two BlueFlame buffers of
    /// `size` bytes each.
    pub reg: NonNull<u8>,
    /// Bytes per BlueFlame buffer; 0 when the device offers none (doorbell-only: the kernel
    /// withholds BlueFlame when its write-combining self-test fails, or `MLX5_SHUT_UP_BF=1`).
    pub size: u32,
}

/// A queue pair's memory, as `mlx5dv_init_obj` reports it in `struct mlx5dv_qp`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpLayout {
    /// The QP number (from `ibv_qp.qp_num`).
    pub qpn: u32,
    /// The doorbell record: two big-endian words, `[MLX5_RCV_DBR]` and `[MLX5_SND_DBR]`.
    pub dbrec: NonNull<u32>,
    /// The send ring.
    pub sq: WqLayout,
    /// The receive ring (`wqe_cnt` 0 when the QP has none, e.g. with an SRQ).
    pub rq: WqLayout,
    /// The doorbell / BlueFlame register.
    pub bf: BfLayout,
}

/// A completion queue's memory, as `mlx5dv_init_obj` reports it in `struct mlx5dv_cq`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqLayout {
    /// The CQE ring.
    pub buf: NonNull<u8>,
    /// The doorbell record: `[MLX5_CQ_SET_CI]` and `[MLX5_CQ_ARM_DB]`, big-endian.
    pub dbrec: NonNull<u32>,
    /// Number of CQEs; a power of two.
    pub cqe_cnt: u32,
    /// Bytes per CQE: 64 or 128 (the 64-byte CQE is then the second half).
    pub cqe_size: u32,
    /// The CQ number.
    pub cqn: u32,
}

/// What the control path negotiated for a send queue: the core's, which checks requests
/// against it.
pub use zverbs_core::SqCaps;

/// Why a layout or capability set cannot drive a queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LayoutError {
    /// A ring size that is zero or not a power of two.
    NotPowerOfTwo {
        /// The offending count.
        count: u32,
    },
    /// A stride the device does not use (send: 64; receive: a power of two ≥ 16; CQE: 64 or 128).
    BadStride {
        /// The offending stride.
        stride: u32,
    },
    /// The largest WQE the capabilities allow does not fit the ring or the `ds` field.
    WqeTooLarge {
        /// Basic blocks the largest WQE needs.
        blocks: u32,
    },
    /// The ring is larger than the 16-bit WQE counter can address unambiguously (2^15).
    RingTooLarge {
        /// The offending count.
        count: u32,
    },
    /// Storage handed in for per-entry bookkeeping has the wrong length.
    StorageLength {
        /// Entries needed.
        needed: u32,
        /// Entries given.
        given: usize,
    },
    /// A receive queue built from a layout without one (`rq.wqe_cnt == 0`).
    NoReceiveQueue,
    /// A capability of zero where one is needed (`max_signaled`).
    ZeroCapacity,
    /// A shared BlueFlame register's state was made for another buffer size than the queue's.
    SharedBfSize {
        /// The size the [`SharedBf`](crate::SharedBf) was made for.
        register: u32,
        /// The queue's `bf.size`.
        queue: u32,
    },
}

impl core::fmt::Display for LayoutError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            LayoutError::NotPowerOfTwo { count } => {
                write!(f, "ring of {count} entries is not a power of two")
            }
            LayoutError::BadStride { stride } => write!(f, "unsupported stride {stride}"),
            LayoutError::WqeTooLarge { blocks } => {
                write!(f, "largest WQE needs {blocks} basic blocks, more than fit")
            }
            LayoutError::RingTooLarge { count } => {
                write!(f, "ring of {count} entries exceeds 32768")
            }
            LayoutError::StorageLength { needed, given } => {
                write!(f, "bookkeeping storage has {given} entries, needs {needed}")
            }
            LayoutError::NoReceiveQueue => f.write_str("the QP has no receive queue"),
            LayoutError::ZeroCapacity => f.write_str("max_signaled must be at least 1"),
            LayoutError::SharedBfSize { register, queue } => write!(
                f,
                "shared BlueFlame register of {register}-byte buffers for a queue with {queue}"
            ),
        }
    }
}

impl core::error::Error for LayoutError {}
