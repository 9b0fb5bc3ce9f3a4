//! The emulated ConnectX (`zverbs-emu`): `cargo xtask emu -- <program> [args]`, and the
//! `connectx` stage of `cargo xtask test`.
//!
//! `emu` builds the shim (`libzverbs_emu.so`) and the sysfs tool in release, writes the fake
//! sysfs tree under `emu/sys` of cargo's target directory ([`util::target_dir`]), and runs the program with `SYSFS_PATH` and `LD_PRELOAD`
//! set, so the program's libibverbs finds `mlx5_0` and libmlx5 drives the software device.
//! Run a server and a client from two shells, each through `cargo xtask emu`: their device
//! instances find each other.
//!
//! The stage runs, on the emulated device: the differential check against libmlx5, the
//! BlueFlame registers shared by QPs on several threads and the asynchronous events libibverbs
//! reads (the `zverbs-emu` tests), `ibv_asyncwatch` seeing an injected port-down; the project's
//! control path on libmlx5 (the `loopback` self-test, which
//! must choose the direct backend through `mlx5dv_init_obj`, with BlueFlame and without, and
//! the libibverbs fallback); perftest's `ib_write_lat`, `ib_send_lat`, `ib_read_lat`,
//! `ib_atomic_lat` and `ib_write_bw` and `ibv_rc_pingpong` as server and client on 127.0.0.1,
//! and `ibv_rc_pingpong` against our `pingpong --rc` both ways; `ibv_ud_pingpong` (without
//! and with a GRH) and `ibv_srq_pingpong` (16 QPs on one SRQ), each against itself and against
//! our `pingpong --ud` / `pingpong --srq` in both roles, each side reporting its bytes;
//! `ib_write_bw` and `ibv_rc_pingpong` whose server is killed mid-transfer, whose client must
//! end with its requests' "transport retry counter exceeded" (as on a ConnectX; the time it
//! took is printed); the fault matrix (`std-shim/tests/device_faults.rs`, on both backends);
//! completion timestamps: `ibv_rc_pingpong --ts` against our `pingpong --rc --ts` and
//! `pingpong --rc --ts -e` (timestamps and a completion channel on one CQ) in both roles (each
//! side reporting non-zero receive completion intervals on the device clock, ours through
//! `mlx5dv_get_clock_info` too) and `zverbs-perf send_lat --hw-ts`, spinning and with
//! `--events` on both backends
//! (each run under a timeout; every child is ended); and then `zverbs-perf` (direct path, and the fallback) against perftest
//! (libmlx5's post path) side by side in alternating rounds, with the median ratios in a table
//! (no assertion on time).
//! A job of four processes started by Open MPI's `mpirun` connects every pair through PMIx and
//! checks the data each wrote to the others (`zverbs-perf all2all`, [`pmix`]).
//! The Ethernet function (`mlx5_1`, its port a veth in a network namespace) runs kernel
//! multicast, a tcpreplayed capture and a kernel socket against raw packet QPs, and perftest's
//! `raw_ethernet_bw` and `raw_ethernet_lat` between the veth's two ends (`zverbs-emu`'s
//! `raw_ethernet` test, `docs/ethernet.md`); then `zverbs-perf raw_lat`/`raw_bw` against them
//! side by side, and a `zverbs-perf` receiver against `dpdk-testpmd` fed by one `tcpreplay`
//! ([`eth`]).
//! The programs run with `ZVERBS_EMU_RT=1`: the device's threads preempt the programs'
//! busy-polling threads, so that latency is not a matter of scheduler time slices.

mod asyncwatch;
mod eth;
pub(crate) mod pmix;
mod rounds;
pub(crate) mod ucx;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::cli::{self, Arg, Parser, usage};
use crate::run::{Run, counted_tests};
use crate::util::{self, Result, Table, anyhow, bail};

/// How long one server or client may run.
const TIMEOUT: Duration = Duration::from_secs(120);
/// Iterations of each perftest run (latency tests and `ib_write_bw`).
const ITERS: &str = "300";
/// Alternating rounds of each `zverbs-perf` latency test against perftest's.
const ROUNDS: usize = 7;

/// What the emulator needs: the shim and the sysfs tool, built in release.
fn build() -> Result<(PathBuf, PathBuf)> {
    util::run(&mut util::cargo([
        "build",
        "--release",
        "-p",
        "zverbs-emu",
        "--lib",
        "--bins",
    ]))?;
    let rel = util::target_dir().join("release");
    let so = rel.join("libzverbs_emu.so");
    let sys = util::target_dir().join("emu/sys");
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
pub fn main(mut p: Parser) -> Result {
    let program = match p.next()? {
        Some(Arg::Value(v)) => cli::string(v)?,
        _ => {
            return Err(usage!(
                "usage: cargo xtask emu -- <program> [args]\n\n\
                 runs the program on the emulated ConnectX (e.g. `cargo xtask emu -- ibv_devinfo`)"
            ));
        }
    };
    let rest = cli::rest(&mut p)?;
    let (so, sys) = build()?;
    let mut cmd = Command::new(&program);
    cmd.args(rest);
    emulated(&mut cmd, &so, &sys);
    println!("$ {}", util::show(&cmd));
    let status = cmd
        .status()
        .map_err(|e| anyhow!("cannot start {program}: {e}"))?;
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
            .map_err(|e| anyhow!("cannot start {name}: {e}"))?;
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
    pair2((tool, args), (tool, args), port, env, emu)
}

/// As [`pair`], with one program (and its arguments) as the server and another as the client.
fn pair2(
    server: (&Path, &[&str]),
    client: (&Path, &[&str]),
    port: u16,
    env: &[(&str, &str)],
    emu: &(PathBuf, PathBuf),
) -> Result<String> {
    Ok(pair_outputs(server, client, port, env, emu)?.1)
}

/// As [`pair`], for a run whose figure is compared with another tool's: the server and every
/// thread it starts (its device's threads too) on one CPU, the client's on another
/// ([`Placement::Pinned`]).
fn measured(tool: &Path, args: &[&str], port: u16, emu: &(PathBuf, PathBuf)) -> Result<String> {
    measured2((tool, args), (tool, args), port, emu)
}

/// As [`pair2`], pinned as [`measured`] is.
fn measured2(
    server: (&Path, &[&str]),
    client: (&Path, &[&str]),
    port: u16,
    emu: &(PathBuf, PathBuf),
) -> Result<String> {
    Ok(placed_outputs(server, client, port, &[], emu, Placement::pinned())?.1)
}

/// Where the two processes of a pair run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Placement {
    /// Wherever the scheduler puts them.
    Free,
    /// The server on CPU `0`, the client on CPU `1`, each process's threads (the program's and
    /// its emulated device's) kept there. On a two-core machine, left free, the two polling
    /// programs and the four device threads that serve them move between the cores from one
    /// run to the next, and a run's latency depends on where they landed; pinned, each core
    /// holds one program and the device threads that preempt it, the same for every tool.
    Pinned(usize, usize),
}

