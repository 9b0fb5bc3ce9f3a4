//! `cargo xtask mutants`: mutation testing of the data-path crates with `cargo-mutants`.
//!
//! cargo-mutants changes the code one small way at a time (a function's body replaced by a
//! default value, an operator swapped, a `!` deleted), builds each change (a *mutant*) and runs
//! the tests: a mutant the tests do not notice names a missing test. This runs it on
//! `zverbs-core` and `zverbs-mlx5dv`, each with the tests of the crates that exercise it
//! ([`CRATES`]), and prints per crate the mutants generated, viable (built), caught, missed,
//! timed out and unviable, and the survivors.
//!
//! The mutants of the DMA fences ([`LOOM_COVERED`]) survive every test of an ordinary build,
//! where a missing fence changes nothing a test can see (on x86_64 the fences emit no
//! instruction). Each is the same change as a mutant of the loom stage, which the loom models
//! reject: those are counted as caught by loom, and the loom stage's run of that mutant is
//! repeated here to prove it (`--no-loom` skips it, and then they count as missed).
//!
//! The score of a crate is caught / viable, where viable = caught + missed + timeouts: a timeout
//! counts as not caught (cargo-mutants reports it apart from the caught ones). The command
//! fails when a crate scores below [`FLOOR`]. Mutants excluded in `.cargo/mutants.toml`
//! (each with its reason there) are not generated, so they are in no count.
//!
//! It is not a CI stage: a full run builds and tests every mutant, about an hour per crate on
//! two cores (see `docs/testing.md`). `--file` and `--re` run a part of it. `--iterate` runs
//! only the mutants the last run did not catch (cargo-mutants' `--iterate`), and counts the
//! others as they were: a run stopped part way goes on from where it was, and after a
//! test is added only the survivors are run again.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use crate::cli::{self, Arg, Parser, usage};
use crate::run::Run;
use crate::util::{self, Result, Table, anyhow, bail};

/// The version of cargo-mutants installed when it is missing, and that the figures in
/// `docs/testing.md` were measured with (another version may generate other mutants).
pub const CARGO_MUTANTS_VERSION: &str = "27.1.0";

/// The lowest score (caught / viable) a crate may have.
pub const FLOOR: f64 = 0.90;

/// The least time limit of a mutant's tests, in seconds, when they are the crate's own
/// (cargo-mutants sets it to 5 times the unmutated tests' time, at least this).
pub const OWN_MIN_TIMEOUT: u32 = 60;

/// The time limit of a mutant's tests, in seconds, when they are those of every test package
/// of a crate (the software device's take about a minute on two busy cores).
pub const FULL_TIMEOUT: u32 = 120;

/// A crate whose mutants are tested, and the packages whose tests run on each of them.
#[derive(Debug)]
pub struct Crate {
    /// Short name, for `--crate`.
    pub name: &'static str,
    /// The package mutated.
    pub package: &'static str,
    /// The packages whose tests run on each mutant: the crate's own and those of the crates
    /// that exercise it.
    pub tests: &'static [&'static str],
}

/// The crates, in the order they run.
pub const CRATES: &[Crate] = &[
    Crate {
        name: "core",
        package: "zverbs-core",
        tests: &["zverbs-core", "zverbs-mlx5dv", "zverbs-sim"],
    },
    Crate {
        name: "mlx5dv",
        package: "zverbs-mlx5dv",
        tests: &["zverbs-mlx5dv", "zverbs-sim", "zverbs-crosscheck"],
    },
];

/// A mutant of cargo-mutants that is the same change as a mutant of the loom stage.
#[derive(Debug)]
pub struct LoomCovered {
    /// The file cargo-mutants names.
    pub file: &'static str,
    /// What it changes, as cargo-mutants names it after the position (`replace to_device
    /// with ()`).
    pub change: &'static str,
    /// The loom mutant (`stages::loom::MUTANTS`) making the same change.
    pub loom: &'static str,
    /// The loom models that reject that mutant (`docs/ordering.md`).
    pub models: &'static [&'static str],
    /// Why the two are the same change.
    pub why: &'static str,
}

