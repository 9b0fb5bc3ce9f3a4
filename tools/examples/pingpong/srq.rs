//! `pingpong --srq`: RC QPs that take their receives from one shared receive queue, speaking
//! `ibv_srq_pingpong`'s protocol, so either side can be rdma-core's own `ibv_srq_pingpong`
//! (package `ibverbs-utils`).
//!
//! ```text
//! pingpong --srq [options] [-q N]           # server
//! pingpong --srq [options] [-q N] <host>    # client
//! ```
//!
//! The options are `--rc`'s, and `-q` the number of QPs (16; both sides must agree). As in
//! `ibv_srq_pingpong`: `rx-depth` receives are posted to the SRQ before the exchange; the
//! exchange carries 256 `ibv_rc_pingpong` address records each way (one per possible QP, the
//! unused ones zero), the client's first; the server connects its QPs (QP `i` to the peer's QP
//! `i`) before it answers; the client sends first on every QP; each QP sends its next message
//! once its previous send and one receive on it have completed, until `iters` messages were
//! sent in all. Messages are zeros, as `ibv_srq_pingpong` sends them.
//!
//! Every receive has a buffer of its own here, checked when its completion comes (zeros, then
//! refilled with 0xff before it is posted again), and the completions of the SRQ's receives
//! name the QP they arrived on, which is how the next send is paced.

use std::net::TcpStream;
use std::process::ExitCode;
use std::time::Instant;

use zverbs::connect::Endpoint;
use zverbs::connect::exchange::{self, DONE, MSG_LEN};
use zverbs::{
    AccessFlags, Completion, ConnectAttr, ContextOptions, MrBuf, PollCq, PostRecv, PostSend, Qp,
    RecvWr, Registered, SendQueue, SendWr,
};
use zverbs_tools::args::Parser;

use crate::rc::{self, Damage, Mode, Opts, PEER_TIMEOUT, SEND_WRID};

/// The address records each side sends (`ibv_srq_pingpong`'s `MAX_QP`).
const RECORDS: usize = 256;
/// Receive `wr_id`s: this bit and the receive's buffer slot.
const RECV_TAG: u64 = 1 << 32;

