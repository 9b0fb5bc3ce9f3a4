//! Posting memory the library does not own is `unsafe`: the device reads and writes it by
//! address, and only the caller can promise it stays registered and unreferenced.

use zverbs::safe::SafeSendQueue;
use zverbs::{AnyRecvQueue, AnySendQueue, PostRecv, PostSend, RecvWr, RemoteBuf, SendWr, Sge};

fn post(sq: &mut AnySendQueue, rq: &mut AnyRecvQueue, mine: &mut Vec<u8>) {
    let sgl = [Sge::from_slice(mine, 0x1100)];
    let remote = RemoteBuf::new(0x1000, 7);
    sq.post(&SendWr::write(1, &sgl, remote)).unwrap();
    sq.stage(&SendWr::write(2, &sgl, remote)).unwrap();
    sq.post_all(&[SendWr::send(3, &sgl)]).unwrap();
    rq.post(&RecvWr::new(4, &sgl)).unwrap();
    rq.post_all(&[RecvWr::new(5, &sgl)]).unwrap();
    let mut batch = sq.batch();
    batch.post(&SendWr::send(6, &sgl)).unwrap();
    batch.finish();
}

fn generic(sq: &mut impl PostSend, sgl: &[Sge]) {
    sq.post(&SendWr::send(7, sgl)).unwrap();
}

fn through_the_safe_layer(sq: &mut SafeSendQueue<AnySendQueue>, sgl: &[Sge]) {
    // The wrapped queue is reachable, but posting through it is the same `unsafe` call.
    sq.get_mut().post(&SendWr::send(8, sgl)).unwrap();
}

fn main() {}
