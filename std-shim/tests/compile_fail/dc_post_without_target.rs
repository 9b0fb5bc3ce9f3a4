//! A DC initiator's send queue takes only requests that name their target: it has no `post`
//! or `stage` of its own and is no `PostSend`, so an RC-style post does not compile.

use zverbs::dc::DcSendQueue;
use zverbs::{PostSend, RemoteBuf, SendWr, Sge};

fn post(sq: &mut DcSendQueue, sgl: &[Sge]) {
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

fn hand_over(sq: &mut DcSendQueue) {
    generic(sq);
}

fn main() {}
