//! The control path on a real device: listing and opening devices, querying the device, its
//! port and GID table, protection domains, memory regions (library-owned and caller-owned),
//! completion queues, queue pairs and their state transitions, and the errors the device and
//! the library give for what cannot be done.
//!
//! Device tests: they return at once unless `ZVERBS_TEST_DEVICE` names a device
//! (docs/testing.md).

mod device;

use device::{Caps, Side, bytes, env, open, pattern, serial, wait};
use zverbs::connect::Endpoint;
use zverbs::{
    AccessFlags, BackendKind, BackendRequest, ConnectAttr, Error, GidType, LinkLayer, PortState,
    PostSend, Registered, SendFlags, SendWr, WcStatus,
};

#[test]
fn devices_are_listed_opened_and_queried() {
    let _serial = serial();
    let Some(env) = env() else { return };
    if device::is_software(
        &env.device,
        "the tests of rdma-core's control path need a kernel device",
    ) {
        return;
    }
    let list = zverbs::devices().expect("ibv_get_device_list");
    let names: Vec<&str> = list.iter().map(|d| d.name()).collect();
    let mut wanted = vec![env.device.clone()];
    if let Some((a, b)) = &env.pair {
        wanted.extend([a.clone(), b.clone()]);
    }
    for w in &wanted {
        assert!(names.contains(&w.as_str()), "{w} is not among {names:?}");
    }
    assert_eq!(
        list.last().is_some_and(|d| d.is_software()),
        cfg!(feature = "sim"),
        "the software device is listed last (with the `sim` feature only): {names:?}"
    );
    for w in &wanted {
        let dev = list.iter().find(|d| d.name() == w).unwrap();
        assert!(!dev.is_software());
        let ctx = dev.open().unwrap_or_else(|e| panic!("open {w}: {e}"));
        assert_eq!(ctx.name(), w);
        let attr = ctx.attr().expect("ibv_query_device");
        println!("{w}: {attr:?}");
        assert_eq!(
            attr.node_guid,
            dev.guid(),
            "the listed GUID is the device's"
        );
        assert!(attr.phys_port_cnt >= 1);
        assert!(attr.max_qp >= 2 && attr.max_qp_wr >= 16 && attr.max_sge >= 1);
        assert!(attr.max_cq >= 2 && attr.max_cqe >= 64 && attr.max_mr_size >= 1 << 20);

        let port = ctx.active_port().expect("an active port");
        let p = ctx.port(port).expect("ibv_query_port");
        println!("{w} port {port}: {p:?}");
        assert_eq!(p.state, PortState::Active);
        assert!(p.active_mtu <= p.max_mtu);
        assert!(p.gid_tbl_len > env.gid_index, "{p:?}");
        if p.link_layer == LinkLayer::Ethernet {
            assert_eq!(p.lid, 0, "RoCE has no LIDs");
        }
        let gids = ctx.gids(port).expect("the GID table");
        println!("{w} GIDs: {gids:?}");
        let entry = ctx.gid(port, env.gid_index).expect("ibv_query_gid_ex");
        assert!(
            gids.contains(&entry),
            "{entry:?} is among the non-empty GIDs"
        );
        assert_eq!((entry.index, entry.port), (env.gid_index, port));
        let auto = ctx
            .address(port, None)
            .expect("an address without a GID index");
        let given = ctx.address(port, Some(env.gid_index)).unwrap();
        assert_eq!(given.gid, entry.gid);
        assert_eq!(given.active_mtu, p.active_mtu);
        if p.link_layer == LinkLayer::Ethernet {
            assert!(
                gids.iter()
                    .any(|g| Some(g.index) == auto.gid_index && g.gid_type == GidType::RoceV2),
                "RoCE picks a RoCE v2 GID by itself: {auto:?}"
            );
        }
        // The address the environment gives is the GID the tests use.
        let addr = if *w == env.device {
            env.addr
        } else {
            env.pair_addrs.map(|(a, b)| {
                if Some(w) == env.pair.as_ref().map(|p| &p.0) {
                    a
                } else {
                    b
                }
            })
        };
        if let Some(addr) = addr {
            assert_eq!(entry.gid.to_ipv4(), Some(addr), "{w}: GID {entry:?}");
            assert_eq!(entry.gid_type, GidType::RoceV2);
        }
        match ctx.direct_support() {
            Ok(why) => println!("{w}: the direct backend drives it: {why}"),
            Err(why) => {
                println!("{w}: the fallback drives it: {why}");
                assert!(
                    !ctx.atomics_big_endian(),
                    "only some ConnectX use big-endian atomics"
                );
            }
        }
    }
    match zverbs::open_device(Some("no_such_device0"), &Default::default()) {
        Err(Error::DeviceNotFound { name, available }) => {
            assert_eq!(name, "no_such_device0");
            assert!(available.contains(&env.device), "{available:?}");
        }
        other => panic!("opening a missing device: {other:?}"),
    }
}

