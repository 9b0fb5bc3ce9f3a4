//! `zverbs-perf`: perftest-like latency and bandwidth tests over zverbs.
//!
//! ```text
//! zverbs-perf <test> [server-host] [options]
//! ```
//!
//! Without a host it is the server; with one, the client. Both sides run the same test with
//! the same size and iteration count (checked during the exchange). Tests: `write_lat`,
//! `send_lat`, `read_lat`, `atomic_lat`, `write_bw`, `send_bw`, and on Ethernet `raw_lat` and
//! `raw_bw` (raw packet QPs, as perftest's `raw_ethernet_lat`/`raw_ethernet_bw`: [`raw`]).
//! Run `zverbs-perf --help`.
//!
//! Every wait ends: on what it waits for, on the peer's failure (the exchange connection
//! closes, or in a one-process run the other side fails), or after `--timeout` seconds without
//! progress. Arguments out of range are refused before anything is allocated.

#[cfg(feature = "pmix")]
mod all2all;
mod raw;
mod run;
mod watch;

use std::ffi::OsString;
use std::net::{IpAddr, Ipv4Addr, ToSocketAddrs};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use zverbs::BackendRequest;
use zverbs_tools::args::{self, Arg::*, Parser};
use zverbs_tools::device;

/// A test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Test {
    WriteLat,
    SendLat,
    ReadLat,
    AtomicLat,
    WriteBw,
    SendBw,
    RawLat,
    RawBw,
}

impl Test {
    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "write_lat" => Test::WriteLat,
            "send_lat" => Test::SendLat,
            "read_lat" => Test::ReadLat,
            "atomic_lat" => Test::AtomicLat,
            "write_bw" => Test::WriteBw,
            "send_bw" => Test::SendBw,
            "raw_lat" => Test::RawLat,
            "raw_bw" => Test::RawBw,
            _ => return None,
        })
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Test::WriteLat => "write_lat",
            Test::SendLat => "send_lat",
            Test::ReadLat => "read_lat",
            Test::AtomicLat => "atomic_lat",
            Test::WriteBw => "write_bw",
            Test::SendBw => "send_bw",
            Test::RawLat => "raw_lat",
            Test::RawBw => "raw_bw",
        }
    }

    pub(crate) fn title(self) -> &'static str {
        match self {
            Test::WriteLat => "RDMA_Write Latency Test",
            Test::SendLat => "Send Latency Test",
            Test::ReadLat => "RDMA_Read Latency Test",
            Test::AtomicLat => "Atomic FETCH_AND_ADD Latency Test",
            Test::WriteBw => "RDMA_Write BW Test",
            Test::SendBw => "Send BW Test",
            Test::RawLat => "Raw Ethernet Send Latency Test",
            Test::RawBw => "Raw Ethernet Send BW Test",
        }
    }

    /// Whether a latency is a full round trip (READ and atomics, as perftest reports them)
    /// rather than half of one.
    pub(crate) fn is_round_trip(self) -> bool {
        matches!(self, Test::ReadLat | Test::AtomicLat)
    }

    pub(crate) fn is_latency(self) -> bool {
        !matches!(self, Test::WriteBw | Test::SendBw | Test::RawBw)
    }

    /// Whether the test runs between raw packet QPs (Ethernet frames, no connection).
    pub(crate) fn is_raw(self) -> bool {
        matches!(self, Test::RawLat | Test::RawBw)
    }
}

