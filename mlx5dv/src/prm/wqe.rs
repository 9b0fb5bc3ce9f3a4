//! Send and receive WQE segments (`struct mlx5_wqe_*_seg` in `mlx5dv.h`).
//!
//! A send WQE is a control segment followed by operation segments, in 16-byte units, laid into
//! 64-byte basic blocks:
//!
//! | operation | segments |
//! |---|---|
//! | WRITE, WRITE_IMM | ctrl, raddr, data × n or inline |
//! | SEND, SEND_IMM | ctrl, data × n or inline |
//! | READ | ctrl, raddr, data × n |
//! | ATOMIC_CS, ATOMIC_FA | ctrl, raddr, atomic, data (8 bytes): one basic block |
//! | NOP | ctrl |
//!
//! A receive WQE is `max_recv_sge` data segments at the RQ stride; a shorter list ends with a
//! data segment whose lkey is [`INVALID_LKEY`](super::INVALID_LKEY).

use super::{Field, get_be32, get_be64, set_be32, set_be64};

/// Field offsets of the control segment (`struct mlx5_wqe_ctrl_seg`, packed, align 4).
pub mod ctrl {
    use super::Field;
    /// `opmod_idx_opcode`: be32 `opmod << 24 | wqe_index << 8 | opcode`.
    pub const OPMOD_IDX_OPCODE: Field = 0..4;
    /// `qpn_ds`: be32 `qpn << 8 | ds`.
    pub const QPN_DS: Field = 4..8;
    /// `signature`: u8.
    pub const SIGNATURE: usize = 8;
    /// `dci_stream_channel_id`: be16.
    pub const DCI_STREAM_CHANNEL_ID: Field = 9..11;
    /// `fm_ce_se`: u8 of fence mode, completion and solicited-event bits.
    pub const FM_CE_SE: usize = 11;
    /// `imm`: be32 immediate data (copied as given: verbs' `imm_data` is already big-endian).
    pub const IMM: Field = 12..16;
    /// Size of the segment.
    pub const LEN: usize = 16;
}

/// Field offsets of the remote address segment (`struct mlx5_wqe_raddr_seg`).
pub mod raddr {
    use super::Field;
    /// `raddr`: be64 remote virtual address.
    pub const RADDR: Field = 0..8;
    /// `rkey`: be32 remote key.
    pub const RKEY: Field = 8..12;
    /// `reserved`: 4 bytes, zero.
    pub const RESERVED: Field = 12..16;
    /// Size of the segment.
    pub const LEN: usize = 16;
}

/// Field offsets of the data segment (`struct mlx5_wqe_data_seg`).
pub mod data {
    use super::Field;
    /// `byte_count`: be32 length.
    pub const BYTE_COUNT: Field = 0..4;
    /// `lkey`: be32 local key.
    pub const LKEY: Field = 4..8;
    /// `addr`: be64 local virtual address.
    pub const ADDR: Field = 8..16;
    /// Size of the segment.
    pub const LEN: usize = 16;
}

/// Field offsets of the inline segment header (`struct mlx5_wqe_inline_seg`).
pub mod inline {
    use super::Field;
    /// `byte_count`: be32 `len | MLX5_INLINE_SEG`.
    pub const BYTE_COUNT: Field = 0..4;
    /// Where the inline data starts; it runs on through the following 16-byte units, padded
    /// to a multiple of 16 together with the header.
    pub const DATA: usize = 4;
    /// Size of the header.
    pub const HEADER_LEN: usize = 4;
}

/// Field offsets of the atomic segment (`struct mlx5_wqe_atomic_seg`).
pub mod atomic {
    use super::Field;
    /// `swap_add`: be64 swap value (CS) or addend (FA).
    pub const SWAP_ADD: Field = 0..8;
    /// `compare`: be64 compare value (CS), unused by FA.
    pub const COMPARE: Field = 8..16;
    /// Size of the segment.
    pub const LEN: usize = 16;
}