#[test]
fn pd_mr_cq_and_qp_are_created_and_connected_step_by_step() {
    let _serial = serial();
    let Some(env) = env() else { return };
    if device::is_software(
        &env.device,
        "the tests of rdma-core's control path need a kernel device",
    ) {
        return;
    }
    let ctx = open(&env.device);
    let pd = ctx.alloc_pd().expect("ibv_alloc_pd");

    // A library-owned buffer: rounded to pages, zeroed, registered with what was asked.
    let buf = pd.alloc_buf(100, AccessFlags::ALL).expect("ibv_reg_mr");
    assert_eq!(buf.len(), 4096);
    assert_eq!(buf.access(), AccessFlags::ALL);
    assert!(bytes(&buf, 0, 4096).iter().all(|&b| b == 0));
    let ro = pd
        .alloc_buf(4096, AccessFlags::REMOTE_READ)
        .expect("a read-only registration");
    assert_ne!(ro.lkey(), buf.lkey());

    // Memory the caller owns.
    let mut mine = pattern(40, 8192).into_boxed_slice();
    // SAFETY: `mine` outlives the registration (dropped after `mr`, below) and is neither read
    // nor written by this code while a request may use it (it is read after the completion).
    let mr = unsafe { pd.register(mine.as_mut_ptr(), mine.len(), AccessFlags::ALL) }
        .expect("ibv_reg_mr of caller memory");
    assert_eq!((mr.addr(), mr.len()), (mine.as_ptr() as u64, 8192));

    // CQs and QPs get at least what they ask for.
    let cq = ctx.cq_builder().cqe(100).build().expect("ibv_create_cq");
    assert!(cq.cqe() >= 100, "{}", cq.cqe());
    let peer_cq = ctx.cq_builder().build().unwrap();
    let caps = Caps::default();
    let qp = pd
        .qp_builder(&cq, &cq)
        .max_send_wr(caps.send)
        .max_recv_wr(caps.recv)
        .max_send_sge(caps.sge)
        .max_inline_data(caps.inline)
        .build()
        .expect("ibv_create_qp");
    let got = qp.caps();
    assert!(
        got.max_send_wr >= caps.send
            && got.max_recv_wr >= caps.recv
            && got.max_send_sge >= caps.sge
            && got.max_inline_data >= caps.inline,
        "{got:?}"
    );
    let peer = pd.qp_builder(&peer_cq, &peer_cq).build().unwrap();
    assert_ne!(qp.qpn(), peer.qpn());
    assert_eq!(qp.backend().kind, cq.backend().kind);
    if ctx.direct_support().is_err() {
        assert_eq!(qp.backend().kind, BackendKind::Verbs, "{}", qp.backend());
        // Asking for the direct backend where it cannot be had is an error, not a fallback.
        let e = ctx.cq_builder().backend(BackendRequest::Direct).build();
        assert!(matches!(e, Err(Error::Backend { .. })), "{e:?}");
    }

    // RESET -> INIT -> RTR -> RTS, one step at a time, to a peer on the same device.
    let local = device::address(&ctx, env.gid_index);
    let ends = [&qp, &peer].map(|q| Endpoint {
        lid: local.lid,
        qpn: q.qpn(),
        psn: q.psn(),
        gid: local.gid,
    });
    let a = ConnectAttr::new(local.port, ends[0].psn, &ends[1], local.gid_index);
    let b = ConnectAttr::new(local.port, ends[1].psn, &ends[0], local.gid_index);
    // RTR before INIT is refused by the device.
    let e = qp.to_rtr(&a.rtr);
    assert!(matches!(e, Err(Error::Verbs { .. })), "{e:?}");
    qp.to_init(&a.init).expect("INIT");
    qp.to_rtr(&a.rtr).expect("RTR");
    qp.to_rts(&a.rts).expect("RTS");
    peer.connect_with(&b).expect("the peer");

    // A WRITE from the caller's memory into the buffer, and a READ back into it.
    let mut q = qp.send_queue().unwrap();
    let mut poller = cq.poller().unwrap();
    let sgl = [mr.sge(1000..3000).unwrap()];
    // SAFETY: the entry lies in `mine`'s registration, untouched until the completion.
    unsafe { q.post(&SendWr::write(1, &sgl, buf.remote(0).unwrap()).signaled()) }.unwrap();
    buf.write(3000, b"read into caller memory").unwrap();
    let back = [mr.sge(0..23).unwrap()];
    // SAFETY: as above; `mine[0..23]` is written by the device and read after the completion.
    unsafe { q.post(&SendWr::read(2, &back, buf.remote(3000).unwrap()).signaled()) }.unwrap();
    let w = wait(&mut poller, 2);
    assert!(w.iter().all(|c| c.status == WcStatus::Success), "{w:?}");
    assert_eq!(bytes(&buf, 0, 2000), pattern(40, 8192)[1000..3000]);
    drop((q, poller, qp, peer, mr));
    assert_eq!(&mine[..23], b"read into caller memory");

    // Writing into a buffer registered without LOCAL_WRITE is refused before it is posted.
    let side = Side::new(&ctx, env.gid_index, caps);
    side.qp.connect_with(&side.attr(&side.endpoint())).unwrap();
    let mut sq = side.qp.send_queue().unwrap();
    let e = sq.read(
        1,
        ro.slice(0..8).unwrap(),
        buf.remote(0).unwrap(),
        SendFlags::SIGNALED,
    );
    assert_eq!(e, Err(zverbs::safe::SafePostError::NotWritable));
}

