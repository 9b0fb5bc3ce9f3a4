//! # zverbs
//!
//! Zero-allocation RDMA verbs for latency-critical code. Set-up (devices, protection domains,
//! memory regions, completion queues, queue pairs, connection) goes through rdma-core; after
//! that, on mlx5 (ConnectX) devices the data path is `zverbs-mlx5dv`'s direct one, and on
//! every other device the libibverbs fallback — behind the same traits, [`PostSend`],
//! [`PostRecv`] and [`PollCq`].
//!
//! ## Quick start
//!
//! On the software mlx5 device (feature `sim`, on by default): two queue pairs of this process
//! connected to each other, a WRITE with immediate from one into the other's buffer.
//!
//! ```
//! # #[cfg(feature = "sim")] {
//! use std::time::{Duration, Instant};
//! use zverbs::{AccessFlags, ContextOptions, SendFlags};
//!
//! # fn main() -> zverbs::Result<()> {
//! let ctx = zverbs::open_device(Some("zverbs_sim0"), &ContextOptions::default())?;
//! let pd = ctx.alloc_pd()?;
//! let (cq_a, cq_b) = (ctx.cq_builder().build()?, ctx.cq_builder().build()?);
//! let a = pd.qp_builder(&cq_a, &cq_a).build()?;
//! let b = pd.qp_builder(&cq_b, &cq_b).build()?;
//! zverbs::connect_pair(&a, &b)?; // INIT, RTR, RTS, each to the other
//!
//! let buf_a = pd.alloc_buf(4096, AccessFlags::ALL)?;
//! let buf_b = pd.alloc_buf(4096, AccessFlags::ALL)?;
//! let (mut qa, mut qb) = (a.queues(&cq_a)?, b.queues(&cq_b)?); // sq, rq, cq of each
//! qb.rq.post(1, buf_b.slice(..))?; // the immediate consumes a receive
//! buf_a.write(0, b"hello");
//! // Posts and rings: the device has it when this returns.
//! qa.sq.write_imm(2, buf_a.slice(0..5), buf_b.remote(0), 7, SendFlags::SIGNALED)?;
//! let deadline = Instant::now() + Duration::from_secs(5);
//! qa.cq.wait(1, deadline)?[0].ok()?; // the WRITE succeeded (or `?` says why not)
//! let imm = qb.cq.wait(1, deadline)?[0].ok()?.imm();
//! assert_eq!(imm, Some(7));
//! let mut got = [0; 5];
//! buf_b.read(0, &mut got);
//! assert_eq!(&got, b"hello");
//! # Ok(()) }
//! # main().unwrap(); }
//! ```
//!
//! Against a peer on a NIC, with the connection exchanged over TCP (`ibv_rc_pingpong`'s
//! exchange), and the hot loop written generically over the core traits, so that it is
//! monomorphised for the backend the QP got (the `unsafe` posts take any registered memory):
//!
//! ```no_run
//! use zverbs::{AccessFlags, ContextOptions, Queues, SendWr, PostSend, PollCq};
//! use zverbs::connect::exchange;
//!
//! # fn main() -> zverbs::Result<()> {
//! let ctx = zverbs::open_device(None, &ContextOptions::default())?;
//! let pd = ctx.alloc_pd()?;
//! let buf = pd.alloc_buf(4096, AccessFlags::ALL)?;
//! let cq = ctx.cq_builder().cqe(256).build()?;
//! let qp = pd.qp_builder(&cq, &cq).max_send_wr(64).max_recv_wr(64).build()?;
//! println!("backend: {}", qp.backend());
//!
//! // Tell the peer where we are (ibv_rc_pingpong's exchange), then connect to where it is.
//! let mut s = exchange::connect("server:18515", std::time::Duration::from_secs(10))?;
//! let hello = exchange::Hello { endpoint: qp.endpoint()?, ..Default::default() };
//! let peer = exchange::client(&mut s, &hello, exchange::Wire::RcPingpong)?;
//! qp.connect(&peer.endpoint)?; // INIT, RTR, RTS: from the peer's PSN, sending from ours
//!
//! let sge = [buf.sge(0..64)];
//! match Queues::take(&qp, &cq)? {
//!     Queues::Direct(mut q) => send_one(&mut q.sq, &mut q.cq, &sge)?,
//!     Queues::Verbs(mut q) => send_one(&mut q.sq, &mut q.cq, &sge)?,
//! }
//! # Ok(()) }
//! fn send_one(sq: &mut impl PostSend, cq: &mut impl PollCq, sge: &[zverbs::Sge]) -> zverbs::Result<()> {
//!     // SAFETY: `sge` lies in a registered buffer that outlives the request, and nothing
//!     // writes it until the completion is polled.
//!     unsafe { sq.post(&SendWr::send(1, sge).signaled()) }?; // posts and rings
//!     let mut wc = [zverbs::Completion::EMPTY; 4];
//!     loop {
//!         if let [c, ..] = cq.poll_into(&mut wc) {
//!             c.ok()?;
//!             return Ok(());
//!         }
//!     }
//! }
//! ```
//!
//! ## Features
//!
//! - `sim` (on by default): the software mlx5 device [`SOFTWARE_DEVICE`] (`zverbs_sim0`,
//!   crate `zverbs-sim`, re-exported as `zverbs::sim`), a ConnectX stand-in in this process
//!   that runs the direct backend with no NIC. Without the feature
//!   (`default-features = false`), `zverbs-sim` is not a dependency, `zverbs::sim` does not
//!   exist and the device is not listed; everything else is there.
//!
//! rdma-core is loaded at run time (`libibverbs.so.1`, `libmlx5.so.1`, `librdmacm.so.1`): the
//! crate builds anywhere, and asking for a device on a machine without rdma-core is an error
//! naming the package to install.
//!
//! ## Stability
//!
//! `zverbs` follows semver (today 0.x: a release that breaks the API raises the minor
//! version). What that covers, including the crates it re-exports so that one dependency
//! brings them all:
//!
//! - **Covered**: this crate's own items; [`core`] (`zverbs-core`, the data path's vocabulary,
//!   whose everyday types are also at this crate's root: `zverbs::SendWr` is
//!   `zverbs::core::SendWr`); [`mlx5`] (`zverbs-mlx5dv`, the direct backend's queues and the
//!   mlx5 layouts, the types of [`Queues::Direct`]); and `sim` (`zverbs-sim`) while the `sim`
//!   feature is on. A breaking change in any of them is a breaking release of `zverbs`.
//! - **Not covered**: [`ffi`] (`zverbs-ffi`, the raw rdma-core binding). It follows rdma-core's
//!   headers and ABI, and a compatible release of `zverbs` may move to a binding whose items
//!   were added, changed or removed; that includes the raw pointer types that [`fallback`]'s
//!   `unsafe` constructors take, the one place the binding shows in this crate's API. Code
//!   that relies on the binding itself depends on `zverbs-ffi` directly.
//! - **Not API**: items hidden from the documentation (the loom models' mutants in
//!   `core::sync` and the cells of `mlx5::devmem`, public for the workspace's loom models) and
//!   `zverbs-core`'s `loom` feature.
//! - **The minimum supported Rust version** (below) is raised only by a release that raises the
//!   minor version, and never by a patch release.
//!
//! The `crates` stage of `cargo xtask test` runs `cargo semver-checks` against the last
//! published version of each crate.
//!
//! ## Minimum supported Rust version
//!
//! Rust 1.95: the manifest's `rust-version`, checked in CI by building the published crates
//! with the 1.95.0 toolchain (`cargo xtask test`, stage `crates`).
//!
//! ## Which device
//!
//! [`open_device`] opens the device it is given by name; without a name, the one the
//! environment variable `ZVERBS_DEVICE` names ([`DEVICE_ENV`]); without either, the first NIC.
//! The software device is opened only by its name (`open_device(Some("zverbs_sim0"), ..)` or
//! `ZVERBS_DEVICE=zverbs_sim0`), never in place of a missing NIC: a machine without one gets
//! [`Error::NoDevice`], which says what is missing (rdma-core's package, or a device) and how
//! to ask for the software device.
//!
//! ## Backends
//!
//! See [`backend`]: automatic (direct on mlx5, fallback elsewhere), overridden by the caller
//! or by `ZVERBS_BACKEND=auto|direct|verbs`, and reported by [`Qp::backend`] and
//! [`Cq::backend`]. The handles are in [`queues`].
//!
//! ## Safety: which posting is `unsafe`
//!
//! The core traits' post methods are `unsafe`: the device reads and writes memory by address,
//! and the caller promises the buffers stay registered and untouched by Rust references until
//! their completion. [`safe`] wraps a send or receive queue so that it only posts spans of
//! buffers the library allocated ([`MrBuf`]), which Rust never references and which are
//! deregistered before their memory is freed: no `unsafe` at the call site. It is also the
//! convenient layer: its posts ring, its waits have deadlines, and [`Qp::queues`] hands out a
//! QP's queues and its CQ's poller in one call.
//! Registering caller-owned memory ([`Pd::register`]) is `unsafe` with a written contract.
//!
//! ## Thread safety
//!
//! [`Context`], [`Pd`], [`Cq`], [`Qp`], [`Mr`] and [`MrBuf`] are `Send + Sync` handles. An
//! `MrBuf`'s bytes may be read and written from any number of threads while the device writes
//! into it: its accessors are atomic (see its memory model, and [`MrBuf::wait_u8`] for polling
//! the last byte of a message). A
//! send queue, a receive queue and a poller are each `Send` and driven through `&mut self` by
//! one thread at a time; a QP's send queue and the poller of its CQ may live on different
//! threads (they share only atomics).
//!
//! None of the data-path handles is `Sync` (nor are the [`safe`] wrappers): a queue or a poller
//! moves between threads but is never shared by reference, and what a send queue shares with
//! its poller is its bookkeeping, handed over through one atomic credit word.
//!
//! ## Resource cleanup
//!
//! Every handle holds its parents (a QP its CQs and PD, a CQ and a PD their context, a queue
//! handle its QP, a poller its CQ and QPs), so objects can be dropped in any order: rdma-core
//! objects are destroyed children first, when the last handle goes.
#![deny(
    unsafe_op_in_unsafe_fn,
    missing_docs,
    clippy::undocumented_unsafe_blocks,
    clippy::missing_safety_doc
)]

