//! The kernel's uverbs ABI and mlx5's driver data, as byte offsets and constants.
//!
//! Names follow `<rdma/ib_user_verbs.h>`, `<rdma/ib_user_ioctl_cmds.h>`,
//! `<rdma/rdma_user_ioctl_cmds.h>` and `<rdma/mlx5-abi.h>` (rdma-core 44). Every command struct
//! is read and written through [`get`] / [`put`] on byte slices: a field past the end of a
//! shorter buffer reads as 0 and is not written, as the kernel treats commands shorter or
//! longer than it knows.

/// `EINVAL`, `EOPNOTSUPP`, `ENOMEM`, `EBUSY`, `EPERM` (errno values the commands return).
pub mod errno {
    /// Not permitted (a write-combining mapping on a device without write-combining).
    pub const EPERM: i32 = libc::EPERM;
    /// Invalid argument.
    pub const EINVAL: i32 = libc::EINVAL;
    /// Operation not supported.
    pub const EOPNOTSUPP: i32 = libc::EOPNOTSUPP;
    /// Out of memory (a device table is full).
    pub const ENOMEM: i32 = libc::ENOMEM;
    /// Busy (a CQ still in use).
    pub const EBUSY: i32 = libc::EBUSY;
}

/// `RDMA_VERBS_IOCTL`: `_IOWR(0x1b, 1, struct ib_uverbs_ioctl_hdr)`.
pub const RDMA_VERBS_IOCTL: u64 = 0xc018_1b01;
/// `UVERBS_OBJECT_DEVICE`.
pub const UVERBS_OBJECT_DEVICE: u16 = 0;
/// `UVERBS_METHOD_INVOKE_WRITE`.
pub const UVERBS_METHOD_INVOKE_WRITE: u16 = 0;
/// `UVERBS_ATTR_F_VALID_OUTPUT`.
pub const UVERBS_ATTR_F_VALID_OUTPUT: u16 = 1 << 1;

/// Attribute ids of `UVERBS_METHOD_INVOKE_WRITE`.
pub mod attr {
    /// `UVERBS_ATTR_CORE_IN`.
    pub const CORE_IN: u16 = 0;
    /// `UVERBS_ATTR_CORE_OUT`.
    pub const CORE_OUT: u16 = 1;
    /// `UVERBS_ATTR_WRITE_CMD`.
    pub const WRITE_CMD: u16 = 2;
    /// `UVERBS_ATTR_UHW_IN`.
    pub const UHW_IN: u16 = 0x1000;
    /// `UVERBS_ATTR_UHW_OUT`.
    pub const UHW_OUT: u16 = 0x1001;
}

/// `struct ib_uverbs_ioctl_hdr` (24 bytes) and `struct ib_uverbs_attr` (16 bytes).
pub mod ioctl_hdr {
    /// `object_id` (u16).
    pub const OBJECT_ID: usize = 2;
    /// `method_id` (u16).
    pub const METHOD_ID: usize = 4;
    /// `num_attrs` (u16).
    pub const NUM_ATTRS: usize = 6;
    /// Size of the header; the attributes follow.
    pub const SIZE: usize = 24;
    /// Size of one attribute.
    pub const ATTR_SIZE: usize = 16;
    /// `attr_id` (u16) in an attribute.
    pub const ATTR_ID: usize = 0;
    /// `len` (u16).
    pub const ATTR_LEN: usize = 2;
    /// `flags` (u16).
    pub const ATTR_FLAGS: usize = 4;
    /// `data` (u64): the value when `len <= 8` for inputs, else a pointer.
    pub const ATTR_DATA: usize = 8;
}

/// `IB_USER_VERBS_CMD_FLAG_EXTENDED`.
pub const CMD_FLAG_EXTENDED: u32 = 0x8000_0000;
/// `IB_USER_VERBS_CMD_COMMAND_MASK`.
pub const CMD_COMMAND_MASK: u32 = 0xff;

