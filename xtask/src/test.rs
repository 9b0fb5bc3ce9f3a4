//! `cargo xtask test`: everything CI runs, as a list of stages run in order.
//!
//! Each stage prints the commands it runs; the first failure stops the run with its message.
//! At the end a table shows each stage's result and duration, then the test count in the one
//! line that CI reads (`tests: N passed, N failed, N skipped`).
//!
//! Options: `--list` shows the stages; `--only a,b` runs just those; `--skip a,b` leaves those
//! out. The stages are in [`crate::stages`], one file each.

use std::time::{Duration, Instant};

use crate::cli::{self, Arg, Parser, usage};
use crate::disk;
use crate::run::Run;
use crate::stages::{STAGES, Stage, TOTAL_BUDGET};
use crate::util::{self, Error, Result, Table};

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
    let mut summary = Summary::default();
    let started = Instant::now();
    let mut failure: Option<Error> = None;
    for (i, stage) in stages.iter().enumerate() {
        println!(
            "\n==> [{}/{}] {}: {} (budget {})",
            i + 1,
            stages.len(),
            stage.name,
            stage.about,
            util::duration(stage.budget)
        );
        let t = Instant::now();
        let built = util::build_time();
        let result = (stage.run)(&mut run);
        let took = t.elapsed();
        let times = Times {
            took,
            build: util::build_time().saturating_sub(built).min(took),
            budget: stage.budget,
        };
        match result {
            Ok(note) => {
                println!(
                    "==> {} ok in {} ({})",
                    stage.name,
                    util::duration(took),
                    disk::report()
                );
                disk::free_scratch(stage.name, stage.scratch);
                summary.row(stage.name, "ok", times, note.unwrap_or_default());
            }
            Err(e) => {
                println!(
                    "==> {} FAILED after {} ({})",
                    stage.name,
                    util::duration(took),
                    disk::report()
                );
                summary.row(stage.name, "FAILED", times, String::new());
                failure = Some(e);
                break;
            }
        }
    }
    let took = started.elapsed();
    summary.row(
        "total",
        if failure.is_some() { "FAILED" } else { "ok" },
        Times {
            took,
            build: util::build_time().min(took),
            budget: TOTAL_BUDGET,
        },
        String::new(),
    );
    println!("\nsummary (build: compiling, linking and documenting; run: the rest):");
    summary.table.print(true);
    if summary.over > 0 {
        println!(
            "{} over budget (marked `OVER`): find what grew before it decides whether a run \
             fits CI's 90 minutes (budgets: xtask/src/stages/mod.rs)",
            match summary.over {
                1 => "one stage or the total is".to_string(),
                n => format!("{n} stages or the total are"),
            }
        );
    }
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

/// A stage's times: all of it, the part spent building, and its budget.
#[derive(Clone, Copy, Debug)]
struct Times {
    took: Duration,
    build: Duration,
    budget: Duration,
}

/// The summary table: each stage's result, time (build and run), budget and note.
struct Summary {
    table: Table,
    /// Rows over their budget.
    over: u32,
}

impl Default for Summary {
    fn default() -> Self {
        Self {
            table: Table::new(&[
                "stage", "result", ">time", ">budget", ">build", ">run", "note",
            ]),
            over: 0,
        }
    }
}

impl Summary {
    fn row(&mut self, stage: &str, result: &str, t: Times, note: String) {
        let over = t.took > t.budget;
        if over {
            self.over += 1;
        }
        self.table.row(vec![
            stage.into(),
            if over {
                format!("{result} OVER")
            } else {
                result.into()
            },
            util::duration(t.took),
            util::duration(t.budget),
            util::duration(t.build),
            util::duration(t.took.saturating_sub(t.build)),
            note,
        ]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stage_over_its_budget_is_marked() {
        let mut s = Summary::default();
        let t = |took, budget| Times {
            took: Duration::from_secs(took),
            build: Duration::from_secs(took / 2),
            budget: Duration::from_secs(budget),
        };
        s.row("fmt", "ok", t(10, 30), String::new());
        assert_eq!(s.over, 0);
        s.row("miri", "ok", t(1000, 900), String::new());
        assert_eq!(s.over, 1);
        assert_eq!(
            s.table.rows_for_test()[2],
            [
                "miri", "ok OVER", "16m40.0s", "15m00.0s", "8m20.0s", "8m20.0s", ""
            ]
        );
        assert_eq!(s.table.rows_for_test()[1][1], "ok");
    }
}
