//! The emulated ConnectX's Ethernet function (`mlx5_1`) with its port a Linux interface: each
//! test makes a network namespace with a veth pair, `zve` (the emulated port's interface, named
//! by `ZVERBS_EMU_ETH_IF`) and `zvp` (its peer, 10.77.0.2/24, where the kernel's own sockets
//! and `tcpreplay` stand), and runs unmodified programs under the emulator inside it:
//!
//! - UDP multicast sent by a kernel socket on the peer reaches a raw packet QP through a flow
//!   rule (ETH dst MAC, IPv4 group, UDP port): every datagram, in order, none lost;
//! - a capture generated here (8-byte big-endian sequence numbers at the UDP payload's start)
//!   and replayed on the peer with `tcpreplay` does the same;
//! - frames a raw packet QP sends (checksums by the device) are received by an ordinary kernel
//!   UDP socket on the peer;
//! - perftest's `raw_ethernet_bw` and `raw_ethernet_lat`, unmodified, run between two
//!   processes, each an emulated ConnectX on one end of the veth pair (a wire between two
//!   NICs: no process sees its own frames, as a ConnectX without local loopback), and print
//!   their figures;
//! - DPDK's `dpdk-testpmd` (mlx5 driver, Verbs mode), unmodified, receives a capture replayed
//!   at tcpreplay's top speed, with ordinary and with striding receive queues, and the raw QP
//!   program receives the same capture (their rates printed side by side);
//! - without `CAP_NET_RAW` a raw packet QP is refused with EPERM, as the kernel refuses it;
//! - zverbs itself, through rdma-core (the test binary run again inside the namespace under
//!   the emulator): kernel multicast received after a `McastMembership` join on the device's
//!   netdev and a `FlowRule::multicast` on a raw packet QP, and on an RSS QP over two work
//!   queues, every datagram in order, on the libibverbs fallback and on the direct backend
//!   (each receive queue on a CQ of its own, which the direct backend asks: a second receive
//!   queue on such a CQ is refused); frames a zverbs raw packet QP sends, received by a
//!   kernel UDP socket on the peer, every one in order; and the `market_data` example of
//!   `zverbs-tools`, unmodified, on the direct backend (a striding work queue through
//!   `mlx5dv_create_wq`, packets in place, device timestamps) fed by a kernel socket; and
//!   zverbs without `CAP_NET_RAW`, refused with the error that names it.
//!
//! The raw QP program is `raw_eth/rawqp.c`, written on libibverbs and compiled here. Needs root
//! (namespaces, packet sockets), perftest, tcpreplay, DPDK's testpmd, a C compiler and
//! libibverbs' headers (the `prerequisites` stage installs them); run by the `connectx` stage of `cargo xtask test`
//! (`cargo test --release -p zverbs-emu --test raw_ethernet -- --nocapture`). Where the kernel
//! refuses a network namespace the tests say so and skip ([`Skip`]).

mod common;

use std::io::{BufRead, BufReader, Read};
use std::net::{Ipv4Addr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The emulated port's MAC (set on `zve`) and its peer's (`zvp`).
const MAC_E: &str = "02:00:00:00:00:0e";
const MAC_P: &str = "02:00:00:00:00:0f";
/// The peer's address, the address the emulated port's programs use, the multicast group.
const IP_P: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
const IP_E: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
const GROUP: Ipv4Addr = Ipv4Addr::new(239, 1, 2, 3);
/// Datagrams each transfer test sends.
const COUNT: u64 = 20_000;
/// Frames of the capture replayed at tcpreplay's top speed (raw QP and DPDK alike).
const FAST: u64 = 200_000;
/// How long any one program may run.
const RUN_LIMIT: Duration = Duration::from_secs(90);

/// Why a test could not run here: only what the kernel refuses.
#[derive(Debug)]
enum Skip {
    /// `ip netns add` failed (no permission, or namespaces not available).
    NoNamespace(String),
}

impl std::fmt::Display for Skip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Skip::NoNamespace(why) => write!(f, "the kernel refuses a network namespace: {why}"),
        }
    }
}

/// A network namespace with the veth pair, deleted on drop.
struct Netns {
    name: String,
}

impl Netns {
    fn new() -> Result<Self, Skip> {
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "zvemu{}x{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let out = Command::new("ip")
            .args(["netns", "add", &name])
            .output()
            .map_err(|e| Skip::NoNamespace(format!("ip: {e}")))?;
        if !out.status.success() {
            return Err(Skip::NoNamespace(
                String::from_utf8_lossy(&out.stderr).trim().to_string(),
            ));
        }
        let ns = Self { name };
        let setup = format!(
            "set -e
             # No IPv6 chatter on the pair (a kernel without IPv6 has none to turn off).
             sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1 || true
             ip link add name zve address {MAC_E} type veth peer name zvp address {MAC_P}
             ip link set lo up
             ip link set zve up
             ip link set zvp up
             ip addr add {IP_P}/24 dev zvp
             ip route add 239.0.0.0/8 dev zvp"
        );
        let ok = ns.exec(["sh", "-c", &setup]).status().unwrap().success();
        assert!(ok, "setting up the veth pair in {}", ns.name);
        Ok(ns)
    }

