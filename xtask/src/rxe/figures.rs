//! `cargo xtask bench --rxe`: the project's latency tool against perftest's, side by side on
//! the same rxe devices in one boot of the VM (or on this machine's devices with `--host`),
//! reported as ratios.
//!
//! For each link (both ends on `rxe0`; across `rxe1`↔`rxe2`), each test (`write_lat`,
//! `send_lat`, and `send_lat --ud` against `ib_send_lat -c UD` for sizes up to the MTU) and
//! each message size, the rounds alternate `zverbs-perf` (release build) and
//! perftest's `ib_write_lat` / `ib_send_lat`, each a server and a client on the same devices,
//! ports and settings: the same iterations, no inline data, the port's MTU. The figures are the
//! client's `t_typical` (the median of half round trips) and its 99th percentile, the median
//! of each over the rounds; the ratio is ours / perftest. A benchmark, not a test: nothing
//! asserts a duration (under emulation the times are those of the emulated CPU).

use std::fmt::Write as _;
use std::fs;
use std::path::Path;
use std::time::Duration;

use super::checks::{self, Check, Kind, Ready};
use crate::cli::{self, Arg, Parser, usage};
use crate::report::median;
use crate::util::{self, Result, Table, bail};
use crate::vm::topology::Topology;

/// What to measure.
#[derive(Clone, Debug)]
pub struct Options {
    /// On this machine's devices instead of the VM.
    pub host: bool,
    /// Message sizes.
    pub sizes: Vec<usize>,
    /// Iterations of each run.
    pub iters: u32,
    /// Runs of each tool per case (alternating).
    pub rounds: u32,
    /// Inline bytes, for both tools.
    pub inline: u32,
    /// Write the table into docs/performance.md.
    pub write_docs: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            host: false,
            sizes: vec![2, 4096],
            iters: 2000,
            rounds: 5,
            inline: 0,
            write_docs: false,
        }
    }
}

/// A test compared (see [`TESTS`]).
type TestCase = (
    &'static str,
    &'static [&'static str],
    &'static str,
    &'static [&'static str],
    usize,
);

/// The tests compared: the name in the table, `zverbs-perf`'s arguments, perftest's program and
/// its extra arguments, and the largest message (a datagram is at most the path MTU, 1024 on
/// rxe's Ethernet ports).
const TESTS: [TestCase; 3] = [
    ("write_lat", &["write_lat"], "ib_write_lat", &[], usize::MAX),
    ("send_lat", &["send_lat"], "ib_send_lat", &[], usize::MAX),
    (
        "send_lat UD",
        &["send_lat", "--ud"],
        "ib_send_lat",
        &["-c", "UD"],
        1024,
    ),
];

/// One run's figures, microseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Latency {
    /// `t_typical`: the median.
    pub typical: f64,
    /// The 99th percentile.
    pub p99: f64,
}

/// The columns of a latency table's header: perftest's (`#bytes #iterations t_min[usec] ...
/// 99% percentile[usec] 99.9% percentile[usec]`) or `zverbs-perf`'s (`... t_p99[us] ...`).
/// A column ends at a word ending in `]` or starting with `#`; names may contain spaces.
pub fn columns(header: &str) -> Vec<String> {
    let mut cols = Vec::new();
    let mut cur = String::new();
    for w in header.split_whitespace() {
        if w.starts_with('#') {
            if !cur.is_empty() {
                cols.push(std::mem::take(&mut cur));
            }
            cols.push(w.to_string());
            continue;
        }
        if !cur.is_empty() {
            cur.push(' ');
        }
        cur.push_str(w);
        if w.ends_with(']') {
            cols.push(std::mem::take(&mut cur));
        }
    }
    if !cur.is_empty() {
        cols.push(cur);
    }
    cols
}

