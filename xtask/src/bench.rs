//! `cargo xtask bench`: the direct path against the C baselines, in one run.
//!
//! - `cargo xtask bench [--quick] [--runs N] [-- criterion args]`: the criterion benchmarks of
//!   `zverbs-benches` (every case on both sides, one after the other), run `N` times (3 unless
//!   told), then the table of median ns per unit with the median of the runs' ratios zverbs /
//!   C, their range, and the load (whether the machine was quiet), and an SVG plot;
//! - `cargo xtask bench --instructions [--calls N]`: callgrind instruction counts of the same
//!   cases (the out-of-line function of each side, `--toggle-collect`), with the ratios:
//!   stable where times are noisy;
//! - `cargo xtask bench --fallback [--host] [-- args]`: the libibverbs fallback against the
//!   same post+poll loop in C on raw `ibv_post_send` / `ibv_poll_cq` (the `fallback` example),
//!   on rxe in the VM of `cargo xtask rxe`, or with `--host` on this machine's own device
//!   (arguments after `--` go to the example: `--device`, `--iters`, `--rounds`, `--size`);
//! - `cargo xtask bench --rxe [--host] [-- --rounds N --iters N --sizes 2,4096 --inline N]`:
//!   `zverbs-perf`'s `write_lat` and `send_lat` against perftest's `ib_write_lat` and
//!   `ib_send_lat` on the same rxe devices in one boot of the VM, as ratios
//!   ([`crate::rxe::figures`]);
//! - `cargo xtask bench --scale`: jobs of 2, 4, 8 and 16 processes under `mpirun` on the
//!   emulated ConnectX, every pair connected through PMIx: QPs and memory per process,
//!   connection set-up time, all-to-all message rate, and a model projecting them to 1 000
//!   and 10 000 peers ([`crate::stages::connectx::pmix`]);
//! - `cargo xtask bench --ucx [-- --rounds N --iters N]`: `zverbs-perf`'s `write_lat`,
//!   `read_lat`, `send_lat` and `write_bw` message rate against `ucx_perftest`'s `put_lat`,
//!   `get`, `am_lat` and `put_bw` over UCX's `rc_mlx5` on the emulated ConnectX, as ratios
//!   ([`crate::stages::connectx::ucx`]);
//! - `--write-docs` (with any): also writes the figures into `docs/performance.md` (between
//!   its `bench:` markers) and the plot to `docs/performance-times.svg`.
//!
//! Results also go to `target/zverbs-bench/` (`times.tsv`, `times.svg`, `instructions.tsv`).

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use crate::cli::{self, Arg, Parser, usage};
use crate::report::{
    DOC, QUIET_LOAD, load_average, machine, median, quiet, ratio_stats, replace_block, verdict,
};
use crate::util::{self, Result, Table, anyhow, bail};

/// The benchmarks' package, bench target and counting example.
const PACKAGE: &str = "zverbs-benches";
const BENCH: &str = "datapath";
const COUNT_EXAMPLE: &str = "count";
const FALLBACK_EXAMPLE: &str = "fallback";

/// The performance report and the plot it shows.
const DOC_SVG: &str = "docs/performance-times.svg";

/// Calls per callgrind run (each case on each side).
const DEFAULT_CALLS: u64 = 20_000;

/// What to run.
#[derive(Debug, Default)]
struct Options {
    instructions: bool,
    fallback: bool,
    rxe: bool,
    scale: bool,
    host: bool,
    quick: bool,
    write_docs: bool,
    calls: Option<u64>,
    /// Timed runs, one after another (each case's two sides side by side in each).
    runs: Option<u32>,
    criterion: Vec<String>,
    ucx: bool,
}