/// Command-line options.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Opts {
    pub(crate) test: Test,
    pub(crate) server: Option<String>,
    pub(crate) device: Option<String>,
    pub(crate) ib_port: Option<u8>,
    pub(crate) gid_index: Option<u32>,
    pub(crate) port: u16,
    /// The address the server listens on for the exchange: every interface, or loopback
    /// only when both sides run in this process.
    pub(crate) listen: IpAddr,
    pub(crate) size: usize,
    pub(crate) iters: usize,
    pub(crate) warmup: usize,
    pub(crate) tx_depth: u32,
    pub(crate) rx_depth: u32,
    pub(crate) inline: u32,
    pub(crate) mtu: zverbs::Mtu,
    pub(crate) cm: bool,
    /// `send_lat` over UD QPs (`--ud`).
    pub(crate) ud: bool,
    pub(crate) backend: Option<BackendRequest>,
    pub(crate) histogram: Option<String>,
    /// `--hw-ts`: the latency measured from the NIC's completion timestamps too.
    pub(crate) hw_ts: bool,
    pub(crate) hugepages: bool,
    pub(crate) timeout: Duration,
    /// Sleep on the CQ's completion channel instead of spinning (`--events`, as perftest's
    /// `-e`).
    pub(crate) events: bool,
    /// `raw_*`: this side's MAC (`-B`, as perftest's), else the device's interface's.
    pub(crate) source_mac: Option<[u8; 6]>,
    /// `raw_*`: the peer's MAC (`-E`), else the one it tells over the exchange.
    pub(crate) dest_mac: Option<[u8; 6]>,
    /// `raw_bw`: how long the client sends (`-D`), at most `--iters` frames.
    pub(crate) duration: Option<Duration>,
    /// `raw_bw` server without a peer: counts the frames steered to it (`--receive-only`).
    pub(crate) receive_only: bool,
}

/// The largest message: 2 GiB, InfiniBand's limit (a port may allow less: checked once the
/// device is open).
pub(crate) const MAX_SIZE: usize = 1 << 31;
/// The most iterations (and warm-up iterations).
pub(crate) const MAX_ITERS: usize = 1_000_000_000;
/// The deepest send and receive queues asked for (devices allow less; they say so).
pub(crate) const MAX_DEPTH: u32 = 1 << 16;

const USAGE: &str = "\
usage: zverbs-perf <test> [server-host] [options]
       zverbs-perf devices     (list devices, ports, GIDs and the backend each would get)
       mpirun -n N zverbs-perf all2all [options]   (every process writes to every other;
                               `zverbs-perf all2all --help`)