/// The typical latency and the 99th percentile in a latency tool's output (the first table
/// with a `t_typical` column, and the first numeric row under it), in microseconds.
pub fn parse_latency(out: &str) -> Option<Latency> {
    let lines: Vec<&str> = out.lines().collect();
    let at = lines.iter().position(|l| l.contains("t_typical"))?;
    let cols = columns(lines[at]);
    let row: Vec<f64> = lines[at + 1..]
        .iter()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|w| w.first().is_some_and(|x| x.parse::<f64>().is_ok()))?
        .iter()
        .map(|x| x.parse().unwrap_or(f64::NAN))
        .collect();
    if row.len() < cols.len() {
        return None;
    }
    let unit = |c: &str| {
        if c.ends_with("[us]") || c.ends_with("[usec]") {
            1.0
        } else if c.ends_with("[ns]") {
            1e-3
        } else {
            f64::NAN
        }
    };
    let scaled = |pred: &dyn Fn(&str) -> bool| {
        let i = cols.iter().position(|c| pred(c))?;
        Some(row[i] * unit(&cols[i]))
    };
    let typical = scaled(&|c: &str| c.starts_with("t_typical"))?;
    let p99 = scaled(&|c: &str| {
        let c = c.to_ascii_lowercase();
        c.starts_with("99%") || c.starts_with("99 %") || c.starts_with("t_p99[")
    })?;
    (typical.is_finite() && p99.is_finite()).then_some(Latency { typical, p99 })
}

