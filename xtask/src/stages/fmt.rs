//! The `fmt` stage: `cargo fmt --check` on the workspace and on the no_std proof (its own
//! workspace).

use crate::run::Run;
use crate::stages::nostd::MANIFEST;
use crate::util::{self, Result};

/// Runs the stage.
pub fn run(_: &mut Run) -> Result<Option<String>> {
    util::run(&mut util::cargo(["fmt", "--all", "--check"]))?;
    util::run(&mut util::cargo([
        "fmt",
        "--all",
        "--check",
        "--manifest-path",
        MANIFEST,
    ]))?;
    Ok(None)
}
