//! The C probe's functions and structs (`c/probe.h`), declared for Rust.
//!
//! Every struct here mirrors one in `probe.h`; their sizes and alignments are in the probe's
//! fact table, so a mirror that drifts from its C original fails the layout test.

use core::ffi::{c_char, c_int, c_void};

use zverbs_core::Sge;

/// `struct zv_fact`: a C expression and its value.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct ZvFact {
    /// The expression, NUL-terminated, static.
    pub name: *const c_char,
    /// Its value.
    pub value: u64,
}

/// `struct zv_cqe_fields`: every field of a 64-byte CQE as rdma-core reads it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct ZvCqeFields {
    /// `be64toh(cqe->timestamp)`.
    pub timestamp: u64,
    /// `be32toh(cqe->srqn_uidx)`.
    pub srqn_uidx: u32,
    /// `be32toh(cqe->imm_inval_pkey)`.
    pub imm_inval_pkey: u32,
    /// `be32toh(cqe->byte_cnt)`.
    pub byte_cnt: u32,
    /// `be32toh(cqe->sop_drop_qpn)`.
    pub sop_drop_qpn: u32,
    /// `be32toh(ecqe->srqn)` through `struct mlx5_err_cqe`.
    pub err_srqn: u32,
    /// `be32toh(ecqe->s_wqe_opcode_qpn)`.
    pub err_s_wqe_opcode_qpn: u32,
    /// libmlx5's `ibv_wc_status` for the syndrome.
    pub wc_status: u32,
    /// `be32toh(cqe->flags_rqpn)`.
    pub flags_rqpn: u32,
    /// `IBV_WC_GRH` when libmlx5 would report it for a receive with this CQE, else 0.
    pub wc_grh: u32,
    /// libmlx5's `src_qp`: `be32toh(cqe->flags_rqpn) & 0xffffff`.
    pub src_qp: u32,
    /// The SRQ number libmlx5 looks up: `be32toh(cqe->srqn_uidx) & 0xffffff`.
    pub srqn: u32,
    /// `be16toh(cqe->wqe_counter)`.
    pub wqe_counter: u16,
    /// `be16toh(ecqe->wqe_counter)`.
    pub err_wqe_counter: u16,
    /// `be16toh(cqe->slid)`.
    pub slid: u16,
    /// libmlx5's `pkey_index`: `be32toh(cqe->imm_inval_pkey) & 0xffff`.
    pub pkey_index: u16,
    /// `cqe->signature`.
    pub signature: u8,
    /// `cqe->op_own`.
    pub op_own: u8,
    /// `mlx5dv_get_cqe_owner`.
    pub owner: u8,
    /// `mlx5dv_get_cqe_se`.
    pub se: u8,
    /// `mlx5dv_get_cqe_format`.
    pub format: u8,
    /// `mlx5dv_get_cqe_opcode`.
    pub opcode: u8,
    /// `ecqe->syndrome`.
    pub syndrome: u8,
    /// `ecqe->vendor_err_synd`.
    pub vendor_err_synd: u8,
    /// `ecqe->signature`.
    pub err_signature: u8,
    /// `ecqe->op_own`.
    pub err_op_own: u8,
    /// `cqe->ml_path`.
    pub ml_path: u8,
    /// libmlx5's `sl`: `(be32toh(cqe->flags_rqpn) >> 24) & 0xf`.
    pub sl: u8,
    /// libmlx5's `dlid_path_bits`: `cqe->ml_path & 0x7f`.
    pub dlid_path_bits: u8,
    /// Padding.
    pub pad: [u8; 7],
}

/// `struct zv_av_fields`: every field of an address vector as rdma-core reads it (multi-byte
/// fields converted from big-endian).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct ZvAvFields {
    /// `key.dc_key`.
    pub dc_key: u64,
    /// `key.qkey.qkey`.
    pub qkey: u32,
    /// `key.qkey.reserved`.
    pub qkey_reserved: u32,
    /// `dqp_dct`.
    pub dqp_dct: u32,
    /// `grh_gid_fl`.
    pub grh_gid_fl: u32,
    /// `rlid`.
    pub rlid: u16,
    /// `stat_rate_sl`.
    pub stat_rate_sl: u8,
    /// `fl_mlid`.
    pub fl_mlid: u8,
    /// `tclass`.
    pub tclass: u8,
    /// `hop_limit`.
    pub hop_limit: u8,
    /// `rmac`.
    pub rmac: [u8; 6],
    /// `rgid`.
    pub rgid: [u8; 16],
    /// Padding.
    pub pad: [u8; 4],
}

/// `struct zv_dgram_args`: the arguments of `mlx5dv_set_dgram_seg`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct ZvDgramArgs {
    /// `key` (64 bits, stored big-endian over `key.dc_key`).
    pub key: u64,
    /// `dqp_dct`.
    pub dqp_dct: u32,
    /// `grh_gid_fi`.
    pub grh_gid_fl: u32,
    /// `rlid`.
    pub rlid: u16,
    /// `ext`: shifted into bit 31 of `dqp_dct`.
    pub ext: u8,
    /// `stat_rate_sl`.
    pub stat_rate_sl: u8,
    /// `fl_mlid`.
    pub fl_mlid: u8,
    /// `tclass`.
    pub tclass: u8,
    /// `hop_limit`.
    pub hop_limit: u8,
    /// `rmac`.
    pub rmac: [u8; 6],
    /// `rgid`.
    pub rgid: [u8; 16],
    /// Padding.
    pub pad: [u8; 11],
}

