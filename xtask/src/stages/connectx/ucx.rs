//! UCX on the emulated ConnectX: Debian's unmodified `ucx_info` and `ucx_perftest` (UCX 1.13,
//! package `ucx-utils`).
//!
//! - [`check`] (the connectx stage): `ucx_info -d` must list the memory domain `mlx5_0` with
//!   `rc_mlx5`, `rc_verbs`, `ud_mlx5`, `ud_verbs` and `dc_mlx5` on `mlx5_0:1`, and short
//!   `ucx_perftest` `put_lat` runs over `rc_mlx5` and over `dc_mlx5` between two processes must
//!   complete;
//! - [`bench()`] (`cargo xtask bench --ucx [-- --rounds N --iters N]`): `zverbs-perf` against
//!   `ucx_perftest` over `rc_mlx5` on the same emulated device, in alternating rounds
//!   ([`super::rounds`]), as the stage sets `zverbs-perf` against perftest.

use std::path::PathBuf;

use super::{ROUNDS, measured, pair, rounds, solo, typical, which};
use crate::util::{self, Result, Table, anyhow, bail};

/// `ucx_perftest`'s device and transport: the emulated port, UCX's mlx5 RC transport.
const UCT: [&str; 4] = ["-x", "rc_mlx5", "-d", "mlx5_0:1"];

/// The same over UCX's dynamically connected transport (DCIs and DCTs the emulator creates
/// for libmlx5's `mlx5dv_create_qp`).
const UCT_DC: [&str; 4] = ["-x", "dc_mlx5", "-d", "mlx5_0:1"];

/// Iterations of the connectx stage's `ucx_perftest` run.
const SMOKE_ITERS: &str = "300";

/// Iterations of the connectx stage's `ucx_perftest` run over `dc_mlx5`.
const SMOKE_ITERS_DC: &str = "100";

/// Where UCX's tools are.
fn tools() -> Result<(PathBuf, PathBuf)> {
    match (which("ucx_info"), which("ucx_perftest")) {
        (Some(i), Some(p)) => Ok((i, p)),
        _ => bail!("ucx_info and ucx_perftest are not installed (Debian package ucx-utils)"),
    }
}

/// The `mlx5_0` memory domain's part of `ucx_info -d`'s output (up to the next domain).
pub(crate) fn mlx5_domain(out: &str) -> Option<String> {
    let mut lines = out
        .lines()
        .skip_while(|l| !l.contains("Memory domain: mlx5_0"));
    let first = lines.next()?;
    let rest = lines.take_while(|l| !l.contains("Memory domain:"));
    Some(
        std::iter::once(first)
            .chain(rest)
            .collect::<Vec<_>>()
            .join("\n"),
    )
}

/// The transports `ucx_info -d` lists on the device `dev` within a memory domain's part.
pub(crate) fn transports_on(domain: &str, dev: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut transport = None;
    for l in domain.lines() {
        let l = l.trim_start_matches('#').trim();
        if let Some(t) = l.strip_prefix("Transport:") {
            transport = Some(t.trim().to_string());
        } else if let Some(d) = l.strip_prefix("Device:")
            && d.trim() == dev
            && let Some(t) = transport.take()
        {
            found.push(t);
        }
    }
    found
}

/// The fields of `ucx_perftest`'s `Final:` line: iterations, then the latency's percentile
/// (50% unless asked), average and overall (µs), the bandwidth's average and overall (MB/s)
/// and the message rate's average and overall (messages per second).
pub(crate) fn final_line(out: &str) -> Option<Vec<f64>> {
    let l = out
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with("Final:"))?;
    l.split_whitespace()
        .skip(1)
        .map(|f| f.parse().ok())
        .collect::<Option<Vec<f64>>>()
        .filter(|v| v.len() == 8)
}

