//! `repr(C)` mirrors of the structs `mlx5dv_init_obj` fills (`struct mlx5dv_qp`,
//! `struct mlx5dv_cq`, `struct mlx5dv_srq`, `struct mlx5dv_ah`), field for field as in
//! rdma-core 44's `mlx5dv.h`, and the conversion of the first two to the layouts the queues
//! are built from.
//!
//! A shared receive queue (`MLX5DV_OBJ_SRQ`) is a ring of `stride`-byte receive WQEs, each a
//! [`SrqNextSeg`](super::wqe::SrqNextSeg) and data segments, linked through their
//! `next_wqe_index`; `head` and `tail` are libmlx5's ends of that list when the SRQ was
//! created. An address handle (`MLX5DV_OBJ_AH`) is its 48-byte address vector, which a UD
//! send copies into its datagram segment ([`DatagramSeg`](super::wqe::DatagramSeg)).

use core::ffi::c_void;
use core::ptr::NonNull;

use crate::layout::{BfLayout, CqLayout, QpLayout, WqLayout};

/// `struct mlx5dv_qp`'s `sq` / `rq` member.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
#[allow(non_camel_case_types)]
pub struct mlx5dv_qp_wq {
    /// `void *buf`.
    pub buf: *mut c_void,
    /// `uint32_t wqe_cnt`.
    pub wqe_cnt: u32,
    /// `uint32_t stride`.
    pub stride: u32,
}

/// `struct mlx5dv_qp`'s `bf` member.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
#[allow(non_camel_case_types)]
pub struct mlx5dv_qp_bf {
    /// `void *reg`.
    pub reg: *mut c_void,
    /// `uint32_t size`.
    pub size: u32,
}

/// `struct mlx5dv_qp`.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
#[allow(non_camel_case_types)]
pub struct mlx5dv_qp {
    /// `__be32 *dbrec`.
    pub dbrec: *mut u32,
    /// The send ring.
    pub sq: mlx5dv_qp_wq,
    /// The receive ring.
    pub rq: mlx5dv_qp_wq,
    /// The BlueFlame register.
    pub bf: mlx5dv_qp_bf,
    /// `uint64_t comp_mask`: which optional fields to fill (input) / were filled.
    pub comp_mask: u64,
    /// `off_t uar_mmap_offset`.
    pub uar_mmap_offset: i64,
    /// `uint32_t tirn`.
    pub tirn: u32,
    /// `uint32_t tisn`.
    pub tisn: u32,
    /// `uint32_t rqn`.
    pub rqn: u32,
    /// `uint32_t sqn`.
    pub sqn: u32,
    /// `uint64_t tir_icm_addr`.
    pub tir_icm_addr: u64,
}

/// `struct mlx5dv_cq`.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
#[allow(non_camel_case_types)]
pub struct mlx5dv_cq {
    /// `void *buf`.
    pub buf: *mut c_void,
    /// `__be32 *dbrec`.
    pub dbrec: *mut u32,
    /// `uint32_t cqe_cnt`.
    pub cqe_cnt: u32,
    /// `uint32_t cqe_size`.
    pub cqe_size: u32,
    /// `void *cq_uar`.
    pub cq_uar: *mut c_void,
    /// `uint32_t cqn`.
    pub cqn: u32,
    /// `uint64_t comp_mask`.
    pub comp_mask: u64,
}

/// `struct mlx5dv_srq`.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
#[allow(non_camel_case_types)]
pub struct mlx5dv_srq {
    /// `void *buf`: the ring of receive WQEs.
    pub buf: *mut c_void,
    /// `__be32 *dbrec`: one big-endian word, the count of receives posted (16 bits used).
    pub dbrec: *mut u32,
    /// `uint32_t stride`: bytes per WQE, a power of two.
    pub stride: u32,
    /// `uint32_t head`: the WQE the next receive goes into.
    pub head: u32,
    /// `uint32_t tail`: the last WQE of the free list.
    pub tail: u32,
    /// `uint64_t comp_mask`: ask for `srqn` with [`MLX5DV_SRQ_MASK_SRQN`] (input); what was
    /// filled (output).
    pub comp_mask: u64,
    /// `uint32_t srqn`: the SRQ number, when `comp_mask` says so.
    pub srqn: u32,
}