    /// `ip netns exec NAME args...`.
    fn exec<I: IntoIterator<Item = S>, S: AsRef<std::ffi::OsStr>>(&self, args: I) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name]).args(args);
        c
    }

    /// Runs `f` on a thread inside the namespace (its sockets are the namespace's).
    fn within<R: Send + 'static>(&self, f: impl FnOnce() -> R + Send + 'static) -> R {
        self.spawn_within(f).join().unwrap()
    }

    /// Starts `f` on a thread inside the namespace.
    fn spawn_within<R: Send + 'static>(
        &self,
        f: impl FnOnce() -> R + Send + 'static,
    ) -> std::thread::JoinHandle<R> {
        let path = format!("/run/netns/{}", self.name);
        std::thread::spawn(move || {
            let file = std::fs::File::open(&path).expect("the namespace's file");
            // SAFETY: joins the calling thread (only) to the namespace of an open descriptor.
            let r =
                unsafe { libc::setns(std::os::fd::AsRawFd::as_raw_fd(&file), libc::CLONE_NEWNET) };
            assert_eq!(r, 0, "setns: {}", std::io::Error::last_os_error());
            f()
        })
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// The namespace, or `None` after saying why the test is skipped.
fn netns(test: &str) -> Option<Netns> {
    match Netns::new() {
        Ok(ns) => Some(ns),
        Err(why) => {
            println!("{test}: SKIPPED: {why}");
            None
        }
    }
}

/// The fake sysfs tree with the Ethernet function (its port `zve`), removed on drop.
struct Tree(PathBuf);

impl Tree {
    fn new(test: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("zverbs-emu-eth-{}-{test}", std::process::id()));
        zverbs_emu::sysfs::write_tree(&dir).unwrap();
        zverbs_emu::sysfs::write_ethernet(&dir, Some("zve")).unwrap();
        Self(dir)
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `program args` inside `ns` under the emulator, its port on interface `ifname`.
fn emulated(ns: &Netns, tree: &Tree, ifname: &str, program: &str, args: &[&str]) -> Command {
    emulated_with(ns, tree, ifname, &[], program, args)
}

/// [`emulated`] with more environment (`env` sets it inside the namespace).
fn emulated_with(
    ns: &Netns,
    tree: &Tree,
    ifname: &str,
    env: &[(&str, String)],
    program: &str,
    args: &[&str],
) -> Command {
    let so = common::shim();
    assert!(
        so.exists(),
        "{} is missing: build the shim first",
        so.display()
    );
    let mut c = ns.exec(["env"]);
    c.arg(format!("SYSFS_PATH={}", tree.0.display()))
        .arg(format!("LD_PRELOAD={}", so.display()))
        .arg(format!("ZVERBS_EMU_ETH_IF={ifname}"))
        // The device's and the port's threads preempt the busy-polling programs, as a NIC
        // needs no time slice (docs/emulator.md).
        .arg("ZVERBS_EMU_RT=1")
        // Where every frame went, on stderr at the end.
        .arg("ZVERBS_EMU_ETH_STATS=1");
    for (k, v) in env {
        c.arg(format!("{k}={v}"));
    }
    c.arg(program)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Waits for `child` (ended after [`RUN_LIMIT`]); its exit status and output.
fn finish(mut child: Child, what: &str) -> (bool, String, String) {
    let started = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if started.elapsed() > RUN_LIMIT {
            let _ = child.kill();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut out = String::new();
    let mut err = String::new();
    if let Some(mut o) = child.stdout.take() {
        o.read_to_string(&mut out).unwrap();
    }
    if let Some(mut e) = child.stderr.take() {
        e.read_to_string(&mut err).unwrap();
    }
    let _ = child.wait();
    let ok = status.is_some_and(|s| s.success());
    if status.is_none() {
        println!("{what}: ended after {RUN_LIMIT:?}");
    }
    (ok, out, err)
}

fn require(tool: &str, package: &str) {
    assert!(
        Path::new(tool).exists(),
        "{tool} is missing: install Debian's {package} (cargo xtask test --only prerequisites)"
    );
}

/// `raw_eth/rawqp.c`, compiled against the system's libibverbs (once per test process).
fn rawqp() -> &'static str {
    static BIN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/raw_eth/rawqp.c");
        let out = std::env::temp_dir().join(format!("zverbs-rawqp-{}", std::process::id()));
        let st = Command::new("cc")
            .args(["-O2", "-Wall", "-Werror", "-o"])
            .arg(&out)
            .arg(&src)
            .arg("-libverbs")
            .status()
            .expect("cc (Debian's gcc) to compile rawqp.c");
        assert!(st.success(), "compiling {}", src.display());
        out.display().to_string()
    })
}

/// What `rawqp recv` counted.
#[derive(Debug, Default, PartialEq, Eq)]
struct Counts {
    received: u64,
    distinct: u64,
    in_order: u64,
    out_of_order: u64,
    duplicates: u64,
    lost: u64,
    /// Datagrams below the sequence number expected next: late (reordered) or repeated.
    behind: u64,
}

/// Microseconds from the first datagram `rawqp recv` took to the last.
fn span_us(line: &str) -> u64 {
    let w: Vec<&str> = line.split_whitespace().collect();
    w.iter()
        .position(|x| *x == "span_us")
        .and_then(|i| w.get(i + 1)?.parse().ok())
        .unwrap_or(0)
}

fn parse_counts(line: &str) -> Counts {
    let w: Vec<&str> = line.split_whitespace().collect();
    let get = |k: &str| -> u64 {
        let i = w
            .iter()
            .position(|x| *x == k)
            .unwrap_or_else(|| panic!("no {k} in {line:?}"));
        w[i + 1].parse().unwrap()
    };
    Counts {
        received: get("received"),
        distinct: get("distinct"),
        in_order: get("in_order"),
        out_of_order: get("out_of_order"),
        duplicates: get("duplicates"),
        lost: get("lost"),
        behind: get("behind"),
    }
}

/// Starts `rawqp recv` on the emulated port for datagrams to `mac`/`ip`:`port`, and waits
/// until its rule is in place.
fn start_receiver(ns: &Netns, tree: &Tree, mac: &str, ip: Ipv4Addr, port: u16) -> Child {
    start_receiver_of(ns, tree, mac, ip, port, COUNT)
}

/// [`start_receiver`] expecting `count` datagrams.
fn start_receiver_of(
    ns: &Netns,
    tree: &Tree,
    mac: &str,
    ip: Ipv4Addr,
    port: u16,
    count: u64,
) -> Child {
    let ip = ip.to_string();
    let (port, count) = (port.to_string(), count.to_string());
    let args = ["recv", "mlx5_1", mac, &ip, &port, &count, "3000"];
    let mut child = emulated(ns, tree, "zve", rawqp(), &args).spawn().unwrap();
    let mut line = String::new();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready", "rawqp recv did not start");
    // The rest of its output is read by `finish`.
    child.stdout = None;
    let rest = std::thread::spawn(move || {
        let mut s = String::new();
        out.read_to_string(&mut s).unwrap();
        s
    });
    RECEIVER_OUT.with(|r| *r.borrow_mut() = Some(rest));
    child
}

thread_local! {
    static RECEIVER_OUT: std::cell::RefCell<Option<std::thread::JoinHandle<String>>> =
        const { std::cell::RefCell::new(None) };
}

/// Ends the receiver started by [`start_receiver`] and returns its counts.
fn receiver_counts(child: Child) -> Counts {
    receiver_report(child).0
}

/// Ends the receiver started by [`start_receiver`]: its counts, its span and what the
/// emulator said on its stderr (`ZVERBS_EMU_ETH_STATS`).
fn receiver_report(child: Child) -> (Counts, u64, String) {
    let (ok, _, err) = finish(child, "rawqp recv");
    let out = RECEIVER_OUT
        .with(|r| r.borrow_mut().take())
        .unwrap()
        .join()
        .unwrap();
    assert!(ok, "rawqp recv failed: {out}{err}");
    print!("{err}");
    let line = out.lines().last().unwrap_or("");
    (parse_counts(line), span_us(line), err)
}

/// A count the emulator's Ethernet report (`ZVERBS_EMU_ETH_STATS=1`, on stderr) gives after
/// `key` (the first such word after `part`: "device" or "port").
fn eth_stat(err: &str, part: &str, key: &str) -> u64 {
    let line = err
        .lines()
        .find(|l| l.contains("] Ethernet: device"))
        .unwrap_or_else(|| panic!("no Ethernet report in {err:?}"));
    let w: Vec<&str> = line.split_whitespace().collect();
    let from = w.iter().position(|x| *x == part).unwrap();
    let i = w[from..]
        .iter()
        .position(|x| *x == key)
        .unwrap_or_else(|| panic!("no {part} {key} in {line:?}"));
    w[from + i + 1].trim_end_matches(';').parse().unwrap()
}

fn assert_all_in_order(c: &Counts, what: &str) {
    assert_eq!(
        *c,
        Counts {
            received: COUNT,
            distinct: COUNT,
            in_order: COUNT,
            ..Counts::default()
        },
        "{what}: every datagram once, in order"
    );
}

/// [`COUNT`] UDP datagrams of 22 bytes (a sequence number, then zeros) sent to
/// [`GROUP`]:31000 by a kernel socket on `zvp`: how many.
fn send_kernel_multicast(ns: &Netns) -> u64 {
    ns.within(|| {
        let s = UdpSocket::bind((IP_P, 0)).unwrap();
        s.set_multicast_ttl_v4(1).unwrap();
        let mut d = [0u8; 22];
        for seq in 0..COUNT {
            d[..8].copy_from_slice(&seq.to_be_bytes());
            s.send_to(&d, (GROUP, 31000)).unwrap();
            // Paced in bursts (a market-data feed's rate, not a flood) shorter than the
            // receive ring: Ethernet has no flow control, and drops what finds no receive
            // posted.
            if seq % 64 == 63 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        COUNT
    })
}

/// UDP multicast sent by the kernel's socket stack on the peer reaches a raw packet QP on the
/// emulated port through a flow rule: all of it, in order.
#[test]
fn kernel_multicast_reaches_a_raw_qp() {
    let Some(ns) = netns("kernel_multicast_reaches_a_raw_qp") else {
        return;
    };
    let tree = Tree::new("mcast");
    let rx = start_receiver(&ns, &tree, "01:00:5e:01:02:03", GROUP, 31000);
    let sent = send_kernel_multicast(&ns);
    let c = receiver_counts(rx);
    println!(
        "kernel UDP multicast to {GROUP}:31000 from {IP_P} (a std::net::UdpSocket on zvp) -> \
         rawqp recv on the emulated mlx5_1 (zve): sent {sent}, received {}, in order {}, \
         lost {}",
        c.received, c.in_order, c.lost
    );
    assert_all_in_order(&c, "kernel multicast");
}

/// A 64-byte IPv4/UDP frame from `from` (MAC, address) to `to`, UDP port 40000 to `port`,
/// whose payload is `seq` (8 bytes, big-endian) and 14 zero bytes. The UDP checksum is 0
/// (none); the IPv4 one is computed with `ip_sum`, else left 0 for the device to compute
/// (`SendFlags::IP_CSUM`).
fn udp_frame(
    from: (&str, Ipv4Addr),
    to: (&str, Ipv4Addr),
    port: u16,
    seq: u64,
    ip_sum: bool,
) -> [u8; 64] {
    let mac = |s: &str| -> Vec<u8> {
        s.split(':')
            .map(|h| u8::from_str_radix(h, 16).unwrap())
            .collect()
    };
    let mut f = [0u8; 64];
    f[0..6].copy_from_slice(&mac(to.0));
    f[6..12].copy_from_slice(&mac(from.0));
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let ip = &mut f[14..34];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&50u16.to_be_bytes());
    ip[6] = 0x40;
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&from.1.octets());
    ip[16..20].copy_from_slice(&to.1.octets());
    if ip_sum {
        let sum = ip
            .chunks(2)
            .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
            .sum::<u32>();
        let sum = (sum & 0xffff) + (sum >> 16);
        ip[10..12].copy_from_slice(&(!((sum & 0xffff) + (sum >> 16)) as u16).to_be_bytes());
    }
    f[34..36].copy_from_slice(&40000u16.to_be_bytes());
    f[36..38].copy_from_slice(&port.to_be_bytes());
    f[38..40].copy_from_slice(&30u16.to_be_bytes());
    f[42..50].copy_from_slice(&seq.to_be_bytes());
    f
}

