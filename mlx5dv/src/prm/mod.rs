//! Raw mlx5 layouts and constants, named as `<infiniband/mlx5dv.h>` (rdma-core) names them.
//!
//! This module makes no policy decisions: it says where each field is and what each number
//! means. Views follow smoltcp's `wire` style: a view wraps any `AsRef<[u8]>`, `field` modules
//! give each field's byte range, accessors convert from and to big-endian, and compile-time
//! assertions pin every size and offset (checked again against the C header by the
//! `zverbs-crosscheck` tests).
//!
//! Values read from the device (CQE opcodes, syndromes) decode to enums with an `Unknown`
//! variant: an unexpected number is data, never a panic.

/// A byte view type over any `AsRef<[u8]>` of at least `$len` bytes, with the constructors
/// every layout shares (smoltcp's `wire` style); the layout's accessors are added beside it.
macro_rules! seg_view {
    ($(#[$m:meta])* $name:ident, $len:expr) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub struct $name<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $name<T> {
            /// Size of the layout in bytes.
            pub const LEN: usize = $len;

            /// A view over `buffer` without checking its length; accessors panic if it is
            /// shorter than [`Self::LEN`]. Use fixed-size arrays to make the check disappear.
            #[inline(always)]
            pub const fn new_unchecked(buffer: T) -> Self {
                Self { buffer }
            }

            /// A view over `buffer`, or [`Truncated`](crate::prm::Truncated) if it is shorter
            /// than [`Self::LEN`].
            ///
            /// # Errors
            ///
            /// [`Truncated`](crate::prm::Truncated) when `buffer` is too short.
            #[inline]
            pub fn new_checked(buffer: T) -> Result<Self, crate::prm::Truncated> {
                if buffer.as_ref().len() < Self::LEN {
                    Err(crate::prm::Truncated)
                } else {
                    Ok(Self { buffer })
                }
            }

            /// The underlying buffer.
            #[inline(always)]
            pub fn into_inner(self) -> T {
                self.buffer
            }
        }
    };
}

pub mod clock;
pub mod cqe;
pub mod dv;
pub mod mini;
pub mod wqe;

/// A byte range of a field inside a segment.
pub type Field = core::ops::Range<usize>;

/// Size of a send WQE basic block (`MLX5_SEND_WQE_BB`).
pub const SEND_WQE_BB: usize = 64;
/// Size of a WQE segment, the unit of the control segment's `ds` count (an octoword).
pub const WQE_SEG: usize = 16;
/// Segments per basic block.
pub const SEGS_PER_BB: usize = SEND_WQE_BB / WQE_SEG;
/// The largest `ds` a control segment can carry (6 bits).
pub const MAX_DS: usize = 0x3f;

/// Index of the receive counter in a QP's doorbell record (`MLX5_RCV_DBR`).
pub const RCV_DBR: usize = 0;
/// Index of the send counter in a QP's doorbell record (`MLX5_SND_DBR`).
pub const SND_DBR: usize = 1;
/// Index of the consumer counter in a CQ's doorbell record (`MLX5_CQ_SET_CI`).
pub const CQ_SET_CI: usize = 0;
/// Index of the arm word in a CQ's doorbell record (`MLX5_CQ_ARM_DB`).
pub const CQ_ARM_DB: usize = 1;

/// Flag in an inline segment's byte count (`MLX5_INLINE_SEG`).
pub const INLINE_SEG: u32 = 0x8000_0000;
/// The lkey that ends a short receive scatter list (`MLX5_INVALID_LKEY`).
pub const INVALID_LKEY: u32 = 0x100;
/// Flag in an address vector's `dqp_dct` (bit 31, `MLX5_EXTENDED_UD_AV`): libmlx5 sets it on
/// every UD and DC send.
pub const EXTENDED_UD_AV: u32 = 0x8000_0000;

/// Send WQE opcodes (`MLX5_OPCODE_*`), the low byte of `opmod_idx_opcode`.
pub mod opcode {
    /// No operation.
    pub const NOP: u8 = 0x00;
    /// RDMA WRITE.
    pub const RDMA_WRITE: u8 = 0x08;
    /// RDMA WRITE with immediate.
    pub const RDMA_WRITE_IMM: u8 = 0x09;
    /// SEND.
    pub const SEND: u8 = 0x0a;
    /// SEND with immediate.
    pub const SEND_IMM: u8 = 0x0b;
    /// RDMA READ.
    pub const RDMA_READ: u8 = 0x10;
    /// 8-byte atomic compare-and-swap.
    pub const ATOMIC_CS: u8 = 0x11;
    /// 8-byte atomic fetch-and-add.
    pub const ATOMIC_FA: u8 = 0x12;
}

/// Bits of the control segment's `fm_ce_se` byte (`MLX5_WQE_CTRL_*`).
pub mod fm_ce_se {
    /// Ask for a CQE when the WQE completes (`MLX5_WQE_CTRL_CQ_UPDATE`, 2 << 2).
    pub const CQ_UPDATE: u8 = 2 << 2;
    /// Solicited event (`MLX5_WQE_CTRL_SOLICITED`, 1 << 1).
    pub const SOLICITED: u8 = 1 << 1;
    /// Fence: wait for earlier READs and atomics (`MLX5_WQE_CTRL_FENCE`, 4 << 5), what
    /// libmlx5 sets for `IBV_SEND_FENCE`.
    pub const FENCE: u8 = 4 << 5;
    /// Initiator small fence (`MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE`, 1 << 5).
    pub const INITIATOR_SMALL_FENCE: u8 = 1 << 5;
}

