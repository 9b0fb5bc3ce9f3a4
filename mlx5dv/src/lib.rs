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
//! On hardware the layouts come from `mlx5dv_init_obj` (the `zverbs` crate converts them from
//! [`prm::dv::mlx5dv_qp`] and [`prm::dv::mlx5dv_cq`]); here ordinary memory stands in for the
//! device's, so the example runs anywhere (nothing executes the WQE, so no completion comes).
//!
//! ```
//! # use core::ptr::NonNull;
//! use zverbs_core::{Completion, PollCq, PostSend, RemoteBuf, SendWr, Sge};
//! use zverbs_mlx5dv::*;
//!
//! # #[derive(Clone, Copy)] #[repr(C, align(64))] struct Block([u8; 64]);
//! # // Device memory is reached only through raw pointers: each region is one allocation,
//! # // turned into a pointer once and read back through it.
//! # fn region<T: Copy>(fill: T, n: usize) -> NonNull<T> {
//! #     NonNull::new(Box::into_raw(vec![fill; n].into_boxed_slice()).cast::<T>()).unwrap()
//! # }
//! # let (sq_ring, rq_ring, cqes) = (region(Block([0; 64]), 64), region(Block([0; 64]), 16), region(Block([0xff; 64]), 64));
//! # let (dbrec, cq_dbrec, bf) = (region(0u32, 2), region(0u32, 2), region(Block([0; 64]), 8));
//! let qp = QpLayout {
//!     qpn: 0x100,
//!     dbrec,
//!     sq: WqLayout { buf: sq_ring.cast(), wqe_cnt: 64, stride: 64 },
//!     rq: WqLayout { buf: rq_ring.cast(), wqe_cnt: 64, stride: 16 },
//!     bf: BfLayout { reg: bf.cast(), size: 256 },
//! };
//! let cq_layout = CqLayout {
//!     buf: cqes.cast(),
//!     dbrec: cq_dbrec,
//!     cqe_cnt: 64,
//!     cqe_size: 64,
//!     cqn: 1,
//! };
//! let caps = SqCaps {
//!     max_send_sge: 1,
//!     max_inline_data: 64,
//!     sig_all: false,
//!     max_signaled: 64,
//!     transport: zverbs_mlx5dv::Transport::Rc,
//! };
//!
//! // Bookkeeping storage, sized once, and the states the queues share with the CQ. Here they
//! // are borrowed (no allocator needed); with one, owning handles (`Arc<SqState<Box<[_]>>>`)
//! // work as well.
//! let sq_slots: Vec<SqSlot> = (0..qp.sq.wqe_cnt).map(|_| SqSlot::new()).collect();
//! let rq_slots: Vec<RqSlot> = (0..qp.rq.wqe_cnt).map(|_| RqSlot::new()).collect();
//! let sq_state = SqState::new(&sq_slots[..])?;
//! let rq_state = RqState::new(&rq_slots[..])?;
//! let bindings = [CqBinding::new(qp.qpn, Some(&sq_state), Some(&rq_state))];
//! // SAFETY: the layouts describe live queue memory that outlives the queues, driven by
//! // nothing else.
//! let (mut sq, _rq, mut cq) = unsafe {
//!     (
//!         SendQueue::new(&qp, caps, &sq_state, None)?,
//!         RecvQueue::new(&qp, &rq_state)?,
//!         CompletionQueue::new(&cq_layout, &bindings[..])?,
//!     )
//! };
//!
//! let buf = [0u8; 64];
//! let sgl = [Sge::from_slice(&buf, 0x1100)];
//! let remote = RemoteBuf::new(0x7f00_0000_1000, 0xdead_beef);
//! // SAFETY: `buf` is registered memory the NIC only reads, and it outlives the request.
//! unsafe { sq.post(&SendWr::write(1, &sgl, remote).signaled())? };
//! let mut wc = [Completion::EMPTY; 16];
//! let n = cq.poll(&mut wc); // completions the device has written
//! # assert_eq!(n, 0);
//! # // SAFETY: word 1 of the doorbell record, written by the queue above (now idle).
//! # assert_eq!(u32::from_be(unsafe { dbrec.add(1).read_volatile() }), 1);
//! # drop((sq, _rq, cq));
//! # // SAFETY: each region came from `region` and nothing uses it any more.
//! # unsafe {
//! #     fn free<T>(p: NonNull<T>, n: usize) { drop(unsafe { Box::from_raw(core::ptr::slice_from_raw_parts_mut(p.as_ptr(), n)) }) }
//! #     free(sq_ring, 64); free(rq_ring, 16); free(cqes, 64); free(dbrec, 2); free(cq_dbrec, 2); free(bf, 8);
//! # }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## Modules
//!
//! - [`prm`]: the raw layouts and constants, named as `mlx5dv.h` names them.
//! - [`SendQueue`], [`RecvQueue`], [`CompletionQueue`]: the three queues, built by `unsafe`
//!   constructors from the raw layouts ([`QpLayout`], [`CqLayout`]) whose contracts are written
//!   on each.
//! - [`StridingRq`]: a striding ("multi-packet") receive work queue of raw Ethernet, whose
//!   packets its polls hand out in place ([`Packet`]), borrowed from the strides until dropped.
//! - [`CqArm`]: a CQ's arm (libmlx5's `mlx5_arm_cq` sequence), for completion events; not on
//!   the poll path.
//! - [`bf`]: a BlueFlame register of the queue's own, or one several queues share and take in
//!   turn ([`SharedBf`]); which, a queue is told when it is built ([`BfMode`]).
//!
//! ## Thread safety
//!
//! Each queue is `Send` but not `Sync`: it is driven through `&mut self` by one thread at a
//! time and never shared by reference. That holds for a queue that borrows its state
//! (`&SqState<&[SqSlot]>`) and for one that owns a handle to it (`Arc<SqState<Box<[SqSlot]>>>`);
//! a handle that cannot cross threads (`Rc`) keeps its queue on its thread. A send queue and the
//! CQ polling its completions may live on different threads: they share only an [`SqState`]
//! (slots written before publication, one cache-padded credit word), which is `Send + Sync`,
//! as are [`RqState`], the slots and the [`CqBinding`]s over `Send + Sync` handles. With
//! borrowed states the borrow checker keeps the slots, the states and the bindings alive for
//! as long as a queue or the poller uses them.
//!
//! A [`StridingRq`] is owned by one thread with the packets it hands out (its bookkeeping is
//! cells, shared with no poller on another thread): `Send`, not `Sync`.
//!
//! Send queues whose QPs share a BlueFlame register share a [`SharedBf`] too, and take its lock
//! around each doorbell write; a queue with a register of its own takes nothing.
//!
//! ## Minimum supported Rust version
//!
//! Rust 1.95: the manifest's `rust-version`, checked in CI by building the published crates
//! with the 1.95.0 toolchain (`cargo xtask test`, stage `crates`).
#![no_std]
// Under loom the rings are models without the byte-level paths (scatter-to-CQE, the CQE
// stride), so parts the model build does not reach are unused there.
#![cfg_attr(zverbs_loom, allow(dead_code))]

