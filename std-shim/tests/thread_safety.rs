//! The thread-safety facts the crate documents (crate docs and `docs/usage.md`, "Thread
//! safety"), checked by the compiler: a wrong `unsafe impl`, or a field that makes a type lose
//! or gain `Send`/`Sync`, fails this file's build. The refusals that need a program to show
//! (a queue shared by reference across threads, posting without `unsafe`) are the
//! compile-fail tests of `tests/compile_fail/`.

use static_assertions::{assert_impl_all, assert_not_impl_any};
use zverbs::backend::{QueueSet, Queues};
use zverbs::backend::{mlx5 as direct, verbs};
use zverbs::safe::BufSlice;
use zverbs::{Context, Cq, Device, Mr, MrBuf, Pd, Poller, Qp, RecvQueue, SendQueue};

// Control-path handles: `Send + Sync`, cheap clones of an `Arc`; any thread may call them.
assert_impl_all!(Context: Send, Sync, Clone);
assert_impl_all!(Pd: Send, Sync, Clone);
assert_impl_all!(Cq: Send, Sync, Clone);
assert_impl_all!(Qp: Send, Sync, Clone);
assert_impl_all!(Mr: Send, Sync, Clone);
assert_impl_all!(MrBuf: Send, Sync, Clone);
assert_impl_all!(Device: Send, Sync);

// An `MrBuf` is never referenced by Rust: nothing hands out its bytes as a slice, so the
// device writing them at any time cannot break an aliasing guarantee.
assert_not_impl_any!(MrBuf: std::ops::Deref, AsRef<[u8]>, AsMut<[u8]>);
assert_not_impl_any!(MrBuf: std::borrow::Borrow<[u8]>, std::borrow::BorrowMut<[u8]>);

// Data-path handles: `Send` (a queue may move to another thread, and a QP's send queue and
// its CQ's poller may live on different threads) but not `Sync` (one thread at a time).
assert_impl_all!(SendQueue: Send);
assert_impl_all!(RecvQueue: Send);
assert_impl_all!(Poller: Send);
assert_not_impl_any!(SendQueue: Sync);
assert_not_impl_any!(RecvQueue: Sync);
assert_not_impl_any!(Poller: Sync);
// Raw Ethernet: the striding queue moves between threads, is polled by one; its packets
// borrow it and stay on its thread; the control-path handles are shared.
assert_impl_all!(zverbs::StridingQueue: Send);
assert_not_impl_any!(zverbs::StridingQueue: Sync);
assert_not_impl_any!(zverbs::Packet<'static>: Send, Sync);
assert_impl_all!(zverbs::WorkQueue: Send, Sync, Clone);
assert_impl_all!(zverbs::RssQp: Send, Sync, Clone);
assert_impl_all!(zverbs::Flow: Send, Sync, Clone);
assert_impl_all!(zverbs::McastMembership: Send, Sync);

assert_impl_all!(direct::SendQueue: Send);
assert_impl_all!(direct::RecvQueue: Send);
assert_impl_all!(direct::Poller: Send);
assert_not_impl_any!(direct::SendQueue: Sync);
assert_not_impl_any!(direct::RecvQueue: Sync);
assert_not_impl_any!(direct::Poller: Sync);

assert_impl_all!(verbs::SendQueue: Send);
assert_impl_all!(verbs::RecvQueue: Send);
assert_impl_all!(verbs::Poller: Send);
assert_not_impl_any!(verbs::SendQueue: Sync);
assert_not_impl_any!(verbs::RecvQueue: Sync);
assert_not_impl_any!(verbs::Poller: Sync);

assert_impl_all!(zverbs::backend::verbs::raw::RecvQueue: Send);
assert_impl_all!(zverbs::backend::verbs::raw::Poller: Send);
assert_not_impl_any!(zverbs::backend::verbs::raw::RecvQueue: Sync);
assert_not_impl_any!(zverbs::backend::verbs::raw::Poller: Sync);

// What a fallback queue shares with its poller, and the direct backend's equivalents.
assert_impl_all!(zverbs::backend::verbs::SqShared: Send, Sync);
assert_impl_all!(zverbs::backend::verbs::RqShared: Send, Sync);
assert_impl_all!(direct::SqStateHandle: Send, Sync);
assert_impl_all!(direct::RqStateHandle: Send, Sync);

// Taken together, the queues of one QP keep the same rules.
assert_impl_all!(Queues: Send);
assert_not_impl_any!(Queues: Sync);
assert_impl_all!(QueueSet<direct::SendQueue, direct::RecvQueue, direct::Poller>: Send);
assert_impl_all!(QueueSet<verbs::SendQueue, verbs::RecvQueue, verbs::Poller>: Send);

// The safe layer adds no sharing: its queues are what they wrap.
assert_impl_all!(SendQueue: Send);
assert_impl_all!(RecvQueue: Send);
assert_not_impl_any!(SendQueue: Sync);
assert_not_impl_any!(RecvQueue: Sync);
assert_impl_all!(SendQueue: Send);
assert_impl_all!(SendQueue: Send);
assert_not_impl_any!(SendQueue: Sync);
assert_not_impl_any!(SendQueue: Sync);

// A span of a library-owned buffer is a plain borrowed value.
assert_impl_all!(BufSlice<'static>: Send, Sync, Copy);
