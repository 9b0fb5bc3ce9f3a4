//! Jobs launched through PMIx on the emulated ConnectX: Open MPI's `mpirun` starts N copies of
//! `zverbs-perf all2all`, which find each other through mpirun's PMIx server
//! (`zverbs::connect::pmix`), connect to every peer, write to each and check what arrived:
//! over RC (one QP per peer) and, with `--dc`, over the dynamically connected transport (one
//! DCI and one DCT per process).
//!
//! - the `connectx` stage runs `mpirun -n 4` with each transport, and a job of two whose
//!   second process never joins, to see the first one give up at its deadline ([`check`]);
//! - `cargo xtask bench --scale [--write-docs]` runs N = 2, 4, 8 and 16 with each ([`scale`])
//!   and prints the figures per process with a linear model of them projected to 1 000 and
//!   10 000 peers; `--write-docs` writes both into `docs/performance.md` (block `bench:scale`).
//!
//! Every process of the job has its own emulated device (and its threads) on this machine's
//! cores, and every process busy-polls: the processes run with `--yield` (an empty poll gives
//! the core away) and without `ZVERBS_EMU_RT` (real-time device threads of sixteen processes
//! would starve the programs).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use super::{Proc, TIMEOUT, emulated, which};
use crate::util::{self, Result, Table, bail};

/// Processes of the stage's run.
const CHECK_PROCS: u32 = 4;
/// Messages to each peer in the stage's run.
const CHECK_ITERS: &str = "200";
/// Processes of the scale runs.
const SCALE_PROCS: &[u32] = &[2, 4, 8, 16];
/// Messages to each peer in the scale runs: few, since sixteen processes share two cores.
const SCALE_ITERS: &str = "500";
/// Runs of each job size; the figures are the best of them ([`best_row`]): sixteen processes
/// on two cores shared with other work are noisy, and the noise only adds time.
const SCALE_ROUNDS: usize = 5;

/// What `zverbs-perf all2all` reports on its `scale:` line, averaged over the processes.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ScaleRow {
    /// The dynamically connected transport (`--dc`); RC otherwise.
    pub dc: bool,
    /// Processes in the job.
    pub processes: u32,
    /// QPs per process.
    pub qps: f64,
    /// Bytes registered per process.
    pub registered: f64,
    /// Resident memory the connection set-up added, per process.
    pub setup_rss: f64,
    /// Connection set-up, ms per process.
    pub setup_ms: f64,
    /// Of which creating the QPs.
    pub create_ms: f64,
    /// Messages per second of the job (all messages over the slowest process's time).
    pub rate: f64,
}

/// Reads the `scale:` line of rank 0's output.
pub fn parse_scale(out: &str) -> Option<ScaleRow> {
    let line = out.lines().find_map(|l| l.trim().strip_prefix("scale:"))?;
    let get = |k: &str| -> Option<f64> {
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(k)?.strip_prefix('='))?
            .parse()
            .ok()
    };
    Some(ScaleRow {
        dc: false,
        processes: get("processes")? as u32,
        qps: get("qps")?,
        registered: get("registered")?,
        setup_rss: get("setup_rss")?,
        setup_ms: get("setup_ms")?,
        create_ms: get("create_ms")?,
        rate: get("rate")?,
    })
}

/// Builds `zverbs-perf` (release, with PMIx) and finds `mpirun`.
fn tools() -> Result<(PathBuf, PathBuf)> {
    let Some(mpirun) = which("mpirun") else {
        bail!("mpirun is not installed (Debian package openmpi-bin)");
    };
    util::run(&mut util::cargo([
        "build",
        "--release",
        "-p",
        "zverbs-tools",
        "--bin",
        "zverbs-perf",
        "--example",
        ROUNDS_EXAMPLE,
    ]))?;
    Ok((mpirun, util::target_dir().join("release/zverbs-perf")))
}

/// The transport's name in tables.
fn transport(dc: bool) -> &'static str {
    if dc { "DC" } else { "RC" }
}

