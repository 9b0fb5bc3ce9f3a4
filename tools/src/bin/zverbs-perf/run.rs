//! Connection set-up and the test loops, generic over the backend's queue types.

use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Instant;

use zverbs::backend::{QueueSet, Queues};
use zverbs::connect::cm::{self, CmClient, CmConnection, CmListener};
use zverbs::connect::exchange::{self, Hello, Wire};
use zverbs::connect::{Endpoint, RemoteRegion};
use zverbs::{
    AccessFlags, Completion, ConnectAttr, ContextOptions, DeviceClock, Error, MrBuf, PollCq,
    PollCqTimed, PostError, PostRecv, PostSend, RecvWr, Registered, SendFlags, SendWr, Sge,
    TimedCompletion, UdAttr, UdDest, WcOpcode, WcStatus,
};

use zverbs_tools::latency::{self, Recorder};
use zverbs_tools::plot;

use crate::watch::{LISTENING, QUIET, RunResult as Result, Watch, YIELD_WHEN_IDLE};
use crate::{Opts, Test};

/// The GRH area at the start of a UD receive.
const GRH: usize = 40;
/// The Q_Key of `--ud` (ib_send_lat's).
const UD_QKEY: u32 = 0x1111_1111;

/// Immediate of the client's closing SEND.
const DONE_IMM: u32 = 0xd0_4e_d0_4e;
/// wr_id of receives (their buffers are all the same landing area).
const RECV_ID: u64 = u64::MAX;
/// wr_id of the closing SEND.
const DONE_ID: u64 = u64::MAX - 1;

/// Buffer layout: `[A: peer's target | B: send source | C: receive area | D: atomic result]`.
#[derive(Clone, Copy, Debug)]
struct Layout {
    slot: usize,
}

impl Layout {
    fn new(size: usize) -> Self {
        Self {
            slot: size.max(8).next_multiple_of(64),
        }
    }
    fn a(&self) -> usize {
        0
    }
    fn b(&self) -> usize {
        self.slot
    }
    fn c(&self) -> usize {
        2 * self.slot
    }
    fn d(&self) -> usize {
        3 * self.slot
    }
    fn len(&self) -> usize {
        3 * self.slot + 64
    }
}

/// What the test loops need besides the queues.
struct Env<'a> {
    opts: &'a Opts,
    /// `--hw-ts`: the device clock.
    clock: Option<DeviceClock>,
    buf: MrBuf,
    lay: Layout,
    remote: RemoteRegion,
    client: bool,
    max_inline: u32,
    /// `--ud`: where the SENDs go.
    ud: Option<UdDest>,
    /// The exchange connection, open for the whole test (non-blocking): its end is the peer's.
    peer: Option<&'a TcpStream>,
}

impl Env<'_> {
    /// A wait for something the peer does in answer to this side (a message, a completion):
    /// it has the `--timeout` limit.
    fn answer(&self) -> Watch<'_> {
        Watch::new(self.peer, Some(self.opts.timeout))
    }

    /// The server's wait for the client's closing message, while the client may run for
    /// long without this side seeing anything: ended by the exchange connection when there
    /// is one, else by the limit.
    fn closing(&self) -> Watch<'_> {
        let limit = if self.peer.is_some() {
            None
        } else {
            Some(self.opts.timeout)
        };
        Watch::new(self.peer, limit)
    }
}

