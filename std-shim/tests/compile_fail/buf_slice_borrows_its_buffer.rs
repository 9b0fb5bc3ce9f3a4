//! A span borrows its buffer: the buffer cannot go while a span of it is still to be posted.

use zverbs::{MrBuf, SendFlags, SendQueue};

fn post(sq: &mut SendQueue, buf: MrBuf) {
    let span = buf.slice(0..64).unwrap();
    drop(buf);
    sq.send(1, span, SendFlags::SIGNALED).unwrap();
}

fn main() {}