/// The mutants of the DMA fences, each the same change as a loom mutant. The write-combining
/// barriers (`wc_start`, `wc_flush`) have no loom mutant, as loom has no model of MMIO: their
/// mutants are excluded in `.cargo/mutants.toml`, with the reason.
pub const LOOM_COVERED: &[LoomCovered] = &[
    LoomCovered {
        file: "core/src/barrier.rs",
        change: "replace to_device with ()",
        loom: "no_to_device",
        models: &["send_path", "credit_return", "recv_path"],
        why: "on x86_64 to_device is sync::order::to_device_fence() alone (its dmb is \
              aarch64's): emptied, the fence is gone, as in the loom mutant",
    },
    LoomCovered {
        file: "core/src/barrier.rs",
        change: "replace from_device with ()",
        loom: "no_from_device",
        models: &["completion_path"],
        why: "on x86_64 from_device is sync::order::from_device_fence() alone (its dmb is \
              aarch64's): emptied, the fence is gone, as in the loom mutant",
    },
    LoomCovered {
        file: "core/src/sync.rs",
        change: "replace order::to_device_fence with ()",
        loom: "no_to_device",
        models: &["send_path", "credit_return", "recv_path"],
        why: "the loom mutant itself: the fence is not issued",
    },
    LoomCovered {
        file: "core/src/sync.rs",
        change: "delete ! in order::to_device_fence",
        loom: "no_to_device",
        models: &["send_path", "credit_return", "recv_path"],
        why: "without the mutant's cfg the condition becomes false: the fence is not issued, \
              as in the loom mutant",
    },
    LoomCovered {
        file: "core/src/sync.rs",
        change: "replace order::from_device_fence with ()",
        loom: "no_from_device",
        models: &["completion_path"],
        why: "the loom mutant itself: the fence is not issued",
    },
    LoomCovered {
        file: "core/src/sync.rs",
        change: "delete ! in order::from_device_fence",
        loom: "no_from_device",
        models: &["completion_path"],
        why: "without the mutant's cfg the condition becomes false: the fence is not issued, \
              as in the loom mutant",
    },
];

/// The entry of [`LOOM_COVERED`] for the mutant cargo-mutants names `name`
/// (`core/src/barrier.rs:48:5: replace to_device with ()`), if any.
pub fn loom_cover(name: &str) -> Option<&'static LoomCovered> {
    let (file, change) = split_name(name)?;
    LOOM_COVERED
        .iter()
        .find(|c| c.file == file && c.change == change)
}

/// A mutant's name split into its file and what it changes (the position dropped, so that
/// edits elsewhere in the file do not matter).
fn split_name(name: &str) -> Option<(&str, &str)> {
    // `file:line:col: change`; the file name holds no ':'.
    let (file, rest) = name.split_once(':')?;
    let mut parts = rest.splitn(3, ':');
    let line = parts.next()?;
    let col = parts.next()?;
    let change = parts.next()?.strip_prefix(' ')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (digits(line) && digits(col)).then_some((file, change))
}

/// The outcome of every mutant of one crate, as cargo-mutants wrote them in `mutants.out`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Outcomes {
    /// Caught by a test (a test failed, or the build of the tests failed for a reason other
    /// than the mutant being invalid code).
    pub caught: Vec<String>,
    /// Not caught: every test passed.
    pub missed: Vec<String>,
    /// The tests ran past the time limit.
    pub timeouts: Vec<String>,
    /// The mutant does not build.
    pub unviable: Vec<String>,
}

