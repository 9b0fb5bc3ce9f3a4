//! The emulated ConnectX (`zverbs-emu`): `cargo xtask emu -- <program> [args]`, and the
//! `connectx` stage of `cargo xtask test`.
//!
//! `emu` builds the shim (`libzverbs_emu.so`) and the sysfs tool in release, writes the fake
//! sysfs tree under `target/emu/sys`, and runs the program with `SYSFS_PATH` and `LD_PRELOAD`
//! set, so the program's libibverbs finds `mlx5_0` and libmlx5 drives the software device.
//! Run a server and a client from two shells, each through `cargo xtask emu`: their device
//! instances find each other.
//!
//! The stage runs, on the emulated device: the differential check against libmlx5 (the
//! `zverbs-emu` tests), perftest's `ib_write_lat`, `ib_send_lat`, `ib_read_lat`,
//! `ib_atomic_lat` and `ib_write_bw` and `ibv_rc_pingpong` as server and client on 127.0.0.1
//! (each under a timeout; every child is ended), and then the direct path's WRITE latency
//! against `ib_write_lat` side by side, with the ratios in a table (no assertion on time).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::test::{Run, counted_tests};
use crate::util::{self, Result, Table, bail};

/// How long one server or client may run.
const TIMEOUT: Duration = Duration::from_secs(120);
/// Iterations of each perftest run (latency tests and `ib_write_bw`).
const ITERS: &str = "300";

/// What the emulator needs: the shim, the tool and the latency example, built in release.
fn build() -> Result<(PathBuf, PathBuf)> {
    util::run(&mut util::cargo([
        "build",
        "--release",
        "-p",
        "zverbs-emu",
        "--lib",
        "--bins",
        "--examples",
    ]))?;
    let rel = util::root().join("target/release");
    let so = rel.join("libzverbs_emu.so");
    let sys = util::root().join("target/emu/sys");
    util::run(Command::new(rel.join("zverbs-emu")).arg("sysfs").arg(&sys))?;
    Ok((so, sys))
}

/// Sets the emulator's environment on `cmd` (keeping an `LD_PRELOAD` already there).
fn emulated(cmd: &mut Command, so: &Path, sys: &Path) {
    let preload = match std::env::var_os("LD_PRELOAD") {
        Some(p) if !p.is_empty() => {
            let mut s = so.as_os_str().to_owned();
            s.push(":");
            s.push(p);
            s
        }
        _ => so.as_os_str().to_owned(),
    };
    cmd.env("SYSFS_PATH", sys).env("LD_PRELOAD", preload);
}

/// `cargo xtask emu [--] program [args]`.
pub fn main(args: &[String]) -> Result {
    let args = match args.first().map(String::as_str) {
        Some("--") => &args[1..],
        _ => args,
    };
    let Some((program, rest)) = args.split_first() else {
        bail!(
            "usage: cargo xtask emu -- <program> [args]\n\n\
             runs the program on the emulated ConnectX (e.g. `cargo xtask emu -- ibv_devinfo`)"
        );
    };
    let (so, sys) = build()?;
    let mut cmd = Command::new(program);
    cmd.args(rest);
    emulated(&mut cmd, &so, &sys);
    println!("$ {}", util::show(&cmd));
    let status = cmd
        .status()
        .map_err(|e| util::Error(format!("cannot start {program}: {e}")))?;
    if !status.success() {
        bail!("{program} failed ({status})");
    }
    Ok(())
}

/// A child process with its output in a file, ended when dropped.
struct Proc {
    child: Child,
    out: PathBuf,
    name: String,
}

impl Proc {
    fn spawn(mut cmd: Command, out: PathBuf, name: String) -> Result<Self> {
        let f = std::fs::File::create(&out)?;
        cmd.stdin(Stdio::null()).stdout(f.try_clone()?).stderr(f);
        let child = cmd
            .spawn()
            .map_err(|e| util::Error(format!("cannot start {name}: {e}")))?;
        Ok(Self { child, out, name })
    }

