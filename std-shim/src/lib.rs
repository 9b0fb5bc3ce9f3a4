//! # zverbs
//!
//! Zero-allocation RDMA verbs for latency-critical code. This crate is what applications depend
//! on; it re-exports the data-path vocabulary of [`zverbs_core`] and the mlx5 direct backend of
//! [`zverbs_mlx5dv`].
#![deny(
    unsafe_op_in_unsafe_fn,
    missing_docs,
    clippy::undocumented_unsafe_blocks,
    clippy::missing_safety_doc
)]

pub use zverbs_core as core;
pub use zverbs_core::{
    BatchError, Completion, PollCq, PostError, PostRecv, PostSend, RecvWr, RemoteBuf, SendFlags,
    SendOp, SendWr, Sge, WcFlags, WcOpcode, WcStatus,
};
pub use zverbs_mlx5dv as mlx5;