/// `mpirun` on the emulated device, `args` after its own flags; `tag` names the job's
/// emulator namespace.
fn mpirun_cmd(emu: &(PathBuf, PathBuf), mpirun: &Path, tag: &str) -> Command {
    let mut c = Command::new(mpirun);
    // Root is refused without --allow-run-as-root; more processes than cores without
    // --oversubscribe.
    c.args(["--allow-run-as-root", "--oversubscribe"]);
    emulated(&mut c, &emu.0, &emu.1);
    c.env(
        "ZVERBS_EMU_NS",
        format!("xtask-{}-pmix-{tag}", std::process::id()),
    )
    .env_remove("ZVERBS_EMU_RT")
    // Open MPI lists the optional transports it cannot load (PSM, OFI): noise here.
    .env("OMPI_MCA_mca_base_component_show_load_errors", "0");
    c
}

/// Where a job's output goes: `target/emu/runs/mpirun-<name>.txt`.
fn run_file(name: &str) -> Result<PathBuf> {
    let dir = util::target_dir().join("emu/runs");
    std::fs::create_dir_all(&dir)?;
    Ok(dir.join(format!("mpirun-{name}.txt")))
}

/// Runs `mpirun -n n zverbs-perf all2all -n iters --yield [--dc]` on the emulated device; rank
/// 0's output (the job's table).
fn all2all(
    emu: &(PathBuf, PathBuf),
    mpirun: &Path,
    perf: &Path,
    n: u32,
    iters: &str,
    dc: bool,
) -> Result<String> {
    let mut c = mpirun_cmd(emu, mpirun, &n.to_string());
    c.args(["-n", &n.to_string()])
        .arg(perf)
        .args(["all2all", "-n", iters, "--yield"]);
    if dc {
        c.arg("--dc");
    }
    println!("$ {}", util::show(&c));
    let p = Proc::spawn(
        c,
        run_file(&format!("all2all-{}{n}", if dc { "dc-" } else { "" }))?,
        format!(
            "mpirun -n {n} zverbs-perf all2all{}",
            if dc { " --dc" } else { "" }
        ),
    )?;
    p.finish(Instant::now() + TIMEOUT)
}

/// The deadline (`--timeout`, seconds) of the job whose second process never joins.
const MISSING_DEADLINE: &str = "2";
/// What the process that waited prints when its fence gives up (`PmixError::Timeout`).
const MISSING_REPORT: &str = "PMIx_Fence did not complete within the job's deadline of 2 s";

/// A job of two in which rank 1 is not `zverbs-perf` but `sleep`, which never joins the job
/// (no `PMIx_Init`, no fence): rank 0, with a deadline of [`MISSING_DEADLINE`] seconds, must
/// give up at its fence with the deadline error and exit with it, whereupon mpirun ends the
/// job (and the sleep). A fence without the deadline waits for ever: then mpirun ends the job
/// only when the sleep ends, 100 s later, without the report, and the check fails (as it does
/// after [`TIMEOUT`] if the job hangs).
fn missing_peer(emu: &(PathBuf, PathBuf), mpirun: &Path, perf: &Path) -> Result<()> {
    let out = run_file("missing-peer")?;
    let mut c = mpirun_cmd(emu, mpirun, "missing");
    c.args(["-n", "1"])
        .arg(perf)
        .args(["all2all", "--yield", "--timeout", MISSING_DEADLINE])
        .args([":", "-n", "1", "sleep", "100"]);
    println!("$ {}", util::show(&c));
    let name = "mpirun -n 1 zverbs-perf all2all : -n 1 sleep (never joins)";
    // The job fails (rank 0 exits with the error): its output is what is checked.
    let res = Proc::spawn(c, out.clone(), name.into())?.finish(Instant::now() + TIMEOUT);
    let text = std::fs::read_to_string(&out).unwrap_or_default();
    for l in text.lines().filter(|l| l.contains("zverbs-perf")) {
        println!("    {l}");
    }
    if res.is_ok() || !text.contains(MISSING_REPORT) {
        bail!("{name}: rank 0 did not report its fence's deadline ({MISSING_REPORT:?}):\n{text}");
    }
    Ok(())
}

