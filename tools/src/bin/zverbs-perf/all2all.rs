//! `zverbs-perf all2all`: every process of a PMIx job writes to every other.
//!
//! ```text
//! mpirun -n N zverbs-perf all2all [options]
//! ```
//!
//! Each process joins the job ([`Job::init`]), opens its device, registers one buffer (a
//! receive slot per rank and a send slot per rank), connects one RC QP to every peer
//! ([`Job::connect_all`]: QP numbers, PSNs, LID, GID and the receive area's key through PMIx),
//! and then posts `--iters` RDMA WRITEs of `--size` bytes to each peer, round-robin over the
//! peers with up to `--tx-depth` requests in flight per QP and one completion every
//! [`SIGNAL_EVERY`] requests. After a fence, each process checks that every peer's slot holds
//! the bytes that peer wrote. Rank 0 prints one line per process and the job's totals: message
//! rate, connection set-up time, QPs and registered memory per process.
//!
//! With `--dc` the transport is dynamically connected ([`Job::connect_all_dc`]): each process
//! has one DCI and one DCT (on an SRQ), whatever the job's size, and publishes a record of
//! constant size; the WRITEs go round-robin over the peers through the one DCI, up to
//! `--tx-depth` in flight on it, one completion every [`SIGNAL_EVERY`] requests. The buffer,
//! the check and the report are the same.

use std::ffi::OsString;
use std::time::{Duration, Instant};

use zverbs::connect::RemoteRegion;
use zverbs::connect::pmix::{DcMeshPeer, Job};
use zverbs::{
    AccessFlags, BackendRequest, Completion, ContextOptions, Cq, MrBuf, PollCq, PostSend,
    Registered, RemoteBuf, SendQueue, SendWr, Sge,
};
use zverbs_tools::args::{self, Arg::*, Parser};
use zverbs_tools::device;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// One signaled request in this many per QP (the last one is always signaled).
pub(crate) const SIGNAL_EVERY: u32 = 16;

/// The PMIx key of each process's results.
const RESULT_KEY: &str = "zverbs.perf.all2all.1";

/// `all2all` options.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Opts {
    pub(crate) device: Option<String>,
    pub(crate) size: usize,
    pub(crate) iters: u32,
    pub(crate) tx_depth: u32,
    pub(crate) backend: Option<BackendRequest>,
    pub(crate) timeout: Duration,
    /// `--yield`: give the core away after an empty poll.
    pub(crate) yield_idle: bool,
    /// `--dc`: the dynamically connected transport (one DCI and one DCT per process).
    pub(crate) dc: bool,
}

pub(crate) const USAGE: &str = "\
usage: mpirun -n N zverbs-perf all2all [options]
       (Open MPI as root: mpirun --allow-run-as-root --oversubscribe -n N ...;
        Slurm: srun --mpi=pmix -n N zverbs-perf all2all ...)

Every process connects one RC QP to every other (addresses exchanged through PMIx), writes
ITERS messages of SIZE bytes to each, and checks what the others wrote to it. Rank 0 prints
each process's message rate, connection set-up time, QPs and registered memory, and the totals.
With --dc, each process has one DC initiator and one DC target instead, whatever N.

options:
  -d, --device NAME       RDMA device (default: ZVERBS_DEVICE, else the first NIC)
  -s, --size BYTES        message size, 1 to 65536 (default 64)
  -n, --iters N           messages to each peer, 1 to 100000000 (default 1000)
  -t, --tx-depth N        requests in flight per QP, 16 to 4096 (default 64)
      --dc                dynamically connected transport: one DCI (all the WRITEs, round-
                          robin over the peers) and one DCT per process (mlx5, direct backend)
      --backend B         auto, direct or verbs (default: ZVERBS_BACKEND, else auto)
      --timeout SECS      how long any one wait may last without progress, and the
                          deadline of every PMIx fence and get (default 60)
      --yield             give the core away after an empty poll (always when the job has
                          more processes than this machine has cores; on the emulated
                          ConnectX, whose device threads share the cores, use it always)
  -h, --help              this text
