//! Compressed CQEs: the title CQE, the 8-byte mini-CQE (`struct mlx5_mini_cqe8` of the
//! kernel's `mlx5/device.h`) and the formats a CQ can be created with
//! (`enum mlx5dv_cqe_comp_res_format`).
//!
//! A CQ created with CQE compression (`mlx5dv_create_cq` with
//! `MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE`) may write a run of similar completions as one
//! *session* that takes as many ring entries as it has completions, `n`:
//!
//! - at consumer counter `ci`, the **title**: a full 64-byte CQE whose `op_own` format bits
//!   (3..2) are [`FORMAT_COMPRESSED`], whose `byte_cnt` is `n`, and whose other fields are
//!   those every completion of the session shares (QP, opcode, immediate, source, timestamp);
//!   its `wqe_counter` is the first completion's;
//! - at `ci + 1`, the first **array** of eight mini-CQEs; further arrays at `ci + 8`,
//!   `ci + 16`, ...: completion `j` of the session is mini-CQE `j % 8` of array `j / 8`;
//! - the other entries of the session are not written (holes). No entry but the title has a
//!   valid `op_own`: in an array, byte 63 is the last byte of mini-CQE 7.
//!
//! Only the title's owner bit says the session is there; the consumer takes the `n` entries
//! and must make every one of them look invalid again before handing them back to the device
//! (it is the device's only when its owner bit is of a later pass). These are the facts the
//! Linux driver's `mlx5e_decompress_cqes_*` and DPDK's mlx5 receive path rely on.

use super::{Field, get_be16, get_be32, set_be16, set_be32};

/// The bits of `op_own` that hold the CQE format (`mlx5dv_get_cqe_format`, bits 3..2).
pub const FORMAT_MASK: u8 = 0x0c;
/// Where the format starts in `op_own`.
pub const FORMAT_SHIFT: u32 = 2;
/// The format of a title CQE (`MLX5_COMPRESSED`): both inline-scatter bits set.
pub const FORMAT_COMPRESSED: u8 = 3;
/// Mini-CQEs in one array (one 64-byte ring entry).
pub const PER_ARRAY: usize = 8;

/// Field offsets of a mini-CQE (`struct mlx5_mini_cqe8`). The first word depends on the
/// format the CQ was created with, and on the side of the completion.
pub mod field {
    use super::Field;
    /// `rx_hash_result`: be32 of a responder mini-CQE in the hash format.
    pub const RX_HASH_RESULT: Field = 0..4;
    /// `checksum`: be16 of a responder mini-CQE in the checksum formats.
    pub const CHECKSUM: Field = 0..2;
    /// `stride_idx`: be16 of a responder mini-CQE in the checksum-and-stride-index format (a
    /// striding receive queue's stride; reserved otherwise).
    pub const STRIDE_IDX: Field = 2..4;
    /// `wqe_counter`: be16 of a requester mini-CQE (`s_wqe_info`).
    pub const WQE_COUNTER: Field = 0..2;
    /// `s_wqe_opcode`: u8 of a requester mini-CQE, the send opcode of the WQE.
    pub const S_WQE_OPCODE: usize = 2;
    /// `byte_cnt`: be32 of every mini-CQE.
    pub const BYTE_CNT: Field = 4..8;
    /// Size of a mini-CQE.
    pub const LEN: usize = 8;
}

const _: () = assert!(field::LEN * PER_ARRAY == 64);
const _: () = assert!(field::BYTE_CNT.start == 4 && field::BYTE_CNT.end == field::LEN);
const _: () = assert!(field::STRIDE_IDX.start == field::CHECKSUM.end);
const _: () = assert!(field::S_WQE_OPCODE == field::WQE_COUNTER.end);
const _: () = assert!(FORMAT_MASK == FORMAT_COMPRESSED << FORMAT_SHIFT);
const _: () = assert!(
    FORMAT_MASK == super::cqe::INLINE_SCATTER_32 | super::cqe::INLINE_SCATTER_64,
    "the compressed format shares its bits with the scatter flags"
);

/// The entry of a session, counted from its title, that holds array `k` (mini-CQEs
/// `8k .. 8k + 8`): the one after the title for the first, then the entry of the array's first
/// completion.
#[inline(always)]
pub const fn array_entry(k: u32) -> u32 {
    if k == 0 { 1 } else { k * PER_ARRAY as u32 }
}

/// Whether `op_own` is that of a title CQE (the format bits say compressed).
#[inline(always)]
pub const fn is_title(op_own: u8) -> bool {
    op_own & FORMAT_MASK == FORMAT_MASK
}

seg_view!(
    /// A view of an 8-byte mini-CQE.
    MiniCqe,
    field::LEN
);

