//! The fault matrix: faults × operations × backends. Each cell connects a requester A to a
//! peer, posts a window of requests (some unsignaled) and a receive or two, meets a fault, posts
//! a second window, and checks that every request completed exactly once (posted = success +
//! error + flush, each `wr_id` once), that the last completion came within a bound after the
//! fault (a hang detector derived from the QP's timeout and retries, never a performance
//! claim), and that the process's resident set stays flat over rounds of the cell.
//!
//! Faults: the peer's process killed (SIGKILL), the peer's QP destroyed, the port down, the QP
//! fatal, the device fatal, a CQ full, a wrong key, RNR (no receive posted, one RNR retry), and
//! a reset followed by a reconnection to the same peer or to a new one. Operations: SEND (with
//! receives posted), RDMA WRITE, RDMA READ and fetch-and-add. A fault a backend cannot be made
//! to show is a cell that says why, never a silent skip.
//!
//! Each cell runs in a process of its own (this test binary run again with [`CELL`] set), so
//! that a device fault, a port taken down or the software device's stepping stay within the
//! cell, the cells of one backend run side by side (each process has its own software device
//! and its own emulated ConnectX; on a kernel device a port taken down is the machine's, so
//! those cells run alone, after the others), and the resident set is the cell's own. The
//! killed peer is a third process (this binary again, with [`PEER`] set).
//!
//! Backends: the software device (with the `sim` feature), and the device `ZVERBS_TEST_DEVICE`
//! names (rxe in `cargo xtask test --only rxe`, the emulated ConnectX in `--only connectx`,
//! which names its `zverbs-emu` tool in [`EMU_TOOL`] for the faults it injects).
//!
//! How an unsignaled request is accounted for: it completes with an error or a flush
//! completion, or it had succeeded, which its effect shows (the WRITE's bytes at the peer, the
//! SEND's in a receive buffer, the READ's or the atomic's result here). Where the effect cannot
//! be seen (a WRITE or a SEND to a peer that was killed) a request with no completion is counted
//! as *retired*: carried out before the fault, and retired by the next completion or by the
//! drain marker of the reset.
//!
//! `ZVERBS_FAULT_ROUNDS` sets the rounds after the warm-up (20 on the software device, 3
//! elsewhere); `ZVERBS_FAULT_JOBS` the cells run at once (2).

mod device;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use zverbs::connect::Endpoint;
use zverbs::safe::SafePostError;
use zverbs::{
    AccessFlags, AsyncEvent, Completion, ConnectAttr, Context, ContextOptions, Cq, Error, Gid,
    MrBuf, Pd, PollCq, Poller, PortState, PostError, PostSend, Qp, RecvQueue, Registered,
    RemoteBuf, SendFlags, SendQueue, SendWr, Sge, WcStatus,
};

/// Set in a cell's process: `FAULT OP DEVICE GID_INDEX` (`-` for no GID index).
const CELL: &str = "ZVERBS_FAULT_CELL";
/// Set in a killed peer's process: `DEVICE GID_INDEX RECEIVES`.
const PEER: &str = "ZVERBS_FAULT_PEER";
/// The emulated ConnectX's `zverbs-emu` tool (its `inject` command), set by the connectx stage.
const EMU_TOOL: &str = "ZVERBS_TEST_EMU_TOOL";

/// The QPs' ACK timeout code and transport retries: 4.096 µs × 2^10 × 2 ≈ 8.4 ms to fail.
const TIMEOUT: u8 = 10;
const RETRY_CNT: u8 = 1;
/// RNR retries, and the RNR timer code each side asks for (1: 10 µs).
const RNR_RETRY: u8 = 1;
const MIN_RNR_TIMER: u8 = 1;
/// Requests per window; the odd ones are unsignaled. The middle one (signaled) is the bad
/// request of the wrong-key and RNR cells.
const WINDOW: u64 = 8;
const MIDDLE: u64 = WINDOW / 2;
/// Receives A posts (flushed when it enters the error state).
const A_RECVS: u64 = 2;
/// Receives a peer posts for the SENDs (both windows, with room to spare).
const PEER_RECVS: u64 = 32;
/// The `wr_id` of A's first receive.
const RECV_BASE: u64 = 900;
/// Growth of the resident set allowed over the rounds of a cell (the allocator's slack).
const SLACK_KB: u64 = 2048;
/// The value of each atomic counter before the fetch-and-add.
const ATOMIC_BASE: u64 = 0x1111;

// Buffer layout (both sides, 64 KiB): 64 bytes per request id.
const SRC: usize = 0x0000; // A: what WRITE and SEND send; a peer: what READ reads
const DST: usize = 0x4000; // A: where READ and the atomic land; a peer: where WRITE lands
const RECV: usize = 0x8000; // receive buffers
const ATOMIC: usize = 0xc000; // a peer's counters, 8 bytes each
const BUF_LEN: usize = 0x10000;
/// Bytes of each SEND and each receive buffer: more than a CQE holds, so that the message is
/// in the receive buffer, never scattered into the CQE (where it is seen only once polled).
const MSG: usize = 128;
/// Receive buffers of a peer, used in turn (the receives of a reset peer's next incarnation
/// land in buffers of their own, so that the first incarnation's SENDs stay visible).
const RECV_SLOTS: usize = (ATOMIC - RECV) / MSG;

/// How long a cell may take from its fault to its last completion before it is a hang: a
/// hundred times the transport timer's worst case and the RNR timers' (4.096 µs × 2^timeout ×
/// (retry_cnt + 1), 10 µs × (rnr_retry + 1)), plus 5 s for a slow machine (rxe under
/// emulation, a process spawned to inject the fault).
fn hang_limit() -> Duration {
    let transport = 4.096e-6 * f64::from(1u32 << TIMEOUT) * f64::from(RETRY_CNT + 1);
    let rnr = 10e-6 * f64::from(RNR_RETRY + 1);
    Duration::from_secs(5) + Duration::from_secs_f64(100.0 * (transport + rnr))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    PeerKilled,
    PeerQpDestroyed,
    PortDown,
    QpFatal,
    DeviceFatal,
    CqFull,
    WrongKey,
    Rnr,
    ResetSamePeer,
    ResetNewPeer,
}