/// `MLX5DV_SRQ_MASK_SRQN`: the bit of [`mlx5dv_srq::comp_mask`] that asks for (and reports)
/// `srqn`.
pub const MLX5DV_SRQ_MASK_SRQN: u64 = 1 << 0;

/// `struct mlx5dv_ah`.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
#[allow(non_camel_case_types)]
pub struct mlx5dv_ah {
    /// `struct mlx5_wqe_av *av`: the address handle's address vector,
    /// [`av::LEN`](super::wqe::av::LEN) bytes in device byte order, owned by the address
    /// handle.
    pub av: *mut c_void,
    /// `uint64_t comp_mask`.
    pub comp_mask: u64,
}

// Sizes with `assert_eq_size!` (a mismatch reports both sizes); offsets below as plain asserts.
#[cfg(target_pointer_width = "64")]
static_assertions::assert_eq_size!(mlx5dv_qp, [u8; 96]);
#[cfg(target_pointer_width = "64")]
static_assertions::assert_eq_size!(mlx5dv_cq, [u8; 48]);
#[cfg(target_pointer_width = "64")]
static_assertions::assert_eq_size!(mlx5dv_srq, [u8; 48]);
#[cfg(target_pointer_width = "64")]
static_assertions::assert_eq_size!(mlx5dv_ah, [u8; 16]);
// Plain `const` asserts: each names its failing comparison (`const_assert!` reports an overflow).
#[cfg(target_pointer_width = "64")]
const _: () = {
    use core::mem::offset_of;
    assert!(offset_of!(mlx5dv_qp, sq) == 8 && offset_of!(mlx5dv_qp, rq) == 24);
    assert!(offset_of!(mlx5dv_qp, bf) == 40 && offset_of!(mlx5dv_qp, comp_mask) == 56);
    assert!(offset_of!(mlx5dv_qp, tir_icm_addr) == 88);
    assert!(offset_of!(mlx5dv_cq, cqe_cnt) == 16 && offset_of!(mlx5dv_cq, cq_uar) == 24);
    assert!(offset_of!(mlx5dv_cq, cqn) == 32 && offset_of!(mlx5dv_cq, comp_mask) == 40);
    assert!(offset_of!(mlx5dv_srq, dbrec) == 8 && offset_of!(mlx5dv_srq, stride) == 16);
    assert!(offset_of!(mlx5dv_srq, head) == 20 && offset_of!(mlx5dv_srq, tail) == 24);
    assert!(offset_of!(mlx5dv_srq, comp_mask) == 32 && offset_of!(mlx5dv_srq, srqn) == 40);
    assert!(offset_of!(mlx5dv_ah, av) == 0 && offset_of!(mlx5dv_ah, comp_mask) == 8);
};

impl Default for mlx5dv_qp {
    fn default() -> Self {
        let wq = mlx5dv_qp_wq {
            buf: core::ptr::null_mut(),
            wqe_cnt: 0,
            stride: 0,
        };
        Self {
            dbrec: core::ptr::null_mut(),
            sq: wq,
            rq: wq,
            bf: mlx5dv_qp_bf {
                reg: core::ptr::null_mut(),
                size: 0,
            },
            comp_mask: 0,
            uar_mmap_offset: 0,
            tirn: 0,
            tisn: 0,
            rqn: 0,
            sqn: 0,
            tir_icm_addr: 0,
        }
    }
}

impl Default for mlx5dv_cq {
    fn default() -> Self {
        Self {
            buf: core::ptr::null_mut(),
            dbrec: core::ptr::null_mut(),
            cqe_cnt: 0,
            cqe_size: 0,
            cq_uar: core::ptr::null_mut(),
            cqn: 0,
            comp_mask: 0,
        }
    }
}

impl Default for mlx5dv_srq {
    /// Every field zero: no `srqn` asked for (set [`MLX5DV_SRQ_MASK_SRQN`] in `comp_mask`).
    fn default() -> Self {
        Self {
            buf: core::ptr::null_mut(),
            dbrec: core::ptr::null_mut(),
            stride: 0,
            head: 0,
            tail: 0,
            comp_mask: 0,
            srqn: 0,
        }
    }
}

impl Default for mlx5dv_ah {
    fn default() -> Self {
        Self {
            av: core::ptr::null_mut(),
            comp_mask: 0,
        }
    }
}

impl mlx5dv_ah {
    /// The address vector, or `None` if `mlx5dv_init_obj` left it null.
    pub fn av(&self) -> Option<NonNull<[u8; super::wqe::av::LEN]>> {
        NonNull::new(self.av.cast())
    }
}

