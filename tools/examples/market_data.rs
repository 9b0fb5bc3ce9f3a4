//! A market-data receiver, the program a trading engineer starts from: join a UDP multicast
//! group, steer it to a striding receive queue, read each packet in place with its device
//! timestamp, detect sequence gaps, and histogram the latency from the send time in the
//! packet to the receive time.
//!
//! ```text
//! cargo run -p zverbs-tools --example market_data -- [--device NAME] [--interface IF]
//!     [--group ADDR] [--port PORT] [-C COUNT] [--timeout SECS]
//! ```
//!
//! The packets carry a simple feed header at the start of their UDP payload: an 8-byte
//! big-endian sequence number and the 8-byte big-endian send time (nanoseconds since the
//! Unix epoch, `CLOCK_REALTIME`).
//!
//! - On the software device (the default, `zverbs_sim0`) the program is its own feed: a raw
//!   packet QP sends `COUNT` frames to the group (checksums by the device), which the device
//!   loops back into the receive set-up.
//! - On a NIC or the emulated ConnectX (`--device mlx5_1`), it joins the group on the device's
//!   network interface (`--interface` names another) with a kernel socket (IGMP), so the
//!   network forwards the group, and waits for `COUNT` datagrams from any sender, for
//!   instance an ordinary UDP socket sending to `ADDR:PORT`.
//!
//! The receive set-up is the standard one: an RSS QP over a striding work queue, a flow rule
//! for the group's MAC, address and port (tag 1), a CQ with device timestamps of its own. On
//! the libibverbs fallback (`ZVERBS_BACKEND=verbs`), which cannot drive a striding queue, a
//! raw packet QP's own receive queue takes the frames and the receive time is the host's.
//!
//! It prints one summary line, `received N in_order N gaps G lost L late D`, then the latency
//! percentiles, and exits 0 when every datagram arrived in order.

use std::net::Ipv4Addr;
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hdrhistogram::Histogram;
use zverbs::{
    AccessFlags, BackendKind, Context, ContextOptions, FlowRule, FrameLengths, QpCaps, RxHash,
    SendFlags, Strides, WqShape,
};
use zverbs_tools::args::{self, Arg::*, Parser};

const USAGE: &str = "\
usage: market_data [--device NAME] [--interface IF] [--group ADDR] [--port PORT] [-C COUNT]
                   [--timeout SECS]

  --device NAME     the RDMA device (default: the software device zverbs_sim0, which is its
                    own feed)
  --interface IF    the network interface to join the group on (default: the device's)
  --group ADDR      the IPv4 multicast group (default 239.1.2.3)
  --port PORT       the UDP port (default 31000)
  -C COUNT          datagrams to receive, 1 to 10000000 (default 10000)
  --timeout SECS    how long to wait for the next datagram (default 10)";

/// Bytes of the feed header at the start of the UDP payload: sequence number, send time.
const FEED_HEADER: usize = 16;
/// Ethernet, IPv4 (no options) and UDP headers.
const HEADERS: usize = 42;

#[derive(Debug, PartialEq, Eq)]
struct Args {
    device: Option<String>,
    interface: Option<String>,
    group: Ipv4Addr,
    port: u16,
    count: u64,
    timeout: Duration,
}

/// The arguments; `Err("")` asks for the usage text.
fn parse_args(mut p: Parser) -> Result<Args, String> {
    let mut a = Args {
        device: None,
        interface: None,
        group: Ipv4Addr::new(239, 1, 2, 3),
        port: 31000,
        count: 10_000,
        timeout: Duration::from_secs(10),
    };
    while let Some(arg) = p.next().map_err(args::explain)? {
        let f = args::flag(&arg);
        match arg {
            Short('d') | Long("device") => a.device = Some(args::value(&mut p, &f)?),
            Long("interface") => a.interface = Some(args::value(&mut p, &f)?),
            Long("group") => {
                let v = args::value(&mut p, &f)?;
                a.group = v
                    .parse()
                    .map_err(|_| format!("{f} {v}: not an IPv4 address"))?;
                if !a.group.is_multicast() {
                    return Err(format!("{f} {v}: not a multicast address (e.g. 239.1.2.3)"));
                }
            }
            Short('p') | Long("port") => a.port = args::in_range(&mut p, &f, 1, 65535)?,
            Short('C') | Long("count") => a.count = args::in_range(&mut p, &f, 1, 10_000_000)?,
            Long("timeout") => {
                a.timeout = Duration::from_secs(args::in_range(&mut p, &f, 1, 3600)?)
            }
            Short('h') | Long("help") => return Err(String::new()),
            arg => return Err(args::unexpected(arg)),
        }
    }
    Ok(a)
}

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// What the receiver counted.
#[derive(Debug, Default)]
struct Feed {
    received: u64,
    in_order: u64,
    /// Jumps forward in the sequence, and the datagrams they skipped.
    gaps: u64,
    lost: u64,
    /// Datagrams older than one already seen (late or repeated).
    late: u64,
    next: u64,
}

impl Feed {
    /// One datagram's feed header: its sequence number checked against the last.
    fn take(&mut self, seq: u64) {
        self.received += 1;
        if seq == self.next {
            self.in_order += 1;
            self.next = seq + 1;
        } else if seq > self.next {
            self.gaps += 1;
            self.lost += seq - self.next;
            self.next = seq + 1;
        } else {
            // Older than one already seen: late (from a gap counted as lost) or repeated.
            self.late += 1;
        }
    }
}

/// The feed header of a frame (its UDP payload's first bytes): sequence number, send time.
fn feed_header(frame: &[u8]) -> Option<(u64, u64)> {
    let h = frame.get(HEADERS..HEADERS + FEED_HEADER)?;
    Some((
        u64::from_be_bytes(h[..8].try_into().ok()?),
        u64::from_be_bytes(h[8..].try_into().ok()?),
    ))
}

/// A UDP/IPv4 frame to `group:port` with the feed header for `seq` and `sent_ns`: the MAC is
/// the group's, the checksums are left to the device.
fn feed_headers(group: Ipv4Addr, port: u16) -> [u8; HEADERS] {
    let mut f = [0u8; HEADERS];
    f[..6].copy_from_slice(&zverbs::multicast_mac(group));
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x01]);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    f[14] = 0x45;
    f[20] = 0x40; // don't fragment
    f[22] = 1; // TTL
    f[23] = 17;
    f[26..30].copy_from_slice(&[10, 0, 0, 1]);
    f[30..34].copy_from_slice(&group.octets());
    f[34..36].copy_from_slice(&port.to_be_bytes());
    f[36..38].copy_from_slice(&port.to_be_bytes());
    f
}

