//! Posting, ringing and polling take `&mut self`: a shared reference cannot drive a queue.

use zverbs::{Completion, PollCq, Poller, SendQueue};

fn drive(sq: &SendQueue, cq: &Poller) {
    sq.ring();
    let mut wc = [Completion::EMPTY; 4];
    cq.poll(&mut wc);
}

fn main() {}
