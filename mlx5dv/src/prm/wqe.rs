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
//! | SEND, SEND_IMM on a UD QP | ctrl, datagram, data × n or inline |
//! | SEND on a raw packet QP | ctrl, Ethernet (+ inlined frame bytes), data × n or inline |
//!
//! On a UD QP the control and datagram segments fill the first basic block exactly
//! ([`UD_HEADER_DS`] units), so the datagram segment never wraps around the end of the ring; a
//! SEND of one data segment is 80 bytes, two basic blocks. The datagram segment is the
//! address vector (`struct mlx5_wqe_av`) that `mlx5dv_init_obj(MLX5DV_OBJ_AH)` hands out for
//! an address handle, with the remote QPN and Q_Key of the request written over it
//! ([`DatagramSeg::set_from_av`], what libmlx5's `set_datagram_seg` does per post).
//!
//! A receive WQE is `max_recv_sge` data segments at the RQ stride; a shorter list ends with a
//! data segment whose lkey is [`INVALID_LKEY`](super::INVALID_LKEY).
//!
//! A shared receive queue's WQE starts with a next segment ([`SrqNextSeg`]) that links the
//! free WQEs into a list by index; its data segments follow at [`SRQ_DATA`], as many as
//! [`srq_max_gs`] of the stride, a shorter list again ending with `INVALID_LKEY`.

use super::{Field, get_be16, get_be32, get_be64, set_be16, set_be32, set_be64};

pub mod words;

/// Stores segment `s` at the start of `b`.
#[inline(always)]
fn put_seg(b: &mut [u8], s: words::Seg) {
    b[..8].copy_from_slice(&s[0].to_ne_bytes());
    b[8..16].copy_from_slice(&s[1].to_ne_bytes());
}

/// Stores a datagram segment's words `w` at the start of `b`.
#[inline(always)]
fn put_av(b: &mut [u8], w: [u64; 6]) {
    for (c, w) in b[..av::LEN].chunks_exact_mut(8).zip(w) {
        c.copy_from_slice(&w.to_ne_bytes());
    }
}

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

/// Field offsets of the address vector (`struct mlx5_wqe_av`), the whole of the datagram
/// segment (`struct mlx5_wqe_datagram_seg`).
pub mod av {
    use super::Field;
    /// `key.qkey.qkey`: be32 Q_Key of a UD request.
    pub const QKEY: Field = 0..4;
    /// `key.qkey.reserved`: 4 bytes, zero in a UD address vector.
    pub const QKEY_RESERVED: Field = 4..8;
    /// `key.dc_key`: be64 DC access key, the same 8 bytes as `key.qkey` (a union).
    pub const DC_KEY: Field = 0..8;
    /// `dqp_dct`: be32 destination QP (UD) or DCT (DC) number in bits 23..0, with
    /// [`EXTENDED_UD_AV`](crate::prm::EXTENDED_UD_AV) in bit 31.
    pub const DQP_DCT: Field = 8..12;
    /// `stat_rate_sl`: u8, the static rate in bits 7..4, the SL (InfiniBand) or priority
    /// (RoCE, bits 3..1) below.
    pub const STAT_RATE_SL: usize = 12;
    /// `fl_mlid`: u8, force-loopback bit 7 and the source LID path bits 6..0 (InfiniBand).
    pub const FL_MLID: usize = 13;
    /// `rlid`: be16 remote LID (InfiniBand) or UDP source port (RoCE v2).
    pub const RLID: Field = 14..16;
    /// `reserved0`: 4 bytes.
    pub const RESERVED0: Field = 16..20;
    /// `rmac`: the remote MAC address (RoCE), 6 bytes.
    pub const RMAC: Field = 20..26;
    /// `tclass`: u8, the GRH traffic class (IPv6 traffic class, IPv4 ToS).
    pub const TCLASS: usize = 26;
    /// `hop_limit`: u8, the GRH hop limit (IPv6 hop limit, IPv4 TTL).
    pub const HOP_LIMIT: usize = 27;
    /// `grh_gid_fl`: be32, the GRH bit, the source GID index and the flow label.
    pub const GRH_GID_FL: Field = 28..32;
    /// `rgid`: the remote GID (or IP address), 16 bytes.
    pub const RGID: Field = 32..48;
    /// Size of the address vector and of the datagram segment.
    pub const LEN: usize = 48;
}

