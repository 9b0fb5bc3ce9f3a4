//! `cargo xtask rxe`: commands on RDMA devices, in the rxe VM or on this host's own devices,
//! and the `rxe` stage of `cargo xtask test`.
//!
//! The stage boots the VM once and runs, one at a time and each with a timeout:
//! - interop checks with tools no one here wrote (rdma-core's `ibv_devices`, `ibv_devinfo`,
//!   `ibv_rc_pingpong`, perftest's `ib_write_lat` and `ib_send_lat`, librdmacm's `rping`), on
//!   the single device and across the linked pair ([`interop`]);
//! - the project's own programs built on the host ([`PROGRAMS`]): the `loopback` self-test of
//!   every operation, and `pingpong --rc` against `ibv_rc_pingpong` ([`own_programs`]);
//! - the device tests: cargo test executables built on the host ([`DEVICE_TESTS`]), each of
//!   their tests a process of its own.
//!
//! With `ZVERBS_RXE=host` the same checks run directly on this machine's devices, named by the
//! `ZVERBS_TEST_*` variables ([`crate::vm::topology`]): for a machine with real rxe or a ConnectX.
//!
//! Other code can run its own list of checks in one boot with [`run_in_vm`] (or on the host
//! with [`on_host_checks`]), after building its executables with [`build_executables`].

pub mod checks;
pub mod figures;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use crate::vm::topology::Topology;
use checks::{Check, CheckResult, Kind, Ready, Status};

use crate::cli::{self, Arg, Parser};
use crate::libtest::{self, Counts};
use crate::run::Run;
use crate::util::{self, Result, Table, anyhow, bail};
use crate::vm::{self, GUEST_CTL, Spec};

/// Where the `rxe` stage runs: `vm` (the default) or `host`.
pub const MODE_ENV: &str = "ZVERBS_RXE";

/// A cargo test selection whose executables run on the devices.
pub struct DeviceTests {
    /// What they test, for reports.
    pub what: &'static str,
    /// The package and target selection given to `cargo test --no-run`.
    pub select: &'static [&'static str],
}

/// The device tests the stage runs. A new suite of device tests plugs in as one more entry:
/// its executables are built on the host and run in the guest, test by test.
pub const DEVICE_TESTS: &[DeviceTests] = &[
    DeviceTests {
        what: "the device environment",
        select: &["-p", "xtask", "--test", "device_env"],
    },
    DeviceTests {
        what: "the control path",
        select: &["-p", "zverbs", "--test", "device_control"],
    },
    DeviceTests {
        what: "connections (TCP exchange, rdma_cm)",
        select: &["-p", "zverbs", "--test", "device_connect"],
    },
    DeviceTests {
        what: "every operation",
        select: &["-p", "zverbs", "--test", "device_ops"],
    },
    DeviceTests {
        what: "error completions and flushes",
        select: &["-p", "zverbs", "--test", "device_errors"],
    },
    DeviceTests {
        what: "unreliable datagrams, multicast",
        select: &["-p", "zverbs", "--test", "device_ud"],
    },
    DeviceTests {
        what: "shared receive queues",
        select: &["-p", "zverbs", "--test", "device_srq"],
    },
    DeviceTests {
        what: "teardown in every order",
        select: &["-p", "zverbs", "--test", "device_teardown"],
    },
    DeviceTests {
        what: "zero allocation on the fallback",
        select: &["-p", "zverbs", "--test", "device_alloc"],
    },
    DeviceTests {
        what: "asynchronous events (port down and up, SRQ limit)",
        select: &["-p", "zverbs", "--test", "device_events"],
    },
    DeviceTests {
        what: "recovery: drain, reset, reconnect, reuse",
        select: &["-p", "zverbs", "--test", "device_recovery"],
    },
    DeviceTests {
        what: "the fault matrix: faults x operations, each request completed once",
        select: &["-p", "zverbs", "--test", "device_faults"],
    },
    DeviceTests {
        what: "QPs joining and leaving a polling poller",
        select: &["-p", "zverbs", "--test", "device_members"],
    },
    DeviceTests {
        what: "completion channels and events",
        select: &["-p", "zverbs", "--test", "events"],
    },
];

/// The project's programs that run on the devices, built with `cargo build` (see
/// [`own_programs`]).
pub const PROGRAMS: &[&str] = &[
    "-p",
    "zverbs-tools",
    "--example",
    "loopback",
    "--example",
    "pingpong",
    "--example",
    "mcast",
];

/// The limit for each device test.
const TEST_TIMEOUT: Duration = Duration::from_secs(120);
/// The limit for each interop command or pair.
const TOOL_TIMEOUT: Duration = Duration::from_secs(120);
/// Default limit for `cargo xtask rxe -- CMD`.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(1800);

const USAGE: &str = "usage:
  cargo xtask rxe [--timeout SECS] -- CMD [ARGS...]
        run CMD in the rxe VM, in this directory; exits with CMD's exit code
        (124: CMD ran out of time, 125: the VM failed)
  cargo xtask rxe --host [--timeout SECS] -- CMD [ARGS...]
        run CMD here, on this machine's devices named by ZVERBS_TEST_DEVICE (and
        ZVERBS_TEST_PAIR, ...; see docs/testing.md)
  cargo xtask rxe --shell
        an interactive shell in the VM
  cargo xtask rxe --image [--rebuild]
        build the VM image if needed (--rebuild: in any case) and show where it is";