/// `enum zv_op`: the operations the probe's WQE builder knows.
pub mod op {
    /// RDMA WRITE.
    pub const WRITE: u32 = 0;
    /// RDMA WRITE with immediate.
    pub const WRITE_IMM: u32 = 1;
    /// SEND.
    pub const SEND: u32 = 2;
    /// SEND with immediate.
    pub const SEND_IMM: u32 = 3;
    /// RDMA READ.
    pub const READ: u32 = 4;
    /// Atomic compare-and-swap.
    pub const CS: u32 = 5;
    /// Atomic fetch-and-add.
    pub const FA: u32 = 6;
    /// NOP.
    pub const NOP: u32 = 7;
}

/// `struct zv_wr`: a send request in flat form.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct ZvWr {
    /// The scatter/gather list (`struct ibv_sge`, which [`Sge`] mirrors).
    pub sg_list: *const Sge,
    /// UD: the destination's 48-byte address vector (null for RC).
    pub av: *const u8,
    /// Remote address (RDMA and atomics).
    pub remote_addr: u64,
    /// Compare value (CS) or addend (FA).
    pub compare_add: u64,
    /// Swap value (CS).
    pub swap: u64,
    /// One of [`op`].
    pub op: u32,
    /// Entries in `sg_list`.
    pub num_sge: u32,
    /// `IBV_SEND_*` flags.
    pub send_flags: u32,
    /// Remote key.
    pub rkey: u32,
    /// Immediate data, host order.
    pub imm: u32,
    /// UD: the destination QP number (`wr.ud.remote_qpn`).
    pub remote_qpn: u32,
    /// UD: the destination's Q_Key (`wr.ud.remote_qkey`).
    pub qkey: u32,
    /// Padding.
    pub pad: u32,
}

/// `enum zv_qpt`: the QP types the probe's send queue model knows.
pub mod qpt {
    /// Reliable connected.
    pub const RC: u32 = 0;
    /// Unreliable datagram.
    pub const UD: u32 = 1;
    /// Raw packet QP on an Ethernet port.
    pub const RAW: u32 = 2;
}

/// `struct zv_sq`: the probe's model of a libmlx5 send queue.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct ZvSq {
    /// The ring, `wqe_cnt * 64` bytes.
    pub buf: *mut u8,
    /// As large as the ring: 1 for every byte the builder stored.
    pub written: *mut u8,
    /// Basic blocks in the ring, a power of two.
    pub wqe_cnt: u32,
    /// Producer counter in basic blocks.
    pub cur_post: u32,
    /// QP number.
    pub qpn: u32,
    /// Nonzero: every WQE asks for a CQE.
    pub sig_all: u32,
    /// Largest inline payload.
    pub max_inline_data: u32,
    /// The doorbell record (`[MLX5_RCV_DBR]`, `[MLX5_SND_DBR]`), big-endian words.
    pub dbrec: [u32; 2],
    /// One of [`qpt`].
    pub qp_type: u32,
    /// libmlx5's `sq.max_gs`: requests with more entries are refused.
    pub max_gs: u32,
    /// A raw packet QP's minimum inline frame bytes (the context's `eth_min_inline_size`, 0
    /// or 18).
    pub eth_min_inline: u32,
}

/// `struct zv_rq`: the probe's model of a libmlx5 receive queue.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct ZvRq {
    /// The ring, `wqe_cnt * stride` bytes.
    pub buf: *mut u8,
    /// As large as the ring: 1 for every byte the builder stored.
    pub written: *mut u8,
    /// Entries in the ring, a power of two.
    pub wqe_cnt: u32,
    /// Bytes per entry, a power of two of at least 16.
    pub stride: u32,
    /// Receives posted.
    pub head: u32,
    /// The doorbell record (`[MLX5_RCV_DBR]`, `[MLX5_SND_DBR]`), big-endian words.
    pub dbrec: [u32; 2],
    /// Padding.
    pub pad: u32,
}

/// `struct zv_srq`: the probe's model of a libmlx5 (rdma-core 44) shared receive queue.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct ZvSrq {
    /// The ring, `nwqes * stride` bytes.
    pub buf: *mut u8,
    /// As large as the ring: 1 for every byte the builder stored.
    pub written: *mut u8,
    /// Bytes per WQE, a power of two of at least 32.
    pub stride: u32,
    /// WQEs in the ring, a power of two.
    pub nwqes: u32,
    /// Scatter entries per WQE, `(stride - 16) / 16`.
    pub max_gs: u32,
    /// The head of the free list: the next receive goes there.
    pub head: u32,
    /// The tail of the free list, never taken.
    pub tail: u32,
    /// Receives posted, 16 bits.
    pub counter: u32,
    /// The doorbell record, big-endian.
    pub dbrec: u32,
    /// Padding.
    pub pad: u32,
}

