//! Ping-pong latency between two RC queue pairs, printed like perftest's `ib_send_lat` /
//! `ib_write_lat`; or, with `--rc`, an `ibv_rc_pingpong`-compatible peer.
//!
//! ```text
//! cargo run --release -p zverbs-tools --example pingpong -- [--op send|write] [--size N]
//!     [--iters N] [--device NAME] [--backend auto|direct|verbs] [--bf|--no-bf]
//! cargo run --release -p zverbs-tools --example pingpong -- --rc [ibv_rc_pingpong options] [host]
//! ```
//!
//! The first form opens a device (the one named with `--device` or `ZVERBS_DEVICE`, else the
//! first NIC; on a machine without one it asks for the software mlx5 device `zverbs_sim0` by
//! name, and the first line of its output says which device and why), creates two queue pairs
//! on it, connects them to each other through the control path, and drives both ends from this thread in turn through the backend zverbs
//! chose (the direct mlx5 path on a ConnectX and on the software device, libibverbs on rxe).
//! SEND: each side posts a SEND and the other polls its CQ for the receive. WRITE: each side
//! RDMA-writes the other's buffer and the other polls the buffer's last byte, as `ib_write_lat`
//! does. Latency is half the round trip. On the software device, the device's progress thread
//! plays the NIC. A wait that sees nothing for [`STALL`] fails (a lost message) instead of
//! spinning on.
//!
//! The second form (`--rc`, see `rc.rs`) talks to rdma-core's `ibv_rc_pingpong` over the
//! network, as server or client; `--ud` (`ud.rs`) to `ibv_ud_pingpong`, `--srq` (`srq.rs`) to
//! `ibv_srq_pingpong`.

mod rc;
mod srq;
mod ud;

use std::io::Write as _;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use zverbs::backend::{QueueSet, Queues};
use zverbs::{
    AccessFlags, BackendRequest, Completion, ContextOptions, MrBuf, PollCq, PostRecv, PostSend,
    RecvWr, Registered, RemoteBuf, SendWr, WcStatus,
};
use zverbs_tools::args::{self, Arg::*, Parser};
use zverbs_tools::device;
use zverbs_tools::latency::{Recorder, Summary};

const USAGE: &str = "\
usage: pingpong [--op send|write] [--size BYTES] [--iters N] [--device NAME]
                [--backend auto|direct|verbs] [--bf|--no-bf]
       pingpong --rc [ibv_rc_pingpong options] [host]
       pingpong --ud [ibv_ud_pingpong options] [host]
       pingpong --srq [ibv_srq_pingpong options] [host]

  --op send|write   SEND/RECV ping-pong (default) or RDMA WRITE polling the last byte
  --size BYTES      message size, at most 1 GiB (default 8; WRITE needs at least 1)
  --iters N         measured round trips, 1 to 100000000 (default 100000)
  --device NAME     device (default: ZVERBS_DEVICE, else the first NIC, else the software
                    device zverbs_sim0)
  --backend B       auto (default), direct or verbs
  --bf, --no-bf     ring with BlueFlame (default) or the 8-byte doorbell only
                    (--no-bf sets MLX5_SHUT_UP_BF=1, as libmlx5 reads it)
  --rc ...          talk to rdma-core's ibv_rc_pingpong; `pingpong --rc --help` for options
  --ud ...          talk to ibv_ud_pingpong (UD datagrams); `pingpong --ud --help`
  --srq ...         talk to ibv_srq_pingpong (RC QPs on one SRQ); `pingpong --srq --help`";

/// The largest message.
const MAX_SIZE: usize = 1 << 30;
/// The most measured round trips.
const MAX_ITERS: u64 = 100_000_000;
/// How long a wait on the device may see nothing before it fails: both ends are in this
/// process, so the device answers in microseconds; seconds of nothing mean a lost message.
const STALL: Duration = Duration::from_secs(10);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Send,
    Write,
}

#[derive(Clone, Debug)]
struct Args {
    op: Op,
    size: usize,
    iters: u64,
    bf: bool,
    device: Option<String>,
    backend: Option<BackendRequest>,
}