/// `cargo xtask rxe ...`; exits with the command's code.
pub fn main(p: Parser) -> ExitCode {
    let Options {
        host,
        shell,
        image_only,
        rebuild,
        timeout,
        argv,
    } = match options(p) {
        Ok(Some(o)) => o,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => return usage(&format!("{e:#}")),
    };
    let modes = usize::from(shell) + usize::from(image_only) + usize::from(!argv.is_empty());
    if modes != 1 || (host && (shell || image_only)) {
        return usage("give one of: -- CMD, --shell, --image");
    }
    if host {
        return match on_host(&argv, timeout) {
            Ok(code) => ExitCode::from(code),
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(vm::VM_FAILED)
            }
        };
    }
    match in_vm(argv, timeout, shell, image_only, rebuild) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("\nerror: {e}");
            ExitCode::from(vm::VM_FAILED)
        }
    }
}

/// The options of `cargo xtask rxe`.
#[derive(Debug, Default)]
struct Options {
    host: bool,
    shell: bool,
    image_only: bool,
    rebuild: bool,
    timeout: Duration,
    /// The command after `--`.
    argv: Vec<String>,
}

/// The options, or `None` for `--help`.
fn options(mut p: Parser) -> Result<Option<Options>> {
    let mut o = Options {
        timeout: COMMAND_TIMEOUT,
        ..Options::default()
    };
    while let Some(arg) = p.next()? {
        match arg {
            Arg::Long("host") => o.host = true,
            Arg::Long("shell") => o.shell = true,
            Arg::Long("image") => o.image_only = true,
            Arg::Long("rebuild") => o.rebuild = true,
            Arg::Long("timeout") => {
                o.timeout = Duration::from_secs(cli::value(&mut p, "--timeout")?)
            }
            Arg::Short('h') | Arg::Long("help") => return Ok(None),
            // After `--`: the command and its arguments, as given.
            Arg::Value(v) => {
                o.argv.push(cli::string(v)?);
                o.argv.extend(cli::rest(&mut p)?);
            }
            arg => return Err(arg.unexpected().into()),
        }
    }
    Ok(Some(o))
}

fn usage(why: &str) -> ExitCode {
    eprintln!("{why}\n\n{USAGE}");
    ExitCode::from(2)
}

fn in_vm(
    argv: Vec<String>,
    timeout: Duration,
    shell: bool,
    image_only: bool,
    rebuild: bool,
) -> Result<u8> {
    crate::packages::ensure_vm()?;
    let image = vm::image(rebuild)?;
    if image_only {
        println!(
            "kernel {} ({}), initramfs {}",
            image.kernel_version,
            image.kernel.display(),
            image.base.display()
        );
        return Ok(0);
    }
    let cwd = std::env::current_dir()?;
    let mut spec = Spec::command(argv, timeout);
    spec.shell = shell;
    spec.share_dir_of(&cwd);
    spec.cwd = cwd;
    if let Some(p) = spec.argv.first().map(PathBuf::from)
        && p.is_file()
    {
        let p = fs::canonicalize(&p)?;
        spec.share_dir_of(&p);
        spec.programs.push(p);
    }
    let ctl = vm::RunDir::new()?;
    let outcome = vm::boot(&image, &spec, &ctl)?;
    if let Some(boot) = outcome.boot {
        eprintln!(
            "rxe VM: exit code {}, boot {}, total {}",
            outcome.exit_code(),
            util::duration(boot),
            util::duration(outcome.total)
        );
    }
    Ok(outcome.exit_code())
}

/// Runs a command here with the topology's variables and a timeout.
fn on_host(argv: &[String], timeout: Duration) -> Result<u8> {
    let topo = Topology::from_env()?;
    let Some((program, args)) = argv.split_first() else {
        bail!("no command given");
    };
    let mut cmd = Command::new(program);
    cmd.args(args).envs(topo.env());
    println!("$ {}", util::show(&cmd));
    let mut child = cmd
        .spawn()
        .map_err(|e| anyhow!("cannot start {program}: {e}"))?;
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status
                .code()
                .and_then(|c| u8::try_from(c).ok())
                .unwrap_or(1));
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            eprintln!("{program} ran out of time ({})", util::duration(timeout));
            return Ok(vm::TIMED_OUT);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

// ---------------------------------------------------------------------------------------------
// The test stage

/// What running a list of checks gave.
#[derive(Debug)]
pub struct Report {
    /// One result per check that ran, in order.
    pub results: Vec<CheckResult>,
    /// The VM's boot time (none on the host).
    pub boot: Option<Duration>,
    /// From start to end (boot included).
    pub total: Duration,
    /// How long building the VM image took, when it was built for this run.
    pub image_built_in: Option<Duration>,
}

impl Report {
    /// The names of the checks that failed.
    pub fn failed(&self) -> Vec<&str> {
        self.results
            .iter()
            .filter(|r| r.status == Status::Fail)
            .map(|r| r.name.as_str())
            .collect()
    }
}