fn parse(mut p: Parser) -> Result<Options> {
    let mut o = Options::default();
    while let Some(arg) = p.next()? {
        match arg {
            Arg::Long("instructions") => o.instructions = true,
            Arg::Long("fallback") => o.fallback = true,
            Arg::Long("rxe") => o.rxe = true,
            Arg::Long("scale") => o.scale = true,
            Arg::Long("host") => o.host = true,
            Arg::Long("quick") => o.quick = true,
            Arg::Long("write-docs") => o.write_docs = true,
            Arg::Long("calls") => o.calls = Some(cli::value(&mut p, "--calls")?),
            Arg::Long("runs") => o.runs = Some(cli::value(&mut p, "--runs")?),
            Arg::Long("ucx") => o.ucx = true,
            // After `--`: for the benchmark (criterion), the example or the rxe figures.
            Arg::Value(v) => {
                o.criterion.push(cli::string(v)?);
                o.criterion.extend(cli::rest(&mut p)?);
            }
            arg => {
                return Err(usage!(
                    "{} for `bench`; try --instructions, --fallback [--host], --rxe [--host], --scale, \
                     --ucx, --quick, --runs N, --write-docs, --calls N, -- <args>",
                    arg.unexpected()
                ));
            }
        }
    }
    Ok(o)
}

/// `cargo xtask bench ...`.
pub fn main(p: Parser) -> Result {
    let o = parse(p)?;
    let out = util::target_dir().join("zverbs-bench");
    std::fs::create_dir_all(&out)?;
    if usize::from(o.instructions)
        + usize::from(o.fallback)
        + usize::from(o.rxe)
        + usize::from(o.scale)
        + usize::from(o.ucx)
        > 1
    {
        return Err(usage!(
            "--instructions, --fallback, --rxe, --scale and --ucx are separate runs"
        ));
    }
    if o.scale {
        return crate::stages::connectx::pmix::scale(o.write_docs, &out);
    }
    if o.ucx {
        crate::stages::connectx::ucx::bench(&o.criterion)
    } else if o.rxe {
        let mut f = crate::rxe::figures::Options {
            host: o.host,
            write_docs: o.write_docs,
            ..Default::default()
        };
        crate::rxe::figures::parse_args(&mut f, &o.criterion)?;
        crate::rxe::figures::run(&f, &out)
    } else if o.instructions {
        instructions(&o, &out)
    } else if o.fallback {
        fallback(&o, &out)
    } else {
        times(&o, &out)
    }
}

// ---------------------------------------------------------------------------------------------
// Times (criterion)
// ---------------------------------------------------------------------------------------------

/// One row of `times.tsv`, as the benchmark writes it.
#[derive(Clone, Debug, PartialEq)]
pub struct TimeRow {
    /// Case name.
    pub case: String,
    /// zverbs, ns per unit (fastest sample).
    pub ours: f64,
    /// C baseline, ns per unit (fastest sample).
    pub c: f64,
    /// What the case does.
    pub about: String,
    /// zverbs and C, median samples.
    pub medians: Option<(f64, f64)>,
    /// Each run's ratio of the median samples, zverbs / C (empty for one parsed run).
    pub run_ratios: Vec<f64>,
}

/// Parses `times.tsv` (`case units ours_ns c_ns about [ours_median c_median]`, with a header
/// line).
pub fn parse_times(text: &str) -> Vec<TimeRow> {
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            Some(TimeRow {
                case: f.first()?.to_string(),
                ours: f.get(2)?.parse().ok()?,
                c: f.get(3)?.parse().ok()?,
                about: f.get(4).unwrap_or(&"").to_string(),
                medians: f
                    .get(5)
                    .zip(f.get(6))
                    .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?))),
                run_ratios: Vec::new(),
            })
        })
        .collect()
}

/// Timed runs unless `--runs` says otherwise: three, so that the median of the runs' ratios
/// is not one run's luck.
const DEFAULT_RUNS: u32 = 3;