fn run(a: &Args) -> Res<Feed> {
    let name = a.device.as_deref().unwrap_or(zverbs::SOFTWARE_DEVICE);
    let ctx = zverbs::open_device(Some(name), &ContextOptions::default())?;
    let software = name == zverbs::SOFTWARE_DEVICE;
    println!(
        "market_data: group {}:{} on {name}{}",
        a.group,
        a.port,
        if software {
            " (the software device: this program is its own feed)"
        } else {
            ""
        }
    );
    // The network forwards the group to a port that joined it (IGMP, through a kernel
    // socket); the software device has no network.
    let _join = if software {
        None
    } else {
        let m = ctx.join_multicast(a.group, a.interface.as_deref())?;
        println!("market_data: joined {} on {}", a.group, m.interface());
        Some(m)
    };
    let pd = ctx.alloc_pd()?;
    let rule = FlowRule::multicast(a.group, a.port).tag(1);
    // 8 WQEs of 512 strides of 128 bytes: a 64-byte datagram takes one stride, and the CQ has
    // an entry for each.
    let strides = Strides {
        log_num_strides: 9,
        log_stride_size: 7,
    };
    let wqes = 8u32;
    let cq = ctx
        .cq_builder()
        .cqe(wqes * strides.num_strides())
        .timestamps(true)
        .build()
        .or_else(|_| ctx.cq_builder().cqe(wqes * strides.num_strides()).build())?;
    let clock = if cq.has_timestamps() {
        ctx.clock().ok()
    } else {
        None
    };
    let direct = cq.backend().kind == BackendKind::Direct;
    let mut feed = Feed::default();
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)?;
    let mut sender = if software {
        Some(Sender::new(&ctx, &pd, a)?)
    } else {
        None
    };
    let mut last = Instant::now();
    let mut take = |frame: &[u8], recv_ns: u64, feed: &mut Feed| {
        if let Some((seq, sent_ns)) = feed_header(frame) {
            feed.take(seq);
            // A clock behind the sender's counts as no time at all.
            let _ = hist.record(recv_ns.saturating_sub(sent_ns).max(1));
        }
    };
    if direct {
        let wq = pd.create_wq(&cq, wqes, WqShape::Striding(strides))?;
        let rss = pd.create_rss_qp(1, &[&wq], &RxHash::default())?;
        let _flow = rss.create_flow(&rule)?;
        let rx = wq.striding_queue()?;
        println!(
            "market_data: striding queue of {} WQEs x {} strides of {} bytes, {} timestamps",
            rx.entries(),
            strides.num_strides(),
            strides.stride_bytes(),
            if clock.is_some() { "device" } else { "host" }
        );
        while feed.received < a.count {
            if let Some(s) = sender.as_mut() {
                s.send_some(&feed)?;
            }
            let n = rx.poll_packets(64, |p| {
                let recv_ns = match &clock {
                    Some(c) => c.to_wall_ns(p.timestamp()),
                    None => now_ns(),
                };
                take(p.bytes(), recv_ns, &mut feed);
            });
            if n != 0 {
                last = Instant::now();
            } else if last.elapsed() > a.timeout {
                break;
            }
        }
    } else {
        // The fallback: a raw packet QP's own receive queue, host receive times.
        let qp = pd
            .qp_builder(&cq, &cq)
            .max_recv_wr(1024)
            .max_send_wr(1)
            .raw_packet(1)
            .build()?;
        qp.ready_raw()?;
        let _flow = qp.create_flow(&rule)?;
        const SLOT: usize = 2048;
        let buf = pd.alloc_buf(1024 * SLOT, AccessFlags::LOCAL_WRITE)?;
        let mut rq = qp.recv_queue()?;
        for i in 0..1024 {
            rq.post(i as u64, buf.slice(i * SLOT..(i + 1) * SLOT)?)?;
        }
        println!(
            "market_data: a raw packet QP's receive queue (libibverbs fallback), host timestamps"
        );
        let mut poller = cq.poller()?;
        let mut frame = vec![0u8; HEADERS + FEED_HEADER];
        while feed.received < a.count {
            if let Some(s) = sender.as_mut() {
                s.send_some(&feed)?;
            }
            let done: Vec<zverbs::Completion> = poller.ready().to_vec();
            if done.is_empty() && last.elapsed() > a.timeout {
                break;
            }
            for c in done {
                let c = c.ok()?;
                last = Instant::now();
                let at = c.wr_id as usize * SLOT;
                buf.read(at, &mut frame)?;
                take(&frame, now_ns(), &mut feed);
                rq.post(c.wr_id, buf.slice(at..at + SLOT)?)?;
            }
        }
    }
    println!(
        "received {} in_order {} gaps {} lost {} late {}",
        feed.received, feed.in_order, feed.gaps, feed.lost, feed.late
    );
    if !hist.is_empty() {
        println!(
            "latency send -> receive (ns): min {} p50 {} p99 {} p99.9 {} max {}",
            hist.min(),
            hist.value_at_quantile(0.5),
            hist.value_at_quantile(0.99),
            hist.value_at_quantile(0.999),
            hist.max()
        );
    }
    Ok(feed)
}