// SAFETY: every declaration matches `c/probe.h` (the struct mirrors are checked by the layout
// test); `zv_wc_status_of_syndrome` takes and returns plain integers, so any call is sound.
unsafe extern "C" {
    /// The fact table: `*len` entries of static storage.
    pub fn zv_facts(len: *mut usize) -> *const ZvFact;

    /// `mlx5dv_set_ctrl_seg` on `buf` (16 bytes), with the immediate given big-endian.
    pub fn zv_set_ctrl_seg(
        buf: *mut c_void,
        pi: u16,
        opcode: u8,
        opmod: u8,
        qpn: u32,
        fm_ce_se: u8,
        ds: u8,
        signature: u8,
        imm: u32,
    );

    /// `mlx5dv_set_data_seg` on `buf` (16 bytes).
    pub fn zv_set_data_seg(buf: *mut c_void, length: u32, lkey: u32, addr: u64);

    /// A `struct mlx5_wqe_raddr_seg` filled field by field on `buf` (16 bytes).
    pub fn zv_set_raddr_seg(buf: *mut c_void, raddr: u64, rkey: u32);

    /// A `struct mlx5_wqe_atomic_seg` filled field by field on `buf` (16 bytes).
    pub fn zv_set_atomic_seg(buf: *mut c_void, swap_add: u64, compare: u64);

    /// `mlx5dv_set_dgram_seg` on `buf` (48 bytes).
    pub fn zv_set_dgram_seg(buf: *mut c_void, a: *const ZvDgramArgs);

    /// libmlx5's `set_datagram_seg` on `buf` (48 bytes) from the address vector `av` (48).
    pub fn zv_set_datagram_from_av(buf: *mut c_void, av: *const c_void, remote_qpn: u32, qkey: u32);
    /// libmlx5's `mlx5dv_wr_set_dc_addr` datagram segment on `buf` (48 bytes) from the address
    /// vector `av` (48), the DCT number and the access key.
    pub fn zv_set_dc_datagram_from_av(buf: *mut c_void, av: *const c_void, dctn: u32, dc_key: u64);

    /// Reads the address vector at `buf` (48 bytes) into `out`.
    pub fn zv_read_av(buf: *const c_void, out: *mut ZvAvFields);

    /// One receive into WQE `idx` of a shared receive ring as libmlx5 writes it; the WQE's
    /// `next_wqe_index` goes to `next`. Returns 0 or an errno.
    pub fn zv_post_srq_recv(
        buf: *mut u8,
        stride: u32,
        idx: u32,
        sg_list: *const Sge,
        num_sge: u32,
        next: *mut u16,
    ) -> c_int;

    /// Links WQEs `start..end` of a shared receive ring as libmlx5's `set_srq_buf_ll` does.
    pub fn zv_srq_link(buf: *mut u8, stride: u32, start: u32, end: u32);

    /// Reads `next_wqe_index` and `signature` of the next segment at `buf` (16 bytes).
    pub fn zv_read_srq_next(buf: *const c_void, next_wqe_index: *mut u16, signature: *mut u8);

    /// One receive at the head of `srq`'s free list as libmlx5 44 takes and writes it (the WQE
    /// used goes to `idx`); returns 0 or an errno.
    pub fn zv_srq_post(srq: *mut ZvSrq, sg_list: *const Sge, num_sge: u32, idx: *mut u32) -> c_int;

    /// WQE `ind` back on `srq`'s free list, behind the tail, as libmlx5 44 frees it.
    pub fn zv_srq_free(srq: *mut ZvSrq, ind: u32);

    /// Reads the 64-byte CQE at `cqe` into `out`.
    pub fn zv_read_cqe(cqe: *const c_void, out: *mut ZvCqeFields);

    /// libmlx5's `ibv_wc_status` number for an error CQE's syndrome.
    pub safe fn zv_wc_status_of_syndrome(syndrome: u8) -> u32;

    /// Builds one WQE at `sq.cur_post` as libmlx5 does; returns 0 or an errno.
    pub fn zv_post_send(sq: *mut ZvSq, wr: *const ZvWr, ds: *mut u32) -> c_int;

    /// Writes the doorbell record for `sq.cur_post`.
    pub fn zv_ring_db(sq: *mut ZvSq);

    /// Builds one receive WQE at `rq.head` as libmlx5 does and updates the doorbell record;
    /// returns 0 or an errno.
    pub fn zv_post_recv(rq: *mut ZvRq, sg_list: *const Sge, num_sge: u32) -> c_int;
}

#[cfg(target_arch = "x86_64")]
// SAFETY: matches `c/probe_x86.c`. Callers check that the CPU has SSSE3 first.
unsafe extern "C" {
    /// `mlx5dv_x86_set_ctrl_seg` (SSSE3) on `buf` (16 bytes), immediate given big-endian.
    pub fn zv_x86_set_ctrl_seg(
        buf: *mut c_void,
        pi: u16,
        opcode: u8,
        opmod: u8,
        qpn: u32,
        fm_ce_se: u8,
        ds: u8,
        signature: u8,
        imm: u32,
    );
}