/// A pcap capture of `n` UDP datagrams to the emulated port (`MAC_E`, `IP_E`:`port`), each
/// with its sequence number as 8 big-endian bytes at the start of its payload.
fn capture(n: u64, port: u16) -> Vec<u8> {
    let mut p = Vec::new();
    // pcap file header: magic, version 2.4, zone, sigfigs, snaplen, LINKTYPE_ETHERNET.
    p.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    p.extend_from_slice(&2u16.to_le_bytes());
    p.extend_from_slice(&4u16.to_le_bytes());
    for w in [0u32, 0, 65535, 1] {
        p.extend_from_slice(&w.to_le_bytes());
    }
    for seq in 0..n {
        // Record header: seconds, microseconds (a datagram each 50 µs), lengths.
        let us = seq * 50;
        for w in [(us / 1_000_000) as u32, (us % 1_000_000) as u32, 64, 64] {
            p.extend_from_slice(&w.to_le_bytes());
        }
        p.extend_from_slice(&udp_frame((MAC_P, IP_P), (MAC_E, IP_E), port, seq, true));
    }
    p
}

/// A capture replayed with tcpreplay on the peer reaches a raw packet QP through a flow rule:
/// all of it, in order.
#[test]
fn tcpreplayed_capture_reaches_a_raw_qp() {
    require("/usr/bin/tcpreplay", "tcpreplay");
    let Some(ns) = netns("tcpreplayed_capture_reaches_a_raw_qp") else {
        return;
    };
    let tree = Tree::new("tcpreplay");
    let pcap = tree.0.join("feed.pcap");
    std::fs::write(&pcap, capture(COUNT, 32000)).unwrap();
    let rx = start_receiver(&ns, &tree, MAC_E, IP_E, 32000);
    // 20000 datagrams a second: the capture's own pace (one each 50 µs).
    let out = ns
        .exec(["tcpreplay", "-i", "zvp", "--pps=20000"])
        .arg(&pcap)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "tcpreplay: {report}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let c = receiver_counts(rx);
    let actual = report
        .lines()
        .find(|l| l.contains("Actual:"))
        .unwrap_or("")
        .trim();
    println!(
        "tcpreplay -i zvp --pps=20000 feed.pcap ({COUNT} UDP datagrams to {IP_E}:32000) -> \
         rawqp recv on the emulated mlx5_1 (zve): tcpreplay {actual}; received {}, in order \
         {}, lost {}",
        c.received, c.in_order, c.lost
    );
    assert!(
        report.contains(&format!("{COUNT} packets")),
        "tcpreplay sent them all: {report}"
    );
    assert_all_in_order(&c, "tcpreplay");
}

/// Frames a raw packet QP sends (UDP checksum and IPv4 header checksum computed by the device)
/// are received by an ordinary kernel UDP socket on the peer: all of them, in order.
#[test]
fn raw_qp_frames_reach_a_kernel_socket() {
    let Some(ns) = netns("raw_qp_frames_reach_a_kernel_socket") else {
        return;
    };
    let tree = Tree::new("send");
    // The device reporting no minimum inline header (libmlx5 inlines nothing: the frame is
    // all in the data segment) and an L2 one (libmlx5 copies the first 18 bytes into the
    // Ethernet segment, through the next segment).
    for (port, inline) in [(33000, "none"), (33001, "l2")] {
        send_to_kernel_socket(&ns, &tree, port, inline);
    }
}

/// A kernel UDP socket on `zvp` at `port` (in the namespace, listening when this returns)
/// that takes up to [`COUNT`] datagrams of 22 bytes, each with its sequence number in its first
/// 8 bytes, until 3 s pass without one: its thread gives how many it received and how many of
/// those came right after the one before.
fn kernel_udp_counter(ns: &Netns, port: u16) -> std::thread::JoinHandle<(u64, u64)> {
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let receiver = ns.spawn_within(move || {
        let s = UdpSocket::bind((IP_P, port)).unwrap();
        // Room for every datagram (root may exceed rmem_max), so that nothing is lost for
        // want of a reader.
        let big: libc::c_int = 64 << 20;
        // SAFETY: setting an integer socket option on our socket.
        unsafe {
            libc::setsockopt(
                std::os::fd::AsRawFd::as_raw_fd(&s),
                libc::SOL_SOCKET,
                libc::SO_RCVBUFFORCE,
                (&raw const big).cast(),
                4,
            )
        };
        s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        ready_tx.send(()).unwrap();
        let (mut received, mut in_order, mut next) = (0u64, 0u64, 0u64);
        let mut buf = [0u8; 64];
        while let Ok(n) = s.recv(&mut buf) {
            assert_eq!(n, 22);
            let seq = u64::from_be_bytes(buf[..8].try_into().unwrap());
            received += 1;
            in_order += u64::from(seq == next);
            next = seq + 1;
            if received == COUNT {
                break;
            }
        }
        (received, in_order)
    });
    ready_rx.recv().unwrap();
    receiver
}

/// The namespace's kernel UDP counters: the two `Udp:` lines of `/proc/net/snmp` (names, then
/// values).
fn udp_counters(ns: &Netns) -> Vec<String> {
    let snmp = ns.exec(["cat", "/proc/net/snmp"]).output().unwrap();
    let snmp = String::from_utf8_lossy(&snmp.stdout);
    snmp.lines()
        .filter(|l| l.starts_with("Udp:"))
        .map(str::to_owned)
        .collect()
}

/// The kernel checked the checksums the device computed: no datagram in error (`InErrors`,
/// the third UDP counter, 0).
fn assert_no_udp_errors(udp: &[String]) {
    assert!(
        udp.get(1)
            .is_some_and(|l| l.split_whitespace().nth(3) == Some("0")),
        "UDP InErrors: {udp:?}"
    );
}

/// `rawqp send` of [`COUNT`] datagrams to a kernel UDP socket on `zvp` at `port`, the device
/// reporting the minimum inline header `inline`: every datagram arrives, in order, and the
/// kernel finds no checksum in error.
fn send_to_kernel_socket(ns: &Netns, tree: &Tree, port: u16, inline: &str) {
    let receiver = kernel_udp_counter(ns, port);
    let ip_e = IP_E.to_string();
    let ip_p = IP_P.to_string();
    let count = COUNT.to_string();
    let port_s = port.to_string();
    let args = [
        "send", "mlx5_1", MAC_E, MAC_P, &ip_e, &ip_p, &port_s, &count,
    ];
    let env = [("ZVERBS_EMU_ETH_MIN_INLINE", inline.to_string())];
    let child = emulated_with(ns, tree, "zve", &env, rawqp(), &args)
        .spawn()
        .unwrap();
    let (ok, out, err) = finish(child, "rawqp send");
    assert!(ok, "rawqp send: {out}{err}");
    let (received, in_order) = receiver.join().unwrap();
    let udp = udp_counters(ns);
    println!(
        "rawqp send on the emulated mlx5_1 (zve, minimum inline header {inline}), {COUNT} UDP \
         datagrams with IBV_SEND_IP_CSUM -> a kernel UDP socket on zvp ({IP_P}:{port}): {}, \
         received {received}, in order {in_order}, lost {}; kernel counters {udp:?}",
        out.trim(),
        COUNT - received
    );
    assert_eq!(out.trim(), format!("sent {COUNT}"));
    assert_eq!((received, in_order), (COUNT, COUNT));
    assert_no_udp_errors(&udp);
}

