//! The `clippy` stage: clippy on every target of the workspace with every feature, then on
//! each package of [`NO_DEFAULT_FEATURES`] without its default features (the library alone for
//! those of [`LIBRARY_ONLY_WITHOUT_DEFAULTS`]); warnings denied.

use crate::run::Run;
use crate::stages::{LIBRARY_ONLY_WITHOUT_DEFAULTS, NO_DEFAULT_FEATURES};
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
        let targets = if LIBRARY_ONLY_WITHOUT_DEFAULTS.contains(p) {
            "--lib"
        } else {
            "--all-targets"
        };
        util::run(&mut util::cargo([
            "clippy",
            "-p",
            p,
            targets,
            "--no-default-features",
            "--",
            "-D",
            "warnings",
        ]))?;
    }
    Ok(None)
}