/// Command numbers (`IB_USER_VERBS_CMD_*`; extended ones are [`ex`]).
pub mod cmd {
    /// `GET_CONTEXT`.
    pub const GET_CONTEXT: u32 = 0;
    /// `QUERY_DEVICE`.
    pub const QUERY_DEVICE: u32 = 1;
    /// `QUERY_PORT`.
    pub const QUERY_PORT: u32 = 2;
    /// `ALLOC_PD`.
    pub const ALLOC_PD: u32 = 3;
    /// `DEALLOC_PD`.
    pub const DEALLOC_PD: u32 = 4;
    /// `REG_MR`.
    pub const REG_MR: u32 = 9;
    /// `DEREG_MR`.
    pub const DEREG_MR: u32 = 13;
    /// `CREATE_COMP_CHANNEL`.
    pub const CREATE_COMP_CHANNEL: u32 = 17;
    /// `ATTACH_MCAST`.
    pub const ATTACH_MCAST: u32 = 30;
    /// `DETACH_MCAST`.
    pub const DETACH_MCAST: u32 = 31;
    /// `CREATE_CQ`.
    pub const CREATE_CQ: u32 = 18;
    /// `DESTROY_CQ`.
    pub const DESTROY_CQ: u32 = 20;
    /// `CREATE_QP`.
    pub const CREATE_QP: u32 = 24;
    /// `QUERY_QP`.
    pub const QUERY_QP: u32 = 25;
    /// `MODIFY_QP`.
    pub const MODIFY_QP: u32 = 26;
    /// `DESTROY_QP`.
    pub const DESTROY_QP: u32 = 27;
    /// `CREATE_SRQ`.
    pub const CREATE_SRQ: u32 = 32;
    /// `MODIFY_SRQ`.
    pub const MODIFY_SRQ: u32 = 33;
    /// `DESTROY_SRQ`.
    pub const DESTROY_SRQ: u32 = 35;
}

/// Extended command numbers (`IB_USER_VERBS_EX_CMD_*`).
pub mod ex {
    /// `QUERY_DEVICE`.
    pub const QUERY_DEVICE: u32 = 1;
    /// `CREATE_CQ`.
    pub const CREATE_CQ: u32 = 18;
    /// `CREATE_QP`.
    pub const CREATE_QP: u32 = 24;
    /// `MODIFY_QP`.
    pub const MODIFY_QP: u32 = 26;
    /// `CREATE_FLOW`.
    pub const CREATE_FLOW: u32 = 50;
    /// `DESTROY_FLOW`.
    pub const DESTROY_FLOW: u32 = 51;
    /// `CREATE_WQ`.
    pub const CREATE_WQ: u32 = 52;
    /// `MODIFY_WQ`.
    pub const MODIFY_WQ: u32 = 53;
    /// `DESTROY_WQ`.
    pub const DESTROY_WQ: u32 = 54;
    /// `CREATE_RWQ_IND_TBL`.
    pub const CREATE_RWQ_IND_TBL: u32 = 55;
    /// `DESTROY_RWQ_IND_TBL`.
    pub const DESTROY_RWQ_IND_TBL: u32 = 56;
}

/// Core input and output sizes of the legacy write() commands (the input counts the leading
/// `response` pointer where the struct has one), to split core from driver data.
pub fn legacy_sizes(command: u32) -> (usize, usize) {
    match command {
        cmd::GET_CONTEXT => (8, 8),
        cmd::QUERY_DEVICE => (8, 176),
        cmd::QUERY_PORT => (16, 40),
        cmd::ALLOC_PD => (8, 4),
        cmd::DEALLOC_PD => (4, 0),
        cmd::REG_MR => (40, 12),
        cmd::DEREG_MR => (4, 0),
        cmd::CREATE_COMP_CHANNEL => (8, 4),
        cmd::CREATE_CQ => (32, 8),
        cmd::DESTROY_CQ => (16, 8),
        cmd::CREATE_QP => (56, 32),
        cmd::QUERY_QP => (16, 128),
        cmd::MODIFY_QP => (112, 0),
        cmd::DESTROY_QP => (16, 4),
        cmd::ATTACH_MCAST | cmd::DETACH_MCAST => (24, 0),
        cmd::CREATE_SRQ => (32, 16),
        cmd::MODIFY_SRQ => (16, 0),
        cmd::DESTROY_SRQ => (16, 4),
        _ => (usize::MAX, 0),
    }
}

/// Whether the legacy command's input starts with a `response` pointer.
pub fn legacy_has_response(command: u32) -> bool {
    !matches!(
        command,
        cmd::DEALLOC_PD
            | cmd::DEREG_MR
            | cmd::MODIFY_QP
            | cmd::MODIFY_SRQ
            | cmd::ATTACH_MCAST
            | cmd::DETACH_MCAST
    )
}

/// `struct ib_uverbs_reg_mr` (input) and `_resp`.
pub mod reg_mr {
    /// `start`.
    pub const START: usize = 8;
    /// `length`.
    pub const LENGTH: usize = 16;
    /// `hca_va`.
    pub const HCA_VA: usize = 24;
    /// `access_flags`.
    pub const ACCESS_FLAGS: usize = 36;
    /// `mr_handle` in the response.
    pub const R_HANDLE: usize = 0;
    /// `lkey`.
    pub const R_LKEY: usize = 4;
    /// `rkey`.
    pub const R_RKEY: usize = 8;
}