";

/// Parses `all2all`'s options (after the word `all2all`). `Err("")` asks for the usage text.
pub(crate) fn parse_args<I>(args: I) -> std::result::Result<Opts, String>
where
    I: IntoIterator,
    I::Item: Into<OsString>,
{
    let mut p = Parser::from_args(args);
    let mut o = Opts {
        device: None,
        size: 64,
        iters: 1000,
        tx_depth: 64,
        backend: None,
        timeout: Duration::from_secs(60),
        yield_idle: false,
        dc: false,
    };
    while let Some(arg) = p.next().map_err(args::explain)? {
        let f = args::flag(&arg);
        match arg {
            Short('h') | Long("help") => return Err(String::new()),
            Short('d') | Long("device") => o.device = Some(args::value(&mut p, &f)?),
            Short('s') | Long("size") => o.size = args::in_range(&mut p, &f, 1, 65536)?,
            Short('n') | Long("iters") => o.iters = args::in_range(&mut p, &f, 1, 100_000_000)?,
            Short('t') | Long("tx-depth") => o.tx_depth = args::in_range(&mut p, &f, 16, 4096)?,
            Long("backend") => {
                let v = args::value(&mut p, &f)?;
                o.backend = Some(BackendRequest::parse(&v).map_err(|e| e.to_string())?);
            }
            Long("timeout") => {
                o.timeout = Duration::from_secs(args::in_range(&mut p, &f, 1, 24 * 3600)?);
            }
            Long("yield") => o.yield_idle = true,
            Long("dc") => o.dc = true,
            arg => return Err(args::unexpected(arg)),
        }
    }
    Ok(o)
}

/// The byte rank `src` writes at offset `i` of its message to rank `dst`.
pub(crate) fn pattern(src: u32, dst: u32, i: usize) -> u8 {
    (src.wrapping_mul(131) ^ dst.wrapping_mul(29) ^ (i as u32).wrapping_mul(7)) as u8
}

/// Requests freed by the completion of a signaled request on a QP that has had `completed`
/// of its `iters` requests complete before it: [`SIGNAL_EVERY`], or what is left at the end.
pub(crate) fn freed(completed: u32, iters: u32) -> u32 {
    SIGNAL_EVERY.min(iters - completed)
}

/// Whether request `k` (0-based) of `iters` to one peer is signaled.
pub(crate) fn signaled(k: u32, iters: u32) -> bool {
    k % SIGNAL_EVERY == SIGNAL_EVERY - 1 || k + 1 == iters
}

/// What one process measured: published to rank 0 through PMIx.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Report {
    pub(crate) rank: u32,
    pub(crate) qps: u32,
    pub(crate) registered: u64,
    /// Resident memory the connection set-up added (bytes; 0 when it shrank).
    pub(crate) setup_rss: u64,
    pub(crate) setup_ns: u64,
    /// Of which creating the QPs.
    pub(crate) create_ns: u64,
    pub(crate) messages: u64,
    pub(crate) elapsed_ns: u64,
    pub(crate) bad: u64,
}

impl Report {
    const LEN: usize = 4 * 2 + 8 * 7;

    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(Self::LEN);
        v.extend_from_slice(&self.rank.to_le_bytes());
        v.extend_from_slice(&self.qps.to_le_bytes());
        for x in [
            self.registered,
            self.setup_rss,
            self.setup_ns,
            self.create_ns,
            self.messages,
            self.elapsed_ns,
            self.bad,
        ] {
            v.extend_from_slice(&x.to_le_bytes());
        }
        v
    }

    pub(crate) fn decode(b: &[u8]) -> Option<Self> {
        if b.len() != Self::LEN {
            return None;
        }
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap_or_default());
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or_default());
        Some(Self {
            rank: u32_at(0),
            qps: u32_at(4),
            registered: u64_at(8),
            setup_rss: u64_at(16),
            setup_ns: u64_at(24),
            create_ns: u64_at(32),
            messages: u64_at(40),
            elapsed_ns: u64_at(48),
            bad: u64_at(56),
        })
    }

    fn rate(&self) -> f64 {
        self.messages as f64 / (self.elapsed_ns.max(1) as f64 / 1e9)
    }
}

