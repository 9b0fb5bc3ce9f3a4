//! `pingpong --rc`: an RC ping-pong that speaks `ibv_rc_pingpong`'s protocol, so either side
//! can be rdma-core's own `ibv_rc_pingpong` (package `ibverbs-utils`).
//!
//! ```text
//! pingpong --rc [options]           # server
//! pingpong --rc [options] <host>    # client
//!   -p PORT  TCP port (18515)      -d DEV   device (first NIC) -i N  device port (1)
//!   -s SIZE  message size (4096)   -m MTU   path MTU (1024)    -r N  receive depth (500)
//!   -n N     iterations (1000)     -l SL    service level (0)  -g N  GID index (none)
//!   -t, --ts  completion timestamps      --backend auto|direct|verbs
//! ```
//!
//! The peer is another process (usually on another host), so the software device, which
//! exists in one process only, is used only when named (`-d zverbs_sim0`); the first line of
//! the output says which device and why. Out-of-range arguments are refused; the exchange and
//! every wait for the peer's next message end after [`PEER_TIMEOUT`].
//!
//! As in `ibv_rc_pingpong`, both sides keep `rx-depth` receives posted, the client sends
//! first, and each side sends its next message once its previous send and one receive have
//! completed; the GID is exchanged only when `-g` is given (needed on RoCE, on both sides).
//!
//! Messages carry `ibv_rc_pingpong`'s fill byte (0x7b) in every byte. The receive buffer is
//! separate from the send buffer and zeroed before each receive is taken, so every message
//! that arrives is checked byte for byte. A wrong, short or lost message does not stop the
//! exchange (the peer would wait forever for its answer): the run goes on in step to its end,
//! then fails (exit code 1), naming how many messages were damaged and the first wrong byte.
//! rdma-core's `ibv_rc_pingpong -c` as the client writes 0 at the start of every page of its
//! first message, so this side rejects that run.
//!
//! With `-t` (`--ts`, `--rc` only) the CQ is created with completion timestamps and, as
//! `ibv_rc_pingpong --ts` does, the intervals between consecutive receive completions are
//! measured on the device clock (across the counter's wrap) and reported as their maximum,
//! minimum and average in clock cycles; then the average in nanoseconds, from the device's
//! clock frequency. A device without completion timestamps refuses the run before it starts.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use zverbs::RecvQueue;
use zverbs::backend::Queues;
use zverbs::connect::Endpoint;
use zverbs::connect::exchange::{self, Hello, Wire};
use zverbs::{
    AccessFlags, BufError, Completion, ConnectAttr, ContextOptions, MrBuf, PollCq, PollCqTimed,
    SendFlags, TimedCompletion,
};
use zverbs_tools::args::{self, Arg::*, Parser};

pub(crate) const RECV_WRID: u64 = 1;
pub(crate) const SEND_WRID: u64 = 2;

/// How long the exchange, and each wait for the peer's next message, may take.
pub(crate) const PEER_TIMEOUT: Duration = Duration::from_secs(60);
/// The largest message.
const MAX_SIZE: usize = 1 << 30;
/// The most iterations.
const MAX_ITERS: u64 = 1_000_000_000;
/// The deepest receive queue asked for (devices allow less; they say so).
const MAX_RX_DEPTH: u32 = 1 << 16;

/// Which rdma-core example the peer is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// `ibv_rc_pingpong`.
    Rc,
    /// `ibv_ud_pingpong` (`ud.rs`).
    Ud,
    /// `ibv_srq_pingpong` (`srq.rs`).
    Srq,
}

impl Mode {
    pub(crate) fn flag(self) -> &'static str {
        match self {
            Mode::Rc => "--rc",
            Mode::Ud => "--ud",
            Mode::Srq => "--srq",
        }
    }
}

pub(crate) struct Opts {
    pub(crate) server: Option<String>,
    pub(crate) port: u16,
    pub(crate) device: Option<String>,
    pub(crate) ib_port: u8,
    pub(crate) size: usize,
    pub(crate) mtu: zverbs::Mtu,
    pub(crate) rx_depth: u32,
    pub(crate) iters: u64,
    pub(crate) sl: u8,
    pub(crate) gid_index: Option<u32>,
    pub(crate) backend: Option<zverbs::BackendRequest>,
    /// QPs on the SRQ (`--srq` only).
    pub(crate) num_qp: u32,
    /// Completion timestamps (`--rc` only).
    pub(crate) ts: bool,
    /// Sleep on the CQ's completion channel instead of spinning (`-e`, `--rc` only).
    pub(crate) events: bool,
}