fn times(o: &Options, out: &Path) -> Result {
    let tsv = out.join("times.tsv");
    let runs = o.runs.unwrap_or(DEFAULT_RUNS).max(1);
    let mut all = Vec::new();
    let mut loads = Vec::new();
    for i in 0..runs {
        let _ = std::fs::remove_file(&tsv);
        let mut cmd = util::cargo(["bench", "-p", PACKAGE, "--bench", BENCH, "--"]);
        if o.quick {
            cmd.args(["--warm-up-time", "0.2", "--measurement-time", "0.5"]);
        }
        cmd.args(&o.criterion).env("ZVERBS_BENCH_OUT", &tsv);
        println!("\n== timed run {} of {runs}", i + 1);
        loads.extend(load_average());
        util::run(&mut cmd)?;
        loads.extend(load_average());
        let Ok(text) = std::fs::read_to_string(&tsv) else {
            bail!(
                "the benchmark wrote no {} (did a filter leave no case with both sides?)",
                tsv.display()
            );
        };
        std::fs::write(out.join(format!("times.{}.tsv", i + 1)), &text)?;
        all.push(parse_times(&text));
    }
    let rows = combine_runs(&all);
    let load = match (loads.first(), loads.iter().copied().reduce(f64::max)) {
        (Some(&a), Some(most)) => {
            let verdict = if quiet(a, most) {
                "quiet: the ratios can be trusted to a few percent".to_string()
            } else {
                format!(
                    "NOT QUIET (above {QUIET_LOAD}): something else ran beside the benchmark, \
                     and its times say little; trust the instruction counts, or run again alone"
                )
            };
            format!(
                "{runs} run(s); one-minute load average {a:.2} at the start, {most:.2} at most \
                 between runs: {verdict}."
            )
        }
        _ => "The load average could not be read.".into(),
    };
    println!("\n{}", times_markdown(&rows, &load));
    let svg = times_svg(&rows);
    let svg_path = out.join("times.svg");
    std::fs::write(&svg_path, &svg)?;
    println!("\nplot of ns per operation: {}", svg_path.display());
    if o.write_docs {
        let root = util::root();
        std::fs::write(root.join(DOC_SVG), &svg)?;
        replace_block(&root.join(DOC), "times", &times_markdown(&rows, &load))?;
        println!("wrote {DOC_SVG} and the times in {DOC}");
    }
    Ok(())
}

/// One row per case of the first run, over every run that has it: the median of each
/// column, and the runs' ratios of median samples (zverbs / C), whose median is the row's
/// ratio.
pub fn combine_runs(runs: &[Vec<TimeRow>]) -> Vec<TimeRow> {
    let Some(first) = runs.first() else {
        return Vec::new();
    };
    first
        .iter()
        .map(|r0| {
            let same: Vec<&TimeRow> = runs
                .iter()
                .filter_map(|run| run.iter().find(|r| r.case == r0.case))
                .collect();
            let col = |f: &dyn Fn(&TimeRow) -> Option<f64>| {
                median(&mut same.iter().filter_map(|r| f(r)).collect::<Vec<_>>())
            };
            let medians = r0.medians.map(|_| {
                (
                    col(&|r| r.medians.map(|m| m.0)),
                    col(&|r| r.medians.map(|m| m.1)),
                )
            });
            TimeRow {
                case: r0.case.clone(),
                ours: col(&|r| Some(r.ours)),
                c: col(&|r| Some(r.c)),
                about: r0.about.clone(),
                medians,
                run_ratios: same
                    .iter()
                    .map(|r| match r.medians {
                        Some((a, b)) => a / b,
                        None => r.ours / r.c,
                    })
                    .collect(),
            }
        })
        .collect()
}

/// The markdown table of times, with the machine it was measured on and its load: per case
/// the median samples (median over the runs), the median of the runs' ratios of median
/// samples and their range, and the fastest samples.
fn times_markdown(rows: &[TimeRow], load: &str) -> String {
    let mut s = String::from(
        "| case | what one unit is | zverbs ns | C ns | zverbs / C | runs' ratios | fastest (zverbs, C) |\n\
         |---|---|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        let (ours, c) = r.medians.unwrap_or((r.ours, r.c));
        let ratio = if r.run_ratios.is_empty() {
            ours / c
        } else {
            median(&mut r.run_ratios.clone())
        };
        let range = match (
            r.run_ratios.iter().copied().reduce(f64::min),
            r.run_ratios.iter().copied().reduce(f64::max),
        ) {
            (Some(lo), Some(hi)) => format!("{lo:.2}–{hi:.2}"),
            _ => String::new(),
        };
        let _ = writeln!(
            s,
            "| `{}` | {} | {ours:.2} | {c:.2} | {ratio:.2}× | {range} | {:.2}, {:.2} |",
            r.case, r.about, r.ours, r.c
        );
    }
    let _ = write!(s, "\n{}{load}\n", machine());
    s
}