/// The resident set size of this process (`VmRSS`), in bytes.
fn rss() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// Runs the test in this process of the job.
pub(crate) fn run(o: &Opts) -> Result<()> {
    let mut job = Job::init()?;
    job.set_deadline(o.timeout)?;
    let (me, n) = (job.rank(), job.size());
    let copts = match o.backend {
        Some(b) => ContextOptions::default().backend(b),
        None => ContextOptions::default(),
    };
    let chosen = device::open(o.device.as_deref(), &copts, "--device", false)?;
    if chosen.is_software() && n > 1 {
        return Err(format!(
            "{}: the software device exists inside one process only, so the processes of a \
             job cannot reach each other on it; run on a NIC, or on the emulated ConnectX \
             (`cargo xtask emu -- mpirun ...`)",
            chosen.ctx.name()
        )
        .into());
    }
    let ctx = chosen.ctx;
    if me == 0 {
        println!(
            "all2all: {n} processes, {} messages of {} bytes to each peer, RDMA WRITE over {}, \
             device {}",
            o.iters,
            o.size,
            if o.dc {
                "DC (one DCI and one DCT per process)"
            } else {
                "RC (one QP per peer)"
            },
            ctx.name()
        );
    }
    let peers = n - 1;
    let slot = o.size;
    // Receive slots for every rank, then send slots for every rank.
    let recv_len = slot * n as usize;
    let rss0 = rss();
    let pd = ctx.alloc_pd()?;
    let buf = pd.alloc_buf(2 * recv_len, AccessFlags::ALL)?;
    let per_qp_signaled = o.tx_depth.div_ceil(SIGNAL_EVERY) + 1;
    let cq = ctx
        .cq_builder()
        .cqe((peers * per_qp_signaled).max(1) + 16)
        .build()?;
    let region = RemoteRegion {
        addr: buf.addr(),
        rkey: buf.rkey(),
        len: recv_len as u64,
    };
    for r in 0..n {
        let at = recv_len + r as usize * slot;
        let bytes: Vec<u8> = (0..slot).map(|i| pattern(me, r, i)).collect();
        buf.write(at, &bytes)?;
    }

    // Every process starts the set-up together: its time is the mesh's, not the wait for the
    // slowest process to open its device.
    job.fence()?;
    let run = Run {
        job: &job,
        o,
        buf: &buf,
        cq: &cq,
        recv_len,
        rss0,
        per_qp_signaled,
    };
    if o.dc {
        return run_dc(&run, &pd);
    }
    let mut create = Duration::ZERO;
    let t_setup = Instant::now();
    let mesh = job.connect_all(Some(region), |_| {
        let t = Instant::now();
        let mut b = pd
            .qp_builder(&cq, &cq)
            .max_send_wr(o.tx_depth)
            .max_recv_wr(1)
            .max_inline_data(0)
            .max_signaled(per_qp_signaled);
        if let Some(k) = o.backend {
            b = b.backend(k);
        }
        let qp = b.build();
        create += t.elapsed();
        qp
    })?;
    let setup = t_setup.elapsed();
    let setup_rss = rss().saturating_sub(rss0);

    let peers_v = mesh.into_peers();
    let mut sqs: Vec<SendQueue> = Vec::with_capacity(peers_v.len());
    let mut targets = Vec::with_capacity(peers_v.len());
    let mut sges = Vec::with_capacity(peers_v.len());
    for p in &peers_v {
        sqs.push(p.qp.send_queue()?);
        let region = p.region.ok_or("a peer published no region")?;
        targets.push(region.at(me as usize * slot)?);
        sges.push([
            buf.sge(recv_len + p.rank as usize * slot..recv_len + (p.rank as usize + 1) * slot)?
        ]);
    }
    let backend = peers_v
        .first()
        .map(|p| p.qp.backend().to_string())
        .unwrap_or_default();

    // Round-robin over the peers, up to `tx_depth` in flight on each QP.
    let np = sqs.len();
    let mut window = RcWindow {
        sqs,
        sges,
        targets,
        posted: vec![0; np],
        completed: vec![0; np],
        iters: o.iters,
        depth: o.tx_depth,
    };
    let (done, elapsed) = run.drive(u64::from(o.iters) * np as u64, &mut window)?;
    let mine = run.report(np as u32, setup_rss, setup, create, (done, elapsed));
    run.check_and_report(mine, peers_v.iter().map(|p| p.rank), &backend)
}

