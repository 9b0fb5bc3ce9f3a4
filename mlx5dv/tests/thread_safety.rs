//! The thread-safety facts the crate documents ("Thread safety" in the crate docs, the
//! `state` module on who owns the bookkeeping), checked by the compiler for both kinds of
//! handle a queue reaches its state through: borrowed (`&SqState<&[SqSlot]>`, as `no_std`
//! code uses) and owning (`Arc<SqState<Box<[SqSlot]>>>`, as the `zverbs` crate uses). A type
//! that lost or gained `Send`/`Sync` fails this file's build.

use std::rc::Rc;
use std::sync::Arc;

use static_assertions::{assert_impl_all, assert_not_impl_any};
use zverbs_mlx5dv::{
    CompletionQueue, CqBinding, RecvQueue, RqRef, RqSlot, RqState, SendQueue, SqRef, SqSlot,
    SqState,
};

type SqArc = Arc<SqState<Box<[SqSlot]>>>;
type RqArc = Arc<RqState<Box<[RqSlot]>>>;
type SqRc = Rc<SqState<Box<[SqSlot]>>>;
type RqRc = Rc<RqState<Box<[RqSlot]>>>;

// The bookkeeping a queue shares with its poller: slots handed over by the credit protocol,
// one atomic word. `Send` and `Sync` when the storage is.
assert_impl_all!(SqSlot: Send, Sync);
assert_impl_all!(RqSlot: Send, Sync);
assert_impl_all!(SqState<&'static [SqSlot]>: Send, Sync);
assert_impl_all!(SqState<Box<[SqSlot]>>: Send, Sync);
assert_impl_all!(RqState<&'static [RqSlot]>: Send, Sync);
assert_impl_all!(RqState<Box<[RqSlot]>>: Send, Sync);
assert_impl_all!(SqArc: Send, Sync);
assert_impl_all!(RqArc: Send, Sync);

// A binding names a QP and the states of its queues: as shareable as its handles.
assert_impl_all!(CqBinding<SqRef<'static>, RqRef<'static>>: Send, Sync, Copy);
assert_impl_all!(CqBinding<SqArc, RqArc>: Send, Sync, Clone);
assert_not_impl_any!(CqBinding<SqRc, RqRc>: Send, Sync);

// Each queue is `Send` (it may move to another thread, and a send queue and the CQ polling its
// completions may live on different threads) and not `Sync` (one thread at a time, through
// `&mut self`), whichever kind of handle it holds.
assert_impl_all!(SendQueue<SqRef<'static>>: Send);
assert_impl_all!(SendQueue<SqArc>: Send);
assert_not_impl_any!(SendQueue<SqRef<'static>>: Sync);
assert_not_impl_any!(SendQueue<SqArc>: Sync);

assert_impl_all!(RecvQueue<RqRef<'static>>: Send);
assert_impl_all!(RecvQueue<RqArc>: Send);
assert_not_impl_any!(RecvQueue<RqRef<'static>>: Sync);
assert_not_impl_any!(RecvQueue<RqArc>: Sync);

type BorrowedBindings = &'static [CqBinding<SqRef<'static>, RqRef<'static>>];
type OwnedBindings = Box<[CqBinding<SqArc, RqArc>]>;
assert_impl_all!(CompletionQueue<BorrowedBindings>: Send);
assert_impl_all!(CompletionQueue<OwnedBindings>: Send);
assert_not_impl_any!(CompletionQueue<BorrowedBindings>: Sync);
assert_not_impl_any!(CompletionQueue<OwnedBindings>: Sync);

// A handle that cannot cross threads keeps its queue on its thread: a queue and its poller
// would otherwise count the same state's references from two threads.
assert_not_impl_any!(SendQueue<SqRc>: Send, Sync);
assert_not_impl_any!(RecvQueue<RqRc>: Send, Sync);
assert_not_impl_any!(CompletionQueue<Box<[CqBinding<SqRc, RqRc>]>>: Send, Sync);