// ---------------------------------------------------------------------------------------------
// The fallback on a device
// ---------------------------------------------------------------------------------------------

/// The fallback's goal: at most this ratio zverbs / C.
pub const FALLBACK_GOAL: f64 = 1.02;

/// Rounds and iterations per round of `bench --fallback` unless given after `--`: many short
/// alternating rounds, so that the VM's slow stretches hit both sides alike and the median of
/// the rounds' ratios is known to a few tenths of a percent.
const FALLBACK_ROUNDS: &str = "400";
const FALLBACK_ITERS: &str = "1000";

/// One round of the fallback example's output: (zverbs ns, C ns) per operation.
pub fn parse_round(line: &str) -> Option<(f64, f64)> {
    let w: Vec<&str> = line.split_whitespace().collect();
    match w.as_slice() {
        ["round", _, "zverbs", ours, "ns", "C", c, "ns", ..] => {
            Some((ours.parse().ok()?, c.parse().ok()?))
        }
        _ => None,
    }
}

/// Builds example `name` of the benchmarks in release mode; its path.
fn release_example(name: &str) -> Result<std::path::PathBuf> {
    util::run(&mut util::cargo([
        "build",
        "--release",
        "-p",
        PACKAGE,
        "--example",
        name,
    ]))?;
    Ok(util::target_dir().join("release/examples").join(name))
}