/// `struct ib_uverbs_create_cq` / `ib_uverbs_ex_create_cq`: the `cqe` field.
pub mod create_cq {
    /// `cqe` in the legacy struct (after `response` and `user_handle`).
    pub const CQE: usize = 16;
    /// `cqe` in the extended struct.
    pub const EX_CQE: usize = 8;
    /// `response_length` in `ib_uverbs_ex_create_cq_resp`.
    pub const EX_R_RESPONSE_LENGTH: usize = 12;
}

/// `struct mlx5_ib_create_cq` (driver input).
pub mod mlx5_create_cq {
    /// `buf_addr`.
    pub const BUF_ADDR: usize = 0;
    /// `db_addr`.
    pub const DB_ADDR: usize = 8;
    /// `cqe_size`.
    pub const CQE_SIZE: usize = 16;
    /// `cqe_comp_en`: u8, 1 for a CQ with compressed CQEs.
    pub const CQE_COMP_EN: usize = 20;
    /// `cqe_comp_res_format`: u8, one `enum mlx5_ib_cqe_comp_res_format` bit.
    pub const CQE_COMP_RES_FORMAT: usize = 21;
}

/// `struct mlx5_ib_query_device_resp` (driver output of the extended `QUERY_DEVICE`).
pub mod mlx5_query_device {
    /// `cqe_comp_caps.max_num`: u32.
    pub const CQE_COMP_MAX_NUM: usize = 32;
    /// `cqe_comp_caps.supported_format`: u32.
    pub const CQE_COMP_SUPPORTED_FORMAT: usize = 36;
}

/// `struct ib_uverbs_create_qp` and the extended one: offsets of the legacy struct; the
/// extended struct has no `response` and so sits 8 bytes lower, with `qp_type` at 45.
pub mod create_qp {
    /// `send_cq_handle` (legacy).
    pub const SEND_CQ: usize = 20;
    /// `recv_cq_handle`.
    pub const RECV_CQ: usize = 24;
    /// `srq_handle`.
    pub const SRQ: usize = 28;
    /// `max_send_wr`.
    pub const MAX_SEND_WR: usize = 32;
    /// `max_recv_wr`.
    pub const MAX_RECV_WR: usize = 36;
    /// `max_send_sge`.
    pub const MAX_SEND_SGE: usize = 40;
    /// `max_recv_sge`.
    pub const MAX_RECV_SGE: usize = 44;
    /// `max_inline_data`.
    pub const MAX_INLINE: usize = 48;
    /// `sq_sig_all` (u8).
    pub const SQ_SIG_ALL: usize = 52;
    /// `qp_type` (u8).
    pub const QP_TYPE: usize = 53;
    /// `is_srq` (u8).
    pub const IS_SRQ: usize = 54;
    /// How much lower every field sits in `ib_uverbs_ex_create_qp`.
    pub const EX_SHIFT: usize = 8;
    /// `response_length` in `ib_uverbs_ex_create_qp_resp`.
    pub const EX_R_RESPONSE_LENGTH: usize = 36;
}

/// `struct mlx5_ib_create_qp` (driver input).
pub mod mlx5_create_qp {
    /// `buf_addr`.
    pub const BUF_ADDR: usize = 0;
    /// `db_addr`.
    pub const DB_ADDR: usize = 8;
    /// `sq_wqe_count`.
    pub const SQ_WQE_COUNT: usize = 16;
    /// `rq_wqe_count`.
    pub const RQ_WQE_COUNT: usize = 20;
    /// `rq_wqe_shift`.
    pub const RQ_WQE_SHIFT: usize = 24;
    /// `flags`.
    pub const FLAGS: usize = 28;
    /// `uidx`.
    pub const UIDX: usize = 32;
    /// `bfreg_index`.
    pub const BFREG_INDEX: usize = 36;
    /// `MLX5_QP_FLAG_BFREG_INDEX`: `bfreg_index` names a dynamic bfreg.
    pub const FLAG_BFREG_INDEX: u32 = 1 << 3;
    /// `MLX5_QP_FLAG_UAR_PAGE_INDEX`: `bfreg_index` names a UAR object's page.
    pub const FLAG_UAR_PAGE_INDEX: u32 = 1 << 10;
    /// `MLX5_QP_FLAG_TYPE_DCT`: a DC target (no rings; `access_key` set).
    pub const FLAG_TYPE_DCT: u32 = 1 << 4;
    /// `MLX5_QP_FLAG_TYPE_DCI`: a DC initiator.
    pub const FLAG_TYPE_DCI: u32 = 1 << 5;
    /// `access_key` (u64, a DCT's; the union with `sq_buf_addr`).
    pub const ACCESS_KEY: usize = 40;
    /// `MLX5_QP_FLAG_SCATTER_CQE`: small messages may be scattered into the CQE (libmlx5 sets
    /// it unless `MLX5_SCATTER_TO_CQE=0` or `MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE`).
    pub const FLAG_SCATTER_CQE: u32 = 1 << 1;
}