/// Parses the first form's arguments. `Err("")` asks for the usage text.
fn parse_args(mut p: Parser) -> Result<Args, String> {
    let mut a = Args {
        op: Op::Send,
        size: 8,
        iters: 100_000,
        bf: true,
        device: None,
        backend: None,
    };
    while let Some(arg) = p.next().map_err(args::explain)? {
        let f = args::flag(&arg);
        match arg {
            Long("op") => {
                a.op = match args::value(&mut p, &f)?.as_str() {
                    "send" => Op::Send,
                    "write" => Op::Write,
                    other => return Err(format!("{f} {other}: use send or write")),
                }
            }
            Short('s') | Long("size") => a.size = args::number(&mut p, &f)?,
            Short('n') | Long("iters") => a.iters = args::in_range(&mut p, &f, 1, MAX_ITERS)?,
            Short('d') | Long("device") => a.device = Some(args::value(&mut p, &f)?),
            Long("backend") => {
                let v = args::value(&mut p, &f)?;
                a.backend = Some(BackendRequest::parse(&v).map_err(|e| e.to_string())?);
            }
            Long("bf") => a.bf = true,
            Long("no-bf") => a.bf = false,
            Short('h') | Long("help") => return Err(String::new()),
            arg => return Err(args::unexpected(arg)),
        }
    }
    if a.size > MAX_SIZE {
        return Err(format!("--size {}: at most {MAX_SIZE} (1 GiB)", a.size));
    }
    if a.op == Op::Write && a.size == 0 {
        return Err("--op write needs --size of at least 1 (the last byte is polled)".into());
    }
    Ok(a)
}

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// One end: its queues and buffers.
struct End<'a, S, R, C> {
    q: QueueSet<S, R, C>,
    tx: &'a MrBuf,
    rx: &'a MrBuf,
    inline: bool,
    posted_unsignaled: u32,
    /// Receive completions polled and not yet consumed.
    recvs: u32,
}

const SIGNAL_EVERY: u32 = 32;
const RECV_DEPTH: u32 = 64;

