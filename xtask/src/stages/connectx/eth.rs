//! Raw Ethernet side by side on the emulated ConnectX's Ethernet function (`mlx5_1`):
//! `zverbs-perf raw_lat` / `raw_bw` (direct path, and the libibverbs fallback) against
//! perftest's `raw_ethernet_lat` / `raw_ethernet_bw`, and `zverbs-perf raw_bw --receive-only`
//! against DPDK's `dpdk-testpmd` in `rxonly` mode fed by the same `tcpreplay` at top speed;
//! alternating rounds, medians, ratios with their bootstrap intervals, the reference tool
//! against itself in every row.
//!
//! A network namespace holds a veth pair, `zve` and `zvp`: each server runs under the
//! emulator with its port on `zve` (pinned to one CPU), each client on `zvp` (the other CPU),
//! so that server and client are two emulated NICs with a wire between them
//! (`docs/ethernet.md`). Their TCP exchange (zverbs-perf's) is on the namespace's loopback;
//! perftest's raw Ethernet tools have none, so its client starts a fixed time after its
//! server, as the emulator's own perftest test does.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{Placement, Proc, TIMEOUT, pin, rounds, typical_of, which};
use crate::util::{self, Result, Table, anyhow, bail};

/// The emulated port's MAC (set on `zve`) and its peer's (`zvp`), as the emulator's tests.
const MAC_E: &str = "02:00:00:00:00:0e";
const MAC_P: &str = "02:00:00:00:00:0f";
/// Alternating rounds of each row: few, the stage has a budget.
pub(super) const ROUNDS: usize = 3;
/// Ping-pongs of each latency run.
const LAT_ITERS: &str = "500";
/// Seconds each bandwidth client sends.
const BW_SECONDS: &str = "1";
/// How long perftest's raw Ethernet client waits for its server's flow rule (it has no
/// exchange to wait on).
const PERFTEST_START: Duration = Duration::from_millis(1200);
/// Frames of the capture replayed at top speed into each receiver of the DPDK row.
const REPLAY: u64 = 50_000;
/// The UDP port of `zverbs-perf`'s test frames (the replayed capture uses it too, so its
/// receiver counts them as its own).
const TEST_UDP_PORT: u16 = 31_337;

/// A network namespace with the veth pair `zve`/`zvp`, deleted on drop.
struct Netns {
    name: String,
}

impl Netns {
    fn new() -> Result<Self> {
        let name = format!("zvxeth{}", std::process::id());
        let out = Command::new("ip").args(["netns", "add", &name]).output()?;
        if !out.status.success() {
            bail!(
                "ip netns add {name}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let ns = Self { name };
        let setup = format!(
            "set -e
             sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1 || true
             ip link add name zve address {MAC_E} type veth peer name zvp address {MAC_P}
             ip link set lo up
             ip link set zve up
             ip link set zvp up"
        );
        util::run(ns.exec().args(["sh", "-c", &setup]))?;
        Ok(ns)
    }

    /// `ip netns exec NAME`, to which the program and its arguments are added.
    fn exec(&self) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name]);
        c
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// Where the row's programs run: the namespace, the emulator's shim and its tree with the
/// Ethernet function (its port `zve`).
struct Wire {
    ns: Netns,
    so: PathBuf,
    tree: PathBuf,
    placement: Placement,
}

impl Wire {
    /// `program args` in the namespace under the emulator, its port on `ifname`, on the
    /// server's CPU (`Some(true)`), the client's (`Some(false)`) or wherever (`None`).
    fn command(&self, ifname: &str, on: Option<bool>, program: &Path, args: &[&str]) -> Command {
        let mut c = self.ns.exec();
        c.arg("env")
            .arg(format!("SYSFS_PATH={}", self.tree.display()))
            .arg(format!(
                "SYSFS_PCI_DEVICES={}",
                self.tree.join("devices/pci0000:00").display()
            ))
            .arg(format!("LD_PRELOAD={}", self.so.display()))
            .arg(format!("ZVERBS_EMU_ETH_IF={ifname}"))
            .arg("ZVERBS_EMU_RT=1")
            .arg(program)
            .args(args);
        if let (Placement::Pinned(s, cl), Some(server)) = (self.placement, on) {
            pin(&mut c, if server { s } else { cl });
        }
        c
    }