impl<T: AsRef<[u8]>> MiniCqe<T> {
    /// `byte_cnt`: the bytes received (responder), or the READ length (requester).
    #[inline(always)]
    pub fn byte_cnt(&self) -> u32 {
        get_be32(self.buffer.as_ref(), field::BYTE_CNT)
    }
    /// `rx_hash_result` (hash format).
    #[inline]
    pub fn rx_hash_result(&self) -> u32 {
        get_be32(self.buffer.as_ref(), field::RX_HASH_RESULT)
    }
    /// `checksum` (checksum formats).
    #[inline]
    pub fn checksum(&self) -> u16 {
        get_be16(self.buffer.as_ref(), field::CHECKSUM)
    }
    /// `stride_idx` (checksum-and-stride-index format).
    #[inline]
    pub fn stride_idx(&self) -> u16 {
        get_be16(self.buffer.as_ref(), field::STRIDE_IDX)
    }
    /// `wqe_counter` of a requester mini-CQE.
    #[inline(always)]
    pub fn wqe_counter(&self) -> u16 {
        get_be16(self.buffer.as_ref(), field::WQE_COUNTER)
    }
    /// `s_wqe_opcode` of a requester mini-CQE.
    #[inline(always)]
    pub fn s_wqe_opcode(&self) -> u8 {
        self.buffer.as_ref()[field::S_WQE_OPCODE]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> MiniCqe<T> {
    /// Sets `byte_cnt`.
    #[inline]
    pub fn set_byte_cnt(&mut self, v: u32) {
        set_be32(self.buffer.as_mut(), field::BYTE_CNT, v);
    }
    /// Sets `rx_hash_result`.
    #[inline]
    pub fn set_rx_hash_result(&mut self, v: u32) {
        set_be32(self.buffer.as_mut(), field::RX_HASH_RESULT, v);
    }
    /// Sets `checksum`.
    #[inline]
    pub fn set_checksum(&mut self, v: u16) {
        set_be16(self.buffer.as_mut(), field::CHECKSUM, v);
    }
    /// Sets `stride_idx`.
    #[inline]
    pub fn set_stride_idx(&mut self, v: u16) {
        set_be16(self.buffer.as_mut(), field::STRIDE_IDX, v);
    }
    /// Sets `wqe_counter` (requester).
    #[inline]
    pub fn set_wqe_counter(&mut self, v: u16) {
        set_be16(self.buffer.as_mut(), field::WQE_COUNTER, v);
    }
    /// Sets `s_wqe_opcode` (requester).
    #[inline]
    pub fn set_s_wqe_opcode(&mut self, v: u8) {
        self.buffer.as_mut()[field::S_WQE_OPCODE] = v;
    }
}

/// What a responder mini-CQE carries besides `byte_cnt`: the CQ's `cqe_comp_res_format`
/// (`enum mlx5dv_cqe_comp_res_format`, one bit each, as the device reports the formats it
/// supports in `mlx5dv_cqe_comp_caps::supported_format`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MiniCqeFormat {
    /// The receive hash result (`MLX5DV_CQE_RES_FORMAT_HASH`).
    Hash,
    /// The checksum (`MLX5DV_CQE_RES_FORMAT_CSUM`).
    Csum,
    /// The checksum and the stride index (`MLX5DV_CQE_RES_FORMAT_CSUM_STRIDX`).
    CsumStridx,
}

impl MiniCqeFormat {
    /// Every format.
    pub const ALL: [Self; 3] = [Self::Hash, Self::Csum, Self::CsumStridx];

    /// The format's bit in `enum mlx5dv_cqe_comp_res_format`.
    #[inline]
    pub const fn to_raw(self) -> u8 {
        match self {
            Self::Hash => 1 << 0,
            Self::Csum => 1 << 1,
            Self::CsumStridx => 1 << 2,
        }
    }

    /// The format of a `cqe_comp_res_format` value, which names exactly one.
    #[inline]
    pub const fn from_raw(raw: u8) -> Option<Self> {
        match raw {
            1 => Some(Self::Hash),
            2 => Some(Self::Csum),
            4 => Some(Self::CsumStridx),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mini_cqe_bytes() {
        let mut b = [0u8; 8];
        let mut m = MiniCqe::new_unchecked(&mut b);
        m.set_checksum(0x1234);
        m.set_stride_idx(0x5678);
        m.set_byte_cnt(0x0a0b_0c0d);
        assert_eq!(b, [0x12, 0x34, 0x56, 0x78, 0x0a, 0x0b, 0x0c, 0x0d]);
        let m = MiniCqe::new_unchecked(&b);
        assert_eq!(m.rx_hash_result(), 0x1234_5678);
        assert_eq!((m.wqe_counter(), m.s_wqe_opcode()), (0x1234, 0x56));
        assert_eq!(m.byte_cnt(), 0x0a0b_0c0d);
        let mut r = [0u8; 8];
        let mut m = MiniCqe::new_unchecked(&mut r);
        m.set_wqe_counter(0xbeef);
        m.set_s_wqe_opcode(0x10);
        m.set_rx_hash_result(m.rx_hash_result() | 0xff);
        assert_eq!(r, [0xbe, 0xef, 0x10, 0xff, 0, 0, 0, 0]);
    }

    #[test]
    fn formats_are_the_header_bits() {
        for f in MiniCqeFormat::ALL {
            assert_eq!(MiniCqeFormat::from_raw(f.to_raw()), Some(f));
        }
        assert_eq!(MiniCqeFormat::Hash.to_raw(), 1);
        assert_eq!(MiniCqeFormat::Csum.to_raw(), 2);
        assert_eq!(MiniCqeFormat::CsumStridx.to_raw(), 4);
        for raw in [0, 3, 5, 8, 0xff] {
            assert_eq!(MiniCqeFormat::from_raw(raw), None, "{raw}");
        }
    }

    #[test]
    fn arrays_sit_after_the_title_then_at_their_first_completion() {
        assert_eq!(
            [0, 1, 2, 3].map(array_entry),
            [1, 8, 16, 24],
            "the second array is 7 entries after the first"
        );
    }

    #[test]
    fn title_is_format_three() {
        assert!(is_title(0x0c));
        assert!(is_title(0x2d));
        assert!(!is_title(0x04));
        assert!(!is_title(0x08));
        assert!(!is_title(0xf1));
    }
}
