//! `cargo xtask demo [-- args]`: the project's main job, as the README shows it.
//!
//! For now it builds work queue entries over ordinary memory and prints them (the `wqe_demo`
//! example of the `zverbs` crate). Arguments after `--` go to the example.

use crate::util::{self, Result};

/// The example that the demo runs.
const EXAMPLE: &str = "wqe_demo";

/// Runs the demo, forwarding `args` (a leading `--` is dropped).
pub fn main(args: &[String]) -> Result {
    let args = match args.first().map(String::as_str) {
        Some("--") => &args[1..],
        _ => args,
    };
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
