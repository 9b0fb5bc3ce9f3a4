//! Test fixture: two connected QPs on the software device, driven through the real
//! `SendQueue` / `RecvQueue` / `CompletionQueue`, each with its own CQ and a registered arena.
#![allow(dead_code)]

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::collections::HashMap;
use std::ptr::NonNull;
use std::sync::Mutex;

use proptest::strategy::Strategy;
use proptest::test_runner::{
    Config as ProptestConfig, FileFailurePersistence, RngAlgorithm, RngSeed, TestRunner,
};
use zverbs_core::{Completion, PollCq, RemoteBuf, Sge};
use zverbs_mlx5dv::{
    CompletionQueue, CqBinding, RecvQueue, RqRef, RqState, SendQueue, SqCaps, SqRef, SqState,
};
use zverbs_sim::wire::Wire;
use zverbs_sim::{Access, CqConfig, Device, Mr, Peer, QpConfig, SimCq, SimQp};

pub mod direct;

/// Guard bytes on each side of an arena.
pub const GUARD: usize = 256;
const GUARD_BYTE: u8 = 0x5a;

/// Memory the device reads and writes, accessed by the test only through raw pointers (never a
/// reference that the device's writes could alias). Guard bytes on both sides.
pub struct Arena {
    base: NonNull<u8>,
    len: usize,
    layout: Layout,
}

impl Arena {
    pub fn new(len: usize) -> Self {
        let layout = Layout::from_size_align(len + 2 * GUARD, 64).unwrap();
        // SAFETY: non-zero size.
        let base = NonNull::new(unsafe { alloc_zeroed(layout) }).unwrap();
        // SAFETY: the guards are inside the allocation.
        unsafe {
            base.as_ptr().write_bytes(GUARD_BYTE, GUARD);
            base.as_ptr()
                .add(GUARD + len)
                .write_bytes(GUARD_BYTE, GUARD);
        }
        Self { base, len, layout }
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn ptr(&self, off: usize) -> *mut u8 {
        assert!(off <= self.len);
        // SAFETY: in bounds.
        unsafe { self.base.as_ptr().add(GUARD + off) }
    }
    /// Byte `off`, loaded with `Acquire` as a program polls the last byte of an RDMA WRITE:
    /// through a view of the whole arena (the region tests register), as the device accesses
    /// it, so that the program's and the device's accesses to a word are of the same size.
    pub fn load_u8_acquire(&self, off: usize) -> u8 {
        // SAFETY: the arena's bytes, valid while it lives; every concurrent access to them
        // (the device's) goes through views of the same region.
        let view = unsafe { zverbs_core::shared::SharedMem::new(self.base.add(GUARD), self.len) };
        view.load_u8_acquire(off).unwrap()
    }
    pub fn addr(&self, off: usize) -> u64 {
        self.ptr(off) as u64
    }
    pub fn write(&self, off: usize, data: &[u8]) {
        assert!(off + data.len() <= self.len);
        // SAFETY: in bounds; the device is not running concurrently with tests that use this.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr(off), data.len()) };
    }
    pub fn fill(&self, off: usize, len: usize, b: u8) {
        assert!(off + len <= self.len);
        // SAFETY: in bounds.
        unsafe { self.ptr(off).write_bytes(b, len) };
    }
    pub fn read(&self, off: usize, len: usize) -> Vec<u8> {
        assert!(off + len <= self.len);
        let mut v = vec![0u8; len];
        // SAFETY: in bounds.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr(off), v.as_mut_ptr(), len) };
        v
    }
    pub fn read_u64_be(&self, off: usize) -> u64 {
        u64::from_be_bytes(self.read(off, 8).try_into().unwrap())
    }
    pub fn write_u64_be(&self, off: usize, v: u64) {
        self.write(off, &v.to_be_bytes());
    }
    /// A `u64` in the byte order the device's atomics use (`big`: big-endian mode).
    pub fn read_u64_in(&self, off: usize, big: bool) -> u64 {
        let b: [u8; 8] = self.read(off, 8).try_into().unwrap();
        if big {
            u64::from_be_bytes(b)
        } else {
            u64::from_ne_bytes(b)
        }
    }
    /// Writes `v` in the byte order the device's atomics use (`big`: big-endian mode).
    pub fn write_u64_in(&self, off: usize, v: u64, big: bool) {
        self.write(
            off,
            &if big {
                v.to_be_bytes()
            } else {
                v.to_ne_bytes()
            },
        );
    }
    pub fn guards_intact(&self) -> bool {
        // SAFETY: the guards are inside the allocation.
        unsafe {
            (0..GUARD).all(|i| {
                *self.base.as_ptr().add(i) == GUARD_BYTE
                    && *self.base.as_ptr().add(GUARD + self.len + i) == GUARD_BYTE
            })
        }
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { dealloc(self.base.as_ptr(), self.layout) };
    }
}

/// What a pair is made of.
#[derive(Clone, Copy, Debug)]
pub struct PairCfg {
    pub qp: QpConfig,
    /// Entries of each end's CQ (send and receive completions share it).
    pub cqe: u32,
    /// Bytes of each end's arena.
    pub arena: usize,
    /// `max_signaled` override (None: the whole CQ).
    pub max_signaled: Option<u32>,
    /// Bytes per CQE of each end's CQ (64 or 128).
    pub cqe_size: u32,
}

impl Default for PairCfg {
    fn default() -> Self {
        Self {
            qp: QpConfig {
                max_send_wr: 16,
                max_recv_wr: 16,
                ..QpConfig::default()
            },
            cqe: 255,
            arena: 64 * 1024,
            max_signaled: None,
            cqe_size: 64,
        }
    }
}

/// One side: its QP, CQ, queues and registered arena.
pub struct End<'a> {
    pub qp: SimQp,
    pub cq: SimCq,
    pub sq: SendQueue<SqRef<'a>>,
    pub rq: RecvQueue<RqRef<'a>>,
    pub cqp: CompletionQueue<&'a [CqBinding<SqRef<'a>, RqRef<'a>>]>,
    pub mem: &'a Arena,
    pub mr: Mr,
}