/// The `rxe` stage of `cargo xtask test`.
pub fn stage(run: &mut Run) -> Result<Option<String>> {
    let host = match std::env::var(MODE_ENV).as_deref() {
        Ok("host") => true,
        Ok("vm") | Err(_) => false,
        Ok(other) => bail!("{MODE_ENV}={other:?}: expected vm or host"),
    };
    if !host {
        crate::packages::ensure_vm()?;
    }
    let topo = if host {
        Topology::from_env()?
    } else {
        Topology::vm()
    };
    let mut checks = interop(&topo);
    let programs = build_executables(PROGRAMS, false)?;
    checks.extend(own_programs(&topo, &programs)?);
    checks.extend(mcast_checks(&topo, &programs)?);
    if !host {
        checks.push(veth_traffic());
    }
    for d in DEVICE_TESTS {
        for (target, exe) in build_executables(d.select, true)? {
            checks.push(Check {
                name: format!("{} ({target})", d.what),
                timeout: TEST_TIMEOUT,
                kind: Kind::Tests {
                    exe: exe.to_string_lossy().into_owned(),
                },
            });
        }
    }
    let logs = logs_dir();
    if logs.exists() {
        fs::remove_dir_all(&logs)?;
    }
    let report = if host {
        on_host_checks(&checks, &topo, Some(&logs))?
    } else {
        run_in_vm(&checks, Some(&logs))?
    };
    println!(
        "\neach check's commands and output: {}/NN-<check>.log",
        logs.display()
    );
    summarize(&checks, &report, run, host)
}

/// Where the stage keeps each check's commands and output (emptied at the start of a run).
pub fn logs_dir() -> PathBuf {
    util::target_dir().join("zverbs-rxe/logs")
}

/// The interop checks for a topology: rdma-core's, perftest's and librdmacm's own tools.
pub fn interop(t: &Topology) -> Vec<Check> {
    let w = |v: &[&str]| -> Vec<String> { v.iter().map(|s| s.to_string()).collect() };
    let gid = t.gid_index.to_string();
    let mut port: u16 = 18515;
    let mut next_port = || {
        port += 1;
        port.to_string()
    };
    let mut checks = vec![Check {
        name: "ibv_devices".into(),
        timeout: TOOL_TIMEOUT,
        kind: Kind::Command {
            argv: w(&["ibv_devices"]),
            expect: t.devices().iter().map(|d| d.to_string()).collect(),
        },
    }];
    for d in t.devices() {
        checks.push(Check {
            name: format!("ibv_devinfo {d}"),
            timeout: TOOL_TIMEOUT,
            kind: Kind::Command {
                argv: w(&["ibv_devinfo", "-d", d]),
                expect: w(&["PORT_ACTIVE"]),
            },
        });
    }
    let mut ends: Vec<(String, &str, &str)> = vec![(t.device.clone(), &t.device, &t.device)];
    if let Some((a, b)) = &t.pair {
        ends.push((format!("{a}<->{b}"), a, b));
    }
    // Each pair: the server on the first device, the client on the second, exchanging
    // connection data over TCP on the loopback.
    for (label, a, b) in &ends {
        let p = next_port();
        checks.push(Check {
            name: format!("ibv_rc_pingpong {label}"),
            timeout: TOOL_TIMEOUT,
            kind: Kind::Pair {
                server: w(&[
                    "ibv_rc_pingpong",
                    "-d",
                    a,
                    "-g",
                    &gid,
                    "-n",
                    "100",
                    "-c",
                    "-p",
                    &p,
                ]),
                client: w(&[
                    "ibv_rc_pingpong",
                    "-d",
                    b,
                    "-g",
                    &gid,
                    "-n",
                    "100",
                    "-c",
                    "-p",
                    &p,
                    "127.0.0.1",
                ]),
                ready: Ready::Tcp(p.parse().unwrap_or_default()),
                expect: w(&["100 iters in"]),
            },
        });
        for tool in ["ib_write_lat", "ib_send_lat"] {
            let p = next_port();
            checks.push(Check {
                name: format!("{tool} {label}"),
                timeout: TOOL_TIMEOUT,
                kind: Kind::Pair {
                    server: w(&[tool, "-d", a, "-x", &gid, "-n", "200", "-p", &p]),
                    client: w(&[
                        tool,
                        "-d",
                        b,
                        "-x",
                        &gid,
                        "-n",
                        "200",
                        "-p",
                        &p,
                        "127.0.0.1",
                    ]),
                    ready: Ready::Tcp(p.parse().unwrap_or_default()),
                    expect: w(&["t_typical"]),
                },
            });
        }
    }
    // rdma_cm picks the device by address.
    if let Some(addr) = &t.addr {
        let p = next_port();
        checks.push(rping(
            &format!("rping {} (rdma_cm)", t.device),
            addr,
            None,
            &p,
        ));
    }
    if let (Some((a, b)), Some((aa, ba))) = (&t.pair, &t.pair_addrs) {
        let p = next_port();
        checks.push(rping(
            &format!("rping {b}->{a} (rdma_cm)"),
            aa,
            Some(ba),
            &p,
        ));
    }
    checks
}

/// Message sizes of the interop with `ibv_rc_pingpong`, on each link: one byte, one page, and
/// sixteen times the path MTU ([`INTEROP_MTU`]).
pub const INTEROP_SIZES: &[usize] = &[1, 4096, 16384];

/// The path MTU both sides of the interop ask for (`-m`).
pub const INTEROP_MTU: usize = 1024;

/// Iterations of each interop run.
const INTEROP_ITERS: &str = "200";

/// `4096 B` or `16 KiB`.
fn size_name(n: usize) -> String {
    if n >= 1024 && n.is_multiple_of(1024) {
        format!("{} KiB", n / 1024)
    } else {
        format!("{n} B")
    }
}