/// How a transport fills its send window, and what a signaled completion frees.
trait Window {
    /// Posts what the window allows, `done` messages having completed.
    fn post(&mut self, done: u64) -> Result<()>;
    /// The messages that the completion of request `wr_id` frees, `done` having completed.
    fn freed(&mut self, wr_id: u64, done: u64) -> u64;
}

/// One RC QP per peer, `depth` requests in flight on each; a request's `wr_id` is its peer's
/// index.
struct RcWindow {
    sqs: Vec<SendQueue>,
    sges: Vec<[Sge; 1]>,
    targets: Vec<RemoteBuf>,
    posted: Vec<u32>,
    completed: Vec<u32>,
    iters: u32,
    depth: u32,
}

impl Window for RcWindow {
    fn post(&mut self, _done: u64) -> Result<()> {
        for (i, sq) in self.sqs.iter_mut().enumerate() {
            while self.posted[i] < self.iters && self.posted[i] - self.completed[i] < self.depth {
                let wr = SendWr::write(i as u64, &self.sges[i], self.targets[i]);
                let wr = if signaled(self.posted[i], self.iters) {
                    wr.signaled()
                } else {
                    wr
                };
                // SAFETY: the scatter entry lies in the run's buffer, registered and alive
                // until the end of `run` (after every completion); the send slots are not
                // written while requests are in flight.
                unsafe { sq.post(&wr) }?;
                self.posted[i] += 1;
            }
        }
        Ok(())
    }

    fn freed(&mut self, wr_id: u64, _done: u64) -> u64 {
        let i = wr_id as usize;
        let f = freed(self.completed[i], self.iters);
        self.completed[i] += f;
        u64::from(f)
    }
}

/// The one DCI: request k goes to peer k mod P, up to `depth` in flight; a signaled request's
/// `wr_id` is k, and its completion frees every request up to k.
struct DcWindow<'a> {
    sq: SendQueue,
    peers: &'a [DcMeshPeer],
    sges: Vec<[Sge; 1]>,
    targets: Vec<RemoteBuf>,
    posted: u64,
    total: u64,
    depth: u64,
}

impl Window for DcWindow<'_> {
    fn post(&mut self, done: u64) -> Result<()> {
        let np = self.peers.len() as u64;
        while self.posted < self.total && self.posted - done < self.depth {
            let i = (self.posted % np) as usize;
            let wr = SendWr::write(self.posted, &self.sges[i], self.targets[i]);
            let wr = if dc_signaled(self.posted, self.total) {
                wr.signaled()
            } else {
                wr
            };
            // SAFETY: the scatter entry lies in the run's buffer, registered and alive until
            // the end of `run` (after every completion); the send slots are not written while
            // requests are in flight.
            unsafe { self.sq.post_to(&self.peers[i].peer, &wr) }?;
            self.posted += 1;
        }
        Ok(())
    }

    fn freed(&mut self, wr_id: u64, done: u64) -> u64 {
        (wr_id + 1).saturating_sub(done)
    }
}

/// What both transports share: the job, the options, the buffer and the CQ.
struct Run<'a> {
    job: &'a Job,
    o: &'a Opts,
    buf: &'a MrBuf,
    cq: &'a Cq,
    /// Bytes of receive slots (one per rank) at the start of `buf`; the send slots follow.
    recv_len: usize,
    /// Resident memory before the set-up.
    rss0: u64,
    /// Signaled requests in flight on one send queue at most.
    per_qp_signaled: u32,
}