    /// Runs a server on `zve` and a client on `zvp`; the client starts once `ready` says the
    /// server is. Both outputs, the server's first.
    fn pair(
        &self,
        name: &str,
        server: (&Path, &[&str]),
        client: (&Path, &[&str]),
        ready: Ready,
    ) -> Result<(String, String)> {
        let dir = util::target_dir().join("emu/runs");
        std::fs::create_dir_all(&dir)?;
        let deadline = Instant::now() + TIMEOUT;
        let s = self.command("zve", Some(true), server.0, server.1);
        println!("$ {}  &", util::show(&s));
        let out = dir.join(format!("eth-{name}-server.txt"));
        let server = Proc::spawn(s, out.clone(), format!("{name} server"))?;
        match ready {
            Ready::After(d) => std::thread::sleep(d),
            Ready::Says(line) => {
                while !std::fs::read_to_string(&out).is_ok_and(|t| t.contains(line)) {
                    if Instant::now() > deadline {
                        bail!("{name} server never said {line:?}");
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
        let c = self.command("zvp", Some(false), client.0, client.1);
        println!("$ {}", util::show(&c));
        let client = Proc::spawn(
            c,
            dir.join(format!("eth-{name}-client.txt")),
            format!("{name} client"),
        )?;
        let cout = client.finish(deadline)?;
        let sout = server.finish(deadline)?;
        Ok((sout, cout))
    }
}

/// When a client may start.
#[derive(Clone, Copy)]
enum Ready {
    /// A fixed time after its server.
    After(Duration),
    /// Once its server's output has this line.
    Says(&'static str),
}

/// The last number of the row under the header line containing `MsgRate`: a bandwidth
/// tool's message rate in Mpps (perftest's and zverbs-perf's alike).
fn msg_rate(out: &str) -> Option<f64> {
    let mut lines = out.lines();
    while let Some(l) = lines.next() {
        if l.contains("MsgRate") {
            return lines.next()?.split_whitespace().last()?.parse().ok();
        }
    }
    None
}

/// A capture of `n` 64-byte UDP frames to `MAC_E` in `zverbs-perf`'s test-frame form (its
/// UDP port, a sequence number after the headers).
fn capture(n: u64) -> Vec<u8> {
    let mut p = Vec::with_capacity(24 + n as usize * 80);
    p.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    p.extend_from_slice(&2u16.to_le_bytes());
    p.extend_from_slice(&4u16.to_le_bytes());
    for w in [0u32, 0, 65535, 1] {
        p.extend_from_slice(&w.to_le_bytes());
    }
    let mac = |s: &str| -> Vec<u8> {
        s.split(':')
            .map(|h| u8::from_str_radix(h, 16).unwrap_or(0))
            .collect()
    };
    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&50u16.to_be_bytes());
    ip[6] = 0x40;
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&[198, 18, 0, 2]);
    ip[16..20].copy_from_slice(&[198, 18, 0, 1]);
    let mut sum: u32 = ip
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    ip[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    for seq in 0..n {
        let us = seq * 10;
        for w in [(us / 1_000_000) as u32, (us % 1_000_000) as u32, 64, 64] {
            p.extend_from_slice(&w.to_le_bytes());
        }
        let start = p.len();
        p.extend(mac(MAC_E));
        p.extend(mac(MAC_P));
        p.extend_from_slice(&[0x08, 0x00]);
        p.extend_from_slice(&ip);
        p.extend_from_slice(&TEST_UDP_PORT.to_be_bytes());
        p.extend_from_slice(&TEST_UDP_PORT.to_be_bytes());
        p.extend_from_slice(&30u16.to_be_bytes());
        p.extend_from_slice(&[0, 0]);
        p.extend_from_slice(&seq.to_be_bytes());
        p.resize(start + 64, 0);
    }
    p
}

/// `tcpreplay --topspeed` of `pcap` on `zvp`: its "Actual" line's seconds and the line.
fn replay(w: &Wire, pcap: &Path) -> Result<(f64, String)> {
    let mut c = w.ns.exec();
    c.args(["tcpreplay", "-q", "-i", "zvp", "--topspeed"])
        .arg(pcap);
    // On the client's CPU: the receiver has the other.
    if let Placement::Pinned(_, cpu) = w.placement {
        pin(&mut c, cpu);
    }
    let out = c.output()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        bail!(
            "tcpreplay failed:\n{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let actual = text
        .lines()
        .find(|l| l.contains("Actual:"))
        .ok_or_else(|| anyhow!("no Actual line in tcpreplay's report:\n{text}"))?
        .trim()
        .to_string();
    let secs = actual
        .split(" sent in ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse::<f64>().ok())
        .ok_or_else(|| anyhow!("no seconds in {actual:?}"))?;
    Ok((secs, actual))
}

/// `zverbs-perf raw_bw --receive-only` on `zve` while the capture is replayed: frames
/// received, and tcpreplay's seconds.
fn zverbs_receiver(w: &Wire, perf: &Path, backend: &str, pcap: &Path) -> Result<(u64, f64)> {
    let args = [
        "raw_bw",
        "--receive-only",
        "-d",
        "mlx5_1",
        "-B",
        MAC_E,
        "-r",
        "8192",
        "--backend",
        backend,
    ];
    let dir = util::target_dir().join("emu/runs");
    std::fs::create_dir_all(&dir)?;
    let out = dir.join(format!("eth-receive-only-{backend}.txt"));
    let c = w.command("zve", Some(true), perf, &args);
    println!("$ {}  &", util::show(&c));
    let rx = Proc::spawn(c, out.clone(), "zverbs-perf raw_bw --receive-only".into())?;
    let deadline = Instant::now() + TIMEOUT;
    while !std::fs::read_to_string(&out).is_ok_and(|t| t.contains("receive only, no peer")) {
        if Instant::now() > deadline {
            bail!("zverbs-perf --receive-only never started receiving");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let (secs, actual) = replay(w, pcap)?;
    let text = rx.finish(deadline)?;
    let got = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("received "))
        .and_then(|l| l.split_whitespace().next()?.parse::<u64>().ok())
        .ok_or_else(|| anyhow!("no count in zverbs-perf's output:\n{text}"))?;
    println!("    tcpreplay {actual}; zverbs-perf ({backend}) received {got} of {REPLAY}");
    Ok((got, secs))
}

/// `dpdk-testpmd` in `rxonly` mode on `zve` (the mlx5 driver in Verbs mode, 8192 receive
/// descriptors, as `docs/ethernet.md` runs it) while the capture is replayed: frames it
/// counted, and tcpreplay's seconds.
fn testpmd_receiver(w: &Wire, testpmd: &Path, pcap: &Path) -> Result<(u64, f64)> {
    // Both of testpmd's lcores (the main one, which sleeps between statistics, and the one
    // that polls) on the receiver's CPU, as zverbs-perf's receiver runs on it: the sender
    // keeps the other CPU in both cases. (Left on two CPUs, testpmd's polling lcore takes
    // the sender's CPU, and the row measures how much that slows tcpreplay.)
    let cpu = match w.placement {
        Placement::Pinned(s, _) => s,
        Placement::Free => 0,
    };
    let lcores = format!("0@{cpu},1@{cpu}");
    let args = [
        "--lcores",
        &lcores,
        "--no-huge",
        "-m",
        "512",
        "--no-shconf",
        "--no-telemetry",
        "--iova-mode=va",
        "-a",
        "0000:03:00.1,dv_flow_en=0",
        "--",
        "--forward-mode=rxonly",
        "--stats-period",
        "1",
        "--rxd=8192",
        "--total-num-mbufs=32768",
    ];
    // testpmd places its own lcores (above): the process is not pinned.
    let mut c = w.command("zve", None, testpmd, &args);
    c.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    println!("$ {}  &", util::show(&c));
    let mut child = c.spawn()?;
    let mut out = BufReader::new(child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?);
    let started = Instant::now();
    let mut log = String::new();
    loop {
        let mut line = String::new();
        if out.read_line(&mut line)? == 0 {
            let _ = child.wait();
            bail!("dpdk-testpmd ended before forwarding:\n{log}");
        }
        log.push_str(&line);
        if line.contains("start packet forwarding") {
            break;
        }
        if started.elapsed() > TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            bail!("dpdk-testpmd did not start:\n{log}");
        }
    }
    let reader = std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = out.read_to_string(&mut rest);
        rest
    });
    let replayed = replay(w, pcap);
    // One statistics period for the last frames, then SIGINT: testpmd stops and prints its
    // totals.
    std::thread::sleep(Duration::from_millis(1200));
    // SAFETY: a signal to our own child (`ip netns exec` execs `env`, which execs testpmd).
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let end = Instant::now() + Duration::from_secs(20);
    while child.try_wait()?.is_none() {
        if Instant::now() > end {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.wait();
    let rest = reader.join().unwrap_or_default().replace('\u{1b}', "");
    let (secs, actual) = replayed?;
    let got = rest
        .split("Forward statistics for port 0")
        .nth(1)
        .and_then(|s| s.split("RX-packets:").nth(1))
        .and_then(|s| s.split_whitespace().next())
        .and_then(|n| n.parse::<u64>().ok())
        .ok_or_else(|| anyhow!("no forward statistics from testpmd:\n{log}{rest}"))?;
    println!("    tcpreplay {actual}; dpdk-testpmd received {got} of {REPLAY}");
    Ok((got, secs))
}

/// The raw Ethernet rows: the table, a note for the stage's summary, lines to print under the
/// table, and the runs.
pub(super) fn side_by_side(
    so: &Path,
    rel: &Path,
    next_port: &mut impl FnMut() -> u16,
) -> Result<(Table, String, Vec<String>, usize)> {
    let ns = Netns::new()?;
    let tree = util::target_dir().join("emu/sys-eth");
    util::run(
        Command::new(rel.join("zverbs-emu"))
            .arg("sysfs")
            .arg(&tree)
            .args(["--ethernet", "zve"]),
    )?;
    let w = Wire {
        ns,
        so: so.to_path_buf(),
        tree,
        placement: Placement::pinned(),
    };
    let perf = rel.join("zverbs-perf");
    let mut table = Table::new(&[
        "test (64-byte frames)",
        ">zverbs-perf direct",
        ">zverbs-perf verbs",
        ">reference",
        ">direct/reference",
        ">verbs/reference",
        ">reference/reference",
    ]);
    let mut notes = Vec::new();
    let mut notes_after = Vec::new();
    let mut runs = 0;

    // Latency and bandwidth against perftest.
    for (label, test, tool, unit) in [
        (
            "raw_lat, t_typical [us]",
            "raw_lat",
            "raw_ethernet_lat",
            "us",
        ),
        (
            "raw_bw, received [Mpps]",
            "raw_bw",
            "raw_ethernet_bw",
            "Mpps",
        ),
    ] {
        let Some(perftest) = which(tool) else {
            bail!("{tool} is not installed (Debian package perftest)");
        };
        let lat = test == "raw_lat";
        let f = rounds::alternating(ROUNDS, 4, |i| {
            runs += 1;
            if i >= 2 {
                let mut common = vec!["-d", "mlx5_1", "-s", "64"];
                if lat {
                    common.extend(["-n", LAT_ITERS]);
                } else {
                    common.extend(["-D", BW_SECONDS]);
                }
                let server = [&["--server", "-B", MAC_E, "-E", MAC_P][..], &common].concat();
                let client = [&["--client", "-B", MAC_P, "-E", MAC_E][..], &common].concat();
                let run = || {
                    w.pair(
                        tool,
                        (&perftest, &server),
                        (&perftest, &client),
                        Ready::After(PERFTEST_START),
                    )
                };
                return if lat {
                    typical_of(tool, || Ok(run()?.1))
                } else {
                    let (s, _) = run()?;
                    msg_rate(&s).ok_or_else(|| anyhow!("no MsgRate in {tool}'s server:\n{s}"))
                };
            }
            let backend = if i == 0 { "direct" } else { "verbs" };
            let port = next_port().to_string();
            let mut common = vec![
                "-d",
                "mlx5_1",
                "-s",
                "64",
                "-p",
                &port,
                "--backend",
                backend,
            ];
            if lat {
                common.extend(["-n", LAT_ITERS]);
            } else {
                common.extend(["-D", BW_SECONDS]);
            }
            let server = [&[test, "-B", MAC_E][..], &common].concat();
            let client = [&[test, "127.0.0.1", "-B", MAC_P][..], &common].concat();
            let (s, c) = w.pair(
                &format!("zverbs-perf-{test}-{backend}"),
                (&perf, &server),
                (&perf, &client),
                Ready::Says("Waiting for a client"),
            )?;
            if lat {
                typical_of("zverbs-perf raw_lat", || Ok(c.clone()))
            } else {
                msg_rate(&s).ok_or_else(|| anyhow!("no MsgRate in zverbs-perf's server:\n{s}"))
            }
        })?;
        row(&mut table, label, &f, unit);
        notes.push(format!(
            "{test} {:.3} (A/A {:.3})",
            rounds::ratios(&f[0], &f[2]).median,
            rounds::ratios(&f[3], &f[2]).median
        ));
    }

    // Receive rate against DPDK: the same capture at tcpreplay's top speed into each.
    match which("dpdk-testpmd") {
        Some(testpmd) => {
            let pcap = util::target_dir().join("emu/eth-replay.pcap");
            std::fs::write(&pcap, capture(REPLAY))?;
            // Frames each receiver counted, per run: whether it kept up with the sender.
            let mut counts = vec![Vec::new(); 4];
            let f = rounds::alternating(ROUNDS, 4, |i| {
                runs += 2;
                let (got, secs) = match i {
                    0 => zverbs_receiver(&w, &perf, "direct", &pcap)?,
                    1 => zverbs_receiver(&w, &perf, "verbs", &pcap)?,
                    _ => testpmd_receiver(&w, &testpmd, &pcap)?,
                };
                counts[i].push(got);
                Ok(got as f64 / secs / 1e3)
            })?;
            row(
                &mut table,
                "receive only, tcpreplay --topspeed [kpps]",
                &f,
                "kpps",
            );
            if let [d, v, t, t2] = &counts[..] {
                notes_after.push(format!(
                    "receive only: frames received of the capture's {REPLAY}, round by round: \
                     zverbs-perf direct {d:?}, verbs {v:?}, dpdk-testpmd {t:?} and {t2:?}"
                ));
            }
            notes.push(format!(
                "rx vs testpmd {:.3} (A/A {:.3})",
                rounds::ratios(&f[0], &f[2]).median,
                rounds::ratios(&f[3], &f[2]).median
            ));
        }
        None => println!("dpdk-testpmd is not installed (Debian package dpdk-dev): no DPDK row"),
    }
    Ok((table, notes.join(", "), notes_after, runs))
}

/// A row: the three medians and the three ratios.
fn row(table: &mut Table, label: &str, f: &[Vec<f64>], unit: &str) {
    let fmt = |v: f64| {
        if unit == "Mpps" {
            format!("{v:.3}")
        } else {
            format!("{v:.1}")
        }
    };
    table.row(vec![
        label.into(),
        fmt(rounds::median(&f[0])),
        fmt(rounds::median(&f[1])),
        fmt(rounds::median(&f[2])),
        rounds::ratio_cell(&rounds::ratios(&f[0], &f[2])),
        rounds::ratio_cell(&rounds::ratios(&f[1], &f[2])),
        rounds::ratio_cell(&rounds::ratios(&f[3], &f[2])),
    ]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_rates_are_read_from_both_tools() {
        let perftest = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   \
                        MsgRate[Mpps]\n 64         237579           0.00               14.50  \t\t   0.237568\n";
        assert_eq!(msg_rate(perftest), Some(0.237568));
        let ours = " #bytes   #iterations  BW average[MB/sec]    BW[Gbit/sec]  MsgRate[Mpps]\n \
                    64       587136                    18.79            0.15       0.293639\n";
        assert_eq!(msg_rate(ours), Some(0.293639));
        assert_eq!(msg_rate("nothing"), None);
    }

    #[test]
    fn the_capture_is_zverbs_perfs_test_frames() {
        let p = capture(3);
        assert_eq!(p.len(), 24 + 3 * (16 + 64));
        let f = &p[24 + 16..24 + 16 + 64];
        assert_eq!(&f[..6], &[2, 0, 0, 0, 0, 0x0e]);
        assert_eq!(&f[36..38], &TEST_UDP_PORT.to_be_bytes());
        let second = &p[24 + 80 + 16..24 + 80 + 16 + 64];
        assert_eq!(&second[42..50], &1u64.to_be_bytes());
        // The IPv4 header sums to 0xffff with its checksum.
        let mut s: u32 = f[14..34]
            .chunks(2)
            .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
            .sum();
        while s > 0xffff {
            s = (s & 0xffff) + (s >> 16);
        }
        assert_eq!(s, 0xffff);
    }
}
