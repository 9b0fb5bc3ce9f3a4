//! CQs with compressed CQEs: `mlx5dv_create_cq` with `MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE`,
//! after `mlx5dv_query_device` said the device compresses in the format asked for.
//!
//! Only the direct poller expands compressed sessions (libmlx5's `ibv_poll_cq` does not: it
//! would read a title CQE as an ordinary one), so such a CQ is created for the direct backend
//! only, and refused where it cannot be driven directly.

use std::ptr::{self, NonNull};

use zverbs_mlx5dv::prm::mini::MiniCqeFormat;

use super::{VerbsContext, VerbsCq, init_cq};
use crate::backend::DirectSupport;
use crate::error::{Error, Result};
use crate::provider::{ChannelProvider, CqProvider, EngineNote};
use zverbs_ffi::load;
use zverbs_ffi::types::*;

/// `cqe_comp_caps` of `mlx5dv_query_device`, or why they cannot be had.
fn comp_caps(ctx: &VerbsContext) -> std::result::Result<mlx5dv_cqe_comp_caps, String> {
    let m = load::mlx5().map_err(|e| e.to_string())?;
    let query = m
        .mlx5dv_query_device
        .ok_or("libmlx5 has no mlx5dv_query_device")?;
    #[repr(C, align(8))]
    struct Room([u8; MLX5DV_CONTEXT_ROOM]);
    let mut room = Room([0; MLX5DV_CONTEXT_ROOM]);
    let head = room.0.as_mut_ptr().cast::<mlx5dv_context_head>();
    // SAFETY: the head fits the 8-aligned buffer; all-zero bytes are a valid head.
    unsafe { (*head).comp_mask = MLX5DV_CONTEXT_MASK_CQE_COMPRESION };
    // SAFETY: a live mlx5 context and a writable `struct mlx5dv_context` (the buffer is larger
    // than the struct of the rdma-core versions this runs with).
    let ret = unsafe { query(ctx.ctx, head.cast()) };
    if ret != 0 {
        return Err(format!("mlx5dv_query_device failed ({ret})"));
    }
    // SAFETY: written by the call above.
    let head = unsafe { head.read() };
    if head.comp_mask & MLX5DV_CONTEXT_MASK_CQE_COMPRESION == 0 {
        return Err("mlx5dv_query_device reports no CQE compression capabilities".into());
    }
    Ok(head.cqe_comp_caps)
}

/// A direct CQ of at least `cqe` entries whose CQEs the device compresses in `format`; its
/// completions carry the device clock with `timestamps`.
pub(super) fn create_cq(
    ctx: &VerbsContext,
    cqe: u32,
    format: MiniCqeFormat,
    timestamps: bool,
    channel: Option<&dyn ChannelProvider>,
) -> Result<(Box<dyn CqProvider>, EngineNote)> {
    let none = |reason: String| Error::NoCqeCompression {
        device: ctx.name.clone(),
        reason,
    };
    if let DirectSupport::No(why) = &ctx.direct {
        return Err(none(format!(
            "only the direct backend expands compressed CQEs, and {why}"
        )));
    }
    if channel.is_some() {
        return Err(none(
            "a CQ with compressed CQEs cannot have a completion channel here".into(),
        ));
    }
    if timestamps {
        ctx.timestamp_caps()?;
    }
    let caps = comp_caps(ctx).map_err(none)?;
    if caps.max_num == 0 || caps.supported_format & u32::from(format.to_raw()) == 0 {
        return Err(none(format!(
            "mlx5dv_query_device reports cqe_comp_caps max_num {}, supported_format {:#x}; \
             {format:?} is {:#x}",
            caps.max_num,
            caps.supported_format,
            format.to_raw()
        )));
    }
    let create = load::mlx5()?
        .mlx5dv_create_cq
        .ok_or_else(|| none("libmlx5 has no mlx5dv_create_cq".into()))?;
    let stamp = if timestamps {
        wc_ex_flags::IBV_WC_EX_WITH_COMPLETION_TIMESTAMP
    } else {
        0
    };
    let mut attr = ibv_cq_init_attr_ex {
        cqe: cqe.max(1),
        cq_context: ptr::null_mut(),
        channel: ptr::null_mut(),
        comp_vector: 0,
        wc_flags: wc_ex_flags::IBV_WC_STANDARD_FLAGS | stamp,
        comp_mask: 0,
        flags: 0,
        parent_domain: ptr::null_mut(),
    };
    let mut dv = mlx5dv_cq_init_attr {
        comp_mask: MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE,
        cqe_comp_res_format: format.to_raw(),
        ..mlx5dv_cq_init_attr::default()
    };
    // SAFETY: a live mlx5 context and valid attribute structs.
    let ex = unsafe { create(ctx.ctx, &mut attr, &mut dv) };
    let ex = NonNull::new(ex).ok_or_else(|| Error::last_os("mlx5dv_create_cq"))?;
    // `ibv_cq_ex_to_cq`: an extended CQ starts as `struct ibv_cq`.
    let cq = ex.cast::<ibv_cq>();
    let mut out = VerbsCq {
        cq,
        verbs: ctx.verbs,
        layout: None,
        cq_ex: timestamps.then_some(ex),
    };
    // Dropping `out` destroys the CQ on the error path.
    let l = init_cq(cq).map_err(none)?;
    if l.cqe_size != 64 {
        return Err(none(format!(
            "the CQ has {}-byte CQEs; compressed sessions are decoded in 64-byte ones",
            l.cqe_size
        )));
    }
    out.layout = Some(l);
    let note = format!(
        "mlx5dv_create_cq with compressed CQEs ({format:?}, sessions of up to {}){}; \
         mlx5dv_init_obj: CQ {:#x}, {} CQEs of {} bytes",
        caps.max_num,
        if timestamps {
            " and completion timestamps"
        } else {
            ""
        },
        l.cqn,
        l.cqe_cnt,
        l.cqe_size
    );
    Ok((Box::new(out), EngineNote(note)))
}