/// A figure from perftest's result line: the `col`-th number of the line under the header.
fn perftest_row(out: &str, header: &str) -> Vec<f64> {
    let mut lines = out.lines();
    while let Some(l) = lines.next() {
        if l.contains(header) {
            let row = lines.next().unwrap_or("");
            return row
                .split_whitespace()
                .filter_map(|w| w.parse::<f64>().ok())
                .collect();
        }
    }
    Vec::new()
}

/// Runs perftest's `tool` as server on `zve` and client on `zvp` (two emulated ConnectX
/// processes on the two ends of the veth pair) with `extra` arguments; the outputs.
fn perftest_pair(ns: &Netns, tree: &Tree, tool: &str, extra: &[&str]) -> (String, String) {
    require(&format!("/usr/bin/{tool}"), "perftest");
    let mut server_args = vec!["-d", "mlx5_1", "--server", "-B", MAC_E, "-E", MAC_P];
    server_args.extend_from_slice(extra);
    let mut client_args = vec!["-d", "mlx5_1", "--client", "-B", MAC_P, "-E", MAC_E];
    client_args.extend_from_slice(extra);
    let server = emulated(ns, tree, "zve", tool, &server_args)
        .spawn()
        .unwrap();
    // The server's rule must be in place before the client sends (perftest has no
    // out-of-band exchange on raw Ethernet).
    std::thread::sleep(Duration::from_millis(1500));
    let client = emulated(ns, tree, "zvp", tool, &client_args)
        .spawn()
        .unwrap();
    let (cok, cout, cerr) = finish(client, "client");
    let (sok, sout, serr) = finish(server, "server");
    println!("server (on zve): {tool} {}", server_args.join(" "));
    println!("client (on zvp): {tool} {}", client_args.join(" "));
    assert!(sok, "{tool} server failed:\n{sout}\n{serr}");
    assert!(cok, "{tool} client failed:\n{cout}\n{cerr}");
    // Where the server's device put every frame (`ZVERBS_EMU_ETH_STATS`).
    print!("server's device: {serr}");
    (sout, cout)
}

/// perftest's `raw_ethernet_bw`, unmodified: 64-byte frames for 2 seconds from a client on one
/// emulated port to a server on the other, steered by perftest's destination-MAC rule, and
/// again as UDP datagrams steered by its 5-tuple rule (ETH, IPV4_EXT, UDP specs); both sides
/// report a rate. (The server's receive queue of 512 overruns at the client's rate: Ethernet
/// has no flow control, and the device counts the frames it had no WQE for.)
#[test]
fn perftest_raw_ethernet_bw() {
    let Some(ns) = netns("perftest_raw_ethernet_bw") else {
        return;
    };
    let tree = Tree::new("bw");
    let udp = [
        "-J",
        "10.77.0.1",
        "-j",
        "10.77.0.2",
        "-K",
        "5000",
        "-k",
        "6000",
    ];
    for flows in [&[][..], &udp[..]] {
        let mut args = vec!["-s", "64", "-D", "2"];
        args.extend_from_slice(flows);
        let (server, client) = perftest_pair(&ns, &tree, "raw_ethernet_bw", &args);
        let header = "#bytes";
        let s = perftest_row(&server, header);
        let c = perftest_row(&client, header);
        println!("raw_ethernet_bw server (receiver):\n{server}");
        println!("raw_ethernet_bw client (sender):\n{client}");
        // #bytes, #iterations, BW peak, BW average, MsgRate.
        assert!(s.len() >= 5 && c.len() >= 5, "result rows: {s:?} {c:?}");
        println!(
            "raw_ethernet_bw {} on the emulated mlx5_1 (veth ends zvp -> zve): client sent {} \
             frames ({} Mpps), server received {} ({} Mpps, {} MB/s)",
            args.join(" "),
            c[1],
            c[4],
            s[1],
            s[4],
            s[3]
        );
        assert!(s[1] > 0.0 && s[4] > 0.0, "the server received frames");
    }
}

/// perftest's `raw_ethernet_lat`, unmodified: 1000 ping-pongs of 64-byte frames between the
/// two emulated ports; the client reports the latency.
#[test]
fn perftest_raw_ethernet_lat() {
    let Some(ns) = netns("perftest_raw_ethernet_lat") else {
        return;
    };
    let tree = Tree::new("lat");
    let (server, client) =
        perftest_pair(&ns, &tree, "raw_ethernet_lat", &["-s", "64", "-n", "1000"]);
    println!("raw_ethernet_lat server:\n{server}");
    println!("raw_ethernet_lat client:\n{client}");
    // #bytes #iterations t_min t_max t_typical t_avg t_stdev 99% 99.9%
    let c = perftest_row(&client, "#bytes");
    assert!(c.len() >= 6, "result row: {c:?}");
    println!(
        "raw_ethernet_lat -s 64 -n 1000 on the emulated mlx5_1 (veth ends): t_typical {} us, \
         t_avg {} us (half round trip)",
        c[4], c[5]
    );
    assert_eq!(c[1], 1000.0);
}

/// A command in the namespace over the emulator (`tree`'s sysfs, the shim preloaded) that
/// drops `CAP_NET_RAW` from the inheritable and bounding sets first: the program and its
/// arguments follow.
fn without_cap_net_raw(ns: &Netns, tree: &Tree) -> Command {
    require("/usr/bin/setpriv", "util-linux");
    let mut c = ns.exec([
        "setpriv",
        "--inh-caps=-net_raw",
        "--bounding-set=-net_raw",
        "env",
    ]);
    c.arg(format!("SYSFS_PATH={}", tree.0.display()))
        .arg(format!("LD_PRELOAD={}", common::shim().display()));
    c
}

/// Without `CAP_NET_RAW` a raw packet QP is refused with EPERM, as the kernel refuses it.
#[test]
fn a_raw_qp_needs_cap_net_raw() {
    let Some(ns) = netns("a_raw_qp_needs_cap_net_raw") else {
        return;
    };
    let tree = Tree::new("caps");
    // No port interface: the port loops back (the packet socket itself needs CAP_NET_RAW).
    let out = without_cap_net_raw(&ns, &tree)
        .args([
            rawqp(),
            "recv",
            "mlx5_1",
            MAC_E,
            "10.77.0.1",
            "1",
            "1",
            "10",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("ibv_create_qp(RAW_PACKET) failed: Operation not permitted"),
        "{err}"
    );
}

/// The same capture as DPDK's test below ([`FAST`] frames) replayed at tcpreplay's top speed
/// into a raw QP (`rawqp recv`, 8192 receives posted, each posted again once read); the
/// receive rate is printed beside testpmd's.
///
/// Ethernet has no flow control, so top speed promises no delivery: when the receiver falls
/// behind (a busy machine preempts it), the device finds no receive WQE and drops the frame,
/// counting it (`no_wqe`, a ConnectX's `rx_out_of_buffer`), and when the port's thread falls
/// behind, the kernel drops the frame at the port's ring (`ring_dropped`, as a ConnectX's
/// `rx_discards_phy`). What it does promise is checked: every frame tcpreplay sent is either
/// received, once and in order, or counted by one of those two counters, and nothing else
/// happens to it (no rule missed, nothing too long). The paced replay
/// ([`tcpreplayed_capture_reaches_a_raw_qp`]) is where no frame may be lost.
#[test]
fn topspeed_capture_into_a_raw_qp() {
    require("/usr/bin/tcpreplay", "tcpreplay");
    let Some(ns) = netns("topspeed_capture_into_a_raw_qp") else {
        return;
    };
    let tree = Tree::new("fast");
    let pcap = tree.0.join("fast.pcap");
    std::fs::write(&pcap, capture(FAST, 32000)).unwrap();
    let rx = start_receiver_of(&ns, &tree, MAC_E, IP_E, 32000, FAST);
    let out = ns
        .exec(["tcpreplay", "-q", "-i", "zvp", "--topspeed"])
        .arg(&pcap)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "tcpreplay: {report}");
    let (c, span, err) = receiver_report(rx);
    let actual = report.lines().find(|l| l.contains("Actual:")).unwrap_or("");
    // "Actual: N packets (B bytes) sent in S seconds": the frames that left.
    let sent: u64 = actual
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no packet count in tcpreplay's report: {report}"));
    let no_wqe = eth_stat(&err, "device", "no_wqe");
    let ring_dropped = eth_stat(&err, "port", "ring_dropped");
    println!(
        "tcpreplay -q -i zvp --topspeed fast.pcap ({FAST} frames) -> rawqp recv on the emulated \
         mlx5_1 (zve): tcpreplay {}; received {}, in order {}, lost {} (dropped by the device \
         for want of a receive WQE {no_wqe}, by the port's ring {ring_dropped}), {:.0} \
         frames/s from the first to the last",
        actual.trim(),
        c.received,
        c.in_order,
        c.lost,
        c.received as f64 * 1e6 / span.max(1) as f64
    );
    assert_eq!(sent, FAST, "tcpreplay sent the whole capture: {report}");
    assert_eq!(
        (c.received, c.duplicates, c.behind),
        (c.distinct, 0, 0),
        "every frame received once, in order: {c:?}"
    );
    assert_eq!(
        c.received + no_wqe + ring_dropped,
        sent,
        "every frame sent either received or counted as dropped: {c:?}, no_wqe {no_wqe}, \
         ring_dropped {ring_dropped}; {err}"
    );
    for (part, key) in [
        ("device", "no_rule"),
        ("device", "too_long"),
        ("device", "bad"),
        ("port", "too_long"),
    ] {
        assert_eq!(eth_stat(&err, part, key), 0, "{part} {key}: {err}");
    }
}