const FAULTS: [Fault; 10] = [
    Fault::PeerKilled,
    Fault::PeerQpDestroyed,
    Fault::PortDown,
    Fault::QpFatal,
    Fault::DeviceFatal,
    Fault::CqFull,
    Fault::WrongKey,
    Fault::Rnr,
    Fault::ResetSamePeer,
    Fault::ResetNewPeer,
];

impl Fault {
    fn key(self) -> &'static str {
        match self {
            Fault::PeerKilled => "peer-killed",
            Fault::PeerQpDestroyed => "peer-qp-destroyed",
            Fault::PortDown => "port-down",
            Fault::QpFatal => "qp-fatal",
            Fault::DeviceFatal => "device-fatal",
            Fault::CqFull => "cq-full",
            Fault::WrongKey => "wrong-key",
            Fault::Rnr => "rnr",
            Fault::ResetSamePeer => "reset-same-peer",
            Fault::ResetNewPeer => "reset-new-peer",
        }
    }

    fn parse(s: &str) -> Self {
        *FAULTS
            .iter()
            .find(|f| f.key() == s)
            .unwrap_or_else(|| panic!("no fault {s:?}"))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Send,
    Write,
    Read,
    Atomic,
}

const OPS: [Op; 4] = [Op::Send, Op::Write, Op::Read, Op::Atomic];

impl Op {
    fn key(self) -> &'static str {
        match self {
            Op::Send => "send",
            Op::Write => "write",
            Op::Read => "read",
            Op::Atomic => "fetch-add",
        }
    }

    fn parse(s: &str) -> Self {
        *OPS.iter()
            .find(|o| o.key() == s)
            .unwrap_or_else(|| panic!("no operation {s:?}"))
    }
}

/// Which kind of device a cell runs on.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Backend {
    /// `zverbs_sim0`, this process's own.
    Software,
    /// The emulated ConnectX, with its `zverbs-emu` tool.
    Emulated(PathBuf),
    /// A kernel device (rxe): its name.
    Kernel(String),
}

impl Backend {
    fn of(device: &str) -> Self {
        if device == zverbs::SOFTWARE_DEVICE {
            Backend::Software
        } else if let Some(tool) = std::env::var_os(EMU_TOOL).filter(|v| !v.is_empty()) {
            Backend::Emulated(tool.into())
        } else {
            Backend::Kernel(device.to_string())
        }
    }

    fn label(&self) -> String {
        match self {
            Backend::Software => "software device".into(),
            Backend::Emulated(_) => "emulated ConnectX".into(),
            Backend::Kernel(d) => d.clone(),
        }
    }

    /// Why `fault` cannot be provoked here, if it cannot.
    fn cannot(&self, fault: Fault) -> Option<&'static str> {
        match (self, fault) {
            (Backend::Software, Fault::PeerKilled) => Some(
                "not provokable: the software device serves one process (a peer in another \
                 process is the emulated ConnectX's cell)",
            ),
            (Backend::Kernel(_), Fault::QpFatal) => Some(
                "not provokable: rxe raises QP fatal only on its own internal errors, which \
                 nothing from user space provokes",
            ),
            (Backend::Kernel(d), Fault::PortDown) if virtual_netdev(d).is_none() => Some(
                "not provokable: the port's interface is not a virtual one (this cell takes \
                 its link down)",
            ),
            (Backend::Kernel(_), Fault::DeviceFatal) => Some(
                "not provokable: rxe raises no device fatal event (deleting the device would \
                 end it for every other test)",
            ),
            _ => None,
        }
    }

    /// Whether a cell with `fault` changes what other processes' cells see (a kernel device's
    /// port is the machine's).
    fn exclusive(&self, fault: Fault) -> bool {
        matches!(self, Backend::Kernel(_)) && fault == Fault::PortDown
    }
}

/// A 64-bit tag that names request `id` in the bytes it moves.
fn tag(id: u64) -> [u8; 8] {
    (0xfa17_0000_0000_0000 | id).to_le_bytes()
}

/// Fills a peer's buffer: every READ source is its id's tag, every counter at its base.
fn fill_peer(buf: &MrBuf) {
    for id in 0..256u64 {
        buf.write(SRC + id as usize * 64, &tag(id)).unwrap();
        buf.write(ATOMIC + id as usize * 8, &ATOMIC_BASE.to_le_bytes())
            .unwrap();
    }
}

fn rss_kb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/self/status")
}

fn open(device: &str) -> Context {
    zverbs::open_device(Some(device), &ContextOptions::default())
        .unwrap_or_else(|e| panic!("open {device}: {e}"))
}

/// This side's endpoint for `qp`, its port and GID index.
fn endpoint(ctx: &Context, gid: Option<u32>, qp: &Qp) -> (Endpoint, u8, Option<u32>, zverbs::Mtu) {
    let port = ctx.active_port().expect("an active port");
    let local = ctx.address(port, gid).expect("the port's address");
    (
        Endpoint {
            lid: local.lid,
            qpn: qp.qpn(),
            psn: qp.psn(),
            gid: local.gid,
        },
        port,
        local.gid_index,
        local.active_mtu.min(zverbs::Mtu::M1024),
    )
}

/// Connects `qp` (on `ctx`) to `peer` with the matrix's small timers.
fn connect(ctx: &Context, gid: Option<u32>, qp: &Qp, peer: &Endpoint) {
    let (_, port, gi, mtu) = endpoint(ctx, gid, qp);
    let attr = ConnectAttr::new(port, qp.psn(), peer, gi)
        .mtu(mtu)
        .rd_atomic(4)
        .timeout(TIMEOUT, RETRY_CNT)
        .rnr(RNR_RETRY, MIN_RNR_TIMER);
    qp.connect_with(&attr).expect("connect (INIT, RTR, RTS)");
}

fn encode(ep: &Endpoint, remote: RemoteBuf) -> String {
    let gid: String = ep.gid.0.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{} {} {} {gid} {} {}",
        ep.lid, ep.qpn, ep.psn, remote.addr, remote.rkey
    )
}