/// Checks with the project's own programs ([`PROGRAMS`], built on the host): the `loopback`
/// self-test (two QPs of one device, every operation, results checked by the program), and
/// the `pingpong` example's `--rc` mode against rdma-core's `ibv_rc_pingpong`, each side as
/// server once, on the single device and across the pair, at every size of
/// [`INTEROP_SIZES`]; ours checks every byte it receives. One more run shows that the check
/// bites: `ibv_rc_pingpong -c` as the client puts a 0 at the start of every page of its first
/// message, and ours must fail, naming that byte.
pub fn own_programs(t: &Topology, built: &[(String, PathBuf)]) -> Result<Vec<Check>> {
    let exe = |name: &str| -> Result<String> {
        match built.iter().find(|(n, _)| n == name) {
            Some((_, p)) => Ok(p.to_string_lossy().into_owned()),
            None => bail!("the build of {PROGRAMS:?} gave no {name}"),
        }
    };
    let (loopback, ours) = (exe("loopback")?, exe("pingpong")?);
    let gid = t.gid_index.to_string();
    let w = |v: &[&str]| -> Vec<String> { v.iter().map(|s| s.to_string()).collect() };
    let mut checks = vec![Check {
        name: format!("zverbs loopback {}", t.device),
        timeout: TOOL_TIMEOUT,
        kind: Kind::Command {
            argv: w(&[&loopback, &t.device, "--gid-idx", &gid]),
            expect: w(&["loopback: ", " passed, 0 failed"]),
        },
    }];
    let mtu = INTEROP_MTU.to_string();
    let args = |dev: &str, size: usize, port: u16| -> Vec<String> {
        w(&[
            "-d",
            dev,
            "-g",
            &gid,
            "-m",
            &mtu,
            "-n",
            INTEROP_ITERS,
            "-s",
            &size.to_string(),
            "-p",
            &port.to_string(),
        ])
    };
    let with = |prog: &str, mut args: Vec<String>, client: bool| -> Vec<String> {
        if prog == ours {
            args.insert(0, "--rc".into());
        }
        args.insert(0, prog.to_string());
        if client {
            args.push("127.0.0.1".into());
        }
        args
    };
    let received = format!("{INTEROP_ITERS} messages received, every byte checked");
    let iters = format!("{INTEROP_ITERS} iters in");
    let mut links: Vec<(String, String, String)> =
        vec![(t.device.clone(), t.device.clone(), t.device.clone())];
    if let Some((a, b)) = &t.pair {
        links.push((format!("{a}<->{b}"), a.clone(), b.clone()));
    }
    let mut port = 18600u16;
    for (label, a, b) in &links {
        for &size in INTEROP_SIZES {
            for ours_serves in [true, false] {
                port += 1;
                let (server, client, name) = if ours_serves {
                    (
                        with(&ours, args(a, size, port), false),
                        with("ibv_rc_pingpong", args(b, size, port), true),
                        "pingpong --rc (zverbs) server, ibv_rc_pingpong client",
                    )
                } else {
                    (
                        with("ibv_rc_pingpong", args(a, size, port), false),
                        with(&ours, args(b, size, port), true),
                        "ibv_rc_pingpong server, pingpong --rc (zverbs) client",
                    )
                };
                checks.push(Check {
                    name: format!("{name}, {label}, {}", size_name(size)),
                    timeout: TOOL_TIMEOUT,
                    kind: Kind::Pair {
                        server,
                        client,
                        ready: Ready::Tcp(port),
                        expect: vec![iters.clone(), received.clone()],
                    },
                });
            }
        }
    }
    // The check bites: ours must exit 1 on ibv_rc_pingpong -c's first message.
    port += 1;
    let d = &t.device;
    let mut server = w(&["sh", "-c", "\"$@\"; test $? -eq 1", "sh"]);
    server.extend(with(&ours, args(d, 4096, port), false));
    let mut client = with("ibv_rc_pingpong", args(d, 4096, port), true);
    client.insert(1, "-c".into());
    checks.push(Check {
        name: format!(
            "pingpong --rc (zverbs) rejects a damaged message (ibv_rc_pingpong -c client), {d}"
        ),
        timeout: TOOL_TIMEOUT,
        kind: Kind::Pair {
            server,
            client,
            ready: Ready::Tcp(port),
            expect: vec![
                iters,
                format!(
                    "1 of {INTEROP_ITERS} messages received were not 4096 bytes of 0x7b; the \
                     first: message 0, byte 0 is 0x00"
                ),
            ],
        },
    });
    // Completion events: both sides sleep on their completion channels (`-e`), each side as
    // server once, on the single device.
    for ours_serves in [true, false] {
        port += 1;
        let events = |mut v: Vec<String>| {
            v.insert(1 + usize::from(v[0] == ours), "-e".into());
            v
        };
        let (server, client, name) = if ours_serves {
            (
                events(with(&ours, args(d, 4096, port), false)),
                events(with("ibv_rc_pingpong", args(d, 4096, port), true)),
                "pingpong --rc -e (zverbs) server, ibv_rc_pingpong -e client",
            )
        } else {
            (
                events(with("ibv_rc_pingpong", args(d, 4096, port), false)),
                events(with(&ours, args(d, 4096, port), true)),
                "ibv_rc_pingpong -e server, pingpong --rc -e (zverbs) client",
            )
        };
        checks.push(Check {
            name: format!("{name}, {d}, 4 KiB"),
            timeout: TOOL_TIMEOUT,
            kind: Kind::Pair {
                server,
                client,
                ready: Ready::Tcp(port),
                expect: vec![format!("{INTEROP_ITERS} iters in")],
            },
        });
    }
    // Datagrams and a shared receive queue: `pingpong --ud` against `ibv_ud_pingpong` (1 KiB,
    // the port's MTU on rxe; the GRH from the GID index, as RoCE needs), `pingpong --srq`
    // against `ibv_srq_pingpong` (16 RC QPs on one SRQ, 4 KiB), each side as server once, on
    // each link.
    for (label, a, b) in &links {
        for (tool, flag, size, received) in [
            (
                "ibv_ud_pingpong",
                "--ud",
                1024,
                "datagrams received, every byte after the GRH area checked",
            ),
            (
                "ibv_srq_pingpong",
                "--srq",
                4096,
                "messages received through the SRQ, every byte checked",
            ),
        ] {
            for ours_serves in [true, false] {
                port += 1;
                let side = |prog: &str, dev: &str, client: bool| -> Vec<String> {
                    let mut v = vec![prog.to_string()];
                    if prog == ours {
                        v.push(flag.into());
                    }
                    v.extend(w(&["-d", dev, "-g", &gid, "-n", INTEROP_ITERS]));
                    v.extend(w(&["-s", &size.to_string(), "-p", &port.to_string()]));
                    if flag == "--srq" {
                        v.extend(w(&["-m", &mtu]));
                    }
                    if client {
                        v.push("127.0.0.1".into());
                    }
                    v
                };
                let (server, client, roles) = if ours_serves {
                    (
                        side(&ours, a, false),
                        side(tool, b, true),
                        format!("pingpong {flag} (zverbs) server, {tool} client"),
                    )
                } else {
                    (
                        side(tool, a, false),
                        side(&ours, b, true),
                        format!("{tool} server, pingpong {flag} (zverbs) client"),
                    )
                };
                checks.push(Check {
                    name: format!("{roles}, {label}"),
                    timeout: TOOL_TIMEOUT,
                    kind: Kind::Pair {
                        server,
                        client,
                        ready: Ready::Tcp(port),
                        expect: vec![
                            format!("{INTEROP_ITERS} iters in"),
                            format!("{INTEROP_ITERS} {received}"),
                        ],
                    },
                });
            }
        }
    }
    Ok(checks)
}