impl End<'_> {
    pub fn qpn(&self) -> u32 {
        self.qp.qpn
    }
    /// A local entry in this end's arena.
    pub fn sge(&self, off: usize, len: u32) -> Sge {
        Sge::new(self.mem.addr(off), len, self.mr.lkey)
    }
    /// This end's arena as a remote target for the peer.
    pub fn remote(&self, off: usize) -> RemoteBuf {
        RemoteBuf::new(self.mem.addr(off), self.mr.rkey)
    }
    /// Every completion ready now.
    pub fn poll_all(&mut self) -> Vec<Completion> {
        let mut out = Vec::new();
        let mut wc = [Completion::EMPTY; 16];
        loop {
            let n = self.cqp.poll(&mut wc);
            out.extend_from_slice(&wc[..n]);
            if n == 0 {
                return out;
            }
        }
    }
    /// The raw CQE that the poller consumed `back` polls ago (1: the last one).
    pub fn last_cqe(&self, back: u32) -> [u8; 64] {
        let idx = self.cqp.consumer().wrapping_sub(back);
        // SAFETY: the CQE was polled, the device is stepped.
        unsafe { zverbs_sim::read_cqe(&self.cq.layout, idx) }
    }
}

pub struct Pair<'a> {
    pub dev: &'a Device,
    pub a: End<'a>,
    pub b: End<'a>,
}

impl Pair<'_> {
    /// Runs the device until idle and returns (A's completions, B's completions).
    pub fn run(&mut self) -> (Vec<Completion>, Vec<Completion>) {
        self.dev.run_until_idle();
        (self.a.poll_all(), self.b.poll_all())
    }
}

