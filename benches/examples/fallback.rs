//! The libibverbs fallback against the same loop written in C on raw `ibv_post_send` /
//! `ibv_poll_cq`, on a real device (rxe in the VM of `cargo xtask rxe`, or any device the
//! fallback drives):
//!
//! ```text
//! cargo build --release -p zverbs-benches --example fallback
//! cargo xtask rxe -- target/release/examples/fallback --device rxe0
//! fallback [--device NAME] [--gid-idx N] [--iters N] [--rounds N] [--size BYTES] [--out FILE]
//! ```
//!
//! Both sides: two RC QPs of one device connected to each other, one CQ each, 4 KiB
//! registered buffers; one iteration posts one signaled RDMA WRITE of `size` bytes (8 by
//! default) from A to B and polls A's CQ until its completion arrives. zverbs drives its QPs
//! through the control path with the verbs backend (`send` + `poll` of the fallback's queues);
//! the C side (`c/verbs_loop.c`) creates its own through libibverbs and loops on
//! `ibv_post_send` + `ibv_poll_cq`. Rounds alternate the sides (and which goes first), so that
//! a slow moment of the machine hits both; the ratio is the median of the rounds' ratios.
//! Goal: at most 1.02×.
//!
//! With `--out FILE` the result is written as the tab-separated line `cargo xtask bench`
//! reads for its other cases.

use std::ffi::{CString, c_char, c_int};

use std::process::ExitCode;
use std::time::{Duration, Instant};
use zverbs_benches::ffi::{ZvbVloop, zvb_vloop_close, zvb_vloop_open, zvb_vloop_run};

use zverbs::backend::Queues;
use zverbs::connect::{Endpoint, random_psn};
use zverbs::{
    AccessFlags, BackendRequest, Completion, ConnectAttr, ContextOptions, PollCq, PostSend,
    Registered, SendWr, WcStatus,
};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// The C side's QPs, closed on drop.
struct CLoop(*mut ZvbVloop);

impl CLoop {
    fn open(dev: &str, port: u8, gid_index: Option<u32>, size: u32) -> Res<Self> {
        let dev = CString::new(dev)?;
        let mut err = [0 as c_char; 256];
        let mut l = std::ptr::null_mut();
        let gid = gid_index.map_or(-1, |g| g as c_int);
        // SAFETY: valid C string, out pointer and error buffer of the given length.
        let rc = unsafe {
            zvb_vloop_open(
                dev.as_ptr(),
                c_int::from(port),
                gid,
                size,
                &mut l,
                err.as_mut_ptr(),
                err.len(),
            )
        };
        if rc != 0 {
            // SAFETY: the C side wrote a NUL-terminated message into `err` (vsnprintf).
            let msg = unsafe { std::ffi::CStr::from_ptr(err.as_ptr()) };
            return Err(format!("C baseline: {}", msg.to_string_lossy()).into());
        }
        Ok(Self(l))
    }

    fn run(&mut self, n: u64) -> Res<Duration> {
        let t = Instant::now();
        // SAFETY: a live loop from `open`.
        let rc = unsafe { zvb_vloop_run(self.0, n) };
        let took = t.elapsed();
        if rc != 0 {
            return Err("C baseline: a post or a completion failed".into());
        }
        Ok(took)
    }
}

impl Drop for CLoop {
    fn drop(&mut self) {
        // SAFETY: from `open`, closed once.
        unsafe { zvb_vloop_close(self.0) };
    }
}

#[derive(Debug)]
struct Args {
    device: Option<String>,
    gid_index: Option<u32>,
    iters: u64,
    rounds: u32,
    size: u32,
    out: Option<String>,
}

fn parse() -> Res<Args> {
    let mut a = Args {
        device: None,
        gid_index: None,
        iters: 20_000,
        rounds: 10,
        size: 8,
        out: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || it.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--device" | "-d" => a.device = Some(value()?),
            "--gid-idx" | "-g" => a.gid_index = Some(value()?.parse()?),
            "--iters" | "-n" => a.iters = value()?.parse()?,
            "--rounds" => a.rounds = value()?.parse()?,
            "--size" | "-s" => a.size = value()?.parse()?,
            "--out" => a.out = Some(value()?),
            other => return Err(format!("unknown argument {other:?}").into()),
        }
    }
    if a.iters == 0 || a.rounds == 0 || a.size == 0 || a.size > 4096 {
        return Err("--iters and --rounds at least 1, --size 1 to 4096".into());
    }
    Ok(a)
}