/// The `--dc` run: one DCI writes to every peer's DCT.
fn run_dc(run: &Run<'_>, pd: &zverbs::Pd) -> Result<()> {
    let (job, o, buf, cq) = (run.job, run.o, run.buf, run.cq);
    let me = job.rank();
    let slot = o.size;
    let t_setup = Instant::now();
    let t = Instant::now();
    // Nothing is sent to the target (WRITEs only): one receive on its SRQ is enough.
    let srq = pd.create_srq(1, 1)?;
    let mut b = pd
        .qp_builder(cq, cq)
        .dc_initiator()
        .max_send_wr(o.tx_depth)
        .max_inline_data(0)
        .max_signaled(run.per_qp_signaled);
    if let Some(k) = o.backend {
        b = b.backend(k);
    }
    let dci = b.build()?;
    let mut b = pd.qp_builder(cq, cq).srq(&srq).dc_target(dc_key(job));
    if let Some(k) = o.backend {
        b = b.backend(k);
    }
    let dct = b.build()?;
    let create = t.elapsed();
    let region = RemoteRegion {
        addr: buf.addr(),
        rkey: buf.rkey(),
        len: run.recv_len as u64,
    };
    let mesh = job.connect_all_dc(pd, Some(region), dci, dct)?;
    let setup = t_setup.elapsed();
    let setup_rss = rss().saturating_sub(run.rss0);

    let peers = mesh.peers();
    let sq = mesh.dci().send_queue()?;
    let mut targets = Vec::with_capacity(peers.len());
    let mut sges = Vec::with_capacity(peers.len());
    for p in peers {
        let region = p.region.ok_or("a peer published no region")?;
        targets.push(region.at(me as usize * slot)?);
        let at = run.recv_len + p.rank as usize * slot;
        sges.push([buf.sge(at..at + slot)?]);
    }
    let backend = mesh.dci().backend().to_string();

    let total = u64::from(o.iters) * peers.len() as u64;
    let mut window = DcWindow {
        sq,
        peers,
        sges,
        targets,
        posted: 0,
        total,
        depth: u64::from(o.tx_depth),
    };
    let (done, elapsed) = run.drive(total, &mut window)?;
    let mine = run.report(2, setup_rss, setup, create, (done, elapsed));
    run.check_and_report(mine, peers.iter().map(|p| p.rank), &backend)
}

/// The access key of this job's DC targets (the same in every process; derived from the
/// namespace, so that another job's initiators are refused).
fn dc_key(job: &Job) -> u64 {
    job.namespace()
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        })
}

/// Whether the DCI's request `k` (0-based, of `total`) is signaled.
pub(crate) fn dc_signaled(k: u64, total: u64) -> bool {
    k % u64::from(SIGNAL_EVERY) == u64::from(SIGNAL_EVERY) - 1 || k + 1 == total
}