/// `ibv_rc_pingpong` fills its buffer with this byte (and sends it, unless `--chk`).
pub(crate) const FILL: u8 = 0x7b;

const USAGE: &str = "\
usage: pingpong --rc [options]           (server)
       pingpong --rc [options] HOST      (client)

  -p, --port PORT       TCP port (18515)
  -d, --ib-dev DEV      device (default: the first NIC)
  -i, --ib-port N       device port (1)
  -s, --size SIZE       message size, 1 to 1073741824 (4096)
  -m, --mtu MTU         path MTU: 256 512 1024 2048 4096 (1024)
  -r, --rx-depth N      receives kept posted, 2 to 65536 (500)
  -n, --iters N         iterations, 1 to 1000000000 (1000)
  -l, --sl SL           service level (0)
  -g, --gid-idx N       local GID index (none; needed on RoCE, on both sides)
  -e, --events          sleep on CQ events instead of spinning (--rc)
      --backend B       auto, direct or verbs";

/// Parses the arguments after `--rc` (`--ud`, `--srq`: `mode`). `Err("")` asks for the usage
/// text.
pub(crate) fn parse(mut p: Parser, mode: Mode) -> Result<Opts, String> {
    let mut o = Opts {
        server: None,
        port: exchange::DEFAULT_PORT,
        device: None,
        ib_port: 1,
        size: if mode == Mode::Ud { 2048 } else { 4096 },
        num_qp: 16,
        ts: false,
        mtu: zverbs::Mtu::M1024,
        rx_depth: 500,
        iters: 1000,
        sl: 0,
        gid_index: None,
        backend: None,
        events: false,
    };
    while let Some(arg) = p.next().map_err(args::explain)? {
        let f = args::flag(&arg);
        match arg {
            Short('p') | Long("port") => o.port = args::in_range(&mut p, &f, 1, u16::MAX)?,
            Short('d') | Long("ib-dev") => {
                let v = p.value().map_err(|_| format!("{f} needs a device name"))?;
                o.device = Some(args::string(v)?);
            }
            Short('i') | Long("ib-port") => o.ib_port = args::number(&mut p, &f)?,
            Short('s') | Long("size") => o.size = args::in_range(&mut p, &f, 1, MAX_SIZE)?,
            Short('m') | Long("mtu") => {
                let b: u32 = args::number(&mut p, &f)?;
                o.mtu = zverbs::Mtu::from_bytes(b)
                    .ok_or_else(|| format!("{f} {b}: use 256, 512, 1024, 2048 or 4096"))?;
            }
            Short('r') | Long("rx-depth") => {
                o.rx_depth = args::in_range(&mut p, &f, 2, MAX_RX_DEPTH)?;
            }
            Short('n') | Long("iters") => o.iters = args::in_range(&mut p, &f, 1, MAX_ITERS)?,
            Short('l') | Long("sl") => o.sl = args::number(&mut p, &f)?,
            Short('g') | Long("gid-idx") => o.gid_index = Some(args::number(&mut p, &f)?),
            Long("backend") => {
                let v = args::value(&mut p, &f)?;
                o.backend = Some(zverbs::BackendRequest::parse(&v).map_err(|e| e.to_string())?);
            }
            Short('t') | Long("ts") if mode == Mode::Rc => o.ts = true,
            Short('e') | Long("events") if mode == Mode::Rc => o.events = true,
            Short('q') | Long("num-qp") if mode == Mode::Srq => {
                o.num_qp = args::in_range(&mut p, &f, 1, 256)?;
            }
            Short('h') | Long("help") => return Err(String::new()),
            Value(v) if o.server.is_none() => o.server = Some(args::string(v)?),
            arg => return Err(args::unexpected(arg)),
        }
    }
    if mode == Mode::Srq && o.num_qp > o.rx_depth {
        return Err(format!(
            "--rx-depth {} is too small for {} QPs: at least one receive per QP",
            o.rx_depth, o.num_qp
        ));
    }
    Ok(o)
}

/// Runs the `--rc` mode with the arguments after `--rc`.
pub fn main(args: Parser) -> ExitCode {
    run_mode(args, Mode::Rc, run)
}

