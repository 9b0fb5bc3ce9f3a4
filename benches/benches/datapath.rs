//! The direct path's CPU cost against the C baselines, case by case, in one run.
//!
//! `cargo xtask bench` (or `cargo bench -p zverbs-benches --bench datapath`). Every case of
//! `zverbs_benches::cases` runs on both sides as criterion benchmarks `<group>/<case>/ours`
//! and `<group>/<case>/c`; times are per unit (work request or CQE). At the end a table gives,
//! for each side, the fastest of criterion's samples (each the mean of many back-to-back calls)
//! and the median sample, and the ratio zverbs / C of the fastest ones, with the goals. On a
//! machine shared with other work, interference only ever adds time, so the fastest sample is
//! the steadier estimate of what the code costs; the median shows how much the run was
//! disturbed.
//!
//! Options after `--` are criterion's (a filter, `--warm-up-time`, `--measurement-time`,
//! `--sample-size`, `--quick`, ...). With `ZVERBS_BENCH_OUT=<file>` the table is also written
//! there as tab-separated values (what `cargo xtask bench` reads to update the docs and plot).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::sync::Mutex;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput};
use zverbs_benches::cases::{CASES, Case, Group, Side, find, runner};

/// Samples criterion took, per (case, side): (iterations, time).
type Samples = BTreeMap<(&'static str, &'static str), Vec<(u64, Duration)>>;

static SAMPLES: Mutex<Samples> = Mutex::new(BTreeMap::new());

const SAMPLE_SIZE: usize = 30;

fn record(case: &'static str, side: Side, iters: u64, t: Duration) {
    let mut s = SAMPLES.lock().unwrap_or_else(|e| e.into_inner());
    s.entry((case, side.name())).or_default().push((iters, t));
}

fn group_name(g: Group) -> &'static str {
    match g {
        Group::Post => "post",
        Group::Poll => "poll",
        Group::RoundTrip => "round_trip",
    }
}

fn main() {
    let sample_size = sample_size_arg().unwrap_or(SAMPLE_SIZE);
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(SAMPLE_SIZE)
        .configure_from_args();
    for group in [Group::Post, Group::Poll, Group::RoundTrip] {
        let mut g = c.benchmark_group(group_name(group));
        for case in CASES.iter().filter(|c| c.group == group) {
            g.throughput(Throughput::Elements(u64::from(case.units)));
            for side in [Side::Ours, Side::C] {
                if side == Side::Ours && case.ours_from.is_some() {
                    continue;
                }
                let Some(mut r) = runner(case, side) else {
                    continue;
                };
                g.bench_function(BenchmarkId::new(case.name, side.name()), |b| {
                    b.iter_custom(|iters| {
                        let t = r.run(iters);
                        record(case.name, side, iters, t);
                        t
                    })
                });
            }
        }
        g.finish();
    }
    c.final_summary();
    report(sample_size);
}

/// `--sample-size N` if given (criterion reads it too).
fn sample_size_arg() -> Option<usize> {
    let args: Vec<String> = std::env::args().collect();
    let i = args.iter().position(|a| a == "--sample-size")?;
    args.get(i + 1)?.parse().ok()
}

/// Fastest and median time per unit of the measurement samples (criterion takes them after
/// its warm-up: the last `sample_size` recorded), in ns.
fn estimate_ns(samples: &[(u64, Duration)], units: u32, sample_size: usize) -> Option<Estimate> {
    let from = samples.len().saturating_sub(sample_size);
    let mut v: Vec<f64> = samples[from..]
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, t)| t.as_nanos() as f64 / *n as f64 / f64::from(units))
        .collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    let median = if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    };
    Some(Estimate { best: v[0], median })
}

/// ns per unit.
#[derive(Clone, Copy, Debug)]
struct Estimate {
    /// The fastest sample.
    best: f64,
    /// The median sample.
    median: f64,
}

/// One row of the report.
struct Row {
    case: &'static Case,
    ours: Estimate,
    c: Estimate,
}

fn report(sample_size: usize) {
    let samples = SAMPLES.lock().unwrap_or_else(|e| e.into_inner());
    let ns = |case: &Case, side: Side| {
        let name = match side {
            Side::Ours => case.ours_from.unwrap_or(case.name),
            Side::C => case.name,
        };
        let units = find(name).map_or(case.units, |c| c.units);
        estimate_ns(samples.get(&(name, side.name()))?, units, sample_size)
    };
    let rows: Vec<Row> = CASES
        .iter()
        .filter_map(|case| {
            Some(Row {
                case,
                ours: ns(case, Side::Ours)?,
                c: ns(case, Side::C)?,
            })
        })
        .collect();
    if rows.is_empty() {
        return;
    }
    println!(
        "\nzverbs vs C baseline: ns per unit (work request or CQE), fastest and median of \
         {sample_size} samples"
    );
    println!(
        "{:<15} {:>9} {:>9} {:>9}  {:>9} {:>9}  goals: ratio <= 1.00x; time",
        "case", "zverbs", "C", "zverbs/C", "zv median", "C median"
    );
    println!("{}", "-".repeat(92));
    let mut missed = 0;
    for r in &rows {
        let ratio = r.ours.best / r.c.best;
        let mut goals = vec![if ratio <= 1.0 { "met" } else { "MISSED" }.to_string()];
        if ratio > 1.0 {
            missed += 1;
        }
        if let Some(g) = r.case.goal_ns {
            let met = r.ours.best < g;
            if !met {
                missed += 1;
            }
            goals.push(format!("< {g} ns {}", if met { "met" } else { "MISSED" }));
        }
        println!(
            "{:<15} {:>9.2} {:>9.2} {:>8.2}x  {:>9.2} {:>9.2}  {}",
            r.case.name,
            r.ours.best,
            r.c.best,
            ratio,
            r.ours.median,
            r.c.median,
            goals.join("; ")
        );
    }
    println!("{}", "-".repeat(92));
    println!(
        "{} of {} cases at or below the C baseline; {missed} goal(s) missed",
        rows.iter().filter(|r| r.ours.best <= r.c.best).count(),
        rows.len()
    );
    if let Some(path) = std::env::var_os("ZVERBS_BENCH_OUT") {
        let mut out = String::from("case\tunits\tours_ns\tc_ns\tabout\tours_median\tc_median\n");
        for r in &rows {
            out.push_str(&format!(
                "{}\t{}\t{:.3}\t{:.3}\t{}\t{:.3}\t{:.3}\n",
                r.case.name,
                r.case.units,
                r.ours.best,
                r.c.best,
                r.case.about,
                r.ours.median,
                r.c.median
            ));
        }
        let written = std::fs::File::create(&path).and_then(|mut f| f.write_all(out.as_bytes()));
        if let Err(e) = written {
            eprintln!("cannot write {}: {e}", path.to_string_lossy());
        }
    }
}
