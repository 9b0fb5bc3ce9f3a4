//! Teardown in every order, on a real device. Every handle holds what it needs (a buffer its
//! PD, a QP its CQ and PD, a queue handle its QP, everything its context), so handles may be
//! dropped in any order while requests are still in flight, and each verbs object is
//! destroyed exactly when the last handle that needs it goes — children first, as rdma-core
//! requires. The test drops the six handles of a working queue pair in all 720 orders and,
//! after every drop, asks the kernel (RDMA netlink, what `rdma resource show` prints) which
//! of this process's objects still exist: a leak, or an object destroyed while another still
//! used it (rdma-core refuses that with EBUSY, and the object leaks), shows as a count that
//! differs from what the remaining handles hold.
//!
//! Device tests: they return at once unless `ZVERBS_TEST_DEVICE` names a device
//! (docs/testing.md).

mod device;

use std::fs;

use device::netlink::{Objects, Socket};
use device::{env, open, serial};
use zverbs::connect::Endpoint;
use zverbs::{AccessFlags, ConnectAttr, Context, Cq, MrBuf, Pd, Qp, Registered, SendFlags};
use zverbs::{Poller, RecvQueue, SendQueue};

/// A QP's send and receive queue and its CQ's poller.
type Queues = (SendQueue, RecvQueue, Poller);

/// The handles of one working queue pair, each droppable on its own.
struct Handles {
    ctx: Option<Context>,
    pd: Option<Pd>,
    buf: Option<MrBuf>,
    cq: Option<Cq>,
    qp: Option<Qp>,
    queues: Option<Queues>,
}

const NAMES: [&str; 6] = ["context", "PD", "buffer", "CQ", "QP", "queues"];

impl Handles {
    /// A QP connected to itself, with requests posted and not polled: a SEND into its own
    /// receive, WRITEs into its own buffer, a READ from it.
    fn new(device: &str, gid_index: u32) -> Self {
        let ctx = open(device);
        let local = device::address(&ctx, gid_index);
        let pd = ctx.alloc_pd().unwrap();
        let buf = pd.alloc_buf(8192, AccessFlags::ALL).unwrap();
        let cq = ctx.cq_builder().cqe(32).build().unwrap();
        let qp = pd
            .qp_builder(&cq, &cq)
            .max_send_wr(8)
            .max_recv_wr(8)
            .build()
            .unwrap();
        let me = Endpoint {
            lid: local.lid,
            qpn: qp.qpn(),
            psn: qp.psn(),
            gid: local.gid,
        };
        qp.connect_with(&ConnectAttr::new(local.port, me.psn, &me, local.gid_index))
            .expect("a QP connected to itself");
        let mut sq = qp.send_queue().unwrap();
        let mut rq = qp.recv_queue().unwrap();
        let poller = cq.poller().unwrap();
        rq.post(1, buf.slice(4096..8192).unwrap()).unwrap();
        let sig = SendFlags::SIGNALED;
        sq.send(2, buf.slice(0..100).unwrap(), sig).unwrap();
        sq.write(
            3,
            buf.slice(0..100).unwrap(),
            buf.remote(1000).unwrap(),
            SendFlags::NONE,
        )
        .unwrap();
        sq.read(
            4,
            buf.slice(2000..2100).unwrap(),
            buf.remote(0).unwrap(),
            sig,
        )
        .unwrap();
        sq.write(
            5,
            buf.slice(0..100).unwrap(),
            buf.remote(3000).unwrap(),
            sig,
        )
        .unwrap();
        let queues = (sq, rq, poller);
        Self {
            ctx: Some(ctx),
            pd: Some(pd),
            buf: Some(buf),
            cq: Some(cq),
            qp: Some(qp),
            queues: Some(queues),
        }
    }

    fn drop_one(&mut self, i: usize) {
        match i {
            0 => drop(self.ctx.take()),
            1 => drop(self.pd.take()),
            2 => drop(self.buf.take()),
            3 => drop(self.cq.take()),
            4 => drop(self.qp.take()),
            _ => drop(self.queues.take()),
        }
    }

    /// The objects the kernel should hold for the handles still alive.
    fn expected(&self) -> Objects {
        let qp = self.qp.is_some() || self.queues.is_some();
        let cq = self.cq.is_some() || qp;
        let mr = self.buf.is_some();
        let pd = self.pd.is_some() || mr || qp;
        let ctx = self.ctx.is_some() || pd || cq;
        Objects {
            ctx: ctx.into(),
            pd: pd.into(),
            mr: mr.into(),
            cq: cq.into(),
            qp: qp.into(),
        }
    }
}

/// This process's and this thread's ids: the kernel names the task that created an object.
fn owners() -> [u32; 2] {
    // SAFETY: gettid(2) has no preconditions.
    let tid = unsafe { libc::gettid() } as u32;
    [std::process::id(), tid]
}

fn objects(nl: &mut Socket) -> Objects {
    nl.objects(&owners()).expect("RDMA netlink resource dump")
}

/// Open file descriptors on RDMA character devices (one per open context).
fn uverbs_fds() -> usize {
    fs::read_dir("/proc/self/fd")
        .map(|d| {
            d.filter_map(|e| fs::read_link(e.ok()?.path()).ok())
                .filter(|p| p.starts_with("/dev/infiniband/uverbs"))
                .count()
        })
        .unwrap_or(0)
}

/// Every permutation of `0..n`, in lexicographic order.
fn permutations(n: usize) -> Vec<Vec<usize>> {
    let mut all = Vec::new();
    let mut p: Vec<usize> = (0..n).collect();
    loop {
        all.push(p.clone());
        // The next permutation: the longest non-increasing suffix, swap its predecessor with
        // the smallest larger element of the suffix, reverse the suffix.
        let Some(i) = (0..n.saturating_sub(1)).rev().find(|&i| p[i] < p[i + 1]) else {
            return all;
        };
        let j = (i + 1..n).rev().find(|&j| p[j] > p[i]).unwrap_or(i + 1);
        p.swap(i, j);
        p[i + 1..].reverse();
    }
}

#[test]
fn permutations_are_all_there_once() {
    let all = permutations(4);
    assert_eq!(all.len(), 24);
    let mut sorted = all.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted, all);
}

#[test]
fn handles_drop_in_every_order_with_work_in_flight() {
    let _serial = serial();
    let Some(env) = env() else { return };
    if device::is_software(&env.device, "the kernel holds no objects for it") {
        return;
    }
    let mut nl = Socket::open(&env.device).expect("an RDMA netlink socket");
    let fds = uverbs_fds();
    assert_eq!(
        objects(&mut nl),
        Objects::default(),
        "objects left over before the test"
    );
    let orders = permutations(NAMES.len());
    assert_eq!(orders.len(), 720);
    let t = std::time::Instant::now();
    for order in &orders {
        let mut h = Handles::new(&env.device, env.gid_index);
        let what = |k: usize| -> String {
            order[..k]
                .iter()
                .map(|&i| NAMES[i])
                .collect::<Vec<_>>()
                .join(", ")
        };
        assert_eq!(objects(&mut nl), h.expected(), "before dropping");
        for (k, &i) in order.iter().enumerate() {
            h.drop_one(i);
            assert_eq!(
                objects(&mut nl),
                h.expected(),
                "after dropping {}",
                what(k + 1)
            );
        }
        assert_eq!(
            uverbs_fds(),
            fds,
            "the device is closed after dropping {}",
            what(6)
        );
    }
    println!(
        "{} orders, {} drops, each checked against the kernel, in {:.1?}",
        orders.len(),
        orders.len() * NAMES.len(),
        t.elapsed()
    );
}