/// Parses the arguments of `mode` and runs it: the usage text, or exit code 2 for bad
/// arguments, 1 for a failed run.
pub(crate) fn run_mode(
    args: Parser,
    mode: Mode,
    run: fn(&Opts) -> Result<(), Box<dyn std::error::Error>>,
) -> ExitCode {
    let flag = mode.flag();
    let o = match parse(args, mode) {
        Ok(o) => o,
        Err(e) if e.is_empty() => {
            println!("{}", USAGE.replace("--rc", flag));
            if mode == Mode::Srq {
                println!("  -q, --num-qp N        QPs on the SRQ, 1 to 256 (16)");
            }
            if mode == Mode::Rc {
                println!("  -t, --ts              get completions with their timestamps");
            }
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("pingpong {flag}: {e}");
            return ExitCode::from(2);
        }
    };
    match run(&o) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pingpong {flag}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Prints `ibv_*_pingpong`'s two result lines for `iters` exchanges since `start`.
pub(crate) fn report(start: Instant, o: &Opts, iters: u64) {
    let usec = start.elapsed().as_secs_f64() * 1e6;
    let bytes = o.size as u64 * iters * 2;
    println!(
        "{bytes} bytes in {:.2} seconds = {:.2} Mbit/sec",
        usec / 1e6,
        bytes as f64 * 8.0 / usec
    );
    println!(
        "{iters} iters in {:.2} seconds = {:.2} usec/iter",
        usec / 1e6,
        usec / iters as f64
    );
}

/// Fails on an error completion, as `ibv_*_pingpong` do.
pub(crate) fn check_status(c: &Completion) -> Result<(), Box<dyn std::error::Error>> {
    if c.is_success() {
        return Ok(());
    }
    Err(format!(
        "Failed status {} ({}) for wr_id {}",
        c.status,
        c.status.to_raw(),
        c.wr_id
    )
    .into())
}

/// Fails the run when a message was damaged (see [`check_message`]).
pub(crate) fn fail_on(damage: &Damage, o: &Opts) -> Result<(), Box<dyn std::error::Error>> {
    if let Some((n, at, byte)) = damage.first {
        return Err(format!(
            "{} of {} messages received were wrong ({} bytes expected); the first: message \
             {n}, byte {at} is {byte:#04x}",
            damage.messages, o.iters, o.size
        )
        .into());
    }
    Ok(())
}

/// Empty polls, and when the last completion came: a peer silent for [`PEER_TIMEOUT`] fails
/// the run (looked at every 4096 empty polls).
pub(crate) struct Idle {
    empty: u32,
    last: Instant,
}

impl Idle {
    pub(crate) fn new() -> Self {
        Self {
            empty: 0,
            last: Instant::now(),
        }
    }

    /// Notes a poll that returned `n` completions, with `rcnt` of `iters` messages received.
    pub(crate) fn note(
        &mut self,
        n: usize,
        rcnt: u64,
        iters: u64,
    ) -> Result<(), Box<dyn std::error::Error>> {
        if n > 0 {
            (self.empty, self.last) = (0, Instant::now());
            return Ok(());
        }
        self.empty += 1;
        if self.empty.is_multiple_of(4096) && self.last.elapsed() >= PEER_TIMEOUT {
            return Err(format!(
                "nothing from the peer for {} s after {rcnt} of {iters} messages; is it still \
                 running?",
                PEER_TIMEOUT.as_secs(),
            )
            .into());
        }
        Ok(())
    }
}

fn run(o: &Opts) -> Result<(), Box<dyn std::error::Error>> {
    let copts = ContextOptions { backend: o.backend };
    let chosen = zverbs_tools::device::open(o.device.as_deref(), &copts, "-d", false)?;
    println!("  {chosen}");
    let ctx = chosen.ctx;
    let port = ctx.port(o.ib_port)?;
    if port.link_layer != zverbs::LinkLayer::Ethernet && port.lid == 0 {
        return Err("Couldn't get local LID".into());
    }
    let pd = ctx.alloc_pd()?;
    let buf = pd.alloc_buf(o.size, AccessFlags::LOCAL_WRITE)?;
    let rbuf = pd.alloc_buf(o.size, AccessFlags::LOCAL_WRITE)?;
    buf.fill(0..o.size, FILL)?;
    // The device clock, for the timestamps' mask (their wrap) and frequency; a device
    // without completion timestamps is refused here, as `ibv_rc_pingpong --ts` refuses it.
    let clock = if o.ts { Some(ctx.clock()?) } else { None };
    let channel = if o.events {
        Some(ctx.comp_channel()?)
    } else {
        None
    };
    let mut cqb = ctx.cq_builder().cqe(o.rx_depth + 1).timestamps(o.ts);
    if let Some(ch) = &channel {
        cqb = cqb.channel(ch);
    }
    let cq = cqb.build()?;
    let qp = pd
        .qp_builder(&cq, &cq)
        .max_send_wr(1)
        .max_recv_wr(o.rx_depth)
        .max_inline_data(0)
        .build()?;
    println!("  backend: {}", qp.backend());
    let gid = match o.gid_index {
        Some(i) => ctx.gid(o.ib_port, i)?.gid,
        None => zverbs::Gid::default(),
    };
    let me = Endpoint {
        lid: port.lid,
        qpn: qp.qpn(),
        psn: qp.psn(),
        gid,
    };
    let attr = |peer: &Endpoint| {
        let mut a = ConnectAttr::new(o.ib_port, me.psn, peer, o.gid_index)
            .mtu(o.mtu)
            .sl(o.sl)
            .access(AccessFlags::LOCAL_WRITE);
        if let Some(g) = &mut a.rtr.grh {
            g.hop_limit = 1; // as ibv_rc_pingpong
        }
        a
    };
    qp.to_init(&attr(&Endpoint::default()).init)?;
    // The receive queue from INIT on: the receives are posted before the exchange (as
    // ibv_rc_pingpong does), the send queue is taken once the exchange has connected the QP.
    let mut rq = qp.recv_queue()?;
    let slice = buf.slice(0..o.size)?;
    println!(
        "  local address:  LID {:#06x}, QPN {:#08x}, PSN {:#08x}, GID {}",
        me.lid, me.qpn, me.psn, me.gid
    );
    // The exchange, run after the receives are posted (as ibv_rc_pingpong does).
    let exchange = || -> Result<Endpoint, Box<dyn std::error::Error>> {
        let hello = Hello {
            endpoint: me,
            ..Hello::default()
        };
        let timeout = PEER_TIMEOUT;
        let peer = match &o.server {
            Some(host) => {
                let addr = if host.contains(':') {
                    host.clone()
                } else {
                    format!("{host}:{}", o.port)
                };
                let mut s = exchange::connect(&addr, timeout)?;
                let peer = exchange::client(&mut s, &hello, Wire::RcPingpong)?;
                let a = attr(&peer.endpoint);
                qp.to_rtr(&a.rtr)?;
                qp.to_rts(&a.rts)?;
                peer
            }
            None => {
                let l = exchange::listen(o.port)?;
                let mut s = exchange::accept(&l, timeout)?;
                exchange::server(&mut s, &hello, Wire::RcPingpong, |p| {
                    let a = attr(&p.endpoint);
                    qp.to_rtr(&a.rtr)?;
                    qp.to_rts(&a.rts)
                })?
            }
        };
        let p = peer.endpoint;
        println!(
            "  remote address: LID {:#06x}, QPN {:#08x}, PSN {:#08x}, GID {}",
            p.lid, p.qpn, p.psn, p.gid
        );
        Ok(p)
    };
    let client = o.server.is_some();
    post_recvs(&mut rq, &rbuf, o.size, o.rx_depth)?;
    exchange()?;
    let mask = clock.as_ref().map(zverbs::DeviceClock::mask);
    let (start, ts) = if o.events {
        // Sleep on the channel: `wait_blocking` polls, arms, polls again and sleeps only
        // then. With `-t`, `wait_timed` returns the completions with their timestamps.
        let wait = Next {
            plain: |cq: &mut zverbs::Poller, wc: &mut [Completion]| {
                let done = cq.wait_blocking(1, Instant::now() + PEER_TIMEOUT)?;
                wc[0] = done[0];
                Ok(1)
            },
            timed: |cq: &mut zverbs::Poller, wc: &mut [TimedCompletion]| {
                cq.wait_timed(wc, Instant::now() + PEER_TIMEOUT)
                    .map_err(|e| e.into())
            },
        };
        let (sq, rq, cq) = (qp.send_queue()?, rq, cq.poller()?);
        session(sq, rq, cq, wait, &rbuf, slice, o, client, mask)?
    } else {
        let queues = Queues::from_parts(qp.send_queue()?, rq, cq.poller()?)?;
        match queues {
            Queues::Direct(q) => session(q.sq, q.rq, q.cq, spin(), &rbuf, slice, o, client, mask)?,
            Queues::DirectUd(q) => {
                session(q.sq, q.rq, q.cq, spin(), &rbuf, slice, o, client, mask)?
            }
            Queues::Verbs(q) => session(q.sq, q.rq, q.cq, spin(), &rbuf, slice, o, client, mask)?,
        }
    };
    let usec = start.elapsed().as_secs_f64() * 1e6;
    let bytes = o.size as u64 * o.iters * 2;
    println!(
        "{bytes} bytes in {:.2} seconds = {:.2} Mbit/sec",
        usec / 1e6,
        bytes as f64 * 8.0 / usec
    );
    println!(
        "{} iters in {:.2} seconds = {:.2} usec/iter",
        o.iters,
        usec / 1e6,
        usec / o.iters as f64
    );
    if let (Some(clock), true) = (&clock, ts.iters > 0) {
        // ibv_rc_pingpong's three lines, then the average in time.
        println!("Max receive completion clock cycles = {}", ts.max);
        println!("Min receive completion clock cycles = {}", ts.min);
        let avg = ts.total as f64 / ts.iters as f64;
        println!("Average receive completion clock cycles = {avg:.6}");
        println!(
            "Average receive completion interval = {:.1} ns (device clock {} kHz)",
            avg * 1e6 / clock.khz() as f64,
            clock.khz()
        );
    }
    println!(
        "{} messages received, every byte checked ({FILL:#04x})",
        o.iters
    );
    Ok(())
}

/// The intervals between receive completions on the device clock, as `ibv_rc_pingpong --ts`
/// keeps them.
#[derive(Debug, Default)]
pub(crate) struct TsStats {
    prev: Option<u64>,
    pub(crate) max: u64,
    pub(crate) min: u64,
    pub(crate) total: u64,
    pub(crate) iters: u64,
}

impl TsStats {
    /// Notes the timestamp of a receive completion; `mask` is the counter's
    /// (`completion_timestamp_mask`), for an interval across its wrap.
    pub(crate) fn note(&mut self, ts: u64, mask: u64) {
        if let Some(prev) = self.prev {
            let delta = ts.wrapping_sub(prev) & mask;
            self.max = self.max.max(delta);
            self.min = if self.iters == 0 {
                delta
            } else {
                self.min.min(delta)
            };
            self.total += delta;
            self.iters += 1;
        }
        self.prev = Some(ts);
    }
}

/// What the checks of the received messages found.
#[derive(Debug, Default)]
pub(crate) struct Damage {
    /// Messages with at least one wrong byte.
    pub(crate) messages: u64,
    /// The first wrong byte: (message, offset, value).
    pub(crate) first: Option<(u64, usize, u8)>,
}

/// Checks that the message just received is `size` bytes of [`FILL`], noting any other byte in
/// `damage`, then zeroes the buffer so the next message is checked afresh (lockstep: no other
/// message is in flight now). A damaged message does not stop the run: the peer finishes in
/// step, and the run fails at the end.
fn check_message(buf: &MrBuf, size: usize, n: u64, damage: &mut Damage) -> Result<(), BufError> {
    check_at(buf, 0, size, FILL, n, damage)
}

/// Checks that `buf[at..at + size]` is all `fill`, noting a wrong byte in `damage`, then zeroes
/// the buffer (see [`check_message`]).
pub(crate) fn check_at(
    buf: &MrBuf,
    at: usize,
    size: usize,
    fill: u8,
    n: u64,
    damage: &mut Damage,
) -> Result<(), BufError> {
    let mut got = vec![0u8; size];
    buf.read(at, &mut got)?;
    if let Some(at) = got.iter().position(|&b| b != fill) {
        damage.messages += 1;
        damage.first.get_or_insert((n, at, got[at]));
    }
    buf.fill(at..at + size, if fill == 0 { 0xff } else { 0 })
}

fn post_recvs(
    rq: &mut RecvQueue,
    buf: &MrBuf,
    size: usize,
    n: u32,
) -> Result<(), Box<dyn std::error::Error>> {
    for _ in 0..n {
        rq.post(RECV_WRID, buf.slice(0..size)?)?;
    }
    Ok(())
}

type NextResult = Result<usize, Box<dyn std::error::Error>>;

/// How the session takes completions: without timestamps (`plain`) and with them (`timed`,
/// when the CQ has them).
struct Next<P, T> {
    plain: P,
    timed: T,
}

/// Takes completions by polling (one poll; 0 when there are none).
#[allow(clippy::type_complexity)]
fn spin<C: PollCq + PollCqTimed>() -> Next<
    fn(&mut C, &mut [Completion]) -> NextResult,
    fn(&mut C, &mut [TimedCompletion]) -> NextResult,
> {
    Next {
        plain: |cq, wc| Ok(cq.poll(wc)),
        timed: |cq, wc| Ok(cq.poll_timed(wc)),
    }
}

/// The ping-pong, with the first receives posted; returns when timing started, and the
/// receive completions' intervals when `mask` (the timestamps') is given. `next` takes
/// completions: a poll, or a wait on the CQ's channel (`-e`); with their timestamps when
/// `mask` is given.
#[allow(clippy::too_many_arguments)]
fn session<S: Into<zverbs::SendQueue>, R: Into<RecvQueue>, C: PollCq + PollCqTimed>(
    sq: S,
    rq: R,
    mut cq: C,
    mut next: Next<
        impl FnMut(&mut C, &mut [Completion]) -> NextResult,
        impl FnMut(&mut C, &mut [TimedCompletion]) -> NextResult,
    >,
    buf: &MrBuf,
    slice: zverbs::safe::BufSlice<'_>,
    o: &Opts,
    client: bool,
    mask: Option<u64>,
) -> Result<(Instant, TsStats), Box<dyn std::error::Error>> {
    let mut stats = TsStats::default();
    let mut sq: zverbs::SendQueue = sq.into();
    let mut rq: RecvQueue = rq.into();
    let start = Instant::now();
    let mut routs = o.rx_depth;
    let (mut scnt, mut rcnt) = (0u64, 0u64);
    let mut pending = RECV_WRID;
    if client {
        sq.send(SEND_WRID, slice, SendFlags::SIGNALED)?;
        pending |= SEND_WRID;
    }
    let mut wc = [Completion::EMPTY; 2];
    let mut stamps = [None; 2];
    let mut timed = [TimedCompletion::EMPTY; 2];
    let mut damage = Damage::default();
    // Empty polls, and when the last completion came (looked at every 4096 empty polls).
    let (mut idle, mut last) = (0u32, Instant::now());
    while rcnt < o.iters || scnt < o.iters {
        let n = if mask.is_some() {
            let n = (next.timed)(&mut cq, &mut timed)?;
            for (i, t) in timed[..n].iter().enumerate() {
                (wc[i], stamps[i]) = (t.wc, t.hw_timestamp());
            }
            n
        } else {
            (next.plain)(&mut cq, &mut wc)?
        };
        if n == 0 {
            idle += 1;
            if idle.is_multiple_of(4096) && last.elapsed() >= PEER_TIMEOUT {
                return Err(format!(
                    "nothing from the peer for {} s after {rcnt} of {} messages; is it still \
                     running?",
                    PEER_TIMEOUT.as_secs(),
                    o.iters
                )
                .into());
            }
        } else {
            (idle, last) = (0, Instant::now());
        }
        for (c, stamp) in wc[..n].iter().zip(stamps) {
            if !c.is_success() {
                return Err(format!(
                    "Failed status {} ({}) for wr_id {}",
                    c.status,
                    c.status.to_raw(),
                    c.wr_id
                )
                .into());
            }
            match c.wr_id {
                SEND_WRID => scnt += 1,
                RECV_WRID => {
                    if let (Some(ts), Some(mask)) = (stamp, mask) {
                        stats.note(ts, mask);
                    }
                    check_message(buf, o.size, rcnt, &mut damage)?;
                    routs -= 1;
                    if routs <= 1 {
                        post_recvs(&mut rq, buf, o.size, o.rx_depth - routs)?;
                        routs = o.rx_depth;
                    }
                    rcnt += 1;
                }
                other => return Err(format!("Completion for unknown wr_id {other}").into()),
            }
            pending &= !c.wr_id;
            if scnt < o.iters && pending == 0 {
                sq.send(SEND_WRID, slice, SendFlags::SIGNALED)?;
                pending = RECV_WRID | SEND_WRID;
            }
        }
    }
    if let Some((n, at, byte)) = damage.first {
        return Err(format!(
            "{} of {} messages received were not {} bytes of {FILL:#04x}; the first: message \
             {n}, byte {at} is {byte:#04x}",
            damage.messages, o.iters, o.size
        )
        .into());
    }
    Ok((start, stats))
}