/// `zverbs-perf`'s message rate (its `MsgRate[Mpps]` column), in messages per second.
fn zverbs_msg_rate(out: &str) -> Option<f64> {
    let header = out.lines().position(|l| l.contains("MsgRate[Mpps]"))?;
    let cols: Vec<&str> = out.lines().nth(header)?.split_whitespace().collect();
    // Counted from the end: a header ("BW average[MB/sec]") has more words than the values.
    let from_end = cols.len() - cols.iter().position(|c| c.starts_with("MsgRate"))?;
    let vals: Vec<&str> = out.lines().nth(header + 1)?.split_whitespace().collect();
    vals.get(vals.len().checked_sub(from_end)?)?
        .parse::<f64>()
        .ok()
        .map(|m| m * 1e6)
}

/// The connectx stage's UCX checks: `ucx_info -d` lists `mlx5_0` with `rc_mlx5` (and the
/// other transports UCX offers without DEVX, `dc_mlx5` among them), and `ucx_perftest`
/// `put_lat` over `rc_mlx5` and over `dc_mlx5` completes between two processes. Adds their rows to `table`; returns the runs made.
pub(super) fn check(
    emu: &(PathBuf, PathBuf),
    table: &mut Table,
    next_port: &mut impl FnMut() -> u16,
) -> Result<usize> {
    let (info, perftest) = tools()?;
    let out = solo(&info, &["-d"], &[], emu)?;
    let Some(domain) = mlx5_domain(&out) else {
        bail!("ucx_info -d lists no memory domain mlx5_0:\n{out}");
    };
    let on = transports_on(&domain, "mlx5_0:1");
    println!("--- ucx_info -d: memory domain mlx5_0, transports on mlx5_0:1: {on:?}");
    for want in ["rc_mlx5", "rc_verbs", "ud_mlx5", "ud_verbs", "dc_mlx5"] {
        if !on.iter().any(|t| t == want) {
            bail!("ucx_info -d lists no {want} on mlx5_0:1:\n{domain}");
        }
    }
    table.row(vec![
        "ucx_info -d".into(),
        format!("mlx5_0: {}", on.join(", ")),
        "ok".into(),
    ]);
    let args = [&["-t", "put_lat", "-n", SMOKE_ITERS][..], &UCT].concat();
    let out = pair(&perftest, &args, next_port(), &[], emu)?;
    println!("--- ucx_perftest put_lat over rc_mlx5, client output:");
    for l in out.lines().filter(|l| !l.trim().is_empty()) {
        println!("    {l}");
    }
    match final_line(&out) {
        Some(f) if f[0] == SMOKE_ITERS.parse::<f64>()? && f[1] > 0.0 => {}
        _ => bail!(
            "ucx_perftest put_lat over rc_mlx5 did not complete {SMOKE_ITERS} iterations:\n{out}"
        ),
    }
    table.row(vec![
        "ucx_perftest".into(),
        format!("put_lat over rc_mlx5, {SMOKE_ITERS} iterations"),
        "ok".into(),
    ]);
    let args = [&["-t", "put_lat", "-n", SMOKE_ITERS_DC][..], &UCT_DC].concat();
    let out = pair(&perftest, &args, next_port(), &[], emu)?;
    println!("--- ucx_perftest put_lat over dc_mlx5, client output:");
    for l in out.lines().filter(|l| !l.trim().is_empty()) {
        println!("    {l}");
    }
    match final_line(&out) {
        Some(f) if f[0] == SMOKE_ITERS_DC.parse::<f64>()? && f[1] > 0.0 => {}
        _ => bail!(
            "ucx_perftest put_lat over dc_mlx5 did not complete {SMOKE_ITERS_DC} iterations:\n{out}"
        ),
    }
    table.row(vec![
        "ucx_perftest".into(),
        format!("put_lat over dc_mlx5, {SMOKE_ITERS_DC} iterations"),
        "ok".into(),
    ]);
    Ok(3)
}

/// What a figure is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Figure {
    /// A median latency in µs (lower is better).
    Latency,
    /// Messages per second (higher is better).
    Rate,
}