#[test]
fn misuse_is_refused_with_a_clear_error() {
    let _serial = serial();
    let Some(env) = env() else { return };
    if device::is_software(
        &env.device,
        "the tests of rdma-core's control path need a kernel device",
    ) {
        return;
    }
    let ctx = open(&env.device);
    let other = open(&env.device);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.cq_builder().build().unwrap();
    let foreign = other.cq_builder().build().unwrap();
    let e = pd.qp_builder(&foreign, &foreign).build();
    assert!(
        matches!(e, Err(Error::InvalidArgument(_))),
        "a CQ of another context: {e:?}"
    );
    let e = pd.qp_builder(&cq, &cq).max_recv_wr(0).build();
    assert!(matches!(e, Err(Error::InvalidArgument(_))), "{e:?}");
    let too_deep = ctx.attr().unwrap().max_qp_wr.saturating_mul(4);
    let e = pd.qp_builder(&cq, &cq).max_send_wr(too_deep).build();
    assert!(
        matches!(e, Err(Error::Verbs { verb, .. }) if verb.contains("create_qp")),
        "a deeper queue than the device allows: {e:?}"
    );
    let qp = pd.qp_builder(&cq, &cq).build().unwrap();
    // No send queue before RTS: a post there would never be executed.
    let e = qp.send_queue();
    assert!(matches!(e, Err(Error::NotReady { .. })), "{e:?}");
    let local = device::address(&ctx, env.gid_index);
    let me = Endpoint {
        lid: local.lid,
        qpn: qp.qpn(),
        psn: qp.psn(),
        gid: local.gid,
    };
    qp.connect_with(&ConnectAttr::new(local.port, me.psn, &me, local.gid_index))
        .unwrap();
    let _sq = qp.send_queue().unwrap();
    assert!(matches!(qp.send_queue(), Err(Error::AlreadyTaken(_))));
    let _p = cq.poller().unwrap();
    assert!(matches!(cq.poller(), Err(Error::AlreadyTaken(_))));
    // A QP on a CQ whose poller is out joins it (tests/device_members.rs).
    let e = pd.qp_builder(&cq, &cq).build();
    assert!(e.is_ok(), "a QP on a CQ whose poller is out: {e:?}");
    // A GID index past the table.
    let port = ctx.active_port().unwrap();
    let len = ctx.port(port).unwrap().gid_tbl_len;
    let e = ctx.gid(port, len + 10);
    assert!(e.is_err(), "{e:?}");
}