/// The README's example, compiled and run as a doc-test so that it stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

pub mod backend;
pub mod connect;
mod cq;
mod device;
mod env;
mod error;
pub mod fallback;
mod mr;
mod pd;
mod provider;
mod qp;
pub mod queues;
mod register;
pub mod safe;

pub use backend::{BackendChoice, BackendKind, BackendReport, BackendRequest, BlueFlame};
pub use cq::{Cq, CqBuilder};
pub use device::{
    Context, ContextOptions, DEVICE_ENV, Device, DeviceAttr, Gid, GidEntry, GidType, LinkLayer,
    LocalAddress, Mtu, PortAttr, PortState, SOFTWARE_DEVICE, devices, open_device,
};
pub use error::{Error, Result};
pub use mr::{AccessFlags, BufError, Mr, MrBuf};
pub use pd::Pd;
pub use qp::{
    ConnectAttr, GlobalRoute, InitAttr, Qp, QpBuilder, QpCaps, QpState, RtrAttr, RtsAttr,
    connect_pair,
};
pub use queues::{AnyPoller, AnyRecvQueue, AnySendQueue, QueueSet, Queues};

#[cfg(feature = "sim")]
pub use provider::sim::SimControl;
/// The data path's vocabulary (crate `zverbs-core`): work requests, completions, the post and
/// poll traits and their errors, whose everyday types this crate's root re-exports.
///
/// **Covered by this crate's semver**, as its own items are: `zverbs::SendWr` is
/// `zverbs::core::SendWr`, so a breaking change of `zverbs-core` is a breaking release of
/// `zverbs`. What `zverbs-core` hides from its documentation (the loom models' mutants) is not
/// covered.
pub use zverbs_core as core;
pub use zverbs_core::{
    BatchError, Completion, PollCq, PostError, PostRecv, PostSend, RecvWr, RemoteBuf, SendBatch,
    SendFlags, SendOp, SendWr, Sge, WcError, WcFlags, WcOpcode, WcStatus,
};
/// The raw rdma-core binding the control path and the fallback are built on (crate
/// `zverbs-ffi`): hand-written `repr(C)` declarations, checked against rdma-core's headers, and
/// libibverbs, libmlx5 and librdmacm loaded at run time.
///
/// **Not covered by this crate's semver.** It follows rdma-core's headers and ABI, not the
/// evolution of this crate's API: a compatible release of `zverbs` may move to a binding whose
/// items were added, changed or removed. Applications use the safe API and reach for it only
/// for a raw handle (the raw pointers that [`fallback`]'s `unsafe` constructors take are its
/// types); code that relies on the binding itself depends on `zverbs-ffi` directly.
#[doc(inline)]
pub use zverbs_ffi as ffi;
/// The mlx5 direct backend (crate `zverbs-mlx5dv`): the queues behind [`Queues::Direct`]
/// ([`queues::direct`]) and [`mlx5::prm`](zverbs_mlx5dv::prm), the WQE and CQE layouts as
/// `mlx5dv.h` names them.
///
/// **Covered by this crate's semver**, as [`core`] is: the direct queues are its
/// types. What `zverbs-mlx5dv` hides from its documentation (the cells the loom models build
/// rings of) is not covered.
pub use zverbs_mlx5dv as mlx5;
/// The software mlx5 device (crate `zverbs-sim`), also reachable as the device `zverbs_sim0` of
/// [`devices`]; only with the `sim` feature (on by default).
///
/// **Covered by this crate's semver** while the feature is on: tests written against the
/// device, its fault injection and its counters keep compiling across compatible releases.
#[cfg(feature = "sim")]
pub use zverbs_sim as sim;

#[cfg(test)]
mod test_alloc;
#[cfg(test)]
mod tests;