/// The lines of one side of a check's log (`client| ...`), without the prefix.
pub fn side(log: &str, who: &str) -> String {
    let prefix = format!("{who}| ");
    log.lines()
        .filter_map(|l| {
            l.strip_prefix(&prefix)
                .or_else(|| (l == format!("{who}|")).then_some(""))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// One case of the table.
#[derive(Clone, Debug)]
struct Case {
    link: String,
    test: &'static str,
    size: usize,
    ours: Vec<usize>,
    theirs: Vec<usize>,
}

/// `cargo xtask bench --rxe`.
pub fn run(o: &Options, out: &Path) -> Result {
    if !o.host {
        crate::packages::ensure_vm()?;
    }
    let topo = if o.host {
        Topology::from_env()?
    } else {
        Topology::vm()
    };
    util::run(&mut util::cargo([
        "build",
        "--release",
        "-p",
        "zverbs-tools",
        "--bin",
        "zverbs-perf",
    ]))?;
    let perf = util::target_dir().join("release/zverbs-perf");
    let perf = perf.to_string_lossy().into_owned();

    let gid = topo.gid_index.to_string();
    let mut links: Vec<(String, String, String)> = vec![(
        topo.device.clone(),
        topo.device.clone(),
        topo.device.clone(),
    )];
    if let Some((a, b)) = &topo.pair {
        links.push((format!("{a}<->{b}"), a.clone(), b.clone()));
    }
    let w = |v: &[&str]| -> Vec<String> { v.iter().map(|s| s.to_string()).collect() };
    let (iters, inline) = (o.iters.to_string(), o.inline.to_string());
    let mut checks = Vec::new();
    let mut cases = Vec::new();
    let mut port = 19000u16;
    for (label, a, b) in &links {
        for (test, ours, theirs, their_args, max) in TESTS {
            for &size in o.sizes.iter().filter(|&&s| s <= max) {
                let mut case = Case {
                    link: label.clone(),
                    test,
                    size,
                    ours: Vec::new(),
                    theirs: Vec::new(),
                };
                let sz = size.to_string();
                for round in 0..o.rounds {
                    let mut pair = |mine: bool| {
                        port += 1;
                        let p = port.to_string();
                        let (server, client) = if mine {
                            let common =
                                ["-g", &gid, "-s", &sz, "-n", &iters, "-I", &inline, "-p", &p];
                            let mut s = w(&[&perf]);
                            s.extend(w(ours));
                            s.extend(w(&["-d", a]));
                            s.extend(w(&common));
                            let mut c = w(&[&perf]);
                            c.extend(w(ours));
                            c.extend(w(&["127.0.0.1", "-d", b]));
                            c.extend(w(&common));
                            (s, c)
                        } else {
                            let common =
                                ["-x", &gid, "-s", &sz, "-n", &iters, "-I", &inline, "-p", &p];
                            let mut s = w(&[theirs, "-d", a]);
                            s.extend(w(their_args));
                            s.extend(w(&common));
                            let mut c = w(&[theirs, "-d", b]);
                            c.extend(w(their_args));
                            c.extend(w(&common));
                            c.push("127.0.0.1".into());
                            (s, c)
                        };
                        let name = format!(
                            "{} {label} {size} B round {}",
                            if mine { test } else { theirs },
                            round + 1
                        );
                        let index = checks.len();
                        checks.push(Check {
                            name,
                            timeout: Duration::from_secs(120),
                            kind: Kind::Pair {
                                server,
                                client,
                                ready: Ready::Tcp(port),
                                expect: vec!["t_typical".into()],
                            },
                        });
                        index
                    };
                    // Alternate which goes first, so a slow stretch hits both.
                    if round % 2 == 0 {
                        case.ours.push(pair(true));
                        case.theirs.push(pair(false));
                    } else {
                        case.theirs.push(pair(false));
                        case.ours.push(pair(true));
                    }
                }
                cases.push(case);
            }
        }
    }

    let logs = out.join("rxe-logs");
    if logs.exists() {
        fs::remove_dir_all(&logs)?;
    }
    println!(
        "\n{} runs: zverbs-perf and perftest, {} rounds each of {} cases, {} iterations",
        checks.len(),
        o.rounds,
        cases.len(),
        o.iters
    );
    let report = if o.host {
        super::on_host_checks(&checks, &topo, Some(&logs))?
    } else {
        super::run_in_vm(&checks, Some(&logs))?
    };
    let failed = report.failed();
    if !failed.is_empty() || report.results.len() < checks.len() {
        bail!(
            "{} of {} runs failed or did not run: {} (logs in {})",
            checks.len() - report.results.len() + failed.len(),
            checks.len(),
            failed.join(", "),
            logs.display()
        );
    }
    let figures = |index: usize| -> Result<Latency> {
        let path = logs.join(checks::log_name(index, &checks[index].name));
        let log = fs::read_to_string(&path)?;
        match parse_latency(&side(&log, "client")) {
            Some(l) => Ok(l),
            None => bail!("no latency table in {}", path.display()),
        }
    };

    let mut table = Table::new(&[
        "link",
        "test",
        ">bytes",
        ">zverbs typ",
        ">perftest typ",
        ">ratio",
        ">rounds",
        ">zverbs p99",
        ">perftest p99",
        ">ratio",
    ]);
    let mut md = String::from(
        "| link | test | bytes | zverbs t_typical µs | perftest t_typical µs | ratio | rounds' \
         ratios | zverbs p99 µs | perftest p99 µs | ratio |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let mut tsv = String::from(
        "link\ttest\tbytes\tours_typical_us\tperftest_typical_us\tours_p99_us\tperftest_p99_us\n",
    );
    for c in &cases {
        let ours: Vec<Latency> = c.ours.iter().map(|&i| figures(i)).collect::<Result<_>>()?;
        let theirs: Vec<Latency> = c
            .theirs
            .iter()
            .map(|&i| figures(i))
            .collect::<Result<_>>()?;
        let typ = |v: &[Latency]| median(&mut v.iter().map(|l| l.typical).collect::<Vec<_>>());
        let p99 = |v: &[Latency]| median(&mut v.iter().map(|l| l.p99).collect::<Vec<_>>());
        let (ot, tt, op, tp) = (typ(&ours), typ(&theirs), p99(&ours), p99(&theirs));
        // Round k of ours against round k of perftest's, run next to each other.
        let each: Vec<f64> = ours
            .iter()
            .zip(&theirs)
            .map(|(a, b)| a.typical / b.typical)
            .collect();
        let lo = each.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = each.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let spread = format!("{lo:.2}–{hi:.2}");
        table.row(vec![
            c.link.clone(),
            c.test.into(),
            c.size.to_string(),
            format!("{ot:.2}"),
            format!("{tt:.2}"),
            format!("{:.2}x", ot / tt),
            spread.clone(),
            format!("{op:.2}"),
            format!("{tp:.2}"),
            format!("{:.2}x", op / tp),
        ]);
        let _ = writeln!(
            md,
            "| {} | `{}` | {} | {ot:.2} | {tt:.2} | {:.2}× | {spread} | {op:.2} | {tp:.2} | {:.2}× |",
            c.link,
            c.test,
            c.size,
            ot / tt,
            op / tp
        );
        let _ = writeln!(
            tsv,
            "{}\t{}\t{}\t{ot:.3}\t{tt:.3}\t{op:.3}\t{tp:.3}",
            c.link, c.test, c.size
        );
    }
    let where_ = if o.host {
        "this machine's devices".to_string()
    } else {
        format!(
            "rxe in the VM (boot {}, runs {})",
            report.boot.map_or_else(|| "?".into(), util::duration),
            util::duration(report.results.iter().map(|r| r.took).sum())
        )
    };
    println!(
        "\nlatency, zverbs-perf against perftest on {where_}: median over {} rounds of each \
         tool's t_typical (median of {} half round trips) and 99th percentile, in µs; ratio \
         ours / perftest (rounds: the lowest and highest ratio of one round's t_typical to the \
         other tool's in the same round):",
        o.rounds, o.iters
    );
    table.print(false);
    println!("each run's output: {}/NN-<run>.log", logs.display());
    fs::write(out.join("rxe.tsv"), &tsv)?;
    if o.write_docs {
        let _ = write!(
            md,
            "\nMedian over {} alternating rounds of each tool's `t_typical` and 99th percentile, \
             {} iterations a run, no inline data, on {where_}; \"rounds' ratios\": the lowest \
             and highest ratio of `t_typical` between the two tools' runs of the same round. \
             Command: `cargo xtask bench --rxe`. {}",
            o.rounds,
            o.iters,
            crate::report::machine()
        );
        crate::report::replace_block(&util::root().join(crate::report::DOC), "rxe", &md)?;
        println!("wrote the table in {}", crate::report::DOC);
    }
    Ok(())
}

/// Reads `--rounds N --iters N --sizes A,B --inline N` into `o`.
pub fn parse_args(o: &mut Options, args: &[String]) -> Result {
    let mut p = Parser::from_args(args);
    while let Some(arg) = p.next()? {
        match arg {
            Arg::Long("rounds") => o.rounds = cli::value::<u32>(&mut p, "--rounds")?.max(1),
            Arg::Long("iters") => o.iters = cli::value::<u32>(&mut p, "--iters")?.max(1),
            Arg::Long("inline") => o.inline = cli::value(&mut p, "--inline")?,
            Arg::Long("sizes") => {
                let v = cli::string(p.value()?)?;
                o.sizes = v
                    .split(',')
                    .map(|x| x.parse::<usize>().ok().filter(|&n| n > 0))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| usage!("--sizes {v}: sizes in bytes, comma-separated"))?;
            }
            arg => {
                return Err(usage!(
                    "{}: `bench --rxe -- ...` takes --rounds, --iters, --sizes, --inline",
                    arg.unexpected()
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PERFTEST: &str = "\
---------------------------------------------------------------------------------------
 #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] 
 2       200          23.53          406.50       30.77    	       39.09       	36.71  		314.22  		406.50 
---------------------------------------------------------------------------------------
";

    #[test]
    fn perftest_columns_with_spaces_are_read() {
        let header = PERFTEST.lines().nth(1).unwrap();
        assert_eq!(
            columns(header),
            [
                "#bytes",
                "#iterations",
                "t_min[usec]",
                "t_max[usec]",
                "t_typical[usec]",
                "t_avg[usec]",
                "t_stdev[usec]",
                "99% percentile[usec]",
                "99.9% percentile[usec]"
            ]
        );
        assert_eq!(
            parse_latency(PERFTEST),
            Some(Latency {
                typical: 30.77,
                p99: 314.22
            })
        );
    }

    #[test]
    fn zverbs_perf_table_is_read() {
        let ours = " #bytes   #iterations   t_min[us]    t_typical[us]   t_p99[us]  t_p99.9[us]   t_max[us]   t_avg[us]  t_stdev[us]\n \
                    2        2000              21.05            27.40       60.11        90.00      100.00       30.00         5.00\n";
        assert_eq!(
            parse_latency(ours),
            Some(Latency {
                typical: 27.40,
                p99: 60.11
            })
        );
    }

    #[test]
    fn missing_or_broken_tables_are_none() {
        assert_eq!(parse_latency("no table here"), None);
        let cut = " #bytes #iterations t_typical[usec] 99% percentile[usec]\n 2 200 30.1\n";
        assert_eq!(parse_latency(cut), None);
        let log = "server| a\nclient| x\nclient|\nclient| y\n";
        assert_eq!(side(log, "client"), "x\n\ny");
    }
}
