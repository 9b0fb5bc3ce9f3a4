//! A run of checks and the `cargo test` commands it counts: the state the stages share
//! ([`Run`]: the tests counted so far), and a `cargo test` command run to its end with its
//! results counted per crate ([`TestRun`], [`counted_tests`]).

use std::collections::BTreeMap;

use crate::libtest::{Counts, Tally};
use crate::util::{self, Result, Table, bail};

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

/// Runs a `cargo test` command (any package selection, features or flags), counting its
/// results per crate: prints the table, adds the counts to `run` (so later stages' tests,
/// such as loom models, join the final count), and fails if the command or any test failed.
/// Returns the total and the counts of each crate.
/// `test_args` go to the test binaries (after `--`).
pub fn counted_tests(
    cmd: std::process::Command,
    test_args: &[&str],
    run: &mut Run,
) -> Result<(Counts, BTreeMap<String, Counts>)> {
    let tests = TestRun::start(cmd, test_args, true)?;
    tests.finish(run)
}

/// One `cargo test` command run to its end, its output counted ([`TestRun::start`]) and then
/// reported ([`TestRun::finish`]): two steps, so that commands run on several threads at once
/// can keep their output apart and show it one after the other.
pub struct TestRun {
    cmd: std::process::Command,
    status: std::process::ExitStatus,
    /// The counts and times per binary.
    pub tally: Tally,
    /// The lines for a person to read, when they were kept rather than shown as they came.
    pub kept: Vec<String>,
}

impl TestRun {
    /// Runs `cmd` (with `test_args` after `--`) and counts its results; shows its output as it
    /// comes when `show`, else keeps it in [`TestRun::kept`].
    pub fn start(
        mut cmd: std::process::Command,
        test_args: &[&str],
        show: bool,
    ) -> Result<TestRun> {
        cmd.args(["--no-fail-fast", "--message-format=json-render-diagnostics"]);
        if !test_args.is_empty() {
            cmd.arg("--").args(test_args);
        }
        let mut tally = Tally::default();
        let mut kept = Vec::new();
        let status = util::run_lines(&mut cmd, |line| {
            let human = tally.line(line);
            if human && !show {
                kept.push(line.to_string());
            }
            human && show
        })?;
        tally.finish();
        Ok(TestRun {
            cmd,
            status,
            tally,
            kept,
        })
    }

    /// The command that ran.
    pub fn command(&self) -> &std::process::Command {
        &self.cmd
    }

    /// Prints the table of counts per crate, adds them to `run`, and fails if the command or
    /// any test failed. Returns the total and the counts of each crate.
    pub fn finish(self, run: &mut Run) -> Result<(Counts, BTreeMap<String, Counts>)> {
        let tally = self.tally;
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
            println!(
                "a test binary of {b} ended without a result (crashed?); counted as a failure"
            );
        }
        run.add_tests(total);

        util::check(&self.cmd, self.status)?;
        if total.failed > 0 {
            bail!("{} tests failed", total.failed);
        }
        Ok((total, tally.crates))
    }
}
