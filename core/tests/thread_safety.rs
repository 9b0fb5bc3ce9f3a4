//! The thread-safety facts the crate documents ("Thread safety" in the crate docs), checked by
//! the compiler: a type that lost or gained `Send`/`Sync`/`Copy` fails this file's build.

use static_assertions::{assert_impl_all, assert_not_impl_any};
use zverbs_core::mmio::MmioRegion;
use zverbs_core::ring::Ring;
use zverbs_core::sync::CachePadded;
use zverbs_core::sync::atomic::AtomicU32;
use zverbs_core::{
    BatchError, Completion, PostError, RecvWr, RemoteBuf, SendFlags, SendOp, SendWr, Sge, WcFlags,
    WcOpcode, WcStatus,
};

// The data types are plain values: `Copy`, `Send`, `Sync`.
assert_impl_all!(Sge: Copy, Send, Sync);
assert_impl_all!(RemoteBuf: Copy, Send, Sync);
assert_impl_all!(SendFlags: Copy, Send, Sync);
assert_impl_all!(SendOp<'static>: Copy, Send, Sync);
assert_impl_all!(SendWr<'static>: Copy, Send, Sync);
assert_impl_all!(RecvWr<'static>: Copy, Send, Sync);
assert_impl_all!(Completion: Copy, Send, Sync);
assert_impl_all!(WcStatus: Copy, Send, Sync);
assert_impl_all!(WcOpcode: Copy, Send, Sync);
assert_impl_all!(WcFlags: Copy, Send, Sync);
assert_impl_all!(PostError: Copy, Send, Sync);
assert_impl_all!(BatchError: Copy, Send, Sync);
assert_impl_all!(Ring: Copy, Send, Sync);

// A padded shared index is shareable when what it pads is.
assert_impl_all!(CachePadded<AtomicU32>: Send, Sync);

// A window of device registers moves between threads with the queue that owns it, but is
// never shared: its stores take `&self`, and two threads storing into one BlueFlame buffer at
// once would interleave their WQEs.
assert_impl_all!(MmioRegion: Send);
assert_not_impl_any!(MmioRegion: Sync, Clone, Copy);
