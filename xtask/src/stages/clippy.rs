//! The `clippy` stage: clippy on every target of the workspace with every feature, then on
//! each package of [`NO_DEFAULT_FEATURES`] without its default features; warnings denied.

use crate::run::Run;
use crate::stages::NO_DEFAULT_FEATURES;
use crate::util::{self, Result};

/// Runs the stage.
pub fn run(_: &mut Run) -> Result<Option<String>> {
    util::run(&mut util::cargo([
        "clippy",
        "--workspace",
        "--all-targets",
        "--all-features",
        "--",
        "-D",
        "warnings",
    ]))?;
    for p in NO_DEFAULT_FEATURES {
        util::run(&mut util::cargo([
            "clippy",
            "-p",
            p,
            "--all-targets",
            "--no-default-features",
            "--",
            "-D",
            "warnings",
        ]))?;
    }
    Ok(None)
}
