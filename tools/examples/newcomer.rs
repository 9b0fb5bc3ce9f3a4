//! What a newcomer writes first: two RC queue pairs of one process, on the software mlx5
//! device, connected to each other; a WRITE with immediate, a SEND into a posted receive, a
//! READ, a fetch-and-add, a SEND into a shared receive queue (SRQ), a prepared WRITE posted
//! with what changes, a prepared WRITE and a SEND over the dynamically connected transport
//! (DC), a prepared SEND over unreliable datagrams (UD), then N timed round trips (a WRITE
//! with immediate each way). No `unsafe` anywhere (the crate attribute below makes one a build
//! error).
//!
//! ```text
//! cargo run -p zverbs-tools --example newcomer -- [round trips]
//! ```
//!
//! Every call that can fail returns a `zverbs::Error`, so `?` carries set-up, posting, waiting
//! and failed completions alike; every post rings; every wait has a deadline. docs/usage.md
//! compares its length with the same program written against the earlier API.

#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

use zverbs::dc::DcAddr;
use zverbs::{AccessFlags, AhAttr, Changes, ContextOptions, Registered, SendFlags, UdAttr};

fn main() -> zverbs::Result<()> {
    let rounds: u32 = match std::env::args_os().nth(1) {
        Some(n) => n.to_str().and_then(|n| n.parse().ok()).ok_or_else(|| {
            let n = n.to_string_lossy();
            zverbs::Error::InvalidArgument(format!("`{n}`: round trips, 0 to {}", u32::MAX))
        })?,
        None => 1000,
    };
    let sig = SendFlags::SIGNALED;

    // Set-up: one device, one protection domain, a CQ, a QP and a buffer for each side.
    let ctx = zverbs::open_device(Some("zverbs_sim0"), &ContextOptions::default())?;
    let pd = ctx.alloc_pd()?;
    // A's CQ serves the QPs of steps 5, 7 and 8 too: room for all of their requests.
    let (cq_a, cq_b) = (
        ctx.cq_builder().cqe(2048).build()?,
        ctx.cq_builder().build()?,
    );
    let a = pd.qp_builder(&cq_a, &cq_a).build()?;
    let b = pd.qp_builder(&cq_b, &cq_b).build()?;
    let buf_a = pd.alloc_buf(4096, AccessFlags::ALL)?;
    let buf_b = pd.alloc_buf(4096, AccessFlags::ALL)?;

    // Connect each QP to the other (INIT, RTR, RTS), then take its queues and its CQ's poller.
    // Across processes: send `a.endpoint()?` to the peer and `a.connect(&its_endpoint)?`.
    zverbs::connect_pair(&a, &b)?;
    let mut qa = a.queues(&cq_a)?;
    let mut qb = b.queues(&cq_b)?;
    let deadline = || Instant::now() + Duration::from_secs(5);

    // 1. WRITE with immediate: the bytes land in B's buffer, the immediate in B's receive.
    qb.rq.post(1, buf_b.slice(1024..2048)?)?;
    buf_a.write(0, b"hello, B")?;
    qa.sq
        .write_imm(2, buf_a.slice(0..8)?, buf_b.remote(0)?, 42, sig)?;
    qa.cq.wait(1, deadline())?[0].ok()?;
    let imm = qb.cq.wait(1, deadline())?[0].ok()?.imm();
    let mut got = [0; 8];
    buf_b.read(0, &mut got)?;
    println!(
        "write_imm: {:?}, immediate {imm:?}",
        String::from_utf8_lossy(&got)
    );

    // 2. SEND into a receive B posted.
    qb.rq.post(3, buf_b.slice(1024..2048)?)?;
    buf_a.write(100, b"a message")?;
    qa.sq.send(4, buf_a.slice(100..109)?, sig)?;
    qa.cq.wait(1, deadline())?[0].ok()?;
    let len = qb.cq.wait(1, deadline())?[0].ok()?.byte_len;
    let mut got = vec![0; len as usize];
    buf_b.read(1024, &mut got)?;
    println!("send/recv: {:?}", String::from_utf8_lossy(&got));

    // 3. READ B's bytes into A's buffer.
    buf_b.write(2048, b"read me")?;
    qa.sq
        .read(5, buf_a.slice(2048..2055)?, buf_b.remote(2048)?, sig)?;
    qa.cq.wait(1, deadline())?[0].ok()?;
    let mut got = [0; 7];
    buf_a.read(2048, &mut got)?;
    println!("read: {:?}", String::from_utf8_lossy(&got));

    // 4. Fetch-and-add on a counter in B's buffer; the old value lands in A's.
    buf_b.store_u64(3000, 40)?;
    qa.sq
        .fetch_add(6, buf_a.slice(3000..3008)?, buf_b.remote(3000)?, 2, sig)?;
    qa.cq.wait(1, deadline())?[0].ok()?;
    println!(
        "fetch_add: old {}, new {}",
        buf_a.load_u64(3000)?,
        buf_b.load_u64(3000)?
    );

    // 5. SEND into a shared receive queue: a third QP takes its receives from an SRQ, whose
    // queue any number of QPs share.
    let cq_s = ctx.cq_builder().build()?;
    let srq = pd.create_srq(16, 1)?;
    let s = pd.qp_builder(&cq_s, &cq_s).srq(&srq).build()?;
    let c = pd.qp_builder(&cq_a, &cq_a).build()?;
    zverbs::connect_pair(&c, &s)?;
    let mut srq_q = srq.queue()?;
    let mut s_cq = cq_s.poller()?;
    let mut c_sq = c.send_queue()?;
    srq_q.post(10, buf_b.slice(1024..2048)?)?;
    buf_a.write(200, b"shared")?;
    c_sq.send(11, buf_a.slice(200..206)?, sig)?;
    qa.cq.wait(1, deadline())?[0].ok()?;
    let got = *s_cq.wait(1, deadline())?[0].ok()?;
    println!("srq: {} bytes into receive {}", got.byte_len, got.wr_id);

    // 6. A prepared WRITE: checked and built once, each post gives only what changes.
    buf_a.write(400, b"prepared")?;
    let prepared = qa
        .sq
        .prepare_write(buf_a.slice(400..408)?, buf_b.remote(400)?, sig)?;
    for i in 0..4u32 {
        let c = Changes::new(12)
            .local(2 * i, 2)
            .remote_offset(u64::from(2 * i));
        qa.sq.post_prepared(&prepared, c)?;
        qa.cq.wait(1, deadline())?[0].ok()?;
    }
    let mut got = [0; 8];
    buf_b.read(400, &mut got)?;
    println!("prepared: {:?}", String::from_utf8_lossy(&got));

    // 7. DC: one initiator reaches any target, each request naming its own (a prepared one
    // carries it). A target has an access key and an SRQ; its address travels as bytes.
    let dct = pd
        .qp_builder(&cq_s, &cq_s)
        .srq(&srq)
        .dc_target(0x5eed)
        .build()?;
    dct.ready_dc()?;
    let wire = dct.dc_addr()?.to_bytes();
    let dci = pd.qp_builder(&cq_a, &cq_a).dc_initiator().build()?;
    dci.ready_dc()?;
    let peer = pd.dc_peer(&DcAddr::from_bytes(&wire)?)?;
    let mut dc_sq = dci.send_queue()?;
    buf_a.write(500, b"over DC")?;
    let dc_write =
        dc_sq
            .to(&peer)
            .prepare_write(buf_a.slice(500..507)?, buf_b.remote(500)?, sig)?;
    dc_sq.post_prepared(&dc_write, Changes::new(13))?;
    qa.cq.wait(1, deadline())?[0].ok()?;
    srq_q.post(14, buf_b.slice(2048..3000)?)?;
    dc_sq.to(&peer).send(15, buf_a.slice(500..507)?, sig)?;
    qa.cq.wait(1, deadline())?[0].ok()?;
    let got = *s_cq.wait(1, deadline())?[0].ok()?;
    let mut dc_got = [0; 7];
    buf_b.read(500, &mut dc_got)?;
    println!(
        "dc: write {:?}, send of {} bytes into the target's SRQ",
        String::from_utf8_lossy(&dc_got),
        got.byte_len
    );

    // 8. UD: datagram QPs need no connection; each SEND names its destination (an address
    // handle to the peer's port, the peer's QP number and Q_Key), here prepared once.
    let cq_u = ctx.cq_builder().build()?;
    let ua = pd.qp_builder(&cq_a, &cq_a).ud().build()?;
    let ub = pd.qp_builder(&cq_u, &cq_u).ud().build()?;
    ua.ready_ud(&UdAttr::new(0x1111))?;
    ub.ready_ud(&UdAttr::new(0x1111))?;
    let port = ctx.active_port()?;
    let lid = ctx.port(port)?.lid;
    let ah = pd.create_ah(&AhAttr {
        dlid: lid,
        port,
        ..AhAttr::default()
    })?;
    let to_ub = ah.target(ub.qpn(), 0x1111);
    let (mut ua_sq, mut ub_q) = (ua.send_queue()?, ub.queues(&cq_u)?);
    buf_a.write(600, b"datagram")?;
    let datagram = ua_sq.prepare_send_to(&to_ub, buf_a.slice(600..608)?, sig)?;
    let mut parts = Vec::new();
    for i in 0..2u32 {
        // A UD receive starts with 40 bytes for the GRH; the datagram follows.
        ub_q.rq.post(16, buf_b.slice(3072..4096)?)?;
        ua_sq.post_prepared(&datagram, Changes::new(17).local(4 * i, 4))?;
        qa.cq.wait(1, deadline())?[0].ok()?;
        let len = ub_q.cq.wait(1, deadline())?[0].ok()?.byte_len - 40;
        let mut got = vec![0; len as usize];
        buf_b.read(3072 + 40, &mut got)?;
        parts.push(String::from_utf8_lossy(&got).into_owned());
    }
    println!("ud: {parts:?}, one prepared SEND posted twice");

    // 9. Round trips: A writes with immediate, B answers the same way.
    qa.rq.post(7, buf_a.slice(1024..2048)?)?;
    qb.rq.post(7, buf_b.slice(1024..2048)?)?;
    let t0 = Instant::now();
    for i in 0..rounds {
        let end = deadline();
        qa.sq
            .write_imm(8, buf_a.slice(0..8)?, buf_b.remote(0)?, i, sig)?;
        qb.cq.wait(1, end)?[0].ok()?;
        qb.rq.post(7, buf_b.slice(1024..2048)?)?;
        qb.sq
            .write_imm(9, buf_b.slice(0..8)?, buf_a.remote(0)?, i, sig)?;
        qa.cq
            .wait(2, end)?
            .iter()
            .try_for_each(|c| c.ok().map(drop))?;
        qa.rq.post(7, buf_a.slice(1024..2048)?)?;
        qb.cq.wait(1, end)?[0].ok()?;
    }
    let per = t0.elapsed() / rounds.max(1);
    println!("{rounds} round trips: {per:?} each (the software device: not a NIC's latency)");
    Ok(())
}
