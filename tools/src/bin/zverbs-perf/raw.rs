//! `raw_lat` and `raw_bw`: UDP frames between two raw packet QPs, as perftest's
//! `raw_ethernet_lat` and `raw_ethernet_bw` send them.
//!
//! Each side steers the frames addressed to its own MAC to itself (a destination-MAC flow
//! rule, perftest's default rule) and learns the peer's MAC over the TCP exchange (or takes it
//! from `--dest-mac`). Frames are Ethernet + IPv4 + UDP, `--size` bytes in all (without the
//! FCS, as perftest counts them), their UDP payload starting with an 8-byte big-endian
//! sequence number; the IPv4 header checksum is computed once here, the UDP checksum is 0
//! (none, which IPv4 allows). Addresses are from the benchmarking range 198.18.0.0/15, so a
//! kernel that sees the frames (the other end of a veth) drops them without answering.
//!
//! - Sending is a prepared frame (`SendQueue::prepare_frame`: the headers built once, each
//!   post writes the payload's address and the lengths) on a raw packet QP's send queue.
//! - Receiving is, on the direct backend, a striding work queue behind an RSS QP, its packets
//!   read in place (`StridingQueue::poll_packets`); on the libibverbs fallback, which cannot
//!   drive a striding queue, the raw QP's own receive queue and the CQ's poller.
//!
//! `raw_lat` times as `raw_ethernet_lat` does (perftest's `run_iter_lat_send`): the client
//! stamps each post; a post follows the answer to the one before; half of the interval
//! between consecutive posts is one sample, and `t_typical` is their median. The server
//! answers every frame with one carrying the same sequence number, until the client's closing
//! message on the exchange connection.
//!
//! `raw_bw` streams frames from the client to the server for `--iters` frames or
//! `--duration` seconds, one in `SIGNAL_EVERY` signaled, as `raw_ethernet_bw` does; both sides
//! report a rate: the client what it posted, the server what arrived (Ethernet has no flow
//! control: a receiver that falls behind loses frames, counted as lost).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use zverbs::connect::Endpoint;
use zverbs::connect::exchange::{self, Hello, Wire};
use zverbs::{
    AccessFlags, BackendKind, Context, ContextOptions, Flow, FlowRule, FrameLengths, Gid, MrBuf,
    Pd, Poller, PostError, PreparedFrame, Qp, QpCaps, RecvQueue, RssQp, RxHash, SendFlags,
    SendQueue, Strides, StridingQueue, WorkQueue, WqShape,
};

use zverbs_tools::latency::{self, Recorder};
use zverbs_tools::plot;

use crate::watch::{ABORT, LISTENING, QUIET, RunResult as Result, Watch, YIELD_WHEN_IDLE};
use crate::{Opts, Test};

/// Ethernet (14), IPv4 without options (20) and UDP (8) headers.
pub(crate) const HEADERS: usize = 42;
/// The smallest frame: an Ethernet frame's 60 bytes without the FCS (the sequence number,
/// 8 bytes after the headers, fits).
pub(crate) const MIN_FRAME: usize = 60;
/// The largest frame asked for (a jumbo frame; a port allows less, and says so at the post).
pub(crate) const MAX_FRAME: usize = 9014;
/// The UDP port both sides send to and from.
const UDP_PORT: u16 = 31_337;
/// The client's and the server's IPv4 addresses (RFC 2544's benchmarking range).
const CLIENT_IP: [u8; 4] = [198, 18, 0, 2];
const SERVER_IP: [u8; 4] = [198, 18, 0, 1];
/// One send in this many is signaled in `raw_bw` (the rest retire with it); fewer when the
/// window (`--tx-depth`) is smaller than twice this.
const SIGNAL_EVERY: u64 = 64;
/// Strides of the direct backend's receive queue: 512 strides of 128 bytes a WQE (a 64-byte
/// frame takes one stride).
const STRIDES: Strides = Strides {
    log_num_strides: 9,
    log_stride_size: 7,
};
/// Bytes of each receive slot on the fallback (a 1500-byte MTU's frame and more).
const SLOT: usize = 2048;
/// How long the server of `raw_bw` goes on receiving after the client's closing message
/// without a frame before it counts.
const DRAIN: Duration = Duration::from_millis(100);