/// Builds a device with two connected QPs and runs `f` on them; then checks that no CQ
/// overran and no guard byte changed.
pub fn with_pair<R>(cfg: PairCfg, f: impl FnOnce(&mut Pair<'_>) -> R) -> R {
    let mem_a = Arena::new(cfg.arena);
    let mem_b = Arena::new(cfg.arena);
    let dev = Device::new();
    let r = with_pair_on(&dev, &mem_a, &mem_b, cfg, f);
    assert_eq!(dev.cq_overruns(), 0, "a CQ overran");
    assert!(dev.guards_intact(), "a device buffer's guard bytes changed");
    assert!(
        mem_a.guards_intact() && mem_b.guards_intact(),
        "an arena guard changed"
    );
    r
}

/// As [`with_pair`], on a given device and arenas.
pub fn with_pair_on<R>(
    dev: &Device,
    mem_a: &Arena,
    mem_b: &Arena,
    cfg: PairCfg,
    f: impl FnOnce(&mut Pair<'_>) -> R,
) -> R {
    let cq_a = dev
        .create_cq_sized(CqConfig { cqe: cfg.cqe }, cfg.cqe_size)
        .unwrap();
    let cq_b = dev
        .create_cq_sized(CqConfig { cqe: cfg.cqe }, cfg.cqe_size)
        .unwrap();
    let qa = dev
        .create_qp(QpConfig {
            send_cq: cq_a.cqn,
            recv_cq: cq_a.cqn,
            ..cfg.qp
        })
        .unwrap();
    let qb = dev
        .create_qp(QpConfig {
            send_cq: cq_b.cqn,
            recv_cq: cq_b.cqn,
            ..cfg.qp
        })
        .unwrap();
    dev.connect(qa.qpn, qb.qpn).unwrap();
    // SAFETY: the arenas outlive the device's use of them (the caller keeps them alive).
    let mr_a = unsafe { dev.reg_mr(mem_a.ptr(0), mem_a.len(), Access::ALL) }.unwrap();
    // SAFETY: as above.
    let mr_b = unsafe { dev.reg_mr(mem_b.ptr(0), mem_b.len(), Access::ALL) }.unwrap();

    let sq_slots_a = qa.sq_slots();
    let rq_slots_a = qa.rq_slots();
    let sq_slots_b = qb.sq_slots();
    let rq_slots_b = qb.rq_slots();
    let sq_state_a = SqState::new(&sq_slots_a[..]).unwrap();
    let rq_state_a = RqState::new(&rq_slots_a[..]).unwrap();
    let sq_state_b = SqState::new(&sq_slots_b[..]).unwrap();
    let rq_state_b = RqState::new(&rq_slots_b[..]).unwrap();
    let bind_a = [CqBinding::new(qa.qpn, Some(&sq_state_a), Some(&rq_state_a))];
    let bind_b = [CqBinding::new(qb.qpn, Some(&sq_state_b), Some(&rq_state_b))];
    let caps = |q: &SimQp| SqCaps {
        max_signaled: cfg.max_signaled.unwrap_or(q.caps().max_signaled),
        ..q.caps()
    };
    // SAFETY: the layouts are the device's, which outlives the queues; each queue is the only
    // driver of its ring; the states are bound to the CQs that serve them.
    let mut pair = unsafe {
        Pair {
            dev,
            a: End {
                qp: qa,
                cq: cq_a,
                sq: SendQueue::new(&qa.layout, caps(&qa), &sq_state_a, None).unwrap(),
                rq: RecvQueue::new(&qa.layout, &rq_state_a).unwrap(),
                cqp: CompletionQueue::new(&cq_a.layout, &bind_a[..]).unwrap(),
                mem: mem_a,
                mr: mr_a,
            },
            b: End {
                qp: qb,
                cq: cq_b,
                sq: SendQueue::new(&qb.layout, caps(&qb), &sq_state_b, None).unwrap(),
                rq: RecvQueue::new(&qb.layout, &rq_state_b).unwrap(),
                cqp: CompletionQueue::new(&cq_b.layout, &bind_b[..]).unwrap(),
                mem: mem_b,
                mr: mr_b,
            },
        }
    };
    f(&mut pair)
}

/// Asserts that every id in `posted` has exactly one completion in `got` and that `got` holds
/// no other completion.
pub fn assert_exactly_once(posted: &[u64], got: &[Completion]) {
    let mut count: HashMap<u64, u32> = HashMap::new();
    for c in got {
        *count.entry(c.wr_id).or_default() += 1;
    }
    for id in posted {
        assert_eq!(
            count.remove(id),
            Some(1),
            "work request {id:#x} must complete exactly once; completions: {got:#?}"
        );
    }
    assert!(count.is_empty(), "invented completions: {count:?}");
}

/// The configuration of a property test in `source` (pass `file!()`): `cases` cases
/// (`PROPTEST_CASES` overrides), drawn from `seed`, so that every run tests the same cases
/// (`PROPTEST_RNG_SEED=<decimal>` draws others). A failing case is shrunk to a small one and
/// its seed saved beside the test, in `<test>.proptest-regressions`; every later run replays
/// it first, until the file is deleted.
pub fn proptest_config(source: &'static str, cases: u32, seed: u64) -> ProptestConfig {
    let mut c = ProptestConfig::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        c.cases = cases;
    }
    if std::env::var_os("PROPTEST_RNG_ALGORITHM").is_none() {
        c.rng_algorithm = RngAlgorithm::XorShift;
    }
    if std::env::var_os("PROPTEST_RNG_SEED").is_none() {
        c.rng_seed = RngSeed::Fixed(seed);
    }
    if std::env::var_os("PROPTEST_DISABLE_FAILURE_PERSISTENCE").is_none() {
        c.failure_persistence = Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions",
        )));
    }
    if std::env::var_os("PROPTEST_MAX_SHRINK_ITERS").is_none() {
        // Enough to delete every round of a long case and then simplify what is left
        // (proptest's default is four per case).
        c.max_shrink_iters = 20_000;
    }
    c.source_file = Some(source);
    c
}

/// Runs `test` on `cases` values of `strategy` (see [`proptest_config`]); on a failure, panics
/// with the smallest failing value proptest found.
pub fn check<S: Strategy>(
    source: &'static str,
    cases: u32,
    seed: u64,
    strategy: &S,
    test: impl Fn(S::Value),
) where
    S::Value: std::fmt::Debug,
{
    let mut runner = TestRunner::new(proptest_config(source, cases, seed));
    if let Err(e) = runner.run(strategy, |v| {
        test(v);
        Ok(())
    }) {
        panic!("{e}");
    }
}

