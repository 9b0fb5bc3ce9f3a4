//! Posting memory the library does not own is `unsafe`: the device reads and writes it by
//! address, and only the caller can promise it stays registered and unreferenced.

use zverbs::{PostRecv, PostSend, RecvQueue, RecvWr, RemoteBuf, SendQueue, SendWr, Sge, SrqQueue};

fn post(sq: &mut SendQueue, rq: &mut RecvQueue, srq: &mut SrqQueue, mine: &mut Vec<u8>) {
    let sgl = [Sge::from_slice(mine, 0x1100)];
    let remote = RemoteBuf::new(0x1000, 7);
    sq.post(&SendWr::write(1, &sgl, remote)).unwrap();
    sq.stage(&SendWr::write(2, &sgl, remote)).unwrap();
    sq.post_all(&[SendWr::send(3, &sgl)]).unwrap();
    PostRecv::post(rq, &RecvWr::new(4, &sgl)).unwrap();
    PostRecv::post(srq, &RecvWr::new(9, &sgl)).unwrap();
    rq.post_all(&[RecvWr::new(5, &sgl)]).unwrap();
    let mut batch = PostSend::batch(sq);
    batch.post(&SendWr::send(6, &sgl)).unwrap();
    batch.finish();
}

fn generic(sq: &mut impl PostSend, sgl: &[Sge]) {
    sq.post(&SendWr::send(7, sgl)).unwrap();
}

fn to_a_dc_target(sq: &mut SendQueue, peer: &zverbs::dc::DcPeer, sgl: &[Sge]) {
    // A request to a DC target over the caller's memory is the same `unsafe` call.
    sq.post_to(peer, &SendWr::send(8, sgl)).unwrap();
}

fn main() {}