/// A MAC address from `aa:bb:cc:dd:ee:ff`.
pub(crate) fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut mac = [0u8; 6];
    let mut parts = s.split(':');
    for b in &mut mac {
        let p = parts.next()?;
        if p.len() != 2 {
            return None;
        }
        *b = u8::from_str_radix(p, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

fn show_mac(m: &[u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// The headers of a frame of `size` bytes from `src` to `dst`, the IPv4 checksum computed.
fn headers(src: [u8; 6], dst: [u8; 6], client: bool, size: usize) -> [u8; HEADERS] {
    let (from, to) = if client {
        (CLIENT_IP, SERVER_IP)
    } else {
        (SERVER_IP, CLIENT_IP)
    };
    let mut f = [0u8; HEADERS];
    f[..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&src);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    f[14] = 0x45;
    f[16..18].copy_from_slice(&((size - 14) as u16).to_be_bytes());
    f[20] = 0x40; // don't fragment
    f[22] = 64; // TTL
    f[23] = 17; // UDP
    f[26..30].copy_from_slice(&from);
    f[30..34].copy_from_slice(&to);
    let sum = ipv4_checksum(&f[14..34]);
    f[24..26].copy_from_slice(&sum.to_be_bytes());
    f[34..36].copy_from_slice(&UDP_PORT.to_be_bytes());
    f[36..38].copy_from_slice(&UDP_PORT.to_be_bytes());
    f[38..40].copy_from_slice(&((size - 34) as u16).to_be_bytes());
    f
}

/// The IPv4 header checksum of `h` (its checksum field zero).
fn ipv4_checksum(h: &[u8]) -> u16 {
    let mut s: u32 = h
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)])))
        .sum();
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

/// The sequence number of a test frame (IPv4, UDP to the test's port, long enough), or `None`
/// for any other frame the rule let through.
fn test_seq(frame: &[u8]) -> Option<u64> {
    let seq = frame.get(HEADERS..HEADERS + 8)?;
    (frame[12..14] == [0x08, 0x00] && frame[23] == 17 && frame[36..38] == UDP_PORT.to_be_bytes())
        .then(|| u64::from_be_bytes(seq.try_into().unwrap_or_default()))
}

/// The receive side.
enum Rx {
    /// Direct: a striding work queue behind an RSS QP, its packets read in place. (Fields
    /// drop in order: the queue, the rule, the RSS QP, the work queue.)
    Striding {
        q: StridingQueue,
        _flow: Flow,
        _rss: RssQp,
        _wq: WorkQueue,
    },
    /// The fallback: the raw QP's own receive queue, a slot of `buf` per receive.
    Ordinary {
        rq: RecvQueue,
        poller: Poller,
        buf: MrBuf,
        _flow: Flow,
    },
}

impl Rx {
    /// Polls up to 64 frames, handing each test frame's sequence number to `f`; how many
    /// frames arrived (test frames or not).
    ///
    /// # Errors
    ///
    /// A receive completion with an error, or a repost refused.
    #[inline]
    fn poll(&mut self, mut f: impl FnMut(u64)) -> Result<usize> {
        match self {
            Rx::Striding { q, .. } => {
                let n = q.poll_packets(64, |p| {
                    if let Some(seq) = test_seq(p.bytes()) {
                        f(seq);
                    }
                });
                if n == 0
                    && let Some((status, syndrome)) = q.error()
                {
                    return Err(format!(
                        "the striding queue's completion failed: {status:?} (syndrome \
                         {syndrome:#x})"
                    )
                    .into());
                }
                Ok(n)
            }
            Rx::Ordinary {
                rq, poller, buf, ..
            } => {
                let done = poller.ready();
                let mut head = [0u8; HEADERS + 8];
                for c in done {
                    let c = c.ok()?;
                    let at = c.wr_id as usize * SLOT;
                    let len = (c.byte_len as usize).min(head.len());
                    buf.read(at, &mut head[..len])?;
                    if let Some(seq) = test_seq(&head[..len]) {
                        f(seq);
                    }
                    rq.post(c.wr_id, buf.slice(at..at + SLOT)?)?;
                }
                Ok(done.len())
            }
        }
    }
}