/// The README's example, compiled and run as a doc-test so that it stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

mod arm;
pub mod bf;
pub mod clock;
mod cq;
// The cells the queues' memory is made of, public for the loom models of the workspace (which
// build rings of them): not API, outside semver, hidden from the documentation.
#[doc(hidden)]
pub mod devmem;
mod doorbell;
mod drain;
mod gate;
#[cfg(all(test, not(zverbs_loom)))]
mod gate_tests;
mod layout;
pub mod prm;
mod rq;
mod segreg;
mod sq;
mod srq;
mod state;
#[cfg(not(zverbs_loom))]
mod striding;
#[cfg(test)]
mod testutil;

pub use arm::CqArm;
pub use bf::{BfMode, SharedBf};
pub use cq::{CompletionQueue, VENDOR_ERR_UNSUPPORTED_FORMAT, status_of};
pub use drain::{DRAIN_WR_ID, post_drain_marker};
pub use gate::{Gate, clear_doorbell_record, doorbell_counters};
pub use layout::{
    BfLayout, CqLayout, LayoutError, QpLayout, SqCaps, SrqLayout, Transport, WqLayout,
};
pub use rq::RecvQueue;
pub use sq::{
    Changes, Connected, DC_AV_DS, Datagram, Dci, Ethernet, FRAME_HEADERS_MAX, FrameLengths,
    Prepared, PreparedFrame, PreparedRdma, PreparedSend, SelfAddressed, SendQueue, SqTransport,
};
pub use srq::SharedRecvQueue;
pub use state::{
    Bindings, CqBinding, RqRef, RqSlot, RqState, RqStateRef, SqRef, SqSlot, SqState, SqStateRef,
    SrqRef, SrqSlot, SrqState, SrqStateRef,
};
#[cfg(not(zverbs_loom))]
pub use striding::{
    Packet, StrideBuffer, StrideConfig, StrideSlot, StridingRq, StridingState, StridingStateRef,
};
