//! The paths users import from: items that moved between the crate's modules stay where
//! applications name them (the crate root, `backend`, `connect`, `safe`), and the front door
//! (`SendQueue`, `Poller`) and the typed backends (`backend::mlx5`, `backend::verbs`) are where
//! the docs say. A module made private or a re-export dropped fails this file's build.

use zverbs::backend::mlx5::{RqStateHandle, SqStateHandle};
use zverbs::backend::{
    BACKEND_ENV, BackendChoice, BackendKind, BackendReport, BackendRequest, BlueFlame,
    RequestSource,
};
use zverbs::backend::{QueueSet, Queues, TypedSq, mlx5, verbs};
use zverbs::connect::{Endpoint, RemoteRegion, random_psn};
use zverbs::safe::{BufSlice, SafePostError, WaitError};
use zverbs::{
    AccessFlags, AhAttr, AsyncEvent, AsyncEvents, BufError, CompChannel, ConnectAttr, CqId,
    DeviceAttr, EventError, Gid, GidEntry, GidType, GlobalRoute, InitAttr, LinkLayer, LocalAddress,
    MULTICAST_QPN, Mtu, PortAttr, PortState, QpCaps, QpState, QpType, RtrAttr, RtsAttr,
    SOFTWARE_DEVICE, SrqId, SrqStateHandle, UdAttr,
};
use zverbs::{Batch, Changes, Poller, Prepared, SendQueue, To};

/// Names each item once, so that the imports above are used.
#[test]
fn moved_items_keep_their_public_paths() {
    assert_eq!(BACKEND_ENV, "ZVERBS_BACKEND");
    assert_eq!(SOFTWARE_DEVICE, "zverbs_sim0");
    assert_eq!(MULTICAST_QPN, 0xff_ffff);
    assert_eq!(BackendKind::Direct.to_string(), "direct (mlx5)");
    assert_eq!(BackendRequest::default(), BackendRequest::Auto);
    let choice = BackendChoice {
        request: BackendRequest::Verbs,
        source: RequestSource::Caller,
    };
    let report = BackendReport {
        kind: BackendKind::Verbs,
        choice,
        reason: String::new(),
        blueflame: Some(BlueFlame::Dedicated),
    };
    assert_eq!(report.choice, choice);
    assert!(random_psn() <= 0xff_ffff);
    let ep = Endpoint::default();
    assert_eq!(RemoteRegion::default().len, 0);
    let attr = ConnectAttr::new(1, 0, &ep, None);
    let _: (InitAttr, RtrAttr, RtsAttr) = (attr.init, attr.rtr, attr.rts);
    let _: Option<GlobalRoute> = attr.rtr.grh;
    assert_eq!(QpState::from_raw(3), QpState::Rts);
    assert_eq!(QpType::default(), QpType::Rc);
    assert!(QpCaps::default().max_send_wr > 0);
    assert!(AccessFlags::ALL.contains(AccessFlags::LOCAL_WRITE));
    assert!(Gid::default().is_zero());
    assert_eq!(Mtu::M1024.bytes(), 1024);
    assert_eq!(PortState::Active.to_string(), "ACTIVE");
    let _ = (
        AhAttr::default(),
        std::mem::size_of::<UdAttr>(),
        std::mem::size_of::<(GidEntry, GidType, LinkLayer, LocalAddress, PortAttr)>(),
        std::mem::size_of::<(DeviceAttr, CqId, SrqId, AsyncEvent, BufError)>(),
        std::mem::size_of::<(SafePostError, WaitError, EventError, BufSlice<'static>)>(),
        std::mem::size_of::<(CompChannel, AsyncEvents)>(),
        std::mem::size_of::<(SqStateHandle, RqStateHandle, SrqStateHandle)>(),
        std::mem::size_of::<(SendQueue, Poller, Batch<'static>, To<'static, 'static>)>(),
        std::mem::size_of::<(Prepared<'static>, Changes, TypedSq, Queues)>(),
        std::mem::size_of::<(mlx5::SendQueue, mlx5::SendQueue<mlx5::Datagram>)>(),
        std::mem::size_of::<(mlx5::SendQueue<mlx5::Dci>, mlx5::RecvQueue, mlx5::Poller)>(),
        std::mem::size_of::<(verbs::SendQueue, verbs::RecvQueue, verbs::Poller)>(),
        std::mem::size_of::<QueueSet<mlx5::SendQueue, mlx5::RecvQueue, mlx5::Poller>>(),
    );
}
