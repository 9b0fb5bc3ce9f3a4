//! The `test` stage: the workspace's tests with every feature (unit, integration, cross-checks,
//! doc-tests), counted per crate; then each package of [`NO_DEFAULT_FEATURES`] without its
//! default features.

use crate::stages::NO_DEFAULT_FEATURES;
use crate::test::{Run, counted_tests};
use crate::util::{self, Result, bail};

/// Runs the stage.
pub fn run(run: &mut Run) -> Result<Option<String>> {
    let cmd = util::cargo(["test", "--workspace", "--all-features"]);
    let (total, crates) = counted_tests(cmd, &[], run)?;
    if total.passed == 0 {
        bail!("no test ran");
    }
    let mut note = format!(
        "{} passed, {} failed, {} ignored in {} crates",
        total.passed,
        total.failed,
        total.ignored,
        crates.len()
    );
    for p in NO_DEFAULT_FEATURES {
        println!("\n--> {p} without its default features");
        let cmd = util::cargo(["test", "-p", p, "--no-default-features"]);
        let (t, _) = counted_tests(cmd, &[], run)?;
        note.push_str(&format!("; {p} --no-default-features: {} passed", t.passed));
    }
    Ok(Some(note))
}
