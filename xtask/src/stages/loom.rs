//! `cargo xtask loom`: the loom models of `loom-tests`, then every mutant.
//!
//! The models are built with `--cfg zverbs_loom`, which swaps the library's atomics, fences and
//! cells for loom's, in release mode (loom explores thousands of executions) with
//! `LOOM_MAX_PREEMPTIONS=2`. Then, for each mutant, the same models are rebuilt with
//! `ZVERBS_MUTANT=<name>`, which `zverbs-core`'s build script turns into
//! `--cfg zverbs_mutant="<name>"` in a loom build: it weakens exactly one ordering in the
//! library; the model that depends on that ordering must be rejected by loom (the test asserts
//! it, so the mutant run passes only when loom catches the mutant), and every other model must
//! still pass. All the builds share one target directory (`loom` in cargo's): the flags of the
//! dependencies are the same in each, so loom and the rest are built once, and a mutant
//! rebuilds only `zverbs-core` and the crates above it.

use crate::cli::{Parser, usage};
use crate::run::{Run, counted_tests};
use crate::util::{self, Result};

/// The mutants: each weakens one ordering (see `docs/ordering.md`). The library's own list,
/// so that every mutant it defines is run.
pub const MUTANTS: &[(&str, &str)] = &zverbs_core::sync::mutant::ALL;

/// Runs the models, built with `mutant` when given (which the models that depend on its
/// ordering must reject: their tests pass only then). Returns the model runs that passed.
pub fn models(mutant: Option<&str>, run: &mut Run) -> Result<u32> {
    let mut cmd = util::cargo([
        "test",
        "--release",
        "-p",
        "zverbs-loom-tests",
        "--target-dir",
    ]);
    cmd.arg(util::target_dir().join("loom"));
    cmd.env("RUSTFLAGS", "--cfg zverbs_loom")
        .env("ZVERBS_MUTANT", mutant.unwrap_or(""));
    if std::env::var_os("LOOM_MAX_PREEMPTIONS").is_none() {
        cmd.env("LOOM_MAX_PREEMPTIONS", "2");
    }
    // The models print their explored-execution counts (or the mutant's rejection).
    let (counts, _) = counted_tests(cmd, &["--nocapture", "--test-threads=1"], run)?;
    Ok(counts.passed)
}

/// Runs the models, then each mutant. Used by `cargo xtask loom` and the `loom` test stage.
pub fn run(run: &mut Run) -> Result<Option<String>> {
    let mut passed = models(None, run)?;
    for (m, what) in MUTANTS {
        println!("\n--> mutant {m}: {what}");
        passed += models(Some(m), run)?;
    }
    Ok(Some(format!(
        "{passed} model runs passed; {} mutants each rejected",
        MUTANTS.len()
    )))
}

/// `cargo xtask loom`.
pub fn main(mut p: Parser) -> Result {
    if let Some(arg) = p.next()? {
        return Err(usage!(
            "`loom` takes no arguments ({}); set LOOM_MAX_PREEMPTIONS to widen",
            arg.unexpected()
        ));
    }
    let mut r = Run::default();
    let note = run(&mut r)?;
    if let Some(n) = note {
        println!("\nloom: {n}");
    }
    Ok(())
}
