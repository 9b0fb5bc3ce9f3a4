//! What `zverbs-perf` and the example programs share: which device to open when the user names
//! none, latency recording, and latency plots.
//!
//! The programs: `zverbs-perf` (`src/bin`), perftest's latency and bandwidth tests over zverbs,
//! and the examples (`examples/`): `pingpong` (the demo, and a peer of rdma-core's
//! `ibv_rc_pingpong`), `loopback` (every operation on one device), `wqe_demo` (the bytes the
//! direct path writes). They live here, not in the `zverbs` crate, so that an application that
//! depends on `zverbs` builds none of them nor what they need (argument parsing, histograms).

// A doc example that drops a `Result` (a copy into a buffer, a post) is an error, not a
// warning nobody sees.
#![doc(test(attr(deny(unused_must_use))))]

/// `docs/usage.md`'s Rust snippets, compiled as doc-tests so that the guide stays true: those
/// that run on the software device run, those that need a NIC or a peer are `no_run`. (This
/// crate is not published, so the path out of its folder is always there.)
#[cfg(doctest)]
#[doc = include_str!("../../docs/usage.md")]
pub struct UsageMd;

pub mod args;
pub mod device;
pub mod latency;
pub mod plot;