/// Runs the `--srq` mode with the arguments after `--srq`.
pub fn main(args: Parser) -> ExitCode {
    rc::run_mode(args, Mode::Srq, run)
}

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn run(o: &Opts) -> Res<()> {
    let copts = ContextOptions { backend: o.backend };
    let chosen = zverbs_tools::device::open(o.device.as_deref(), &copts, "-d", false)?;
    println!("  {chosen}");
    let ctx = chosen.ctx;
    let port = ctx.port(o.ib_port)?;
    if port.link_layer != zverbs::LinkLayer::Ethernet && port.lid == 0 {
        return Err("Couldn't get local LID".into());
    }
    let n = o.num_qp as usize;
    let pd = ctx.alloc_pd()?;
    let sbuf = pd.alloc_buf(o.size, AccessFlags::LOCAL_WRITE)?;
    let rbuf = pd.alloc_buf(o.size * o.rx_depth as usize, AccessFlags::LOCAL_WRITE)?;
    rbuf.fill(0..o.size * o.rx_depth as usize, 0xff)?;
    let cq = ctx.cq_builder().cqe(o.rx_depth + o.num_qp).build()?;
    let srq = pd.create_srq(o.rx_depth, 1)?;
    let qps: Vec<Qp> = (0..n)
        .map(|_| {
            pd.qp_builder(&cq, &cq)
                .srq(&srq)
                .max_send_wr(1)
                .max_inline_data(0)
                .build()
        })
        .collect::<zverbs::Result<_>>()?;
    println!("  backend: {}", qps[0].backend());
    let gid = match o.gid_index {
        Some(i) => ctx.gid(o.ib_port, i)?.gid,
        None => zverbs::Gid::default(),
    };
    let mine: Vec<Endpoint> = qps
        .iter()
        .map(|qp| Endpoint {
            lid: port.lid,
            qpn: qp.qpn(),
            psn: qp.psn(),
            gid,
        })
        .collect();
    let attr = |me: &Endpoint, peer: &Endpoint, grh: bool| {
        let mut a = ConnectAttr::new(o.ib_port, me.psn, peer, o.gid_index)
            .mtu(o.mtu)
            .sl(o.sl)
            .access(AccessFlags::empty());
        // ibv_srq_pingpong decides the GRH by the first record's GID.
        if !grh {
            a.rtr.grh = None;
        }
        if let Some(g) = &mut a.rtr.grh {
            g.hop_limit = 1;
        }
        a
    };
    for (qp, me) in qps.iter().zip(&mine) {
        qp.to_init(&attr(me, &Endpoint::default(), false).init)?;
    }
    let mut rq = srq.queue()?;
    for slot in 0..o.rx_depth as usize {
        post_recv(&mut rq, &rbuf, o.size, slot)?;
    }
    for me in &mine {
        println!(
            "  local address:  LID {:#06x}, QPN {:#08x}, PSN {:#08x}, GID {}",
            me.lid, me.qpn, me.psn, me.gid
        );
    }
    let connect = |peers: &[Endpoint]| -> zverbs::Result<()> {
        let grh = peers[0].gid.interface_id() != 0;
        for ((qp, me), peer) in qps.iter().zip(&mine).zip(peers) {
            let a = attr(me, peer, grh);
            qp.to_rtr(&a.rtr)?;
            qp.to_rts(&a.rts)?;
        }
        Ok(())
    };
    let peers = match &o.server {
        Some(host) => {
            let addr = if host.contains(':') {
                host.clone()
            } else {
                format!("{host}:{}", o.port)
            };
            let mut s = exchange::connect(&addr, PEER_TIMEOUT)?;
            // The whole exchange within the timeout, however the peer spaces its bytes.
            let by = Instant::now() + PEER_TIMEOUT;
            send_records(&mut s, &mine, by)?;
            let peers = recv_records(&mut s, n, &mine, by)?;
            exchange::write_by(&mut s, DONE, by, "sending done")?;
            connect(&peers)?;
            peers
        }
        None => {
            let l = exchange::listen(o.port)?;
            let mut s = exchange::accept(&l, PEER_TIMEOUT)?;
            let by = Instant::now() + PEER_TIMEOUT;
            let peers = recv_records(&mut s, n, &mine, by)?;
            connect(&peers)?;
            send_records(&mut s, &mine, by)?;
            let mut done = [0u8; DONE.len()];
            exchange::read_by(&mut s, &mut done, by, "reading done")?;
            if &done != DONE {
                return Err(format!("the peer sent {done:?}, not \"done\"").into());
            }
            peers
        }
    };
    for p in &peers {
        println!(
            "  remote address: LID {:#06x}, QPN {:#08x}, PSN {:#08x}, GID {}",
            p.lid, p.qpn, p.psn, p.gid
        );
    }
    let sqs: Vec<SendQueue> = qps
        .iter()
        .map(|q| q.send_queue())
        .collect::<zverbs::Result<_>>()?;
    let poller = cq.poller()?;
    let qpns: Vec<u32> = qps.iter().map(|q| q.qpn()).collect();
    let start = session(sqs, rq, poller, (&sbuf, &rbuf), &qpns, o)?;
    rc::report(start, o, o.iters);
    println!(
        "{} messages received through the SRQ, every byte checked (0x00)",
        o.iters
    );
    Ok(())
}

/// Sends this side's records, then zero records up to [`RECORDS`], by `by`.
fn send_records(s: &mut TcpStream, mine: &[Endpoint], by: Instant) -> Res<()> {
    for i in 0..RECORDS {
        let ep = mine.get(i).copied().unwrap_or_default();
        exchange::write_by(
            s,
            &exchange::encode(&ep),
            by,
            "sending this side's addresses",
        )?;
    }
    Ok(())
}