/// The example whose processes exchange values under one key in several rounds
/// (`tools/examples/pmix_rounds.rs`).
const ROUNDS_EXAMPLE: &str = "pmix_rounds";
/// Its rounds.
const ROUNDS: &str = "8";

/// `mpirun -n 4 pmix_rounds 8`: every process checks every peer's value of each round of an
/// exchange under one key (a round that read another round's value, or a key PMIx did not
/// carry again, fails it), and that a second `put` of a key is refused.
fn rounds(emu: &(PathBuf, PathBuf), mpirun: &Path) -> Result<()> {
    let exe = util::target_dir()
        .join("release/examples")
        .join(ROUNDS_EXAMPLE);
    let n = CHECK_PROCS.to_string();
    let mut c = mpirun_cmd(emu, mpirun, "rounds");
    c.args(["-n", &n]).arg(&exe).arg(ROUNDS);
    println!("$ {}", util::show(&c));
    let name = format!("mpirun -n {n} {ROUNDS_EXAMPLE} {ROUNDS}");
    let out =
        Proc::spawn(c, run_file("rounds")?, name.clone())?.finish(Instant::now() + TIMEOUT)?;
    let want = format!("{ROUNDS} rounds of {n} values checked");
    let ok = out.lines().filter(|l| l.ends_with(&want)).count();
    for l in out.lines() {
        println!("    {l}");
    }
    if ok != CHECK_PROCS as usize {
        bail!("{name}: {ok} of {n} processes checked every round:\n{out}");
    }
    Ok(())
}

/// The QPs a process of a job of `n` has: one per peer over RC, a DCI and a DCT over DC.
pub fn qps_per_process(n: u32, dc: bool) -> u32 {
    if dc { 2 } else { n - 1 }
}

/// Checks one run's output: every process reported, had the QPs its transport needs and
/// received every peer's bytes.
fn checked(out: &str, n: u32, dc: bool) -> Result<ScaleRow> {
    let Some(mut row) = parse_scale(out) else {
        bail!("mpirun -n {n} zverbs-perf all2all printed no `scale:` line:\n{out}");
    };
    row.dc = dc;
    let qps = qps_per_process(n, dc);
    if row.processes != n || row.qps != f64::from(qps) {
        bail!(
            "mpirun -n {n} ({}): {row:?} (expected {n} processes of {qps} QPs):\n{out}",
            transport(dc)
        );
    }
    if !out.contains("check: every process received every peer's bytes") {
        bail!("mpirun -n {n}: the data check failed:\n{out}");
    }
    Ok(row)
}

/// The `connectx` stage's run: `mpirun -n 4`, every pair connected through PMIx, the data
/// checked.
pub(super) fn check(emu: &(PathBuf, PathBuf), table: &mut Table) -> Result<()> {
    let (mpirun, perf) = tools()?;
    for dc in [false, true] {
        let out = all2all(emu, &mpirun, &perf, CHECK_PROCS, CHECK_ITERS, dc)?;
        for l in out.lines() {
            println!("    {l}");
        }
        let row = checked(&out, CHECK_PROCS, dc)?;
        table.row(vec![
            format!(
                "mpirun -n {CHECK_PROCS} zverbs-perf all2all{}",
                if dc { " --dc" } else { "" }
            ),
            if dc {
                "PMIx exchange, one DCI and one DCT per process".into()
            } else {
                "PMIx exchange, one RC QP per peer".into()
            },
            format!(
                "ok: data checked, set-up {:.1} ms, {:.0} msg/s",
                row.setup_ms, row.rate
            ),
        ]);
    }
    rounds(emu, &mpirun)?;
    table.row(vec![
        format!("mpirun -n {CHECK_PROCS} {ROUNDS_EXAMPLE} {ROUNDS}"),
        "PMIx exchanges under one key, round after round".into(),
        "ok: every value of every round checked".into(),
    ]);
    missing_peer(emu, &mpirun, &perf)?;
    table.row(vec![
        "mpirun -n 1 zverbs-perf all2all --timeout 2 : -n 1 sleep".into(),
        "PMIx fence with a process that never joins".into(),
        "ok: deadline error, no hang".into(),
    ]);
    Ok(())
}

