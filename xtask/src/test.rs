//! `cargo xtask test`: everything CI runs, as a list of stages run in order.
//!
//! Each stage prints the commands it runs; the first failure stops the run with its message.
//! At the end a table shows each stage's result and duration, then the test count in the one
//! line that CI reads (`tests: N passed, N failed, N skipped`).
//!
//! Options: `--list` shows the stages; `--only a,b` runs just those; `--skip a,b` leaves those
//! out.

use std::collections::BTreeMap;
use std::time::Instant;

use crate::libtest::{Counts, Tally};
use crate::util::{self, Error, Result, Table, bail};

/// One step of `cargo xtask test`.
pub struct Stage {
    /// Short name, for `--only` / `--skip` and the summary.
    pub name: &'static str,
    /// What it checks.
    pub about: &'static str,
    /// Runs it; `Some(note)` is shown in the summary.
    pub run: fn(&mut Run) -> Result<Option<String>>,
}

/// The stages, in the order they run.
///
/// Later stages plug in here, each as its own module with a `run` function (stages that run
/// `cargo test` go through [`counted_tests`], so their tests join the table and the final
/// count), in this order:
/// - `rxe` (built): rdma-core's tools and the project's programs and device tests on rxe
///   devices inside a qemu VM (`crate::rxe`, `crate::vm`);
/// - `connectx` (built): the direct path through Debian's libmlx5 on the emulated ConnectX
///   (fake sysfs tree and uverbs shim in front of the software device), WQEs compared with
///   libmlx5's own, perftest and `ibv_rc_pingpong` unmodified (`crate::emu`).
pub const STAGES: &[Stage] = &[
    Stage {
        name: "prerequisites",
        about: "system packages (apt when root) and toolchain components",
        run: |_| crate::prereq::ensure(),
    },
    Stage {
        name: "fmt",
        about: "cargo fmt --check, workspace and proofs",
        run: fmt,
    },
    Stage {
        name: "clippy",
        about: "clippy on every target and feature (and without default features), warnings denied",
        run: clippy,
    },
    Stage {
        name: "test",
        about: "the workspace's tests (unit, cross-checks, doc-tests), counted per crate",
        run: test,
    },
    Stage {
        name: "doc",
        about: "rustdoc with warnings denied",
        run: doc,
    },
    Stage {
        name: "nostd",
        about: "the no_std proof: the data-path crates linked into a no_std, no-alloc binary",
        run: crate::nostd::run,
    },
    Stage {
        name: "miri",
        about: "Miri (Stacked and Tree Borrows) on every test that needs no C library",
        run: crate::miri::run,
    },
    Stage {
        name: "aarch64",
        about: "the data path for aarch64: clippy, its tests under qemu-user, the no_std proof",
        run: crate::aarch64::run,
    },
    Stage {
        name: "loom",
        about: "loom models of the lock-free protocols, and each mutant rejected",
        run: crate::loom::run,
    },
    Stage {
        name: "rxe",
        about: "rdma-core's tools and the device tests on rxe devices in a qemu VM",
        run: crate::rxe::stage,
    },
    Stage {
        name: "connectx",
        about: "the emulated ConnectX: WQEs and CQEs against libmlx5, perftest, ibv_rc_pingpong",
        run: crate::emu::run,
    },
];

/// State of one `cargo xtask test` run, shared by its stages.
#[derive(Debug, Default)]
pub struct Run {
    /// Test counts of every stage that ran tests, summed.
    pub tests: Option<Counts>,
}

impl Run {
    /// Adds a stage's test counts to the run's.
    pub fn add_tests(&mut self, c: Counts) {
        self.tests.get_or_insert_default().add(c);
    }
}

