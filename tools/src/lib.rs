//! What `zverbs-perf` and the example programs share: which device to open when the user names
//! none, latency recording, and latency plots.
//!
//! The programs: `zverbs-perf` (`src/bin`), perftest's latency and bandwidth tests over zverbs,
//! and the examples (`examples/`): `pingpong` (the demo, and a peer of rdma-core's
//! `ibv_rc_pingpong`), `loopback` (every operation on one device), `wqe_demo` (the bytes the
//! direct path writes). They live here, not in the `zverbs` crate, so that an application that
//! depends on `zverbs` builds none of them nor what they need (argument parsing, histograms).

pub mod args;
pub mod device;
pub mod latency;
pub mod plot;
