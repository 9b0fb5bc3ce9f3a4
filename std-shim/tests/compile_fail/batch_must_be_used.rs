//! A batch that is made and dropped at once posts nothing: the compiler says so (the batch
//! types are `#[must_use]`; here the lint is an error). Dropping a used batch rings it.

#![deny(unused_must_use)]

use zverbs::safe::SafeSendQueue;
use zverbs::{AnySendQueue, PostSend};

fn safe_layer(sq: &mut SafeSendQueue<AnySendQueue>) {
    sq.batch();
}

fn core_trait(sq: &mut AnySendQueue) {
    sq.batch();
}

fn main() {}
