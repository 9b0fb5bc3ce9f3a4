//! `cargo xtask demo [-- args]`: the project's main job, as the README shows it.
//!
//! It runs the `pingpong` example of the `zverbs` crate: a ping-pong between two queue pairs
//! driven by the mlx5 direct data path, on the software mlx5 device when no NIC is present,
//! printing perftest-style latency figures. Without arguments it runs SEND/RECV and then RDMA
//! WRITE; arguments after `--` go to the example instead (`--op`, `--size`, `--iters`,
//! `--bf`/`--no-bf`).

use crate::util::{self, Result};

/// The example that the demo runs.
const EXAMPLE: &str = "pingpong";

fn pingpong(args: &[&str]) -> Result {
    let mut cmd = util::cargo([
        "run",
        "--release",
        "--quiet",
        "-p",
        "zverbs",
        "--example",
        EXAMPLE,
    ]);
    if !args.is_empty() {
        cmd.arg("--").args(args);
    }
    util::run(&mut cmd)
}

/// Runs the demo, forwarding `args` (a leading `--` is dropped).
pub fn main(args: &[String]) -> Result {
    let args: Vec<&str> = match args.first().map(String::as_str) {
        Some("--") => &args[1..],
        _ => args,
    }
    .iter()
    .map(String::as_str)
    .collect();
    if !args.is_empty() {
        return pingpong(&args);
    }
    pingpong(&["--op", "send"])?;
    pingpong(&["--op", "write"])
}