/// The figures of `runs` (of one job size): the least set-up times and the highest message
/// rate (a process that another preempts only loses time), and the median memory.
pub fn best_row(runs: &[ScaleRow]) -> ScaleRow {
    let sorted = |f: fn(&ScaleRow) -> f64| {
        let mut v: Vec<f64> = runs.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        v
    };
    let med = |f| sorted(f).get(runs.len() / 2).copied().unwrap_or_default();
    let min = |f| sorted(f).first().copied().unwrap_or_default();
    let max = |f| sorted(f).last().copied().unwrap_or_default();
    ScaleRow {
        dc: runs.first().is_some_and(|r| r.dc),
        processes: runs.first().map_or(0, |r| r.processes),
        qps: med(|r| r.qps),
        registered: med(|r| r.registered),
        setup_rss: med(|r| r.setup_rss),
        setup_ms: min(|r| r.setup_ms),
        create_ms: min(|r| r.create_ms),
        rate: max(|r| r.rate),
    }
}

/// Least squares `y = a + b·x`: `(a, b)`.
pub fn fit(points: &[(f64, f64)]) -> (f64, f64) {
    let n = points.len() as f64;
    if points.len() < 2 {
        return (points.first().map_or(0.0, |p| p.1), 0.0);
    }
    let (sx, sy) = points
        .iter()
        .fold((0.0, 0.0), |(sx, sy), (x, y)| (sx + x, sy + y));
    let (mx, my) = (sx / n, sy / n);
    let sxx: f64 = points.iter().map(|(x, _)| (x - mx) * (x - mx)).sum();
    let sxy: f64 = points.iter().map(|(x, y)| (x - mx) * (y - my)).sum();
    let b = if sxx == 0.0 { 0.0 } else { sxy / sxx };
    (my - b * mx, b)
}

/// Bytes of the record each process publishes in a job of `n` (`zverbs::connect::pmix`'s
/// `MeshRecord`, 48 + 8·n, over RC; its `DcRecord`, 60 whatever n, over DC).
pub fn record_bytes(n: f64, dc: bool) -> f64 {
    if dc { 60.0 } else { 48.0 + 8.0 * n }
}

/// The set-up time a process would take with a core of its own: with more processes than
/// `cores`, every process's set-up is stretched by the others sharing the cores, so its wall
/// time is scaled by `min(N, cores) / N`.
pub fn own_core_ms(r: &ScaleRow, cores: usize) -> f64 {
    let n = f64::from(r.processes.max(1));
    r.setup_ms * n.min(cores.max(1) as f64) / n
}