/// `struct ib_uverbs_modify_qp` (also the base of the extended one).
pub mod modify_qp {
    /// `dest.dlid` (u16).
    pub const DLID: usize = 20;
    /// `dest.port_num` (u8).
    pub const PORT_NUM_AV: usize = 31;
    /// `qp_handle`.
    pub const QP_HANDLE: usize = 64;
    /// `attr_mask`.
    pub const ATTR_MASK: usize = 68;
    /// `qkey`.
    pub const QKEY: usize = 72;
    /// `rq_psn`.
    pub const RQ_PSN: usize = 76;
    /// `sq_psn`.
    pub const SQ_PSN: usize = 80;
    /// `dest_qp_num`.
    pub const DEST_QP_NUM: usize = 84;
    /// `qp_access_flags`.
    pub const ACCESS_FLAGS: usize = 88;
    /// `pkey_index` (u16).
    pub const PKEY_INDEX: usize = 92;
    /// `qp_state` (u8).
    pub const QP_STATE: usize = 96;
    /// `path_mtu` (u8).
    pub const PATH_MTU: usize = 98;
    /// `max_rd_atomic` (u8).
    pub const MAX_RD_ATOMIC: usize = 101;
    /// `max_dest_rd_atomic` (u8).
    pub const MAX_DEST_RD_ATOMIC: usize = 102;
    /// `min_rnr_timer` (u8).
    pub const MIN_RNR_TIMER: usize = 103;
    /// `port_num` (u8).
    pub const PORT_NUM: usize = 104;
    /// `timeout` (u8).
    pub const TIMEOUT: usize = 105;
    /// `retry_cnt` (u8).
    pub const RETRY_CNT: usize = 106;
    /// `rnr_retry` (u8).
    pub const RNR_RETRY: usize = 107;
}

/// `enum ibv_qp_attr_mask` bits the device honours.
pub mod mask {
    /// `IBV_QP_STATE`.
    pub const STATE: u32 = 1 << 0;
    /// `IBV_QP_ACCESS_FLAGS`.
    pub const ACCESS_FLAGS: u32 = 1 << 3;
    /// `IBV_QP_PKEY_INDEX`.
    pub const PKEY_INDEX: u32 = 1 << 4;
    /// `IBV_QP_PORT`.
    pub const PORT: u32 = 1 << 5;
    /// `IBV_QP_QKEY`.
    pub const QKEY: u32 = 1 << 6;
    /// `IBV_QP_AV`.
    pub const AV: u32 = 1 << 7;
    /// `IBV_QP_PATH_MTU`.
    pub const PATH_MTU: u32 = 1 << 8;
    /// `IBV_QP_TIMEOUT`.
    pub const TIMEOUT: u32 = 1 << 9;
    /// `IBV_QP_RETRY_CNT`.
    pub const RETRY_CNT: u32 = 1 << 10;
    /// `IBV_QP_RNR_RETRY`.
    pub const RNR_RETRY: u32 = 1 << 11;
    /// `IBV_QP_RQ_PSN`.
    pub const RQ_PSN: u32 = 1 << 12;
    /// `IBV_QP_MAX_QP_RD_ATOMIC`.
    pub const MAX_QP_RD_ATOMIC: u32 = 1 << 13;
    /// `IBV_QP_MIN_RNR_TIMER`.
    pub const MIN_RNR_TIMER: u32 = 1 << 15;
    /// `IBV_QP_SQ_PSN`.
    pub const SQ_PSN: u32 = 1 << 16;
    /// `IBV_QP_MAX_DEST_RD_ATOMIC`.
    pub const MAX_DEST_RD_ATOMIC: u32 = 1 << 17;
    /// `IBV_QP_DEST_QPN`.
    pub const DEST_QPN: u32 = 1 << 20;
}

/// `enum ibv_qp_state`.
pub mod qps {
    /// `IBV_QPS_RESET`.
    pub const RESET: u8 = 0;
    /// `IBV_QPS_INIT`.
    pub const INIT: u8 = 1;
    /// `IBV_QPS_RTR`.
    pub const RTR: u8 = 2;
    /// `IBV_QPS_RTS`.
    pub const RTS: u8 = 3;
    /// `IBV_QPS_ERR`.
    pub const ERR: u8 = 6;
}

