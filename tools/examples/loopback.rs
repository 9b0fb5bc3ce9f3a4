//! A self-test of every operation: two RC queue pairs of one device connected to each other,
//! every operation run through the backend zverbs chooses, every result checked. Exits 0 when
//! all checks pass, 1 otherwise (2 for bad arguments).
//!
//! It runs without a NIC: on a machine that has none it runs on the software mlx5 device
//! `zverbs_sim0` (the `sim` feature of zverbs, which zverbs-tools turns on: no NIC, no rdma-core, no server), and its
//! first line says so. To choose the device, name it (`mlx5_0`, `rxe0`, `zverbs_sim0`;
//! `ibv_devices` lists the NICs) or set `ZVERBS_DEVICE`; with neither, it takes the first NIC.
//! On RoCE, `--gid-idx` picks the GID (`ibv_devinfo -v` lists them); `--backend` forces one.
//!
//! ```text
//! cargo run -p zverbs-tools --example loopback                  # the first NIC, else the software device
//! cargo run -p zverbs-tools --example loopback -- zverbs_sim0   # the software device
//! cargo run -p zverbs-tools --example loopback -- rxe0 --gid-idx 1 --backend verbs
//! cargo run -p zverbs-tools --example loopback -- [device] [--backend auto|direct|verbs] [--gid-idx N]
//! ```
//!
//! This is the device test the rxe VM harness runs; it is not part of `cargo test`, which
//! must pass on machines without RDMA.

use std::process::exit;
use std::time::{Duration, Instant};

use zverbs::safe::SafeQueues;
use zverbs::{AccessFlags, BackendRequest, Completion, ContextOptions, Registered, SendFlags};
use zverbs::{WcOpcode, WcStatus};

use zverbs_tools::args::{self, Arg::*, Parser};
use zverbs_tools::device;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

const USAGE: &str = "usage: loopback [device] [--backend auto|direct|verbs] [--gid-idx N]";

struct Checks {
    passed: u32,
    failed: u32,
}

impl Checks {
    fn check(&mut self, ok: bool, what: &str) {
        if ok {
            self.passed += 1;
            println!("  ok    {what}");
        } else {
            self.failed += 1;
            println!("  FAIL  {what}");
        }
    }
}

/// `n` completions of `q`'s CQ, or an error after 10 s.
fn wait(q: &mut SafeQueues, n: usize) -> Res<Vec<Completion>> {
    let deadline = Instant::now() + Duration::from_secs(10);
    Ok(q.cq.wait(n, deadline)?.to_vec())
}

/// Exits with the usage and `why`.
fn usage(why: &str) -> ! {
    eprintln!("loopback: {why}\n{USAGE}");
    exit(2)
}

fn main() {
    let mut device = None;
    let mut backend = None;
    let mut gid_index = None;
    let mut p = Parser::from_env();
    let parsed = (|| -> Result<(), String> {
        while let Some(arg) = p.next().map_err(args::explain)? {
            let f = args::flag(&arg);
            match arg {
                Long("backend") => {
                    let v = args::value(&mut p, &f)?;
                    backend = Some(BackendRequest::parse(&v).map_err(|e| e.to_string())?);
                }
                Long("gid-idx") => gid_index = Some(args::number(&mut p, &f)?),
                Short('h') | Long("help") => {
                    println!("{USAGE}");
                    exit(0)
                }
                Value(d) if device.is_none() => device = Some(args::string(d)?),
                arg => return Err(args::unexpected(arg)),
            }
        }
        Ok(())
    })();
    if let Err(why) = parsed {
        usage(&why);
    }
    let mut checks = Checks {
        passed: 0,
        failed: 0,
    };
    if let Err(e) = run(device.as_deref(), backend, gid_index, &mut checks) {
        println!("  FAIL  {e}");
        checks.failed += 1;
    }
    println!(
        "loopback: {} passed, {} failed",
        checks.passed, checks.failed
    );
    exit(i32::from(checks.failed > 0));
}

fn run(
    device: Option<&str>,
    backend: Option<BackendRequest>,
    gid_index: Option<u32>,
    c: &mut Checks,
) -> Res<()> {
    let chosen = device::open(device, &ContextOptions { backend }, "a device name", true)?;
    println!("{chosen}");
    let ctx = chosen.ctx;
    let be = ctx.atomics_big_endian();
    let port = ctx.active_port()?;
    let local = ctx.address(port, gid_index)?;
    println!(
        "device {} port {port}, GID {} (index {:?})",
        ctx.name(),
        local.gid,
        local.gid_index
    );
    let pd = ctx.alloc_pd()?;
    let a_buf = pd.alloc_buf(4096, AccessFlags::ALL)?;
    let b_buf = pd.alloc_buf(4096, AccessFlags::ALL)?;
    let a_cq = ctx.cq_builder().cqe(64).build()?;
    let b_cq = ctx.cq_builder().cqe(64).build()?;
    let a = pd
        .qp_builder(&a_cq, &a_cq)
        .max_send_wr(16)
        .max_recv_wr(16)
        .max_send_sge(2)
        .build()?;
    let b = pd
        .qp_builder(&b_cq, &b_cq)
        .max_send_wr(16)
        .max_recv_wr(16)
        .build()?;
    println!("backend: {}", a.backend());
    if gid_index.is_some() {
        // A GID of the caller's choice: each side's endpoint on it, with the QP's own PSN.
        let at = |qp: &zverbs::Qp| zverbs::connect::Endpoint {
            lid: local.lid,
            qpn: qp.qpn(),
            psn: qp.psn(),
            gid: local.gid,
        };
        let attr = |qp: &zverbs::Qp, peer| {
            zverbs::ConnectAttr::new(port, qp.psn(), &peer, local.gid_index).mtu(local.active_mtu)
        };
        a.connect_with(&attr(&a, at(&b)))?;
        b.connect_with(&attr(&b, at(&a)))?;
    } else {
        zverbs::connect_pair(&a, &b)?;
    }
    c.check(true, "QPs connected to each other (INIT, RTR, RTS)");
    // Each QP's send and receive queues and its CQ's poller, whichever backend drives them.
    let mut qa = a.queues(&a_cq)?;
    let mut qb = b.queues(&b_cq)?;
    ops(&mut qa, &mut qb, (&a_buf, &b_buf, be), c)
}

