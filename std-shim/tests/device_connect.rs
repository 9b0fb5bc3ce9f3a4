//! RC connections made the two ways the crate offers, on a real device: the out-of-band TCP
//! exchange (`ibv_rc_pingpong`'s messages plus the buffer record) and the RDMA connection
//! manager (librdmacm, which picks the device from the address). Each side runs on its own
//! thread as two processes would; once connected, each side writes into the buffer the other
//! advertised and sends it a message.
//!
//! Device tests: they return at once unless `ZVERBS_TEST_DEVICE` names a device
//! (docs/testing.md); the rdma_cm tests also need `ZVERBS_TEST_ADDR` (one device) or
//! `ZVERBS_TEST_PAIR_ADDRS` (the pair).

// They connect (or join a multicast group) through rdma_cm.
#![cfg(feature = "rdma_cm")]

mod device;

use std::net::{IpAddr, SocketAddr};
use std::thread;
use std::time::Duration;

use device::{Caps, Link, Side, bytes, env, open, pattern, wait};
use zverbs::connect::RemoteRegion;
use zverbs::connect::cm::{self, CmClient, CmListener};
use zverbs::connect::exchange::{self, Hello, Wire};
use zverbs::{Registered, SendFlags, WcOpcode, WcStatus};

const TIMEOUT: Duration = Duration::from_secs(30);

on_both_links!(tcp_exchange, rdma_cm);

fn region(s: &Side) -> RemoteRegion {
    RemoteRegion {
        addr: s.buf.addr(),
        rkey: s.buf.rkey(),
        len: s.buf.len() as u64,
    }
}

/// Over the TCP exchange: the server listens on an ephemeral port of the loopback, each side
/// sends its address and buffer, the server connects its QP before answering.
fn tcp_exchange(link: Link) {
    let Some(env) = env() else { return };
    let Some((da, db)) = env.devices(link) else {
        return;
    };
    let gid = env.gid_index;
    let listener = exchange::listen(0).expect("a TCP port");
    let port = listener.local_addr().unwrap().port();
    let server = thread::spawn(move || {
        let s = Side::new(&open(&da), gid, Caps::default());
        let mut stream = exchange::accept(&listener, TIMEOUT).expect("accept");
        let hello = Hello {
            endpoint: s.endpoint(),
            region: Some(region(&s)),
            app: "device_connect".into(),
        };
        let peer = exchange::server(&mut stream, &hello, Wire::Zverbs, |p| {
            assert_eq!(p.app, "device_connect");
            s.qp.connect_with(&s.attr(&p.endpoint))
        })
        .expect("the server's exchange");
        (s, peer)
    });
    let c = Side::new(&open(&db), gid, Caps::default());
    let mut stream =
        exchange::connect(&format!("127.0.0.1:{port}"), TIMEOUT).expect("connect to the server");
    let hello = Hello {
        endpoint: c.endpoint(),
        region: Some(region(&c)),
        app: "device_connect".into(),
    };
    let peer = exchange::client(&mut stream, &hello, Wire::Zverbs).expect("the client's exchange");
    c.qp.connect_with(&c.attr(&peer.endpoint)).expect("connect");
    let (s, s_peer) = server.join().expect("the server thread");
    assert_eq!(peer.endpoint, s.endpoint());
    assert_eq!(s_peer.endpoint, c.endpoint());
    assert_eq!(peer.region, Some(region(&s)));
    traffic(&c, peer.region.unwrap(), &s, s_peer.region.unwrap());
}