fn fallback(o: &Options, out: &Path) -> Result {
    let exe = release_example(FALLBACK_EXAMPLE)?;
    let tsv = out.join("fallback.tsv");
    let _ = std::fs::remove_file(&tsv);
    let mut args: Vec<String> = vec![
        exe.to_string_lossy().into_owned(),
        "--out".into(),
        tsv.to_string_lossy().into_owned(),
    ];
    if !o.criterion.iter().any(|a| a == "--rounds") {
        args.extend(["--rounds".into(), FALLBACK_ROUNDS.into()]);
    }
    if !o.criterion.iter().any(|a| a == "--iters" || a == "-n") {
        args.extend(["--iters".into(), FALLBACK_ITERS.into()]);
    }
    args.extend(o.criterion.iter().cloned());
    // On rxe in the VM (the project and target directories are shared with the guest at the
    // same paths, so the result lands in `zverbs-bench` of the target directory), or directly
    // on this machine's device.
    let mut cmd = if o.host {
        let mut c = Command::new(&args[0]);
        c.args(&args[1..]).current_dir(util::root());
        c
    } else {
        let mut c = util::cargo(["xtask", "rxe", "--timeout", "1800", "--"]);
        c.args(&args);
        c
    };
    let mut rounds = Vec::new();
    let status = util::run_lines(&mut cmd, |line| match parse_round(line) {
        // Every round's line is kept in the log below; a few are shown.
        Some(r) => {
            rounds.push(r);
            rounds.len() % 50 == 1
        }
        None => true,
    });
    let log: String = rounds
        .iter()
        .enumerate()
        .map(|(i, (a, b))| format!("{i}\t{a:.1}\t{b:.1}\t{:.4}\n", a / b))
        .collect();
    std::fs::write(
        out.join("fallback-rounds.tsv"),
        format!("round\tzverbs_ns\tc_ns\tratio\n{log}"),
    )?;
    util::check(&cmd, status?).map_err(|e| {
        anyhow!(
            "{e}\n(the fallback runs on a device the libibverbs fallback drives: rxe in the VM \
             of `cargo xtask rxe`, or this machine's own device with --host)"
        )
    })?;
    let Ok(text) = std::fs::read_to_string(&tsv) else {
        bail!("the fallback benchmark wrote no {}", tsv.display());
    };
    if rounds.is_empty() {
        bail!("the fallback benchmark printed no rounds");
    }
    let rows = parse_times(&text);
    let stats = ratio_stats(&rounds);
    let mut table = Table::new(&["case", ">zverbs ns", ">C ns", ">zverbs/C", "what"]);
    for r in &rows {
        table.row(vec![
            r.case.clone(),
            format!("{:.1}", r.ours),
            format!("{:.1}", r.c),
            format!("{:.3}x", r.ours / r.c),
            r.about.clone(),
        ]);
    }
    println!("\nthe libibverbs fallback against raw libibverbs (fastest rounds):");
    table.print(false);
    let summary = format!(
        "median of the {} rounds' ratios {:.3}x (95% confidence interval of the median \
         {:.3}x to {:.3}x); total time ratio {:.3}x; goal <= {FALLBACK_GOAL:.2}x: {}",
        stats.rounds,
        stats.median,
        stats.low,
        stats.high,
        stats.of_totals,
        verdict(&stats, FALLBACK_GOAL)
    );
    println!("{summary}");
    println!("every round: {}", out.join("fallback-rounds.tsv").display());
    if o.write_docs {
        let mut md = String::from(
            "| case | what one unit is | zverbs ns, fastest round | C ns, fastest round | \
             ratio of the fastest | zverbs ns, median round | C ns, median round |\n\
             |---|---|---:|---:|---:|---:|---:|\n",
        );
        for r in &rows {
            let (mo, mc) = r.medians.unwrap_or((f64::NAN, f64::NAN));
            let _ = writeln!(
                md,
                "| `{}` | {} | {:.1} | {:.1} | {:.3}× | {mo:.1} | {mc:.1} |",
                r.case,
                r.about,
                r.ours,
                r.c,
                r.ours / r.c
            );
        }
        let place = if o.host {
            "this machine's device"
        } else {
            "rxe in the VM of `cargo xtask rxe` (qemu; TCG unless KVM is usable)"
        };
        let _ = write!(md, "\nOn {place}. {}", machine());
        let _ = write!(
            md,
            "\n**Ratio zverbs / C: {:.3}×**, the median of {} rounds' ratios (95% confidence \
             interval of the median, bootstrap: {:.3}× to {:.3}×; total time of all rounds \
             {:.3}×). **Goal ≤ {FALLBACK_GOAL:.2}×: {}.**\n",
            stats.median,
            stats.rounds,
            stats.low,
            stats.high,
            stats.of_totals,
            verdict(&stats, FALLBACK_GOAL)
        );
        replace_block(&util::root().join(DOC), "fallback", &md)?;
        println!("wrote the fallback's figures in {DOC}");
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Instructions (callgrind)
// ---------------------------------------------------------------------------------------------

/// A case as `count --list` prints it.
#[derive(Clone, Debug, PartialEq)]
pub struct CountCase {
    /// Name.
    pub name: String,
    /// Units (work requests or CQEs) per call.
    pub units: u32,
    /// The zverbs function to toggle collection on.
    pub ours_fn: String,
    /// The C function.
    pub c_fn: String,
    /// What it does.
    pub about: String,
}

/// Parses `count --list` (tab-separated: name, units, zverbs function, C function, about).
pub fn parse_cases(text: &str) -> Vec<CountCase> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            Some(CountCase {
                name: f.first()?.to_string(),
                units: f.get(1)?.parse().ok()?,
                ours_fn: f.get(2)?.to_string(),
                c_fn: f.get(3)?.to_string(),
                about: f.get(4).unwrap_or(&"").to_string(),
            })
        })
        .collect()
}

/// The `Collected : N` line of callgrind's report.
pub fn parse_collected(stderr: &str) -> Option<u64> {
    stderr
        .lines()
        .find_map(|l| l.split_once("Collected :").map(|(_, n)| n.trim()))
        .and_then(|n| n.parse().ok())
}