/// Datagrams sent with `MCAST_COUNT` multicast checks.
const MCAST_COUNT: u32 = 10;

/// Multicast through rdma_cm: rdma-core's `mckey -s` sends [`MCAST_COUNT`] datagrams with
/// immediate data to a group that the `mcast` example (built on the host) joined with
/// `rdma_join_multicast`; ours counts them and exits 0 when all arrived. On the single device
/// and, when there is one, from one device of the pair to the other; each run its own group.
/// The sender starts once ours printed that it joined. Checks need the devices' IPv4
/// addresses (rdma_cm binds to them); without them there are none.
pub fn mcast_checks(t: &Topology, built: &[(String, PathBuf)]) -> Result<Vec<Check>> {
    let Some((_, ours)) = built.iter().find(|(n, _)| n == "mcast") else {
        bail!("the build of {PROGRAMS:?} gave no mcast");
    };
    let ours = ours.to_string_lossy().into_owned();
    let mut links: Vec<(String, String, String)> = Vec::new();
    if let Some(a) = &t.addr {
        links.push((t.device.clone(), a.clone(), a.clone()));
    }
    if let (Some((da, db)), Some((a, b))) = (&t.pair, &t.pair_addrs) {
        links.push((format!("{da}->{db}"), a.clone(), b.clone()));
    }
    let count = MCAST_COUNT.to_string();
    let w = |v: &[&str]| -> Vec<String> { v.iter().map(|s| s.to_string()).collect() };
    // The reverse: ours sends (address handle from the join, QPN 0xffffff, the group's Q_Key)
    // to `mckey` receiving. mckey's output reaches a pipe only when it exits, so nothing shows
    // its join: ours serves, joins first (`joined group`), and repeats its round of datagrams
    // for a few seconds; mckey joins, takes the first COUNT that reach it and exits 0 with
    // `data transfers complete`.
    let sends = links.iter().enumerate().map(|(i, (label, from, to))| {
        let group = format!("239.1.3.{}", i + 1);
        Check {
            name: format!("mcast (zverbs) sender, mckey receiver, {label}"),
            timeout: TOOL_TIMEOUT,
            kind: Kind::Pair {
                server: w(&[
                    &ours, "--send", "--group", &group, "--bind", from, "-C", &count, "-S", "100",
                    "--repeat", "8",
                ]),
                client: w(&["mckey", "-m", &group, "-b", to, "-C", &count, "-S", "100"]),
                ready: Ready::Output(format!("mcast: joined group {group}")),
                expect: vec!["data transfers complete".into(), "mcast: sent ".into()],
            },
        }
    });
    let sends: Vec<Check> = sends.collect();
    Ok(links
        .iter()
        .enumerate()
        .map(|(i, (label, from, to))| {
            let group = format!("239.1.2.{}", i + 1);
            Check {
                name: format!("mckey sender, mcast (zverbs) receiver, {label}"),
                timeout: TOOL_TIMEOUT,
                kind: Kind::Pair {
                    server: w(&[
                        &ours, "--recv", "--group", &group, "--bind", to, "-C", &count, "-S", "100",
                    ]),
                    client: w(&[
                        "mckey", "-s", "-m", &group, "-b", from, "-C", &count, "-S", "100",
                    ]),
                    ready: Ready::Output(format!("mcast: joined group {group}")),
                    expect: vec![
                        format!("mcast: datagram {count}: 100 bytes, immediate"),
                        format!("mcast: received {count} datagrams"),
                    ],
                },
            }
        })
        .chain(sends)
        .collect())
}