/// DPDK's `dpdk-testpmd` with the mlx5 driver in its Verbs mode (`dv_flow_en=0`; the
/// emulator refuses DEVX), unmodified, on the emulated port, forwarding in `rxonly` mode while
/// tcpreplay sends [`FAST`] frames at top speed on the peer: every frame is received, with
/// ordinary receive queues and again with striding ones (`mprq_en=1`). The probe reads
/// the PCI function from `SYSFS_PCI_DEVICES` (the tree's `devices/pci0000:00`), finds `mlx5_1`
/// by its `uevent`, and the interface `zve` under its `net/`; the queues are libmlx5's (a
/// Verbs CQ with CQE compression, a work queue, an RSS QP and flow rules on it, a raw packet
/// QP for Tx), the WQEs and CQEs DPDK's own. With testpmd's default 256 receive descriptors,
/// most frames of a top-speed replay find no receive WQE and are dropped (counted by the
/// device as `no_wqe`, as a ConnectX's `rx_out_of_buffer`): 8192 are posted here, as
/// `rawqp` posts.
#[test]
fn dpdk_testpmd_receives_a_tcpreplayed_capture() {
    require("/usr/bin/dpdk-testpmd", "dpdk-dev");
    require("/usr/bin/tcpreplay", "tcpreplay");
    let Some(ns) = netns("dpdk_testpmd_receives_a_tcpreplayed_capture") else {
        return;
    };
    let tree = Tree::new("dpdk");
    let pcap = tree.0.join("fast.pcap");
    std::fs::write(&pcap, capture(FAST, 32000)).unwrap();
    // Ordinary receive queues, then striding ones ("Multi-Packet RQ": a striding work queue
    // and CQEs compressed in the stride-index format, which DPDK decodes itself).
    for devargs in ["dv_flow_en=0", "dv_flow_en=0,mprq_en=1,rxqs_min_mprq=1"] {
        let rx = testpmd_rx(&ns, &tree, &pcap, devargs);
        assert_eq!(rx, FAST, "testpmd ({devargs}) received every frame");
    }
}

/// One `dpdk-testpmd` run in `rxonly` mode with `devargs` while tcpreplay sends `pcap` at
/// top speed, once testpmd forwards; what testpmd received.
fn testpmd_rx(ns: &Netns, tree: &Tree, pcap: &Path, devargs: &str) -> u64 {
    let allow = format!("0000:03:00.1,{devargs}");
    let args = [
        "-l",
        "0-1",
        "--no-huge",
        "-m",
        "512",
        "--no-shconf",
        "--no-telemetry",
        "--iova-mode=va",
        "-a",
        &allow,
        "--",
        "--forward-mode=rxonly",
        "--stats-period",
        "1",
        "--rxd=8192",
        "--total-num-mbufs=32768",
    ];
    // DPDK's PCI scan reads the tree's PCI functions.
    let pci = tree.0.join("devices/pci0000:00").display().to_string();
    let env = [("SYSFS_PCI_DEVICES", pci)];
    let mut cmd = emulated_with(ns, tree, "zve", &env, "dpdk-testpmd", &args);
    let mut child = cmd.spawn().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut log = String::new();
    let started = Instant::now();
    loop {
        let mut line = String::new();
        if out.read_line(&mut line).unwrap() == 0 {
            let (_, _, err) = finish(child, "dpdk-testpmd");
            panic!("dpdk-testpmd ended before forwarding:\n{log}\n{err}");
        }
        log.push_str(&line);
        if line.contains("start packet forwarding") {
            break;
        }
        assert!(
            started.elapsed() < RUN_LIMIT,
            "dpdk-testpmd did not start:\n{log}"
        );
    }
    let startup = started.elapsed();
    let reader = std::thread::spawn(move || {
        let mut rest = String::new();
        out.read_to_string(&mut rest).unwrap();
        rest
    });
    let replay = ns
        .exec(["tcpreplay", "-q", "-i", "zvp", "--topspeed"])
        .arg(pcap)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&replay.stdout).to_string();
    assert!(replay.status.success(), "tcpreplay: {report}");
    // Two statistics periods for the last frames to be counted, then SIGINT: testpmd stops
    // forwarding and prints its totals.
    std::thread::sleep(Duration::from_secs(2));
    // SAFETY: a signal to our own child (`ip netns exec` execs `env`, which execs testpmd,
    // so the child's process is testpmd's).
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let (_, _, err) = finish(child, "dpdk-testpmd");
    let rest = reader.join().unwrap().replace('\u{1b}', "");
    let total = FAST;
    let rx = rest
        .split("Forward statistics for port 0")
        .nth(1)
        .and_then(|s| s.split("RX-packets:").nth(1))
        .and_then(|s| s.split_whitespace().next())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no forward statistics:\n{log}{rest}\n{err}"));
    let peak = rest
        .lines()
        .filter_map(|l| l.trim().strip_prefix("Rx-pps:"))
        .filter_map(|l| l.split_whitespace().next()?.parse::<u64>().ok())
        .max()
        .unwrap_or(0);
    let actual = report.lines().find(|l| l.contains("Actual:")).unwrap_or("");
    let emu_line = err.lines().rfind(|l| l.contains("Ethernet:")).unwrap_or("");
    println!(
        "dpdk-testpmd {} (started in {:.1} s) on the emulated mlx5_1 (zve) <- tcpreplay -i zvp \
         --topspeed fast.pcap ({total} frames): tcpreplay {}; testpmd received {rx} of \
         {total}, peak Rx-pps {peak}\n{}",
        args.join(" "),
        startup.as_secs_f64(),
        actual.trim(),
        emu_line.trim()
    );
    if devargs.contains("mprq_en=1") {
        // The driver's note that it sized the striding queue's strides to its buffers.
        let all = format!("{log}{rest}{err}");
        assert!(
            all.contains("Multi-Packet RQ"),
            "testpmd made no striding queue:\n{all}"
        );
    }
    rx
}

// zverbs itself on the Ethernet function, through rdma-core (the libibverbs fallback): the
// test binary runs again inside the namespace under the emulator, as the program under test.

/// Set in the child run of a zverbs test: which part it plays.
const ZVERBS_CHILD: &str = "ZVERBS_EMU_ETH_ZVERBS_CHILD";