/// The markdown of the scale figures (RC and DC rows) and the model of each transport,
/// measured on `cores` cores.
pub fn scale_markdown(rows: &[ScaleRow], cores: usize) -> String {
    let mut s = String::from(
        "| transport | processes N | QPs per process | registered per process | set-up RSS per \
         process | set-up per process (wall) | of which QP creation | set-up per process, own \
         core | all-to-all messages/s (job) |\n\
         |:---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        s.push_str(&format!(
            "| {} | {} | {:.0} | {:.0} KiB | {:.0} KiB | {:.2} ms | {:.2} ms | {:.2} ms | {:.0} |\n",
            transport(r.dc),
            r.processes,
            r.qps,
            r.registered / 1024.0,
            r.setup_rss / 1024.0,
            r.setup_ms,
            r.create_ms,
            own_core_ms(r, cores),
            r.rate
        ));
    }
    let mut models = String::new();
    let mut projected = String::from(
        "| transport | peers P | QPs per process | set-up memory per process | set-up time per \
         process | PMIx records gathered per process |\n|:---|---:|---:|---:|---:|---:|\n",
    );
    for dc in [false, true] {
        let rows: Vec<&ScaleRow> = rows.iter().filter(|r| r.dc == dc).collect();
        if rows.is_empty() {
            continue;
        }
        let peers = |r: &ScaleRow| f64::from(r.processes.saturating_sub(1));
        let (mem_a, mem_b) = fit(&rows
            .iter()
            .map(|r| (peers(r), r.setup_rss))
            .collect::<Vec<_>>());
        let (t_a, t_b) = fit(&rows
            .iter()
            .map(|r| (peers(r), own_core_ms(r, cores)))
            .collect::<Vec<_>>());
        models.push_str(&format!(
            "- {}: set-up memory {:.0} KiB + {:.1} KiB·P; set-up time {:.2} ms + {:.3} ms·P; \
             PMIx data gathered by each process {}.\n",
            transport(dc),
            mem_a / 1024.0,
            mem_b / 1024.0,
            t_a,
            t_b,
            if dc {
                "N·60 bytes (one record of constant size per process)"
            } else {
                "N·(48 + 8·N) bytes (one record per process, naming a QP for every rank)"
            }
        ));
        for p in [1_000.0, 10_000.0] {
            let n = p + 1.0;
            // A line that does not rise says the runs were too noisy to tell a cost per peer.
            let time = if t_b > 0.0 {
                format!("{:.2} s", (t_a + t_b * p) / 1e3)
            } else {
                "— (no growth measured)".to_string()
            };
            let qps = if dc { 2.0 } else { p };
            let gathered = n * record_bytes(n, dc);
            let gathered = if gathered < 1024.0 * 1024.0 {
                format!("{:.0} KiB", gathered / 1024.0)
            } else {
                format!("{:.0} MiB", gathered / (1024.0 * 1024.0))
            };
            projected.push_str(&format!(
                "| {} | {p:.0} | {qps:.0} | {:.0} MiB | {time} | {gathered} |\n",
                transport(dc),
                (mem_a + mem_b * p).max(0.0) / (1024.0 * 1024.0),
            ));
        }
    }
    s.push_str(&format!(
        "\nModel (least squares over each transport's rows, per process, P = N − 1 peers, each \
         process on a core of its own; a model, not a measurement):\n\n{models}\n{projected}"
    ));
    s
}

