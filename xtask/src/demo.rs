//! `cargo xtask demo [-- args]`: the project's main job, as the README shows it.
//!
//! It runs the `pingpong` example of the `zverbs-tools` crate: a ping-pong between two queue pairs
//! driven by the mlx5 direct data path, on the software mlx5 device when no NIC is present,
//! printing perftest-style latency figures. Without arguments it runs SEND/RECV and then RDMA
//! WRITE; arguments after `--` go to the example instead (`--op`, `--size`, `--iters`,
//! `--bf`/`--no-bf`).

use crate::cli::{self, Parser};
use crate::util::{self, Result};

/// The example that the demo runs.
const EXAMPLE: &str = "pingpong";

fn pingpong(args: &[&str]) -> Result {
    let mut cmd = util::cargo([
        "run",
        "--release",
        "--quiet",
        "-p",
        "zverbs-tools",
        "--example",
        EXAMPLE,
    ]);
    if !args.is_empty() {
        cmd.arg("--").args(args);
    }
    util::run(&mut cmd)
}

/// Runs the demo, forwarding every argument (a leading `--` is dropped) to the example, which
/// checks them.
pub fn main(mut p: Parser) -> Result {
    let mut args = cli::rest(&mut p)?;
    if args.first().is_some_and(|a| a == "--") {
        args.remove(0);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    if !args.is_empty() {
        return pingpong(&args);
    }
    pingpong(&["--op", "send"])?;
    pingpong(&["--op", "write"])
}
