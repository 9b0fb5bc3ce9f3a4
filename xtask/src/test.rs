//! `cargo xtask test`: everything CI runs, as a list of stages run in order.
//!
//! Each stage prints the commands it runs; the first failure stops the run with its message.
//! At the end a table shows each stage's result and duration, then the test count in the one
//! line that CI reads (`tests: N passed, N failed, N skipped`).
//!
//! Options: `--list` shows the stages; `--only a,b` runs just those; `--skip a,b` leaves those
//! out. The stages are in [`crate::stages`], one file each.

use std::collections::BTreeMap;
use std::time::Instant;

use crate::cli::{self, Arg, Parser, usage};
use crate::disk;
use crate::libtest::{Counts, Tally};
use crate::stages::{STAGES, Stage};
use crate::util::{self, Error, Result, Table, bail};

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

/// The stages named in `list` (comma-separated), each checked to exist.
fn stage_names(list: &str) -> Result<Vec<String>> {
    let names: Vec<String> = list.split(',').map(str::to_string).collect();
    for n in &names {
        if !STAGES.iter().any(|s| s.name == n) {
            return Err(usage!(
                "no stage {n:?}; `cargo xtask test --list` shows them"
            ));
        }
    }
    Ok(names)
}

/// `cargo xtask test [--list] [--only a,b] [--skip a,b]`.
pub fn main(mut p: Parser) -> Result {
    let mut only: Option<Vec<String>> = None;
    let mut skip: Vec<String> = Vec::new();
    while let Some(arg) = p.next()? {
        match arg {
            Arg::Long("list") => {
                for s in STAGES {
                    println!("{:<14} {}", s.name, s.about);
                }
                return Ok(());
            }
            Arg::Long("only") => {
                only.get_or_insert_default()
                    .extend(stage_names(&cli::string(p.value()?)?)?);
            }
            Arg::Long("skip") => skip.extend(stage_names(&cli::string(p.value()?)?)?),
            arg => {
                return Err(usage!(
                    "{} for `test`; try --list, --only, --skip",
                    arg.unexpected()
                ));
            }
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
                println!("==> {} ok in {took} ({})", stage.name, disk::report());
                disk::free_scratch(stage.name, stage.scratch);
                summary.row(vec![
                    stage.name.into(),
                    "ok".into(),
                    took,
                    note.unwrap_or_default(),
                ]);
            }
            Err(e) => {
                println!(
                    "==> {} FAILED after {took} ({})",
                    stage.name,
                    disk::report()
                );
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