// Plain `const` asserts: each names its failing comparison (`const_assert!` reports an overflow).
const _: () = assert!(ctrl::LEN == 16 && ctrl::IMM.end == ctrl::LEN);
const _: () = assert!(ctrl::QPN_DS.start == 4 && ctrl::SIGNATURE == 8);
const _: () = assert!(ctrl::DCI_STREAM_CHANNEL_ID.start == 9 && ctrl::FM_CE_SE == 11);
const _: () = assert!(raddr::LEN == 16 && raddr::RKEY.start == 8);
const _: () = assert!(data::LEN == 16 && data::LKEY.start == 4 && data::ADDR.start == 8);
const _: () = assert!(atomic::LEN == 16 && atomic::COMPARE.start == 8);
const _: () = assert!(inline::DATA == 4);

seg_view!(
    /// A view of a control segment.
    CtrlSeg,
    ctrl::LEN
);

impl<T: AsRef<[u8]>> CtrlSeg<T> {
    /// Raw `opmod_idx_opcode`.
    #[inline]
    pub fn opmod_idx_opcode(&self) -> u32 {
        get_be32(self.buffer.as_ref(), ctrl::OPMOD_IDX_OPCODE)
    }
    /// The opcode (low byte of `opmod_idx_opcode`).
    #[inline]
    pub fn opcode(&self) -> u8 {
        self.opmod_idx_opcode() as u8
    }
    /// The 16-bit WQE index (the producer counter in basic blocks when the WQE was built).
    #[inline]
    pub fn wqe_index(&self) -> u16 {
        (self.opmod_idx_opcode() >> 8) as u16
    }
    /// The opcode modifier.
    #[inline]
    pub fn opmod(&self) -> u8 {
        (self.opmod_idx_opcode() >> 24) as u8
    }
    /// Raw `qpn_ds`.
    #[inline]
    pub fn qpn_ds(&self) -> u32 {
        get_be32(self.buffer.as_ref(), ctrl::QPN_DS)
    }
    /// The QP number.
    #[inline]
    pub fn qpn(&self) -> u32 {
        self.qpn_ds() >> 8
    }
    /// The WQE size in 16-byte segments (`ds`, 6 bits).
    #[inline]
    pub fn ds(&self) -> u8 {
        (self.qpn_ds() & 0x3f) as u8
    }
    /// `signature`.
    #[inline]
    pub fn signature(&self) -> u8 {
        self.buffer.as_ref()[ctrl::SIGNATURE]
    }
    /// `fm_ce_se`.
    #[inline]
    pub fn fm_ce_se(&self) -> u8 {
        self.buffer.as_ref()[ctrl::FM_CE_SE]
    }
    /// `imm` as stored: the big-endian wire value, returned as the host integer it encodes.
    #[inline]
    pub fn imm(&self) -> u32 {
        get_be32(self.buffer.as_ref(), ctrl::IMM)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> CtrlSeg<T> {
    /// Writes the whole segment, as `mlx5dv_set_ctrl_seg` does, and also zeroes
    /// `dci_stream_channel_id` (which that helper leaves alone) so that no stale byte from an
    /// earlier WQE survives. `imm` is the host value of the big-endian wire immediate.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub fn set(
        &mut self,
        wqe_index: u16,
        opcode: u8,
        opmod: u8,
        qpn: u32,
        fm_ce_se: u8,
        ds: u8,
        imm: u32,
    ) {
        let b = self.buffer.as_mut();
        set_be32(
            b,
            ctrl::OPMOD_IDX_OPCODE,
            (u32::from(opmod) << 24) | (u32::from(wqe_index) << 8) | u32::from(opcode),
        );
        set_be32(b, ctrl::QPN_DS, (qpn << 8) | u32::from(ds));
        // `signature`, `dci_stream_channel_id` and `fm_ce_se` in one store: bytes 8..12 are
        // [0, 0, 0, fm_ce_se].
        const _: () = assert!(ctrl::SIGNATURE == 8 && ctrl::FM_CE_SE == 11);
        set_be32(b, ctrl::SIGNATURE..ctrl::FM_CE_SE + 1, u32::from(fm_ce_se));
        set_be32(b, ctrl::IMM, imm);
    }
}

seg_view!(
    /// A view of a remote address segment.
    RaddrSeg,
    raddr::LEN
);

impl<T: AsRef<[u8]>> RaddrSeg<T> {
    /// Remote virtual address.
    #[inline]
    pub fn raddr(&self) -> u64 {
        get_be64(self.buffer.as_ref(), raddr::RADDR)
    }
    /// Remote key.
    #[inline]
    pub fn rkey(&self) -> u32 {
        get_be32(self.buffer.as_ref(), raddr::RKEY)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> RaddrSeg<T> {
    /// Writes the segment with a zero reserved word.
    #[inline(always)]
    pub fn set(&mut self, raddr: u64, rkey: u32) {
        let b = self.buffer.as_mut();
        set_be64(b, raddr::RADDR, raddr);
        set_be32(b, raddr::RKEY, rkey);
        set_be32(b, raddr::RESERVED, 0);
    }
}

seg_view!(
    /// A view of a data (scatter/gather) segment, in send and receive WQEs.
    DataSeg,
    data::LEN
);

impl<T: AsRef<[u8]>> DataSeg<T> {
    /// Length in bytes.
    #[inline]
    pub fn byte_count(&self) -> u32 {
        get_be32(self.buffer.as_ref(), data::BYTE_COUNT)
    }
    /// Local key.
    #[inline]
    pub fn lkey(&self) -> u32 {
        get_be32(self.buffer.as_ref(), data::LKEY)
    }
    /// Local virtual address.
    #[inline]
    pub fn addr(&self) -> u64 {
        get_be64(self.buffer.as_ref(), data::ADDR)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> DataSeg<T> {
    /// Writes the segment, as `mlx5dv_set_data_seg` does.
    #[inline(always)]
    pub fn set(&mut self, byte_count: u32, lkey: u32, addr: u64) {
        let b = self.buffer.as_mut();
        set_be32(b, data::BYTE_COUNT, byte_count);
        set_be32(b, data::LKEY, lkey);
        set_be64(b, data::ADDR, addr);
    }
}

seg_view!(
    /// A view of an atomic segment.
    AtomicSeg,
    atomic::LEN
);

impl<T: AsRef<[u8]>> AtomicSeg<T> {
    /// Swap value (CS) or addend (FA).
    #[inline]
    pub fn swap_add(&self) -> u64 {
        get_be64(self.buffer.as_ref(), atomic::SWAP_ADD)
    }
    /// Compare value (CS).
    #[inline]
    pub fn compare(&self) -> u64 {
        get_be64(self.buffer.as_ref(), atomic::COMPARE)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AtomicSeg<T> {
    /// Writes the segment. For fetch-and-add pass `compare = 0`.
    #[inline(always)]
    pub fn set(&mut self, swap_add: u64, compare: u64) {
        let b = self.buffer.as_mut();
        set_be64(b, atomic::SWAP_ADD, swap_add);
        set_be64(b, atomic::COMPARE, compare);
    }
}

/// The inline segment header: `byte_count` with [`INLINE_SEG`](super::INLINE_SEG) set.
#[inline(always)]
pub const fn inline_byte_count(len: u32) -> u32 {
    len | super::INLINE_SEG
}

/// Size in 16-byte segments of an inline segment carrying `len` bytes (0 when `len` is 0:
/// libmlx5 writes no inline segment at all for an empty inline payload).
#[inline(always)]
pub const fn inline_ds(len: usize) -> usize {
    if len == 0 {
        0
    } else {
        (len + inline::HEADER_LEN).div_ceil(super::WQE_SEG)
    }
}

/// Reads a raw inline header: `Some(len)` when the `MLX5_INLINE_SEG` bit is set.
#[inline]
pub fn parse_inline_header(b: &[u8]) -> Option<u32> {
    let v = get_be32(b, inline::BYTE_COUNT);
    (v & super::INLINE_SEG != 0).then_some(v & !super::INLINE_SEG)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Golden bytes: libmlx5 (rdma-core 44) posting an RDMA_WRITE of 256 bytes, signaled, on
    // QPN 0x100 at producer index 0 (the emulated ConnectX demo).
    const WRITE_WQE: [u8; 48] = [
        0x00, 0x00, 0x00, 0x08, 0x00, 0x01, 0x00, 0x03, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00,
        0x00, // ctrl
        0x00, 0x00, 0x7f, 0x00, 0x00, 0x00, 0x10, 0x00, 0xde, 0xad, 0xbe, 0xef, 0x00, 0x00, 0x00,
        0x00, // raddr
        0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x11, 0x00, 0x00, 0x00, 0x55, 0xa7, 0xb9, 0xcd, 0x50,
        0x00, // data
    ];

    #[test]
    fn ctrl_construct_and_deconstruct() {
        let mut b = [0xffu8; 16];
        CtrlSeg::new_unchecked(&mut b).set(
            0,
            super::super::opcode::RDMA_WRITE,
            0,
            0x100,
            0x08,
            3,
            0,
        );
        assert_eq!(b, WRITE_WQE[..16]);
        let v = CtrlSeg::new_unchecked(&b);
        assert_eq!(v.opcode(), 0x08);
        assert_eq!(v.wqe_index(), 0);
        assert_eq!(v.qpn(), 0x100);
        assert_eq!(v.ds(), 3);
        assert_eq!(v.fm_ce_se(), 0x08);
        assert_eq!(v.signature(), 0);
    }

    #[test]
    fn ctrl_index_opmod_imm() {
        let mut b = [0u8; 16];
        CtrlSeg::new_unchecked(&mut b).set(
            0xbeef,
            0x0b,
            0x5a,
            0x00ab_cdef,
            0x80,
            0x3f,
            0xcafe_f00d,
        );
        assert_eq!(
            b,
            [
                0x5a, 0xbe, 0xef, 0x0b, 0xab, 0xcd, 0xef, 0x3f, 0, 0, 0, 0x80, 0xca, 0xfe, 0xf0,
                0x0d
            ]
        );
        let v = CtrlSeg::new_unchecked(&b);
        assert_eq!((v.opmod(), v.wqe_index(), v.opcode()), (0x5a, 0xbeef, 0x0b));
        assert_eq!(v.imm(), 0xcafe_f00d);
    }

    #[test]
    fn raddr_and_data_construct_and_deconstruct() {
        let mut r = [0xffu8; 16];
        RaddrSeg::new_unchecked(&mut r).set(0x7f00_0000_1000, 0xdead_beef);
        assert_eq!(r, WRITE_WQE[16..32]);
        let rv = RaddrSeg::new_unchecked(&r);
        assert_eq!((rv.raddr(), rv.rkey()), (0x7f00_0000_1000, 0xdead_beef));

        let mut d = [0u8; 16];
        DataSeg::new_unchecked(&mut d).set(0x100, 0x1100, 0x55a7_b9cd_5000);
        assert_eq!(d, WRITE_WQE[32..48]);
        let dv = DataSeg::new_unchecked(&d);
        assert_eq!(
            (dv.byte_count(), dv.lkey(), dv.addr()),
            (0x100, 0x1100, 0x55a7_b9cd_5000)
        );
    }

    #[test]
    fn atomic_construct_and_deconstruct() {
        let mut a = [0u8; 16];
        AtomicSeg::new_unchecked(&mut a).set(0x0102_0304_0506_0708, 0x1112_1314_1516_1718);
        assert_eq!(
            a,
            [
                1, 2, 3, 4, 5, 6, 7, 8, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18
            ]
        );
        let v = AtomicSeg::new_unchecked(&a);
        assert_eq!(v.swap_add(), 0x0102_0304_0506_0708);
        assert_eq!(v.compare(), 0x1112_1314_1516_1718);
    }

    #[test]
    fn inline_sizes_and_header() {
        assert_eq!(inline_ds(0), 0);
        assert_eq!(inline_ds(1), 1);
        assert_eq!(inline_ds(12), 1);
        assert_eq!(inline_ds(13), 2);
        assert_eq!(inline_ds(20), 2); // libmlx5's 20-byte "Hello" inline SEND: ds 1 + 2
        assert_eq!(inline_byte_count(20).to_be_bytes(), [0x80, 0, 0, 0x14]);
        assert_eq!(parse_inline_header(&[0x80, 0, 0, 0x14]), Some(20));
        assert_eq!(parse_inline_header(&[0, 0, 1, 0]), None);
    }

    #[test]
    fn checked_views_refuse_short_buffers() {
        assert_eq!(
            CtrlSeg::new_checked(&[0u8; 15][..]),
            Err(super::super::Truncated)
        );
        assert!(DataSeg::new_checked(&[0u8; 16][..]).is_ok());
        extern crate std;
        use std::string::ToString;
        assert_eq!(
            super::super::Truncated.to_string(),
            "buffer shorter than the layout"
        );
    }
}
