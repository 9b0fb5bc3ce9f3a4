//! # zverbs-core
//!
//! The backend-neutral vocabulary of the zverbs data path: what a work request, a receive
//! request and a completion are, the one check of a request against a queue's limits
//! ([`SendWr::check`], [`CheckedBatch`], [`RecvWr::check`]), the errors a post can return, and
//! the traits that every backend (the mlx5 direct path in `zverbs-mlx5dv`, the libibverbs
//! fallback in `zverbs`) implements. It also holds the small pieces of machinery that the backends share: ring index
//! arithmetic ([`ring`]), memory barriers named by purpose ([`barrier`]), a write-only MMIO
//! pointer ([`mmio`]), the `sync` shim that swaps atomics and cells for loom's under
//! `cfg(zverbs_loom)` ([`sync`]), and race-free copies in and out of memory that a device or
//! another thread may write at the same time ([`shared`]). And it says, for every backend and
//! the software device alike, what a raw Ethernet flow steering rule matches ([`flow`]).
//!
//! The crate is `#![no_std]` and does not use `alloc`: nothing in it allocates, locks, makes a
//! system call or panics on the data path.
//!
//! ## Quick start
//!
//! ```
//! use zverbs_core::{RemoteBuf, SendFlags, SendWr, Sge};
//!
//! let buf = [0u8; 64];
//! let sgl = [Sge::from_slice(&buf, 0x1100)];
//! let wr = SendWr::write(7, &sgl, RemoteBuf::new(0x7f00_0000_1000, 0xdead_beef))
//!     .with_flags(SendFlags::SIGNALED);
//! assert_eq!(wr.wr_id, 7);
//! assert!(wr.flags.contains(SendFlags::SIGNALED));
//! ```
//!
//! ## Features
//!
//! - `loom` (off by default): for the loom models of the workspace's `zverbs-loom-tests` only,
//!   not for applications, and outside semver. Together with `--cfg zverbs_loom` the [`sync`]
//!   module re-exports loom's types, so that loom models can drive the backends' own code;
//!   without that cfg the feature builds nothing and adds no dependency.
//!
//! ## Minimum supported Rust version
//!
//! Rust 1.95: the manifest's `rust-version`, checked in CI by building the published crates
//! with the 1.95.0 toolchain (`cargo xtask test`, stage `crates`).
//!
//! ## Thread safety
//!
//! The data types here are plain values (`Copy`, `Send`, `Sync`). The traits take `&mut self`
//! for posting and polling: a queue belongs to one thread at a time. [`mmio::MmioRegion`] is
//! `Send` but not `Sync`: it moves with the queue that owns the registers, never shared.
#![no_std]

/// The README's example, compiled and run as a doc-test so that it stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

pub mod barrier;
mod brief;
mod check;
mod dc;
mod error;
pub mod event;
pub mod flow;
pub mod handover;
pub mod mmio;
mod queue;
pub mod ring;
mod sge;
pub mod shared;
pub mod sync;
mod timed;
mod wc;
mod wr;

pub use brief::BriefCompletion;
pub use check::{CheckedBatch, CheckedSend, MAX_MESSAGE, MIN_FRAME, SqCaps, Transport};
pub use dc::DcDest;
pub use error::{BatchError, PostError};
pub use queue::{PollCq, PostRecv, PostSend, SendBatch};
pub use sge::{RemoteBuf, Sge};
pub use timed::{PollCqTimed, TimedCompletion};
pub use wc::{Completion, WcError, WcFlags, WcOpcode, WcStatus};
pub use wr::{RecvWr, SendFlags, SendOp, SendWr, UdDest};
