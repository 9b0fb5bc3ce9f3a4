//! `zverbs-perf`: perftest-like latency and bandwidth tests over zverbs.
//!
//! ```text
//! zverbs-perf <test> [server-host] [options]
//! ```
//!
//! Without a host it is the server; with one, the client. Both sides run the same test with
//! the same size and iteration count (checked during the exchange). Tests: `write_lat`,
//! `send_lat`, `read_lat`, `atomic_lat`, `write_bw`, `send_bw`. Run `zverbs-perf --help`.

mod run;
mod stats;

use std::net::ToSocketAddrs;
use std::process::ExitCode;
use std::time::Duration;

use zverbs::BackendRequest;

/// A test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Test {
    WriteLat,
    SendLat,
    ReadLat,
    AtomicLat,
    WriteBw,
    SendBw,
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
        }
    }

    pub(crate) fn is_latency(self) -> bool {
        !matches!(self, Test::WriteBw | Test::SendBw)
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
    pub(crate) size: usize,
    pub(crate) iters: usize,
    pub(crate) warmup: usize,
    pub(crate) tx_depth: u32,
    pub(crate) rx_depth: u32,
    pub(crate) inline: u32,
    pub(crate) mtu: zverbs::Mtu,
    pub(crate) cm: bool,
    pub(crate) backend: Option<BackendRequest>,
    pub(crate) histogram: Option<String>,
    pub(crate) hugepages: bool,
    pub(crate) timeout: Duration,
}

const USAGE: &str = "\
usage: zverbs-perf <test> [server-host] [options]
       zverbs-perf devices     (list devices, ports, GIDs and the backend each would get)

tests:  write_lat send_lat read_lat atomic_lat write_bw send_bw
        (no host: run as the server; with a host: run as the client)

options:
  -d, --device NAME       RDMA device (default: the first one)
  -i, --ib-port N         device port (default: the first active one)
  -g, --gid-idx N         local GID index (default: RoCE v2 with IPv4 on Ethernet, none on IB)
  -p, --port N            TCP / rdma_cm port (default 18515)
  -s, --size BYTES        message size (default 2 for latency, 65536 for bandwidth)
  -n, --iters N           iterations (default 1000 for latency, 5000 for bandwidth)
      --warmup N          latency iterations run before measuring (default 100)
  -t, --tx-depth N        send queue depth / bandwidth window (default 128)
  -r, --rx-depth N        receives kept posted (default 128)
  -I, --inline N          largest inline message (default 64; 0 disables inline)
  -m, --mtu BYTES         path MTU: 256 512 1024 2048 4096 (default 1024)
      --cm                connect through rdma_cm instead of the TCP exchange
      --backend B         auto, direct or verbs (default: ZVERBS_BACKEND, else auto)
      --histogram FILE    write the latency histogram (FILE.svg or FILE.csv)
      --hugepages         put the buffer on hugepages
      --timeout SECS      exchange / rdma_cm timeout (default 30)
  -h, --help              this text
";

fn parse_num<T: std::str::FromStr>(flag: &str, v: Option<String>) -> Result<T, String> {
    let v = v.ok_or_else(|| format!("{flag} needs a value"))?;
    v.parse()
        .map_err(|_| format!("{flag}: `{v}` is not a valid number"))
}