enum Conn {
    Tcp(TcpStream),
    Cm(#[allow(dead_code)] CmConnection),
}

/// `println!` unless this thread is the silent side.
macro_rules! say {
    ($($t:tt)*) => {
        if !QUIET.with(|q| q.get()) {
            println!($($t)*);
        }
    };
}

/// `print!` unless this thread is the silent side.
macro_rules! say_raw {
    ($($t:tt)*) => {
        if !QUIET.with(|q| q.get()) {
            print!($($t)*);
        }
    };
}

fn bad(detail: impl Into<String>) -> Box<dyn std::error::Error> {
    Box::new(Error::Protocol {
        detail: detail.into(),
    })
}

/// Runs the test described by `opts`.
pub(crate) fn run(opts: &Opts) -> Result<()> {
    // A UD receive starts with the 40 bytes of the GRH area.
    let lay = Layout::new(opts.size + if opts.ud { GRH } else { 0 });
    let copts = match opts.backend {
        Some(b) => ContextOptions::default().backend(b),
        None => ContextOptions::default(),
    };
    let client = opts.server.is_some();

    // rdma_cm decides the device from the address; the TCP exchange opens the one asked for.
    let mut cm_client = None;
    let mut cm_request = None;
    let ctx = if opts.cm {
        if client {
            let addr = resolve(&opts.server_addr().unwrap_or_default())?;
            let c = CmClient::resolve(addr, opts.timeout)?;
            let ctx = c.context().clone();
            cm_client = Some(c);
            ctx
        } else {
            let l = CmListener::bind(SocketAddr::from(([0, 0, 0, 0], opts.port)), opts.timeout)?;
            say!(" Waiting for a client on rdma_cm port {}", opts.port);
            let r = l.next_request()?;
            let ctx = r.context().clone();
            cm_request = Some((l, r));
            ctx
        }
    } else {
        zverbs::open_device(opts.device.as_deref(), &copts)?
    };
    let port = match (opts.ib_port, &cm_client, &cm_request) {
        (Some(p), _, _) => p,
        (None, Some(c), _) => c.port(),
        (None, None, Some((_, r))) => r.port(),
        _ => ctx.active_port()?,
    };
    let max_msg = ctx.port(port)?.max_msg_sz;
    if opts.size as u64 > u64::from(max_msg) {
        return Err(format!(
            "--size {}: the largest message port {port} of {} allows is {max_msg} bytes",
            opts.size,
            ctx.name()
        )
        .into());
    }
    let local = ctx.address(port, opts.gid_index)?;
    let pd = ctx.alloc_pd()?;
    let buf = if opts.hugepages {
        pd.alloc_buf_hugepages(lay.len(), AccessFlags::ALL)?
    } else {
        pd.alloc_buf(lay.len(), AccessFlags::ALL)?
    };
    // The device clock first: a device without completion timestamps refuses `--hw-ts`
    // before anything else is created.
    let clock = if opts.hw_ts { Some(ctx.clock()?) } else { None };
    let channel = if opts.events {
        Some(ctx.comp_channel()?)
    } else {
        None
    };
    let mut cqb = ctx
        .cq_builder()
        .cqe(opts.tx_depth + opts.rx_depth + 16)
        .timestamps(opts.hw_ts);
    if let Some(ch) = &channel {
        cqb = cqb.channel(ch);
    }
    let cq = cqb.build()?;
    let mut qb = pd
        .qp_builder(&cq, &cq)
        .max_send_wr(opts.tx_depth)
        .max_recv_wr(opts.rx_depth)
        .max_inline_data(opts.inline);
    if let Some(b) = opts.backend {
        qb = qb.backend(b);
    }
    if opts.ud {
        qb = qb.ud();
    }
    let qp = qb.build()?;
    let max_inline = if opts.inline == 0 {
        0
    } else {
        qp.caps().max_inline_data
    };
    let me = Endpoint {
        lid: local.lid,
        qpn: qp.qpn(),
        psn: qp.psn(),
        gid: local.gid,
    };
    let region = RemoteRegion {
        addr: buf.addr() + lay.a() as u64,
        rkey: buf.rkey(),
        len: lay.slot as u64,
    };

    say!("{}", "-".repeat(78));
    say!(" {} (zverbs-perf)", opts.test.title());
    say!(
        " Device: {}  port {port}  link {:?}  MTU {}",
        ctx.name(),
        local.link_layer,
        opts.mtu.bytes()
    );
    say!(" Backend: {}", qp.backend());
    say!(
        " Connection: {}",
        if opts.cm { "rdma_cm" } else { "TCP exchange" }
    );
    say!(
        " local address:  LID {:#06x} QPN {:#08x} PSN {:#08x} GID {}",
        me.lid,
        me.qpn,
        me.psn,
        me.gid
    );

    let tag = opts.tag();
    let ud_attr = UdAttr {
        port,
        pkey_index: 0,
        qkey: UD_QKEY,
        sq_psn: me.psn,
    };
    let mut ah = None;
    // The receives are posted before the peer may send: from INIT (the receive queue can be
    // taken then), the send queue once the QP is in RTS.
    let mut ud = None;
    let (remote, conn, rq) = if opts.cm {
        let mut private = cm::encode_region(&region).to_vec();
        private.extend_from_slice(tag.as_bytes());
        private.truncate(cm::MAX_PRIVATE);
        let (conn, peer) = if let Some(c) = cm_client {
            let conn = c.connect(&qp, &private)?;
            let peer = conn.private_data().to_vec();
            (conn, peer)
        } else {
            let (_l, r) = cm_request.take().ok_or_else(|| bad("no request"))?;
            let peer = r.private_data().to_vec();
            check_tag(&peer[24.min(peer.len())..], &tag)?;
            (r.accept(&qp, &private)?, peer)
        };
        check_tag(&peer[24.min(peer.len())..], &tag)?;
        let mut rq = qp.recv_queue()?;
        post_receives(&mut rq, &buf, lay, opts.rx_depth)?;
        (cm::decode_region(&peer)?, Conn::Cm(conn), rq)
    } else {
        // SENDs that find no receive posted are sent again for ever (RNR retry 7), as
        // perftest's QPs do: a receive queue shallower than the window only slows the test.
        let attr = |peer: &Endpoint| {
            ConnectAttr::new(port, me.psn, peer, local.gid_index)
                .mtu(opts.mtu)
                .rd_atomic(1)
                .rnr(7, 12)
        };
        if opts.ud {
            qp.to_init_ud(&ud_attr)?;
        } else {
            qp.to_init(&attr(&Endpoint::default()).init)?;
        }
        let mut rq = qp.recv_queue()?;
        post_receives(&mut rq, &buf, lay, opts.rx_depth)?;
        let hello = Hello {
            endpoint: me,
            region: Some(region),
            app: tag.clone(),
        };
        let (peer, stream) = if client {
            let mut s = exchange::connect(&opts.server_addr().unwrap_or_default(), opts.timeout)?;
            let peer = exchange::client(&mut s, &hello, Wire::Zverbs)?;
            check_tag(peer.app.as_bytes(), &tag)?;
            if opts.ud {
                qp.to_rts_ud(&ud_attr)?;
                ah = Some(pd.create_ah_to(port, &peer.endpoint, local.gid_index)?);
            } else {
                let a = attr(&peer.endpoint);
                qp.to_rtr(&a.rtr)?;
                qp.to_rts(&a.rts)?;
            }
            (peer, s)
        } else {
            let l = exchange::listen_on(opts.listen, opts.port)?;
            say!(" Waiting for a client on TCP port {}", opts.port);
            *LISTENING.0.lock().unwrap_or_else(|e| e.into_inner()) = true;
            LISTENING.1.notify_all();
            let mut s = exchange::accept(&l, opts.timeout)?;
            let peer = exchange::server(&mut s, &hello, Wire::Zverbs, |p| {
                check_tag(p.app.as_bytes(), &tag)?;
                if opts.ud {
                    qp.to_rts_ud(&ud_attr)?;
                    ah = Some(pd.create_ah_to(port, &p.endpoint, local.gid_index)?);
                    return Ok(());
                }
                let a = attr(&p.endpoint);
                qp.to_rtr(&a.rtr)?;
                qp.to_rts(&a.rts)
            })?;
            (peer, s)
        };
        say!(
            " remote address: LID {:#06x} QPN {:#08x} PSN {:#08x} GID {}",
            peer.endpoint.lid,
            peer.endpoint.qpn,
            peer.endpoint.psn,
            peer.endpoint.gid
        );
        let region = peer.region.ok_or_else(|| bad("the peer sent no buffer"))?;
        if let Some(ah) = &ah {
            ud = Some(ah.dest(peer.endpoint.qpn, UD_QKEY));
        }
        // Watched during the test (nothing is sent on it): its end is the peer's.
        stream.set_nonblocking(true)?;
        (region, Conn::Tcp(stream), rq)
    };
    let (sq, cq) = (qp.send_queue()?, cq.poller()?);
    let (queues, sleeping) = if opts.events {
        let set = zverbs::backend::QueueSet {
            sq,
            rq,
            cq: Sleeping {
                cq,
                timeout: opts.timeout,
            },
        };
        (None, Some(set))
    } else {
        (Some(Queues::from_parts(sq, rq, cq)?), None)
    };
    if remote.len < opts.size as u64 {
        return Err(bad(format!(
            "the peer's buffer has {} bytes, the test needs {}",
            remote.len, opts.size
        )));
    }
    say!("{}", "-".repeat(78));

    let env = Env {
        opts,
        clock,
        buf: buf.clone(),
        lay,
        remote,
        client,
        max_inline,
        ud,
        peer: match &conn {
            Conn::Tcp(s) => Some(s),
            Conn::Cm(_) => None,
        },
    };
    match (queues, sleeping) {
        (Some(Queues::Direct(q)), _) => test(q, &env)?,
        (Some(Queues::DirectUd(q)), _) => test(q, &env)?,
        (Some(Queues::Verbs(q)), _) => test(q, &env)?,
        (None, Some(q)) => test(q, &env)?,
        (None, None) => unreachable!("one of the two is made above"),
    }
    drop(conn);
    drop(ah);
    Ok(())
}

fn resolve(addr: &str) -> Result<SocketAddr> {
    addr.to_socket_addrs()
        .map_err(|source| Error::PeerUnreachable {
            peer: addr.to_string(),
            source,
        })?
        .next()
        .ok_or_else(|| bad(format!("{addr} resolves to no address")))
}

fn check_tag(peer: &[u8], mine: &str) -> zverbs::Result<()> {
    let end = peer.iter().position(|&b| b == 0).unwrap_or(peer.len());
    let theirs = String::from_utf8_lossy(&peer[..end]);
    if theirs != mine {
        return Err(Error::Protocol {
            detail: format!(
                "the peer runs `{theirs}` (test:size:iters:warmup), this side `{mine}`"
            ),
        });
    }
    Ok(())
}

fn post_receives(rq: &mut impl PostRecv, buf: &MrBuf, lay: Layout, n: u32) -> Result<()> {
    let sgl = [recv_sge(buf, lay)?];
    for _ in 0..n {
        // SAFETY: the receive area lies in `buf`, a registered buffer alive for the test; Rust
        // only touches it through copies.
        unsafe { rq.post(&RecvWr::new(RECV_ID, &sgl)) }?;
    }
    Ok(())
}

fn recv_sge(buf: &MrBuf, lay: Layout) -> Result<Sge> {
    Ok(buf.sge(lay.c()..lay.c() + lay.slot)?)
}

/// Posts `wr`, polling completions while the queue or the CQ is full (as long as `env`'s
/// waits allow).
fn post<S: PostSend, C: PollCq + PollCqTimed>(
    sq: &mut S,
    cq: &mut C,
    wr: &SendWr<'_>,
    seen: &mut Seen,
    env: &Env<'_>,
) -> Result<()> {
    let mut watch: Option<Watch<'_>> = None;
    loop {
        // SAFETY: every local entry of the test's requests lies in the registered test buffer,
        // which outlives the queues; Rust only touches it through copies.
        match unsafe { sq.stage(wr) } {
            Ok(()) => return Ok(()),
            Err(PostError::QueueFull { .. } | PostError::CqFull { .. }) => {
                sq.ring();
                let w = watch.get_or_insert_with(|| env.answer());
                if drain(cq, seen)? > 0 {
                    w.progress();
                } else {
                    w.idle("waiting for send completions to free the queue")?;
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// What polling has seen so far.
#[derive(Default)]
struct Seen {
    /// Poll with timestamps (`--hw-ts`).
    timed: bool,
    /// The timestamp of the last receive completion, and of the last send completion.
    recv_ts: Option<u64>,
    send_ts: Option<u64>,
    /// Receive completions not yet consumed.
    recvs: u64,
    /// The largest send wr_id completed, plus one.
    sends_done: u64,
    /// The closing SEND completed (client) or arrived (server).
    done: bool,
}

/// What a failed completion means for the test, in words: the status, the request, and what
/// the status says happened.
fn failed(c: &Completion) -> String {
    let request = match c.wr_id {
        RECV_ID => "a receive".to_string(),
        DONE_ID => "the closing SEND".to_string(),
        id => format!("request {id} ({:?})", c.opcode),
    };
    let what = match c.status {
        WcStatus::RnrRetryExcErr => {
            "the peer had no receive posted for it, again and again until the RNR retries ran \
             out (the receive queue -r, shallower than the sender's window -t, was not \
             refilled in time; this tool retries for ever, so the peer's QP was set otherwise)"
        }
        WcStatus::RetryExcErr => {
            "the peer did not acknowledge it, however often it was sent: the peer is gone, \
             unreachable, or its QP is not connected to this one"
        }
        WcStatus::RemAccessErr => {
            "the peer refused access to its buffer (its address, length or rkey as exchanged)"
        }
        WcStatus::RemInvReqErr | WcStatus::RemOpErr => {
            "the peer could not carry it out (a message longer than its receive, or its QP in \
             error)"
        }
        WcStatus::WrFlushErr => "it was flushed: an earlier request failed, or the QP was reset",
        _ => "see the status",
    };
    format!(
        "{request} failed: {} (vendor error {:#x}): {what}",
        c.status, c.vendor_err
    )
}

/// Polls once and accounts for what completed.
fn drain<C: PollCq + PollCqTimed>(cq: &mut C, seen: &mut Seen) -> Result<usize> {
    let mut wc = [Completion::EMPTY; 16];
    let n = if seen.timed {
        let mut timed = [TimedCompletion::EMPTY; 16];
        let n = cq.poll_timed(&mut timed);
        for (w, t) in wc.iter_mut().zip(&timed[..n]) {
            *w = t.wc;
            if t.wc.is_success() {
                match t.wc.opcode {
                    WcOpcode::Recv | WcOpcode::RecvRdmaWithImm => seen.recv_ts = t.timestamp,
                    _ => seen.send_ts = t.timestamp,
                }
            }
        }
        n
    } else {
        cq.poll(&mut wc)
    };
    if n == 0 && YIELD_WHEN_IDLE.load(std::sync::atomic::Ordering::Relaxed) {
        std::thread::yield_now();
    }
    for c in &wc[..n] {
        if !c.is_success() {
            return Err(failed(c).into());
        }
        match c.opcode {
            WcOpcode::Recv | WcOpcode::RecvRdmaWithImm => {
                if c.imm() == Some(DONE_IMM) {
                    seen.done = true;
                } else {
                    seen.recvs += 1;
                }
            }
            _ if c.wr_id == DONE_ID => seen.done = true,
            _ => seen.sends_done = seen.sends_done.max(c.wr_id + 1),
        }
    }
    Ok(n)
}

/// The client's latency samples, timed as perftest times them: from one iteration's post to
/// the next one's (the last iteration's, to the end of the loop), halved for the half round
/// trips of WRITE and SEND ping-pongs.
struct Laps {
    /// When the previous iteration started.
    last: Option<Instant>,
    /// Iterations not measured.
    warmup: u64,
    /// What a lap is divided by: 2 for ping-pongs (half round trips), 1 for READ and atomics
    /// (full round trips, as perftest reports them).
    per: u64,
}

impl Laps {
    /// Iteration `i` starts (or, with `i` the iteration count, the loop ended): records the
    /// lap of iteration `i - 1` unless it was a warm-up one. Never allocates.
    fn mark(&mut self, i: u64, lat: &mut Recorder) {
        let now = Instant::now();
        if let Some(t) = self.last
            && i > self.warmup
        {
            lat.record(now.duration_since(t).as_nanos() as u64 / self.per);
        }
        self.last = Some(now);
    }
}

fn test<S, R, C>(mut q: QueueSet<S, R, C>, env: &Env<'_>) -> Result<()>
where
    S: PostSend,
    R: PostRecv,
    C: PollCq + PollCqTimed,
{
    let o = env.opts;
    let total = if o.test.is_latency() {
        o.warmup + o.iters
    } else {
        o.iters
    };
    let mut seen = Seen {
        timed: env.clock.is_some(),
        ..Seen::default()
    };
    // The client of a latency test records every measured iteration into a histogram sized
    // here, once: recording never allocates. With `--hw-ts`, a second one for the NIC's
    // measurement: the interval between the timestamps of consecutive completions the client
    // waits for (the receives of send_lat, halved as the CPU's figure is; the READs and
    // atomics), in ns of the device clock.
    let mut lat = Recorder::new();
    let mut laps = Laps {
        last: None,
        warmup: o.warmup as u64,
        per: if o.test.is_round_trip() { 1 } else { 2 },
    };
    let mut nic = Recorder::new();
    let mut nic_prev: Option<u64> = None;
    let mut nic_record = |ts: Option<u64>, measured: bool, halve: bool| {
        if let (Some(clock), Some(ts)) = (&env.clock, ts) {
            if let (Some(prev), true) = (nic_prev, measured) {
                let ns = clock.elapsed_ns(prev, ts);
                nic.record(if halve { ns / 2 } else { ns });
            }
            nic_prev = Some(ts);
        }
    };
    let mut seconds = 0.0;
    // Signal one send in `sig`, so the send queue's credits come back.
    let sig = (o.tx_depth as u64 / 2).max(1);
    let flags = |i: u64, last: bool| {
        let mut f = SendFlags::NONE;
        if (i + 1).is_multiple_of(sig) || last {
            f |= SendFlags::SIGNALED;
        }
        if o.size as u32 <= env.max_inline {
            f |= SendFlags::INLINE;
        }
        f
    };
    let buf = &env.buf;
    let lay = env.lay;
    let src = [buf.sge(lay.b()..lay.b() + o.size)?];
    let target = env.remote.at(0)?;
    let recv = [recv_sge(buf, lay)?];
    let repost = |rq: &mut R, n: u64| -> Result<()> {
        for _ in 0..n {
            // SAFETY: the receive area lies in the registered test buffer.
            unsafe { rq.post(&RecvWr::new(RECV_ID, &recv)) }?;
        }
        Ok(())
    };

    // A SEND of the source, to the peer's QP (RC) or to its address (UD).
    let send = |i: u64| match &env.ud {
        Some(d) => SendWr::send_to(i, &src, d),
        None => SendWr::send(i, &src),
    };
    match (o.test, env.client) {
        // `raw::run` runs these; `main` hands them there, never here.
        (Test::RawLat | Test::RawBw, _) => return Err(bad("a raw Ethernet test")),
        (Test::WriteLat, _) => {
            let flag_at = lay.a() + o.size - 1;
            for i in 0..total as u64 {
                let v = (i % 255 + 1) as u8;
                if env.client {
                    laps.mark(i, &mut lat);
                    buf.store_u8(lay.b() + o.size - 1, v)?;
                    post(
                        &mut q.sq,
                        &mut q.cq,
                        &SendWr::write(i, &src, target).with_flags(flags(i, false)),
                        &mut seen,
                        env,
                    )?;
                    q.sq.ring();
                }
                let mut w = env.answer();
                while buf.load_u8(flag_at)? != v {
                    drain(&mut q.cq, &mut seen)?;
                    w.idle("waiting for the peer's WRITE")?;
                }
                if !env.client {
                    buf.store_u8(lay.b() + o.size - 1, v)?;
                    post(
                        &mut q.sq,
                        &mut q.cq,
                        &SendWr::write(i, &src, target).with_flags(flags(i, false)),
                        &mut seen,
                        env,
                    )?;
                    q.sq.ring();
                }
            }
        }
        (Test::SendLat, _) => {
            for i in 0..total as u64 {
                if env.client {
                    laps.mark(i, &mut lat);
                    post(
                        &mut q.sq,
                        &mut q.cq,
                        &send(i).with_flags(flags(i, false)),
                        &mut seen,
                        env,
                    )?;
                    q.sq.ring();
                }
                let mut w = env.answer();
                while seen.recvs == 0 {
                    drain(&mut q.cq, &mut seen)?;
                    w.idle("waiting for the peer's SEND")?;
                }
                seen.recvs -= 1;
                if env.client {
                    nic_record(seen.recv_ts, i as usize > o.warmup, true);
                }
                repost(&mut q.rq, 1)?;
                if !env.client {
                    post(
                        &mut q.sq,
                        &mut q.cq,
                        &send(i).with_flags(flags(i, false)),
                        &mut seen,
                        env,
                    )?;
                    q.sq.ring();
                }
            }
        }
        (Test::ReadLat | Test::AtomicLat, true) => {
            let dst = [buf.sge(lay.d()..lay.d() + 8)?];
            let rdst = [buf.sge(lay.c()..lay.c() + o.size)?];
            for i in 0..total as u64 {
                let wr = if o.test == Test::ReadLat {
                    SendWr::read(i, &rdst, target)
                } else {
                    SendWr::fetch_add(i, dst[0], target, 1)
                };
                laps.mark(i, &mut lat);
                post(&mut q.sq, &mut q.cq, &wr.signaled(), &mut seen, env)?;
                q.sq.ring();
                let mut w = env.answer();
                while seen.sends_done <= i {
                    drain(&mut q.cq, &mut seen)?;
                    w.idle("waiting for the READ or atomic to complete")?;
                }
                nic_record(seen.send_ts, i as usize > o.warmup, false);
            }
        }
        (Test::WriteBw | Test::SendBw, true) => {
            let window = u64::from(o.tx_depth);
            let n = o.iters as u64;
            let t0 = Instant::now();
            let mut posted = 0u64;
            let mut w = env.answer();
            while seen.sends_done < n {
                while posted < n && posted - seen.sends_done < window {
                    let f = flags(posted, posted + 1 == n);
                    let wr = if o.test == Test::WriteBw {
                        SendWr::write(posted, &src, target)
                    } else {
                        SendWr::send(posted, &src)
                    };
                    post(&mut q.sq, &mut q.cq, &wr.with_flags(f), &mut seen, env)?;
                    posted += 1;
                }
                q.sq.ring();
                if drain(&mut q.cq, &mut seen)? > 0 {
                    w.progress();
                } else {
                    w.idle("waiting for send completions")?;
                }
            }
            seconds = t0.elapsed().as_secs_f64();
        }
        (Test::SendBw, false) => {
            let t0 = Instant::now();
            let mut got = 0u64;
            let mut w = env.answer();
            while got < o.iters as u64 {
                drain(&mut q.cq, &mut seen)?;
                if seen.recvs > 0 {
                    got += seen.recvs;
                    repost(&mut q.rq, seen.recvs)?;
                    seen.recvs = 0;
                    w.progress();
                } else {
                    w.idle("waiting for the peer's SENDs")?;
                }
            }
            seconds = t0.elapsed().as_secs_f64();
        }
        (Test::ReadLat | Test::AtomicLat | Test::WriteBw, false) => {}
    }
    if env.client && o.test.is_latency() {
        // The last iteration's lap ends here.
        laps.mark(total as u64, &mut lat);
    }

    // The client tells the server it is done with a SEND carrying DONE_IMM.
    if env.client {
        post(
            &mut q.sq,
            &mut q.cq,
            &match &env.ud {
                Some(d) => SendWr::send_to_imm(DONE_ID, &[], d, DONE_IMM),
                None => SendWr::send_imm(DONE_ID, &[], DONE_IMM),
            }
            .signaled(),
            &mut seen,
            env,
        )?;
        q.sq.ring();
    }
    let (mut w, what) = if env.client {
        (env.answer(), "waiting for the closing SEND to complete")
    } else {
        (env.closing(), "waiting for the client's closing SEND")
    };
    // The passive side of a one-sided test (READ, atomic, WRITE bandwidth) has nothing to do
    // until the closing SEND: it naps between polls, as perftest's passive side sleeps in its
    // TCP exchange, and leaves the cores to the client and the device.
    let passive = !env.client && matches!(o.test, Test::ReadLat | Test::AtomicLat | Test::WriteBw);
    while !seen.done {
        let n = drain(&mut q.cq, &mut seen)?;
        if seen.recvs > 0 {
            repost(&mut q.rq, seen.recvs)?;
            seen.recvs = 0;
        }
        if passive && n == 0 {
            w.nap(what)?;
        } else {
            w.idle(what)?;
        }
    }

    if o.test.is_latency() && env.client {
        say_raw!("{}", latency::latency_table(o.size, &lat.summary()));
        if let (Some(clock), false) = (&env.clock, nic.is_empty()) {
            say!(
                " measured by the NIC (completion timestamps, device clock {} kHz):",
                clock.khz()
            );
            say_raw!("{}", latency::latency_table(o.size, &nic.summary()));
        }
        if o.test.is_round_trip() {
            say!(" (READ and atomic latencies are full round trips, as perftest reports them)");
        }
        if let Some(f) = &o.histogram {
            let text = if f.ends_with(".svg") {
                plot::svg(
                    &lat,
                    &format!(
                        "zverbs-perf {} {} B, {}",
                        o.test.name(),
                        o.size,
                        if o.test.is_round_trip() {
                            "full round trips"
                        } else {
                            "half round trips"
                        }
                    ),
                )
            } else {
                plot::csv(&lat)
            };
            std::fs::write(f, text)?;
            say!(" histogram written to {f}");
        }
    } else if !o.test.is_latency() && (env.client || o.test == Test::SendBw) {
        say_raw!(
            "{}",
            latency::bandwidth_table(o.size, o.iters, seconds.max(1e-9))
        );
    } else {
        say!(" server side done");
    }
    say!("{}", "-".repeat(78));
    Ok(())
}

/// Lists every device with its ports, GIDs and the backend it would get.
pub(crate) fn list_devices() -> Result<()> {
    let devs = zverbs::devices()?;
    if devs.is_empty() {
        // Opening "the first device" explains why there is none.
        zverbs::open_device(None, &ContextOptions::default())?;
    }
    for d in devs {
        say!("{}  (node GUID {:016x})", d.name(), d.guid());
        let ctx = match d.open() {
            Ok(c) => c,
            Err(e) => {
                say!("  cannot open: {e}");
                continue;
            }
        };
        match ctx.direct_support() {
            Ok(why) => say!("  backend: direct ({why})"),
            Err(why) => say!("  backend: verbs ({why})"),
        }
        let ports = ctx.attr().map(|a| a.phys_port_cnt).unwrap_or(1);
        for p in 1..=ports {
            let Ok(a) = ctx.port(p) else { continue };
            say!(
                "  port {p}: {} {:?} LID {:#06x} active MTU {}",
                a.state,
                a.link_layer,
                a.lid,
                a.active_mtu.bytes()
            );
            for g in ctx.gids(p).unwrap_or_default() {
                say!("    GID[{}] {} {:?}", g.index, g.gid, g.gid_type);
            }
        }
    }
    Ok(())
}

/// A poller that sleeps on its CQ's completion channel until completions arrive (`--events`):
/// each `poll` is a [`Poller::wait_blocking`](zverbs::Poller::wait_blocking) for one
/// completion (which polls, arms, polls again and sleeps only then) and a poll for any more;
/// 0 when `timeout` passed with nothing (the test's watch then reports a silent peer).
struct Sleeping {
    cq: zverbs::Poller,
    timeout: std::time::Duration,
}

impl PollCq for Sleeping {
    fn poll(&mut self, out: &mut [Completion]) -> usize {
        let Some((first, rest)) = out.split_first_mut() else {
            return 0;
        };
        match self
            .cq
            .wait_blocking(1, std::time::Instant::now() + self.timeout)
        {
            Ok(done) => {
                *first = done[0];
                1 + PollCq::poll(&mut self.cq, rest)
            }
            Err(zverbs::safe::WaitError::Timeout { .. }) => 0,
            Err(e) => {
                eprintln!("zverbs-perf: waiting for completions failed: {e}");
                0
            }
        }
    }
}

/// With `--hw-ts` too: each `poll_timed` is an
/// [`Poller::wait_timed`](zverbs::Poller::wait_timed), sleeping as `poll` does and
/// returning the completions with their timestamps.
impl PollCqTimed for Sleeping {
    fn poll_timed(&mut self, out: &mut [zverbs::TimedCompletion]) -> usize {
        match self
            .cq
            .wait_timed(out, std::time::Instant::now() + self.timeout)
        {
            Ok(n) => n,
            Err(zverbs::safe::WaitError::Timeout { .. }) => 0,
            Err(e) => {
                eprintln!("zverbs-perf: waiting for completions failed: {e}");
                0
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_completion_says_what_happened_not_protocol() {
        let c = Completion {
            wr_id: 17,
            status: WcStatus::RnrRetryExcErr,
            opcode: WcOpcode::Send,
            ..Completion::EMPTY
        };
        let m = failed(&c);
        assert!(m.starts_with("request 17 (Send) failed: "), "{m}");
        assert!(m.contains("no receive posted"), "{m}");
        assert!(m.contains("-r") && m.contains("-t"), "{m}");
        assert!(!m.contains("protocol"), "{m}");
        let m = failed(&Completion {
            wr_id: DONE_ID,
            status: WcStatus::RetryExcErr,
            ..c
        });
        assert!(m.starts_with("the closing SEND failed"), "{m}");
        assert!(m.contains("did not acknowledge"), "{m}");
    }
}