fn decode(line: &str) -> (Endpoint, RemoteBuf) {
    let f: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(f.len(), 6, "an endpoint line: {line:?}");
    let mut gid = [0u8; 16];
    for (i, b) in gid.iter_mut().enumerate() {
        *b = u8::from_str_radix(&f[3][2 * i..2 * i + 2], 16).unwrap();
    }
    (
        Endpoint {
            lid: f[0].parse().unwrap(),
            qpn: f[1].parse().unwrap(),
            psn: f[2].parse().unwrap(),
            gid: Gid(gid),
        },
        RemoteBuf::new(f[4].parse().unwrap(), f[5].parse().unwrap()),
    )
}

/// A peer QP in this process, with its memory (kept after its QP is destroyed).
struct LocalPeer {
    cq: Cq,
    buf: MrBuf,
    qp: Option<Qp>,
    rq: Option<RecvQueue>,
    poller: Poller,
    posted_recvs: u64,
}

impl LocalPeer {
    fn new(pd: &Pd) -> Self {
        let ctx = pd.context();
        let cq = ctx.cq_builder().cqe(128).build().unwrap();
        let qp = pd
            .qp_builder(&cq, &cq)
            .max_send_wr(8)
            .max_recv_wr(PEER_RECVS as u32)
            .build()
            .unwrap();
        let buf = pd.alloc_buf(BUF_LEN, AccessFlags::ALL).unwrap();
        fill_peer(&buf);
        let poller = cq.poller().unwrap();
        Self {
            cq,
            buf,
            qp: Some(qp),
            rq: None,
            poller,
            posted_recvs: 0,
        }
    }

    fn qp(&self) -> &Qp {
        self.qp.as_ref().expect("the peer's QP")
    }

    /// Posts `n` receives (the QP connected).
    fn post_recvs(&mut self, n: u64) {
        if self.rq.is_none() {
            self.rq = Some(self.qp().recv_queue().unwrap());
        }
        let rq = self.rq.as_mut().unwrap();
        for _ in 0..n {
            let k = self.posted_recvs as usize % RECV_SLOTS;
            rq.post(
                self.posted_recvs,
                self.buf
                    .slice(RECV + k * MSG..RECV + (k + 1) * MSG)
                    .unwrap(),
            )
            .unwrap();
            self.posted_recvs += 1;
        }
    }

    /// Drains the peer (error state, poll until the reset is accepted) and resets it.
    fn drain_and_reset(&mut self) {
        let qp = self.qp.as_ref().unwrap();
        qp.to_error().unwrap();
        drain_and_reset(qp, &mut self.poller, Instant::now() + hang_limit());
    }

    fn destroy_qp(&mut self) {
        self.rq = None;
        self.qp = None;
    }
}

/// A peer in another process (this binary with [`PEER`] set), to be killed.
struct RemotePeer {
    child: Child,
    _out: BufReader<ChildStdout>,
}

/// The next line of the peer's that starts with `peer: `, without it.
fn peer_line(out: &mut BufReader<ChildStdout>, what: &str) -> String {
    loop {
        let mut l = String::new();
        let n = out.read_line(&mut l).unwrap();
        assert!(n > 0, "the peer ended before {what}");
        if let Some(at) = l.find("peer: ") {
            return l[at + 6..].trim().to_string();
        }
    }
}