/// Reads [`RECORDS`] records by `by`, keeping the first `n`; none may be one of `mine` (a
/// peer that sends this side's records back).
fn recv_records(s: &mut TcpStream, n: usize, mine: &[Endpoint], by: Instant) -> Res<Vec<Endpoint>> {
    let mut out = Vec::with_capacity(n);
    for i in 0..RECORDS {
        let mut msg = [0u8; MSG_LEN];
        exchange::read_by(s, &mut msg, by, "reading the peer's addresses")?;
        if i < n {
            let ep = exchange::decode(&msg)?;
            for me in mine {
                exchange::refuse_own(me, &ep)?;
            }
            out.push(ep);
        }
    }
    Ok(out)
}

/// Posts the receive of buffer slot `slot` to the SRQ.
fn post_recv(rq: &mut impl PostRecv, buf: &MrBuf, size: usize, slot: usize) -> Res<()> {
    let sgl = [buf.sge(slot * size..(slot + 1) * size)?];
    // SAFETY: the slot is registered memory of `buf`, which outlives the SRQ's receives (the
    // queues are dropped before it); this side reads the slot only after the receive's
    // completion, and posts it again only after that read.
    unsafe { rq.post(&RecvWr::new(RECV_TAG | slot as u64, &sgl)) }?;
    Ok(())
}

fn send(sq: &mut SendQueue, buf: &MrBuf, size: usize) -> Res<()> {
    let sgl = [buf.sge(0..size)?];
    // SAFETY: the send buffer is registered, never written after set-up, and outlives the
    // queues.
    unsafe { sq.post(&SendWr::send(SEND_WRID, &sgl).signaled()) }?;
    Ok(())
}

/// The ping-pong, with the SRQ's receives posted; returns when timing started.
fn session<R: PostRecv, C: PollCq>(
    mut sqs: Vec<SendQueue>,
    mut rq: R,
    mut cq: C,
    (sbuf, rbuf): (&MrBuf, &MrBuf),
    qpns: &[u32],
    o: &Opts,
) -> Res<Instant> {
    const RECV: u8 = 1;
    const SENT: u8 = 2;
    let client = o.server.is_some();
    let start = Instant::now();
    let mut pending = vec![RECV; qpns.len()];
    // Sends posted: never more than `iters`. Counting completed sends alone (as the verbs
    // example does) lets each side post up to one more per QP than the other expects, and one
    // that arrives after the other side has destroyed its QPs fails here with "retry counter
    // exceeded" (at once on a device that answers for a gone QP, after the retries on one
    // that drops the request).
    let mut posted = 0u64;
    if client {
        for (sq, p) in sqs.iter_mut().zip(&mut pending).take(o.iters as usize) {
            send(sq, sbuf, o.size)?;
            posted += 1;
            *p = RECV | SENT;
        }
    }
    let (mut scnt, mut rcnt) = (0u64, 0u64);
    let mut wc = vec![Completion::EMPTY; (o.rx_depth + o.num_qp) as usize];
    let mut damage = Damage::default();
    let mut idle = rc::Idle::new();
    while rcnt < o.iters || scnt < o.iters {
        let got = cq.poll(&mut wc);
        idle.note(got, rcnt, o.iters)?;
        for c in &wc[..got] {
            rc::check_status(c)?;
            let i = qpns
                .iter()
                .position(|&q| q == c.qp_num)
                .ok_or_else(|| format!("Couldn't find QPN {:06x}", c.qp_num))?;
            if c.wr_id == SEND_WRID {
                scnt += 1;
                pending[i] &= !SENT;
            } else if c.wr_id & RECV_TAG != 0 {
                let slot = (c.wr_id & !RECV_TAG) as usize;
                rc::check_at(rbuf, slot * o.size, o.size, 0, rcnt, &mut damage)?;
                post_recv(&mut rq, rbuf, o.size, slot)?;
                rcnt += 1;
                pending[i] &= !RECV;
            } else {
                return Err(format!("Completion for unknown wr_id {}", c.wr_id).into());
            }
            if posted < o.iters && pending[i] == 0 {
                send(&mut sqs[i], sbuf, o.size)?;
                posted += 1;
                pending[i] = RECV | SENT;
            }
        }
    }
    rc::fail_on(&damage, o)?;
    Ok(start)
}