fn main() -> ExitCode {
    match parse().and_then(|a| run(&a)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fallback: {e}");
            ExitCode::FAILURE
        }
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

fn run(args: &Args) -> Res<()> {
    let ctx = zverbs::open_device(
        args.device.as_deref(),
        &ContextOptions {
            backend: Some(BackendRequest::Verbs),
        },
    )?;
    let port = ctx.active_port()?;
    let local = ctx.address(port, args.gid_index)?;
    let pd = ctx.alloc_pd()?;
    let a_buf = pd.alloc_buf(4096, AccessFlags::ALL)?;
    let b_buf = pd.alloc_buf(4096, AccessFlags::ALL)?;
    let a_cq = ctx.cq_builder().cqe(64).build()?;
    let b_cq = ctx.cq_builder().cqe(64).build()?;
    let qp = |cq| {
        pd.qp_builder(cq, cq)
            .max_send_wr(16)
            .max_recv_wr(16)
            .max_send_sge(1)
            .build()
    };
    let (a, b) = (qp(&a_cq)?, qp(&b_cq)?);
    let ends = [a.qpn(), b.qpn()].map(|qpn| Endpoint {
        lid: local.lid,
        qpn,
        psn: random_psn(),
        gid: local.gid,
    });
    a.connect_with(
        &ConnectAttr::new(port, ends[0].psn, &ends[1], local.gid_index).mtu(local.active_mtu),
    )?;
    b.connect_with(
        &ConnectAttr::new(port, ends[1].psn, &ends[0], local.gid_index).mtu(local.active_mtu),
    )?;
    let Queues::Verbs(mut q) = Queues::take(&a, &a_cq)? else {
        return Err("the control path did not give the verbs backend".into());
    };
    let mut c = CLoop::open(ctx.name(), port, local.gid_index, args.size)?;
    println!(
        "device {} port {port}, GID index {:?}; backend {}; {} rounds of {} iterations, {} bytes",
        ctx.name(),
        local.gid_index,
        a.backend(),
        args.rounds,
        args.iters,
        args.size
    );

    let sgl = [a_buf.sge(0..args.size as usize)?];
    let remote = b_buf.remote(0)?;
    let mut wc = [Completion::EMPTY; 1];
    let mut next_id = 0u64;
    let mut ours = |n: u64| -> Res<Duration> {
        let t = Instant::now();
        for _ in 0..n {
            let wr = SendWr::write(next_id, &sgl, remote).signaled();
            // SAFETY: the source is registered and not modified during the run; the
            // destination is B's registered buffer, which this program does not read.
            unsafe { q.sq.post(&wr) }?;
            while q.cq.poll(&mut wc) == 0 {}
            if wc[0].status != WcStatus::Success || wc[0].wr_id != next_id {
                return Err(format!("completion {:?}", wc[0]).into());
            }
            next_id += 1;
        }
        Ok(t.elapsed())
    };
    // Warm-up: both sides, a tenth of a round.
    ours(args.iters / 10 + 1)?;
    c.run(args.iters / 10 + 1)?;

    let per = |d: Duration| d.as_nanos() as f64 / args.iters as f64;
    let (mut o, mut cc, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..args.rounds {
        let (to, tc) = if r % 2 == 0 {
            let to = ours(args.iters)?;
            (to, c.run(args.iters)?)
        } else {
            let tc = c.run(args.iters)?;
            (ours(args.iters)?, tc)
        };
        println!(
            "  round {r:>3}: zverbs {:>10.1} ns  C {:>10.1} ns  {:.3}x",
            per(to),
            per(tc),
            per(to) / per(tc)
        );
        o.push(per(to));
        cc.push(per(tc));
        ratios.push(per(to) / per(tc));
    }
    let ratio = median(&mut ratios);
    let (best_o, best_c) = (
        o.iter().copied().fold(f64::INFINITY, f64::min),
        cc.iter().copied().fold(f64::INFINITY, f64::min),
    );
    let (med_o, med_c) = (median(&mut o), median(&mut cc));
    println!(
        "post+poll of one RDMA WRITE through the fallback: zverbs {best_o:.1} ns, C {best_c:.1} ns \
         (fastest rounds); median of the rounds' ratios {ratio:.3}x: goal <= 1.02x {}",
        if ratio <= 1.02 { "met" } else { "MISSED" }
    );
    if let Some(path) = &args.out {
        let line = format!(
            "case\tunits\tours_ns\tc_ns\tabout\tours_median\tc_median\n\
             fallback_write\t1\t{best_o:.3}\t{best_c:.3}\t\
             post+poll of one {}-byte RDMA WRITE through libibverbs on {} \
             (median ratio of {} rounds {ratio:.3})\t{med_o:.3}\t{med_c:.3}\n",
            args.size,
            ctx.name(),
            args.rounds
        );
        std::fs::write(path, line)?;
    }
    Ok(())
}