fn instructions(o: &Options, out: &Path) -> Result {
    if !util::succeeds(Command::new("valgrind").arg("--version")) {
        bail!(
            "valgrind is not installed (Debian package valgrind); as root:\n    \
             apt-get install -y --no-install-recommends valgrind"
        );
    }
    let bin = release_example(COUNT_EXAMPLE)?;
    let list = Command::new(&bin).arg("--list").output()?;
    if !list.status.success() {
        bail!("`{} --list` failed", bin.display());
    }
    let cases = parse_cases(&String::from_utf8_lossy(&list.stdout));
    let calls = o.calls.unwrap_or(DEFAULT_CALLS);
    println!(
        "\ncounting instructions: {} cases x 2 sides, {calls} calls each, under callgrind",
        cases.len()
    );
    let mut rows = Vec::new();
    for c in &cases {
        let per_unit = |side: &str, func: &str| -> Result<f64> {
            let mut cmd = Command::new("valgrind");
            cmd.args([
                "--tool=callgrind",
                "--callgrind-out-file=/dev/null",
                &format!("--toggle-collect={func}"),
            ])
            .arg(&bin)
            .args([c.name.as_str(), side, &calls.to_string()]);
            let run = cmd.output()?;
            let stderr = String::from_utf8_lossy(&run.stderr);
            let Some(n) = parse_collected(&stderr).filter(|_| run.status.success()) else {
                bail!("`{}` failed:\n{stderr}", util::show(&cmd));
            };
            Ok(n as f64 / calls as f64 / f64::from(c.units))
        };
        let ours = per_unit("ours", &c.ours_fn)?;
        let cc = per_unit("c", &c.c_fn)?;
        println!("  {:<16} zverbs {ours:>7.1}  C {cc:>7.1}", c.name);
        rows.push((c.clone(), ours, cc));
    }

    let mut table = Table::new(&["case", ">zverbs", ">C", ">zverbs/C", "goal <= 1.00x"]);
    let mut tsv = String::from("case\tunits\tours\tc\tabout\n");
    let mut met = 0;
    for (c, ours, cc) in &rows {
        let ratio = ours / cc;
        met += usize::from(ratio <= 1.0);
        table.row(vec![
            c.name.clone(),
            format!("{ours:.1}"),
            format!("{cc:.1}"),
            format!("{ratio:.2}x"),
            if ratio <= 1.0 { "met" } else { "MISSED" }.into(),
        ]);
        let _ = writeln!(
            tsv,
            "{}\t{}\t{ours:.1}\t{cc:.1}\t{}",
            c.name, c.units, c.about
        );
    }
    println!("\ninstructions per unit (work request or CQE), callgrind:");
    table.print(false);
    println!("{met} of {} cases at or below the C baseline", rows.len());
    std::fs::write(out.join("instructions.tsv"), &tsv)?;
    if o.write_docs {
        let mut md = String::from(
            "| case | what one unit is | zverbs | C | zverbs / C |\n|---|---|---:|---:|---:|\n",
        );
        for (c, ours, cc) in &rows {
            let _ = writeln!(
                md,
                "| `{}` | {} | {ours:.1} | {cc:.1} | {:.2}× |",
                c.name,
                c.about,
                ours / cc
            );
        }
        let _ = write!(md, "\n{}", machine());
        replace_block(&util::root().join(DOC), "instructions", &md)?;
        println!("wrote the instruction counts in {DOC}");
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The plot
// ---------------------------------------------------------------------------------------------

/// A horizontal bar chart of ns per unit, zverbs and C side by side for each case. Cases more
/// than ten times slower than the median (the round trip on the software device) are listed
/// under the chart instead of drawn, so they do not flatten the rest.
pub fn times_svg(rows: &[TimeRow]) -> String {
    let mut values: Vec<f64> = rows.iter().flat_map(|r| [r.ours, r.c]).collect();
    values.sort_by(f64::total_cmp);
    let median = values.get(values.len() / 2).copied().unwrap_or(1.0);
    let (drawn, apart): (Vec<&TimeRow>, Vec<&TimeRow>) =
        rows.iter().partition(|r| r.ours.max(r.c) <= 10.0 * median);
    let max = drawn.iter().map(|r| r.ours.max(r.c)).fold(0.0, f64::max);
    let step = nice_step(max / 5.0);
    let top = (max / step).ceil().max(1.0) * step;

    let (left, width, bar, gap) = (150.0, 520.0, 11.0, 10.0);
    let row_h = 2.0 * bar + gap;
    let head = 56.0;
    let chart_h = drawn.len() as f64 * row_h;
    let height = head + chart_h + 40.0 + 18.0 * apart.len() as f64 + 10.0;
    let total_w = left + width + 80.0;
    let x = |v: f64| left + v / top * width;

    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{total_w}" height="{height}" viewBox="0 0 {total_w} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{left}" y="20" font-size="14" font-weight="bold">ns per operation, zverbs vs C on mlx5dv.h (lower is better)</text>"#
    );
    // Legend.
    for (i, (name, color)) in [("zverbs", OURS_COLOR), ("C baseline", C_COLOR)]
        .iter()
        .enumerate()
    {
        let lx = left + 160.0 * i as f64;
        let _ = writeln!(
            s,
            r#"<rect x="{lx}" y="30" width="12" height="12" fill="{color}"/><text x="{}" y="40">{name}</text>"#,
            lx + 18.0
        );
    }
    // Grid and axis labels.
    let mut v = 0.0;
    while v <= top + step / 2.0 {
        let gx = x(v);
        let _ = writeln!(
            s,
            r##"<line x1="{gx:.1}" y1="{head}" x2="{gx:.1}" y2="{:.1}" stroke="#ddd"/><text x="{gx:.1}" y="{:.1}" text-anchor="middle" fill="#555">{}</text>"##,
            head + chart_h,
            head + chart_h + 16.0,
            trim(v)
        );
        v += step;
    }
    // Bars.
    for (i, r) in drawn.iter().enumerate() {
        let y0 = head + i as f64 * row_h;
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
            left - 8.0,
            y0 + bar + 4.0,
            escape(&r.case)
        );
        for (j, (val, color)) in [(r.ours, OURS_COLOR), (r.c, C_COLOR)].iter().enumerate() {
            let by = y0 + j as f64 * bar;
            let _ = writeln!(
                s,
                r##"<rect class="bar" x="{left}" y="{by:.1}" width="{:.1}" height="{:.1}" fill="{color}"/><text x="{:.1}" y="{:.1}" font-size="10" fill="#333">{val:.1}</text>"##,
                (x(*val) - left).max(0.5),
                bar - 1.0,
                x(*val) + 4.0,
                by + bar - 2.0
            );
        }
    }
    let mut ty = head + chart_h + 36.0;
    let _ = writeln!(
        s,
        r##"<text x="{left}" y="{ty:.1}" fill="#555">ns per work request or CQE; ordinary memory stands in for the device (no PCIe, no write-combining).</text>"##
    );
    for r in &apart {
        ty += 18.0;
        let _ = writeln!(
            s,
            r#"<text x="{left}" y="{ty:.1}">{}: zverbs {:.1} ns, C {:.1} ns ({:.2}x), not drawn to scale</text>"#,
            escape(&r.case),
            r.ours,
            r.c,
            r.ours / r.c
        );
    }
    s.push_str("</svg>\n");
    s
}

