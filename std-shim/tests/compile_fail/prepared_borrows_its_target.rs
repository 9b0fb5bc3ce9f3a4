//! A prepared request borrows the target it goes to, as it borrows its buffer: a UD
//! destination (and its address handle) or a DC peer cannot go while the request may still
//! be posted.

use zverbs::dc::DcPeer;
use zverbs::{Changes, MrBuf, SendFlags, SendQueue, UdTarget};

fn datagram(sq: &mut SendQueue, buf: &MrBuf, dest: UdTarget) {
    let p = sq
        .prepare_send_to(&dest, buf.slice(0..64).unwrap(), SendFlags::SIGNALED)
        .unwrap();
    drop(dest);
    sq.post_prepared(&p, Changes::new(1)).unwrap();
}

fn dc(sq: &mut SendQueue, buf: &MrBuf, peer: DcPeer) {
    let p = sq
        .to(&peer)
        .prepare_send(buf.slice(0..64).unwrap(), SendFlags::SIGNALED)
        .unwrap();
    drop(peer);
    sq.post_prepared(&p, Changes::new(1)).unwrap();
}

fn main() {}