/// `IBV_QPT_RC`.
pub const QPT_RC: u8 = 2;
/// `IBV_QPT_RAW_PACKET`.
pub const QPT_RAW_PACKET: u8 = 8;
/// `IBV_QPT_UD`.
pub const QPT_UD: u8 = 4;
/// `IBV_QPT_DRIVER`: libmlx5's DC initiators and targets (the driver command says which).
pub const QPT_DRIVER: u8 = 0xff;

/// `struct ib_uverbs_create_srq` (with its leading `response`), its answer and mlx5's driver
/// data (`struct mlx5_ib_create_srq`, `_resp`).
pub mod create_srq {
    /// `pd_handle`.
    pub const PD_HANDLE: usize = 16;
    /// `max_wr`: libmlx5 passes its ring's WQE count minus one.
    pub const MAX_WR: usize = 20;
    /// `max_sge`: libmlx5 passes the data segments its stride holds.
    pub const MAX_SGE: usize = 24;
    /// `srq_limit`.
    pub const SRQ_LIMIT: usize = 28;
    /// `srq_handle` in the answer.
    pub const R_HANDLE: usize = 0;
    /// `max_wr` in the answer.
    pub const R_MAX_WR: usize = 4;
    /// `max_sge` in the answer.
    pub const R_MAX_SGE: usize = 8;
    /// `srqn` in the answer.
    pub const R_SRQN: usize = 12;
    /// `buf_addr` (driver input).
    pub const BUF_ADDR: usize = 0;
    /// `db_addr`.
    pub const DB_ADDR: usize = 8;
    /// `flags`.
    pub const FLAGS: usize = 16;
    /// `MLX5_SRQ_FLAG_SIGNATURE`: WQE signatures, which the device does not check.
    pub const FLAG_SIGNATURE: u32 = 1 << 0;
    /// `srqn` (driver output): the number libmlx5 takes.
    pub const D_SRQN: usize = 0;
}

/// `struct ib_uverbs_modify_srq` (no `response`).
pub mod modify_srq {
    /// `srq_handle`.
    pub const HANDLE: usize = 0;
    /// `attr_mask`.
    pub const ATTR_MASK: usize = 4;
    /// `srq_limit`.
    pub const SRQ_LIMIT: usize = 12;
    /// `IBV_SRQ_MAX_WR`: resizing.
    pub const MASK_MAX_WR: u32 = 1 << 0;
    /// `IBV_SRQ_LIMIT`: arming the limit.
    pub const MASK_LIMIT: u32 = 1 << 1;
}

/// `struct ib_uverbs_attach_mcast` and `_detach_mcast` (no `response`).
pub mod mcast {
    /// `gid` (16 bytes).
    pub const GID: usize = 0;
    /// `qp_handle`.
    pub const QP_HANDLE: usize = 16;
    /// `mlid` (u16).
    pub const MLID: usize = 20;
}

/// Reads a native-endian integer of `N` bytes at `at`; 0 past the end.
pub fn get<const N: usize>(b: &[u8], at: usize) -> u64 {
    let mut v = [0u8; 8];
    if let Some(s) = at.checked_add(N).and_then(|end| b.get(at..end)) {
        v[..N].copy_from_slice(s);
    }
    u64::from_le_bytes(v)
}

/// Writes the low `N` bytes of `v` (native-endian) at `at`; nothing past the end.
pub fn put<const N: usize>(b: &mut [u8], at: usize, v: u64) {
    if let Some(s) = at.checked_add(N).and_then(|end| b.get_mut(at..end)) {
        s.copy_from_slice(&v.to_le_bytes()[..N]);
    }
}

#[cfg(not(target_endian = "little"))]
compile_error!(
    "the uverbs ABI is read as little-endian: a big-endian port needs `get`/`put` changed"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_past_the_end_read_as_zero_and_are_not_written() {
        let mut b = [1u8, 2, 3, 4, 5, 6];
        assert_eq!(get::<4>(&b, 0), 0x0403_0201);
        assert_eq!(get::<2>(&b, 4), 0x0605);
        assert_eq!(get::<4>(&b, 4), 0, "runs past the end");
        assert_eq!(get::<8>(&b, usize::MAX), 0);
        put::<2>(&mut b, 0, 0xaabb);
        put::<4>(&mut b, 4, 0xffff_ffff);
        assert_eq!(b, [0xbb, 0xaa, 3, 4, 5, 6]);
    }
}
