//! Posting, ringing and polling take `&mut self`: a shared reference cannot drive a queue.

use zverbs::{AnyPoller, Completion, PollCq, PostSend, SendQueue};

fn drive(sq: &SendQueue, cq: &AnyPoller) {
    sq.ring();
    let mut wc = [Completion::EMPTY; 4];
    cq.poll(&mut wc);
}

fn main() {}