fn ops(
    qa: &mut SafeQueues,
    qb: &mut SafeQueues,
    (a, b, be): (&zverbs::MrBuf, &zverbs::MrBuf, bool),
    c: &mut Checks,
) -> Res<()> {
    let sig = SendFlags::SIGNALED;

    // RDMA WRITE
    a.write(0, b"written by RDMA WRITE")?;
    qa.sq.write(1, a.slice(0..21)?, b.remote(100)?, sig)?;
    let w = wait(qa, 1)?;
    let mut got = [0u8; 21];
    b.read(100, &mut got)?;
    c.check(
        w[0].is_success() && w[0].wr_id == 1 && w[0].opcode == WcOpcode::RdmaWrite,
        "WRITE completes",
    );
    c.check(
        &got == b"written by RDMA WRITE",
        "WRITE lands in the peer's buffer",
    );

    // Inline WRITE, unsignaled, then a signaled one retires both.
    qa.sq
        .write_inline(2, b"inline!", b.remote(200)?, SendFlags::NONE)?;
    qa.sq.write_inline(3, b"second", b.remote(220)?, sig)?;
    let w = wait(qa, 1)?;
    let mut got = [0u8; 7];
    b.read(200, &mut got)?;
    c.check(
        w[0].wr_id == 3 && &got == b"inline!",
        "inline WRITE, selective signaling",
    );

    // SEND with immediate into a posted receive.
    qb.rq.post(10, b.slice(1024..2048)?)?;
    a.write(512, b"a message")?;
    qa.sq.send_imm(4, a.slice(512..521)?, 0xfeed_f00d, sig)?;
    let w = wait(qa, 1)?;
    let r = wait(qb, 1)?;
    let mut got = [0u8; 9];
    b.read(1024, &mut got)?;
    c.check(
        w[0].is_success() && w[0].opcode == WcOpcode::Send,
        "SEND completes",
    );
    c.check(
        r[0].wr_id == 10 && r[0].opcode == WcOpcode::Recv && r[0].byte_len == 9,
        "receive completes with the message length",
    );
    c.check(
        r[0].imm() == Some(0xfeed_f00d),
        "immediate arrives in host order",
    );
    c.check(&got == b"a message", "SEND lands in the receive buffer");

    // WRITE with immediate consumes a receive.
    qb.rq.post(11, b.slice(2048..2049)?)?;
    qa.sq
        .write_imm(5, a.slice(0..4)?, b.remote(300)?, 77, sig)?;
    wait(qa, 1)?;
    let r = wait(qb, 1)?;
    c.check(
        r[0].opcode == WcOpcode::RecvRdmaWithImm && r[0].imm() == Some(77),
        "WRITE with immediate reports RECV_RDMA_WITH_IMM",
    );

    // RDMA READ
    b.write(3000, b"read me back")?;
    qa.sq.read(6, a.slice(3000..3012)?, b.remote(3000)?, sig)?;
    let w = wait(qa, 1)?;
    let mut got = [0u8; 12];
    a.read(3000, &mut got)?;
    c.check(
        w[0].opcode == WcOpcode::RdmaRead && w[0].byte_len == 12 && &got == b"read me back",
        "READ fetches the peer's bytes",
    );

    // Atomics (host order, unless the device is a ConnectX the driver could not set to it).
    let v = |x: u64| if be { x.to_be() } else { x };
    b.store_u64(4000, v(40))?;
    qa.sq
        .fetch_add(7, a.slice(4000..4008)?, b.remote(4000)?, 2, sig)?;
    let w = wait(qa, 1)?;
    c.check(
        w[0].opcode == WcOpcode::FetchAdd
            && a.load_u64(4000)? == v(40)
            && b.load_u64(4000)? == v(42),
        "FETCH_ADD returns the old value and adds",
    );
    qa.sq
        .compare_swap(8, a.slice(4000..4008)?, b.remote(4000)?, 42, 7, sig)?;
    let w = wait(qa, 1)?;
    c.check(
        w[0].opcode == WcOpcode::CompSwap
            && a.load_u64(4000)? == v(42)
            && b.load_u64(4000)? == v(7),
        "COMPARE_SWAP swaps on a match",
    );

    // A remote access error: a WRITE with a wrong rkey.
    let bad = zverbs::RemoteBuf::new(b.addr(), b.rkey() ^ 0x5a5a_0000);
    qa.sq.write(9, a.slice(0..8)?, bad, sig)?;
    let w = wait(qa, 1)?;
    c.check(
        w[0].wr_id == 9 && w[0].status == WcStatus::RemAccessErr,
        "a wrong rkey completes with a remote access error",
    );
    Ok(())
}