/// This test binary, running test `test` alone inside `ns` under the emulator (port `zve`),
/// with [`ZVERBS_CHILD`] set to `role`.
fn zverbs_child(ns: &Netns, tree: &Tree, test: &str, role: &str) -> Command {
    let me = std::env::current_exe().unwrap().display().to_string();
    emulated_with(
        ns,
        tree,
        "zve",
        &[(ZVERBS_CHILD, role.to_string())],
        &me,
        &[test, "--exact", "--nocapture", "--test-threads", "1"],
    )
}

/// Reads `child`'s stdout until a line `ready`; the rest is collected on a thread.
fn until_ready(child: &mut Child) -> std::thread::JoinHandle<String> {
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        let n = out.read_line(&mut line).unwrap();
        assert!(n > 0, "the child ended before it was ready: {seen}");
        // (libtest prints the test's name before it, on the same line.)
        if line.trim_end().ends_with(" ready") || line.trim() == "ready" {
            break;
        }
        seen.push_str(&line);
    }
    std::thread::spawn(move || {
        let mut s = String::new();
        out.read_to_string(&mut s).unwrap();
        s
    })
}

/// The zverbs receiver (the child): joins [`GROUP`] on the device's netdev with a kernel
/// socket (the kernel then lists the group under `zve`), steers the group's UDP port 31000 to
/// a raw packet QP with a flow rule, says `ready`, and counts [`COUNT`] datagrams by the
/// sequence number at the start of their payload, re-posting each receive. With `rss` through
/// an RSS QP over two ordinary work queues; with `backend` the direct one, each receive queue
/// on a CQ of its own (its completions name it only by libmlx5's user index: the direct
/// poller takes every receive completion of the CQ as that queue's).
fn zverbs_multicast_receiver(rss: bool, backend: zverbs::BackendRequest) {
    use zverbs::{AccessFlags, ContextOptions, FlowRule, RxHash, WqShape};
    let ctx = zverbs::open_device(Some("mlx5_1"), &ContextOptions::default()).unwrap();
    assert_eq!(ctx.netdevs(), ["zve"], "the Ethernet function's netdev");
    let join = ctx.join_multicast(GROUP, None).unwrap();
    assert_eq!(join.interface(), "zve");
    let igmp = std::fs::read_to_string("/proc/net/igmp").unwrap();
    let hex = format!("{:08X}", u32::from_ne_bytes(GROUP.octets()));
    assert!(
        igmp.lines()
            .skip_while(|l| !l.contains("zve"))
            .take_while(|l| l.starts_with('\t') || l.contains("zve"))
            .any(|l| l.contains(&hex)),
        "the kernel lists {GROUP} under zve: {igmp}"
    );
    let pd = ctx.alloc_pd().unwrap();
    let ring = 1024usize;
    let new_cq = || {
        let cq = ctx
            .cq_builder()
            .cqe(2 * ring as u32)
            .backend(backend)
            .build()
            .unwrap();
        assert_eq!(cq.backend().kind, backend_kind(backend));
        cq
    };
    let cq = new_cq();
    // Either a raw packet QP's own receive queue, or the standard set-up: an RSS QP over two
    // ordinary work queues (`ibv_create_wq`, `ibv_create_rwq_ind_table`, `ibv_create_qp_ex`),
    // each with a CQ of its own; the one flow hashes to one of them.
    let rule = FlowRule::multicast(GROUP, 31000);
    let (mut rq, mut pollers, _keep) = if rss {
        let cq2 = new_cq();
        let shape = WqShape::Ordinary { max_sge: 1 };
        let w0 = pd.create_wq(&cq, ring as u32, shape).unwrap();
        let w1 = pd.create_wq(&cq2, ring as u32, shape).unwrap();
        let rss = pd
            .create_rss_qp(1, &[&w0, &w1], &RxHash::default())
            .unwrap();
        let flow = rss.create_flow(&rule).unwrap();
        // The pollers first here (the raw QP's below comes after its queue): on the direct
        // backend a queue taken while its CQ's poller is out reaches it by a new table.
        let pollers = vec![cq.poller().unwrap(), cq2.poller().unwrap()];
        let queues = vec![w0.recv_queue().unwrap(), w1.recv_queue().unwrap()];
        let keep: Box<dyn std::any::Any> = Box::new((rss, flow, w0, w1, cq2));
        (queues, pollers, keep)
    } else {
        let qp = pd
            .qp_builder(&cq, &cq)
            .max_recv_wr(ring as u32)
            .max_send_wr(1)
            .backend(backend)
            .raw_packet(1)
            .build()
            .unwrap();
        qp.ready_raw().unwrap();
        let flow = qp.create_flow(&rule).unwrap();
        let queues = vec![qp.recv_queue().unwrap()];
        let keep: Box<dyn std::any::Any> = Box::new((qp, flow));
        (queues, vec![cq.poller().unwrap()], keep)
    };
    const SLOT: usize = 256;
    let buf = pd
        .alloc_buf(rq.len() * ring * SLOT, AccessFlags::LOCAL_WRITE)
        .unwrap();
    for (q, r) in rq.iter_mut().enumerate() {
        for i in q * ring..(q + 1) * ring {
            r.post(i as u64, buf.slice(i * SLOT..(i + 1) * SLOT).unwrap())
                .unwrap();
        }
    }
    println!("ready");
    let (mut received, mut in_order, mut next, mut dup) = (0u64, 0u64, 0u64, 0u64);
    let mut behind = 0u64;
    let mut seen = vec![false; COUNT as usize];
    let mut per_queue = vec![0u64; rq.len()];
    let deadline = Instant::now() + RUN_LIMIT;
    while received < COUNT && Instant::now() < deadline {
        for (q, p) in pollers.iter_mut().enumerate() {
            let done: Vec<zverbs::Completion> = p.ready().to_vec();
            per_queue[q] += done.len() as u64;
            for c in done {
                let c = c.ok().unwrap();
                let slot = c.wr_id as usize;
                // The frame: Ethernet 14, IPv4 20, UDP 8, then the payload.
                assert_eq!(c.byte_len, 42 + 22, "{c:?}");
                let mut seq = [0u8; 8];
                buf.read(slot * SLOT + 42, &mut seq).unwrap();
                let seq = u64::from_be_bytes(seq);
                received += 1;
                in_order += u64::from(seq == next);
                behind += u64::from(seq < next);
                next = seq + 1;
                match seen.get_mut(seq as usize) {
                    Some(s) if *s => dup += 1,
                    Some(s) => *s = true,
                    None => panic!("sequence number {seq} out of range"),
                }
                rq[q]
                    .post(c.wr_id, buf.slice(slot * SLOT..(slot + 1) * SLOT).unwrap())
                    .unwrap();
            }
        }
    }
    let distinct = seen.iter().filter(|s| **s).count() as u64;
    println!("per queue {per_queue:?}");
    println!(
        "received {received} distinct {distinct} in_order {in_order} out_of_order {} \
         duplicates {dup} lost {} behind {behind}",
        received - in_order,
        COUNT - distinct
    );
    drop(join);
}

/// UDP multicast sent by the kernel's socket stack on the peer reaches zverbs on the emulated
/// port (rdma-core) after a `McastMembership` join on the device's netdev and a multicast
/// flow rule, into a raw packet QP and into an RSS QP over two work queues, on the libibverbs
/// fallback and on the direct backend: every datagram, in order, none lost.
#[test]
fn zverbs_receives_kernel_multicast_after_a_join_and_a_rule() {
    const NAME: &str = "zverbs_receives_kernel_multicast_after_a_join_and_a_rule";
    if let Some(role) = std::env::var_os(ZVERBS_CHILD) {
        let role = role.to_string_lossy();
        let backend = if role.starts_with("direct") {
            zverbs::BackendRequest::Direct
        } else {
            zverbs::BackendRequest::Verbs
        };
        zverbs_multicast_receiver(role.ends_with("rss"), backend);
        return;
    }
    let Some(ns) = netns(NAME) else { return };
    let tree = Tree::new("zverbs-mcast");
    for role in ["raw", "rss", "direct-raw", "direct-rss"] {
        zverbs_receives_kernel_multicast(&ns, &tree, NAME, role);
    }
}

fn backend_kind(b: zverbs::BackendRequest) -> zverbs::BackendKind {
    match b {
        zverbs::BackendRequest::Direct => zverbs::BackendKind::Direct,
        _ => zverbs::BackendKind::Verbs,
    }
}

