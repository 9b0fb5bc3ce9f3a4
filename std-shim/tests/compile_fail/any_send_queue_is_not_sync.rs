//! A queue handle is `Send` but not `Sync`: it moves between threads, but two threads never
//! use one at the same time (posting takes `&mut self`, and nothing is shared by reference).
//! Both backends' queues hold memory that one thread writes at a time, so two scoped threads
//! borrowing one queue are refused. (The receive queue and the poller: `tests/thread_safety.rs`.)

use zverbs::SendQueue;

fn share(q: &SendQueue) {
    std::thread::scope(|s| {
        s.spawn(|| q.kind());
        s.spawn(|| q.kind());
    });
}

fn main() {}
