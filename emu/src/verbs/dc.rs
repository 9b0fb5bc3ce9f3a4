//! DC initiators and targets through libmlx5 (`mlx5dv_create_qp`), for the differential check
//! of the DC segment: an initiator is created with the work-request builder API
//! (`IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`), the only way libmlx5 posts on a DCI; its requests are
//! built with `ibv_wr_start`, an opcode call, `mlx5dv_wr_set_dc_addr`, the data setters and
//! `ibv_wr_complete`.

use core::ptr::{NonNull, null_mut};

use zverbs_ffi::types::{
    IBV_MTU_4096, IBV_QP_INIT_ATTR_PD, IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, IBV_QPS_INIT, IBV_QPS_RTR,
    IBV_QPT_DRIVER, MLX5DV_DCTYPE_DCI, MLX5DV_DCTYPE_DCT, MLX5DV_QP_INIT_ATTR_MASK_DC, ibv_qp_attr,
    ibv_qp_cap, ibv_qp_ex, ibv_qp_init_attr_ex, ibv_rx_hash_conf, mlx5dv_dc_init_attr,
    mlx5dv_dc_init_attr_u, mlx5dv_qp_ex, mlx5dv_qp_init_attr, qp_attr_mask as m,
};

use super::{ACCESS_ALL, Context, Cq, Qp, Srq};

/// `IBV_QP_EX_WITH_*` of every RC operation: RDMA WRITE (with immediate), SEND (with
/// immediate), RDMA READ, compare-and-swap and fetch-and-add (`enum ibv_qp_create_send_ops_flags`,
/// bits 0 to 6).
const WITH_RC_OPS: u64 = 0x7f;

/// A DC initiator's work-request builders: libibverbs' and mlx5's.
#[derive(Clone, Copy, Debug)]
pub struct DciWr {
    /// `struct ibv_qp_ex *` (`ibv_qp_to_qp_ex`).
    pub qpx: NonNull<ibv_qp_ex>,
    /// `struct mlx5dv_qp_ex *` (`mlx5dv_qp_ex_from_ibv_qp_ex`).
    pub dv: NonNull<mlx5dv_qp_ex>,
}

impl Context {
    /// Creates a DC QP through `mlx5dv_create_qp`: an initiator (`dct_key` `None`) on `cq`
    /// asking for `caps`, with the work-request builders for every RC operation; or a target
    /// with access key `dct_key` receiving through `srq` and completing on `cq`.
    ///
    /// # Errors
    ///
    /// When `mlx5dv_create_qp` fails.
    pub fn create_dc(
        &self,
        cq: Cq,
        caps: ibv_qp_cap,
        dct_key: Option<u64>,
        srq: Option<Srq>,
    ) -> Result<Qp, String> {
        let target = dct_key.is_some();
        let mut attr = ibv_qp_init_attr_ex {
            qp_context: null_mut(),
            send_cq: cq.raw.as_ptr(),
            recv_cq: cq.raw.as_ptr(),
            srq: srq.map_or(null_mut(), |s| s.raw.as_ptr().cast()),
            cap: if target { ibv_qp_cap::default() } else { caps },
            qp_type: IBV_QPT_DRIVER,
            sq_sig_all: 0,
            comp_mask: IBV_QP_INIT_ATTR_PD
                | if target {
                    0
                } else {
                    IBV_QP_INIT_ATTR_SEND_OPS_FLAGS
                },
            pd: self.pd.as_ptr(),
            xrcd: null_mut(),
            create_flags: 0,
            max_tso_header: 0,
            rwq_ind_tbl: null_mut(),
            rx_hash_conf: ibv_rx_hash_conf {
                rx_hash_function: 0,
                rx_hash_key_len: 0,
                rx_hash_key: null_mut(),
                rx_hash_fields_mask: 0,
            },
            source_qpn: 0,
            send_ops_flags: if target { 0 } else { WITH_RC_OPS },
        };
        let mut dv = mlx5dv_qp_init_attr {
            comp_mask: MLX5DV_QP_INIT_ATTR_MASK_DC,
            create_flags: 0,
            dc_init_attr: mlx5dv_dc_init_attr {
                dc_type: if target {
                    MLX5DV_DCTYPE_DCT
                } else {
                    MLX5DV_DCTYPE_DCI
                },
                u: mlx5dv_dc_init_attr_u {
                    dct_access_key: dct_key.unwrap_or(0),
                },
            },
            send_ops_flags: 0,
        };
        // SAFETY: a live context and PD, initialised attribute structs.
        let qp = unsafe { (self.mlx5.mlx5dv_create_qp)(self.ctx.as_ptr(), &mut attr, &mut dv) };
        // SAFETY: what `mlx5dv_create_qp` returned, with the capabilities it granted.
        unsafe { Qp::created(qp, attr.cap) }.ok_or_else(|| {
            format!(
                "mlx5dv_create_qp ({}) failed: {}",
                if target { "DCT" } else { "DCI" },
                std::io::Error::last_os_error()
            )
        })
    }