/// `cargo xtask test [--list] [--only a,b] [--skip a,b]`.
pub fn main(args: &[String]) -> Result {
    let mut only: Option<Vec<String>> = None;
    let mut skip: Vec<String> = Vec::new();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--list" => {
                for s in STAGES {
                    println!("{:<14} {}", s.name, s.about);
                }
                return Ok(());
            }
            "--only" | "--skip" => {
                let Some(list) = it.next() else {
                    bail!("{arg} needs a comma-separated list of stages");
                };
                let names: Vec<String> = list.split(',').map(str::to_string).collect();
                for n in &names {
                    if !STAGES.iter().any(|s| s.name == n) {
                        bail!("no stage {n:?}; `cargo xtask test --list` shows them");
                    }
                }
                if arg == "--only" {
                    only = Some(names);
                } else {
                    skip.extend(names);
                }
            }
            other => bail!("unknown option {other:?} for `test`; try --list, --only, --skip"),
        }
    }
    let stages: Vec<&Stage> = STAGES
        .iter()
        .filter(|s| only.as_ref().is_none_or(|o| o.iter().any(|n| n == s.name)))
        .filter(|s| !skip.iter().any(|n| n == s.name))
        .collect();

    let mut run = Run::default();
    let mut summary = Table::new(&["stage", "result", ">time", "note"]);
    let started = Instant::now();
    let mut failure: Option<Error> = None;
    for (i, stage) in stages.iter().enumerate() {
        println!(
            "\n==> [{}/{}] {}: {}",
            i + 1,
            stages.len(),
            stage.name,
            stage.about
        );
        let t = Instant::now();
        let result = (stage.run)(&mut run);
        let took = util::duration(t.elapsed());
        match result {
            Ok(note) => {
                println!("==> {} ok in {took}", stage.name);
                summary.row(vec![
                    stage.name.into(),
                    "ok".into(),
                    took,
                    note.unwrap_or_default(),
                ]);
            }
            Err(e) => {
                println!("==> {} FAILED after {took}", stage.name);
                summary.row(vec![
                    stage.name.into(),
                    "FAILED".into(),
                    took,
                    String::new(),
                ]);
                failure = Some(e);
                break;
            }
        }
    }
    summary.row(vec![
        "total".into(),
        if failure.is_some() { "FAILED" } else { "ok" }.into(),
        util::duration(started.elapsed()),
        String::new(),
    ]);
    println!("\nsummary:");
    summary.print(true);
    if let Some(t) = run.tests {
        println!(
            "tests: {} passed, {} failed, {} skipped",
            t.passed, t.failed, t.ignored
        );
    }
    match failure {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// The manifest of the no_std proof, which is its own workspace.
pub const NOSTD_MANIFEST: &str = "proofs/nostd/Cargo.toml";

fn fmt(_: &mut Run) -> Result<Option<String>> {
    util::run(&mut util::cargo(["fmt", "--all", "--check"]))?;
    util::run(&mut util::cargo([
        "fmt",
        "--all",
        "--check",
        "--manifest-path",
        NOSTD_MANIFEST,
    ]))?;
    Ok(None)
}

/// Builds of single packages with their default features off, each checked by clippy and
/// tested on its own (a workspace build unifies features, so it would not see them): `zverbs`
/// without its software device (feature `sim`).
const NO_DEFAULT_FEATURES: &[&str] = &["zverbs"];

fn clippy(_: &mut Run) -> Result<Option<String>> {
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

fn test(run: &mut Run) -> Result<Option<String>> {
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

/// Runs a `cargo test` command (any package selection, features or flags), counting its
/// results per crate: prints the table, adds the counts to `run` (so later stages' tests,
/// such as loom models, join the final count), and fails if the command or any test failed.
/// Returns the total and the counts of each crate.
/// `test_args` go to the test binaries (after `--`).
pub fn counted_tests(
    mut cmd: std::process::Command,
    test_args: &[&str],
    run: &mut Run,
) -> Result<(Counts, BTreeMap<String, Counts>)> {
    cmd.args(["--no-fail-fast", "--message-format=json-render-diagnostics"]);
    if !test_args.is_empty() {
        cmd.arg("--").args(test_args);
    }
    let mut tally = Tally::default();
    let status = util::run_lines(&mut cmd, |line| tally.line(line))?;
    tally.finish();

    let mut table = Table::new(&["crate", ">binaries", ">passed", ">failed", ">ignored"]);
    let row = |name: &str, c: &Counts| {
        vec![
            name.to_string(),
            c.binaries.to_string(),
            c.passed.to_string(),
            c.failed.to_string(),
            c.ignored.to_string(),
        ]
    };
    for (name, c) in &tally.crates {
        table.row(row(name, c));
    }
    let total = tally.total();
    table.row(row("total", &total));
    println!(
        "
tests per crate (binaries: unit, integration and doc-test runs):"
    );
    table.print(true);
    let empty: Vec<&str> = tally
        .crates
        .iter()
        .filter(|(_, c)| c.passed + c.failed + c.ignored == 0)
        .map(|(name, _)| name.as_str())
        .collect();
    if !empty.is_empty() {
        println!("crates without any test: {}", empty.join(", "));
    }
    for b in &tally.no_result {
        println!("a test binary of {b} ended without a result (crashed?); counted as a failure");
    }
    run.add_tests(total);

    util::check(&cmd, status)?;
    if total.failed > 0 {
        bail!("{} tests failed", total.failed);
    }
    Ok((total, tally.crates))
}

fn doc(_: &mut Run) -> Result<Option<String>> {
    let mut cmd = util::cargo(["doc", "--workspace", "--no-deps", "--all-features"]);
    cmd.env("RUSTDOCFLAGS", "-D warnings");
    util::run(&mut cmd)?;
    Ok(None)
}
