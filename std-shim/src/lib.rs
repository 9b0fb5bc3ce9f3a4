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
//! On the software mlx5 device ([`SOFTWARE_DEVICE`], feature `sim`: no NIC, no rdma-core, no
//! server; `zverbs = { version = "0.1", features = ["sim"] }`): two RC queue pairs of this process connected to each other, an
//! RDMA WRITE from one into the other's buffer, then a SEND into a receive the other posted.
//! Every call returns a [`Result`], so `?` carries set-up, posting, waiting and failed
//! completions alike. This is run by `cargo test --doc`.
//!
//! ```
//! # #[cfg(feature = "sim")] {
//! use std::time::{Duration, Instant};
//! use zverbs::{AccessFlags, ContextOptions, Registered, SendFlags};
//!
//! # fn main() -> zverbs::Result<()> {
//! // The software device by name; `open_device(None, ..)` opens the device the environment
//! // variable `ZVERBS_DEVICE` names, else the first NIC.
//! let ctx = zverbs::open_device(Some(zverbs::SOFTWARE_DEVICE), &ContextOptions::default())?;
//! let pd = ctx.alloc_pd()?;
//! let buf_a = pd.alloc_buf(4096, AccessFlags::ALL)?; // allocated and registered
//! let buf_b = pd.alloc_buf(4096, AccessFlags::ALL)?;
//! let (cq_a, cq_b) = (ctx.cq_builder().build()?, ctx.cq_builder().build()?);
//! let a = pd.qp_builder(&cq_a, &cq_a).build()?;
//! let b = pd.qp_builder(&cq_b, &cq_b).build()?;
//! // Connect each QP to the other: INIT, RTR, RTS. Between two machines each side sends its
//! // `qp.endpoint()` over the network (`zverbs::connect`) and calls `qp.connect(&peer)`.
//! zverbs::connect_pair(&a, &b)?;
//! let (mut qa, mut qb) = (a.queues(&cq_a)?, b.queues(&cq_b)?); // sq, rq, cq of each
//! let deadline = Instant::now() + Duration::from_secs(5);
//!
//! // RDMA WRITE: A's bytes land in B's buffer, without B's CPU.
//! buf_a.write(0, b"hello")?;
//! qa.sq.write(1, buf_a.slice(0..5)?, buf_b.remote(0)?, SendFlags::SIGNALED)?; // posts and rings
//! let done = qa.cq.wait(1, deadline)?[0].ok()?; // a timeout or a failed request is an `Err`
//! assert_eq!(done.wr_id, 1);
//! let mut got = [0; 5];
//! buf_b.read(0, &mut got)?;
//! assert_eq!(&got, b"hello");
//!
//! // SEND into a receive that B posted.
//! qb.rq.post(2, buf_b.slice(1024..2048)?)?;
//! buf_a.write(100, b"a message")?;
//! qa.sq.send(3, buf_a.slice(100..109)?, SendFlags::SIGNALED)?;
//! qa.cq.wait(1, deadline)?[0].ok()?;
//! let recv = *qb.cq.wait(1, deadline)?[0].ok()?;
//! assert_eq!((recv.wr_id, recv.byte_len), (2, 9));
//! let mut msg = [0; 9];
//! buf_b.read(1024, &mut msg)?;
//! assert_eq!(&msg, b"a message");
//! # Ok(()) }
//! # main().unwrap(); }
//! ```
//!
//! Against a peer on a NIC, with the connection exchanged over TCP (`ibv_rc_pingpong`'s
//! exchange). The same handles drive whichever backend the QP got; a hot loop monomorphised
//! for one backend takes that backend's types ([`backend::Queues`]):
//!
//! ```no_run
//! use zverbs::{AccessFlags, ContextOptions, SendFlags};
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
//! let mut q = qp.queues(&cq)?;
//! q.sq.send(1, buf.slice(0..64)?, SendFlags::SIGNALED)?; // posts and rings
//! let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
//! q.cq.wait(1, deadline)?[0].ok()?;
//! # Ok(()) }
//! ```
//!
//! ## Features
//!
//! - `sim` (off by default): the software mlx5 device [`SOFTWARE_DEVICE`] (`zverbs_sim0`,
//!   crate `zverbs-sim`, re-exported as `zverbs::sim`), a ConnectX stand-in in this process
//!   that runs the direct backend with no NIC: for tests, development and the examples.
//!   Without it, `zverbs-sim` is not a dependency, `zverbs::sim` does not exist and the device
//!   is not listed; everything else is there.
//! - `rdma_cm` (on by default): `connect::cm`, connections through the RDMA connection
//!   manager. `librdmacm.so.1` is loaded at run time like libibverbs, so the feature costs no
//!   dependency; `default-features = false` leaves the module out.
//! - `tokio` (off by default): `Poller::wait_async` and `AsyncChannel`, a CQ's
//!   completion channel awaited through tokio's reactor. Without it, the channel is still
//!   [`AsFd`](std::os::fd::AsFd) for any event loop, and [`Poller::wait_blocking`] sleeps in the
//!   calling thread.
//! - `pmix` (off by default): `connect::pmix`, for programs started N times
//!   by a PMIx launcher (`mpirun`, `srun --mpi=pmix`): the job's rank and size, records
//!   exchanged through the launcher, and every pair of processes connected (one RC QP per
//!   peer). The PMIx client library (`libpmix.so.2`) is loaded at run time, like rdma-core.
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
//!   mlx5 layouts, the types of [`backend::Queues::Direct`]); and `sim` (`zverbs-sim`) while the `sim`
//!   feature is on. A breaking change in any of them is a breaking release of `zverbs`.
//! - **Not covered**: [`ffi`] (`zverbs-ffi`, the raw rdma-core binding). It follows rdma-core's
//!   headers and ABI, and a compatible release of `zverbs` may move to a binding whose items
//!   were added, changed or removed; that includes the raw pointer types that [`backend::verbs`]'s
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
//! [`Cq::backend`]. The handles ([`SendQueue`] and the others) hold the backend's typed
//! handles ([`backend::mlx5`], [`backend::verbs`]), which a loop monomorphised for one backend
//! takes directly ([`backend::Queues`]).
//!
//! ## Raw Ethernet
//!
//! Raw packet QPs ([`Pd::create_raw_qp`]: `CAP_NET_RAW` and the device checked first) send
//! whole frames through the same [`SendQueue`] ([`SendQueue::send_frame`], prepared frames
//! with [`SendQueue::prepare_frame`], checksums by the device with [`SendFlags::IP_CSUM`]);
//! [`FlowRule`]s steer arriving frames to a raw QP or an [`RssQp`] over [`WorkQueue`]s
//! ([`Flow`] removes its rule on drop); a [`McastMembership`] joins a group through a kernel
//! socket; a striding work queue's packets are read in place ([`StridingQueue`], [`Packet`],
//! the direct backend). `docs/ethernet.md` says what each backend can do, and
//! `tools/examples/market_data.rs` puts it together.
//!
//! ## Safety: which posting is `unsafe`
//!
//! The core traits' post methods are `unsafe`: the device reads and writes memory by address,
//! and the caller promises the buffers stay registered and untouched by Rust references until
//! their completion. The [`SendQueue`]'s operations (and the receive queue's and SRQ's of
//! [`safe`]) post only spans of buffers the library allocated ([`MrBuf`]), which Rust never
//! references and which are deregistered before their memory is freed: no `unsafe` at the call
//! site, for RC, UD and DC, and for prepared requests. Its posts ring, its waits have deadlines,
//! and [`Qp::queues`] hands out a QP's queues and its CQ's poller in one call.
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