/// On the direct backend an ordinary Ethernet receive queue's completions name it only by
/// the user index libmlx5 chose, so its CQ serves it alone: a second receive queue on that
/// CQ (a raw packet QP's, a work queue's) is refused with `Error::SoleReceiverCq`, and so is
/// taking the receive queue of a raw QP whose CQ already serves another queue; the refused
/// CQ still serves what it served, and once the queue is gone its CQ takes others again.
#[test]
fn zverbs_direct_ethernet_receives_need_a_cq_of_their_own() {
    const NAME: &str = "zverbs_direct_ethernet_receives_need_a_cq_of_their_own";
    if std::env::var_os(ZVERBS_CHILD).is_some() {
        direct_receive_cq_refusals();
        return;
    }
    let Some(ns) = netns(NAME) else { return };
    let tree = Tree::new("zverbs-sole");
    let child = zverbs_child(&ns, &tree, NAME, "refusals").spawn().unwrap();
    let (ok, out, err) = finish(child, "zverbs refusals");
    assert!(ok, "{out}{err}");
    assert!(out.contains("refusals checked"), "{out}");
}

/// The child of [`zverbs_direct_ethernet_receives_need_a_cq_of_their_own`].
fn direct_receive_cq_refusals() {
    use zverbs::{BackendRequest, ContextOptions, Error, WqShape};
    let ctx = zverbs::open_device(Some("mlx5_1"), &ContextOptions::default()).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let direct_cq = || {
        ctx.cq_builder()
            .cqe(4096)
            .backend(BackendRequest::Direct)
            .build()
            .unwrap()
    };
    let sole = |e: Error, what: &str| {
        assert!(
            matches!(e, Error::SoleReceiverCq { .. }) && e.to_string().contains(what),
            "{e}"
        );
    };
    let ordinary = WqShape::Ordinary { max_sge: 1 };
    // One raw QP, its sends and receives on one CQ: its receive queue takes the CQ.
    let cq = direct_cq();
    let qp = pd.create_raw_qp(1, &cq, &cq, Default::default()).unwrap();
    let rq = qp.recv_queue().unwrap();
    let mut poller = cq.poller().unwrap();
    // A second receive queue on that CQ: refused, as a raw QP and as a work queue.
    sole(
        pd.create_raw_qp(1, &cq, &cq, Default::default())
            .unwrap_err(),
        "create another CQ for this queue",
    );
    let other = direct_cq();
    sole(
        pd.create_raw_qp(1, &other, &cq, Default::default())
            .unwrap_err(),
        "create another CQ for this queue",
    );
    sole(
        pd.create_wq(&cq, 64, ordinary).unwrap_err(),
        "create another CQ for this queue",
    );
    // A CQ that serves two raw QPs already: neither's receive queue may take it.
    let shared = direct_cq();
    let a = pd
        .create_raw_qp(1, &shared, &shared, Default::default())
        .unwrap();
    let b = pd
        .create_raw_qp(1, &shared, &shared, Default::default())
        .unwrap();
    sole(a.recv_queue().unwrap_err(), "create a CQ for it alone");
    sole(b.recv_queue().unwrap_err(), "create a CQ for it alone");
    // Nor a work queue's, on a CQ a raw QP holds entries of.
    let wq = pd.create_wq(&other, 64, ordinary).unwrap();
    let c = pd
        .create_raw_qp(1, &other, &other, Default::default())
        .unwrap();
    sole(wq.recv_queue().unwrap_err(), "create a CQ for it alone");
    // With the refused QP gone, the work queue's receive queue takes its CQ.
    drop(c);
    let _wq_rq = wq.recv_queue().unwrap();
    // The first CQ still serves its QP, and takes another queue once the QP is gone.
    assert!(poller.ready().is_empty());
    drop((rq, poller, qp));
    let again = pd.create_raw_qp(1, &cq, &cq, Default::default()).unwrap();
    let _again_rq = again.recv_queue().unwrap();
    drop((a, b));
    println!("refusals checked");
}

/// One run of [`zverbs_receives_kernel_multicast_after_a_join_and_a_rule`]: the child as
/// `role` (`raw`: a raw packet QP's own receive queue; `rss`: an RSS QP over two work queues;
/// both on the libibverbs fallback, and as `direct-raw`, `direct-rss` on the direct backend).
fn zverbs_receives_kernel_multicast(ns: &Netns, tree: &Tree, name: &str, role: &str) {
    let mut child = zverbs_child(ns, tree, name, role).spawn().unwrap();
    let rest = until_ready(&mut child);
    let sent = send_kernel_multicast(ns);
    let (ok, _, err) = finish(child, "zverbs multicast receiver");
    let out = rest.join().unwrap();
    assert!(ok, "the zverbs receiver failed: {out}{err}");
    let line = out
        .lines()
        .find(|l| l.starts_with("received "))
        .unwrap_or_else(|| panic!("no counts in {out}"));
    let c = parse_counts(line);
    let target = if role.ends_with("rss") {
        "an RSS QP over two work queues"
    } else {
        "a raw packet QP"
    };
    let backend = if role.starts_with("direct") {
        "direct backend, a CQ of its own for each receive queue"
    } else {
        "libibverbs fallback"
    };
    println!(
        "kernel UDP multicast to {GROUP}:31000 from {IP_P} (a std::net::UdpSocket on zvp) -> \
         zverbs (McastMembership on zve, FlowRule::multicast, {target}, {backend}) on the \
         emulated mlx5_1: sent {sent}, received {}, in order {}, lost {}",
        c.received, c.in_order, c.lost
    );
    assert_all_in_order(&c, "kernel multicast into zverbs");
}

/// A UDP/IPv4 frame from the emulated port (`MAC_E`, [`IP_E`]) to the peer's socket (`MAC_P`,
/// [`IP_P`]:`port`) whose payload is `seq` (8 bytes, big-endian) and 14 zero bytes; both
/// checksums 0, for the device to compute (`SendFlags::IP_CSUM`). 64 bytes.
fn frame_to_peer(port: u16, seq: u64) -> [u8; 64] {
    udp_frame((MAC_E, IP_E), (MAC_P, IP_P), port, seq, false)
}

/// The zverbs sender (the child): a raw packet QP on the emulated port sends [`COUNT`]
/// frames to the peer's UDP socket at `port`, each signaled, at most 128 outstanding, the
/// device computing the checksums: the first half whole frames
/// ([`zverbs::SendQueue::send_frame`]), the second half a prepared frame (the 42 header bytes
/// once, each post its 22-byte payload, [`zverbs::SendQueue::post_frame`]).
fn zverbs_frame_sender(port: u16, backend: zverbs::BackendRequest) {
    use zverbs::{AccessFlags, ContextOptions, FrameLengths, QpCaps, SendFlags};
    let ctx = zverbs::open_device(Some("mlx5_1"), &ContextOptions::default()).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.cq_builder().cqe(512).backend(backend).build().unwrap();
    let caps = QpCaps {
        max_send_wr: 256,
        max_recv_wr: 1,
        // A prepared frame on the fallback is an inline SEND of the headers and the payload.
        max_send_sge: 2,
        ..QpCaps::default()
    };
    let qp = pd
        .qp_builder(&cq, &cq)
        .caps(caps)
        .backend(backend)
        .raw_packet(1)
        .build()
        .unwrap();
    qp.ready_raw().unwrap();
    println!("backend: {}", qp.backend());
    const SLOTS: u64 = 256;
    let buf = pd
        .alloc_buf(SLOTS as usize * 64, AccessFlags::LOCAL_WRITE)
        .unwrap();
    let mut sq = qp.send_queue().unwrap();
    let flags = SendFlags::SIGNALED | SendFlags::IP_CSUM;
    let prepared = sq
        .prepare_frame(&frame_to_peer(port, 0)[..42], flags, FrameLengths::IPV4_UDP)
        .unwrap();
    let mut poller = cq.poller().unwrap();
    let (mut posted, mut done) = (0u64, 0u64);
    let deadline = Instant::now() + RUN_LIMIT;
    while done < COUNT {
        assert!(Instant::now() < deadline, "sent {done} of {COUNT}");
        while posted < COUNT && posted - done < 128 {
            let slot = (posted % SLOTS) as usize * 64;
            let frame = frame_to_peer(port, posted);
            buf.write(slot, &frame).unwrap();
            if posted < COUNT / 2 {
                sq.send_frame(posted, buf.slice(slot..slot + 64).unwrap(), flags)
                    .unwrap();
            } else {
                sq.post_frame(&prepared, posted, buf.slice(slot + 42..slot + 64).unwrap())
                    .unwrap();
            }
            posted += 1;
        }
        for c in poller.ready() {
            let c = c.ok().unwrap();
            assert_eq!(c.wr_id, done, "send completions in order");
            done += 1;
        }
    }
    println!("sent {done}");
}

