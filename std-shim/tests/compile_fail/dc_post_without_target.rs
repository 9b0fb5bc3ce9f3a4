//! A DC initiator's typed send queue (the direct backend's, for monomorphised loops) takes
//! only requests that name their target: it has no `post` or `stage` of its own and is no
//! `PostSend`, so an RC-style post does not compile. (The front door, `zverbs::SendQueue`,
//! refuses one at run time with `PostError::WrongTransport`: `tests/dc/mod.rs`.)

use zverbs::backend::mlx5::{Dci, SendQueue};
use zverbs::{PostSend, RemoteBuf, SendWr, Sge};

fn post(sq: &mut SendQueue<Dci>, sgl: &[Sge]) {
    let remote = RemoteBuf::new(0x1000, 7);
    // SAFETY: never reached: the calls do not compile.
    unsafe {
        sq.post(&SendWr::write(1, sgl, remote)).unwrap();
        sq.stage(&SendWr::send(2, sgl)).unwrap();
    }
}

fn generic(sq: &mut impl PostSend) {
    let _ = sq;
}

fn hand_over(sq: &mut SendQueue<Dci>) {
    generic(sq);
}

fn main() {}
