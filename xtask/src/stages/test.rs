//! The `test` stage: the workspace's tests with every feature (unit, integration, cross-checks,
//! doc-tests), counted per crate; then each package of [`NO_DEFAULT_FEATURES`] without its
//! default features (but those of [`LIBRARY_ONLY_WITHOUT_DEFAULTS`], whose tests turn them back
//! on); then the tests that need system packages ([`NEED_PACKAGES`]).

use crate::run::{Run, counted_tests};
use crate::stages::{LIBRARY_ONLY_WITHOUT_DEFAULTS, NO_DEFAULT_FEATURES};
use crate::util::{self, Result, bail};

/// A test target whose tests need system packages (beyond what building needs): each such test
/// is marked with an `ignore` reason that starts `needs <package>`, so that a plain `cargo test` on a fresh clone
/// with no packages lists it as ignored, with the reason, instead of failing; this stage runs
/// them with `--ignored` once the `prerequisites` stage has installed the packages.
pub struct NeedsPackages {
    /// The package's name.
    pub package: &'static str,
    /// Its directory in the workspace.
    pub dir: &'static str,
    /// The integration test (`tests/<name>.rs`).
    pub test: &'static str,
}

/// Every test target with tests that need system packages (a test of this crate checks that
/// such reason stands anywhere else).
pub const NEED_PACKAGES: &[NeedsPackages] = &[NeedsPackages {
    package: "zverbs-tools",
    dir: "tools",
    test: "cli",
}];

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
    for p in NO_DEFAULT_FEATURES
        .iter()
        .filter(|p| !LIBRARY_ONLY_WITHOUT_DEFAULTS.contains(p))
    {
        println!("\n--> {p} without its default features");
        let cmd = util::cargo(["test", "-p", p, "--no-default-features"]);
        let (t, _) = counted_tests(cmd, &[], run)?;
        note.push_str(&format!("; {p} --no-default-features: {} passed", t.passed));
    }
    let mut needing = 0;
    for n in NEED_PACKAGES {
        println!(
            "\n--> the tests of {}/tests/{}.rs that need system packages",
            n.dir, n.test
        );
        let cmd = util::cargo(["test", "-p", n.package, "--all-features", "--test", n.test]);
        let (t, _) = counted_tests(cmd, &["--ignored"], run)?;
        if t.passed == 0 {
            bail!(
                "no test of {} --test {} needs a package any more: take it out of NEED_PACKAGES",
                n.package,
                n.test
            );
        }
        needing += t.passed;
    }
    note.push_str(&format!("; {needing} needing system packages passed"));
    Ok(Some(note))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// The `.rs` files under `dir`, `target/` left out.
    fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            let name = e.file_name();
            if p.is_dir() && name != "target" && name != ".git" {
                sources(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }

    #[test]
    fn every_test_that_needs_a_package_is_run_by_the_stage() {
        let root = util::root();
        let mut files = Vec::new();
        sources(&root, &mut files);
        assert!(files.len() > 100, "{} sources found", files.len());
        let marker = ["#[ignore = \"", "needs "].concat();
        let mut marked = 0;
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            if !text.contains(&marker) {
                continue;
            }
            marked += 1;
            let rel = f.strip_prefix(&root).unwrap();
            assert!(
                NEED_PACKAGES.iter().any(|n| rel
                    == Path::new(n.dir)
                        .join("tests")
                        .join(format!("{}.rs", n.test))),
                "{} has tests that need packages, which the test stage does not run: add it \
                 to NEED_PACKAGES",
                rel.display()
            );
        }
        assert_eq!(marked, NEED_PACKAGES.len());
    }
}