impl RemotePeer {
    /// Starts a peer on `device` with `recvs` receives, connects it to `a` and returns it with
    /// its endpoint and memory.
    fn start(
        ctx: &Context,
        gid: Option<u32>,
        device: &str,
        recvs: u64,
        a: &Qp,
    ) -> (Self, Endpoint, RemoteBuf) {
        let gi = gid.map_or("-".to_string(), |g| g.to_string());
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "a_peer", "--nocapture", "--test-threads=1"])
            .env(PEER, format!("{device} {gi} {recvs}"))
            .env_remove(CELL)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("the peer's process");
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let (ep, remote) = decode(&peer_line(&mut out, "its endpoint"));
        let (mine, _, _, _) = endpoint(ctx, gid, a);
        let stdin = child.stdin.as_mut().unwrap();
        writeln!(stdin, "{}", encode(&mine, RemoteBuf::new(0, 0))).unwrap();
        stdin.flush().unwrap();
        assert_eq!(peer_line(&mut out, "it was ready"), "ready");
        (Self { child, _out: out }, ep, remote)
    }

    fn kill(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for RemotePeer {
    fn drop(&mut self) {
        // Ends this child (and only it) if it still runs.
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The peer's process: a QP with receives, connected to the cell's A; it waits until killed
/// (or until its input closes).
fn peer_process(spec: &str) {
    let f: Vec<&str> = spec.split_whitespace().collect();
    let (device, gid, recvs) = (f[0], f[1].parse::<u32>().ok(), f[2].parse::<u64>().unwrap());
    let ctx = open(device);
    let pd = ctx.alloc_pd().unwrap();
    let mut me = LocalPeer::new(&pd);
    let (ep, _, _, _) = endpoint(&ctx, gid, me.qp());
    println!("peer: {}", encode(&ep, me.buf.remote(0).unwrap()));
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    let (a, _) = decode(line.trim());
    connect(&ctx, gid, me.qp(), &a);
    me.post_recvs(recvs);
    println!("peer: ready");
    // Until killed; an input that closes (the cell ended) ends it too.
    let _ = std::io::stdin().read_line(&mut line);
}

/// The peer a window targets.
enum Peer {
    Local(Box<LocalPeer>),
    Remote(RemotePeer),
}

/// A request A was asked to post.
#[derive(Clone, Copy, Debug)]
struct Req {
    id: u64,
    op: Op,
    signaled: bool,
    /// Index of the peer it targets.
    peer: usize,
    /// Refused by the queue (with the error's text), so never posted.
    refused: Option<&'static str>,
    bad_key: bool,
}

/// A's queues.
struct A {
    qp: Qp,
    cq: Cq,
    buf: MrBuf,
    /// Made once the QP is connected.
    sq: Option<SendQueue>,
    rq: Option<RecvQueue>,
    poller: Poller,
}

impl A {
    fn new(pd: &Pd, cqe: u32) -> Self {
        let ctx = pd.context();
        let cq = ctx.cq_builder().cqe(cqe).build().unwrap();
        let qp = pd
            .qp_builder(&cq, &cq)
            .max_send_wr(32)
            .max_recv_wr(4)
            .build()
            .unwrap();
        let buf = pd.alloc_buf(BUF_LEN, AccessFlags::ALL).unwrap();
        for id in 0..256u64 {
            buf.write(SRC + id as usize * 64, &tag(id)).unwrap();
        }
        let poller = cq.poller().unwrap();
        Self {
            qp,
            cq,
            buf,
            sq: None,
            rq: None,
            poller,
        }
    }

    /// Posts A's receives `first..first + A_RECVS` (the QP connected).
    fn post_recvs(&mut self, first: u64) {
        if self.rq.is_none() {
            self.rq = Some(self.qp.recv_queue().unwrap());
        }
        let rq = self.rq.as_mut().unwrap();
        for i in 0..A_RECVS {
            let off = RECV + i as usize * MSG;
            rq.post(first + i, self.buf.slice(off..off + MSG).unwrap())
                .unwrap();
        }
        if self.sq.is_none() {
            self.sq = Some(self.qp.send_queue().unwrap());
        }
    }

    /// Posts request `r` to `remote` (a peer's buffer at offset 0); records a refusal.
    fn post(&mut self, r: &mut Req, remote: RemoteBuf) {
        let id = r.id as usize;
        let flags = if r.signaled {
            SendFlags::SIGNALED
        } else {
            SendFlags::empty()
        };
        let at = |off: usize| {
            let rk = if r.bad_key {
                remote.rkey ^ 0x5a5a_0000
            } else {
                remote.rkey
            };
            RemoteBuf::new(remote.addr + off as u64, rk)
        };
        let len = if r.op == Op::Send { MSG } else { 8 };
        let src = self.buf.slice(SRC + id * 64..SRC + id * 64 + len).unwrap();
        let dst = self.buf.slice(DST + id * 64..DST + id * 64 + 8).unwrap();
        let sq = self.sq.as_mut().expect("A connected");
        let res = match r.op {
            Op::Send if r.bad_key => {
                // A SEND's key is the local one: a wrong lkey, through the raw post.
                let sge = src.sge();
                let sgl = [Sge {
                    lkey: sge.lkey ^ 0x5a5a_0000,
                    ..sge
                }];
                // SAFETY: the span is A's registered buffer, alive until the cell's end; the
                // device refuses the wrong key before it reads anything.
                unsafe { sq.post(&SendWr::send(r.id, &sgl).with_flags(flags)) }
                    .map_err(SafePostError::Post)
            }
            Op::Send => sq.send(r.id, src, flags),
            Op::Write => sq.write(r.id, src, at(DST + id * 64), flags),
            Op::Read => sq.read(r.id, dst, at(SRC + id * 64), flags),
            Op::Atomic => sq.fetch_add(r.id, dst, at(ATOMIC + id * 8), 1, flags),
        };
        match res {
            Ok(()) => {}
            Err(SafePostError::Post(PostError::NotReady)) => r.refused = Some("NotReady"),
            Err(SafePostError::Post(PostError::CqFull { .. })) => r.refused = Some("CqFull"),
            Err(e) => panic!("request {}: {e}", r.id),
        }
    }
}

/// The requests of one window: ids `first..first + WINDOW` of `op` (the odd ones unsignaled),
/// to peer `peer`; `middle`, if given, replaces the middle one.
fn window(first: u64, op: Op, peer: usize, middle: Option<(Op, bool)>) -> Vec<Req> {
    (0..WINDOW)
        .map(|i| {
            let (op, bad_key) = match middle {
                Some(m) if i == MIDDLE => m,
                _ => (op, false),
            };
            Req {
                id: first + i,
                op,
                signaled: i % 2 == 0 || i == WINDOW - 1,
                peer,
                refused: None,
                bad_key,
            }
        })
        .collect()
}

/// Polls `qp`'s CQ and resets it until the reset is accepted; the completions polled.
fn drain_and_reset(qp: &Qp, cq: &mut Poller, deadline: Instant) -> Vec<(Completion, Instant)> {
    let mut got = Vec::new();
    let mut wc = [Completion::EMPTY; 16];
    loop {
        match qp.reset() {
            Ok(()) => return got,
            Err(Error::NotDrained { .. }) => {
                let n = cq.poll(&mut wc);
                let now = Instant::now();
                got.extend(wc[..n].iter().map(|c| (*c, now)));
            }
            Err(e) => panic!("reset: {e}"),
        }
        assert!(
            Instant::now() < deadline,
            "never drained: {:?} outstanding, polled {got:?}",
            qp.outstanding()
        );
    }
}

/// Polls until every signaled request of `reqs` that was posted has a completion, failing at
/// `deadline` (a hang).
fn wait_signaled(
    a: &mut A,
    reqs: &[Req],
    got: &mut Vec<(Completion, Instant)>,
    deadline: Instant,
    what: &str,
) {
    let mut wc = [Completion::EMPTY; 16];
    loop {
        let seen: Vec<u64> = got.iter().map(|(c, _)| c.wr_id).collect();
        let missing: Vec<u64> = reqs
            .iter()
            .filter(|r| r.signaled && r.refused.is_none() && !seen.contains(&r.id))
            .map(|r| r.id)
            .collect();
        if missing.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: requests {missing:?} never completed within {:?}; completions {got:?}",
            hang_limit()
        );
        let n = a.poller.poll(&mut wc);
        let now = Instant::now();
        got.extend(wc[..n].iter().map(|c| (*c, now)));
    }
}

/// What one round of a cell counted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Tally {
    posted: u64,
    refused: u64,
    success: u64,
    error: u64,
    flush: u64,
    retired: u64,
    /// From the fault to the last completion of a send request.
    last: Duration,
    note: String,
}

/// Whether request `r`'s effect is visible: `None` where it cannot be seen.
fn effect(r: &Req, a: &A, peers: &[Peer]) -> Option<bool> {
    let id = r.id as usize;
    let mine = |off: usize| {
        let mut b = [0u8; 8];
        a.buf.read(off, &mut b).unwrap();
        b
    };
    match r.op {
        Op::Read => Some(mine(DST + id * 64) == tag(r.id)),
        Op::Atomic => Some(mine(DST + id * 64) == ATOMIC_BASE.to_le_bytes()),
        Op::Write | Op::Send => {
            let Peer::Local(p) = &peers[r.peer] else {
                return None;
            };
            let theirs = |off: usize| {
                let mut b = [0u8; 8];
                p.buf.read(off, &mut b).unwrap();
                b
            };
            Some(if r.op == Op::Write {
                theirs(DST + id * 64) == tag(r.id)
            } else {
                (0..RECV_SLOTS).any(|k| theirs(RECV + k * MSG) == tag(r.id))
            })
        }
    }
}

/// Checks that every request completed exactly once and counts how.
fn account(reqs: &[Req], got: &[(Completion, Instant)], a: &A, peers: &[Peer]) -> Tally {
    let mut t = Tally::default();
    let mut by_id: HashMap<u64, Vec<Completion>> = HashMap::new();
    for (c, _) in got {
        if c.wr_id != zverbs::DRAIN_WR_ID {
            by_id.entry(c.wr_id).or_default().push(*c);
        }
    }
    let known = |id: u64| {
        reqs.iter().any(|r| r.id == id && r.refused.is_none())
            || (RECV_BASE..RECV_BASE + A_RECVS).contains(&id)
    };
    for id in by_id.keys() {
        assert!(known(*id), "a completion for no request: {id}: {got:?}");
    }
    let count = |t: &mut Tally, c: &Completion| match c.status {
        WcStatus::Success => t.success += 1,
        WcStatus::WrFlushErr => t.flush += 1,
        _ => t.error += 1,
    };
    let posted: Vec<&Req> = reqs.iter().filter(|r| r.refused.is_none()).collect();
    t.refused = (reqs.len() - posted.len()) as u64;
    for r in &posted {
        let cs = by_id.get(&r.id).map_or(&[][..], |v| &v[..]);
        assert!(
            cs.len() <= 1,
            "request {} completed {} times: {cs:?}",
            r.id,
            cs.len()
        );
        if let Some(c) = cs.first() {
            count(&mut t, c);
            continue;
        }
        assert!(
            !r.signaled,
            "signaled request {} never completed: {got:?}",
            r.id
        );
        match effect(r, a, peers) {
            Some(true) => t.success += 1,
            Some(false) => panic!(
                "unsignaled request {} ({:?}) neither completed nor took effect: {got:?}",
                r.id, r.op
            ),
            // Carried out before the fault where its effect cannot be seen (a killed peer's
            // memory): retired by a later completion or the drain marker.
            None => t.retired += 1,
        }
    }
    for id in RECV_BASE..RECV_BASE + A_RECVS {
        let cs = by_id.get(&id).map_or(&[][..], |v| &v[..]);
        assert_eq!(cs.len(), 1, "receive {id}: {cs:?}; all: {got:?}");
        count(&mut t, &cs[0]);
    }
    t.posted = posted.len() as u64 + A_RECVS;
    assert_eq!(
        t.posted,
        t.success + t.error + t.flush + t.retired,
        "posted = success + error + flush: {t:?}"
    );
    t
}

/// The software device's controls (with the `sim` feature; without it no cell runs there).
#[cfg(feature = "sim")]
mod soft {
    use zverbs::Context;
    use zverbs::sim::PortState;

    /// Holds the device still (`true`: nothing moves until released) or lets it run.
    pub fn hold(ctx: &Context, on: bool) {
        ctx.sim().unwrap().set_stepped(on);
    }

    pub fn port(ctx: &Context, down: bool) {
        let s = if down {
            PortState::Down
        } else {
            PortState::Active
        };
        ctx.sim().unwrap().set_port_state(1, s).unwrap();
    }

    pub fn qp_fatal(ctx: &Context, qpn: u32) {
        ctx.sim().unwrap().inject_qp_fatal(qpn).unwrap();
    }

    pub fn device_fatal(ctx: &Context) {
        ctx.sim().unwrap().inject_device_fatal();
    }
}

#[cfg(not(feature = "sim"))]
mod soft {
    use zverbs::Context;

    const NO_SIM: &str = "the software device needs the sim feature";

    pub fn hold(_: &Context, _: bool) {
        unreachable!("{NO_SIM}")
    }

    pub fn port(_: &Context, _: bool) {
        unreachable!("{NO_SIM}")
    }

    pub fn qp_fatal(_: &Context, _: u32) {
        unreachable!("{NO_SIM}")
    }

    pub fn device_fatal(_: &Context) {
        unreachable!("{NO_SIM}")
    }
}

/// Sends `fault` to the emulated ConnectX of this process through its tool.
fn emu_inject(tool: &PathBuf, fault: &[&str]) {
    let out = Command::new(tool)
        .arg("inject")
        .arg(std::process::id().to_string())
        .args(fault)
        .env_remove("LD_PRELOAD")
        .output()
        .expect("zverbs-emu inject");
    assert!(
        out.status.success(),
        "zverbs-emu inject {fault:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The network interface under a kernel device's port 1 (RoCE), if it is a virtual one.
fn virtual_netdev(device: &str) -> Option<String> {
    let p = format!("/sys/class/infiniband/{device}/ports/1/gid_attrs/ndevs/0");
    let dev = std::fs::read_to_string(p).ok()?.trim().to_string();
    let real = std::fs::canonicalize(format!("/sys/class/net/{dev}")).ok()?;
    real.starts_with("/sys/devices/virtual").then_some(dev)
}

fn ip_link(dev: &str, state: &str) {
    let ok = Command::new("ip")
        .args(["link", "set", "dev", dev, state])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "ip link set dev {dev} {state} failed");
}

/// Takes the port down (`down`) or up on this backend; waits until the port says so.
fn set_port(ctx: &Context, backend: &Backend, down: bool) {
    match backend {
        Backend::Software => soft::port(ctx, down),
        Backend::Emulated(tool) => emu_inject(tool, &[if down { "port-down" } else { "port-up" }]),
        Backend::Kernel(d) => {
            let dev = virtual_netdev(d).expect("a virtual interface under the port");
            ip_link(&dev, if down { "down" } else { "up" });
        }
    }
    let deadline = Instant::now() + hang_limit();
    while (ctx.port(1).unwrap().state == PortState::Active) == down {
        assert!(Instant::now() < deadline, "the port never went {down}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// One round of a cell: returns what it counted.
fn round(ctx: &Context, device: &str, gid: Option<u32>, fault: Fault, op: Op) -> Tally {
    let backend = Backend::of(device);
    let on_soft = backend == Backend::Software;
    let limit = hang_limit();
    let pd = ctx.alloc_pd().unwrap();
    // A CQ smaller than A's queues for the CQ-full cell: A gets a share of it.
    let mut a = A::new(&pd, if fault == Fault::CqFull { 4 } else { 128 });
    // The peer's receives: for the SENDs, but in the RNR cell for the SENDs before the
    // middle request only (a SEND with none posted).
    let recvs = match (fault, op) {
        (Fault::Rnr, Op::Send) => MIDDLE,
        (Fault::Rnr, _) => 0,
        (_, Op::Send) => PEER_RECVS,
        _ => 0,
    };
    let mut peers: Vec<Peer> = Vec::new();
    let (peer_ep, remote) = if fault == Fault::PeerKilled {
        let (p, ep, remote) = RemotePeer::start(ctx, gid, device, recvs, &a.qp);
        peers.push(Peer::Remote(p));
        (ep, remote)
    } else {
        let mut p = LocalPeer::new(&pd);
        let (ep, _, _, _) = endpoint(ctx, gid, p.qp());
        let remote = p.buf.remote(0).unwrap();
        let (mine, _, _, _) = endpoint(ctx, gid, &a.qp);
        connect(ctx, gid, p.qp(), &mine);
        p.post_recvs(recvs);
        peers.push(Peer::Local(Box::new(p)));
        (ep, remote)
    };
    connect(ctx, gid, &a.qp, &peer_ep);
    a.post_recvs(RECV_BASE);
    let middle = match fault {
        Fault::WrongKey => Some((op, true)),
        Fault::Rnr => Some((Op::Send, false)),
        _ => None,
    };
    let mut reqs = window(0, op, 0, middle);
    let mut note = String::new();
    // On the software device nothing moves while the window is posted and the fault made: the
    // fault meets every request outstanding.
    let hold = matches!(
        fault,
        Fault::PeerQpDestroyed
            | Fault::PortDown
            | Fault::QpFatal
            | Fault::DeviceFatal
            | Fault::ResetSamePeer
            | Fault::ResetNewPeer
    );
    if on_soft && hold {
        soft::hold(ctx, true);
    }
    if fault == Fault::CqFull {
        // Every request signaled, none polled: those beyond A's share of the CQ are refused.
        for r in &mut reqs {
            r.signaled = true;
        }
    }
    for r in &mut reqs {
        a.post(r, remote);
    }
    let fault_at = Instant::now();
    let mut got = Vec::new();
    let mut second = window(WINDOW, op, 0, None);
    match fault {
        Fault::PeerKilled => {
            let Peer::Remote(p) = &mut peers[0] else {
                unreachable!()
            };
            p.kill();
        }
        Fault::PeerQpDestroyed => {
            let Peer::Local(p) = &mut peers[0] else {
                unreachable!()
            };
            p.destroy_qp();
        }
        Fault::PortDown => set_port(ctx, &backend, true),
        Fault::QpFatal => match &backend {
            Backend::Software => soft::qp_fatal(ctx, a.qp.qpn()),
            Backend::Emulated(tool) => emu_inject(tool, &["qp-fatal", &a.qp.qpn().to_string()]),
            Backend::Kernel(_) => unreachable!(),
        },
        Fault::DeviceFatal => match &backend {
            Backend::Software => soft::device_fatal(ctx),
            Backend::Emulated(tool) => emu_inject(tool, &["device-fatal"]),
            Backend::Kernel(_) => unreachable!(),
        },
        Fault::CqFull => {
            let refused = reqs.iter().filter(|r| r.refused.is_some()).count();
            assert!(
                refused > 0 && reqs.iter().all(|r| r.refused.is_none_or(|e| e == "CqFull")),
                "posts beyond A's share of a CQ of {} are refused with CqFull: {reqs:?}",
                a.cq.cqe()
            );
            note = format!(
                "{refused} of {WINDOW} refused (CqFull, share {})",
                a.qp.send_caps().max_signaled
            );
            second.clear();
        }
        Fault::WrongKey | Fault::Rnr => {}
        Fault::ResetSamePeer | Fault::ResetNewPeer => {
            a.qp.to_error().unwrap();
            if on_soft {
                soft::hold(ctx, false);
            }
            got.extend(drain_and_reset(&a.qp, &mut a.poller, fault_at + limit));
            let (mine, _, _, _) = endpoint(ctx, gid, &a.qp);
            let (ep, remote, idx) = if fault == Fault::ResetSamePeer {
                let Peer::Local(p) = &mut peers[0] else {
                    unreachable!()
                };
                p.drain_and_reset();
                (endpoint(ctx, gid, p.qp()).0, p.buf.remote(0).unwrap(), 0)
            } else {
                peers.push(Peer::Local(Box::new(LocalPeer::new(&pd))));
                let Peer::Local(p) = &peers[1] else {
                    unreachable!()
                };
                (endpoint(ctx, gid, p.qp()).0, p.buf.remote(0).unwrap(), 1)
            };
            let Peer::Local(p) = &mut peers[idx] else {
                unreachable!()
            };
            connect(ctx, gid, p.qp(), &mine);
            if op == Op::Send {
                p.post_recvs(WINDOW);
            }
            connect(ctx, gid, &a.qp, &ep);
            a.post_recvs(RECV_BASE + A_RECVS);
            second = window(WINDOW, op, idx, None);
            for r in &mut second {
                a.post(r, remote);
            }
            // The new incarnation's requests all succeed.
            let mut after = Vec::new();
            wait_signaled(
                &mut a,
                &second,
                &mut after,
                fault_at + limit,
                "after the reset",
            );
            assert!(
                after.iter().all(|(c, _)| c.status == WcStatus::Success),
                "after the reconnection: {after:?}"
            );
            got.extend(after);
            // A's second pair of receives is the new incarnation's: drained below.
        }
    }
    if !matches!(
        fault,
        Fault::CqFull | Fault::ResetSamePeer | Fault::ResetNewPeer
    ) {
        for r in &mut second {
            a.post(r, remote);
        }
    }
    if on_soft && hold {
        soft::hold(ctx, false);
    }
    let mut all = reqs.clone();
    all.extend_from_slice(&second);
    wait_signaled(&mut a, &all, &mut got, fault_at + limit, fault.key());
    // The cell's end: A to the error state and drained (its receives flush).
    let send_last = account_last(&got, fault_at);
    a.qp.to_error().unwrap();
    got.extend(drain_and_reset(
        &a.qp,
        &mut a.poller,
        Instant::now() + limit,
    ));
    if fault == Fault::PortDown {
        set_port(ctx, &backend, false);
    }
    let mut reqs_all = all.clone();
    if matches!(fault, Fault::ResetSamePeer | Fault::ResetNewPeer) {
        // The receives of the new incarnation count as two more.
        for i in 0..A_RECVS {
            reqs_all.push(Req {
                id: RECV_BASE + A_RECVS + i,
                op: Op::Send,
                signaled: true,
                peer: 0,
                refused: None,
                bad_key: false,
            });
        }
        // Its receive ids follow the first pair's: checked as requests.
        for (c, _) in &got {
            if (RECV_BASE + A_RECVS..RECV_BASE + 2 * A_RECVS).contains(&c.wr_id) {
                assert_eq!(c.status, WcStatus::WrFlushErr, "{c:?}");
            }
        }
    }
    let mut t = account(&reqs_all, &got, &a, &peers);
    showed(fault, op, &got);
    t.last = send_last;
    if fault == Fault::CqFull {
        note.push_str("; ");
        note.push_str(&raw_overrun(ctx, gid, &pd, &peers));
    }
    t.note = note;
    t
}

/// Checks that the fault did what it does: the bad request of the wrong-key and RNR cells
/// failed with its error, and no request posted after a fault that kills the connection
/// succeeded.
fn showed(fault: Fault, op: Op, got: &[(Completion, Instant)]) {
    let status = |id: u64| {
        got.iter()
            .find(|(c, _)| c.wr_id == id)
            .map(|(c, _)| c.status)
    };
    let want: &[WcStatus] = match (fault, op) {
        // A ConnectX (and the software device) reports a bad lkey as a local protection
        // error; rxe as a local QP operation error.
        (Fault::WrongKey, Op::Send) => &[WcStatus::LocProtErr, WcStatus::LocQpOpErr],
        (Fault::WrongKey, _) => &[WcStatus::RemAccessErr],
        (Fault::Rnr, _) => &[WcStatus::RnrRetryExcErr],
        (Fault::PeerKilled | Fault::PeerQpDestroyed | Fault::QpFatal | Fault::DeviceFatal, _) => {
            let ok: Vec<u64> = (WINDOW..2 * WINDOW)
                .filter(|id| status(*id) == Some(WcStatus::Success))
                .collect();
            assert!(
                ok.is_empty(),
                "requests {ok:?}, posted after the fault, succeeded: {got:?}"
            );
            return;
        }
        _ => return,
    };
    assert!(
        status(MIDDLE).is_some_and(|s| want.contains(&s)),
        "the bad request: {:?}, not one of {want:?}: {got:?}",
        status(MIDDLE)
    );
}

/// From the fault to the last completion of a send request.
fn account_last(got: &[(Completion, Instant)], fault_at: Instant) -> Duration {
    got.iter()
        .filter(|(c, _)| c.wr_id < RECV_BASE)
        .map(|(_, at)| at.saturating_duration_since(fault_at))
        .max()
        .unwrap_or_default()
}

/// The raw path can overrun a CQ (it holds no entries): more unsignaled requests than a small
/// CQ holds, flushed by the error state, overrun it, and the device reports a CQ error event.
fn raw_overrun(ctx: &Context, gid: Option<u32>, pd: &Pd, peers: &[Peer]) -> String {
    let mut events = ctx.async_events().unwrap();
    let small = ctx.cq_builder().cqe(4).build().unwrap();
    let qp = pd
        .qp_builder(&small, &small)
        .max_send_wr(32)
        .max_recv_wr(1)
        .build()
        .unwrap();
    // A peer that never answers: a QP never connected.
    let Peer::Local(p) = &peers[0] else {
        unreachable!()
    };
    let silent = pd
        .qp_builder(&p.cq, &p.cq)
        .max_send_wr(1)
        .max_recv_wr(1)
        .build()
        .unwrap();
    let (ep, _, _, _) = endpoint(ctx, gid, &silent);
    connect(ctx, gid, &qp, &ep);
    let buf = pd.alloc_buf(4096, AccessFlags::ALL).unwrap();
    let mut sq = qp.send_queue().unwrap();
    let n = small.cqe() + 4;
    let sgl = [buf.sge(0..8).unwrap()];
    for i in 0..n {
        // SAFETY: registered memory that outlives the requests (the QP is destroyed first).
        unsafe { sq.post(&SendWr::write(u64::from(i), &sgl, p.buf.remote(0).unwrap())) }.unwrap();
    }
    qp.to_error().unwrap();
    let deadline = Instant::now() + hang_limit();
    loop {
        match events.next(Duration::from_millis(50)).unwrap() {
            Some(ev @ AsyncEvent::CqError { .. }) if ev.concerns_cq(&small) => break,
            _ => assert!(
                Instant::now() < deadline,
                "no CQ error for a CQ of {} overrun by {n} flushes",
                small.cqe()
            ),
        }
    }
    drop((sq, qp, silent));
    format!(
        "raw path: {n} flushes into a CQ of {}: CqError",
        small.cqe()
    )
}

/// A cell's process: the warm-up round, the rounds, the resident set; one result line.
fn cell_process(spec: &str) {
    let f: Vec<&str> = spec.split_whitespace().collect();
    let (fault, op, device, gid) = (
        Fault::parse(f[0]),
        Op::parse(f[1]),
        f[2],
        f[3].parse::<u32>().ok(),
    );
    let backend = Backend::of(device);
    if let Some(why) = backend.cannot(fault) {
        println!("cell|n/a|{why}");
        return;
    }
    let rounds: u32 = std::env::var("ZVERBS_FAULT_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if backend == Backend::Software { 20 } else { 3 });
    let warm_up = if backend == Backend::Software { 10 } else { 1 };
    let ctx = open(device);
    let first = round(&ctx, device, gid, fault, op);
    // The warm-up: the allocator's and the device's tables reach their size.
    for _ in 1..warm_up {
        round(&ctx, device, gid, fault, op);
    }
    let before = rss_kb();
    let mut slowest = first.last;
    for _ in 0..rounds {
        let t = round(&ctx, device, gid, fault, op);
        assert_eq!(t.posted, first.posted, "every round posts as many: {t:?}");
        slowest = slowest.max(t.last);
    }
    let after = rss_kb();
    assert!(
        after <= before + SLACK_KB,
        "the resident set grew from {before} kB to {after} kB over {rounds} rounds"
    );
    println!(
        "cell|ok|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}",
        first.posted,
        first.refused,
        first.success,
        first.error,
        first.flush,
        first.retired,
        slowest.as_micros(),
        before,
        after,
        rounds,
        first.note
    );
}

#[test]
fn a_cell() {
    if let Ok(spec) = std::env::var(CELL) {
        cell_process(&spec);
    }
}

#[test]
fn a_peer() {
    if let Ok(spec) = std::env::var(PEER) {
        peer_process(&spec);
    }
}

/// One cell's outcome, as the table shows it.
struct Outcome {
    fault: Fault,
    op: Op,
    row: Result<Vec<String>, String>,
}

/// Runs `fault × op` in a process of its own.
fn run_cell(device: &str, gid: Option<u32>, fault: Fault, op: Op) -> Outcome {
    let gi = gid.map_or("-".to_string(), |g| g.to_string());
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "a_cell", "--nocapture", "--test-threads=1"])
        .env(CELL, format!("{} {} {device} {gi}", fault.key(), op.key()))
        .env_remove(PEER)
        .output()
        .expect("a cell's process");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let line = text
        .lines()
        .find_map(|l| l.find("cell|").map(|at| l[at + 5..].to_string()));
    let row = match line {
        Some(l) if out.status.success() => Ok(l.split('|').map(str::to_string).collect()),
        _ => Err(format!("{text}{}", String::from_utf8_lossy(&out.stderr))),
    };
    Outcome { fault, op, row }
}

/// Runs every cell on `device`, prints the table and fails for any red cell.
fn matrix(device: &str, gid: Option<u32>) {
    let backend = Backend::of(device);
    let jobs: usize = std::env::var("ZVERBS_FAULT_JOBS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    let cells: Vec<(Fault, Op)> = FAULTS
        .iter()
        .flat_map(|f| OPS.iter().map(move |o| (*f, *o)))
        .collect();
    let (shared, alone): (Vec<_>, Vec<_>) = cells.iter().partition(|(f, _)| !backend.exclusive(*f));
    let started = Instant::now();
    let todo = Mutex::new(shared.into_iter());
    let done = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..jobs.max(1) {
            s.spawn(|| {
                loop {
                    let next = todo.lock().unwrap().next();
                    let Some((f, o)) = next else { break };
                    let r = run_cell(device, gid, f, o);
                    done.lock().unwrap().push(r);
                }
            });
        }
    });
    let mut done = done.into_inner().unwrap();
    for (f, o) in alone {
        done.push(run_cell(device, gid, f, o));
    }
    let order = |o: &Outcome| {
        (
            FAULTS.iter().position(|f| *f == o.fault),
            OPS.iter().position(|x| *x == o.op),
        )
    };
    done.sort_by_key(order);
    println!(
        "\nfault matrix on {} ({device}), {:.1} s; timeout {TIMEOUT}, retry_cnt {RETRY_CNT}, \
         rnr_retry {RNR_RETRY}; hang limit {:?}",
        backend.label(),
        started.elapsed().as_secs_f64(),
        hang_limit()
    );
    println!(
        "| fault | operation | posted | refused | success | error | flush | retired | last completion after the fault | RSS before → after (rounds) | note |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    let mut red = Vec::new();
    for o in &done {
        let (f, op) = (o.fault.key(), o.op.key());
        match &o.row {
            Ok(r) if r[0] == "n/a" => println!("| {f} | {op} | {} |||||||||", r[1]),
            Ok(r) => println!(
                "| {f} | {op} | {} | {} | {} | {} | {} | {} | {:.2} ms | {} → {} kB ({}) | {} |",
                r[1],
                r[2],
                r[3],
                r[4],
                r[5],
                r[6],
                r[7].parse::<f64>().unwrap_or(0.0) / 1000.0,
                r[8],
                r[9],
                r[10],
                r[11]
            ),
            Err(e) => {
                println!("| {f} | {op} | FAILED |||||||||");
                red.push(format!("--- {f} × {op}:\n{e}"));
            }
        }
    }
    assert!(red.is_empty(), "red cells:\n{}", red.join("\n"));
}

/// The software-device matrix runs in the test stage; where a device is named (the rxe and
/// connectx stages) it would repeat that run, and returns at once.
#[cfg(feature = "sim")]
#[test]
fn fault_matrix_on_the_software_device() {
    if std::env::var_os(CELL).is_some() || std::env::var_os(PEER).is_some() {
        return;
    }
    if std::env::var_os("ZVERBS_TEST_DEVICE").is_some_and(|v| !v.is_empty()) {
        return;
    }
    matrix(zverbs::SOFTWARE_DEVICE, None);
}

#[test]
fn fault_matrix_on_the_device() {
    if std::env::var_os(CELL).is_some() || std::env::var_os(PEER).is_some() {
        return;
    }
    let Some(env) = device::env() else { return };
    let _s = device::serial();
    matrix(&env.device, Some(env.gid_index));
}