/// In the VM, after the checks across the pair: their packets went through the veth pair
/// (`veth1`, `veth2`, as `vm/init.sh` names them), not through the loopback. One 100-iteration
/// `ibv_rc_pingpong` alone sends about 500 packets each way.
fn veth_traffic() -> Check {
    let script = "set -e; for i in veth1 veth2; do \
        rx=$(cat /sys/class/net/$i/statistics/rx_packets); \
        tx=$(cat /sys/class/net/$i/statistics/tx_packets); \
        echo \"$i: $rx packets received, $tx sent\"; \
        [ \"$rx\" -ge 500 ] && [ \"$tx\" -ge 500 ]; done";
    Check {
        name: "the pair's packets crossed the veth".into(),
        timeout: TOOL_TIMEOUT,
        kind: Kind::Command {
            argv: vec!["sh".into(), "-c".into(), script.into()],
            expect: Vec::new(),
        },
    }
}

/// `rping` server on `addr`, client from `source` (or the route's choice), ten pings whose
/// contents the tool checks.
fn rping(name: &str, addr: &str, source: Option<&str>, port: &str) -> Check {
    let mut client: Vec<String> = ["rping", "-c", "-v", "-C", "10", "-a", addr, "-p", port]
        .iter()
        .map(|s| s.to_string())
        .collect();
    if let Some(s) = source {
        client.extend(["-I".to_string(), s.to_string()]);
    }
    Check {
        name: name.into(),
        timeout: TOOL_TIMEOUT,
        kind: Kind::Pair {
            server: ["rping", "-s", "-C", "10", "-a", addr, "-p", port]
                .iter()
                .map(|s| s.to_string())
                .collect(),
            client,
            ready: Ready::RdmaCm(port.parse().unwrap_or_default()),
            expect: vec!["ping data: rdma-ping-9".into()],
        },
    }
}

/// Builds executables without running them and returns them as (target name, path):
/// `cargo test --no-run SELECT` (`tests`: test harnesses only) or `cargo build SELECT`.
pub fn build_executables(select: &[&str], tests: bool) -> Result<Vec<(String, PathBuf)>> {
    let mut cmd = if tests {
        util::cargo(["test", "--no-run"])
    } else {
        util::cargo(["build"])
    };
    cmd.arg("--message-format=json-render-diagnostics")
        .args(select);
    let mut exes = Vec::new();
    let status = util::run_lines(&mut cmd, |line| {
        if line.starts_with("{\"reason\":\"compiler-artifact\"") {
            // A test harness has `"test":true` in its profile (a plain binary, built for
            // integration tests to run, has it in its target only).
            let profile = line
                .split_once("\"profile\":{")
                .and_then(|(_, p)| p.split('}').next());
            let target = line
                .split_once("\"target\":{")
                .and_then(|(_, t)| libtest::json_str(t, "name"));
            if (!tests || profile.is_some_and(|p| p.contains("\"test\":true")))
                && let Some(exe) = libtest::json_str(line, "executable")
                && let Some(target) = target
            {
                exes.push((target, PathBuf::from(exe)));
            }
            return false;
        }
        !line.starts_with('{')
    })?;
    util::check(&cmd, status)?;
    if exes.is_empty() {
        bail!("`{}` built no executable", util::show(&cmd));
    }
    Ok(exes)
}

/// How many tests a libtest executable lists (run on the host, which needs no device).
fn tests_in(exe: &str) -> Option<u32> {
    let out = Command::new(exe)
        .args(["--list", "--format", "terse"])
        .output()
        .ok()?;
    out.status.success().then(|| {
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.ends_with(": test"))
            .count() as u32
    })
}

/// Runs checks in one boot of the VM. Programs that checks run from the host (the xtask
/// binary itself, test executables) are reached through the shares.
pub fn run_in_vm(checks: &[Check], logs: Option<&Path>) -> Result<Report> {
    let image = vm::image(false)?;
    let ctl = vm::RunDir::new()?;
    fs::write(ctl.path().join("plan"), checks::encode_plan(checks)?)?;
    // The running binary, copied for the guest: a build during the run (the test stage's
    // `cargo test --workspace --all-features` builds the xtask with other features) replaces
    // the file at its path, which the guest would then not find. `/proc/self/exe` reads the
    // running one even then.
    let exe = ctl.path().join("xtask");
    fs::copy("/proc/self/exe", &exe)?;
    // The guest's own limit: every check's, each test of an executable counted.
    let mut limit = Duration::ZERO;
    for c in checks {
        limit += match &c.kind {
            Kind::Tests { exe } => c.timeout * (tests_in(exe).unwrap_or(50) + 1),
            _ => c.timeout,
        };
    }
    let mut spec = Spec::command(
        vec![
            exe.to_string_lossy().into_owned(),
            "run-checks".into(),
            format!("{GUEST_CTL}/plan"),
            format!("{GUEST_CTL}/results"),
        ],
        limit,
    );
    if let Some(dir) = logs {
        // The guest writes the logs at the same path, shared.
        fs::create_dir_all(dir)?;
        spec.argv.push(dir.to_string_lossy().into_owned());
        spec.share_dir_of(dir);
    }
    spec.share_dir_of(&exe);
    spec.programs.push(exe);
    for c in checks {
        if let Kind::Tests { exe } = &c.kind {
            spec.share_dir_of(exe.as_ref());
            spec.programs.push(exe.into());
        }
    }
    let outcome = vm::boot(&image, &spec, &ctl)?;
    let text = fs::read_to_string(ctl.path().join("results")).unwrap_or_default();
    let results = checks::decode_results(&text)?;
    if let Some(f) = &outcome.failure {
        print_table(&results);
        bail!("{f}");
    }
    if outcome.code != Some(0) {
        print_table(&results);
        bail!(
            "the check runner in the VM exited with {} after {} of {} checks",
            outcome.exit_code(),
            results.len(),
            checks.len()
        );
    }
    Ok(Report {
        results,
        boot: outcome.boot,
        total: outcome.total,
        image_built_in: image.built_in,
    })
}

