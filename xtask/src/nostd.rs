//! The no_std proof: `proofs/nostd` is a `#![no_std] #![no_main]` binary with `panic =
//! "abort"` and no global allocator that drives the mlx5 data path (send, receive and
//! completion queues over static memory). It is its own workspace, so nothing of the main
//! workspace's dev-dependencies or features leaks into it. If a data-path crate starts using
//! `std`, the build fails with E0152 (duplicate `panic_impl` lang item); if it allocates, with
//! "no global memory allocator found". Its panic handler calls a function defined nowhere, so
//! if any panic path (a bounds check, an `unwrap`, an overflow check) is reachable anywhere in
//! the linked data path, the link fails with "undefined symbol: zverbs_data_path_can_panic":
//! the data path provably cannot panic. The binary exits 0 when every check passes.

use std::process::Command;

use crate::test::{NOSTD_MANIFEST, Run};
use crate::util::{self, Result, bail};

/// The proof's own target directory, so that building it never waits on the workspace's lock.
const TARGET_DIR: &str = "target/nostd";

/// The binary the proof builds.
const BINARY: &str = "zverbs-nostd-proof";

/// Lints, builds in release and runs the proof.
pub fn run(_: &mut Run) -> Result<Option<String>> {
    let common = [
        "--manifest-path",
        NOSTD_MANIFEST,
        "--target-dir",
        TARGET_DIR,
    ];
    util::run(
        util::cargo(["clippy", "--release"])
            .args(common)
            .args(["--", "-D", "warnings"]),
    )?;
    util::run(util::cargo(["build", "--release"]).args(common))?;
    let exe = util::root().join(TARGET_DIR).join("release").join(BINARY);
    println!("$ {}", exe.display());
    let status = Command::new(&exe)
        .status()
        .map_err(|e| util::Error(format!("cannot run {}: {e}", exe.display())))?;
    match status.code() {
        Some(0) => {}
        Some(code) => {
            bail!("{BINARY} exited with {code}: check {code} of proofs/nostd/src/main.rs failed")
        }
        None => bail!("{BINARY} was killed ({status})"),
    }
    let size = std::fs::metadata(&exe)?.len();
    Ok(Some(format!(
        "built (no panic path linked), ran, exit 0 ({} KiB)",
        size / 1024
    )))
}