impl Outcomes {
    /// Reads `caught.txt`, `missed.txt`, `timeout.txt` and `unviable.txt` of `dir` (one
    /// mutant per line).
    pub fn read(dir: &Path) -> Result<Self> {
        let list = |file: &str| -> Result<Vec<String>> {
            let path = dir.join(file);
            let text = std::fs::read_to_string(&path)
                .map_err(|e| anyhow!("cannot read {}: {e}", path.display()))?;
            Ok(text
                .lines()
                .filter(|l| !l.trim().is_empty())
                .map(str::to_owned)
                .collect())
        };
        Ok(Self {
            caught: list("caught.txt")?,
            missed: list("missed.txt")?,
            timeouts: list("timeout.txt")?,
            unviable: list("unviable.txt")?,
        })
    }
}

/// One crate's figures, the loom-covered mutants counted as caught when `loom_proved` says
/// their loom mutant was rejected.
#[derive(Debug)]
pub struct Score {
    /// Every mutant generated.
    pub generated: usize,
    /// Those that built (caught + missed + timeouts).
    pub viable: usize,
    /// Caught by a test or (`by_loom`) by a loom model.
    pub caught: usize,
    /// The missed mutants caught by a loom model instead: (name, entry).
    pub by_loom: Vec<(String, &'static LoomCovered)>,
    /// Missed by every test and not covered by loom.
    pub missed: Vec<String>,
    /// Timed out.
    pub timeouts: Vec<String>,
    /// Did not build.
    pub unviable: usize,
}

impl Score {
    /// The figures of `o`; a missed mutant of [`LOOM_COVERED`] counts as caught when
    /// `loom_proved(loom mutant)`.
    pub fn of(o: &Outcomes, loom_proved: impl Fn(&str) -> bool) -> Self {
        let mut by_loom = Vec::new();
        let mut missed = Vec::new();
        for m in &o.missed {
            match loom_cover(m) {
                Some(c) if loom_proved(c.loom) => by_loom.push((m.clone(), c)),
                _ => missed.push(m.clone()),
            }
        }
        let viable = o.caught.len() + o.missed.len() + o.timeouts.len();
        Self {
            generated: viable + o.unviable.len(),
            viable,
            caught: o.caught.len() + by_loom.len(),
            by_loom,
            missed,
            timeouts: o.timeouts.clone(),
            unviable: o.unviable.len(),
        }
    }