/// The software device's own feed: a raw packet QP sending prepared frames to the group, a
/// few ahead of the receiver (the device loops them back; Ethernet drops what finds no
/// stride, so the sender keeps within the queue's reach).
struct Sender {
    sq: zverbs::SendQueue,
    poller: zverbs::Poller,
    frame: zverbs::PreparedFrame,
    buf: zverbs::MrBuf,
    next: u64,
    count: u64,
    _qp: zverbs::Qp,
}

impl Sender {
    fn new(ctx: &Context, pd: &zverbs::Pd, a: &Args) -> Res<Self> {
        let cq = ctx.cq_builder().cqe(512).build()?;
        let qp = pd.create_raw_qp(1, &cq, &cq, QpCaps::default())?;
        let sq = qp.send_queue()?;
        let frame = sq.prepare_frame(
            &feed_headers(a.group, a.port),
            SendFlags::SIGNALED | SendFlags::IP_CSUM,
            FrameLengths::IPV4_UDP,
        )?;
        Ok(Self {
            sq,
            poller: cq.poller()?,
            frame,
            buf: pd.alloc_buf(256 * 64, AccessFlags::LOCAL_WRITE)?,
            next: 0,
            count: a.count,
            _qp: qp,
        })
    }

    /// Sends up to 32 datagrams ahead of what `feed` received, each with its send time.
    fn send_some(&mut self, feed: &Feed) -> Res<()> {
        // Retire the sends' completions (every one is signaled).
        let _ = self.poller.ready();
        while self.next < self.count && self.next < feed.received + 32 {
            let at = (self.next % 256) as usize * 64;
            let mut payload = [0u8; 22];
            payload[..8].copy_from_slice(&self.next.to_be_bytes());
            payload[8..16].copy_from_slice(&now_ns().to_be_bytes());
            self.buf.write(at, &payload)?;
            match self.sq.post_frame(
                &self.frame,
                self.next,
                self.buf.slice(at..at + payload.len())?,
            ) {
                Ok(()) => self.next += 1,
                // The send queue is full: its completions come back first.
                Err(zverbs::safe::SafePostError::Post(
                    zverbs::PostError::QueueFull { .. } | zverbs::PostError::CqFull { .. },
                )) => break,
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}

fn main() -> ExitCode {
    let a = match args::or_usage(parse_args(Parser::from_env()), "market_data", USAGE) {
        Ok(a) => a,
        Err(code) => return code,
    };
    match run(&a) {
        Ok(f) if f.received == a.count && f.in_order == a.count => ExitCode::SUCCESS,
        Ok(f) => {
            eprintln!(
                "market_data: {} of {} datagrams, {} in order",
                f.received, a.count, f.in_order
            );
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("market_data: {e}");
            ExitCode::FAILURE
        }
    }
}