const OURS_COLOR: &str = "#d9541e";
const C_COLOR: &str = "#7f7f7f";

/// 1, 2 or 5 times a power of ten, at least `raw`.
fn nice_step(raw: f64) -> f64 {
    if raw <= 0.0 || !raw.is_finite() {
        return 1.0;
    }
    let p = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * p)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * p)
}

fn trim(v: f64) -> String {
    let s = format!("{v:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_combine_into_the_median_of_their_ratios() {
        let run = |case: &str, ours: f64, c: f64| TimeRow {
            case: case.into(),
            ours: ours - 1.0,
            c: c - 1.0,
            about: String::new(),
            medians: Some((ours, c)),
            run_ratios: Vec::new(),
        };
        // Three runs, the second disturbed (its zverbs side slow); a case missing from the
        // third run is combined over the two that have it.
        let rows = combine_runs(&[
            vec![run("write", 9.0, 10.0), run("poll1", 5.0, 5.0)],
            vec![run("write", 30.0, 10.0), run("poll1", 6.0, 5.0)],
            vec![run("write", 9.5, 10.0)],
        ]);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].run_ratios, vec![0.9, 3.0, 0.95]);
        assert_eq!(median(&mut rows[0].run_ratios.clone()), 0.95);
        assert_eq!(rows[0].medians, Some((9.5, 10.0)));
        assert_eq!(rows[0].ours, 8.5);
        assert_eq!(rows[1].run_ratios, vec![1.0, 1.2]);
        assert!((median(&mut rows[1].run_ratios.clone()) - 1.1).abs() < 1e-12);
        let md = times_markdown(&rows, "");
        assert!(
            md.contains("| `write` |  | 9.50 | 10.00 | 0.95× | 0.90–3.00 | 8.50, 9.00 |"),
            "{md}"
        );
    }

    fn parsed(line: &str) -> Result<Options> {
        parse(Parser::from_args(line.split_whitespace()))
    }

    #[test]
    fn options_before_the_double_dash_and_the_rest_after_it() {
        let o = parsed("--rxe --host --write-docs -- --rounds 3 --sizes 2,64").unwrap();
        assert!(o.rxe && o.host && o.write_docs && !o.fallback);
        assert_eq!(o.criterion, ["--rounds", "3", "--sizes", "2,64"]);
        assert_eq!(parsed("--calls=500").unwrap().calls, Some(500));
        for bad in ["--calls x", "--calls", "--frob", "-q"] {
            let e = parsed(bad).unwrap_err();
            assert!(crate::cli::is_usage(&e), "{bad}: {e}");
        }
    }

    #[test]
    fn reads_what_the_benchmark_and_callgrind_write() {
        let rows = parse_times(
            "case\tunits\tours_ns\tc_ns\tabout\tours_median\tc_median\n\
             write\t1\t9.5\t10.0\tRDMA WRITE\t9.9\t10.5\n",
        );
        assert_eq!(
            rows,
            [TimeRow {
                case: "write".into(),
                ours: 9.5,
                c: 10.0,
                about: "RDMA WRITE".into(),
                medians: Some((9.9, 10.5)),
                run_ratios: Vec::new(),
            }]
        );
        let cases =
            parse_cases("poll16\t16\tzverbs_benches::ours::poll\tzvb_poll_cq\tpoll of 16\n");
        assert_eq!(cases[0].units, 16);
        assert_eq!(cases[0].c_fn, "zvb_poll_cq");
        assert_eq!(
            parse_collected("==1== Events    : Ir\n==1== Collected : 1480000\n==1==\n"),
            Some(1_480_000)
        );
    }

    #[test]
    fn plot_draws_every_case_but_the_outlier() {
        let row = |case: &str, ours, c| TimeRow {
            case: case.into(),
            ours,
            c,
            about: String::new(),
            medians: None,
            run_ratios: Vec::new(),
        };
        let svg = times_svg(&[
            row("write", 9.0, 8.5),
            row("poll1", 3.0, 2.5),
            row("pingpong", 400.0, 390.0),
        ]);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(
            svg.matches("class=\"bar\"").count(),
            4,
            "two bars per drawn case"
        );
        assert!(svg.contains("pingpong: zverbs 400.0 ns, C 390.0 ns"));
        assert_eq!(nice_step(1.7), 2.0);
        assert_eq!(nice_step(0.3), 0.5);
    }

    #[test]
    fn fallback_rounds_are_read() {
        assert_eq!(
            parse_round("  round  12: zverbs    26371.8 ns  C    29796.6 ns  0.885x"),
            Some((26371.8, 29796.6))
        );
        assert_eq!(
            parse_round("post+poll of one RDMA WRITE through the fallback"),
            None
        );
    }
}