/// `cargo xtask bench --ucx [-- --rounds N --iters N]`.
pub fn bench(args: &[String]) -> Result {
    let mut rounds_n = ROUNDS;
    let mut iters = 1000usize;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| -> Result<usize> {
            it.next()
                .and_then(|v| v.parse().ok())
                .filter(|&v| v > 0)
                .ok_or_else(|| anyhow!("{name} takes a positive number"))
        };
        match a.as_str() {
            "--rounds" => rounds_n = value("--rounds")?,
            "--iters" | "-n" => iters = value("--iters")?,
            other => bail!("{other}: `bench --ucx` takes --rounds N and --iters N"),
        }
    }
    let (_, perftest) = tools()?;
    let emu = super::build()?;
    util::run(&mut util::cargo([
        "build",
        "--release",
        "-p",
        "zverbs-tools",
        "--bin",
        "zverbs-perf",
    ]))?;
    let perf = util::target_dir().join("release/zverbs-perf");
    let mut port = 19300 + (std::process::id() % 500) as u16;
    let mut next_port = || {
        port += 1;
        port
    };
    let n = iters.to_string();
    // Same message size (8 bytes, ucx_perftest's default), same iterations, the same 100
    // warm-up iterations (zverbs-perf's default; UCX's is up to 10 000).
    let common_ucx = [&["-s", "8", "-n", &n, "-w", "100"][..], &UCT].concat();
    let common_ours = ["-s", "8", "-n", &n];
    // UCX's responder keeps its main thread busy through the one-sided tests (its worker
    // progressed by default; without, with `-o`, it still spins, at about 60% of a core), while
    // zverbs-perf's passive side sleeps between polls, as perftest's: on two shared cores the
    // spinning responder delays the requester. Both are shown: UCX as it runs, and with its
    // responder at `SCHED_IDLE` (`chrt -i 0`), which leaves the cores to the requester and the
    // device as a sleeping one does.
    let rows: [(&str, &str, &[&str], Figure, bool); 6] = [
        (
            "write_lat / put_lat",
            "write_lat",
            &["-t", "put_lat"],
            Figure::Latency,
            false,
        ),
        (
            "read_lat / get (bcopy)",
            "read_lat",
            &["-t", "get", "-D", "bcopy"],
            Figure::Latency,
            false,
        ),
        (
            "read_lat / get (bcopy), UCX responder SCHED_IDLE",
            "read_lat",
            &["-t", "get", "-D", "bcopy"],
            Figure::Latency,
            true,
        ),
        (
            "send_lat / am_lat",
            "send_lat",
            &["-t", "am_lat"],
            Figure::Latency,
            false,
        ),
        (
            "write_bw / put_bw (msg rate)",
            "write_bw",
            &["-t", "put_bw"],
            Figure::Rate,
            false,
        ),
        (
            "write_bw / put_bw (msg rate), UCX responder SCHED_IDLE",
            "write_bw",
            &["-t", "put_bw"],
            Figure::Rate,
            true,
        ),
    ];
    let chrt = which("chrt").ok_or_else(|| anyhow!("chrt is not installed (util-linux)"))?;
    let perftest_s = perftest.to_string_lossy().into_owned();
    let mut table = Table::new(&[
        "zverbs-perf / ucx_perftest",
        ">zverbs-perf",
        ">ucx_perftest rc_mlx5",
        ">zverbs/UCX",
        ">UCX/UCX",
        "better",
    ]);
    for (label, ours, theirs, figure, idle) in rows {
        let ours = [&[ours][..], &common_ours].concat();
        let theirs = [theirs, &common_ucx].concat();
        let idle_server = [&["-i", "0", &perftest_s][..], &theirs].concat();
        // ucx_perftest twice a round (contenders 1 and 2): the ratio of its two runs is the
        // resolution of the zverbs/UCX ratio.
        let f = rounds::alternating(rounds_n, 3, |i| {
            if i == 0 {
                let out = measured(&perf, &ours, next_port(), &emu)?;
                match figure {
                    Figure::Latency => typical(&out),
                    Figure::Rate => zverbs_msg_rate(&out),
                }
                .ok_or_else(|| anyhow!("no figure in zverbs-perf {ours:?}'s output:\n{out}"))
            } else {
                let out = if idle {
                    super::measured2(
                        (&chrt, &idle_server),
                        (&perftest, &theirs),
                        next_port(),
                        &emu,
                    )?
                } else {
                    measured(&perftest, &theirs, next_port(), &emu)?
                };
                final_line(&out)
                    .map(|v| match figure {
                        Figure::Latency => v[1],
                        Figure::Rate => v[7],
                    })
                    .ok_or_else(|| {
                        anyhow!("no Final: line in ucx_perftest {theirs:?}'s output:\n{out}")
                    })
            }
        })?;
        let s = rounds::ratios(&f[0], &f[1]);
        let aa = rounds::ratios(&f[2], &f[1]);
        let show = |v: f64| match figure {
            Figure::Latency => format!("{v:.2} us"),
            Figure::Rate => format!("{:.0} msg/s", v),
        };
        table.row(vec![
            label.into(),
            show(rounds::median(&f[0])),
            show(rounds::median(&f[1])),
            rounds::ratio_cell(&s),
            rounds::ratio_cell(&aa),
            match figure {
                Figure::Latency => "lower".into(),
                Figure::Rate => "higher".into(),
            },
        ]);
    }
    println!(
        "\nzverbs-perf (direct path) against ucx_perftest over rc_mlx5, same emulated device, \
         same run, 8-byte messages, {iters} iterations a run, {rounds_n} alternating rounds: each \
         figure the median over the rounds (latency: the median of half round trips for \
         put/write and am/send, of full round trips for get/read; rate: messages per second \
         over the run), each ratio the median of the rounds' ratios with its bootstrap 95% \
         interval; server and client each on a CPU of their own; UCX/UCX is ucx_perftest against \
         a second run of itself in the same rounds, the resolution of zverbs/UCX:"
    );
    table.print(false);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &str = "\
# Memory domain: posix
#      Transport: posix
#         Device: memory
# Memory domain: mlx5_0
#     Component: ib
#      Transport: rc_verbs
#         Device: mlx5_0:1
#      Transport: rc_mlx5
#         Device: mlx5_0:1
#      Transport: ud_mlx5
#         Device: mlx5_0:1
# Memory domain: cma
#      Transport: cma
#         Device: memory
";

    #[test]
    fn transports_of_the_mlx5_domain() {
        let d = mlx5_domain(INFO).unwrap();
        assert!(d.starts_with("# Memory domain: mlx5_0"));
        assert!(!d.contains("cma"));
        assert_eq!(
            transports_on(&d, "mlx5_0:1"),
            ["rc_verbs", "rc_mlx5", "ud_mlx5"]
        );
        assert!(transports_on(&d, "mlx5_1:1").is_empty());
        assert!(mlx5_domain("# Memory domain: posix\n").is_none());
    }

    #[test]
    fn final_line_fields() {
        let out = "Waiting\nFinal:                   300    240.510   274.702   274.702        0.03       0.03        3640        3640\n";
        let f = final_line(out).unwrap();
        assert_eq!(f[0], 300.0);
        assert_eq!(f[1], 240.51);
        assert_eq!(f[7], 3640.0);
        assert!(final_line("Final: 300 1.0\n").is_none());
    }

    #[test]
    fn zverbs_rate() {
        let out = " #bytes   #iterations  BW average[MB/sec]    BW[Gbit/sec]  MsgRate[Mpps]\n 8        300                        0.11            0.00       0.013661\n";
        assert_eq!(zverbs_msg_rate(out), Some(13661.0));
    }
}