/// Through rdma_cm: the server listens on its device's address, the client resolves it from
/// its own address (across the pair: from the other device), so the route picks the devices.
fn rdma_cm(link: Link) {
    let Some(env) = env() else { return };
    let Some((da, db)) = env.devices(link) else {
        return;
    };
    let Some((aa, ba)) = env.addrs(link) else {
        println!("skipped: no address for rdma_cm (ZVERBS_TEST_ADDR / ZVERBS_TEST_PAIR_ADDRS)");
        return;
    };
    let gid = env.gid_index;
    let at = SocketAddr::new(IpAddr::V4(aa), 20000 + (std::process::id() % 20000) as u16);
    let listener = CmListener::bind(at, TIMEOUT).expect("rdma_bind_addr / rdma_listen");
    let server = thread::spawn(move || {
        let req = listener.next_request().expect("a connect request");
        assert_eq!(
            req.context().name(),
            da,
            "the request arrives on the server's device"
        );
        let s = Side::new(req.context(), gid, Caps::default());
        let theirs = cm::decode_region(req.private_data()).expect("the client's buffer");
        let conn = req
            .accept(&s.qp, &cm::encode_region(&region(&s)))
            .expect("rdma_accept");
        (s, theirs, conn)
    });
    let client = CmClient::resolve_from(IpAddr::V4(ba), at, TIMEOUT)
        .expect("rdma_resolve_addr / rdma_resolve_route");
    assert_eq!(
        client.context().name(),
        db,
        "the route leaves from the client's device"
    );
    let c = Side::new(client.context(), gid, Caps::default());
    let conn = client
        .connect(&c.qp, &cm::encode_region(&region(&c)))
        .expect("rdma_connect");
    let theirs = cm::decode_region(conn.private_data()).expect("the server's buffer");
    let (s, s_theirs, s_conn) = server.join().expect("the server thread");
    assert_eq!(theirs, region(&s));
    assert_eq!(s_theirs, region(&c));
    traffic(&c, theirs, &s, s_theirs);
    drop((conn, s_conn));
}

/// Each side WRITEs into the other's advertised buffer and SENDs it a message; everything
/// lands.
fn traffic(c: &Side, to_s: RemoteRegion, s: &Side, to_c: RemoteRegion) {
    let (qc, qs) = (c.queues(), s.queues());
    let (mut csq, mut crq, mut ccq) = (qc.sq, qc.rq, qc.cq);
    let (mut ssq, mut srq, mut scq) = (qs.sq, qs.rq, qs.cq);
    crq.post(1, c.buf.slice(32768..36864).unwrap()).unwrap();
    srq.post(2, s.buf.slice(32768..36864).unwrap()).unwrap();
    c.buf.write(0, &pattern(20, 2000)).unwrap();
    s.buf.write(0, &pattern(21, 2000)).unwrap();
    let sig = SendFlags::SIGNALED;
    csq.write(
        3,
        c.buf.slice(0..2000).unwrap(),
        to_s.at(8192).unwrap(),
        sig,
    )
    .unwrap();
    csq.send(4, c.buf.slice(0..100).unwrap(), sig).unwrap();
    ssq.write(
        5,
        s.buf.slice(0..2000).unwrap(),
        to_c.at(8192).unwrap(),
        sig,
    )
    .unwrap();
    ssq.send(6, s.buf.slice(0..100).unwrap(), sig).unwrap();
    for (cq, ids, recv) in [(&mut ccq, [3, 4], 1), (&mut scq, [5, 6], 2)] {
        let mut w = wait(cq, 3);
        w.sort_by_key(|c| c.wr_id);
        assert!(w.iter().all(|c| c.status == WcStatus::Success), "{w:?}");
        assert_eq!(
            w.iter().map(|c| (c.wr_id, c.opcode)).collect::<Vec<_>>(),
            [
                (recv, WcOpcode::Recv),
                (ids[0], WcOpcode::RdmaWrite),
                (ids[1], WcOpcode::Send)
            ]
        );
    }
    assert_eq!(bytes(&s.buf, 8192, 2000), pattern(20, 2000));
    assert_eq!(bytes(&c.buf, 8192, 2000), pattern(21, 2000));
    assert_eq!(bytes(&s.buf, 32768, 100), pattern(20, 100));
    assert_eq!(bytes(&c.buf, 32768, 100), pattern(21, 100));
}
