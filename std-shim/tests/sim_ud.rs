//! UD queue pairs, address handles, multicast groups and shared receive queues on the
//! software device, through the control path.
#![cfg(feature = "sim")]

use zverbs::connect::Endpoint;
use zverbs::{AhAttr, ContextOptions, Error, Gid, QpState, QpType, UdAttr};

/// Shared with the device tests (`device_ud.rs`).
#[path = "device/ud.rs"]
mod ud;

fn ctx() -> zverbs::Context {
    zverbs::open_device(Some(zverbs::SOFTWARE_DEVICE), &ContextOptions::default()).unwrap()
}

#[test]
fn a_ud_qp_is_created_and_readied_without_a_peer() {
    let ctx = ctx();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.cq_builder().cqe(16).build().unwrap();
    // Two QPs on a CQ of 16 (31 entries here): each its share.
    let ud = || pd.qp_builder(&cq, &cq).ud().max_send_wr(4).max_recv_wr(4);
    let qp = ud().build().unwrap();
    assert_eq!(qp.qp_type(), QpType::Ud);
    qp.ready_ud(&UdAttr::new(0x1111_1111)).unwrap();
    assert_eq!(qp.state(), QpState::Rts);
    // The device took it to RTS once: a second INIT is refused there.
    assert!(matches!(
        qp.ready_ud(&UdAttr::new(1)),
        Err(Error::Verbs { .. })
    ));
    // A P_Key index the port has not.
    let qp = ud().build().unwrap();
    let mut a = UdAttr::new(7);
    a.pkey_index = 3;
    assert!(matches!(qp.ready_ud(&a), Err(Error::Verbs { .. })));
}

#[test]
fn an_address_handle_carries_the_devices_address_vector() {
    let ctx = ctx();
    let pd = ctx.alloc_pd().unwrap();
    let dev = zverbs::sim::Device::new();
    let lid_only = AhAttr {
        dlid: 1,
        sl: 3,
        port: 1,
        ..AhAttr::default()
    };
    let ah = pd.create_ah(&lid_only).unwrap();
    let want = dev
        .create_ah(&zverbs::sim::AhAttr {
            dlid: 1,
            sl: 3,
            ..Default::default()
        })
        .unwrap();
    assert_eq!(ah.av(), Some(&want.av));
    assert!(ah.as_raw().is_null());
    // With a GRH, from a peer's endpoint.
    let mut gid = Gid::default();
    gid.0[0] = 0xfe;
    gid.0[1] = 0x80;
    gid.0[15] = 9;
    let peer = Endpoint {
        lid: 1,
        qpn: 5,
        psn: 0,
        gid,
    };
    let ah = pd.create_ah_to(1, &peer, Some(0)).unwrap();
    let want = dev
        .create_ah(&zverbs::sim::AhAttr {
            dlid: 1,
            grh: Some(zverbs::sim::Grh {
                dgid: gid.0,
                sgid_index: 0,
                flow_label: 0,
                hop_limit: 64,
                traffic_class: 0,
            }),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(ah.av(), Some(&want.av));
    assert_ne!(ah.av(), pd.create_ah(&lid_only).unwrap().av());
    // The device checks the address: an SL above 15 is refused.
    let bad = AhAttr { sl: 16, ..lid_only };
    assert!(matches!(pd.create_ah(&bad), Err(Error::Verbs { .. })));
}

#[test]
fn a_ud_qp_attaches_to_and_detaches_from_a_group() {
    let ctx = ctx();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.cq_builder().cqe(16).build().unwrap();
    let qp = pd.qp_builder(&cq, &cq).ud().build().unwrap();
    qp.ready_ud(&UdAttr::new(0x1111_1111)).unwrap();
    let mgid = ud::mgid(1);
    qp.attach_mcast(&mgid, 0xc001).unwrap();
    qp.detach_mcast(&mgid, 0xc001).unwrap();
    // Not attached any more: refused.
    assert!(matches!(
        qp.detach_mcast(&mgid, 0xc001),
        Err(Error::Verbs { .. })
    ));
    // Not a multicast address.
    assert!(matches!(
        qp.attach_mcast(&Gid::default(), 5),
        Err(Error::Verbs { .. })
    ));
}

#[test]
fn qps_take_their_receives_from_a_shared_receive_queue() {
    let ctx = ctx();
    let pd = ctx.alloc_pd().unwrap();
    let srq = pd.create_srq(64, 2).unwrap();
    let layout = srq.layout().expect("a direct SRQ");
    assert_eq!(Some(layout.srqn), srq.srqn());
    assert!(layout.wqe_cnt.is_power_of_two() && layout.wqe_cnt > 64);
    assert_eq!((layout.head, layout.tail), (0, layout.wqe_cnt - 1));
    assert!(srq.caps().0 >= 64 && srq.caps().1 >= 2);
    assert!(srq.as_raw().is_none());
    // Room for the SRQ's receives and the two QPs' signaled sends.
    let cq = ctx.cq_builder().cqe(512).build().unwrap();
    let rc = pd.qp_builder(&cq, &cq).srq(&srq).build().unwrap();
    let ud = pd.qp_builder(&cq, &cq).ud().srq(&srq).build().unwrap();
    for qp in [&rc, &ud] {
        assert_eq!(qp.caps().max_recv_wr, 0);
        assert!(qp.srq().is_some());
    }
    ud.ready_ud(&UdAttr::new(1)).unwrap();
    assert!(matches!(ud.recv_queue(), Err(Error::InvalidArgument(_))));
    srq.arm(8).unwrap();
    srq.arm(0).unwrap();
    assert!(matches!(srq.arm(10_000), Err(Error::InvalidArgument(_))));
    // An SRQ of another PD is refused.
    let other = ctx.alloc_pd().unwrap().create_srq(4, 1).unwrap();
    assert!(matches!(
        pd.qp_builder(&cq, &cq).srq(&other).build(),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        pd.create_srq(0, 1),
        Err(Error::InvalidArgument(_))
    ));
}