// A doc example that drops a `Result` (a copy into a buffer, a post) is an error, not a
// warning nobody sees.
#![doc(test(attr(deny(unused_must_use))))]

/// The README's example, compiled and run as a doc-test so that it stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

mod async_events;
pub mod backend;
mod bindings;
mod blueflame;
mod channel;
mod clock;
pub mod connect;
mod cq;
pub mod dc;
mod device;
mod env;
mod error;
mod fallback;
mod flow;
mod mcast;
mod mr;
mod pd;
mod poller;
mod provider;
mod qp;
mod queues;
mod raw_qp;
mod recovery;
mod rq;
mod rss;
pub mod safe;
mod sq;
mod srq;
mod striding;
mod take;
mod typed;
mod types;
mod ud;
mod wait;
mod wq;

pub use async_events::AsyncEvents;
pub use backend::{BackendChoice, BackendKind, BackendReport, BackendRequest, BlueFlame};
pub use channel::CompChannel;
pub use clock::DeviceClock;
pub use cq::{Cq, CqBuilder};
pub use device::{Context, ContextOptions, DEVICE_ENV, Device, devices, open_device};
pub use error::EventError;
pub use error::{Error, Result};
pub use flow::Flow;
pub use mcast::McastMembership;
pub use mr::{Mr, MrBuf, Registered};
pub use pd::Pd;
pub use poller::Poller;
pub use provider::SrqLayout;
pub use qp::{Qp, QpBuilder, connect_pair};
pub use rq::{RecvQueue, SrqQueue};
pub use rss::RssQp;
pub use sq::{Batch, Changes, Prepared, PreparedFrame, SendQueue, To};
pub use srq::{Srq, SrqStateHandle};
pub use striding::{Packet, StridingQueue};
pub use types::access::AccessFlags;
pub use types::ah::{AhAttr, MULTICAST_QPN, UdAttr};
pub use types::buf::BufError;
pub use types::device::{
    DeviceAttr, Gid, GidEntry, GidType, LinkLayer, LocalAddress, Mtu, PortAttr, PortState,
    SOFTWARE_DEVICE,
};
pub use types::eth::{
    CAP_NET_RAW_BIT, DEFAULT_RSS_KEY, FLOW_PRIORITIES, FlowRule, FlowRuleError, FlowSpec,
    FlowSpecError, L4Proto, MAX_FLOW_TAG, RawCaps, RxHash, RxHashFields, Strides, WqShape,
    has_cap_net_raw, multicast_mac,
};
pub use types::event::{AsyncEvent, CqId, SrqId};
pub use types::qp::{
    ConnectAttr, GlobalRoute, InitAttr, QpCaps, QpState, QpType, RtrAttr, RtsAttr,
};
pub use ud::{AddressHandle, UdTarget};
#[cfg(feature = "tokio")]
pub use wait::AsyncChannel;
pub use wq::WorkQueue;
/// The `wr_id` of a drain marker's completion: a flush [`Qp::reset`] may ask for, when the last
/// requests of a QP in the error state completed unsignaled (`docs/usage.md`, "Recovery").
pub use zverbs_mlx5dv::DRAIN_WR_ID;
/// What a compressed CQ's mini-CQEs carry besides the length ([`CqBuilder::compressed`]).
pub use zverbs_mlx5dv::prm::mini::MiniCqeFormat;
/// The length fields a [`PreparedFrame`] sets for each payload ([`SendQueue::prepare_frame`]).
pub use zverbs_mlx5dv::{FRAME_HEADERS_MAX, FrameLengths};

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
/// The fields most completion loops read, polled with [`PollCq::poll_brief`]: on the mlx5
/// direct backend the rest of the CQE is never read.
pub use zverbs_core::BriefCompletion;
/// In `zverbs`, what both backends' pollers return. On the software device, a WRITE with a
/// wrong remote key fails at the peer; its completion says so, and [`Completion::ok`] makes it
/// an error (`a`, `b`, `buf_a`, `buf_b` as in [`Qp`]'s example):
///
/// ```
/// # #[cfg(feature = "sim")] {
/// # fn main() -> zverbs::Result<()> {
/// # let ctx = zverbs::open_device(Some(zverbs::SOFTWARE_DEVICE), &zverbs::ContextOptions::default())?;
/// # let pd = ctx.alloc_pd()?;
/// # let (cq_a, cq_b) = (ctx.cq_builder().build()?, ctx.cq_builder().build()?);
/// # let (a, b) = (pd.qp_builder(&cq_a, &cq_a).build()?, pd.qp_builder(&cq_b, &cq_b).build()?);
/// # zverbs::connect_pair(&a, &b)?;
/// # let buf_a = pd.alloc_buf(4096, zverbs::AccessFlags::ALL)?;
/// # let buf_b = pd.alloc_buf(4096, zverbs::AccessFlags::ALL)?;
/// use std::time::{Duration, Instant};
/// use zverbs::{Registered, RemoteBuf, SendFlags, WcStatus};
///
/// let mut qa = a.queues(&cq_a)?;
/// let wrong = RemoteBuf::new(buf_b.addr(), buf_b.rkey() ^ 0x5a5a_0000);
/// qa.sq.write(9, buf_a.slice(0..8)?, wrong, SendFlags::SIGNALED)?;
/// let deadline = Instant::now() + Duration::from_secs(5);
/// let c = qa.cq.wait(1, deadline)?[0];
/// assert_eq!((c.wr_id, c.status), (9, WcStatus::RemAccessErr));
/// let err = c.ok().unwrap_err(); // with `?`: a `zverbs::Error::Completion`
/// assert_eq!(err.qp_num, a.qpn());
/// println!("{err}"); // work request 9 on QP 0x..: remote access error (vendor syndrome 0x..)
/// # Ok(()) }
/// # main().unwrap(); }
/// ```
pub use zverbs_core::Completion;
/// In `zverbs`, implemented by the [`Poller`] and the backends' typed pollers ([`backend::Queues`]);
/// [`PostSend`]'s example polls through it on the software device.
pub use zverbs_core::PollCq;
/// In `zverbs`, implemented by [`SendQueue`] (for requests over memory the caller vouches
/// for) and by the backends' typed queues ([`backend::Queues`]): generic code over [`PostSend`]
/// and [`PollCq`] is monomorphised for each. The posts are `unsafe` (see the contract below);
/// the [`SendQueue`]'s own operations spare it. `a` and `b` are two connected QPs, `buf_a` and
/// `buf_b` a buffer on each side, as in [`Qp`]'s example:
///
/// ```
/// # #[cfg(feature = "sim")] {
/// # fn main() -> zverbs::Result<()> {
/// # let ctx = zverbs::open_device(Some(zverbs::SOFTWARE_DEVICE), &zverbs::ContextOptions::default())?;
/// # let pd = ctx.alloc_pd()?;
/// # let (cq_a, cq_b) = (ctx.cq_builder().build()?, ctx.cq_builder().build()?);
/// # let (a, b) = (pd.qp_builder(&cq_a, &cq_a).build()?, pd.qp_builder(&cq_b, &cq_b).build()?);
/// # zverbs::connect_pair(&a, &b)?;
/// # let buf_a = pd.alloc_buf(4096, zverbs::AccessFlags::ALL)?;
/// # let buf_b = pd.alloc_buf(4096, zverbs::AccessFlags::ALL)?;
/// use std::time::{Duration, Instant};
/// use zverbs::backend::Queues;
/// use zverbs::{Completion, PollCq, PostSend, Registered, SendWr};
///
/// fn post_and_wait(sq: &mut impl PostSend, cq: &mut impl PollCq, wr: &SendWr<'_>) -> zverbs::Result<Completion> {
///     // SAFETY: the request's memory is an `MrBuf`, registered for as long as it lives, and
///     // Rust holds no reference into it.
///     unsafe { sq.post(wr) }?; // posts and rings
///     let deadline = Instant::now() + Duration::from_secs(5);
///     let mut wc = [Completion::EMPTY; 4];
///     while Instant::now() < deadline {
///         if let [c, ..] = cq.poll_into(&mut wc) {
///             return Ok(*c.ok()?); // a failed request is an `Err`
///         }
///     }
///     Err(zverbs::safe::WaitError::Timeout { wanted: 1, got: 0 }.into())
/// }
///
/// buf_a.write(0, b"generic")?;
/// let sgl = [buf_a.sge(0..7)?];
/// let wr = SendWr::write(1, &sgl, buf_b.remote(0)?).signaled();
/// let c = match Queues::take(&a, &cq_a)? {
///     Queues::Direct(mut q) => post_and_wait(&mut q.sq, &mut q.cq, &wr)?, // mlx5, this device
///     Queues::DirectUd(mut q) => post_and_wait(&mut q.sq, &mut q.cq, &wr)?, // a UD QP there
///     Queues::Verbs(mut q) => post_and_wait(&mut q.sq, &mut q.cq, &wr)?, // every other device
/// };
/// assert_eq!(c.wr_id, 1);
/// let mut got = [0; 7];
/// buf_b.read(0, &mut got)?;
/// assert_eq!(&got, b"generic");
/// # Ok(()) }
/// # main().unwrap(); }
/// ```
pub use zverbs_core::PostSend;
pub use zverbs_core::{
    BatchError, PostError, PostRecv, RecvWr, RemoteBuf, SendBatch, SendFlags, SendOp, SendWr, Sge,
    SqCaps, Transport, UdDest, WcError, WcFlags, WcOpcode, WcStatus,
};
pub use zverbs_core::{PollCqTimed, TimedCompletion};
/// The raw rdma-core binding the control path and the fallback are built on (crate
/// `zverbs-ffi`): hand-written `repr(C)` declarations, checked against rdma-core's headers, and
/// libibverbs, libmlx5 and librdmacm loaded at run time.
///
/// **Not covered by this crate's semver.** It follows rdma-core's headers and ABI, not the
/// evolution of this crate's API: a compatible release of `zverbs` may move to a binding whose
/// items were added, changed or removed. Applications use the safe API and reach for it only
/// for a raw handle (the raw pointers that [`backend::verbs`]'s `unsafe` constructors take are its
/// types); code that relies on the binding itself depends on `zverbs-ffi` directly.
#[doc(inline)]
pub use zverbs_ffi as ffi;
/// The mlx5 direct backend (crate `zverbs-mlx5dv`): the queues inside
/// [`backend::mlx5`]'s handles, its prepared requests, and [`mlx5::prm`](zverbs_mlx5dv::prm),
/// the WQE and CQE layouts as
/// `mlx5dv.h` names them.
///
/// **Covered by this crate's semver**, as [`core`] is: the direct queues are its
/// types. What `zverbs-mlx5dv` hides from its documentation (the cells the loom models build
/// rings of) is not covered.
pub use zverbs_mlx5dv as mlx5;
/// The software mlx5 device (crate `zverbs-sim`), also reachable as the device `zverbs_sim0` of
/// [`devices`]; only with the `sim` feature (off by default).
///
/// **Covered by this crate's semver** while the feature is on: tests written against the
/// device, its fault injection and its counters keep compiling across compatible releases.
#[cfg(feature = "sim")]
pub use zverbs_sim as sim;

#[cfg(test)]
mod test_alloc;
#[cfg(test)]
mod tests;
