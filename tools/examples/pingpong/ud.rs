//! `pingpong --ud`: a UD ping-pong that speaks `ibv_ud_pingpong`'s protocol, so either side
//! can be rdma-core's own `ibv_ud_pingpong` (package `ibverbs-utils`).
//!
//! ```text
//! pingpong --ud [options]           # server
//! pingpong --ud [options] <host>    # client
//! ```
//!
//! The options are `--rc`'s (`-s` defaults to 2048 and must fit the port's MTU; `-m` is
//! ignored: a datagram's path MTU is the port's). As in `ibv_ud_pingpong`: the QP is taken to
//! INIT with Q_Key `0x11111111` and its receives (`size + 40` bytes: the GRH area first) are
//! posted before the exchange; the server readies the QP and makes the address handle to the
//! client before it answers, the client after; the client sends first; each side sends its
//! next datagram once its previous send and one receive have completed. The exchange is
//! `ibv_rc_pingpong`'s (LID, QPN, PSN, GID); the GID is sent only with `-g`.
//!
//! Datagrams carry `ibv_ud_pingpong`'s fill byte (0x7b); every datagram received is checked
//! byte for byte after its GRH area, and the run fails at its end if one was wrong.

use std::process::ExitCode;
use std::time::Instant;

use zverbs::backend::Queues;
use zverbs::connect::Endpoint;
use zverbs::connect::exchange::{self, Hello, Wire};
use zverbs::{
    AccessFlags, AhAttr, Completion, ContextOptions, MrBuf, PollCq, SendFlags, UdAttr, UdTarget,
};
use zverbs_tools::args::Parser;

use crate::rc::{self, Damage, FILL, Mode, Opts, PEER_TIMEOUT, RECV_WRID, SEND_WRID};

/// `ibv_ud_pingpong`'s Q_Key.
const QKEY: u32 = 0x1111_1111;
/// The GRH area at the start of every UD receive.
const GRH: usize = 40;

/// Runs the `--ud` mode with the arguments after `--ud`.
pub fn main(args: Parser) -> ExitCode {
    rc::run_mode(args, Mode::Ud, run)
}

fn run(o: &Opts) -> Result<(), Box<dyn std::error::Error>> {
    let copts = ContextOptions { backend: o.backend };
    let chosen = zverbs_tools::device::open(o.device.as_deref(), &copts, "-d", false)?;
    println!("  {chosen}");
    let ctx = chosen.ctx;
    let port = ctx.port(o.ib_port)?;
    let mtu = port.active_mtu.bytes() as usize;
    println!("  port {}: active MTU {mtu}", o.ib_port);
    if o.size > mtu {
        return Err(format!("Requested size larger than port MTU ({mtu})").into());
    }
    if port.link_layer != zverbs::LinkLayer::Ethernet && port.lid == 0 {
        return Err("Couldn't get local LID".into());
    }
    let pd = ctx.alloc_pd()?;
    let buf = pd.alloc_buf(o.size + GRH, AccessFlags::LOCAL_WRITE)?;
    let rbuf = pd.alloc_buf(o.size + GRH, AccessFlags::LOCAL_WRITE)?;
    buf.fill(0..o.size + GRH, FILL)?;
    let cq = ctx.cq_builder().cqe(o.rx_depth + 1).build()?;
    let qp = pd
        .qp_builder(&cq, &cq)
        .ud()
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
    let ud = UdAttr {
        port: o.ib_port,
        pkey_index: 0,
        qkey: QKEY,
        sq_psn: me.psn,
    };
    // INIT now, RTR and RTS with the address handle once the peer is known (as
    // ibv_ud_pingpong's connect step).
    qp.to_init_ud(&ud)?;
    let mut rq = qp.recv_queue()?;
    for _ in 0..o.rx_depth {
        rq.post(RECV_WRID, rbuf.slice(0..o.size + GRH)?)?;
    }
    println!(
        "  local address:  LID {:#06x}, QPN {:#08x}, PSN {:#08x}, GID {}",
        me.lid, me.qpn, me.psn, me.gid
    );
    let connect = |peer: &Endpoint| -> zverbs::Result<zverbs::AddressHandle> {
        qp.to_rts_ud(&ud)?;
        let mut attr = AhAttr::to(o.ib_port, peer, o.gid_index);
        attr.sl = o.sl;
        if let Some(g) = &mut attr.grh {
            g.hop_limit = 1; // as ibv_ud_pingpong
        }
        pd.create_ah(&attr)
    };
    let hello = Hello {
        endpoint: me,
        ..Hello::default()
    };
    let (peer, ah) = match &o.server {
        Some(host) => {
            let addr = if host.contains(':') {
                host.clone()
            } else {
                format!("{host}:{}", o.port)
            };
            let mut s = exchange::connect(&addr, PEER_TIMEOUT)?;
            let peer = exchange::client(&mut s, &hello, Wire::RcPingpong)?.endpoint;
            let ah = connect(&peer)?;
            (peer, ah)
        }
        None => {
            let l = exchange::listen(o.port)?;
            let mut s = exchange::accept(&l, PEER_TIMEOUT)?;
            let mut ah = None;
            let peer = exchange::server(&mut s, &hello, Wire::RcPingpong, |p| {
                ah = Some(connect(&p.endpoint)?);
                Ok(())
            })?
            .endpoint;
            (peer, ah.expect("the server's connect step ran"))
        }
    };
    println!(
        "  remote address: LID {:#06x}, QPN {:#08x}, PSN {:#08x}, GID {}",
        peer.lid, peer.qpn, peer.psn, peer.gid
    );
    let dest = ah.target(peer.qpn, QKEY);
    let client = o.server.is_some();
    let queues = Queues::from_parts(qp.send_queue()?, rq, cq.poller()?)?;
    let ends = (&buf, &rbuf, &dest);
    let start = match queues {
        Queues::Direct(q) => session(q.sq, q.rq, q.cq, ends, o, client)?,
        Queues::DirectUd(q) => session(q.sq, q.rq, q.cq, ends, o, client)?,
        Queues::Verbs(q) => session(q.sq, q.rq, q.cq, ends, o, client)?,
    };
    rc::report(start, o, o.iters);
    println!(
        "{} datagrams received, every byte after the GRH area checked ({FILL:#04x})",
        o.iters
    );
    drop(ah);
    Ok(())
}