    /// Readies a DC QP: an initiator RESET → INIT → RTR → RTS (no remote QP number), a target
    /// RESET → INIT → RTR (after which its number is known: the returned QP carries it).
    ///
    /// # Errors
    ///
    /// When a transition fails.
    pub fn ready_dc(&self, qp: Qp, target: bool) -> Result<Qp, String> {
        let step = |a, mask, what| self.modify(qp, a, mask, what);
        let init = ibv_qp_attr {
            qp_state: IBV_QPS_INIT,
            pkey_index: 0,
            port_num: 1,
            qp_access_flags: ACCESS_ALL as u32,
            ..ibv_qp_attr::default()
        };
        let access = if target { m::IBV_QP_ACCESS_FLAGS } else { 0 };
        step(
            init,
            m::IBV_QP_STATE | m::IBV_QP_PKEY_INDEX | m::IBV_QP_PORT | access,
            "INIT",
        )?;
        let mut rtr = ibv_qp_attr {
            qp_state: IBV_QPS_RTR,
            path_mtu: IBV_MTU_4096,
            min_rnr_timer: 12,
            ..ibv_qp_attr::default()
        };
        rtr.ah_attr.port_num = 1;
        rtr.ah_attr.dlid = self.lid;
        let timer = if target { m::IBV_QP_MIN_RNR_TIMER } else { 0 };
        step(
            rtr,
            m::IBV_QP_STATE | m::IBV_QP_PATH_MTU | m::IBV_QP_AV | timer,
            "RTR",
        )?;
        if !target {
            self.to_rts(qp)?;
        }
        // SAFETY: a live `struct ibv_qp` (a target's number is set at RTR).
        let qpn = unsafe { (*qp.raw.as_ptr()).qp_num };
        Ok(Qp { qpn, ..qp })
    }

    /// The work-request builders of the DC initiator `qp`.
    ///
    /// # Errors
    ///
    /// When libibverbs or libmlx5 lacks the entry points, or they return null.
    pub fn dci_wr(&self, qp: Qp) -> Result<DciWr, String> {
        let to_ex = self
            .verbs
            .ibv_qp_to_qp_ex
            .ok_or("libibverbs has no ibv_qp_to_qp_ex")?;
        let to_dv = self
            .mlx5
            .mlx5dv_qp_ex_from_ibv_qp_ex
            .ok_or("libmlx5 has no mlx5dv_qp_ex_from_ibv_qp_ex")?;
        // SAFETY: a live QP created with the builder API.
        let qpx = NonNull::new(unsafe { to_ex(qp.raw.as_ptr()) }).ok_or("ibv_qp_to_qp_ex")?;
        // SAFETY: as above.
        let dv =
            NonNull::new(unsafe { to_dv(qpx.as_ptr()) }).ok_or("mlx5dv_qp_ex_from_ibv_qp_ex")?;
        Ok(DciWr { qpx, dv })
    }
}