/// A seed from the environment variable `var`, or `default`.
pub fn env_u64(var: &str, default: u64) -> u64 {
    match std::env::var(var) {
        Ok(s) => {
            let s = s.trim();
            if let Some(hex) = s.strip_prefix("0x") {
                u64::from_str_radix(hex, 16).unwrap()
            } else {
                s.parse().unwrap()
            }
        }
        Err(_) => default,
    }
}

/// One QP with its own CQ and registered arena on `dev`, not connected. Its queues'
/// bookkeeping is leaked (a test's worth), so the end can be returned on its own.
pub fn end_on<'a>(dev: &'a Device, mem: &'a Arena, cfg: PairCfg) -> End<'a> {
    let cq = dev.create_cq(CqConfig { cqe: cfg.cqe }).unwrap();
    let qp = dev
        .create_qp(QpConfig {
            send_cq: cq.cqn,
            recv_cq: cq.cqn,
            ..cfg.qp
        })
        .unwrap();
    // SAFETY: the arena outlives the device's use of it (the caller keeps it alive).
    let mr = unsafe { dev.reg_mr(mem.ptr(0), mem.len(), Access::ALL) }.unwrap();
    let sq_state: SqRef<'static> =
        Box::leak(Box::new(SqState::new(&*qp.sq_slots().leak()).unwrap()));
    let rq_state: RqRef<'static> =
        Box::leak(Box::new(RqState::new(&*qp.rq_slots().leak()).unwrap()));
    let bind: &'static [CqBinding<SqRef<'static>, RqRef<'static>>] =
        Box::leak(Box::new([CqBinding::new(
            qp.qpn,
            Some(sq_state),
            Some(rq_state),
        )]));
    // SAFETY: the layouts are the device's, which outlives the queues; each queue is the only
    // driver of its ring; the states are bound to the CQ that serves them.
    unsafe {
        End {
            qp,
            cq,
            sq: SendQueue::new(&qp.layout, qp.caps(), sq_state, None).unwrap(),
            rq: RecvQueue::new(&qp.layout, rq_state).unwrap(),
            cqp: CompletionQueue::new(&cq.layout, bind).unwrap(),
            mem,
            mr,
        }
    }
}

/// Connects QP `qa` of `da` (at LID `lid_a`) and QP `qb` of `db` (at LID `lid_b`) to each
/// other across the wire, as two processes would.
pub fn connect_across(da: &Device, lid_a: u16, qa: u32, db: &Device, lid_b: u16, qb: u32) {
    da.connect_to(
        qa,
        Peer::Remote {
            lid: lid_b,
            qpn: qb,
        },
    )
    .unwrap();
    db.connect_to(
        qb,
        Peer::Remote {
            lid: lid_a,
            qpn: qa,
        },
    )
    .unwrap();
}

/// A wire between device instances in one test: messages in flight, as (destination LID,
/// bytes), carried by the test.
#[derive(Default)]
pub struct Queue(pub Mutex<Vec<(u16, Vec<u8>)>>);

impl Wire for Queue {
    fn send(&self, lid: u16, msg: Vec<u8>) {
        self.0.lock().unwrap().push((lid, msg));
    }
}

impl Queue {
    /// Every message in flight, taken off the wire.
    pub fn take(&self) -> Vec<(u16, Vec<u8>)> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

/// One of [`srq_pairs`]: a requester with its own CQ, connected to a responder whose receives
/// come from the shared receive queue.
pub struct SrqPair {
    /// The requester.
    pub req: SimQp,
    /// The requester's CQ (16 CQEs), for its sends and receives.
    pub cq: SimCq,
    /// The responder, on the SRQ.
    pub resp: SimQp,
}

/// `n` RC pairs on `dev` whose responders take their receives from SRQ `srqn` and complete
/// them on CQ `rcqn`; the requesters retry an RNR NAK `rnr_retry` times.
pub fn srq_pairs(dev: &Device, n: usize, srqn: u32, rcqn: u32, rnr_retry: u8) -> Vec<SrqPair> {
    (0..n)
        .map(|_| {
            let cq = dev.create_cq(CqConfig { cqe: 16 }).unwrap();
            let req = dev
                .create_qp(QpConfig {
                    send_cq: cq.cqn,
                    recv_cq: cq.cqn,
                    max_recv_wr: 0,
                    rnr_retry,
                    ..QpConfig::default()
                })
                .unwrap();
            let resp = dev
                .create_qp_ext(
                    QpConfig {
                        send_cq: rcqn,
                        recv_cq: rcqn,
                        max_recv_wr: 0,
                        ..QpConfig::default()
                    },
                    zverbs_sim::QpType::Rc,
                    Some(srqn),
                )
                .unwrap();
            dev.connect(req.qpn, resp.qpn).unwrap();
            SrqPair { req, cq, resp }
        })
        .collect()
}
