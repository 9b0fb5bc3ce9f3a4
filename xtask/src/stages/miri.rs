//! The `miri` stage: every test that needs no C library, run under Miri, the interpreter that
//! detects undefined behaviour, once with Stacked Borrows and once with Tree Borrows.
//!
//! What runs, under each model:
//!
//! - `zverbs-core` and `zverbs-mlx5dv`: every test, unit and doc (the data path over ordinary
//!   memory standing in for the device's, reached only through raw pointers as the device's
//!   memory is), with Miri's leak check;
//! - `zverbs-sim`: its unit tests, and the integration tests that drive the direct data path
//!   against the software device, including its progress thread (`ops`, `errors`, `wrap`,
//!   `progress`, `connections`): the hand-off between the library's stores and the device's
//!   thread is where a missing fence is a data race. The device's progress thread
//!   lives for the process and some tests keep their queues' bookkeeping for their whole run,
//!   so leaks are not checked here (`-Zmiri-ignore-leaks`). `random`, `fuzz`, `limits` and
//!   `zero_alloc` run hundreds of thousands of operations or sweep sizes through arithmetic
//!   that involves no unsafe code, and `remote` steps two device instances message by message
//!   through an in-test wire on one thread (over ten minutes under Miri): they stay in the
//!   `test` stage;
//! - `zverbs`: its unit tests (the control path against a fake provider, the fallback against
//!   a fake `ibv_context`, `MrBuf` shared between threads and the software device, the safe
//!   layer). The few that load libibverbs, open sockets or map hugepages are marked
//!   `#[cfg_attr(miri, ignore = "...")]` with the reason, and counted as ignored.
//!
//! What Miri cannot check: calls into C (libibverbs, libmlx5, the emulator, the device tests),
//! inline assembly (the `sfence`/`dmb` instructions: under `cfg(miri)` the write-combining
//! barriers are compiler fences; the DMA barriers are the Rust fences they are everywhere) and
//! anything only a real device does. Addresses travel as integers in work requests, as the
//! verbs ABI has them (exposed with `expose_provenance` and taken back with
//! `with_exposed_provenance`), so the runs use `-Zmiri-permissive-provenance`.
//!
//! Miri comes with the nightly toolchain: the `prerequisites` stage adds its `miri` and
//! `rust-src` components when they are missing. Iteration counts of the few tests that loop
//! tens of thousands of times are reduced under `cfg(miri)`, and the sweeps over every length,
//! wrap position and kind run a sample under it that still reaches every value of every axis
//! (each such test says which cases remain).
//!
//! How it runs: everything is built once (`cargo miri test --no-run`: the aliasing model is a
//! flag of the interpreter, `MIRIFLAGS`, not of the build), then the two models run at the
//! same time as two processes, each on its own core (Miri interprets a program, its threads
//! included, on one thread). Each model's output is shown after both have ended, with the
//! wall-clock time of every test binary, slowest first: where the stage's time goes.

use std::process::Command;
use std::time::Instant;

use crate::libtest::Counts;
use crate::run::{Run, TestRun};
use crate::util::{self, Result, Table};

/// The toolchain Miri runs on.
pub const TOOLCHAIN: &str = "nightly";

/// The aliasing models: name and the flag that selects it (Stacked Borrows is the default).
const MODELS: &[(&str, &str)] = &[
    ("Stacked Borrows", ""),
    ("Tree Borrows", "-Zmiri-tree-borrows"),
];

/// Flags of every run.
const BASE_FLAGS: &str = "-Zmiri-permissive-provenance";

/// One `cargo miri test` invocation: its arguments and whether leaks are checked.
struct Job {
    args: &'static [&'static str],
    check_leaks: bool,
}

const JOBS: &[Job] = &[
    Job {
        args: &["-p", "zverbs-core", "-p", "zverbs-mlx5dv"],
        check_leaks: true,
    },
    Job {
        args: &[
            "-p",
            "zverbs-sim",
            "--lib",
            "--test",
            "ops",
            "--test",
            "errors",
            "--test",
            "wrap",
            "--test",
            "progress",
            "--test",
            "connections",
            "--test",
            "events",
        ],
        check_leaks: false,
    },
    Job {
        args: &["-p", "zverbs", "--lib", "--features", "pmix"],
        check_leaks: true,
    },
];

/// `cargo miri <args>` on the nightly toolchain, in Miri's own target subdirectory (cargo
/// puts it under `miri/` of the target directory), with the stable toolchain's variables
/// removed so that nightly's tools are used throughout.
pub fn cargo_miri<I, S>(args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let mut cmd = util::rustup_cargo(TOOLCHAIN, ["miri"]);
    cmd.args(args);
    cmd
}

/// Builds every job once, runs each model's jobs in a process of its own at the same time,
/// then shows each model's output, its counts and the time of each test binary.
pub fn run(run: &mut Run) -> Result<Option<String>> {
    println!("\n--> the tests under Miri, built once for both models");
    for job in JOBS {
        let mut cmd = cargo_miri(["test", "--no-run"]);
        cmd.args(job.args);
        let status = util::run_lines(&mut cmd, |_| true)?;
        util::check(&cmd, status)?;
    }

    println!(
        "\n--> {}, at the same time (their output follows when both have ended)",
        MODELS
            .iter()
            .map(|(m, _)| *m)
            .collect::<Vec<_>>()
            .join(" and ")
    );
    let started = Instant::now();
    let models: Vec<_> = MODELS
        .iter()
        .map(|&(model, flag)| std::thread::spawn(move || run_model(flag).map(|r| (model, r))))
        .collect();
    let mut results = Vec::new();
    for h in models {
        results.push(
            h.join()
                .map_err(|_| util::anyhow!("a Miri model's thread panicked"))??,
        );
    }
    let wall = started.elapsed();

    let mut notes = Vec::new();
    let mut failed = None;
    for (model, (tests, took)) in results {
        let mut total = Counts::default();
        let mut times = Vec::new();
        for t in tests {
            println!("\n--> {model}: {}", util::show(t.command()));
            for line in &t.kept {
                println!("{line}");
            }
            times.extend(t.tally.times.iter().cloned());
            match t.finish(run) {
                Ok((c, _)) => total.add(c),
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        }
        times.sort_by_key(|t| std::cmp::Reverse(t.1));
        let mut table = Table::new(&["test binary", ">time"]);
        for (name, d) in &times {
            table.row(vec![name.clone(), util::duration(*d)]);
        }
        println!("\n{model}: the test binaries by wall-clock time");
        table.print(false);
        notes.push(format!(
            "{model}: {} passed, {} ignored in {}",
            total.passed,
            total.ignored,
            util::duration(took)
        ));
    }
    if let Some(e) = failed {
        return Err(e);
    }
    Ok(Some(format!(
        "{}; both at once in {}",
        notes.join("; "),
        util::duration(wall)
    )))
}

/// Runs every job under the model `flag` selects, its output kept; returns each job's run and
/// the time they took together.
fn run_model(flag: &str) -> Result<(Vec<TestRun>, std::time::Duration)> {
    let started = Instant::now();
    let mut runs = Vec::new();
    for job in JOBS {
        let mut flags = String::from(BASE_FLAGS);
        if !flag.is_empty() {
            flags.push(' ');
            flags.push_str(flag);
        }
        if !job.check_leaks {
            flags.push_str(" -Zmiri-ignore-leaks");
        }
        let mut cmd = cargo_miri(["test"]);
        cmd.args(job.args).env("MIRIFLAGS", &flags);
        runs.push(TestRun::start(cmd, &[], false)?);
    }
    Ok((runs, started.elapsed()))
}
