//! Posting, ringing and polling take `&mut self`: a shared reference cannot drive a queue.

use zverbs::{AnyPoller, AnySendQueue, Completion, PollCq, PostSend};

fn drive(sq: &AnySendQueue, cq: &AnyPoller) {
    sq.ring();
    let mut wc = [Completion::EMPTY; 4];
    cq.poll(&mut wc);
}

fn main() {}
