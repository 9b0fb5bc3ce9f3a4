//! A batch that is made and dropped at once posts nothing: the compiler says so (the batch
//! types are `#[must_use]`; here the lint is an error). Dropping a used batch rings it.

#![deny(unused_must_use)]

use zverbs::{PostSend, SendQueue};

fn safe_layer(sq: &mut SendQueue) {
    sq.batch();
}

fn core_trait(sq: &mut SendQueue) {
    PostSend::batch(sq);
}

fn main() {}
