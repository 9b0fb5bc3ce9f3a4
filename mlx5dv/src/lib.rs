//! # zverbs-mlx5dv
//!
//! The mlx5 (ConnectX) direct data path. After rdma-core has created a queue pair and its
//! completion queue, `mlx5dv_init_obj` reveals their memory: the send and receive rings, the
//! doorbell records, the BlueFlame register and the CQE ring. This crate drives that memory
//! itself: it writes work queue entries (WQEs) into the send ring, rings the doorbell (with a
//! BlueFlame copy of the WQE when the device offers one) and polls CQEs without locks,
//! skipping libibverbs' function pointers, locks and per-call branching.
//!
//! `#![no_std]`, no `alloc`: nothing on the data path allocates, locks, makes a system call or
//! panics. Per-entry bookkeeping is storage the caller provides once ([`SqSlot`], [`RqSlot`]).
//!
//! ## Quick start
//!
//! ```ignore
//! // `qp` and `cq` are what mlx5dv_init_obj reported, converted to QpLayout / CqLayout.
//! let sq_slots: Vec<SqSlot> = (0..qp.sq.wqe_cnt).map(|_| SqSlot::new()).collect();
//! let rq_slots: Vec<RqSlot> = (0..qp.rq.wqe_cnt).map(|_| RqSlot::new()).collect();
//! let sq_state = SqState::new(&sq_slots)?;
//! let rq_state = RqState::new(&rq_slots)?;
//! let bindings = [CqBinding::new(qp.qpn, Some(&sq_state), Some(&rq_state))];
//! let mut sq = unsafe { SendQueue::new(&qp, caps, &sq_state)? };
//! let mut rq = unsafe { RecvQueue::new(&qp, &rq_state)? };
//! let mut cq = unsafe { CompletionQueue::new(&cq_layout, &bindings)? };
//! unsafe { sq.send(&SendWr::write(1, &sgl, remote).signaled())? };
//! let mut wc = [Completion::EMPTY; 16];
//! let n = cq.poll(&mut wc);
//! ```
//!
//! ## Modules
//!
//! - [`prm`]: the raw layouts and constants, named as `mlx5dv.h` names them.
//! - [`SendQueue`], [`RecvQueue`], [`CompletionQueue`]: the three queues, built by `unsafe`
//!   constructors from the raw layouts ([`QpLayout`], [`CqLayout`]) whose contracts are written
//!   on each.
//!
//! ## Thread safety
//!
//! Each queue is `Send` and is driven through `&mut self` by one thread at a time. A send
//! queue and the CQ polling its completions may live on different threads: they share only
//! an [`SqState`] (slots written before publication, one cache-padded credit word).
#![no_std]
#![deny(
    unsafe_op_in_unsafe_fn,
    missing_docs,
    clippy::undocumented_unsafe_blocks,
    clippy::missing_safety_doc
)]

mod cq;
pub mod devmem;
mod doorbell;
mod layout;
pub mod prm;
mod rq;
mod sq;
mod state;
#[cfg(test)]
mod testutil;

pub use cq::{CompletionQueue, VENDOR_ERR_UNSUPPORTED_FORMAT, status_of};
pub use layout::{BfLayout, CqLayout, LayoutError, QpLayout, SqCaps, WqLayout};
pub use rq::RecvQueue;
pub use sq::SendQueue;
pub use state::{CqBinding, RqSlot, RqState, SqSlot, SqState};