/// The ping-pong, with the first receives posted; returns when timing started.
fn session<S: Into<zverbs::SendQueue>, R: Into<zverbs::RecvQueue>, C: PollCq>(
    sq: S,
    rq: R,
    mut cq: C,
    (buf, rbuf, dest): (&MrBuf, &MrBuf, &UdTarget),
    o: &Opts,
    client: bool,
) -> Result<Instant, Box<dyn std::error::Error>> {
    let mut sq: zverbs::SendQueue = sq.into();
    let mut rq: zverbs::RecvQueue = rq.into();
    let slice = buf.slice(GRH..GRH + o.size)?;
    let start = Instant::now();
    let mut routs = o.rx_depth;
    let (mut scnt, mut rcnt) = (0u64, 0u64);
    let mut pending = RECV_WRID;
    if client {
        sq.send_to(SEND_WRID, slice, dest, SendFlags::SIGNALED)?;
        pending |= SEND_WRID;
    }
    let mut wc = [Completion::EMPTY; 2];
    let mut damage = Damage::default();
    let mut idle = rc::Idle::new();
    while rcnt < o.iters || scnt < o.iters {
        let n = cq.poll(&mut wc);
        idle.note(n, rcnt, o.iters)?;
        for c in &wc[..n] {
            rc::check_status(c)?;
            match c.wr_id {
                SEND_WRID => scnt += 1,
                RECV_WRID => {
                    rc::check_at(rbuf, GRH, o.size, FILL, rcnt, &mut damage)?;
                    routs -= 1;
                    if routs <= 1 {
                        for _ in routs..o.rx_depth {
                            rq.post(RECV_WRID, rbuf.slice(0..o.size + GRH)?)?;
                        }
                        routs = o.rx_depth;
                    }
                    rcnt += 1;
                }
                other => return Err(format!("Completion for unknown wr_id {other}").into()),
            }
            pending &= !c.wr_id;
            if scnt < o.iters && pending == 0 {
                sq.send_to(SEND_WRID, slice, dest, SendFlags::SIGNALED)?;
                pending = RECV_WRID | SEND_WRID;
            }
        }
    }
    rc::fail_on(&damage, o)?;
    Ok(start)
}