impl Placement {
    /// [`Placement::Pinned`] on CPUs 0 and 1 where this process may use both, else free.
    fn pinned() -> Self {
        if allowed_cpus().is_some_and(|c| c.contains(&0) && c.contains(&1)) {
            Placement::Pinned(0, 1)
        } else {
            Placement::Free
        }
    }
}

/// The CPUs this process may run on, or `None` when the kernel does not say.
fn allowed_cpus() -> Option<Vec<usize>> {
    // SAFETY: `set` is a plain bit set the call fills; size and pointer describe it.
    let set = unsafe {
        let mut set = std::mem::zeroed::<libc::cpu_set_t>();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return None;
        }
        set
    };
    // SAFETY: `CPU_ISSET` reads the set; every index is below CPU_SETSIZE.
    Some(
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
            .collect(),
    )
}

/// Has `cmd`'s process run on CPU `cpu` only (set in the child before it executes the
/// program, so its threads inherit it).
fn pin(cmd: &mut Command, cpu: usize) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the forked child before exec and only calls
    // sched_setaffinity on a set built on its own stack: async-signal-safe, no allocation.
    unsafe {
        cmd.pre_exec(move || {
            let mut set = std::mem::zeroed::<libc::cpu_set_t>();
            libc::CPU_SET(cpu, &mut set);
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// As [`pair2`]; returns the server's output and the client's.
fn pair_outputs(
    server: (&Path, &[&str]),
    client: (&Path, &[&str]),
    port: u16,
    env: &[(&str, &str)],
    emu: &(PathBuf, PathBuf),
) -> Result<(String, String)> {
    placed_outputs(server, client, port, env, emu, Placement::Free)
}

/// As [`pair_outputs`], the two processes placed as `placement` says.
fn placed_outputs(
    (server_tool, server_args): (&Path, &[&str]),
    (client_tool, client_args): (&Path, &[&str]),
    port: u16,
    env: &[(&str, &str)],
    emu: &(PathBuf, PathBuf),
    placement: Placement,
) -> Result<(String, String)> {
    let file = |p: &Path| {
        p.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let name = if server_tool == client_tool {
        file(server_tool)
    } else {
        format!("{}-{}", file(server_tool), file(client_tool))
    };
    let dir = util::target_dir().join("emu/runs");
    std::fs::create_dir_all(&dir)?;
    let port_s = port.to_string();
    let make = |server: bool| {
        let mut c = Command::new(if server { server_tool } else { client_tool });
        c.args(if server { server_args } else { client_args })
            .args(["-p", &port_s]);
        if !server {
            c.arg("127.0.0.1");
        }
        emulated(&mut c, &emu.0, &emu.1);
        c.env("ZVERBS_EMU_NS", format!("xtask-{}", std::process::id()))
            .env("ZVERBS_EMU_RT", "1");
        for (k, v) in env {
            c.env(k, v);
        }
        if let Placement::Pinned(s, cl) = placement {
            pin(&mut c, if server { s } else { cl });
        }
        c
    };
    let on = |server: bool| match placement {
        Placement::Free => String::new(),
        Placement::Pinned(s, c) => format!("[CPU {}] ", if server { s } else { c }),
    };
    let deadline = Instant::now() + TIMEOUT;
    let server_cmd = make(true);
    println!("$ {}{}  &", on(true), util::show(&server_cmd));
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
    println!("$ {}{}", on(false), util::show(&client_cmd));
    let client = Proc::spawn(
        client_cmd,
        dir.join(format!("{name}-{port}-client.txt")),
        format!("{name} client"),
    )?;
    let out = client.finish(deadline)?;
    let server_out = server.finish(deadline)?;
    Ok((server_out, out))
}

/// Runs `tool args` as server and client on 127.0.0.1, kills the server (`SIGKILL`) half a
/// second after the client printed `started` (its transfer is under way), and waits for the
/// client to end on its own: as on a ConnectX,
/// its requests find no answer, its transport timer and retries run out ("transport retry
/// counter exceeded") and the tool ends with that error. Returns how long the client took after
/// the kill, and its output; an error when it did not end within [`KILLED_LIMIT`].
fn killed_peer(
    tool: &Path,
    args: &[&str],
    started: &str,
    port: u16,
    emu: &(PathBuf, PathBuf),
) -> Result<(Duration, String)> {
    let name = tool
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    match killed_peer_within(
        tool,
        args,
        started,
        Duration::from_millis(500),
        port,
        KILLED_LIMIT,
        emu,
    )? {
        Killed::Ended(took, out) => Ok((took, out)),
        Killed::Waiting(out) => {
            bail!("{name} client still runs {KILLED_LIMIT:?} after its server was killed:\n{out}")
        }
    }
}

/// What a client did after its server was killed.
enum Killed {
    /// It ended (with an error) this long after the kill: its output.
    Ended(Duration, String),
    /// It still ran at the limit (then it was ended): its output.
    Waiting(String),
}

/// [`killed_peer`], with the server killed `after` the client's transfer started and the
/// client given `limit` to end.
fn killed_peer_within(
    tool: &Path,
    args: &[&str],
    started: &str,
    after: Duration,
    port: u16,
    limit: Duration,
    emu: &(PathBuf, PathBuf),
) -> Result<Killed> {
    let name = tool
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let dir = util::target_dir().join("emu/runs");
    std::fs::create_dir_all(&dir)?;
    let port_s = port.to_string();
    let make = |server: bool| {
        // Line-buffered: into a file, the tools' stdio buffers their header until they exit,
        // and the client's start (`started`) would never be seen while it runs. stdbuf keeps
        // the emulator's LD_PRELOAD behind its own, and execs the tool (same process).
        let mut c = Command::new("stdbuf");
        c.arg("-oL").arg(tool).args(args).args(["-p", &port_s]);
        if !server {
            c.arg("127.0.0.1");
        }
        emulated(&mut c, &emu.0, &emu.1);
        c.env("ZVERBS_EMU_NS", format!("xtask-{}", std::process::id()))
            .env("ZVERBS_EMU_RT", "1");
        c
    };
    let deadline = Instant::now() + TIMEOUT;
    let server_cmd = make(true);
    println!("$ {}  &", util::show(&server_cmd));
    let mut server = Proc::spawn(
        server_cmd,
        dir.join(format!("{name}-{port}-killed-server.txt")),
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
    let mut client = Proc::spawn(
        client_cmd,
        dir.join(format!("{name}-{port}-killed-client.txt")),
        format!("{name} client"),
    )?;
    while !std::fs::read_to_string(&client.out).is_ok_and(|o| o.contains(started)) {
        if client.child.try_wait()?.is_some() || Instant::now() > deadline {
            let out = std::fs::read_to_string(&client.out).unwrap_or_default();
            bail!("{name} client never started its transfer:\n{out}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(after);
    if client.child.try_wait()?.is_some() {
        bail!("{name} client ended before its server was killed");
    }
    println!("$ kill -9 {}  # the server", server.child.id());
    server.child.kill()?;
    let killed = Instant::now();
    server.child.wait()?;
    let status = loop {
        if let Some(s) = client.child.try_wait()? {
            break s;
        }
        if killed.elapsed() > limit {
            let out = std::fs::read_to_string(&client.out).unwrap_or_default();
            return Ok(Killed::Waiting(out));
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let took = killed.elapsed();
    let out = std::fs::read_to_string(&client.out).unwrap_or_default();
    if status.success() {
        bail!("{name} client ended successfully though its server was killed:\n{out}");
    }
    Ok(Killed::Ended(took, out))
}

/// `ibv_rc_pingpong -n 100000000` with its server killed (SIGKILL) mid-run: the client must end
/// on its own with "transport retry counter exceeded" within [`KILLED_LIMIT`]. Returns how long
/// it took after the kill, and which try it was.
///
/// ibv_rc_pingpong takes turns: each side sends only once the other's message arrived. A
/// server killed while its client's SEND is on its way leaves that SEND unanswered, its retries
/// run out and the client ends (as `ib_write_bw`'s does). A server killed while it holds the
/// turn (the client's SEND acknowledged, its own not sent yet) leaves the client waiting for a
/// receive only, and nothing tells a QP that only waits for receives that its peer is gone, on a
/// ConnectX as on the emulator (docs/emulator.md, "A peer that dies"): the unmodified program
/// waits for ever. So the kill is tried again, at another moment, on a new pair, until it lands
/// in the client's turn (about half of them do); a client still waiting
/// [`PINGPONG_TURN_WAIT`] after the kill (five times its retries, 4.096 µs × 2^14 × 8) had
/// none outstanding, and is ended.
fn killed_pingpong(
    next_port: &mut impl FnMut() -> u16,
    emu: &(PathBuf, PathBuf),
) -> Result<(Duration, usize)> {
    let Some(rc) = which("ibv_rc_pingpong") else {
        bail!("ibv_rc_pingpong is not installed (Debian package ibverbs-utils)");
    };
    for t in 0..PINGPONG_TRIES {
        // A different moment each try: 300 to 700 ms into the run.
        let after =
            Duration::from_millis(300 + (t as u64 * 170 + u64::from(std::process::id())) % 400);
        let run = killed_peer_within(
            &rc,
            &["-n", "100000000"],
            "remote address",
            after,
            next_port(),
            PINGPONG_TURN_WAIT,
            emu,
        )?;
        match run {
            Killed::Ended(took, out) => {
                println!(
                    "--- ibv_rc_pingpong -n 100000000, server killed {after:?} into the run \
                     (try {}): the client ended {took:?} after:",
                    t + 1
                );
                for l in out.lines().filter(|l| !l.trim().is_empty()).take(8) {
                    println!("    {l}");
                }
                // Its request's "transport retry counter exceeded", or the flush of a receive
                // polled before it.
                if !out.contains("Failed status") {
                    bail!("ibv_rc_pingpong client ended without its requests' error:\n{out}");
                }
                return Ok((took, t + 1));
            }
            Killed::Waiting(_) => println!(
                "--- try {}: the server was killed in its turn; the client, waiting for a \
                 receive only, was ended after {PINGPONG_TURN_WAIT:?}",
                t + 1
            ),
        }
    }
    bail!("ibv_rc_pingpong: in {PINGPONG_TRIES} tries no client ended after its server was killed")
}

/// Tries of [`killed_pingpong`]: each lands in the client's turn about half of the time.
const PINGPONG_TRIES: usize = 12;
/// How long a client of [`killed_pingpong`] is given: five times its retries (0.54 s).
const PINGPONG_TURN_WAIT: Duration = Duration::from_secs(3);

/// How long a client whose server was killed may take to end: far beyond its timers (8 tries
/// of 67 ms with perftest's and `ibv_rc_pingpong`'s attributes), short of a hang.
const KILLED_LIMIT: Duration = Duration::from_secs(20);

/// The emulator's tool (`zverbs-emu`, built by [`build`]), as a string for an environment
/// variable.
fn rel_tool() -> String {
    util::target_dir()
        .join("release/zverbs-emu")
        .to_string_lossy()
        .into_owned()
}

/// Runs `program args` on the emulated device with `env`; its output, or an error naming it.
fn solo(
    program: &Path,
    args: &[&str],
    env: &[(&str, &str)],
    emu: &(PathBuf, PathBuf),
) -> Result<String> {
    let mut c = Command::new(program);
    c.args(args);
    emulated(&mut c, &emu.0, &emu.1);
    c.env("ZVERBS_EMU_NS", format!("xtask-{}", std::process::id()))
        .env("ZVERBS_EMU_RT", "1");
    for (k, v) in env {
        c.env(k, v);
    }
    println!("$ {}", util::show(&c));
    let dir = util::target_dir().join("emu/runs");
    std::fs::create_dir_all(&dir)?;
    let name = program
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let p = Proc::spawn(c, dir.join(format!("{name}-solo.txt")), name)?;
    p.finish(Instant::now() + TIMEOUT)
}

/// The `t_typical` (median) column of a latency tool's result line.
fn typical(out: &str) -> Option<f64> {
    let header = out.lines().position(|l| l.contains("t_typical"))?;
    let cols: Vec<&str> = out.lines().nth(header)?.split_whitespace().collect();
    let at = cols.iter().position(|c| c.starts_with("t_typical"))?;
    let vals: Vec<&str> = out.lines().nth(header + 1)?.split_whitespace().collect();
    vals.get(at)?.parse().ok()
}

/// Runs a latency tool through `run` (which gives its output) and takes its `t_typical`, again
/// when the figure is not a finite number: perftest times in CPU cycles and gives `inf`
/// throughout when it could not measure the clock rate (its samples disagreeing on a loaded
/// machine: "Correlation coefficient r^2 ... < 0.9"), a run that measured nothing.
fn typical_of(what: &str, mut run: impl FnMut() -> Result<String>) -> Result<f64> {
    const ATTEMPTS: usize = 3;
    let mut last = String::new();
    for _ in 0..ATTEMPTS {
        let out = run()?;
        match typical(&out) {
            Some(t) if t.is_finite() => return Ok(t),
            Some(_) => {
                println!("{what}: no finite t_typical (the tool could not time the run); again");
                last = out;
            }
            None => bail!("no t_typical in {what}'s output:\n{out}"),
        }
    }
    bail!("{what}: no finite t_typical in {ATTEMPTS} runs; the last:\n{last}")
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

/// The emulator's test targets that run under it (`test = false` in its manifest, so outside
/// `--all-targets`): the clippy stage names them one by one.
pub const EMU_TESTS: &[&str] = &[
    "differential",
    "differential_dc",
    "blueflame",
    "async_events",
    "timestamps",
    "device_node",
    "compressed",
    "scatter",
    "raw_ethernet",
];

/// The `connectx` stage.
pub fn run(run: &mut Run) -> Result<Option<String>> {
    let emu = build()?;
    // 1. The differential check, the BlueFlame registers under concurrent posting (with the
    //    device watching every UAR store), and the shim's unit tests, in release like the shim.
    let mut cmd = util::cargo([
        "test",
        "--release",
        "-p",
        "zverbs-emu",
        "--lib",
        "--test",
        "differential",
        "--test",
        "differential_dc",
        "--test",
        "blueflame",
        "--test",
        "async_events",
        "--test",
        "timestamps",
        "--test",
        "device_node",
        "--test",
        "compressed",
        "--test",
        "scatter",
    ]);
    cmd.env("ZVERBS_EMU_SO", &emu.0);
    let (tests, _) = counted_tests(cmd, &["--nocapture"], run)?;

    // The Ethernet function (mlx5_1) with its port a veth in a network namespace: kernel
    // multicast and a tcpreplayed capture into a raw QP, a raw QP's frames into a kernel
    // socket, perftest's raw_ethernet_bw and raw_ethernet_lat between the veth's two ends
    // (one test at a time: their figures are printed).
    let mut cmd = util::cargo([
        "test",
        "--release",
        "-p",
        "zverbs-emu",
        "--test",
        "raw_ethernet",
    ]);
    cmd.env("ZVERBS_EMU_SO", &emu.0);
    let (eth, _) = counted_tests(cmd, &["--nocapture", "--test-threads=1"], run)?;
    println!(
        "Ethernet function tests (raw QPs, flow rules, a veth port, perftest raw_ethernet_*): \
         {} passed",
        eth.passed
    );

    // The completion-event tests of `zverbs` on the emulated mlx5_0, on the direct backend
    // (our arm sequence) and on the fallback (libmlx5's): the test executable runs under the
    // emulator (cargo's runner), cargo and the compiler do not.
    let mut event_tests = 0;
    for backend in ["direct", "verbs"] {
        let mut cmd = util::cargo(["test", "--release", "-p", "zverbs", "--test", "events"]);
        let runner = format!(
            "env SYSFS_PATH={} LD_PRELOAD={} ZVERBS_BACKEND={backend}",
            emu.1.display(),
            emu.0.display()
        );
        cmd.env("CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER", runner)
            .env("ZVERBS_TEST_DEVICE", "mlx5_0")
            .env("ZVERBS_TEST_GID_INDEX", "0")
            .env("ZVERBS_EVENT_CYCLES", "10000");
        let (c, _) = counted_tests(cmd, &["--nocapture", "--test-threads=1"], run)?;
        event_tests += c.passed;
    }
    println!(
        "completion-event tests on the emulated mlx5_0 (direct and fallback): {event_tests} passed"
    );

    // 2. The project's control path on libmlx5: the loopback self-test chooses the direct
    //    backend through mlx5dv_init_obj (with BlueFlame, and on a device without), and the
    //    libibverbs fallback (libmlx5's own post path) when asked.
    util::run(&mut util::cargo([
        "build",
        "--release",
        "-p",
        "zverbs-tools",
        "--bins",
        "--example",
        "loopback",
        "--example",
        "pingpong",
    ]))?;
    let rel = util::target_dir().join("release");
    let loopback = rel.join("examples/loopback");
    // (what the backend line says, arguments, environment, what else the output shows)
    let checks: &[ToolRun] = &[
        (
            "backend: direct (mlx5)",
            &["mlx5_0"],
            &[],
            "BlueFlame 256 bytes",
        ),
        (
            "backend: direct (mlx5)",
            &["mlx5_0"],
            &[("ZVERBS_EMU_BF", "0")],
            "doorbell only",
        ),
        (
            "backend: direct (mlx5)",
            &["mlx5_0"],
            &[("MLX5_SHUT_UP_BF", "1")],
            "doorbell only (MLX5_SHUT_UP_BF)",
        ),
        (
            // A device in big-endian atomic mode (IBV_ATOMIC_NONE): the control path must
            // tell, or loopback's atomic checks fail.
            "backend: direct (mlx5)",
            &["mlx5_0"],
            &[("ZVERBS_EMU_ATOMICS", "be")],
            "loopback:",
        ),
        (
            "backend: verbs",
            &["mlx5_0", "--backend", "verbs"],
            &[],
            "loopback:",
        ),
    ];
    let mut table = Table::new(&["program", "mode", "result"]);
    let Some(devinfo) = which("ibv_devinfo") else {
        bail!("ibv_devinfo is not installed (Debian package ibverbs-utils)");
    };
    let out = solo(&devinfo, &["-v"], &[], &emu)?;
    for l in out.lines().take(12) {
        println!("    {l}");
    }
    if !out.contains("mlx5_0") || !out.contains("PORT_ACTIVE") || !out.contains("4123") {
        bail!("ibv_devinfo does not show an active ConnectX-6 mlx5_0:\n{out}");
    }
    table.row(vec![
        "ibv_devinfo -v".into(),
        "the device as libibverbs sees it".into(),
        "ok".into(),
    ]);
    asyncwatch::check(&emu, &mut table)?;
    pmix::check(&emu, &mut table)?;
    for (backend, args, env, mode) in checks {
        let out = solo(&loopback, args, env, &emu)?;
        for l in out.lines() {
            println!("    {l}");
        }
        if !out.contains(backend) || !out.contains(mode) || !out.contains(" 0 failed") {
            bail!("loopback {args:?} {env:?}: expected {backend:?}, {mode:?} and no failure");
        }
        table.row(vec![
            format!("loopback {}", args.join(" ")),
            format!("{backend}, {mode}"),
            "ok".into(),
        ]);
    }

    // 2b. Recovery and dynamic peers through the project's device tests, on libmlx5 (the
    //     direct path, then the fallback): a QP driven into error mid-transfer drains, is reset
    //     and reconnected to a new peer; 1000 resets; QPs joining a polling poller; DC
    //     initiators and targets made by libmlx5's mlx5dv_create_qp (on the fallback: refused).
    let exes = crate::rxe::build_executables(
        &[
            "--release",
            "-p",
            "zverbs",
            "--test",
            "device_recovery",
            "--test",
            "device_members",
            "--test",
            "device_dc",
            "--test",
            "device_faults",
        ],
        true,
    )?;
    let inject = rel_tool();
    for (name, exe) in &exes {
        for backend in ["direct", "verbs"] {
            let env = [
                ("ZVERBS_TEST_DEVICE", "mlx5_0"),
                ("ZVERBS_TEST_GID_INDEX", "0"),
                ("ZVERBS_BACKEND", backend),
                // The fault matrix injects port, QP and device faults through the tool.
                ("ZVERBS_TEST_EMU_TOOL", inject.as_str()),
            ];
            // The matrix's table is its output: shown, not captured.
            let args: &[&str] = if name.contains("device_faults") {
                &[
                    "--test-threads=1",
                    "--skip",
                    "software_device",
                    "--nocapture",
                ]
            } else {
                &["--test-threads=1", "--skip", "software_device"]
            };
            let out = solo(exe, args, &env, &emu)?;
            if !out.contains("test result: ok") || out.contains("skipped:") {
                bail!("{name} ({backend}) on the emulated ConnectX:\n{out}");
            }
            let what = if name.contains("device_dc") {
                "DC initiators and targets (the fallback: refused)"
            } else if name.contains("device_faults") {
                // The matrix's table, as the test printed it.
                for l in out
                    .lines()
                    .filter(|l| l.starts_with('|') || l.starts_with("fault matrix"))
                {
                    println!("{l}");
                }
                "the fault matrix: faults x operations, every request completed once"
            } else {
                "recovery, dynamic peers"
            };
            table.row(vec![
                format!("tests/{name}.rs"),
                format!("{backend} backend: {what}"),
                "ok".into(),
            ]);
        }
    }

    // 3. Tools no one here wrote, unmodified, server and client in two processes.
    let mut port = 18700 + (std::process::id() % 500) as u16;
    let mut next_port = || {
        port += 1;
        port
    };
    let tools: &[ToolRun] = &[
        ("ib_write_lat", &["-n", ITERS], &[], "BlueFlame"),
        ("ib_send_lat", &["-n", ITERS], &[], "BlueFlame"),
        (
            "ib_send_lat",
            &["-n", ITERS, "-c", "UD"],
            &[],
            "UD (address handle, GRH-area receives)",
        ),
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
    let ibv_rc = which("ibv_rc_pingpong").unwrap_or_default();
    let ours = rel.join("examples/pingpong");
    let theirs: (&Path, &[&str]) = (&ibv_rc, &["-n", ITERS]);
    let ours: (&Path, &[&str]) = (&ours, &["--rc", "-n", ITERS]);
    for (server, client, mode) in [
        (
            theirs,
            ours,
            "server ibv_rc_pingpong, client our pingpong --rc",
        ),
        (
            ours,
            theirs,
            "server our pingpong --rc, client ibv_rc_pingpong",
        ),
    ] {
        let out = pair2(server, client, next_port(), &[], &emu)?;
        println!("--- {mode}, client output:");
        for l in out.lines().filter(|l| !l.trim().is_empty()) {
            println!("    {l}");
        }
        table.row(vec!["pingpong --rc".into(), mode.into(), "ok".into()]);
    }
    // Unreliable datagrams (address handles built by libmlx5, without and with a GRH) and
    // a shared receive queue (16 RC QPs on one SRQ): both sides must report the bytes moved.
    let datagrams: &[ToolRun] = &[
        ("ibv_ud_pingpong", &["-n", ITERS], &[], "UD, no GRH"),
        (
            "ibv_ud_pingpong",
            &["-n", ITERS, "-g", "0"],
            &[],
            "UD, GRH (GID index 0)",
        ),
        (
            "ibv_srq_pingpong",
            &["-n", ITERS],
            &[],
            "16 RC QPs on one SRQ",
        ),
    ];
    for (tool, args, env, mode) in datagrams {
        let Some(path) = which(tool) else {
            bail!("{tool} is not installed (Debian package ibverbs-utils)");
        };
        let (server, client) = pair_outputs((&path, args), (&path, args), next_port(), env, &emu)?;
        println!("--- {tool} ({mode}), client output:");
        for l in client.lines().filter(|l| !l.trim().is_empty()) {
            println!("    {l}");
        }
        for (side, out) in [("server", &server), ("client", &client)] {
            if !out.contains(" bytes in ") || !out.contains(" iters in ") {
                bail!("{tool} ({mode}): the {side} reports no transfer:\n{out}");
            }
        }
        table.row(vec![tool.to_string(), mode.to_string(), "ok".into()]);
    }
    // Ours against theirs in both roles: `pingpong --ud` (our UD send queue, address handles
    // and GRH-area receives) with `ibv_ud_pingpong`, `pingpong --srq` (16 RC QPs on our
    // directly posted SRQ) with `ibv_srq_pingpong`.
    let ours = rel.join("examples/pingpong");
    let mixed: &[(&str, &str, &[&str], &str)] = &[
        // The size given to both: ibv_ud_pingpong's effective default differs between
        // rdma-core versions (44 sends 1024 bytes), and a datagram longer than the peer's
        // receive fails there with a local length error.
        (
            "ibv_ud_pingpong",
            "--ud",
            &["-n", ITERS, "-s", "1024"],
            "UD, no GRH",
        ),
        (
            "ibv_ud_pingpong",
            "--ud",
            &["-n", ITERS, "-s", "1024", "-g", "0"],
            "UD, GRH (GID index 0)",
        ),
        (
            "ibv_srq_pingpong",
            "--srq",
            &["-n", ITERS],
            "16 RC QPs on one SRQ",
        ),
    ];
    for (tool, flag, args, mode) in mixed {
        let Some(path) = which(tool) else {
            bail!("{tool} is not installed (Debian package ibverbs-utils)");
        };
        let our_args = [&[*flag][..], args].concat();
        let theirs: (&Path, &[&str]) = (&path, args);
        let ours: (&Path, &[&str]) = (&ours, &our_args);
        for (server, client, roles) in [
            (
                theirs,
                ours,
                format!("server {tool}, client our pingpong {flag}"),
            ),
            (
                ours,
                theirs,
                format!("server our pingpong {flag}, client {tool}"),
            ),
        ] {
            let (so, co) = pair_outputs(server, client, next_port(), &[], &emu)?;
            println!("--- {roles} ({mode}), client output:");
            for l in co.lines().filter(|l| !l.trim().is_empty()) {
                println!("    {l}");
            }
            for (side, out) in [("server", &so), ("client", &co)] {
                if !out.contains(" bytes in ") || !out.contains(" iters in ") {
                    bail!("{roles} ({mode}): the {side} reports no transfer:\n{out}");
                }
            }
            table.row(vec![
                format!("pingpong {flag}"),
                format!("{roles}, {mode}"),
                "ok".into(),
            ]);
        }
    }
    // A peer killed mid-transfer: the survivor's requests time out and flush, and the tool ends
    // with the error, as on a ConnectX (not: spins for ever).
    let Some(bw) = which("ib_write_bw") else {
        bail!("ib_write_bw is not installed (Debian package perftest)");
    };
    // (perftest allocates its iterations' stamps first: the transfer starts after its header.)
    let (took, out) = killed_peer(&bw, &["-n", "100000000"], "#bytes", next_port(), &emu)?;
    println!("--- ib_write_bw -n 100000000, server killed: the client ended {took:?} after:");
    for l in out.lines().filter(|l| !l.trim().is_empty()).take(12) {
        println!("    {l}");
    }
    table.row(vec![
        "ib_write_bw".into(),
        "server killed mid-transfer: the client's requests time out, it ends".into(),
        format!("ended {:.2} s after", took.as_secs_f64()),
    ]);
    let (took, tries) = killed_pingpong(&mut next_port, &emu)?;
    table.row(vec![
        "ibv_rc_pingpong".into(),
        "server killed mid-run: the client's request times out, it ends".into(),
        format!(
            "ended {:.2} s after (try {tries}; before it the server held the turn)",
            took.as_secs_f64()
        ),
    ]);
    let ts_runs = timestamps(&mut table, &mut next_port, &rel, &emu)?;
    let ucx_runs = ucx::check(&emu, &mut table, &mut next_port)?;
    println!(
        "\nthe emulated ConnectX: our control path, and tools no one here wrote (server and client on 127.0.0.1):"
    );
    table.print(false);

    // 4. Side by side on the same emulated device, same run: zverbs-perf on the direct path
    //    and on the fallback, against perftest (libmlx5's post path).
    let perf = rel.join("zverbs-perf");
    let mut ratios = Table::new(&[
        "test",
        ">zverbs-perf direct [us]",
        ">zverbs-perf verbs [us]",
        ">perftest [us]",
        ">direct/perftest",
        ">verbs/perftest",
        ">perftest/perftest",
    ]);
    let mut notes = Vec::new();
    // Each row: `zverbs-perf` (direct, and the fallback) against perftest, in alternating
    // rounds (the tool that went second goes first in the next), so that a slow stretch of
    // this shared machine hits both; the ratio is the median of the rounds' ratios.
    // 1000 iterations a run (perftest's default for its latency tests): a longer run evens out
    // more of the machine's slow stretches.
    let n = ["-n", "1000"];
    for (label, ours, tool, theirs) in [
        ("write_lat", &["write_lat"][..], "ib_write_lat", &[][..]),
        ("send_lat", &["send_lat"], "ib_send_lat", &[]),
        ("read_lat", &["read_lat"], "ib_read_lat", &[]),
        ("atomic_lat", &["atomic_lat"], "ib_atomic_lat", &[]),
        (
            "send_lat UD",
            &["send_lat", "--ud"],
            "ib_send_lat",
            &["-c", "UD"],
        ),
    ] {
        let Some(perftest) = which(tool) else {
            bail!("{tool} is not installed (Debian package perftest)");
        };
        let direct = [ours, &n, &["--backend", "direct"]].concat();
        let verbs = [ours, &n, &["--backend", "verbs"]].concat();
        let theirs = [theirs, &n].concat();
        // perftest twice a round: the ratio of its two runs is what the instrument gives for
        // two tools that are the same, the resolution every other ratio of the row has.
        let contenders: [(&Path, &[&str]); 4] = [
            (&perf, &direct),
            (&perf, &verbs),
            (&perftest, &theirs),
            (&perftest, &theirs),
        ];
        let f = rounds::alternating(ROUNDS, contenders.len(), |i| {
            let (tool, args) = contenders[i];
            typical_of(&format!("{} {args:?}", tool.display()), || {
                measured(tool, args, next_port(), &emu)
            })
        })?;
        let (ds, vs, aa) = (
            rounds::ratios(&f[0], &f[2]),
            rounds::ratios(&f[1], &f[2]),
            rounds::ratios(&f[3], &f[2]),
        );
        ratios.row(vec![
            label.into(),
            format!("{:.2}", rounds::median(&f[0])),
            format!("{:.2}", rounds::median(&f[1])),
            format!("{:.2}", rounds::median(&f[2])),
            rounds::ratio_cell(&ds),
            rounds::ratio_cell(&vs),
            rounds::ratio_cell(&aa),
        ]);
        notes.push(format!("{label} {:.3} (A/A {:.3})", ds.median, aa.median));
    }
    println!(
        "\nlatency, t_typical (median of half round trips; full round trips for READ and atomics), \
         2-byte messages (8 for atomics), same emulated device, same run, {ROUNDS} alternating \
         rounds: each time column is the median over the rounds, each ratio the median of the \
         rounds' ratios with its bootstrap 95% interval; server and client each on a CPU of \
         their own ({:?}). perftest/perftest is perftest against a second run of itself in the \
         same rounds: the spread two identical tools show, which no other ratio of the row can \
         resolve below. The figures are mostly the software device's threads and the hand-off \
         between processes through a socket, the same for every row; the post paths differ by \
         nanoseconds within them:",
        Placement::pinned()
    );
    ratios.print(false);

    // 4b. Raw Ethernet on the Ethernet function, its port a veth: zverbs-perf raw_lat/raw_bw
    //     against perftest's raw_ethernet_lat/raw_ethernet_bw, and a receiver against DPDK's
    //     testpmd fed by the same tcpreplay.
    let (eth_table, eth_note, eth_after, eth_runs) =
        eth::side_by_side(&emu.0, &rel, &mut next_port)?;
    println!(
        "\nraw Ethernet, 64-byte frames, mlx5_1 with its port on one end of a veth pair and the \
         peer's on the other (two emulated NICs and a wire), {} alternating rounds, medians and \
         median ratios with bootstrap 95% intervals; server and client each on a CPU of their \
         own ({:?}). raw_lat: t_typical, half round trips, against raw_ethernet_lat (lower is \
         better); raw_bw: what the server received per second while the client sent for 1 s, \
         against raw_ethernet_bw's server (higher is better); receive only: frames received \
         per second of tcpreplay --topspeed's replay of one capture, zverbs-perf raw_bw \
         --receive-only against dpdk-testpmd rxonly (higher is better). reference/reference \
         is the reference tool against a second run of itself in the same rounds:",
        eth::ROUNDS,
        Placement::pinned()
    );
    eth_table.print(false);
    for l in eth_after {
        println!("{l}");
    }

    // 5. Completion events: both sides sleep on their completion channels (libmlx5's arm and
    //    libibverbs' ibv_get_cq_event on one side, our direct arm on the other, through the
    //    emulator's channel and arm doorbell).
    let events = events(&rel, &emu, &mut next_port)?;
    Ok(Some(format!(
        "{} tests, {} tool runs; direct/perftest {}; raw Ethernet direct/reference {eth_note}; events: {events}",
        tests.passed + eth.passed,
        // The Ethernet tests' runs: raw_ethernet_bw and raw_ethernet_lat (server and client
        // each), tcpreplay (four times) and dpdk-testpmd (twice).
        10 + tools.len()
            + datagrams.len()
            + 2 * mixed.len()
            + checks.len()
            + 4 * 5 * ROUNDS
            + ts_runs
            + ucx_runs
            + eth_runs
            + 5,
        notes.join(", ")
    )))
}

/// Completion timestamps on the emulated device: `ibv_rc_pingpong --ts` against our
/// `pingpong --rc --ts`, and against our `pingpong --rc --ts -e` (a CQ with both timestamps
/// and a completion channel), in both roles (both sides must report receive completion
/// intervals, non-zero, on the device clock), then `zverbs-perf send_lat --hw-ts` (the NIC's
/// latency beside the CPU's), spinning and with `--events` on both backends. Returns the
/// number of runs.
fn timestamps(
    table: &mut Table,
    next_port: &mut impl FnMut() -> u16,
    rel: &Path,
    emu: &(PathBuf, PathBuf),
) -> Result<usize> {
    let ibv_rc = which("ibv_rc_pingpong").unwrap_or_default();
    let ours_bin = rel.join("examples/pingpong");
    let theirs: (&Path, &[&str]) = (&ibv_rc, &["-n", ITERS, "--ts"]);
    // The average interval between receive completions, in clock cycles.
    let average = |out: &str| -> Option<f64> {
        out.lines()
            .find_map(|l| l.strip_prefix("Average receive completion clock cycles = "))
            .and_then(|v| v.trim().parse().ok())
    };
    let mut runs = 0;
    for (ours_args, name) in [
        (&["--rc", "-n", ITERS, "--ts"][..], "pingpong --rc --ts"),
        (
            &["--rc", "-n", ITERS, "--ts", "-e"][..],
            "pingpong --rc --ts -e",
        ),
    ] {
        let ours: (&Path, &[&str]) = (&ours_bin, ours_args);
        for (server, client, roles) in [
            (
                theirs,
                ours,
                format!("server ibv_rc_pingpong --ts, client our {name}"),
            ),
            (
                ours,
                theirs,
                format!("server our {name}, client ibv_rc_pingpong --ts"),
            ),
        ] {
            let (so, co) = pair_outputs(server, client, next_port(), &[], emu)?;
            println!("--- {roles}:");
            for (side, out) in [("server", &so), ("client", &co)] {
                for l in out
                    .lines()
                    .filter(|l| l.contains("clock") || l.contains("iters in"))
                {
                    println!("    {side}: {l}");
                }
                if !average(out).is_some_and(|a| a > 0.0) {
                    bail!("{roles}: the {side} reports no receive completion intervals:\n{out}");
                }
            }
            table.row(vec![name.into(), roles, "ok".into()]);
            runs += 1;
        }
    }
    let perf = rel.join("zverbs-perf");
    for (args, what) in [
        (
            &["send_lat", "-n", "500", "--hw-ts"][..],
            "latency from the NIC's completion timestamps",
        ),
        (
            &[
                "send_lat",
                "-n",
                "500",
                "--hw-ts",
                "--events",
                "--backend",
                "direct",
            ][..],
            "the same, sleeping on a completion channel (direct backend)",
        ),
        (
            &[
                "send_lat",
                "-n",
                "500",
                "--hw-ts",
                "--events",
                "--backend",
                "verbs",
            ][..],
            "the same, sleeping on a completion channel (libibverbs fallback)",
        ),
    ] {
        let cmd = format!("zverbs-perf {}", args.join(" "));
        let out = pair(&perf, args, next_port(), &[], emu)?;
        println!("--- {cmd}, client output:");
        for l in out.lines().filter(|l| !l.trim().is_empty()) {
            println!("    {l}");
        }
        if !out.contains("measured by the NIC") {
            bail!("{cmd} reports no NIC latency:\n{out}");
        }
        table.row(vec![cmd, what.into(), "ok".into()]);
        runs += 1;
    }
    Ok(runs)
}

/// `ibv_rc_pingpong -e` against our `pingpong --rc -e` in both roles, then perftest's
/// `ib_send_lat -e` beside `zverbs-perf send_lat --events` (t_typical and their ratio).
fn events(
    rel: &Path,
    emu: &(PathBuf, PathBuf),
    next_port: &mut impl FnMut() -> u16,
) -> Result<String> {
    let ibv_rc = which("ibv_rc_pingpong").unwrap_or_default();
    let ours = rel.join("examples/pingpong");
    let theirs: (&Path, &[&str]) = (&ibv_rc, &["-e", "-n", ITERS]);
    let ours: (&Path, &[&str]) = (&ours, &["--rc", "-e", "-n", ITERS]);
    for (server, client, roles) in [
        (
            theirs,
            ours,
            "server ibv_rc_pingpong -e, client our pingpong --rc -e",
        ),
        (
            ours,
            theirs,
            "server our pingpong --rc -e, client ibv_rc_pingpong -e",
        ),
    ] {
        let (so, co) = pair_outputs(server, client, next_port(), &[], emu)?;
        println!("--- {roles}, client output:");
        for l in co.lines().filter(|l| !l.trim().is_empty()) {
            println!("    {l}");
        }
        for (side, out) in [("server", &so), ("client", &co)] {
            if !out.contains(" iters in ") {
                bail!("{roles}: the {side} reports no transfer:\n{out}");
            }
        }
    }
    let Some(perftest) = which("ib_send_lat") else {
        bail!("ib_send_lat is not installed (Debian package perftest)");
    };
    let perf = rel.join("zverbs-perf");
    let n = ["-n", "500"];
    let d = [&["send_lat", "--events"][..], &n, &["--backend", "direct"]].concat();
    let v = [&["send_lat", "--events"][..], &n, &["--backend", "verbs"]].concat();
    let p = [&["-e"][..], &n].concat();
    let d = typical_of("zverbs-perf send_lat --events (direct)", || {
        measured(&perf, &d, next_port(), emu)
    })?;
    let v = typical_of("zverbs-perf send_lat --events (verbs)", || {
        measured(&perf, &v, next_port(), emu)
    })?;
    let p = typical_of("ib_send_lat -e", || {
        measured(&perftest, &p, next_port(), emu)
    })?;
    let mut t = Table::new(&[
        "test",
        ">zverbs-perf direct [us]",
        ">zverbs-perf verbs [us]",
        ">ib_send_lat -e [us]",
        ">direct/perftest",
        ">verbs/perftest",
    ]);
    t.row(vec![
        "send_lat --events".into(),
        format!("{d:.2}"),
        format!("{v:.2}"),
        format!("{p:.2}"),
        format!("{:.3}", d / p),
        format!("{:.3}", v / p),
    ]);
    println!(
        "\nsend latency sleeping on completion events (t_typical, 2-byte messages, same emulated \
         device, same run; mostly the software device's and the processes' wake-ups):"
    );
    t.print(false);
    Ok(format!(
        "ibv_rc_pingpong -e both roles ok, send_lat --events direct/perftest {:.3}",
        d / p
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(typical: &str) -> String {
        format!(
            " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]\n \
             2       1000          66.16          1858.08      {typical}       225.78\n"
        )
    }

    #[test]
    fn a_run_that_timed_nothing_is_run_again() {
        let mut outs = vec![result("190.74"), result("inf")];
        let t = typical_of("tool", || Ok(outs.pop().unwrap())).unwrap();
        assert_eq!(t, 190.74);
        assert!(outs.is_empty(), "run twice");
    }

    #[test]
    fn a_tool_that_never_times_is_an_error() {
        let mut runs = 0;
        let e = typical_of("tool", || {
            runs += 1;
            Ok(result("inf"))
        })
        .unwrap_err();
        assert_eq!(runs, 3);
        assert!(e.to_string().contains("no finite t_typical"), "{e}");
        let e = typical_of("tool", || Ok("no table".into())).unwrap_err();
        assert!(e.to_string().contains("no t_typical"), "{e}");
    }

    #[test]
    fn pinned_only_where_both_cpus_are_allowed() {
        let cpus = allowed_cpus().expect("sched_getaffinity");
        assert!(!cpus.is_empty());
        let want = if cpus.contains(&0) && cpus.contains(&1) {
            Placement::Pinned(0, 1)
        } else {
            Placement::Free
        };
        assert_eq!(Placement::pinned(), want);
    }

    #[test]
    fn a_pinned_child_runs_on_its_cpu_only() {
        let mut c = Command::new("grep");
        c.args(["Cpus_allowed_list", "/proc/self/status"]);
        pin(&mut c, 0);
        let out = c.output().expect("grep runs");
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(text.split_whitespace().nth(1), Some("0"), "{text}");
    }
}
