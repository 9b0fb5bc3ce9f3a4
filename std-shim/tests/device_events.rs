//! Asynchronous events of a kernel device, read through `Context::async_events` (libibverbs'
//! `ibv_get_async_event` on the context's async fd): on rxe, taking the device's network
//! interface down gives `PortError` and bringing it up `PortActive` (rxe follows its interface
//! through the kernel's netdev notifier), and `ibv_query_port` follows; an SRQ's armed limit
//! gives `SrqLimitReached` once the posted receives drop below it.
//!
//! Only on a virtual interface (the VM's dummy and veth devices): a test must not take a real
//! link down. Needs `ip` and the right to change links (root in the VM).

mod device;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use zverbs::connect::{Endpoint, random_psn};
use zverbs::{
    AccessFlags, AsyncEvent, ConnectAttr, ContextOptions, PortState, PostRecv, PostSend, RecvWr,
    Registered, SendWr,
};

const WAIT: Duration = Duration::from_secs(20);

/// The network interface under `device`'s port 1 (RoCE), from sysfs.
fn netdev_of(device: &str) -> Option<String> {
    let p = format!("/sys/class/infiniband/{device}/ports/1/gid_attrs/ndevs/0");
    let s = std::fs::read_to_string(p).ok()?;
    Some(s.trim().to_string()).filter(|s| !s.is_empty())
}

/// Whether `netdev` is a virtual interface (dummy, veth), not a NIC's.
fn is_virtual(netdev: &str) -> bool {
    std::fs::canonicalize(Path::new("/sys/class/net").join(netdev))
        .is_ok_and(|p| p.starts_with("/sys/devices/virtual"))
}

fn link(netdev: &str, state: &str) {
    let ok = Command::new("ip")
        .args(["link", "set", "dev", netdev, state])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "ip link set dev {netdev} {state} failed");
}

/// Brings the interface up again however the test ends.
struct Up<'a>(&'a str);

impl Drop for Up<'_> {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["link", "set", "dev", self.0, "up"])
            .status();
    }
}

#[test]
fn the_port_follows_its_network_interface() {
    let Some(env) = device::env() else { return };
    let _g = device::serial();
    if device::is_software(
        &env.device,
        "its port is taken down by SimControl::set_port_state (sim_events.rs)",
    ) {
        return;
    }
    let Some(netdev) = netdev_of(&env.device) else {
        println!(
            "skipped: {} has no network interface (not RoCE)",
            env.device
        );
        return;
    };
    if !is_virtual(&netdev) {
        println!("skipped: {netdev} is a real interface; this test takes its link down");
        return;
    }
    let ctx = zverbs::open_device(Some(&env.device), &ContextOptions::default()).unwrap();
    let mut events = ctx.async_events().unwrap();
    assert_eq!(events.try_next().unwrap(), None);
    assert_eq!(ctx.port(1).unwrap().state, PortState::Active);
    let _up = Up(&netdev);
    link(&netdev, "down");
    assert_eq!(
        events.next(WAIT).unwrap(),
        Some(AsyncEvent::PortError { port: 1 })
    );
    assert_ne!(ctx.port(1).unwrap().state, PortState::Active);
    link(&netdev, "up");
    assert_eq!(
        events.next(WAIT).unwrap(),
        Some(AsyncEvent::PortActive { port: 1 })
    );
    assert_eq!(ctx.port(1).unwrap().state, PortState::Active);
}

#[test]
fn the_srq_limit_reaches_the_reader() {
    let Some(env) = device::env() else { return };
    let _g = device::serial();
    let ctx = device::open(&env.device);
    let local = device::address(&ctx, env.gid_index);
    let mut events = ctx.async_events().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let srq = pd.create_srq(16, 1).unwrap();
    let cq = ctx.cq_builder().cqe(64).build().unwrap();
    let peer_cq = ctx.cq_builder().cqe(64).build().unwrap();
    let ours = pd.qp_builder(&cq, &cq).srq(&srq).build().unwrap();
    let peer = pd.qp_builder(&peer_cq, &peer_cq).build().unwrap();
    let ends = [&ours, &peer].map(|q| Endpoint {
        lid: local.lid,
        qpn: q.qpn(),
        psn: random_psn(),
        gid: local.gid,
    });
    let mtu = local.active_mtu.min(zverbs::Mtu::M1024);
    for (qp, me, them) in [(&ours, 0, 1), (&peer, 1, 0)] {
        let attr = ConnectAttr::new(local.port, ends[me].psn, &ends[them], local.gid_index);
        qp.connect_with(&attr.mtu(mtu)).unwrap();
    }
    let buf = pd.alloc_buf(4096, AccessFlags::ALL).unwrap();
    let mut rq = srq.queue().unwrap();
    for i in 0..3u64 {
        let sgl = [buf.sge(i as usize * 64..(i as usize + 1) * 64).unwrap()];
        // SAFETY: registered, outlives the receives, read only after their completions.
        unsafe { PostRecv::post(&mut rq, &RecvWr::new(i, &sgl)) }.unwrap();
    }
    srq.arm(2).unwrap();
    let mut sq = peer.send_queue().unwrap();
    let mut poller = cq.poller().unwrap();
    let mut peer_poller = peer_cq.poller().unwrap();
    let sgl = [buf.sge(2048..2056).unwrap()];
    for id in 0..2 {
        // SAFETY: registered memory that outlives the request's completion.
        unsafe { sq.post(&SendWr::send(id, &sgl).signaled()) }.unwrap();
        assert!(device::wait(&mut peer_poller, 1)[0].status.is_success());
        assert!(device::wait(&mut poller, 1)[0].status.is_success());
        if id == 0 {
            // Two left: not below the limit.
            assert_eq!(events.try_next().unwrap(), None);
        }
    }
    let ev = events.next(WAIT).unwrap().expect("the limit event");
    assert_eq!(
        ev,
        AsyncEvent::SrqLimitReached {
            srq: srq.event_id()
        }
    );
    assert!(ev.concerns_srq(&srq));
}