/// Field offsets of the Ethernet segment of a raw packet QP's send WQE
/// (`struct mlx5_wqe_eth_seg`, 32 bytes as declared). The frame's first `inline_hdr_sz`
/// bytes start at [`INLINE_HDR_START`](eth::INLINE_HDR_START) and run on through the
/// following 16-byte units (wrapping at the ring's end as inline data does): the segment takes
/// [`eth_ds`] units.
pub mod eth {
    use super::Field;
    /// `rsvd0` (DPDK: `swp_offs`): 4 bytes, zero.
    pub const RSVD0: Field = 0..4;
    /// `cs_flags`: u8 of checksum offload bits ([`cs_flags`](crate::prm::cs_flags)).
    pub const CS_FLAGS: usize = 4;
    /// `rsvd1` (DPDK: `swp_flags`): u8, zero.
    pub const RSVD1: usize = 5;
    /// `mss`: be16 TSO segment size; zero for a SEND.
    pub const MSS: Field = 6..8;
    /// `rsvd2` (DPDK: `metadata`): 4 bytes, zero.
    pub const RSVD2: Field = 8..12;
    /// `inline_hdr_sz`: be16 count of frame bytes inlined from [`INLINE_HDR_START`] on.
    pub const INLINE_HDR_SZ: Field = 12..14;
    /// `inline_hdr_start`: where the inlined frame bytes start (the first two here).
    pub const INLINE_HDR_START: usize = 14;
    /// `inline_hdr`: the next 16 inlined bytes (the declared struct's end).
    pub const INLINE_HDR: Field = 16..32;
    /// Size of the segment as declared (with 18 inlined bytes).
    pub const LEN: usize = 32;
}

/// Size in 16-byte units of an Ethernet segment inlining `inline_hdr_sz` frame bytes: one
/// unit holds the fields and the first two bytes, each further 16 bytes one more
/// (libmlx5: `(offsetof(eth_seg, inline_hdr) + inl_hdr_size) >> 4` for 0 and 18 bytes).
#[inline(always)]
pub const fn eth_ds(inline_hdr_sz: usize) -> usize {
    1 + inline_hdr_sz.saturating_sub(2).div_ceil(super::WQE_SEG)
}

/// Field offsets of the next segment at the head of a shared receive WQE
/// (`struct mlx5_wqe_srq_next_seg`).
pub mod srq_next {
    use super::Field;
    /// `rsvd0`: 2 bytes.
    pub const RSVD0: Field = 0..2;
    /// `next_wqe_index`: be16 index of the next WQE of the free list.
    pub const NEXT_WQE_INDEX: Field = 2..4;
    /// `signature`: u8.
    pub const SIGNATURE: usize = 4;
    /// `rsvd1`: 11 bytes.
    pub const RSVD1: Field = 5..16;
    /// Size of the segment.
    pub const LEN: usize = 16;
}

/// Where a shared receive WQE's first data segment starts: right after its next segment.
pub const SRQ_DATA: usize = srq_next::LEN;

/// The data segments a shared receive WQE of `stride` bytes holds (libmlx5's `max_gs`): what
/// is left after the next segment, in 16-byte segments.
#[inline(always)]
pub const fn srq_max_gs(stride: usize) -> usize {
    stride.saturating_sub(SRQ_DATA) / data::LEN
}

/// The 16-byte units of a UD send WQE's fixed part, the control and datagram segments: one
/// basic block.
pub const UD_HEADER_DS: usize = (ctrl::LEN + av::LEN) / super::WQE_SEG;