/// Checksum offload bits of the Ethernet segment's `cs_flags` (`MLX5_ETH_WQE_*_CSUM`).
pub mod cs_flags {
    /// The inner (tunnelled) IPv4 header checksum (`MLX5_ETH_WQE_L3_INNER_CSUM`, 1 << 4).
    pub const L3_INNER: u8 = 1 << 4;
    /// The inner TCP/UDP checksum (`MLX5_ETH_WQE_L4_INNER_CSUM`, 1 << 5).
    pub const L4_INNER: u8 = 1 << 5;
    /// The IPv4 header checksum (`MLX5_ETH_WQE_L3_CSUM`, 1 << 6).
    pub const L3: u8 = 1 << 6;
    /// The TCP/UDP checksum (`MLX5_ETH_WQE_L4_CSUM`, 1 << 7).
    pub const L4: u8 = 1 << 7;
    /// What libmlx5 sets for `IBV_SEND_IP_CSUM`: both outer checksums, `0xc0`.
    pub const IP_CSUM: u8 = L3 | L4;
}

/// Frame bytes libmlx5 inlines into the Ethernet segment when the device asks for a minimum
/// (`MLX5_ETH_L2_INLINE_HEADER_SIZE`: destination and source MAC, a VLAN tag, EtherType).
pub const ETH_L2_INLINE_HEADER_SIZE: u16 = 18;

/// Reads a big-endian `u16` at `f`.
#[inline(always)]
pub(crate) fn get_be16(b: &[u8], f: Field) -> u16 {
    let mut a = [0u8; 2];
    a.copy_from_slice(&b[f]);
    u16::from_be_bytes(a)
}

/// Reads a big-endian `u32` at `f`.
#[inline(always)]
pub(crate) fn get_be32(b: &[u8], f: Field) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[f]);
    u32::from_be_bytes(a)
}

/// Reads a big-endian `u64` at `f`.
#[inline(always)]
pub(crate) fn get_be64(b: &[u8], f: Field) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[f]);
    u64::from_be_bytes(a)
}

/// Writes `v` big-endian at `f`.
#[inline(always)]
pub(crate) fn set_be16(b: &mut [u8], f: Field, v: u16) {
    b[f].copy_from_slice(&v.to_be_bytes());
}

/// Writes `v` big-endian at `f`.
#[inline(always)]
pub(crate) fn set_be32(b: &mut [u8], f: Field, v: u32) {
    b[f].copy_from_slice(&v.to_be_bytes());
}

/// Writes `v` big-endian at `f`.
#[inline(always)]
pub(crate) fn set_be64(b: &mut [u8], f: Field, v: u64) {
    b[f].copy_from_slice(&v.to_be_bytes());
}

/// A buffer shorter than the view needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("buffer shorter than the layout")]
pub struct Truncated;

/// Offset of the CQ doorbell in a UAR page (`MLX5_CQ_DOORBELL`): the 64-bit register an arm
/// request is written to, big-endian, the arm word in its first four bytes and the CQ number
/// in the last four.
pub const CQ_DOORBELL: usize = 0x20;

/// The CQ arm word: what `dbrec[MLX5_CQ_ARM_DB]` holds and the first half of the CQ
/// doorbell carries (`sn << 28 | cmd | ci`, as libmlx5's `mlx5_arm_cq` composes it).
pub mod cq_arm {
    /// Arm for the next completion of any kind (`MLX5_CQ_DB_REQ_NOT`).
    pub const REQ_NOT: u32 = 0;
    /// Arm for the next solicited (or error) completion only (`MLX5_CQ_DB_REQ_NOT_SOL`).
    pub const REQ_NOT_SOL: u32 = 1 << 24;
    /// The command's bits (24..27).
    pub const CMD_MASK: u32 = 0x0f00_0000;
    /// Where the arm sequence number starts (bits 28..29).
    pub const SN_SHIFT: u32 = 28;
    /// The arm sequence number's bits once shifted down (it counts events modulo 4).
    pub const SN_MASK: u32 = 3;
    /// The consumer index's bits (0..23).
    pub const CI_MASK: u32 = 0x00ff_ffff;

    /// The arm word for sequence number `sn` (modulo 4), the command that `solicited` picks
    /// and consumer index `ci` (its low 24 bits).
    #[inline(always)]
    pub const fn word(sn: u32, solicited: bool, ci: u32) -> u32 {
        let cmd = if solicited { REQ_NOT_SOL } else { REQ_NOT };
        ((sn & SN_MASK) << SN_SHIFT) | cmd | (ci & CI_MASK)
    }

    /// The 64-bit CQ doorbell value for `word` and CQ `cqn`, in host order: the arm word in
    /// the high half, the CQ number in the low half (written big-endian, as
    /// `mmio_write64_be` does).
    #[inline(always)]
    pub const fn doorbell(word: u32, cqn: u32) -> u64 {
        ((word as u64) << 32) | cqn as u64
    }

    /// A decoded arm word: `(sn, solicited, ci)`.
    #[inline(always)]
    pub const fn decode(word: u32) -> (u32, bool, u32) {
        (
            (word >> SN_SHIFT) & SN_MASK,
            word & CMD_MASK == REQ_NOT_SOL,
            word & CI_MASK,
        )
    }

    const _: () = assert!(word(3, true, 0x0123_4567) == 0x3123_4567);
    const _: () = assert!(word(1, false, 5) == 0x1000_0005);
    const _: () = assert!(doorbell(0x1000_0005, 0x400) == 0x1000_0005_0000_0400);
}