/// `cargo xtask bench --scale`: N = 2, 4, 8, 16 on the emulated ConnectX.
pub fn scale(write_docs: bool, out_dir: &Path) -> Result {
    let emu = super::build()?;
    let (mpirun, perf) = tools()?;
    let mut rows = Vec::new();
    let mut table = Table::new(&[
        "transport",
        "N",
        ">QPs/proc",
        ">registered",
        ">set-up RSS",
        ">set-up ms",
        ">create ms",
        ">msg/s",
    ]);
    for (dc, &n) in [false, true]
        .into_iter()
        .flat_map(|dc| SCALE_PROCS.iter().map(move |n| (dc, n)))
    {
        let mut runs = Vec::with_capacity(SCALE_ROUNDS);
        for _ in 0..SCALE_ROUNDS {
            let out = all2all(&emu, &mpirun, &perf, n, SCALE_ITERS, dc)?;
            runs.push(checked(&out, n, dc)?);
        }
        let r = best_row(&runs);
        table.row(vec![
            transport(dc).into(),
            n.to_string(),
            format!("{:.0}", r.qps),
            format!("{:.0}", r.registered),
            format!("{:.0}", r.setup_rss),
            format!("{:.2}", r.setup_ms),
            format!("{:.2}", r.create_ms),
            format!("{:.0}", r.rate),
        ]);
        rows.push(r);
    }
    table.print(false);
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let md = scale_markdown(&rows, cores);
    println!("\n{md}");
    std::fs::write(out_dir.join("scale.md"), &md)?;
    if write_docs {
        let body = format!(
            "{}\n{SCALE_ITERS} RDMA WRITEs of 64 bytes to each peer; best of {SCALE_ROUNDS} \
             runs of each job (the least set-up time, the highest rate, the median memory); \
             `cargo xtask bench --scale`.\n\n{md}",
            crate::report::machine()
        );
        crate::report::replace_block(Path::new(crate::report::DOC), "scale", &body)?;
        println!("wrote {}", crate::report::DOC);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scale_line_is_read() {
        let out = "all2all: ...\n  rank ...\n scale: processes=4 qps=3.0 registered=4096 \
                   setup_rss=231424 setup_ms=2.200 create_ms=0.140 rate=80914 rate_sum=121316\n \
                   check: every process received every peer's bytes\n";
        let r = parse_scale(out).unwrap();
        assert_eq!(r.processes, 4);
        assert_eq!(r.qps, 3.0);
        assert_eq!(r.setup_rss, 231424.0);
        assert_eq!(r.create_ms, 0.14);
        assert_eq!(r.rate, 80914.0);
        assert!(checked(out, 4, false).is_ok());
        assert!(checked(out, 8, false).is_err());
        assert!(checked(&out.replace("check: every", "check: MISMATCH"), 4, false).is_err());
        // Over DC a process has a DCI and a DCT, whatever N.
        assert!(checked(out, 4, true).is_err());
        let dc = checked(&out.replace("qps=3.0", "qps=2.0"), 4, true).unwrap();
        assert!(dc.dc);
        assert!(checked(&out.replace("qps=3.0", "qps=2.0"), 4, false).is_err());
        assert_eq!(parse_scale("scale: processes=4"), None);
    }

    #[test]
    fn the_model_is_a_line_through_the_points() {
        let (a, b) = fit(&[(1.0, 3.0), (3.0, 7.0), (7.0, 15.0)]);
        assert!((a - 1.0).abs() < 1e-9 && (b - 2.0).abs() < 1e-9, "{a} {b}");
        assert_eq!(fit(&[(1.0, 5.0)]), (5.0, 0.0));
        assert_eq!(record_bytes(16.0, false), 176.0);
        assert_eq!(record_bytes(10_001.0, true), 60.0);
    }

    #[test]
    fn the_best_of_the_runs_is_kept() {
        let r = |setup_ms, rate, setup_rss| ScaleRow {
            processes: 4,
            setup_ms,
            rate,
            setup_rss,
            ..ScaleRow::default()
        };
        let m = best_row(&[r(3.0, 10.0, 7.0), r(1.0, 20.0, 9.0), r(2.0, 30.0, 8.0)]);
        assert_eq!(
            (m.processes, m.setup_ms, m.rate, m.setup_rss),
            (4, 1.0, 30.0, 8.0)
        );
    }

    #[test]
    fn the_markdown_has_both_transports_and_a_model_of_each() {
        let row = |dc, processes: u32, setup_rss, setup_ms| ScaleRow {
            dc,
            processes,
            qps: f64::from(qps_per_process(processes, dc)),
            setup_rss,
            setup_ms,
            ..ScaleRow::default()
        };
        let rows = [
            row(false, 2, 100.0 * 1024.0, 1.0),
            row(false, 4, 200.0 * 1024.0, 2.0),
            row(true, 2, 100.0 * 1024.0, 1.0),
            row(true, 4, 110.0 * 1024.0, 1.5),
        ];
        let md = scale_markdown(&rows, 64);
        assert!(md.contains("| RC | 4 | 3 |"), "{md}");
        assert!(md.contains("| DC | 4 | 2 |"), "{md}");
        // RC: 100 KiB per peer over 2 peers; DC: 5 KiB per peer.
        assert!(
            md.contains("- RC: set-up memory 50 KiB + 50.0 KiB·P"),
            "{md}"
        );
        assert!(
            md.contains("- DC: set-up memory 95 KiB + 5.0 KiB·P"),
            "{md}"
        );
        assert!(md.contains("| RC | 10000 | 10000 |"), "{md}");
        assert!(md.contains("| DC | 10000 | 2 |"), "{md}");
        // 10 001 records of 60 bytes.
        assert!(
            md.contains("| DC | 10000 | 2 | 49 MiB | 2.50 s | 586 KiB |"),
            "{md}"
        );
        assert!(md.contains("a model, not a measurement"), "{md}");
    }

    #[test]
    fn oversubscribed_set_up_is_scaled_to_a_core_each() {
        let r = |processes, setup_ms| ScaleRow {
            processes,
            setup_ms,
            ..ScaleRow::default()
        };
        assert_eq!(own_core_ms(&r(2, 0.4), 2), 0.4);
        assert_eq!(own_core_ms(&r(16, 20.0), 2), 2.5);
        assert_eq!(own_core_ms(&r(16, 20.0), 32), 20.0);
    }
}