// Plain `const` asserts: each names its failing comparison (`const_assert!` reports an overflow).
const _: () = assert!(ctrl::LEN == 16 && ctrl::IMM.end == ctrl::LEN);
const _: () = assert!(ctrl::QPN_DS.start == 4 && ctrl::SIGNATURE == 8);
const _: () = assert!(ctrl::DCI_STREAM_CHANNEL_ID.start == 9 && ctrl::FM_CE_SE == 11);
const _: () = assert!(raddr::LEN == 16 && raddr::RKEY.start == 8);
const _: () = assert!(data::LEN == 16 && data::LKEY.start == 4 && data::ADDR.start == 8);
const _: () = assert!(atomic::LEN == 16 && atomic::COMPARE.start == 8);
const _: () = assert!(inline::DATA == 4);
const _: () = assert!(av::LEN == 48 && av::RGID.end == av::LEN && av::DQP_DCT.start == 8);
const _: () = assert!(av::STAT_RATE_SL == 12 && av::FL_MLID == 13 && av::RLID.start == 14);
const _: () = assert!(av::RMAC.start == 20 && av::TCLASS == 26 && av::HOP_LIMIT == 27);
const _: () = assert!(av::GRH_GID_FL.start == 28 && av::RGID.start == 32);
const _: () = assert!(av::QKEY.start == av::DC_KEY.start && av::QKEY_RESERVED.end == 8);
const _: () = assert!(srq_next::LEN == 16 && srq_next::NEXT_WQE_INDEX.start == 2);
const _: () = assert!(srq_next::SIGNATURE == 4 && srq_next::RSVD1.end == srq_next::LEN);
const _: () = assert!(SRQ_DATA == 16);
const _: () = assert!(eth::CS_FLAGS == 4 && eth::RSVD1 == 5 && eth::MSS.start == 6);
const _: () = assert!(eth::RSVD2.start == 8 && eth::INLINE_HDR_SZ.start == 12);
const _: () = assert!(eth::INLINE_HDR_START == 14 && eth::INLINE_HDR.end == eth::LEN);
const _: () = assert!(eth_ds(0) == 1 && eth_ds(2) == 1 && eth_ds(18) == 2 && eth_ds(42) == 4);
const _: () = assert!(UD_HEADER_DS == 4 && ctrl::LEN + av::LEN == super::SEND_WQE_BB);

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
        put_seg(
            self.buffer.as_mut(),
            words::ctrl(wqe_index, opcode, opmod, qpn, fm_ce_se, ds, imm),
        );
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
        put_seg(self.buffer.as_mut(), words::raddr(raddr, rkey));
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
    /// Writes the segment, as `mlx5dv_set_data_seg` does: the bytes of [`words::data`],
    /// stored field by field (a first word built of the two 32-bit fields costs an
    /// instruction more where the fields arrive in registers of their own).
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
        put_seg(self.buffer.as_mut(), words::atomic(swap_add, compare));
    }
}

seg_view!(
    /// A view of a datagram segment (`struct mlx5_wqe_datagram_seg`), which is one address
    /// vector (`struct mlx5_wqe_av`): also the view of the 48 bytes `mlx5dv_init_obj` points
    /// to for an address handle. Every multi-byte field is big-endian, as the device reads it.
    DatagramSeg,
    av::LEN
);