/// Frames zverbs sends from a raw packet QP on the emulated port (rdma-core, the libibverbs
/// fallback) are received by an ordinary kernel UDP socket on the peer: all of them, in order.
#[test]
fn zverbs_frames_reach_a_kernel_socket() {
    const NAME: &str = "zverbs_frames_reach_a_kernel_socket";
    const PORT: u16 = 33100;
    if let Some(role) = std::env::var_os(ZVERBS_CHILD) {
        let backend = if role == "send-direct" {
            zverbs::BackendRequest::Direct
        } else {
            zverbs::BackendRequest::Verbs
        };
        zverbs_frame_sender(PORT, backend);
        return;
    }
    let Some(ns) = netns(NAME) else { return };
    let tree = Tree::new("zverbs-send");
    for role in ["send", "send-direct"] {
        zverbs_frames_to_kernel_socket(&ns, &tree, NAME, PORT, role);
    }
}

/// One run of [`zverbs_frames_reach_a_kernel_socket`]: the child as `role` (`send`: the
/// libibverbs fallback; `send-direct`: the direct backend's Ethernet send queue over the QP
/// libmlx5 made).
fn zverbs_frames_to_kernel_socket(ns: &Netns, tree: &Tree, name: &str, port: u16, role: &str) {
    let receiver = kernel_udp_counter(ns, port);
    let child = zverbs_child(ns, tree, name, role).spawn().unwrap();
    let (ok, out, err) = finish(child, "zverbs sender");
    assert!(ok, "the zverbs sender failed: {out}{err}");
    let (received, in_order) = receiver.join().unwrap();
    let udp = udp_counters(ns);
    println!(
        "zverbs (a raw packet QP, {}, IBV_SEND_IP_CSUM; half whole frames, half a prepared \
         frame) on the emulated mlx5_1 (zve), {COUNT} UDP datagrams -> a kernel UDP socket \
         on zvp ({IP_P}:{port}): received {received}, in order {in_order}, \
         lost {}; kernel counters {udp:?}",
        out.lines()
            .find_map(|l| l.split("backend: ").nth(1))
            .and_then(|b| b.split(' ').next())
            .map_or("?", |b| if b == "verbs" {
                "libibverbs fallback"
            } else {
                "direct backend"
            }),
        COUNT - received
    );
    assert!(out.contains(&format!("sent {COUNT}")), "{out}");
    assert_eq!((received, in_order), (COUNT, COUNT));
    assert_no_udp_errors(&udp);
}

/// The `market_data` example of `zverbs-tools`, built now in this test's profile.
fn market_data() -> &'static str {
    static BIN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        let exe = std::env::current_exe().unwrap();
        let profile_dir = exe.parent().and_then(|d| d.parent()).unwrap().to_path_buf();
        let release = profile_dir.file_name().is_some_and(|n| n == "release");
        let mut c = Command::new(env!("CARGO"));
        c.args([
            "build",
            "-q",
            "-p",
            "zverbs-tools",
            "--example",
            "market_data",
        ]);
        if release {
            c.arg("--release");
        }
        let st = c.status().expect("cargo build --example market_data");
        assert!(st.success(), "building the market_data example");
        profile_dir
            .join("examples/market_data")
            .display()
            .to_string()
    })
}

/// The `market_data` example, unmodified, on the emulated ConnectX's Ethernet function
/// (direct backend: a striding work queue created through `mlx5dv_create_wq`, polled in
/// place, device timestamps) fed by an ordinary kernel UDP socket on the peer with the
/// example's feed header (sequence number, send time): every datagram, in order, none lost,
/// and its latency percentiles.
#[test]
fn the_market_data_example_receives_a_kernel_feed() {
    let Some(ns) = netns("the_market_data_example_receives_a_kernel_feed") else {
        return;
    };
    let tree = Tree::new("market-data");
    let count = COUNT.to_string();
    let args = [
        "--device",
        "mlx5_1",
        "--group",
        "239.1.2.3",
        "--port",
        "31000",
        "-C",
        &count,
    ];
    let mut child = emulated(&ns, &tree, "zve", market_data(), &args)
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        let n = out.read_line(&mut line).unwrap();
        assert!(n > 0, "market_data ended before its queue was up: {seen}");
        seen.push_str(&line);
        if line.contains("striding queue of") || line.contains("receive queue (libibverbs") {
            break;
        }
    }
    let rest = std::thread::spawn(move || {
        let mut s = String::new();
        out.read_to_string(&mut s).unwrap();
        s
    });
    let sent = ns.within(|| {
        let s = UdpSocket::bind((IP_P, 0)).unwrap();
        s.set_multicast_ttl_v4(1).unwrap();
        let mut d = [0u8; 22];
        for seq in 0..COUNT {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64;
            d[..8].copy_from_slice(&seq.to_be_bytes());
            d[8..16].copy_from_slice(&now.to_be_bytes());
            s.send_to(&d, (GROUP, 31000)).unwrap();
            if seq % 64 == 63 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        COUNT
    });
    let (ok, _, err) = finish(child, "market_data");
    let out = seen + &rest.join().unwrap();
    println!("{}", out.trim_end());
    assert!(ok, "market_data failed: {out}{err}");
    let want = format!("received {COUNT} in_order {COUNT} gaps 0 lost 0 late 0");
    assert!(out.contains(&want), "{out}");
    assert!(out.contains("device timestamps"), "{out}");
    println!(
        "kernel UDP multicast from {IP_P} ({sent} datagrams, 8-byte sequence + send time) -> \
         market_data on the emulated mlx5_1 (joined on zve, striding queue, direct backend): \
         {want}"
    );
}

/// zverbs without `CAP_NET_RAW` (dropped by `setpriv` from the bounding set, so root's
/// effective set lacks it after exec): a raw packet QP is refused with
/// `Error::NeedsCapNetRaw` before the kernel is asked, naming the capability.
#[test]
fn zverbs_without_cap_net_raw_says_which_capability() {
    const NAME: &str = "zverbs_without_cap_net_raw_says_which_capability";
    if std::env::var_os(ZVERBS_CHILD).is_some() {
        assert_eq!(zverbs::has_cap_net_raw(), Some(false));
        let ctx = zverbs::open_device(Some("mlx5_1"), &Default::default()).unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.cq_builder().build().unwrap();
        let e = pd
            .create_raw_qp(1, &cq, &cq, Default::default())
            .unwrap_err();
        // Named by the library's check (`ibv_create_qp`), before the kernel's EPERM (which
        // maps to the same error, naming `mlx5dv_create_qp` on the direct backend).
        assert!(
            matches!(
                e,
                zverbs::Error::NeedsCapNetRaw {
                    verb: "ibv_create_qp"
                }
            ),
            "{e}"
        );
        println!("{e}");
        assert!(e.to_string().contains("CAP_NET_RAW"));
        return;
    }
    let Some(ns) = netns(NAME) else { return };
    let tree = Tree::new("zverbs-caps");
    let me = std::env::current_exe().unwrap();
    let out = without_cap_net_raw(&ns, &tree)
        .arg(format!("{ZVERBS_CHILD}=caps"))
        .arg(&me)
        .args([NAME, "--exact", "--nocapture", "--test-threads", "1"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}{err}");
    assert!(text.contains("1 passed"), "the child ran: {text}");
    let line = text
        .lines()
        .find(|l| l.contains("CAP_NET_RAW"))
        .unwrap_or_default();
    println!(
        "zverbs without CAP_NET_RAW on the emulated mlx5_1: {}",
        line.trim()
    );
}