/// Completion timestamps where the device has them, a typed refusal where it has not (rxe:
/// its provider rejects the flag and the kernel reports a timestamp mask of 0).
#[test]
fn completion_timestamps_or_a_typed_refusal() {
    let _serial = serial();
    let Some(env) = env() else { return };
    let ctx = open(&env.device);
    match ctx.clock() {
        Ok(clock) => {
            assert!(clock.khz() > 0 && clock.mask() > 0);
            let cq = ctx.cq_builder().timestamps(true).build().unwrap();
            assert!(cq.has_timestamps());
            println!("{}: device clock {} kHz", env.device, clock.khz());
        }
        Err(e) => {
            assert!(matches!(e, zverbs::Error::NoTimestamps { .. }), "{e}");
            let e = ctx.cq_builder().timestamps(true).build().unwrap_err();
            assert!(matches!(e, zverbs::Error::NoTimestamps { .. }), "{e}");
            println!("{}: {e}", env.device);
        }
    }
    // Without timestamps, as ever.
    assert!(!ctx.cq_builder().build().unwrap().has_timestamps());
}

/// Compressed CQEs where the device compresses them and the direct backend polls them, a
/// typed refusal elsewhere (rxe: the fallback's `ibv_poll_cq` could not expand them).
#[test]
fn compressed_cqes_or_a_typed_refusal() {
    let _serial = serial();
    let Some(env) = env() else { return };
    let ctx = open(&env.device);
    match ctx
        .cq_builder()
        .compressed(zverbs::MiniCqeFormat::Hash)
        .build()
    {
        Ok(cq) => {
            assert_eq!(cq.backend().kind, zverbs::BackendKind::Direct);
            println!("{}: {}", env.device, cq.backend().reason);
        }
        Err(e) => {
            assert!(matches!(e, zverbs::Error::NoCqeCompression { .. }), "{e}");
            println!("{}: {e}", env.device);
        }
    }
}

/// A device without raw packet QPs (rxe: no raw packet capability, no checksum offload, no
/// flow steering; a ConnectX port whose link layer is InfiniBand) answers a raw packet QP,
/// an RSS QP and its capability query with `Error::NoRawPacket`, before anything is created:
/// the CQ holds no entries for a QP afterwards.
#[test]
fn a_device_without_raw_packet_qps_says_so() {
    let _serial = serial();
    let Some(env) = env() else { return };
    let ctx = open(&env.device);
    let port = ctx.active_port().expect("an active port");
    let link = ctx.port(port).expect("ibv_query_port").link_layer;
    let caps = ctx.raw_caps(port);
    println!("{} port {port} ({link:?}): {caps:?}", env.device);
    let has_none = env.device.starts_with("rxe") || link != LinkLayer::Ethernet;
    if !has_none {
        println!("skipped: {} has raw packet QPs on port {port}", env.device);
        return;
    }
    assert!(matches!(caps, Err(Error::NoRawPacket { .. })), "{caps:?}");
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.cq_builder().cqe(64).build().unwrap();
    let before = cq.entries_left();
    let e = pd
        .create_raw_qp(port, &cq, &cq, zverbs::QpCaps::default())
        .unwrap_err();
    assert!(matches!(e, Error::NoRawPacket { .. }), "{e}");
    println!("{e}");
    assert_eq!(cq.entries_left(), before, "nothing was created");
    let e = pd
        .create_wq(&cq, 8, zverbs::WqShape::Ordinary { max_sge: 1 })
        .and_then(|w| pd.create_rss_qp(port, &[&w], &zverbs::RxHash::default()));
    assert!(e.is_err(), "{e:?}");
}