impl<T: AsRef<[u8]>> DatagramSeg<T> {
    /// The Q_Key (`key.qkey.qkey`).
    #[inline]
    pub fn qkey(&self) -> u32 {
        get_be32(self.buffer.as_ref(), av::QKEY)
    }
    /// The DC access key (`key.dc_key`, the same bytes as the Q_Key and its reserved word).
    #[inline]
    pub fn dc_key(&self) -> u64 {
        get_be64(self.buffer.as_ref(), av::DC_KEY)
    }
    /// Raw `dqp_dct`.
    #[inline]
    pub fn dqp_dct(&self) -> u32 {
        get_be32(self.buffer.as_ref(), av::DQP_DCT)
    }
    /// The destination QP (or DCT) number: the low 24 bits of `dqp_dct`.
    #[inline]
    pub fn dqp(&self) -> u32 {
        self.dqp_dct() & 0x00ff_ffff
    }
    /// Whether `dqp_dct` carries [`EXTENDED_UD_AV`](super::EXTENDED_UD_AV).
    #[inline]
    pub fn extended(&self) -> bool {
        self.dqp_dct() & super::EXTENDED_UD_AV != 0
    }
    /// `stat_rate_sl`.
    #[inline]
    pub fn stat_rate_sl(&self) -> u8 {
        self.buffer.as_ref()[av::STAT_RATE_SL]
    }
    /// `fl_mlid`.
    #[inline]
    pub fn fl_mlid(&self) -> u8 {
        self.buffer.as_ref()[av::FL_MLID]
    }
    /// `rlid`.
    #[inline]
    pub fn rlid(&self) -> u16 {
        get_be16(self.buffer.as_ref(), av::RLID)
    }
    /// `rmac`.
    #[inline]
    pub fn rmac(&self) -> [u8; 6] {
        let mut m = [0u8; 6];
        m.copy_from_slice(&self.buffer.as_ref()[av::RMAC]);
        m
    }
    /// `tclass`.
    #[inline]
    pub fn tclass(&self) -> u8 {
        self.buffer.as_ref()[av::TCLASS]
    }
    /// `hop_limit`.
    #[inline]
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[av::HOP_LIMIT]
    }
    /// `grh_gid_fl`.
    #[inline]
    pub fn grh_gid_fl(&self) -> u32 {
        get_be32(self.buffer.as_ref(), av::GRH_GID_FL)
    }
    /// `rgid`.
    #[inline]
    pub fn rgid(&self) -> [u8; 16] {
        let mut g = [0u8; 16];
        g.copy_from_slice(&self.buffer.as_ref()[av::RGID]);
        g
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> DatagramSeg<T> {
    /// What a UD send writes per post, as libmlx5's `set_datagram_seg` does: the address
    /// vector `av` (48 bytes in device byte order, as `mlx5dv_init_obj(MLX5DV_OBJ_AH)` hands it
    /// out), then `dqp_dct = remote_qpn | EXTENDED_UD_AV` and the Q_Key over it.
    ///
    /// `remote_qpn` is stored as given, like libmlx5 does: a value above 24 bits spills into
    /// the top byte. Checking it is the caller's business.
    #[inline(always)]
    pub fn set_from_av(&mut self, av: &[u8; av::LEN], remote_qpn: u32, qkey: u32) {
        put_av(self.buffer.as_mut(), words::datagram(av, remote_qpn, qkey));
    }
    /// What a DC initiator writes per request, as libmlx5's `mlx5dv_wr_set_dc_addr` does: the
    /// address vector `av` (as for [`DatagramSeg::set_from_av`]), then the DCT number and
    /// [`EXTENDED_UD_AV`](super::EXTENDED_UD_AV) or-ed into the vector's `dqp_dct`, and the
    /// access key over `key.dc_key` (all 8 bytes).
    ///
    /// `dctn` is stored as given: a value above 24 bits spills into the top byte. Checking it
    /// is the caller's business.
    #[inline(always)]
    pub fn set_dc_from_av(&mut self, av: &[u8; av::LEN], dctn: u32, dc_key: u64) {
        put_av(self.buffer.as_mut(), words::dc_datagram(av, dctn, dc_key));
    }
    /// Sets the Q_Key (`key.qkey.qkey`) alone.
    #[inline]
    pub fn set_qkey(&mut self, v: u32) {
        set_be32(self.buffer.as_mut(), av::QKEY, v);
    }
    /// Sets the whole 8-byte key (`key.dc_key`): what `mlx5dv_set_dgram_seg` writes, so a UD
    /// Q_Key passed this way lands in the reserved word (bytes 4..8), not in `key.qkey.qkey`.
    #[inline]
    pub fn set_dc_key(&mut self, v: u64) {
        set_be64(self.buffer.as_mut(), av::DC_KEY, v);
    }
    /// Sets `dqp_dct` (all 32 bits).
    #[inline]
    pub fn set_dqp_dct(&mut self, v: u32) {
        set_be32(self.buffer.as_mut(), av::DQP_DCT, v);
    }
    /// Sets `stat_rate_sl`.
    #[inline]
    pub fn set_stat_rate_sl(&mut self, v: u8) {
        self.buffer.as_mut()[av::STAT_RATE_SL] = v;
    }
    /// Sets `fl_mlid`.
    #[inline]
    pub fn set_fl_mlid(&mut self, v: u8) {
        self.buffer.as_mut()[av::FL_MLID] = v;
    }
    /// Sets `rlid`.
    #[inline]
    pub fn set_rlid(&mut self, v: u16) {
        set_be16(self.buffer.as_mut(), av::RLID, v);
    }
    /// Sets `rmac`.
    #[inline]
    pub fn set_rmac(&mut self, v: &[u8; 6]) {
        self.buffer.as_mut()[av::RMAC].copy_from_slice(v);
    }
    /// Sets `tclass`.
    #[inline]
    pub fn set_tclass(&mut self, v: u8) {
        self.buffer.as_mut()[av::TCLASS] = v;
    }
    /// Sets `hop_limit`.
    #[inline]
    pub fn set_hop_limit(&mut self, v: u8) {
        self.buffer.as_mut()[av::HOP_LIMIT] = v;
    }
    /// Sets `grh_gid_fl`.
    #[inline]
    pub fn set_grh_gid_fl(&mut self, v: u32) {
        set_be32(self.buffer.as_mut(), av::GRH_GID_FL, v);
    }
    /// Sets `rgid`.
    #[inline]
    pub fn set_rgid(&mut self, v: &[u8; 16]) {
        self.buffer.as_mut()[av::RGID].copy_from_slice(v);
    }
}

seg_view!(
    /// A view of the next segment that heads a shared receive WQE
    /// (`struct mlx5_wqe_srq_next_seg`): the link of the SRQ's list of free WQEs.
    SrqNextSeg,
    srq_next::LEN
);

impl<T: AsRef<[u8]>> SrqNextSeg<T> {
    /// `next_wqe_index`: the WQE after this one in the free list.
    #[inline]
    pub fn next_wqe_index(&self) -> u16 {
        get_be16(self.buffer.as_ref(), srq_next::NEXT_WQE_INDEX)
    }
    /// `signature`.
    #[inline]
    pub fn signature(&self) -> u8 {
        self.buffer.as_ref()[srq_next::SIGNATURE]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> SrqNextSeg<T> {
    /// Sets `next_wqe_index` alone, the two bytes libmlx5 writes when it links a WQE into the
    /// free list.
    #[inline(always)]
    pub fn set_next_wqe_index(&mut self, v: u16) {
        set_be16(self.buffer.as_mut(), srq_next::NEXT_WQE_INDEX, v);
    }
    /// Sets `signature`.
    #[inline]
    pub fn set_signature(&mut self, v: u8) {
        self.buffer.as_mut()[srq_next::SIGNATURE] = v;
    }
    /// Writes the whole segment: `next_wqe_index`, every other byte zero (a freshly linked
    /// ring, as libmlx5 builds one in zeroed memory).
    #[inline]
    pub fn set(&mut self, next_wqe_index: u16) {
        let b = self.buffer.as_mut();
        b[..srq_next::LEN].fill(0);
        set_be16(b, srq_next::NEXT_WQE_INDEX, next_wqe_index);
    }
}

seg_view!(
    /// A view of the first 16 bytes of an Ethernet segment (`struct mlx5_wqe_eth_seg`): its
    /// fields and the first two inlined frame bytes. The rest of the inlined bytes follow in
    /// the next units ([`eth_ds`]).
    EthSeg,
    super::WQE_SEG
);

impl<T: AsRef<[u8]>> EthSeg<T> {
    /// The checksum offload bits.
    #[inline]
    pub fn cs_flags(&self) -> u8 {
        self.buffer.as_ref()[eth::CS_FLAGS]
    }
    /// The TSO segment size (0 for a SEND).
    #[inline]
    pub fn mss(&self) -> u16 {
        get_be16(self.buffer.as_ref(), eth::MSS)
    }
    /// How many frame bytes are inlined from byte 14 on.
    #[inline]
    pub fn inline_hdr_sz(&self) -> u16 {
        get_be16(self.buffer.as_ref(), eth::INLINE_HDR_SZ)
    }
    /// The first two inlined frame bytes.
    #[inline]
    pub fn inline_hdr_start(&self) -> [u8; 2] {
        let b = self.buffer.as_ref();
        [b[eth::INLINE_HDR_START], b[eth::INLINE_HDR_START + 1]]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthSeg<T> {
    /// Writes the segment's fields (`cs_flags`, `mss` 0, `inline_hdr_sz`; the reserved bytes
    /// zero, as libmlx5's `memset`) and the first two inlined bytes `start` (zeros when none
    /// are inlined).
    #[inline(always)]
    pub fn set(&mut self, cs_flags: u8, inline_hdr_sz: u16, start: [u8; 2]) {
        put_seg(
            self.buffer.as_mut(),
            words::eth(cs_flags, inline_hdr_sz, start),
        );
    }
}

/// The first 16 bytes of an Ethernet segment ([`EthSeg::set`], [`words::eth`]).
#[inline(always)]
pub fn eth_seg_head(cs_flags: u8, inline_hdr_sz: u16, start: [u8; 2]) -> [u8; 16] {
    words::to_bytes(words::eth(cs_flags, inline_hdr_sz, start))
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

    // An address vector as libmlx5's `mlx5_create_ah` lays one out for an InfiniBand
    // multicast group: SL 3, no rate limit, LID 0xc001, a GRH with source GID index 0, flow
    // label 0, hop limit 64, group ff12:401b:ffff::1.
    const MCAST_AV: [u8; 48] = [
        0, 0, 0, 0, 0, 0, 0, 0, // key
        0, 0, 0, 0, // dqp_dct
        0x03, 0x00, 0xc0, 0x01, // stat_rate_sl, fl_mlid, rlid
        0, 0, 0, 0, // reserved0
        0, 0, 0, 0, 0, 0, 0x00, 0x40, // rmac, tclass, hop_limit
        0x40, 0, 0, 0, // grh_gid_fl
        0xff, 0x12, 0x40, 0x1b, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, // rgid
    ];

    #[test]
    fn datagram_seg_from_av_sets_qpn_and_qkey() {
        let mut b = [0x5au8; 48];
        DatagramSeg::new_unchecked(&mut b).set_from_av(&MCAST_AV, 0xff_ffff, 0x1111_1111);
        let mut want = MCAST_AV;
        want[0..4].copy_from_slice(&[0x11, 0x11, 0x11, 0x11]);
        want[8..12].copy_from_slice(&[0x80, 0xff, 0xff, 0xff]);
        assert_eq!(b, want);
        let v = DatagramSeg::new_unchecked(&b);
        assert_eq!(
            (v.qkey(), v.dqp(), v.extended()),
            (0x1111_1111, 0xff_ffff, true)
        );
        assert_eq!(v.dqp_dct(), 0x80ff_ffff);
        assert_eq!(v.dc_key(), 0x1111_1111_0000_0000);
        assert_eq!((v.stat_rate_sl(), v.fl_mlid(), v.rlid()), (3, 0, 0xc001));
        assert_eq!(
            (v.tclass(), v.hop_limit(), v.grh_gid_fl()),
            (0, 64, 1 << 30)
        );
        assert_eq!(v.rmac(), [0; 6]);
        assert_eq!(v.rgid(), MCAST_AV[32..48]);
    }

    #[test]
    fn datagram_seg_field_setters() {
        let mut b = [0u8; 48];
        let mut v = DatagramSeg::new_unchecked(&mut b);
        v.set_dc_key(0x0102_0304_0506_0708);
        v.set_dqp_dct(0x090a_0b0c);
        v.set_stat_rate_sl(0x0d);
        v.set_fl_mlid(0x0e);
        v.set_rlid(0x0f10);
        v.set_rmac(&[0x15, 0x16, 0x17, 0x18, 0x19, 0x1a]);
        v.set_tclass(0x1b);
        v.set_hop_limit(0x1c);
        v.set_grh_gid_fl(0x1d1e_1f20);
        v.set_rgid(&core::array::from_fn(|i| 0x21 + i as u8));
        let mut want: [u8; 48] = core::array::from_fn(|i| i as u8 + 1);
        want[16..20].fill(0); // reserved0: no setter writes it
        assert_eq!(b, want);
        DatagramSeg::new_unchecked(&mut b).set_qkey(0xa0a1_a2a3);
        assert_eq!(b[..8], [0xa0, 0xa1, 0xa2, 0xa3, 5, 6, 7, 8]);
        assert_eq!(
            UD_HEADER_DS * super::super::WQE_SEG,
            super::super::SEND_WQE_BB
        );
    }

    #[test]
    fn srq_wqe_construct_and_deconstruct() {
        // A 64-byte shared receive WQE linked to WQE 0x0102, one data segment, then the
        // terminator: what libmlx5 leaves for a one-entry receive.
        let mut b = [0xeeu8; 64];
        SrqNextSeg::new_unchecked(&mut b[..16]).set(0x0102);
        DataSeg::new_unchecked(&mut b[SRQ_DATA..SRQ_DATA + 16]).set(0x200, 0x1100, 0x7f00_1000);
        DataSeg::new_unchecked(&mut b[SRQ_DATA + 16..SRQ_DATA + 32]).set(
            0,
            super::super::INVALID_LKEY,
            0,
        );
        let mut want = [0xeeu8; 64];
        want[..16].copy_from_slice(&[0, 0, 0x01, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        want[16..32].copy_from_slice(&[0, 0, 0x02, 0, 0, 0, 0x11, 0, 0, 0, 0, 0, 0x7f, 0, 0x10, 0]);
        want[32..48].copy_from_slice(&[0, 0, 0, 0, 0, 0, 0x01, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(b, want);
        let v = SrqNextSeg::new_unchecked(&b[..16]);
        assert_eq!((v.next_wqe_index(), v.signature()), (0x0102, 0));
        // Relinking touches the two index bytes alone.
        let mut n = SrqNextSeg::new_unchecked(&mut b[..16]);
        n.set_next_wqe_index(0xfffe);
        n.set_signature(0x5a);
        assert_eq!(
            b[..16],
            [0, 0, 0xff, 0xfe, 0x5a, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(b[16..], want[16..]);
        assert_eq!(
            (srq_max_gs(32), srq_max_gs(64), srq_max_gs(512)),
            (1, 3, 31)
        );
        assert_eq!(srq_max_gs(16), 0);
        assert_eq!(srq_max_gs(0), 0);
    }

    #[test]
    fn checked_views_refuse_short_buffers() {
        assert_eq!(
            CtrlSeg::new_checked(&[0u8; 15][..]),
            Err(super::super::Truncated)
        );
        assert!(DataSeg::new_checked(&[0u8; 16][..]).is_ok());
        assert_eq!(
            DatagramSeg::new_checked(&[0u8; 47][..]),
            Err(super::super::Truncated)
        );
        extern crate std;
        use std::string::ToString;
        assert_eq!(
            super::super::Truncated.to_string(),
            "buffer shorter than the layout"
        );
    }
}