/// Parses the command line (without the program name).
pub(crate) fn parse_args(args: impl IntoIterator<Item = String>) -> Result<Opts, String> {
    let mut it = args.into_iter();
    let mut test = None;
    let mut o = Opts {
        test: Test::WriteLat,
        server: None,
        device: None,
        ib_port: None,
        gid_index: None,
        port: zverbs::connect::exchange::DEFAULT_PORT,
        size: 0,
        iters: 0,
        warmup: 100,
        tx_depth: 128,
        rx_depth: 128,
        inline: 64,
        mtu: zverbs::Mtu::M1024,
        cm: false,
        backend: None,
        histogram: None,
        hugepages: false,
        timeout: Duration::from_secs(30),
    };
    while let Some(a) = it.next() {
        match a.as_str() {
            "-h" | "--help" => return Err(String::new()),
            "-d" | "--device" => o.device = Some(it.next().ok_or("--device needs a value")?),
            "-i" | "--ib-port" => o.ib_port = Some(parse_num(&a, it.next())?),
            "-g" | "--gid-idx" => o.gid_index = Some(parse_num(&a, it.next())?),
            "-p" | "--port" => o.port = parse_num(&a, it.next())?,
            "-s" | "--size" => o.size = parse_num(&a, it.next())?,
            "-n" | "--iters" => o.iters = parse_num(&a, it.next())?,
            "--warmup" => o.warmup = parse_num(&a, it.next())?,
            "-t" | "--tx-depth" => o.tx_depth = parse_num(&a, it.next())?,
            "-r" | "--rx-depth" => o.rx_depth = parse_num(&a, it.next())?,
            "-I" | "--inline" => o.inline = parse_num(&a, it.next())?,
            "-m" | "--mtu" => {
                let b: u32 = parse_num(&a, it.next())?;
                o.mtu = zverbs::Mtu::from_bytes(b)
                    .ok_or_else(|| format!("--mtu {b}: use 256, 512, 1024, 2048 or 4096"))?;
            }
            "--cm" => o.cm = true,
            "--backend" => {
                let v = it.next().ok_or("--backend needs a value")?;
                o.backend = Some(BackendRequest::parse(&v).map_err(|e| e.to_string())?);
            }
            "--histogram" => {
                let f = it.next().ok_or("--histogram needs a file name")?;
                if !(f.ends_with(".svg") || f.ends_with(".csv")) {
                    return Err(format!(
                        "--histogram {f}: the name must end in .svg or .csv"
                    ));
                }
                o.histogram = Some(f);
            }
            "--hugepages" => o.hugepages = true,
            "--timeout" => o.timeout = Duration::from_secs(parse_num(&a, it.next())?),
            s if s.starts_with('-') => return Err(format!("unknown option {s}")),
            s if test.is_none() => {
                test = Some(Test::parse(s).ok_or_else(|| format!("unknown test `{s}`"))?);
            }
            s if o.server.is_none() => o.server = Some(s.to_string()),
            s => return Err(format!("unexpected argument `{s}`")),
        }
    }
    o.test =
        test.ok_or("which test? (write_lat, send_lat, read_lat, atomic_lat, write_bw, send_bw)")?;
    if o.size == 0 {
        o.size = if o.test.is_latency() { 2 } else { 65536 };
    }
    if o.iters == 0 {
        o.iters = if o.test.is_latency() { 1000 } else { 5000 };
    }
    if o.test == Test::AtomicLat {
        o.size = 8;
    }
    if o.tx_depth < 2 || o.rx_depth < 2 {
        return Err("--tx-depth and --rx-depth must be at least 2".into());
    }
    if o.histogram.is_some() && !o.test.is_latency() {
        return Err("--histogram is for latency tests".into());
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
            "{}:{}:{}:{}",
            self.test.name(),
            self.size,
            self.iters,
            self.warmup
        )
    }
}

/// Whether the test runs on the software device with both sides in this process: the device
/// exists in this process only, so without a server address (and without rdma_cm) the server
/// runs on a thread and the client connects to it over the TCP exchange on loopback.
fn software_loopback(opts: &Opts) -> bool {
    if opts.server.is_some() || opts.cm {
        return false;
    }
    let devices = zverbs::devices().unwrap_or_default();
    let chosen = match opts.device.as_deref() {
        Some(name) => devices.iter().find(|d| d.name() == name),
        None => devices.first(),
    };
    chosen.is_some_and(|d| d.is_software())
}

/// Runs the server on a silent thread and the client here, both on the software device.
fn run_in_process(opts: &Opts) -> run::Result<()> {
    run::YIELD_WHEN_IDLE.store(true, std::sync::atomic::Ordering::Relaxed);
    let server_opts = opts.clone();
    let server = std::thread::Builder::new()
        .name("zverbs-perf server".into())
        .spawn(move || {
            run::QUIET.with(|q| q.set(true));
            run::run(&server_opts).map_err(|e| e.to_string())
        })?;
    let mut client_opts = opts.clone();
    client_opts.server = Some(format!("127.0.0.1:{}", opts.port));
    // Connect once the server listens (or has failed before it could).
    {
        let (lock, cv) = &run::LISTENING;
        let mut up = lock.lock().unwrap_or_else(|e| e.into_inner());
        while !*up && !server.is_finished() {
            up = cv
                .wait_timeout(up, Duration::from_millis(50))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
    let result = run::run(&client_opts);
    let served = server
        .join()
        .map_err(|_| "the in-process server thread panicked")?;
    match (result, served) {
        (Ok(()), Ok(())) => Ok(()),
        (Ok(()), Err(s)) => Err(format!("server side: {s}").into()),
        (Err(c), Ok(())) => Err(c),
        (Err(c), Err(s)) => Err(format!("{c} (server side: {s})").into()),
    }
}

fn main() -> ExitCode {
    if std::env::args().nth(1).as_deref() == Some("devices") {
        return match run::list_devices() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("zverbs-perf: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let opts = match parse_args(std::env::args().skip(1)) {
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
    let result = if software_loopback(&opts) {
        run_in_process(&opts)
    } else {
        run::run(&opts)
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("zverbs-perf: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<Opts, String> {
        parse_args(s.split_whitespace().map(String::from))
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
    fn bad_arguments_are_explained() {
        assert!(p("").unwrap_err().contains("which test"));
        assert!(p("ping").unwrap_err().contains("unknown test"));
        assert!(
            p("write_lat -s x")
                .unwrap_err()
                .contains("not a valid number")
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
    fn both_sides_compare_the_same_tag() {
        let a = p("write_lat -s 64").unwrap();
        let b = p("write_lat server -s 64").unwrap();
        assert_eq!(a.tag(), b.tag());
        assert_ne!(a.tag(), p("write_lat -s 65").unwrap().tag());
    }
}