impl mlx5dv_qp {
    /// The layout of QP `qpn`, or `None` if a pointer the data path needs is null. A QP without
    /// a receive ring gets a dangling receive pointer and `wqe_cnt` 0.
    pub fn layout(&self, qpn: u32) -> Option<QpLayout> {
        let rq_buf = NonNull::new(self.rq.buf.cast::<u8>());
        Some(QpLayout {
            qpn,
            dbrec: NonNull::new(self.dbrec)?,
            sq: WqLayout {
                buf: NonNull::new(self.sq.buf.cast())?,
                wqe_cnt: self.sq.wqe_cnt,
                stride: self.sq.stride,
            },
            rq: WqLayout {
                buf: rq_buf.unwrap_or(NonNull::dangling()),
                wqe_cnt: if rq_buf.is_some() { self.rq.wqe_cnt } else { 0 },
                stride: self.rq.stride,
            },
            bf: BfLayout {
                reg: NonNull::new(self.bf.reg.cast())?,
                size: self.bf.size,
            },
        })
    }
}

impl mlx5dv_cq {
    /// The layout, or `None` if a pointer is null.
    pub fn layout(&self) -> Option<CqLayout> {
        Some(CqLayout {
            buf: NonNull::new(self.buf.cast())?,
            dbrec: NonNull::new(self.dbrec)?,
            cqe_cnt: self.cqe_cnt,
            cqe_size: self.cqe_size,
            cqn: self.cqn,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_of_what_mlx5dv_init_obj_fills() {
        let (mut dbrec, mut sq, mut rq, mut reg, mut cqes) =
            ([0u32; 2], [0u8; 64], [0u8; 32], [0u8; 8], [0u8; 64]);
        let p = |b: &mut [u8]| b.as_mut_ptr().cast::<c_void>();
        let qp = mlx5dv_qp {
            dbrec: dbrec.as_mut_ptr(),
            sq: mlx5dv_qp_wq {
                buf: p(&mut sq),
                wqe_cnt: 64,
                stride: 64,
            },
            rq: mlx5dv_qp_wq {
                buf: p(&mut rq),
                wqe_cnt: 4,
                stride: 32,
            },
            bf: mlx5dv_qp_bf {
                reg: p(&mut reg),
                size: 256,
            },
            ..mlx5dv_qp::default()
        };
        let l = qp.layout(0x123).unwrap();
        assert_eq!(
            (l.qpn, l.dbrec.as_ptr(), l.bf.reg.as_ptr(), l.bf.size),
            (0x123, qp.dbrec, reg.as_mut_ptr(), 256)
        );
        assert_eq!(
            (l.sq.buf.as_ptr(), l.sq.wqe_cnt, l.sq.stride),
            (sq.as_mut_ptr(), 64, 64)
        );
        assert_eq!(
            (l.rq.buf.as_ptr(), l.rq.wqe_cnt, l.rq.stride),
            (rq.as_mut_ptr(), 4, 32)
        );
        // No receive ring: no receive entries.
        let no_rq = mlx5dv_qp {
            rq: mlx5dv_qp_wq {
                buf: core::ptr::null_mut(),
                ..qp.rq
            },
            ..qp
        };
        assert_eq!(no_rq.layout(1).unwrap().rq.wqe_cnt, 0);
        // A pointer the data path needs is null: no layout.
        assert!(
            mlx5dv_qp {
                dbrec: core::ptr::null_mut(),
                ..qp
            }
            .layout(1)
            .is_none()
        );

        let cq = mlx5dv_cq {
            buf: p(&mut cqes),
            dbrec: dbrec.as_mut_ptr(),
            cqe_cnt: 1,
            cqe_size: 64,
            cqn: 9,
            ..mlx5dv_cq::default()
        };
        let l = cq.layout().unwrap();
        assert_eq!(
            (
                l.buf.as_ptr(),
                l.dbrec.as_ptr(),
                l.cqe_cnt,
                l.cqe_size,
                l.cqn
            ),
            (cqes.as_mut_ptr(), cq.dbrec, 1, 64, 9)
        );
        assert!(
            mlx5dv_cq {
                buf: core::ptr::null_mut(),
                ..cq
            }
            .layout()
            .is_none()
        );
    }
}