tests:  write_lat send_lat read_lat atomic_lat write_bw send_bw
        raw_lat raw_bw  (UDP frames between raw packet QPs on an Ethernet port, as
                        perftest's raw_ethernet_lat / raw_ethernet_bw)
        (no host: run as the server; with a host: run as the client)

options:
  -d, --device NAME       RDMA device (default: ZVERBS_DEVICE, else the first NIC; without a
                          NIC and without a server host, the software device zverbs_sim0)
  -i, --ib-port N         device port (default: the first active one)
  -g, --gid-idx N         local GID index (default: RoCE v2 with IPv4 on Ethernet, none on IB)
  -p, --port N            TCP / rdma_cm port (default 18515)
  -s, --size BYTES        message size, 1 to 2147483648 (default 2 for latency, 65536 for
                          bandwidth)
  -n, --iters N           iterations, 1 to 1000000000 (default 1000 for latency, 5000 for
                          bandwidth)
      --warmup N          latency iterations run before measuring (default 100)
  -t, --tx-depth N        send queue depth / bandwidth window, 2 to 65536 (default 128)
  -r, --rx-depth N        receives kept posted, 2 to 65536 (default 128); a SEND that
                          finds none posted is sent again until one is (RNR retry 7, as
                          perftest's)
  -I, --inline N          largest inline message (default 64; 0 disables inline)
  -m, --mtu BYTES         path MTU: 256 512 1024 2048 4096 (default 1024)
      --cm                connect through rdma_cm instead of the TCP exchange
      --ud                send_lat between UD QPs (datagrams: SIZE at most the port's MTU;
                          as ib_send_lat -c UD)
      --backend B         auto, direct or verbs (default: ZVERBS_BACKEND, else auto)
      --histogram FILE    write the latency histogram (FILE.svg or FILE.csv)
      --hw-ts             send_lat, read_lat, atomic_lat: also the latency measured by the
                          NIC, from its completion timestamps (the interval between
                          consecutive completions the client waits for; halved for send_lat)
      --hugepages         put the buffer on hugepages
  -e, --events            sleep on CQ events instead of spinning (as perftest's -e)
      --timeout SECS      how long to wait for the peer: the whole exchange, rdma_cm, and
                          any one message of the test (default 30)
  -B, --source-mac MAC    raw_*: this side's MAC, which its flow rule steers (default: the
                          device's network interface's; 02:00:00:00:00:01 for a server and
                          ..:02 for a client on the software device)
  -E, --dest-mac MAC      raw_*: where the frames go (default: the peer's source MAC, told
                          over the TCP exchange)
  -D, --duration SECS     raw_bw: the client sends for this long (at most --iters frames)
      --receive-only      raw_bw server without a zverbs-perf client: counts the frames its
                          rule steers to it (any sender: tcpreplay, perftest) until 0.5 s
                          passes without one; no TCP exchange
  -h, --help              this text

raw_lat and raw_bw: SIZE is the whole frame without the FCS, 60 to 9014 (default 64);
raw_bw sends 1000000 frames by default; -r is the receives kept posted (default 512, as
perftest's). A raw packet QP needs CAP_NET_RAW on a NIC (root).

Latency is timed as perftest times it: from one iteration's post to the next one's, halved
for write_lat and send_lat (half round trips), whole for read_lat and atomic_lat (full round
trips). The server of read_lat, atomic_lat and write_bw has nothing to answer: after each
empty poll it sleeps in the TCP exchange connection (up to 50 ms; 1 ms with --cm) until the
client's closing message, as perftest's server waits in its own, leaving the cores to the
client and the device.
";

/// Parses the command line (without the program name). `Err("")` asks for the usage text.
pub(crate) fn parse_args<I>(args: I) -> Result<Opts, String>
where
    I: IntoIterator,
    I::Item: Into<OsString>,
{
    let mut p = Parser::from_args(args);
    let mut test = None;
    let mut size = None;
    let mut iters = None;
    let mut rx_depth = None;
    let mut o = Opts {
        test: Test::WriteLat,
        server: None,
        device: None,
        ib_port: None,
        gid_index: None,
        port: zverbs::connect::exchange::DEFAULT_PORT,
        listen: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        size: 0,
        iters: 0,
        warmup: 100,
        tx_depth: 128,
        rx_depth: 128,
        inline: 64,
        mtu: zverbs::Mtu::M1024,
        cm: false,
        ud: false,
        backend: None,
        histogram: None,
        hw_ts: false,
        hugepages: false,
        timeout: Duration::from_secs(30),
        events: false,
        source_mac: None,
        dest_mac: None,
        duration: None,
        receive_only: false,
    };
    while let Some(arg) = p.next().map_err(args::explain)? {
        let f = args::flag(&arg);
        match arg {
            Short('h') | Long("help") => return Err(String::new()),
            Short('d') | Long("device") => o.device = Some(args::value(&mut p, &f)?),
            Short('i') | Long("ib-port") => o.ib_port = Some(args::number(&mut p, &f)?),
            Short('g') | Long("gid-idx") => o.gid_index = Some(args::number(&mut p, &f)?),
            Short('p') | Long("port") => o.port = args::in_range(&mut p, &f, 1, u16::MAX)?,
            Short('s') | Long("size") => size = Some(args::in_range(&mut p, &f, 1, MAX_SIZE)?),
            Short('n') | Long("iters") => iters = Some(args::in_range(&mut p, &f, 1, MAX_ITERS)?),
            Long("warmup") => o.warmup = args::in_range(&mut p, &f, 0, MAX_ITERS)?,
            Short('t') | Long("tx-depth") => o.tx_depth = args::in_range(&mut p, &f, 2, MAX_DEPTH)?,
            Short('r') | Long("rx-depth") => {
                rx_depth = Some(args::in_range(&mut p, &f, 2, MAX_DEPTH)?);
            }
            Short('I') | Long("inline") => o.inline = args::number(&mut p, &f)?,
            Short('m') | Long("mtu") => {
                let b: u32 = args::number(&mut p, &f)?;
                o.mtu = zverbs::Mtu::from_bytes(b)
                    .ok_or_else(|| format!("{f} {b}: use 256, 512, 1024, 2048 or 4096"))?;
            }
            Long("cm") => o.cm = true,
            Long("ud") => o.ud = true,
            Long("hw-ts") => o.hw_ts = true,
            Long("backend") => {
                let v = args::value(&mut p, &f)?;
                o.backend = Some(BackendRequest::parse(&v).map_err(|e| e.to_string())?);
            }
            Long("histogram") => {
                let file = args::value(&mut p, &f)?;
                if !(file.ends_with(".svg") || file.ends_with(".csv")) {
                    return Err(format!("{f} {file}: the name must end in .svg or .csv"));
                }
                o.histogram = Some(file);
            }
            Long("hugepages") => o.hugepages = true,
            Short('e') | Long("events") => o.events = true,
            Long("timeout") => {
                o.timeout = Duration::from_secs(args::in_range(&mut p, &f, 1, 24 * 3600)?);
            }
            Short('B') | Long("source-mac") => o.source_mac = Some(mac(&mut p, &f)?),
            Short('E') | Long("dest-mac") => o.dest_mac = Some(mac(&mut p, &f)?),
            Long("receive-only") => o.receive_only = true,
            Short('D') | Long("duration") => {
                o.duration = Some(Duration::from_secs(args::in_range(
                    &mut p,
                    &f,
                    1,
                    24 * 3600,
                )?));
            }
            Value(v) if test.is_none() => {
                let s = args::string(v)?;
                test = Some(Test::parse(&s).ok_or_else(|| format!("unknown test `{s}`"))?);
            }
            Value(v) if o.server.is_none() => o.server = Some(args::string(v)?),
            arg => return Err(args::unexpected(arg)),
        }
    }
    o.test = test.ok_or(
        "which test? (write_lat, send_lat, read_lat, atomic_lat, write_bw, send_bw, raw_lat, \
         raw_bw)",
    )?;
    if o.test.is_raw() {
        return raw_args(o, size, iters, rx_depth);
    }
    if o.source_mac.is_some() || o.dest_mac.is_some() || o.duration.is_some() || o.receive_only {
        return Err("-B, -E, -D and --receive-only are for raw_lat and raw_bw".into());
    }
    o.size = size.unwrap_or(if o.test.is_latency() { 2 } else { 65536 });
    o.iters = iters.unwrap_or(if o.test.is_latency() { 1000 } else { 5000 });
    o.rx_depth = rx_depth.unwrap_or(o.rx_depth);
    if o.test == Test::AtomicLat {
        o.size = 8;
    }
    if o.ud && (o.test != Test::SendLat || o.cm) {
        return Err("--ud is for send_lat over the TCP exchange (without --cm)".into());
    }
    if o.histogram.is_some() && !o.test.is_latency() {
        return Err("--histogram is for latency tests".into());
    }
    if o.hw_ts && !matches!(o.test, Test::SendLat | Test::ReadLat | Test::AtomicLat) {
        return Err(
            "--hw-ts is for send_lat, read_lat and atomic_lat (a completion every iteration)"
                .into(),
        );
    }
    if o.events && o.test != Test::SendLat {
        return Err(
            "--events is for send_lat (the other tests wait on memory or keep a \
                    window of requests in flight)"
                .into(),
        );
    }
    Ok(o)
}

/// A MAC address option's value.
fn mac(p: &mut Parser, f: &str) -> Result<[u8; 6], String> {
    let v = args::value(p, f)?;
    raw::parse_mac(&v).ok_or_else(|| format!("{f} {v}: not a MAC address (aa:bb:cc:dd:ee:ff)"))
}

/// The rest of the options of `raw_lat` and `raw_bw`, and what they refuse.
fn raw_args(
    mut o: Opts,
    size: Option<usize>,
    iters: Option<usize>,
    rx_depth: Option<u32>,
) -> Result<Opts, String> {
    o.size = size.unwrap_or(64);
    if !(raw::MIN_FRAME..=raw::MAX_FRAME).contains(&o.size) {
        return Err(format!(
            "-s {}: a raw Ethernet frame is {} to {} bytes (without the FCS)",
            o.size,
            raw::MIN_FRAME,
            raw::MAX_FRAME
        ));
    }
    o.iters = iters.unwrap_or(if o.test.is_latency() { 1000 } else { 1_000_000 });
    // perftest's receive depth for SEND tests.
    o.rx_depth = rx_depth.unwrap_or(512);
    if o.cm || o.ud || o.hw_ts || o.events || o.hugepages {
        return Err(format!(
            "{} takes none of --cm, --ud, --hw-ts, --events, --hugepages (raw packet QPs have \
             no connection; frames go by MAC)",
            o.test.name()
        ));
    }
    if o.histogram.is_some() && !o.test.is_latency() {
        return Err("--histogram is for latency tests".into());
    }
    if o.duration.is_some() && o.test != Test::RawBw {
        return Err("-D is for raw_bw".into());
    }
    if o.receive_only && (o.test != Test::RawBw || o.server.is_some()) {
        return Err("--receive-only is for a raw_bw server (no host)".into());
    }
    Ok(o)
}

impl Opts {
    /// The server's address, `host:port` (host may carry its own port).
    pub(crate) fn server_addr(&self) -> Option<String> {
        self.server.as_ref().map(|h| {
            if h.contains(':') && h.to_socket_addrs().is_ok() {
                h.clone()
            } else {
                format!("{h}:{}", self.port)
            }
        })
    }

    /// The tag both sides compare.
    pub(crate) fn tag(&self) -> String {
        format!(
            "{}{}:{}:{}:{}",
            self.test.name(),
            if self.ud { "_ud" } else { "" },
            self.size,
            self.iters,
            self.warmup
        )
    }
}

/// Chooses the device (unless rdma_cm chooses it from the address) and says which and why.
/// Without a server address both sides may run here, so a machine without a NIC gets the
/// software device, asked for by name. Returns whether it is the software device: then both
/// sides run in this process (the device exists in this process only).
fn choose_device(opts: &mut Opts) -> watch::RunResult<bool> {
    if opts.cm {
        return Ok(false);
    }
    let copts = zverbs::ContextOptions {
        backend: opts.backend,
    };
    let chosen = device::open(
        opts.device.as_deref(),
        &copts,
        "--device",
        opts.server.is_none(),
    )?;
    println!("{chosen}");
    opts.device = Some(chosen.ctx.name().to_string());
    Ok(chosen.is_software() && opts.server.is_none())
}

/// Runs the server on a silent thread and the client here, both on the software device: the
/// client connects to the server over the TCP exchange on loopback. When one side fails the
/// other's waits end (the exchange connection closes, and [`watch::ABORT`] is set); a server
/// still blocked where no wait looks (waiting for a client that never came) is left to the
/// process's exit.
/// Runs the test described by `opts`: the raw Ethernet tests in `raw`, the others in `run`.
fn run_test(opts: &Opts) -> watch::RunResult<()> {
    if opts.test.is_raw() {
        raw::run(opts)
    } else {
        run::run(opts)
    }
}

fn run_in_process(opts: &Opts) -> watch::RunResult<()> {
    watch::YIELD_WHEN_IDLE.store(true, std::sync::atomic::Ordering::Relaxed);
    let (server_opts, client_opts) = in_process_sides(opts);
    let server = std::thread::Builder::new()
        .name("zverbs-perf server".into())
        .spawn(move || {
            watch::QUIET.with(|q| q.set(true));
            run_test(&server_opts).map_err(|e| e.to_string())
        })?;
    // Connect once the server listens (or has failed before it could).
    {
        let deadline = Instant::now() + opts.timeout;
        let (lock, cv) = &watch::LISTENING;
        let mut up = lock.lock().unwrap_or_else(|e| e.into_inner());
        while !*up && !server.is_finished() && Instant::now() < deadline {
            up = cv
                .wait_timeout(up, Duration::from_millis(50))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
    let result = run_test(&client_opts);
    if result.is_err() {
        watch::ABORT.store(true, std::sync::atomic::Ordering::Relaxed);
    }
    // After a success the server has the closing message and ends at once; after a failure,
    // at its waits' next look.
    let within = if result.is_ok() {
        opts.timeout
    } else {
        watch::GRACE
    };
    match (result, finish(server, within)) {
        (Ok(()), Some(Ok(()))) => Ok(()),
        (Ok(()), Some(Err(s))) => Err(format!("server side: {s}").into()),
        (Ok(()), None) => Err(format!(
            "the in-process server did not finish within {} s of the client",
            within.as_secs()
        )
        .into()),
        (Err(c), Some(Err(s))) => Err(format!("{c} (server side: {s})").into()),
        (Err(c), _) => Err(c),
    }
}

/// The options of the two sides of a one-process run: the server listens on loopback only
/// (nothing outside this machine has anything to say to it), the client connects there.
fn in_process_sides(opts: &Opts) -> (Opts, Opts) {
    let loopback = Ipv4Addr::LOCALHOST;
    let mut server = opts.clone();
    server.listen = IpAddr::V4(loopback);
    let mut client = opts.clone();
    client.server = Some(format!("{loopback}:{}", opts.port));
    (server, client)
}

/// The thread's result once it has finished, or `None` if it has not within `within`.
fn finish(
    thread: std::thread::JoinHandle<Result<(), String>>,
    within: Duration,
) -> Option<Result<(), String>> {
    let end = Instant::now() + within;
    while !thread.is_finished() {
        if Instant::now() >= end {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Some(
        thread
            .join()
            .unwrap_or_else(|_| Err("the in-process server thread panicked".into())),
    )
}

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    if args.first().is_some_and(|a| a == "devices") {
        return match run::list_devices() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("zverbs-perf: {e}");
                ExitCode::FAILURE
            }
        };
    }
    if args.first().is_some_and(|a| a == "all2all") {
        return all2all_main(&args[1..]);
    }
    let mut opts = match parse_args(args) {
        Ok(o) => o,
        Err(e) if e.is_empty() => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("zverbs-perf: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let result = match choose_device(&mut opts) {
        // A receiver without a peer has no other side to run here.
        Ok(true) if !opts.receive_only => run_in_process(&opts),
        Ok(_) => run_test(&opts),
        Err(e) => Err(e),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("zverbs-perf: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `zverbs-perf all2all`: a process of a job launched through PMIx.
#[cfg(feature = "pmix")]
fn all2all_main(args: &[OsString]) -> ExitCode {
    let opts = match all2all::parse_args(args.iter().cloned()) {
        Ok(o) => o,
        Err(e) if e.is_empty() => {
            print!("{}", all2all::USAGE);
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("zverbs-perf all2all: {e}\n\n{}", all2all::USAGE);
            return ExitCode::from(2);
        }
    };
    match all2all::run(&opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("zverbs-perf all2all: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Without the `pmix` feature there is no job to join.
#[cfg(not(feature = "pmix"))]
fn all2all_main(_: &[OsString]) -> ExitCode {
    eprintln!("zverbs-perf all2all: this build has no PMIx support (build with --features pmix)");
    ExitCode::from(2)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<Opts, String> {
        parse_args(s.split_whitespace())
    }

    #[test]
    fn defaults_follow_perftest() {
        let o = p("write_lat").unwrap();
        assert_eq!(
            (o.test, o.size, o.iters, o.server.as_deref()),
            (Test::WriteLat, 2, 1000, None)
        );
        let o = p("send_bw host1 -s 4096 -n 10 --backend verbs --cm").unwrap();
        assert_eq!((o.test, o.size, o.iters), (Test::SendBw, 4096, 10));
        assert_eq!(o.backend, Some(BackendRequest::Verbs));
        assert!(o.cm);
        assert_eq!(o.server_addr().as_deref(), Some("host1:18515"));
        assert_eq!(p("atomic_lat -s 64").unwrap().size, 8);
        assert_eq!(
            p("read_lat 10.0.0.1 -p 9000")
                .unwrap()
                .server_addr()
                .as_deref(),
            Some("10.0.0.1:9000")
        );
    }

    #[test]
    fn ud_is_for_send_lat_over_the_tcp_exchange() {
        let o = p("send_lat --ud").unwrap();
        assert!(o.ud);
        // Both sides compare it: an RC peer is refused at the exchange.
        assert_eq!(o.tag(), "send_lat_ud:2:1000:100");
        assert!(!p("send_lat").unwrap().ud);
        for bad in ["write_lat --ud", "send_bw --ud", "send_lat --ud --cm"] {
            assert!(
                p(bad).unwrap_err().contains("--ud is for send_lat"),
                "{bad}"
            );
        }
    }

    #[test]
    fn bad_arguments_are_explained() {
        assert!(p("").unwrap_err().contains("which test"));
        assert!(p("ping").unwrap_err().contains("unknown test"));
        assert!(
            p("write_lat -s x")
                .unwrap_err()
                .contains("-s x: not a number")
        );
        assert!(
            p("write_lat --histogram out.png")
                .unwrap_err()
                .contains(".svg or .csv")
        );
        assert!(
            p("write_bw --histogram out.svg")
                .unwrap_err()
                .contains("latency")
        );
        assert!(p("write_lat -m 1500").unwrap_err().contains("4096"));
        assert!(p("write_lat a b").unwrap_err().contains("unexpected"));
        assert_eq!(p("--help").unwrap_err(), "");
    }

    #[test]
    fn numbers_out_of_range_are_refused() {
        assert!(
            p("write_lat -s 0")
                .unwrap_err()
                .contains("use 1 to 2147483648")
        );
        assert_eq!(p("write_lat -s 2147483648").unwrap().size, MAX_SIZE);
        assert!(
            p("write_lat -n 1000000001")
                .unwrap_err()
                .contains("-n 1000000001")
        );
        assert!(p("write_lat --warmup 1000000001").is_err());
        assert!(
            p("write_bw -t 65537")
                .unwrap_err()
                .contains("use 2 to 65536")
        );
        assert!(p("write_bw -r 1").is_err());
        assert!(p("write_lat -p 0").is_err());
        assert!(p("write_lat --timeout 0").is_err());
    }

    #[test]
    fn a_server_thread_that_cannot_finish_is_not_waited_for() {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let blocked = std::thread::spawn(move || {
            let _ = rx.recv();
            Ok(())
        });
        assert_eq!(finish(blocked, Duration::from_millis(50)), None);
        drop(tx);
        let failed = std::thread::spawn(|| Err("server failed".to_string()));
        assert_eq!(
            finish(failed, Duration::from_secs(30)),
            Some(Err("server failed".into()))
        );
    }

    #[test]
    fn a_one_process_run_listens_on_loopback_only() {
        let o = p("write_lat -p 9000").unwrap();
        assert_eq!(
            o.listen,
            IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            "a server of its own"
        );
        let (server, client) = in_process_sides(&o);
        assert_eq!(server.listen, IpAddr::V4(Ipv4Addr::LOCALHOST));
        assert_eq!(server.server, None);
        assert_eq!(client.server_addr().as_deref(), Some("127.0.0.1:9000"));
    }

    #[test]
    fn raw_tests_default_to_perftests_frames_and_depths() {
        let o = p("raw_lat").unwrap();
        assert_eq!((o.size, o.iters, o.rx_depth), (64, 1000, 512));
        assert!(o.test.is_latency() && o.test.is_raw() && !o.test.is_round_trip());
        let o = p("raw_bw host -D 3 -B 02:00:00:00:00:0f -E 02:00:00:00:00:0e -r 4096").unwrap();
        assert_eq!((o.size, o.iters, o.rx_depth), (64, 1_000_000, 4096));
        assert_eq!(o.duration, Some(Duration::from_secs(3)));
        assert_eq!(o.source_mac, Some([2, 0, 0, 0, 0, 0x0f]));
        assert_eq!(o.dest_mac, Some([2, 0, 0, 0, 0, 0x0e]));
        assert!(!o.test.is_latency());
        assert_eq!(p("write_bw -r 64").unwrap().rx_depth, 64);
        assert_eq!(p("write_bw").unwrap().rx_depth, 128);
    }

    #[test]
    fn both_sides_compare_the_same_tag() {
        let a = p("write_lat -s 64").unwrap();
        let b = p("write_lat server -s 64").unwrap();
        assert_eq!(a.tag(), b.tag());
        assert_ne!(a.tag(), p("write_lat -s 65").unwrap().tag());
    }
}
