//! Benchmarks of the zverbs direct path against C baselines written with rdma-core's
//! `mlx5dv.h`, and the fixtures they share.
//!
//! - [`mem::QpMem`]: ordinary memory laid out as an mlx5 QP and CQ (send ring, doorbell
//!   records, BlueFlame register, CQE ring), so the benchmarks measure exactly the CPU work of
//!   posting, ringing and polling, not the PCIe cost of real MMIO;
//! - [`ours`]: zverbs' queues over it, and the operations timed, each out of line;
//! - [`c`] and [`ffi`]: the C baselines (`c/baseline.c`) over the same kind of memory;
//! - [`pingpong`]: a round trip between two QPs of the software mlx5 device, on either side;
//! - [`cases`]: the cases, runnable on either side, which the criterion benchmark
//!   (`benches/datapath.rs`) times and the `count` example runs under callgrind.
//!
//! `cargo xtask bench` runs it all and prints the ratio table; `docs/performance.md` explains
//! what each side does and what the figures mean.

pub mod c;
pub mod cases;
pub mod ffi;
pub mod mem;
pub mod ours;
pub mod pingpong;

/// The QP number of the fixtures.
pub const QPN: u32 = 0x1234;

/// A queue pair and its CQ over [`mem::QpMem`], driven by one side.
pub trait Fixture {
    /// Calls that fit now, each of `requests_per_call` requests and `blocks_per_call` basic
    /// blocks (room in the ring, and for zverbs room in the CQ for the signaled ones).
    fn room(&mut self, blocks_per_call: u32, requests_per_call: u32) -> u64;
    /// Hands every credit back, as polling one completion per request posted since the last
    /// call (`requests` of them, all of one size) would.
    fn complete_all(&mut self, requests: u64);
    /// Writes `n` requester CQEs at the CQ's consumer index, as the device would.
    fn write_cqes(&mut self, n: u32);
    /// CQEs the CQ holds.
    fn cq_room(&self) -> u32;
}