    /// caught / viable (1 when nothing is viable).
    pub fn ratio(&self) -> f64 {
        if self.viable == 0 {
            1.0
        } else {
            self.caught as f64 / self.viable as f64
        }
    }
}

/// What to run.
#[derive(Debug)]
struct Options {
    crates: Vec<&'static Crate>,
    jobs: u32,
    /// The time limit of a mutant's tests in seconds, when given; otherwise cargo-mutants' own
    /// in the first pass (5 times the unmutated tests' time, at least [`OWN_MIN_TIMEOUT`]) and
    /// [`FULL_TIMEOUT`] in the second.
    timeout: Option<u32>,
    files: Vec<String>,
    res: Vec<String>,
    loom: bool,
    iterate: bool,
}

fn parse(mut p: Parser) -> Result<Options> {
    let mut o = Options {
        crates: Vec::new(),
        jobs: 2,
        timeout: None,
        files: Vec::new(),
        res: Vec::new(),
        loom: true,
        iterate: false,
    };
    while let Some(arg) = p.next()? {
        match arg {
            Arg::Long("crate") => {
                let name = cli::string(p.value()?)?;
                let c = CRATES
                    .iter()
                    .find(|c| c.name == name || c.package == name)
                    .ok_or_else(|| {
                        usage!("--crate {name}: not one of core, mlx5dv (or their package names)")
                    })?;
                if !o.crates.iter().any(|x| x.name == c.name) {
                    o.crates.push(c);
                }
            }
            Arg::Short('j') | Arg::Long("jobs") => o.jobs = cli::value(&mut p, "--jobs")?,
            Arg::Long("timeout") => o.timeout = Some(cli::value(&mut p, "--timeout")?),
            Arg::Long("file") => o.files.push(cli::string(p.value()?)?),
            Arg::Long("re") => o.res.push(cli::string(p.value()?)?),
            Arg::Long("no-loom") => o.loom = false,
            Arg::Long("iterate") => o.iterate = true,
            arg => {
                return Err(usage!(
                    "{} for `mutants`; try --crate core|mlx5dv, -j N, --timeout SECS, \
                     --file GLOB, --re REGEX, --no-loom, --iterate",
                    arg.unexpected()
                ));
            }
        }
    }
    if o.jobs == 0 || o.timeout == Some(0) {
        return Err(usage!("-j and --timeout take a number above 0"));
    }
    if o.crates.is_empty() {
        o.crates = CRATES.iter().collect();
    }
    Ok(o)
}

/// The installed cargo-mutants' version (`cargo-mutants 27.1.0`), installing it with
/// `cargo install --locked` when it is missing.
fn ensure_cargo_mutants() -> Result<String> {
    let version = || {
        util::cargo(["mutants", "--version"])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    if let Some(v) = version() {
        return Ok(v);
    }
    println!("cargo-mutants is not installed: installing version {CARGO_MUTANTS_VERSION}");
    util::run(&mut util::cargo([
        "install",
        "cargo-mutants",
        "--locked",
        "--version",
        CARGO_MUTANTS_VERSION,
    ]))?;
    version().ok_or_else(|| anyhow!("`cargo mutants --version` fails after installing it"))
}

/// Where cargo-mutants writes a crate's results (its `mutants.out` goes inside).
fn out_dir(c: &Crate) -> PathBuf {
    util::target_dir().join("mutants").join(c.name)
}

/// The cargo-mutants command for crate `c`, running the tests of `tests`; with `iterate`, on
/// the mutants its last run did not catch.
fn command(c: &Crate, o: &Options, tests: &[&str], iterate: bool) -> Command {
    let mut cmd = util::cargo(["mutants", "--package", c.package]);
    cmd.arg("--test-package").arg(tests.join(","));
    cmd.arg("--jobs").arg(o.jobs.to_string());
    // cargo-mutants times the unmutated tests of the mutated crate alone, so its own limit is
    // too short for the tests of every package.
    let timeout = match o.timeout {
        Some(t) => Some(t),
        None if tests.len() > 1 => Some(FULL_TIMEOUT),
        None => None,
    };
    match timeout {
        Some(t) => cmd.arg("--timeout").arg(t.to_string()),
        // Some unit tests spin threads against each other, which a busy machine slows.
        None => cmd
            .arg("--minimum-test-timeout")
            .arg(OWN_MIN_TIMEOUT.to_string()),
    };
    cmd.arg("--output").arg(out_dir(c));
    // No debug info: a mutant's build only has to give the tests' verdict, and without it the
    // many test binaries link in about half the time.
    cmd.env("CARGO_PROFILE_DEV_DEBUG", "0");
    cmd.env("CARGO_PROFILE_TEST_DEBUG", "0");
    if iterate {
        cmd.arg("--iterate");
    }
    for f in &o.files {
        cmd.arg("--file").arg(f);
    }
    for r in &o.res {
        cmd.arg("--re").arg(r);
    }
    cmd
}

/// Every mutant cargo-mutants generates for `c` now (`--list`), whatever the filters.
fn current_mutants(c: &Crate) -> Result<BTreeSet<String>> {
    let out = util::cargo(["mutants", "--list", "--package", c.package])
        .output()
        .map_err(|e| anyhow!("cargo mutants --list: {e}"))?;
    if !out.status.success() {
        bail!("cargo mutants --list --package {} failed", c.package);
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect())
}

/// The outcomes of an `--iterate` run (`new`) together with those of the runs before
/// (`prev`): `new` decides for the mutants it ran, `prev` for the others that are still
/// generated (`current`): those caught or unviable before (which `--iterate` skips), those that
/// timed out in a first pass (which [`skip_timeouts`] makes the second skip), and those a
/// `--file` or `--re` filter left out.
pub fn merge(prev: &Outcomes, new: Outcomes, current: &BTreeSet<String>) -> Outcomes {
    let ran: BTreeSet<String> = [&new.caught, &new.missed, &new.timeouts, &new.unviable]
        .into_iter()
        .flatten()
        .cloned()
        .collect();
    let join = |old: &[String], mut now: Vec<String>| {
        now.extend(
            old.iter()
                .filter(|m| current.contains(*m) && !ran.contains(*m))
                .cloned(),
        );
        now
    };
    Outcomes {
        caught: join(&prev.caught, new.caught),
        missed: join(&prev.missed, new.missed),
        timeouts: join(&prev.timeouts, new.timeouts),
        unviable: join(&prev.unviable, new.unviable),
    }
}

/// Makes the next `--iterate` run of cargo-mutants skip the mutants that timed out in `o`, as
/// it skips the caught ones (it reads `previously_caught.txt` too): each costs the whole time
/// limit, and would only time out again. [`write_back`] removes the file.
fn skip_timeouts(o: &Outcomes, dir: &Path) -> Result {
    let path = dir.join("previously_caught.txt");
    let text: String = o.timeouts.iter().map(|m| format!("{m}\n")).collect();
    std::fs::write(&path, text).map_err(|e| anyhow!("cannot write {}: {e}", path.display()))
}

/// Writes the caught and unviable mutants of `o` back to `dir` (after [`merge`]), so that the
/// next `--iterate` run skips them and counts them, and removes `previously_caught.txt`
/// (cargo-mutants' list of what it skipped, caught and unviable mixed).
fn write_back(o: &Outcomes, dir: &Path) -> Result {
    for (file, list) in [("caught.txt", &o.caught), ("unviable.txt", &o.unviable)] {
        let mut text = list.join("\n");
        if !text.is_empty() {
            text.push('\n');
        }
        let path = dir.join(file);
        std::fs::write(&path, text).map_err(|e| anyhow!("cannot write {}: {e}", path.display()))?;
    }
    let skipped = dir.join("previously_caught.txt");
    if skipped.exists() {
        std::fs::remove_file(&skipped)
            .map_err(|e| anyhow!("cannot remove {}: {e}", skipped.display()))?;
    }
    Ok(())
}

/// Runs `cmd` (cargo-mutants) and reads the outcomes it wrote to `results`.
fn run_pass(mut cmd: Command, results: &Path) -> Result<Outcomes> {
    util::run_lines(&mut cmd, |_| true).and_then(|status| {
        // 0: every mutant caught; 2: some missed; 3: some timed out (cargo-mutants' codes).
        match status.code() {
            Some(0 | 2 | 3) => Ok(()),
            _ => bail!("`{}` failed ({status})", util::show(&cmd)),
        }
    })?;
    Outcomes::read(results)
}

/// Runs cargo-mutants on `c` in two passes, and returns the outcomes. The first runs the tests
/// of `c` alone, which build in a fraction of the time of all of them and catch most mutants;
/// the second runs every test package of `c` on the mutants the first did not catch. A mutant
/// caught by some of the tests is caught by all of them, so the two passes give the outcomes
/// of one run with every test package, but for the mutants that time out in the first pass:
/// they are not run again (they would hang the same test) and stay timeouts. With `--iterate`
/// the first pass skips what the runs before caught (or found unviable), and those count.
fn run_crate(c: &Crate, o: &Options) -> Result<Outcomes> {
    // cargo-mutants creates `mutants.out` in the directory, not the directory itself.
    let dir = out_dir(c);
    std::fs::create_dir_all(&dir).map_err(|e| anyhow!("cannot create {}: {e}", dir.display()))?;
    let results = dir.join("mutants.out");
    let current = current_mutants(c)?;
    let prev = if o.iterate {
        Outcomes::read(&results).ok()
    } else {
        None
    };
    println!("-- pass 1: the tests of {} alone", c.package);
    let mut first = run_pass(command(c, o, &[c.package], o.iterate), &results)?;
    if let Some(prev) = prev {
        first = merge(&prev, first, &current);
    }
    write_back(&first, &results)?;
    if c.tests.len() == 1 || first.missed.is_empty() {
        return Ok(first);
    }
    println!(
        "-- pass 2: the {} mutants missed, with the tests of {}",
        first.missed.len(),
        c.tests.join(", ")
    );
    skip_timeouts(&first, &results)?;
    let second = run_pass(command(c, o, c.tests, true), &results)?;
    let all = merge(&first, second, &current);
    write_back(&all, &results)?;
    Ok(all)
}

/// `cargo xtask mutants`.
pub fn main(p: Parser) -> Result {
    let o = parse(p)?;
    let version = ensure_cargo_mutants()?;
    println!("using {version}");
    if !version.ends_with(CARGO_MUTANTS_VERSION) {
        println!(
            "note: the figures in docs/testing.md are from cargo-mutants {CARGO_MUTANTS_VERSION}; \
             another version may generate other mutants"
        );
    }
    let mut results = Vec::new();
    for c in &o.crates {
        println!(
            "\n==> mutants of {} (tests of {})",
            c.package,
            c.tests.join(", ")
        );
        let t = Instant::now();
        let outcomes = run_crate(c, &o)?;
        results.push((*c, outcomes, t.elapsed()));
    }

    // The loom mutants that would catch a missed mutant: run them, each must be rejected.
    let needed: BTreeSet<&str> = results
        .iter()
        .flat_map(|(_, out, _)| out.missed.iter().filter_map(|m| loom_cover(m)))
        .map(|c| c.loom)
        .collect();
    let mut proved = BTreeSet::new();
    if o.loom {
        let mut run = Run::default();
        for m in &needed {
            println!("\n==> loom mutant {m}: the models must reject it");
            crate::stages::loom::models(Some(m), &mut run)?;
            proved.insert(*m);
        }
    } else if !needed.is_empty() {
        println!(
            "\n--no-loom: the loom mutants {} were not run; the mutants they cover count as missed",
            needed.iter().copied().collect::<Vec<_>>().join(", ")
        );
    }

    let mut table = Table::new(&[
        "crate",
        ">generated",
        ">viable",
        ">caught",
        ">(by loom)",
        ">missed",
        ">timeouts",
        ">unviable",
        ">caught/viable",
        ">time",
    ]);
    let mut below = Vec::new();
    let mut report = String::new();
    for (c, outcomes, took) in &results {
        let s = Score::of(outcomes, |m| proved.contains(m));
        table.row(vec![
            c.package.into(),
            s.generated.to_string(),
            s.viable.to_string(),
            s.caught.to_string(),
            s.by_loom.len().to_string(),
            s.missed.len().to_string(),
            s.timeouts.len().to_string(),
            s.unviable.to_string(),
            format!("{:.1} %", 100.0 * s.ratio()),
            util::duration(*took),
        ]);
        for (m, cover) in &s.by_loom {
            report.push_str(&format!(
                "  caught by loom model {} (mutant {}, rejected in this run): {m}\n      {}\n",
                cover.models.join(", "),
                cover.loom,
                cover.why
            ));
        }
        for m in &s.missed {
            report.push_str(&format!("  MISSED   {m}\n"));
        }
        for m in &s.timeouts {
            report.push_str(&format!("  TIMEOUT  {m}\n"));
        }
        if s.ratio() < FLOOR {
            below.push(c.package);
        }
    }
    println!(
        "\nmutants (results in {}):",
        util::target_dir().join("mutants").display()
    );
    table.print(false);
    if !report.is_empty() {
        println!("\n{report}");
    }
    if !below.is_empty() {
        bail!("below {:.0} % caught: {}", 100.0 * FLOOR, below.join(", "));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_split_into_file_and_change() {
        assert_eq!(
            split_name("core/src/barrier.rs:48:5: replace to_device with ()"),
            Some(("core/src/barrier.rs", "replace to_device with ()"))
        );
        assert_eq!(
            split_name(
                "mlx5dv/src/cq.rs:378:16: replace & with | in CompletionQueue<B>::publish_ci"
            ),
            Some((
                "mlx5dv/src/cq.rs",
                "replace & with | in CompletionQueue<B>::publish_ci"
            ))
        );
        assert_eq!(
            split_name("core/src/barrier.rs: replace to_device with ()"),
            None
        );
        assert_eq!(split_name("no position"), None);
    }

    #[test]
    fn loom_covers_exactly_the_fence_mutants_at_any_line() {
        let c = loom_cover("core/src/barrier.rs:1:1: replace to_device with ()").unwrap();
        assert_eq!(c.loom, "no_to_device");
        let c = loom_cover("core/src/sync.rs:72:12: delete ! in order::from_device_fence").unwrap();
        assert_eq!(c.loom, "no_from_device");
        // Other mutants of the same files, and the same change in another file, are not.
        assert!(loom_cover("core/src/barrier.rs:72:5: replace wc_start with ()").is_none());
        assert!(loom_cover("core/src/wc.rs:48:5: replace to_device with ()").is_none());
    }

    #[test]
    fn every_cover_names_a_loom_mutant_and_its_models() {
        let models =
            std::fs::read_to_string(util::root().join("loom-tests/tests/models.rs")).unwrap();
        for c in LOOM_COVERED {
            assert!(
                crate::stages::loom::MUTANTS
                    .iter()
                    .any(|(m, _)| *m == c.loom),
                "{}: no loom mutant {}",
                c.change,
                c.loom
            );
            for model in c.models {
                // `check("send_path", &["no_to_device"], ...)`: the model, then what it catches.
                let at = models
                    .find(&format!("\"{model}\""))
                    .unwrap_or_else(|| panic!("no loom model {model}"));
                let catches = &models[at..at + models[at..].find(']').unwrap()];
                assert!(
                    catches.contains(&format!("\"{}\"", c.loom)),
                    "model {model} does not catch {}",
                    c.loom
                );
            }
        }
    }

    fn outcomes(missed: &[&str]) -> Outcomes {
        Outcomes {
            caught: vec!["a:1:1: x".into(); 7],
            missed: missed.iter().map(|s| s.to_string()).collect(),
            timeouts: vec!["b:1:1: y".into()],
            unviable: vec!["c:1:1: z".into(); 5],
        }
    }

    #[test]
    fn loom_covered_mutants_count_only_when_loom_rejected_them() {
        let o = outcomes(&[
            "core/src/barrier.rs:48:5: replace to_device with ()",
            "core/src/ring.rs:40:9: replace Ring::mask -> u32 with 0",
        ]);
        let s = Score::of(&o, |m| m == "no_to_device");
        assert_eq!(
            (s.generated, s.viable, s.caught, s.unviable),
            (15, 10, 8, 5)
        );
        assert_eq!(s.by_loom.len(), 1);
        assert_eq!(
            s.missed,
            ["core/src/ring.rs:40:9: replace Ring::mask -> u32 with 0"]
        );
        // A timeout is not caught.
        assert_eq!(s.ratio(), 0.8);
        let s = Score::of(&o, |_| false);
        assert_eq!((s.caught, s.by_loom.len(), s.missed.len()), (7, 0, 2));
    }

    #[test]
    fn outcomes_are_read_from_cargo_mutants_files() {
        let dir = util::target_dir().join("xtask-test-mutants-out");
        std::fs::create_dir_all(&dir).unwrap();
        for (file, text) in [
            ("caught.txt", "a:1:1: x\nb:2:2: y\n"),
            ("missed.txt", "c:3:3: z\n"),
            ("timeout.txt", ""),
            ("unviable.txt", "\n"),
        ] {
            std::fs::write(dir.join(file), text).unwrap();
        }
        let o = Outcomes::read(&dir).unwrap();
        assert_eq!(o.caught, ["a:1:1: x", "b:2:2: y"]);
        assert_eq!(o.missed, ["c:3:3: z"]);
        assert!(o.timeouts.is_empty() && o.unviable.is_empty());
        std::fs::remove_file(dir.join("missed.txt")).unwrap();
        assert!(Outcomes::read(&dir).is_err());
    }

    #[test]
    fn an_iteration_counts_what_the_runs_before_caught() {
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let prev = Outcomes {
            caught: names(&["a:1:1: x", "gone:1:1: y"]),
            missed: names(&["m:1:1: p", "m:2:2: q"]),
            timeouts: names(&["t:1:1: r"]),
            unviable: names(&["u:1:1: s"]),
        };
        // The iteration ran the missed and timed-out ones: it caught one, the test that
        // caught it having been added; one mutant ("gone") is no longer generated.
        let new = Outcomes {
            caught: names(&["m:1:1: p"]),
            missed: names(&["m:2:2: q"]),
            timeouts: Vec::new(),
            unviable: names(&["t:1:1: r"]),
        };
        let current: BTreeSet<String> =
            ["a:1:1: x", "m:1:1: p", "m:2:2: q", "t:1:1: r", "u:1:1: s"]
                .iter()
                .map(|s| s.to_string())
                .collect();
        let all = merge(&prev, new, &current);
        assert_eq!(all.caught, ["m:1:1: p", "a:1:1: x"]);
        assert_eq!(all.missed, ["m:2:2: q"]);
        assert!(all.timeouts.is_empty());
        assert_eq!(all.unviable, ["t:1:1: r", "u:1:1: s"]);
        // A run that left mutants out (a filter, or the timeouts skipped) keeps their outcomes.
        let filtered = Outcomes {
            caught: Vec::new(),
            missed: names(&["m:2:2: q"]),
            timeouts: Vec::new(),
            unviable: Vec::new(),
        };
        let all = merge(&prev, filtered, &current);
        assert_eq!(all.caught, ["a:1:1: x"]);
        assert_eq!(all.missed, ["m:2:2: q", "m:1:1: p"]);
        assert_eq!(all.timeouts, ["t:1:1: r"]);
        assert_eq!(all.unviable, ["u:1:1: s"]);
    }

    #[test]
    fn options() {
        let o = parse(Parser::from_args([
            "--crate", "mlx5dv", "-j", "1", "--file", "x.rs",
        ]))
        .unwrap();
        assert_eq!(o.crates.len(), 1);
        assert_eq!(o.crates[0].package, "zverbs-mlx5dv");
        assert_eq!(
            (o.jobs, o.timeout, o.loom, o.iterate),
            (1, None, true, false)
        );
        let args: Vec<String> = command(o.crates[0], &o, o.crates[0].tests, o.iterate)
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let at = args.iter().position(|a| a == "--test-package").unwrap();
        assert_eq!(args[at + 1], "zverbs-mlx5dv,zverbs-sim,zverbs-crosscheck");
        assert!(args.windows(2).any(|w| w == ["--file", "x.rs"]));
        assert!(!args.iter().any(|a| a == "--iterate"));
        // The tests of every package get the long time limit; a crate's own, cargo-mutants'.
        assert!(args.windows(2).any(|w| w == ["--timeout", "120"]));
        let own = command(o.crates[0], &o, &["zverbs-mlx5dv"], false);
        assert!(!own.get_args().any(|a| a == "--timeout"));
        assert!(own.get_args().any(|a| a == "--minimum-test-timeout"));
        let again = parse(Parser::from_args(["--iterate"])).unwrap();
        assert!(
            command(again.crates[0], &again, &["zverbs-mlx5dv"], again.iterate)
                .get_args()
                .any(|a| a == "--iterate")
        );
        let all = parse(Parser::from_args(["--no-loom"])).unwrap();
        assert_eq!(all.crates.len(), 2);
        assert!(!all.loom);
        for bad in [&["--crate", "sim"][..], &["-j", "0"], &["--list"]] {
            let e = parse(Parser::from_args(bad)).unwrap_err();
            assert!(cli::is_usage(&e), "{bad:?}: {e}");
        }
    }
}