impl Run<'_> {
    /// Posts through `window` and polls the CQ until `total` messages have completed: the
    /// messages done and the time it took.
    ///
    /// An empty poll gives the core away (`--yield`, or more processes than cores), so that
    /// the process whose completions this one waits for (or, on the emulated ConnectX, the
    /// device's threads) can run.
    fn drive(&self, total: u64, window: &mut impl Window) -> Result<(u64, Duration)> {
        let (o, me) = (self.o, self.job.rank());
        let mut poller = self.cq.poller()?;
        let mut wc = [Completion::EMPTY; 64];
        let give_way = o.yield_idle
            || std::thread::available_parallelism().map_or(1, usize::from)
                < self.job.size() as usize;
        let mut done = 0u64;
        let t0 = Instant::now();
        let mut last_progress = t0;
        while done < total {
            window.post(done)?;
            let got = poller.poll_into(&mut wc);
            if got.is_empty() {
                if last_progress.elapsed() > o.timeout {
                    return Err(format!(
                        "rank {me}: no completion for {} s ({done} of {total} messages done)",
                        o.timeout.as_secs()
                    )
                    .into());
                }
                if give_way {
                    std::thread::yield_now();
                }
                continue;
            }
            last_progress = Instant::now();
            for c in got.iter() {
                done += window.freed(c.ok()?.wr_id, done);
            }
        }
        Ok((done, t0.elapsed()))
    }

    /// This process's report of a run of `qps` QPs: its set-up and what [`Run::drive`]
    /// returned.
    fn report(
        &self,
        qps: u32,
        setup_rss: u64,
        setup: Duration,
        create: Duration,
        (messages, elapsed): (u64, Duration),
    ) -> Report {
        Report {
            rank: self.job.rank(),
            qps,
            registered: self.buf.len() as u64,
            setup_rss,
            setup_ns: setup.as_nanos() as u64,
            create_ns: create.as_nanos() as u64,
            messages,
            elapsed_ns: elapsed.as_nanos() as u64,
            bad: 0,
        }
    }

    /// Fences (every write of the job has then completed: acknowledged, so placed), checks
    /// what the peers wrote, exchanges the reports and prints them at rank 0.
    fn check_and_report(
        &self,
        mut mine: Report,
        peers: impl Iterator<Item = u32>,
        backend: &str,
    ) -> Result<()> {
        let (job, buf, slot) = (self.job, self.buf, self.o.size);
        let me = job.rank();
        job.fence()?;
        let mut got = vec![0u8; slot];
        for p in peers {
            buf.read(p as usize * slot, &mut got)?;
            mine.bad += got
                .iter()
                .enumerate()
                .filter(|&(i, &b)| b != pattern(p, me, i))
                .count() as u64;
        }
        report(job, &mine, backend)
    }
}

/// Exchanges the reports; rank 0 prints them. Fails when any process saw a wrong byte.
fn report(job: &Job, mine: &Report, backend: &str) -> Result<()> {
    let me = job.rank();
    let all = job.exchange(RESULT_KEY, &mine.encode())?;
    let reports: Vec<Report> = all
        .iter()
        .enumerate()
        .map(|(r, b)| Report::decode(b).ok_or_else(|| format!("rank {r}: a garbled report")))
        .collect::<std::result::Result<_, _>>()?;
    if me == 0 {
        print_reports(&reports, backend);
    }
    let bad_total: u64 = reports.iter().map(|r| r.bad).sum();
    if bad_total != 0 {
        return Err(format!("{bad_total} bytes differ from what their writer wrote").into());
    }
    Ok(())
}