/// The send side: a raw packet QP's send queue, a prepared frame, a payload slot per
/// request the queue holds.
struct Tx {
    sq: SendQueue,
    poller: Poller,
    /// The frame with a completion asked for, and without.
    signaled: PreparedFrame,
    quiet: PreparedFrame,
    payloads: MrBuf,
    /// Frames in flight at most (`--tx-depth`): a payload slot each, reused once the frame
    /// that had it completed.
    depth: u64,
    payload: usize,
    /// Every frame before this one has completed (a completion retires the unsignaled
    /// frames before it).
    retired: u64,
    /// One frame in this many is signaled in `raw_bw`.
    signal_every: u64,
}

impl Tx {
    /// Posts the frame with sequence number `seq` (signaled if asked); `false` when the queue
    /// is full (its completions are polled: try again).
    ///
    /// # Errors
    ///
    /// A refused post other than a full queue, or a send completion with an error.
    #[inline]
    fn send(&mut self, seq: u64, signaled: bool) -> Result<bool> {
        if seq >= self.retired + self.depth {
            self.reap()?;
            return Ok(false);
        }
        let at = (seq % self.depth) as usize * self.payload;
        self.payloads.write(at, &seq.to_be_bytes())?;
        let frame = if signaled {
            &self.signaled
        } else {
            &self.quiet
        };
        match self
            .sq
            .post_frame(frame, seq, self.payloads.slice(at..at + self.payload)?)
        {
            Ok(()) => Ok(true),
            Err(zverbs::safe::SafePostError::Post(
                PostError::QueueFull { .. } | PostError::CqFull { .. },
            )) => {
                self.reap()?;
                Ok(false)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Retires the send completions there are.
    ///
    /// # Errors
    ///
    /// A send completion with an error.
    #[inline]
    fn reap(&mut self) -> Result<()> {
        for c in self.poller.ready() {
            self.retired = self.retired.max(c.ok()?.wr_id + 1);
        }
        Ok(())
    }
}

/// Everything one side holds (dropped in order: queues, then QPs, then the PD's buffers).
struct Side {
    rx: Rx,
    tx: Tx,
    direct: bool,
    /// The raw QP's backend, as it reports it.
    backend: String,
    _qp: Qp,
}

/// The source MAC: `--source-mac`, else the device's network interface's, else (the software
/// device has none) one of two fixed local addresses by role.
fn own_mac(ctx: &Context, opts: &Opts, client: bool) -> [u8; 6] {
    if let Some(m) = opts.source_mac {
        return m;
    }
    let netdev = ctx.netdevs().into_iter().find_map(|n| {
        let s = std::fs::read_to_string(format!("/sys/class/net/{n}/address")).ok()?;
        parse_mac(s.trim())
    });
    netdev.unwrap_or([0x02, 0, 0, 0, 0, if client { 2 } else { 1 }])
}

/// Makes the queues of one side, its rule steering frames to `mac` to its receive queue.
fn side(ctx: &Context, pd: &Pd, port: u8, opts: &Opts, mac: [u8; 6]) -> Result<Side> {
    let rule = FlowRule::dst_mac(mac);
    let depth = opts.tx_depth;
    let rx_depth = opts.rx_depth;
    // The receive CQ first: its backend decides the receive path.
    let wqes = rx_depth.div_ceil(STRIDES.num_strides()).max(4);
    let rcq_entries = wqes * STRIDES.num_strides();
    let rcq = ctx.cq_builder().cqe(rcq_entries).build()?;
    let direct = rcq.backend().kind == BackendKind::Direct;
    let scq = ctx.cq_builder().cqe(depth + rx_depth + 16).build()?;
    let caps = QpCaps {
        max_send_wr: depth,
        max_recv_wr: if direct { 1 } else { rx_depth },
        // A prepared frame on the fallback is an inline SEND of headers and payload.
        max_send_sge: 2,
        max_recv_sge: 1,
        max_inline_data: if direct {
            0
        } else {
            opts.size.max(HEADERS) as u32
        },
    };
    let qp = if direct {
        pd.create_raw_qp(port, &scq, &scq, caps)?
    } else {
        pd.create_raw_qp(port, &scq, &rcq, caps)?
    };
    let rx = if direct {
        let wq = pd.create_wq(&rcq, wqes, WqShape::Striding(STRIDES))?;
        let rss = pd.create_rss_qp(port, &[&wq], &RxHash::default())?;
        let flow = rss.create_flow(&rule)?;
        let q = wq.striding_queue()?;
        Rx::Striding {
            q,
            _flow: flow,
            _rss: rss,
            _wq: wq,
        }
    } else {
        let flow = qp.create_flow(&rule)?;
        let buf = pd.alloc_buf(rx_depth as usize * SLOT, AccessFlags::LOCAL_WRITE)?;
        let mut rq = qp.recv_queue()?;
        for i in 0..rx_depth as usize {
            rq.post(i as u64, buf.slice(i * SLOT..(i + 1) * SLOT)?)?;
        }
        Rx::Ordinary {
            rq,
            poller: rcq.poller()?,
            buf,
            _flow: flow,
        }
    };
    let sq = qp.send_queue()?;
    let payload = opts.size - HEADERS;
    // Placeholder headers until the peer's MAC is known (`Side::address`).
    let h = headers(mac, mac, opts.server.is_some(), opts.size);
    let signaled = sq.prepare_frame(&h, SendFlags::SIGNALED, FrameLengths::IPV4_UDP)?;
    let quiet = sq.prepare_frame(&h, SendFlags::empty(), FrameLengths::IPV4_UDP)?;
    let tx = Tx {
        sq,
        poller: scq.poller()?,
        signaled,
        quiet,
        payloads: pd.alloc_buf(depth as usize * payload, AccessFlags::LOCAL_WRITE)?,
        depth: u64::from(depth),
        payload,
        retired: 0,
        signal_every: SIGNAL_EVERY.min(u64::from(depth / 2).max(1)),
    };
    Ok(Side {
        rx,
        tx,
        direct,
        backend: qp.backend().to_string(),
        _qp: qp,
    })
}

impl Side {
    /// Prepares the frames to `dst` from `src`.
    fn address(&mut self, src: [u8; 6], dst: [u8; 6], client: bool, size: usize) -> Result<()> {
        let h = headers(src, dst, client, size);
        let sq = &self.tx.sq;
        self.tx.signaled = sq.prepare_frame(&h, SendFlags::SIGNALED, FrameLengths::IPV4_UDP)?;
        self.tx.quiet = sq.prepare_frame(&h, SendFlags::empty(), FrameLengths::IPV4_UDP)?;
        Ok(())
    }
}

/// `println!` unless this thread is the silent side of a one-process run.
macro_rules! say {
    ($($t:tt)*) => {
        if !QUIET.with(|q| q.get()) {
            println!($($t)*);
        }
    };
}

/// Runs `raw_lat` or `raw_bw` as `opts` says.
pub(crate) fn run(opts: &Opts) -> Result<()> {
    let copts = match opts.backend {
        Some(b) => ContextOptions::default().backend(b),
        None => ContextOptions::default(),
    };
    let client = opts.server.is_some();
    let ctx = zverbs::open_device(opts.device.as_deref(), &copts)?;
    let port = match opts.ib_port {
        Some(p) => p,
        None => ctx.active_port()?,
    };
    let mac = own_mac(&ctx, opts, client);
    let pd = ctx.alloc_pd()?;
    let mut s = side(&ctx, &pd, port, opts, mac)?;

    say!("{}", "-".repeat(78));
    say!(" {} (zverbs-perf)", opts.test.title());
    say!(
        " Device: {}  port {port}  link Ethernet  frames of {} bytes (Ethernet, IPv4, UDP)",
        ctx.name(),
        opts.size
    );
    say!(
        " Backend: {}; send: a prepared frame on a raw packet QP; receive: {}",
        s.backend,
        if s.direct {
            "a striding work queue behind an RSS QP, packets in place"
        } else {
            "the raw QP's receive queue (libibverbs)"
        }
    );

    if opts.receive_only {
        return receive_only(&mut s, opts, mac);
    }

    // The exchange: each side's MAC (in the tag) and a start both agree on.
    let tag = format!(
        "{}:{}:{}",
        opts.test.name(),
        opts.size,
        show_mac(&mac).replace(':', "")
    );
    let mut gid = [0u8; 16];
    gid[10..16].copy_from_slice(&mac);
    let hello = Hello {
        endpoint: Endpoint {
            gid: Gid(gid),
            ..Endpoint::default()
        },
        region: None,
        app: tag.clone(),
    };
    let (peer, mut stream) = if client {
        let mut st = exchange::connect(&opts.server_addr().unwrap_or_default(), opts.timeout)?;
        let peer = exchange::client(&mut st, &hello, Wire::Zverbs)?;
        (peer, st)
    } else {
        let l = exchange::listen_on(opts.listen, opts.port)?;
        say!(" Waiting for a client on TCP port {}", opts.port);
        *LISTENING.0.lock().unwrap_or_else(|e| e.into_inner()) = true;
        LISTENING.1.notify_all();
        let mut st = exchange::accept(&l, opts.timeout)?;
        let peer = exchange::server(&mut st, &hello, Wire::Zverbs, |_| Ok(()))?;
        (peer, st)
    };
    let peer_mac = peer_mac(&peer.app, &tag)?;
    let dst = opts.dest_mac.unwrap_or(peer_mac);
    s.address(mac, dst, client, opts.size)?;
    say!(
        " local MAC {}  remote MAC {}  UDP port {UDP_PORT}",
        show_mac(&mac),
        show_mac(&dst)
    );
    say!("{}", "-".repeat(78));
    stream.set_nonblocking(true)?;

    match (opts.test, client) {
        (Test::RawLat, true) => lat_client(&mut s, opts, &stream)?,
        (Test::RawLat, false) => lat_server(&mut s, &mut stream)?,
        (Test::RawBw, true) => bw_client(&mut s, opts, &mut stream)?,
        (Test::RawBw, false) => bw_server(&mut s, opts, &mut stream)?,
        _ => return Err("not a raw Ethernet test".into()),
    }
    say!("{}", "-".repeat(78));
    Ok(())
}

/// The peer's MAC from its tag, after checking the test and size are this side's.
fn peer_mac(app: &str, mine: &str) -> Result<[u8; 6]> {
    let (test, mac) = app
        .rsplit_once(':')
        .ok_or_else(|| format!("the peer's tag {app:?} is not a raw Ethernet test's"))?;
    let (my_test, _) = mine.rsplit_once(':').unwrap_or((mine, ""));
    if test != my_test {
        return Err(format!(
            "the peer runs {test:?}, this side {my_test:?}: both sides need the same test and --size"
        )
        .into());
    }
    let hex: Vec<u8> = (0..6)
        .filter_map(|i| u8::from_str_radix(mac.get(2 * i..2 * i + 2)?, 16).ok())
        .collect();
    hex.try_into()
        .map_err(|_| format!("the peer's MAC {mac:?} is garbled").into())
}

/// A wait loop's empty poll on a one-process run: the core goes to the other side.
#[inline]
fn idle() {
    if YIELD_WHEN_IDLE.load(std::sync::atomic::Ordering::Relaxed) {
        std::thread::yield_now();
    }
}

/// The client of `raw_lat`: `warmup + iters + 1` ping-pongs, each post stamped.
fn lat_client(s: &mut Side, o: &Opts, stream: &TcpStream) -> Result<()> {
    let total = (o.warmup + o.iters) as u64 + 1;
    let mut lat = Recorder::new();
    let mut prev: Option<Instant> = None;
    for seq in 0..total {
        let now = Instant::now();
        if let Some(p) = prev
            && seq > o.warmup as u64
        {
            lat.record((now - p).as_nanos() as u64 / 2);
        }
        prev = Some(now);
        while !s.tx.send(seq, true)? {
            idle();
        }
        let mut w = Watch::new(Some(stream), Some(o.timeout));
        let mut answered = false;
        while !answered {
            let n = s.rx.poll(|got| answered |= got == seq)?;
            if n == 0 {
                idle();
                w.idle("waiting for the server's answer")?;
            }
        }
        s.tx.reap()?;
    }
    // The closing message: the server stops answering.
    let mut st = stream;
    st.set_nonblocking(false)?;
    st.write_all(&total.to_be_bytes())?;
    say!(
        "{}",
        latency::latency_table(o.size, &lat.summary()).trim_end()
    );
    if let Some(f) = &o.histogram {
        let text = if f.ends_with(".svg") {
            plot::svg(
                &lat,
                &format!("zverbs-perf raw_lat {} B, half round trips", o.size),
            )
        } else {
            plot::csv(&lat)
        };
        std::fs::write(f, text)?;
        say!(" histogram written to {f}");
    }
    Ok(())
}

/// Reads the peer's 8-byte closing message from the non-blocking `stream` if it has come;
/// `have` keeps a partial one.
fn closing(stream: &mut TcpStream, buf: &mut [u8; 8], have: &mut usize) -> Result<Option<u64>> {
    loop {
        match stream.read(&mut buf[*have..]) {
            Ok(0) => {
                return Err("the client closed the connection before its closing message".into());
            }
            Ok(n) => {
                *have += n;
                if *have == 8 {
                    return Ok(Some(u64::from_be_bytes(*buf)));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// Empty polls between two looks at the exchange connection.
const LOOK_EVERY: u32 = 1024;

/// The server of `raw_lat`: answers every test frame until the closing message.
fn lat_server(s: &mut Side, stream: &mut TcpStream) -> Result<()> {
    let (mut buf, mut have, mut spins) = ([0u8; 8], 0, 0u32);
    let mut answered = 0u64;
    loop {
        let mut failed = None;
        let tx = &mut s.tx;
        let n = s.rx.poll(|seq| {
            if failed.is_some() {
                return;
            }
            loop {
                match tx.send(seq, true) {
                    Ok(true) => break,
                    Ok(false) => {}
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            }
            answered += 1;
        })?;
        if let Some(e) = failed {
            return Err(e);
        }
        if n != 0 {
            s.tx.reap()?;
            continue;
        }
        idle();
        spins += 1;
        if spins >= LOOK_EVERY {
            spins = 0;
            if ABORT.load(std::sync::atomic::Ordering::Relaxed) {
                return Err("stopped: the other side of this run failed".into());
            }
            if let Some(sent) = closing(stream, &mut buf, &mut have)? {
                say!(" server side done: answered {answered} of the client's {sent} frames");
                return Ok(());
            }
        }
    }
}

/// The client of `raw_bw`: streams frames for `--iters` frames or `--duration`, then sends
/// the count and reads the server's.
fn bw_client(s: &mut Side, o: &Opts, stream: &mut TcpStream) -> Result<()> {
    let limit = o.duration.map(|d| Instant::now() + d);
    let iters = o.iters as u64;
    let start = Instant::now();
    let mut sent = 0u64;
    {
        let mut w = Watch::new(Some(stream), Some(o.timeout));
        while sent < iters {
            if sent.is_multiple_of(SIGNAL_EVERY)
                && let Some(end) = limit
                && Instant::now() >= end
            {
                break;
            }
            let every = s.tx.signal_every;
            let signaled = sent % every == every - 1 || sent + 1 == iters;
            if s.tx.send(sent, signaled)? {
                sent += 1;
                w.progress();
            } else {
                idle();
                w.idle("waiting for send completions")?;
            }
        }
    }
    let secs = start.elapsed().as_secs_f64().max(1e-9);
    // The last frame was signaled only when the count ended the run: a duration's end leaves
    // unsignaled frames, whose buffers the device has read once a later completion is in;
    // nothing more is posted, so the run ends without waiting for them.
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(o.timeout))?;
    stream.write_all(&sent.to_be_bytes())?;
    let mut got = [0u8; 8];
    stream.read_exact(&mut got)?;
    let received = u64::from_be_bytes(got);
    say!(" sent (this side):");
    say!(
        "{}",
        latency::bandwidth_table(o.size, sent as usize, secs).trim_end()
    );
    say!(
        " the server received {received} of {sent} frames ({} lost: Ethernet has no flow \
         control)",
        sent.saturating_sub(received)
    );
    Ok(())
}

/// How long `--receive-only` goes on after its last frame.
const QUIET_END: Duration = Duration::from_millis(500);

/// `raw_bw --receive-only`: no peer and no exchange; counts every frame its rule steers to it,
/// from the first to the last, until [`QUIET_END`] passes without one (or `--timeout` before
/// the first). For a sender that is not `zverbs-perf` (a capture replayed, perftest's client).
fn receive_only(s: &mut Side, o: &Opts, mac: [u8; 6]) -> Result<()> {
    say!(
        " Receiving frames to {} (receive only, no peer)",
        show_mac(&mac)
    );
    say!("{}", "-".repeat(78));
    let (mut frames, mut tests, mut in_order, mut next) = (0u64, 0u64, 0u64, 0u64);
    let (mut first, mut last) = (None::<Instant>, Instant::now());
    let started = Instant::now();
    let mut spins = 0u32;
    loop {
        let n = s.rx.poll(|seq| {
            tests += 1;
            if seq == next {
                in_order += 1;
            }
            next = next.max(seq + 1);
        })?;
        if n != 0 {
            frames += n as u64;
            last = Instant::now();
            first.get_or_insert(last);
            continue;
        }
        spins += 1;
        if spins < LOOK_EVERY {
            continue;
        }
        spins = 0;
        let now = Instant::now();
        match first {
            Some(_) if now - last >= QUIET_END => break,
            None if now - started >= o.timeout => {
                return Err(format!(
                    "no frame to {} in {} s (--timeout)",
                    show_mac(&mac),
                    o.timeout.as_secs()
                )
                .into());
            }
            _ => {}
        }
    }
    let secs = first.map_or(1e-9, |f| (last - f).as_secs_f64().max(1e-9));
    say!(" received, first frame to last:");
    say!(
        "{}",
        latency::bandwidth_table(o.size, frames as usize, secs).trim_end()
    );
    say!(" received {frames} frames ({tests} test frames, {in_order} of them in order)");
    say!("{}", "-".repeat(78));
    Ok(())
}

/// The server of `raw_bw`: counts the test frames that arrive, from the first to the last,
/// until the client's closing message and [`DRAIN`] without a frame after it; reports the
/// rate and answers with the count.
fn bw_server(s: &mut Side, o: &Opts, stream: &mut TcpStream) -> Result<()> {
    let (mut buf, mut have, mut spins) = ([0u8; 8], 0, 0u32);
    let (mut received, mut in_order, mut late, mut next) = (0u64, 0u64, 0u64, 0u64);
    let (mut first, mut last) = (None::<Instant>, None::<Instant>);
    let mut sent = None;
    let mut quiet_since = Instant::now();
    loop {
        let before = received;
        let n = s.rx.poll(|seq| {
            received += 1;
            if seq == next {
                in_order += 1;
            }
            if seq < next {
                // Behind one already seen: counted, and the order goes on from the newest.
                late += 1;
            } else {
                next = seq + 1;
            }
        })?;
        if received != before {
            let now = Instant::now();
            first.get_or_insert(now);
            last = Some(now);
            quiet_since = now;
        }
        if n != 0 {
            continue;
        }
        idle();
        spins += 1;
        if spins < LOOK_EVERY {
            continue;
        }
        spins = 0;
        if ABORT.load(std::sync::atomic::Ordering::Relaxed) {
            return Err("stopped: the other side of this run failed".into());
        }
        if sent.is_none() {
            sent = closing(stream, &mut buf, &mut have)?;
        }
        if sent.is_some() && quiet_since.elapsed() >= DRAIN {
            break;
        }
    }
    let sent = sent.unwrap_or(0);
    let secs = match (first, last) {
        (Some(a), Some(b)) if b > a => (b - a).as_secs_f64(),
        _ => 1e-9,
    };
    say!(" received (this side), first frame to last:");
    say!(
        "{}",
        latency::bandwidth_table(o.size, received as usize, secs).trim_end()
    );
    say!(
        " received {received} of {sent} frames, {in_order} in order, {late} late, {} lost",
        sent.saturating_sub(received)
    );
    stream.set_nonblocking(false)?;
    stream.write_all(&received.to_be_bytes())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs_parse_as_six_hex_pairs_only() {
        assert_eq!(parse_mac("02:00:00:00:00:0e"), Some([2, 0, 0, 0, 0, 0x0e]));
        assert_eq!(show_mac(&[2, 0, 0, 0, 0xab, 0x0e]), "02:00:00:00:ab:0e");
        for bad in [
            "",
            "02:00:00:00:00",
            "02:00:00:00:00:0e:01",
            "2:00:00:00:00:0e",
            "zz:00:00:00:00:00",
        ] {
            assert_eq!(parse_mac(bad), None, "{bad}");
        }
    }

    #[test]
    fn headers_carry_the_lengths_and_a_checksum_that_verifies() {
        let h = headers([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2], true, 64);
        assert_eq!(&h[..6], &[2, 0, 0, 0, 0, 2], "destination first");
        assert_eq!(
            u16::from_be_bytes([h[16], h[17]]),
            50,
            "IPv4 total: 64 - 14"
        );
        assert_eq!(
            u16::from_be_bytes([h[38], h[39]]),
            30,
            "UDP length: 64 - 34"
        );
        assert_eq!(&h[26..30], &CLIENT_IP);
        // A header with its checksum in place sums to 0xffff (its complement is 0).
        assert_eq!(ipv4_checksum(&h[14..34]), 0);
        // RFC 1071's worked example: the words 0x0001 0xf203 0xf4f5 0xf6f7 sum to 0xddf2.
        assert_eq!(
            ipv4_checksum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]),
            !0xddf2
        );
    }

    #[test]
    fn only_test_frames_have_a_sequence_number() {
        let mut f = [0u8; 64];
        f[..HEADERS].copy_from_slice(&headers([2; 6], [3; 6], false, 64));
        f[HEADERS..HEADERS + 8].copy_from_slice(&77u64.to_be_bytes());
        assert_eq!(test_seq(&f), Some(77));
        assert_eq!(test_seq(&f[..HEADERS + 7]), None, "too short");
        let mut other = f;
        other[36..38].copy_from_slice(&53u16.to_be_bytes());
        assert_eq!(test_seq(&other), None, "another UDP port");
        let mut arp = f;
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        assert_eq!(test_seq(&arp), None, "not IPv4");
    }

    #[test]
    fn the_peer_tag_gives_its_mac_for_the_same_test_only() {
        assert_eq!(
            peer_mac("raw_lat:64:02000000000e", "raw_lat:64:02000000000f").unwrap(),
            [2, 0, 0, 0, 0, 0x0e]
        );
        let e = peer_mac("raw_bw:64:02000000000e", "raw_lat:64:02000000000f").unwrap_err();
        assert!(e.to_string().contains("same test and --size"), "{e}");
        assert!(peer_mac("raw_lat:128:02000000000e", "raw_lat:64:02000000000f").is_err());
        assert!(peer_mac("raw_lat:64:0200", "raw_lat:64:02000000000f").is_err());
    }
}