impl<S: PostSend, R: PostRecv, C: PollCq> End<'_, S, R, C> {
    fn post_recv(&mut self, size: usize) -> Res<()> {
        let sgl = [self.rx.sge(0..size)?];
        // SAFETY: the receive buffer is registered with local write and outlives the queues;
        // this program reads it only through copies and volatile loads.
        unsafe { self.q.rq.post(&RecvWr::new(0, &sgl)) }?;
        Ok(())
    }

    /// Posts one message (`op`) of `size` bytes to `remote`, signaled every `SIGNAL_EVERY`.
    fn post(&mut self, op: Op, size: usize, remote: RemoteBuf) -> Res<()> {
        let sgl = [self.tx.sge(0..size)?];
        let wr = match op {
            Op::Send => SendWr::send(0, &sgl),
            Op::Write => SendWr::write(0, &sgl, remote),
        };
        let wr = if self.inline { wr.inline() } else { wr };
        self.posted_unsignaled += 1;
        let wr = if self.posted_unsignaled == SIGNAL_EVERY {
            self.posted_unsignaled = 0;
            wr.signaled()
        } else {
            wr
        };
        let mut spin = Spin::default();
        loop {
            // SAFETY: the source is registered (or copied now, inline) and not modified until
            // the peer has seen the message.
            match unsafe { self.q.sq.post(&wr) } {
                Ok(()) => return Ok(()),
                // Credits come back with the signaled completions: reap them and retry.
                Err(zverbs::PostError::QueueFull { .. } | zverbs::PostError::CqFull { .. }) => {
                    if self.reap()? == 0 {
                        spin.wait("send completions to free the queue")?;
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Polls the CQ once: send completions hand credits back, receives are counted. Returns
    /// how many completions it saw.
    fn reap(&mut self) -> Res<usize> {
        let mut wc = [Completion::EMPTY; 8];
        let n = self.q.cq.poll(&mut wc);
        for c in &wc[..n] {
            if c.status != WcStatus::Success {
                return Err(format!("completion failed: {c:?}").into());
            }
            if c.opcode.is_recv() {
                self.recvs += 1;
            }
        }
        Ok(n)
    }

    /// Spins until a receive completes; reposts it.
    fn wait_recv(&mut self, size: usize) -> Res<()> {
        let mut spin = Spin::default();
        while self.recvs == 0 {
            self.reap()?;
            spin.wait("a receive")?;
        }
        self.recvs -= 1;
        self.post_recv(size)
    }

    /// Spins until the last byte of the receive buffer holds `tag`.
    fn wait_byte(&self, size: usize, tag: u8) -> Res<()> {
        let mut spin = Spin::default();
        while self.rx.load_u8(size - 1)? != tag {
            spin.wait("the WRITE's last byte")?;
        }
        Ok(())
    }

    /// Sets the last byte of the send buffer (read by the device after the doorbell).
    fn set_tag(&self, size: usize, tag: u8) -> Res<()> {
        Ok(self.tx.store_u8(size - 1, tag)?)
    }
}

/// A spinning wait on the device, with an end.
#[derive(Default)]
struct Spin {
    spins: u32,
    /// When the first look at the clock found the wait still going.
    since: Option<Instant>,
}

impl Spin {
    /// One more empty spin. Every 4096th gives the core away (the software device's progress
    /// thread may need it when the machine has fewer free cores than spinning threads) and
    /// looks at the clock: after [`STALL`] of nothing, the wait fails.
    fn wait(&mut self, what: &str) -> Res<()> {
        self.spins += 1;
        if !self.spins.is_multiple_of(4096) {
            std::hint::spin_loop();
            return Ok(());
        }
        std::thread::yield_now();
        let now = Instant::now();
        let since = *self.since.get_or_insert(now);
        if now - since >= STALL {
            return Err(format!(
                "nothing for {} s while waiting for {what}: the device lost a message or stopped",
                STALL.as_secs()
            )
            .into());
        }
        Ok(())
    }
}

/// What the report says about the run, besides the figures.
struct Setup {
    device: String,
    backend: String,
    software: bool,
    inline_max: u32,
}

fn run(args: &Args) -> Res<()> {
    if !args.bf {
        // SAFETY: no other thread runs yet (the device, and its progress thread for the
        // software device, is opened below), so nothing reads the environment concurrently.
        unsafe { std::env::set_var("MLX5_SHUT_UP_BF", "1") };
    }
    let chosen = device::open(
        args.device.as_deref(),
        &ContextOptions {
            backend: args.backend,
        },
        "--device",
        true,
    )?;
    println!("{chosen}");
    let software = chosen.is_software();
    let ctx = chosen.ctx;
    let pd = ctx.alloc_pd()?;
    let len = args.size.max(64);
    let bufs = [
        pd.alloc_buf(len, AccessFlags::ALL)?,
        pd.alloc_buf(len, AccessFlags::ALL)?,
        pd.alloc_buf(len, AccessFlags::ALL)?,
        pd.alloc_buf(len, AccessFlags::ALL)?,
    ];
    let (a_cq, b_cq) = (
        ctx.cq_builder().cqe(256).build()?,
        ctx.cq_builder().cqe(256).build()?,
    );
    let qp = |cq| {
        pd.qp_builder(cq, cq)
            .max_send_wr(128)
            .max_recv_wr(RECV_DEPTH)
            .max_inline_data(220)
            .build()
    };
    let (a, b) = (qp(&a_cq)?, qp(&b_cq)?);
    zverbs::connect_pair(&a, &b)?; // INIT, RTR, RTS, each to the other
    let setup = Setup {
        device: ctx.name().to_string(),
        backend: a.backend().to_string(),
        software,
        inline_max: a.caps().max_inline_data,
    };
    let inline = args.size <= setup.inline_max as usize;
    let remotes = (bufs[1].remote(0)?, bufs[3].remote(0)?);
    match (Queues::take(&a, &a_cq)?, Queues::take(&b, &b_cq)?) {
        (Queues::Direct(qa), Queues::Direct(qb)) => {
            let (ea, eb) = ends(qa, qb, &bufs, inline);
            bench(args, &setup, ea, eb, remotes)
        }
        (Queues::Verbs(qa), Queues::Verbs(qb)) => {
            let (ea, eb) = ends(qa, qb, &bufs, inline);
            bench(args, &setup, ea, eb, remotes)
        }
        _ => Err("the two QPs got different backends".into()),
    }
}

/// The two ends: A sends from buffer 0 into B's buffer 3, B from 2 into A's 1.
fn ends<S, R, C>(
    qa: QueueSet<S, R, C>,
    qb: QueueSet<S, R, C>,
    bufs: &[MrBuf; 4],
    inline: bool,
) -> (End<'_, S, R, C>, End<'_, S, R, C>) {
    let end = |q, tx, rx| End {
        q,
        tx,
        rx,
        inline,
        posted_unsignaled: 0,
        recvs: 0,
    };
    (end(qa, &bufs[0], &bufs[1]), end(qb, &bufs[2], &bufs[3]))
}

fn bench<S: PostSend, R: PostRecv, C: PollCq>(
    args: &Args,
    setup: &Setup,
    mut a: End<'_, S, R, C>,
    mut b: End<'_, S, R, C>,
    (remote_of_a, remote_of_b): (RemoteBuf, RemoteBuf),
) -> Res<()> {
    if args.op == Op::Send {
        for _ in 0..RECV_DEPTH {
            a.post_recv(args.size)?;
            b.post_recv(args.size)?;
        }
    }
    let warmup = (args.iters / 10).clamp(1, 10_000);
    // Half round trips, recorded into a histogram sized here, once: recording never allocates.
    let mut lat = Recorder::new();
    let round_trip = |i: u64, a: &mut End<'_, S, R, C>, b: &mut End<'_, S, R, C>| -> Res<()> {
        let tag = (i % 255) as u8 + 1;
        match args.op {
            Op::Send => {
                a.post(Op::Send, args.size, remote_of_b)?;
                b.wait_recv(args.size)?;
                b.post(Op::Send, args.size, remote_of_a)?;
                a.wait_recv(args.size)?;
            }
            Op::Write => {
                a.set_tag(args.size, tag)?;
                a.post(Op::Write, args.size, remote_of_b)?;
                b.wait_byte(args.size, tag)?;
                b.set_tag(args.size, tag)?;
                b.post(Op::Write, args.size, remote_of_a)?;
                a.wait_byte(args.size, tag)?;
            }
        }
        Ok(())
    };
    for i in 0..warmup {
        round_trip(i, &mut a, &mut b)?;
        a.reap()?;
        b.reap()?;
    }
    let long = args.iters >= 200_000;
    let started = Instant::now();
    let mut last_report = started;
    for i in 0..args.iters {
        let t0 = Instant::now();
        round_trip(warmup + i, &mut a, &mut b)?;
        let t1 = Instant::now();
        lat.record((t1 - t0).as_nanos() as u64 / 2);
        a.reap()?;
        b.reap()?;
        if long && i % 4096 == 0 && t1 - last_report >= Duration::from_secs(1) {
            last_report = t1;
            eprint!(
                "\r  {i}/{} round trips ({}%)",
                args.iters,
                i * 100 / args.iters
            );
            let _ = std::io::stderr().flush();
        }
    }
    let elapsed = started.elapsed();
    if long {
        eprintln!("\r  {0}/{0} round trips (100%)   ", args.iters);
    }
    report(args, setup, a.inline, warmup, &lat.summary(), elapsed);
    Ok(())
}

fn report(args: &Args, setup: &Setup, inline: bool, warmup: u64, lat: &Summary, elapsed: Duration) {
    // Half round trips, in microseconds.
    let us = |ns: u64| ns as f64 / 1000.0;
    let line = "-".repeat(96);
    let title = match args.op {
        Op::Send => "Send Latency Test",
        Op::Write => "RDMA_Write Latency Test",
    };
    println!("{line}");
    println!("{title:^96}");
    if setup.software {
        println!(
            " Device          : {} (software mlx5 device, progress thread)",
            setup.device
        );
    } else {
        println!(" Device          : {}", setup.device);
    }
    println!(" Transport       : RC, two queue pairs connected to each other");
    println!(" Backend         : {}", setup.backend);
    println!(
        " Inline          : {}",
        if inline {
            format!("yes (up to {} B)", setup.inline_max)
        } else {
            "no".to_string()
        }
    );
    println!(" Signaling       : one send in {SIGNAL_EVERY} asks for a completion");
    println!(" Latency         : half round trip, {warmup} warm-up round trips not counted");
    println!("{line}");
    println!(
        " {:>7} {:>11} {:>11} {:>11} {:>11} {:>12} {:>11} {:>11} {:>12}",
        "#bytes",
        "#iterations",
        "t_min[us]",
        "t_p50[us]",
        "t_p99[us]",
        "t_p99.9[us]",
        "t_max[us]",
        "t_avg[us]",
        "msg_rate[M/s]"
    );
    println!(
        " {:>7} {:>11} {:>11.3} {:>11.3} {:>11.3} {:>12.3} {:>11.3} {:>11.3} {:>12.3}",
        args.size,
        args.iters,
        us(lat.min),
        us(lat.p50),
        us(lat.p99),
        us(lat.p999),
        us(lat.max),
        lat.avg / 1000.0,
        2.0 * args.iters as f64 / elapsed.as_secs_f64() / 1e6,
    );
    println!("{line}");
    println!(
        " {} messages of {} bytes in {:.3} s",
        2 * args.iters,
        args.size,
        elapsed.as_secs_f64(),
    );
}

fn main() -> ExitCode {
    let mut argv = std::env::args_os().skip(1).peekable();
    if argv.next_if(|a| a == "--rc").is_some() {
        return rc::main(Parser::from_args(argv));
    }
    if argv.next_if(|a| a == "--ud").is_some() {
        return ud::main(Parser::from_args(argv));
    }
    if argv.next_if(|a| a == "--srq").is_some() {
        return srq::main(Parser::from_args(argv));
    }
    match parse_args(Parser::from_args(argv)) {
        Ok(args) => match run(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("pingpong: {e}");
                ExitCode::FAILURE
            }
        },
        Err(e) => {
            if !e.is_empty() {
                eprintln!("pingpong: {e}");
            }
            eprintln!("{USAGE}");
            if e.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(2)
            }
        }
    }
}
