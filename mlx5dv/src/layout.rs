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

/// A shared receive queue's memory, as `mlx5dv_init_obj` reports it in `struct mlx5dv_srq`,
/// with what the control path knows from its creation (the WQE count).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SrqLayout {
    /// The SRQ number (`mlx5dv_srq.srqn`, asked for with `MLX5DV_SRQ_MASK_SRQN`).
    pub srqn: u32,
    /// The ring of receive WQEs.
    pub buf: NonNull<u8>,
    /// The doorbell record: one big-endian word, the count of receives posted.
    pub dbrec: NonNull<u32>,
    /// Bytes per WQE: a next segment and data segments, a power of two.
    pub stride: u32,
    /// Number of WQEs, a power of two (libmlx5: `max_wr + 1` rounded up).
    pub wqe_cnt: u32,
    /// The first WQE of the free list: the next receive goes there.
    pub head: u32,
    /// The last WQE of the free list.
    pub tail: u32,
}

/// What the control path negotiated for a send queue: the core's, which checks requests
/// against it.
pub use zverbs_core::{SqCaps, Transport};

/// Why a layout or capability set cannot drive a queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LayoutError {
    /// A ring size that is zero or not a power of two.
    #[error("ring of {count} entries is not a power of two")]
    NotPowerOfTwo {
        /// The offending count.
        count: u32,
    },
    /// A stride the device does not use (send: 64; receive: a power of two ≥ 16; CQE: 64 or 128).
    #[error("unsupported stride {stride}")]
    BadStride {
        /// The offending stride.
        stride: u32,
    },
    /// The largest WQE the capabilities allow does not fit the ring or the `ds` field.
    #[error("largest WQE needs {blocks} basic blocks, more than fit")]
    WqeTooLarge {
        /// Basic blocks the largest WQE needs.
        blocks: u32,
    },
    /// The ring is larger than the 16-bit WQE counter can address unambiguously (2^15).
    #[error("ring of {count} entries exceeds 32768")]
    RingTooLarge {
        /// The offending count.
        count: u32,
    },
    /// Storage handed in for per-entry bookkeeping has the wrong length.
    #[error("bookkeeping storage has {given} entries, needs {needed}")]
    StorageLength {
        /// Entries needed.
        needed: u32,
        /// Entries given.
        given: usize,
    },
    /// A receive queue built from a layout without one (`rq.wqe_cnt == 0`).
    #[error("the QP has no receive queue")]
    NoReceiveQueue,
    /// A shared receive queue whose free list ends lie outside its ring.
    #[error("SRQ free list from {head} to {tail} lies outside its ring")]
    SrqFreeList {
        /// The layout's `head`.
        head: u32,
        /// The layout's `tail`.
        tail: u32,
    },
    /// Capabilities whose transport is not the queue's (`SqCaps::transport` against the
    /// queue's type: [`SendQueue::new`](crate::SendQueue::new) is for RC queues,
    /// [`SendQueue::new_ud`](crate::SendQueue::new_ud) for UD ones).
    #[error("the capabilities' transport is not the queue's")]
    Transport,
    /// A minimum of inlined frame bytes an Ethernet queue cannot have: libmlx5 inlines 0 or 18
    /// (`MLX5_ETH_L2_INLINE_HEADER_SIZE`) bytes, as the context's `eth_min_inline` says; any
    /// other transport inlines none.
    #[error("{bytes} minimum inline frame bytes: an Ethernet queue takes 0 or 18, others 0")]
    MinInline {
        /// The minimum given.
        bytes: u16,
    },
    /// A capability of zero where one is needed (`max_signaled`).
    #[error("max_signaled must be at least 1")]
    ZeroCapacity,
    /// A register a send queue cannot store to: with BlueFlame (`bf.size > 0`) it must be
    /// 16-byte aligned, because a post copies whole 16-byte segments into it, and without
    /// (doorbell only) 8-byte aligned, for the 8-byte doorbell. A register `mlx5dv_init_obj`
    /// reports always is (a BlueFlame buffer is `bf.size`-aligned in its UAR page).
    #[error("the doorbell/BlueFlame register at {addr:#x} is not {align}-byte aligned")]
    BfMisaligned {
        /// The layout's `bf.reg`.
        addr: usize,
        /// The alignment it needs: 16 with BlueFlame, 8 without.
        align: u32,
    },
    /// BlueFlame buffers whose size is not a whole number of 64-byte basic blocks: the second
    /// buffer, at `bf.reg + bf.size`, would not be aligned for the stores a post makes. A
    /// device's buffers are (256 bytes on ConnectX; `bf.size == 0` when there are none).
    #[error("BlueFlame buffers of {size} bytes: not a multiple of 64")]
    BfSize {
        /// The layout's `bf.size`.
        size: u32,
    },
    /// Stride parameters of a striding receive queue outside what a ConnectX takes: strides
    /// of 2^6 to 2^13 bytes, 2^3 to 2^16 of them a WQE (`mlx5dv_striding_rq_caps`).
    #[error("striding queue with 2^{log_num_strides} strides of 2^{log_stride_size} bytes")]
    Strides {
        /// log2 of the strides per WQE.
        log_num_strides: u32,
        /// log2 of the bytes per stride.
        log_stride_size: u32,
    },
    /// The buffer of a striding receive queue holds fewer bytes than its WQEs name.
    #[error("stride buffer of {given} bytes, the WQEs need {needed}")]
    StrideBuffer {
        /// Bytes the WQEs name (`wqe_cnt × strides × stride size`).
        needed: usize,
        /// Bytes given.
        given: usize,
    },
    /// A shared BlueFlame register's state was made for another buffer size than the queue's.
    #[error("shared BlueFlame register of {register}-byte buffers for a queue with {queue}")]
    SharedBfSize {
        /// The size the [`SharedBf`](crate::SharedBf) was made for.
        register: u32,
        /// The queue's `bf.size`.
        queue: u32,
    },
}