/// Runs checks here, on this machine's devices (keeping each one's output in `logs`).
pub fn on_host_checks(checks: &[Check], topo: &Topology, logs: Option<&Path>) -> Result<Report> {
    let t = Instant::now();
    let results = checks::run_all(checks, &topo.env(), logs, &mut |_| Ok(()))?;
    Ok(Report {
        results,
        boot: None,
        total: t.elapsed(),
        image_built_in: None,
    })
}

fn print_table(results: &[CheckResult]) {
    let mut table = Table::new(&["check", "result", ">passed", ">failed", ">time", "detail"]);
    let mut total = Counts::default();
    for r in results {
        total.add(r.counts);
        table.row(vec![
            r.name.clone(),
            match r.status {
                Status::Pass => "ok".into(),
                Status::Fail => "FAILED".into(),
            },
            r.counts.passed.to_string(),
            r.counts.failed.to_string(),
            util::duration(r.took),
            shorten(&r.detail, 90),
        ]);
    }
    table.row(vec![
        "total".into(),
        String::new(),
        total.passed.to_string(),
        total.failed.to_string(),
        util::duration(results.iter().map(|r| r.took).sum()),
        String::new(),
    ]);
    println!("\nrxe checks:");
    table.print(true);
}

/// `s`, cut to `max` characters with an ellipsis.
fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(max - 1).collect();
        t.push('…');
        t
    }
}