fn print_reports(reports: &[Report], backend: &str) {
    println!(" backend (rank 0): {backend}");
    println!(
        " {:>5} {:>5} {:>11} {:>11} {:>10} {:>10} {:>10} {:>11} {:>6}",
        "rank",
        "QPs",
        "registered",
        "set-up RSS",
        "set-up ms",
        "create ms",
        "messages",
        "msg/s",
        "check"
    );
    for r in reports {
        println!(
            " {:>5} {:>5} {:>11} {:>11} {:>10.2} {:>10.2} {:>10} {:>11.0} {:>6}",
            r.rank,
            r.qps,
            r.registered,
            r.setup_rss,
            r.setup_ns as f64 / 1e6,
            r.create_ns as f64 / 1e6,
            r.messages,
            r.rate(),
            if r.bad == 0 { "ok" } else { "BAD" }
        );
    }
    let n = reports.len().max(1) as f64;
    let messages: u64 = reports.iter().map(|r| r.messages).sum();
    let slowest = reports
        .iter()
        .map(|r| r.elapsed_ns)
        .max()
        .unwrap_or(1)
        .max(1);
    let sum_rates: f64 = reports.iter().map(Report::rate).sum();
    let avg = |f: fn(&Report) -> f64| reports.iter().map(f).sum::<f64>() / n;
    println!(
        " total: {} processes, {messages} messages, {:.0} msg/s over the slowest process's time \
         ({:.0} msg/s summed over processes); per process: {:.1} QPs, {:.0} bytes registered, \
         {:.0} bytes set-up RSS, set-up {:.2} ms (max {:.2} ms) of which QP creation {:.2} ms",
        reports.len(),
        messages as f64 / (slowest as f64 / 1e9),
        sum_rates,
        avg(|r| f64::from(r.qps)),
        avg(|r| r.registered as f64),
        avg(|r| r.setup_rss as f64),
        avg(|r| r.setup_ns as f64) / 1e6,
        reports.iter().map(|r| r.setup_ns).max().unwrap_or(0) as f64 / 1e6,
        avg(|r| r.create_ns as f64) / 1e6,
    );
    // One line for scripts (`cargo xtask bench --scale`): the same figures, per process.
    println!(
        " scale: processes={} qps={:.1} registered={:.0} setup_rss={:.0} setup_ms={:.3} \
         create_ms={:.3} rate={:.0} rate_sum={:.0}",
        reports.len(),
        avg(|r| f64::from(r.qps)),
        avg(|r| r.registered as f64),
        avg(|r| r.setup_rss as f64),
        avg(|r| r.setup_ns as f64) / 1e6,
        avg(|r| r.create_ns as f64) / 1e6,
        messages as f64 / (slowest as f64 / 1e9),
        sum_rates,
    );
    println!(
        " check: {}",
        if reports.iter().all(|r| r.bad == 0) {
            "every process received every peer's bytes"
        } else {
            "MISMATCH"
        }
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> std::result::Result<Opts, String> {
        parse_args(s.split_whitespace())
    }

    #[test]
    fn options_and_their_ranges() {
        let o = p("").unwrap();
        assert_eq!((o.size, o.iters, o.tx_depth), (64, 1000, 64));
        assert!(!o.yield_idle);
        let o = p("-s 8 -n 10 -t 16 --backend verbs -d mlx5_0 --yield").unwrap();
        assert_eq!((o.size, o.iters, o.tx_depth), (8, 10, 16));
        assert!(o.yield_idle);
        assert_eq!(o.backend, Some(BackendRequest::Verbs));
        assert_eq!(o.device.as_deref(), Some("mlx5_0"));
        assert!(p("-s 0").is_err());
        assert!(p("-s 65537").is_err());
        assert!(p("-t 15").is_err());
        assert!(p("-n 0").is_err());
        assert!(p("host").unwrap_err().contains("unexpected"));
        assert_eq!(p("--help").unwrap_err(), "");
    }

    #[test]
    fn every_request_is_freed_by_exactly_one_signaled_completion() {
        for iters in [1, 15, 16, 17, 33, 100] {
            let mut completed = 0;
            for k in 0..iters {
                if signaled(k, iters) {
                    completed += freed(completed, iters);
                    assert_eq!(completed, k + 1, "iters {iters}, request {k}");
                }
            }
            assert_eq!(completed, iters);
        }
    }

    #[test]
    fn reports_round_trip() {
        let r = Report {
            rank: 3,
            qps: 15,
            registered: 2048,
            setup_rss: 1 << 20,
            setup_ns: 123_456_789,
            create_ns: 23_456_789,
            messages: 15_000,
            elapsed_ns: 1_000_000_000,
            bad: 0,
        };
        let b = r.encode();
        assert_eq!(b.len(), Report::LEN);
        assert_eq!(Report::decode(&b), Some(r));
        assert_eq!(Report::decode(&b[1..]), None);
        assert_eq!(r.rate(), 15_000.0);
    }

    #[test]
    fn patterns_tell_writers_and_readers_apart() {
        let a: Vec<u8> = (0..64).map(|i| pattern(1, 2, i)).collect();
        let b: Vec<u8> = (0..64).map(|i| pattern(2, 1, i)).collect();
        let c: Vec<u8> = (0..64).map(|i| pattern(1, 3, i)).collect();
        assert_ne!(a, b);
        assert_ne!(a, c);
    }
}
