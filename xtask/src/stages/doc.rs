//! The `doc` stage: rustdoc on the workspace with every feature, warnings denied.

use crate::test::Run;
use crate::util::{self, Result};

/// Runs the stage.
pub fn run(_: &mut Run) -> Result<Option<String>> {
    let mut cmd = util::cargo(["doc", "--workspace", "--no-deps", "--all-features"]);
    cmd.env("RUSTDOCFLAGS", "-D warnings");
    util::run(&mut cmd)?;
    Ok(None)
}