fn summarize(
    checks: &[Check],
    report: &Report,
    run: &mut Run,
    host: bool,
) -> Result<Option<String>> {
    print_table(&report.results);
    let mut total = Counts::default();
    for r in &report.results {
        total.add(r.counts);
    }
    run.add_tests(total);
    let ran = report.results.len();
    if ran < checks.len() {
        bail!("only {ran} of {} checks reported a result", checks.len());
    }
    let failed = report.failed();
    if !failed.is_empty() {
        bail!("rxe checks failed: {}", failed.join(", "));
    }
    let tools = checks
        .iter()
        .filter(|c| !matches!(c.kind, Kind::Tests { .. }))
        .count();
    let device_tests: u32 = report
        .results
        .iter()
        .zip(checks)
        .filter(|(_, c)| matches!(c.kind, Kind::Tests { .. }))
        .map(|(r, _)| r.counts.passed)
        .sum();
    let mut note = format!(
        "{} passed, {} failed, {} ignored ({tools} program checks, {device_tests} device tests)",
        total.passed, total.failed, total.ignored
    );
    let checks_time: Duration = report.results.iter().map(|r| r.took).sum();
    if host {
        note.push_str(&format!("; on this host, {}", util::duration(checks_time)));
    } else {
        note.push_str(&format!(
            "; VM boot {}, checks {}, VM total {}",
            report.boot.map_or_else(|| "?".into(), util::duration),
            util::duration(checks_time),
            util::duration(report.total)
        ));
    }
    if let Some(b) = report.image_built_in {
        note.push_str(&format!("; image built in {}", util::duration(b)));
    }
    Ok(Some(note))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vm_gets_every_interop_check_and_a_host_only_what_it_has() {
        let vm = interop(&Topology::vm());
        let names: Vec<&str> = vm.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "ibv_devices",
                "ibv_devinfo rxe0",
                "ibv_devinfo rxe1",
                "ibv_devinfo rxe2",
                "ibv_rc_pingpong rxe0",
                "ib_write_lat rxe0",
                "ib_send_lat rxe0",
                "ibv_rc_pingpong rxe1<->rxe2",
                "ib_write_lat rxe1<->rxe2",
                "ib_send_lat rxe1<->rxe2",
                "rping rxe0 (rdma_cm)",
                "rping rxe2->rxe1 (rdma_cm)",
            ]
        );
        // Every pair on its own port.
        let mut ports: Vec<u16> = vm
            .iter()
            .filter_map(|c| match &c.kind {
                Kind::Pair {
                    ready: Ready::Tcp(p) | Ready::RdmaCm(p),
                    ..
                } => Some(*p),
                _ => None,
            })
            .collect();
        let n = ports.len();
        ports.dedup();
        assert_eq!(ports.len(), n);
        // The plan survives the trip to the guest.
        assert_eq!(
            checks::decode_plan(&checks::encode_plan(&vm).unwrap()).unwrap(),
            vm
        );

        let host = Topology {
            device: "mlx5_0".into(),
            addr: None,
            pair: None,
            pair_addrs: None,
            gid_index: 3,
        };
        let h = interop(&host);
        assert_eq!(h.len(), 5);
        assert!(h.iter().all(|c| !c.name.contains("rping")));
    }

    #[test]
    fn mckey_sends_to_ours_on_the_device_and_across_the_pair() {
        let built = vec![("mcast".to_string(), PathBuf::from("/t/mcast"))];
        let checks = mcast_checks(&Topology::vm(), &built).unwrap();
        assert_eq!(checks.len(), 4);
        // Then ours sends to mckey receiving, on the same links.
        for (c, (from, to)) in checks[2..]
            .iter()
            .zip([("198.18.0.1", "198.18.0.1"), ("198.18.1.1", "198.18.1.2")])
        {
            let Kind::Pair { server, client, .. } = &c.kind else {
                panic!("{c:?}");
            };
            assert_eq!(client[..2], ["mckey", "-m"]);
            assert_eq!(server[..2], ["/t/mcast", "--send"]);
            assert!(server.contains(&from.to_string()) && client.contains(&to.to_string()));
        }
        let mut groups = Vec::new();
        for (c, (from, to)) in checks
            .iter()
            .zip([("198.18.0.1", "198.18.0.1"), ("198.18.1.1", "198.18.1.2")])
        {
            let Kind::Pair {
                server,
                client,
                ready: Ready::Output(joined),
                expect,
            } = &c.kind
            else {
                panic!("{c:?}");
            };
            assert_eq!(server[..2], ["/t/mcast", "--recv"]);
            assert_eq!(client[..2], ["mckey", "-s"]);
            let after =
                |v: &[String], f: &str| v[v.iter().position(|w| w == f).unwrap() + 1].clone();
            let group = after(server, "--group");
            assert_eq!(after(client, "-m"), group);
            assert_eq!(
                (
                    after(client, "-b").as_str(),
                    after(server, "--bind").as_str()
                ),
                (from, to)
            );
            assert_eq!(after(client, "-C"), after(server, "-C"));
            assert_eq!(joined, &format!("mcast: joined group {group}"));
            assert!(expect.contains(&"mcast: received 10 datagrams".to_string()));
            groups.push(group);
        }
        assert_ne!(groups[0], groups[1]);
        // Without addresses rdma_cm has nothing to bind: no checks.
        let mut t = Topology::vm();
        (t.addr, t.pair_addrs) = (None, None);
        assert!(mcast_checks(&t, &built).unwrap().is_empty());
    }

    #[test]
    fn interop_with_ibv_rc_pingpong_covers_both_roles_every_size_and_a_damaged_run() {
        let built = vec![
            ("loopback".to_string(), PathBuf::from("/t/loopback")),
            ("pingpong".to_string(), PathBuf::from("/t/pingpong")),
        ];
        let checks = own_programs(&Topology::vm(), &built).unwrap();
        // loopback, 3 sizes x 2 roles x 2 links, the damaged run, the events pair x 2 roles,
        // then UD and SRQ x 2 roles x 2 links.
        let rc = 1 + INTEROP_SIZES.len() * 2 * 2 + 1;
        assert_eq!(checks.len(), rc + 2 + 2 * 2 * 2);
        let mut ports = Vec::new();
        let mut events_served = 0;
        for c in &checks[rc..rc + 2] {
            let Kind::Pair {
                server,
                client,
                ready: Ready::Tcp(p),
                ..
            } = &c.kind
            else {
                panic!("{c:?}");
            };
            ports.push(*p);
            let ours = |v: &[String]| v[0] == "/t/pingpong";
            assert!(ours(server) != ours(client), "{c:?}");
            events_served += usize::from(ours(server));
            for v in [server, client] {
                let at = if ours(v) { 2 } else { 1 };
                assert_eq!(v[at], "-e", "{v:?}");
                if ours(v) {
                    assert_eq!(v[1], "--rc");
                } else {
                    assert_eq!(v[0], "ibv_rc_pingpong");
                }
            }
        }
        assert_eq!(events_served, 1);
        for c in &checks[rc + 2..] {
            let Kind::Pair {
                server,
                client,
                ready: Ready::Tcp(p),
                ..
            } = &c.kind
            else {
                panic!("{c:?}");
            };
            ports.push(*p);
            let ours = |v: &[String]| v[0] == "/t/pingpong";
            assert!(ours(server) != ours(client), "{c:?}");
            let tool = if ours(server) { &client[0] } else { &server[0] };
            let flag = if ours(server) { &server[1] } else { &client[1] };
            assert_eq!(
                (tool.as_str(), flag.as_str()),
                match tool.as_str() {
                    "ibv_ud_pingpong" => ("ibv_ud_pingpong", "--ud"),
                    _ => ("ibv_srq_pingpong", "--srq"),
                }
            );
            // ibv_ud_pingpong has no -m.
            assert_eq!(server.contains(&"-m".to_string()), flag == "--srq");
        }
        let mut ours_served = 0;
        for c in &checks[1..rc] {
            let Kind::Pair {
                server,
                client,
                ready: Ready::Tcp(p),
                ..
            } = &c.kind
            else {
                panic!("{c:?}");
            };
            ports.push(*p);
            assert!(server.contains(&"-m".to_string()) && client.contains(&"1024".to_string()));
            ours_served += usize::from(server[0] == "/t/pingpong");
            assert_eq!(client.last().map(String::as_str), Some("127.0.0.1"));
        }
        assert_eq!(ours_served, INTEROP_SIZES.len() * 2);
        let n = ports.len();
        ports.sort_unstable();
        ports.dedup();
        assert_eq!(ports.len(), n, "every pair on its own port");
        let damaged = &checks[rc - 1];
        let Kind::Pair { server, client, .. } = &damaged.kind else {
            unreachable!()
        };
        assert_eq!(server[..2], ["sh", "-c"]);
        assert_eq!(client[..2], ["ibv_rc_pingpong", "-c"]);
        // The shell's quoting survives the trip to the guest.
        assert_eq!(
            checks::decode_plan(&checks::encode_plan(&checks).unwrap()).unwrap(),
            checks
        );
        assert_eq!(size_name(16384), "16 KiB");
        assert_eq!(size_name(1), "1 B");
    }
}
