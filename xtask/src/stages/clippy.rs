//! The `clippy` stage: clippy on every target of the workspace with every feature (and the
//! emulator's test targets, which `--all-targets` leaves out), then on
//! each package of [`NO_DEFAULT_FEATURES`] without its default features (the library alone for
//! those of [`LIBRARY_ONLY_WITHOUT_DEFAULTS`]); warnings denied.

use crate::run::Run;
use crate::stages::connectx::EMU_TESTS;
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
    // The emulator's test targets are `test = false` (they run under the emulator, in the
    // connectx stage), so `--all-targets` leaves them out: named here.
    let mut emu = util::cargo(["clippy", "-p", "zverbs-emu", "--all-features"]);
    for t in EMU_TESTS {
        emu.args(["--test", t]);
    }
    emu.args(["--", "-D", "warnings"]);
    util::run(&mut emu)?;
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