    /// Waits until it exits or the deadline passes (then it is killed); its output.
    fn finish(mut self, deadline: Instant) -> Result<String> {
        let status = loop {
            if let Some(s) = self.child.try_wait()? {
                break Some(s);
            }
            if Instant::now() > deadline {
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let out = std::fs::read_to_string(&self.out).unwrap_or_default();
        match status {
            Some(s) if s.success() => Ok(out),
            Some(s) => bail!("{} failed ({s}):\n{out}", self.name),
            None => bail!("{} did not finish within {TIMEOUT:?}:\n{out}", self.name),
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        // Ends this child (and only it) if it still runs.
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Whether something listens on TCP `port` (from /proc/net/tcp and tcp6, without connecting,
/// which would take a one-shot server's only connection).
fn listening(port: u16) -> bool {
    let want = format!(":{port:04X} ");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f).is_ok_and(|t| {
            t.lines()
                .skip(1)
                .any(|l| l.contains(&want) && l.split_whitespace().nth(3) == Some("0A"))
        })
    })
}

/// Runs `tool` as server and client on 127.0.0.1 (port `port`), each with `args` and the
/// emulator's environment plus `env`; returns the client's output.
fn pair(
    tool: &Path,
    args: &[&str],
    port: u16,
    env: &[(&str, &str)],
    emu: &(PathBuf, PathBuf),
) -> Result<String> {
    let name = tool
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let dir = util::root().join("target/emu/runs");
    std::fs::create_dir_all(&dir)?;
    let port_s = port.to_string();
    let make = |server: bool| {
        let mut c = Command::new(tool);
        c.args(args).args(["-p", &port_s]);
        if !server {
            c.arg("127.0.0.1");
        }
        emulated(&mut c, &emu.0, &emu.1);
        c.env("ZVERBS_EMU_NS", format!("xtask-{}", std::process::id()));
        for (k, v) in env {
            c.env(k, v);
        }
        c
    };
    let deadline = Instant::now() + TIMEOUT;
    let server_cmd = make(true);
    println!("$ {}  &", util::show(&server_cmd));
    let server = Proc::spawn(
        server_cmd,
        dir.join(format!("{name}-{port}-server.txt")),
        format!("{name} server"),
    )?;
    while !listening(port) {
        if Instant::now() > deadline {
            bail!("{name} server never listened on port {port}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let client_cmd = make(false);
    println!("$ {}", util::show(&client_cmd));
    let client = Proc::spawn(
        client_cmd,
        dir.join(format!("{name}-{port}-client.txt")),
        format!("{name} client"),
    )?;
    let out = client.finish(deadline)?;
    server.finish(deadline)?;
    Ok(out)
}

/// The `t_typical` (median) column of a latency tool's result line.
fn typical(out: &str) -> Option<f64> {
    let header = out.lines().position(|l| l.contains("t_typical"))?;
    let cols: Vec<&str> = out.lines().nth(header)?.split_whitespace().collect();
    let at = cols.iter().position(|c| c.starts_with("t_typical"))?;
    let vals: Vec<&str> = out.lines().nth(header + 1)?.split_whitespace().collect();
    vals.get(at)?.parse().ok()
}

/// Where a Debian package's program is, if installed.
fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(program))
            .find(|p| p.is_file())
    })
}

/// One run of a tool: program, arguments, extra environment, what the run shows.
type ToolRun = (
    &'static str,
    &'static [&'static str],
    &'static [(&'static str, &'static str)],
    &'static str,
);

/// The `connectx` stage.
pub fn run(run: &mut Run) -> Result<Option<String>> {
    let emu = build()?;
    // 1. The differential check (and the shim's unit tests), in release like the shim.
    let mut cmd = util::cargo(["test", "--release", "-p", "zverbs-emu"]);
    cmd.env("ZVERBS_EMU_SO", &emu.0);
    let (tests, _) = counted_tests(cmd, &["--include-ignored", "--nocapture"], run)?;

    // 2. Tools no one here wrote, unmodified, server and client in two processes.
    let mut port = 18700 + (std::process::id() % 500) as u16;
    let mut next_port = || {
        port += 1;
        port
    };
    let mut table = Table::new(&["program", "mode", "result"]);
    let tools: &[ToolRun] = &[
        ("ib_write_lat", &["-n", ITERS], &[], "BlueFlame"),
        ("ib_send_lat", &["-n", ITERS], &[], "BlueFlame"),
        ("ib_read_lat", &["-n", ITERS], &[], "BlueFlame"),
        ("ib_atomic_lat", &["-n", ITERS], &[], "BlueFlame"),
        ("ib_write_bw", &["-n", ITERS], &[], "BlueFlame"),
        (
            "ib_write_bw",
            &["-n", ITERS, "-s", "1048576"],
            &[],
            "BlueFlame, 1 MiB",
        ),
        ("ibv_rc_pingpong", &["-n", ITERS], &[], "BlueFlame"),
        (
            "ib_write_lat",
            &["-n", ITERS],
            &[("ZVERBS_EMU_BF", "0")],
            "no BlueFlame (doorbell only)",
        ),
        (
            "ib_send_lat",
            &["-n", ITERS],
            &[("MLX5_SHUT_UP_BF", "1")],
            "MLX5_SHUT_UP_BF=1",
        ),
        (
            "ibv_rc_pingpong",
            &["-n", ITERS],
            &[("ZVERBS_EMU_ABI", "write")],
            "write() ABI",
        ),
    ];
    for (tool, args, env, mode) in tools {
        let Some(path) = which(tool) else {
            bail!("{tool} is not installed (Debian packages perftest, ibverbs-utils)");
        };
        let out = pair(&path, args, next_port(), env, &emu)?;
        println!("--- {tool} ({mode}), client output:");
        for l in out.lines().filter(|l| !l.trim().is_empty()) {
            println!("    {l}");
        }
        table.row(vec![tool.to_string(), mode.to_string(), "ok".into()]);
    }
    println!("\nunmodified tools on the emulated ConnectX (server and client on 127.0.0.1):");
    table.print(false);

    // 3. Side by side: the direct path's WRITE latency against perftest's on the same device.
    let direct = util::root().join("target/release/examples/direct_write_lat");
    let perftest = which("ib_write_lat").unwrap_or_default();
    let mut ratios = Table::new(&[
        ">bytes",
        ">direct path [us]",
        ">ib_write_lat [us]",
        ">ratio",
    ]);
    let mut notes = Vec::new();
    for size in ["2", "64", "1024"] {
        let args = ["-n", "1000", "-s", size];
        let ours = typical(&pair(&direct, &args, next_port(), &[], &emu)?);
        let theirs = typical(&pair(&perftest, &args, next_port(), &[], &emu)?);
        let (Some(o), Some(t)) = (ours, theirs) else {
            bail!("no t_typical in a latency tool's output");
        };
        ratios.row(vec![
            size.into(),
            format!("{o:.2}"),
            format!("{t:.2}"),
            format!("{:.2}", o / t),
        ]);
        notes.push(format!("{size} B {:.2}", o / t));
    }
    println!(
        "\nWRITE latency, t_typical (median of half round trips), direct path / ib_write_lat \
         (libmlx5's post path), same emulated device, same run; the figures are dominated by \
         the software device's threads on a shared machine, not by either post path:"
    );
    ratios.print(false);
    Ok(Some(format!(
        "{} tests, {} tool runs; write-lat ratio {}",
        tests.passed,
        tools.len(),
        notes.join(", ")
    )))
}
