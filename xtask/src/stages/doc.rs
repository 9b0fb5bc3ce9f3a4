//! The `doc` stage: rustdoc on the workspace with every feature, warnings denied, as a user
//! reads it and with the private items a contributor reads (whose links rot as easily).

use crate::run::Run;
use crate::util::{self, Result};

/// Runs the stage.
pub fn run(_: &mut Run) -> Result<Option<String>> {
    for private in [false, true] {
        let mut cmd = util::cargo(["doc", "--workspace", "--no-deps", "--all-features"]);
        if private {
            cmd.arg("--document-private-items");
        }
        cmd.env("RUSTDOCFLAGS", "-D warnings");
        util::run(&mut cmd)?;
    }
    Ok(None)
}
