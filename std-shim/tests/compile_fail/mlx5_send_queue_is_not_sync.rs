//! The direct backend's send queue is `Send` but not `Sync`, whichever handle it reaches its
//! state through: it owns its part of the ring and the BlueFlame register, which one thread
//! writes at a time.

use std::sync::Arc;

use zverbs::mlx5::{SendQueue, SqRef, SqSlot, SqState};

fn share_owning(q: &SendQueue<Arc<SqState<Box<[SqSlot]>>>>) {
    std::thread::scope(|s| {
        s.spawn(|| q.producer());
        s.spawn(|| q.producer());
    });
}

fn share_borrowed(q: &SendQueue<SqRef<'_>>) {
    std::thread::scope(|s| {
        s.spawn(|| q.producer());
    });
}

fn main() {}
