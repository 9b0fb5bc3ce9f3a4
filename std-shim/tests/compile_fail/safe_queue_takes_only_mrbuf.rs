//! The safe layer posts only spans of library-owned buffers (`BufSlice` of an `MrBuf`): a
//! scatter entry or a slice of the caller's own memory is not one.

use zverbs::{RecvQueue, RemoteBuf, SendFlags, SendQueue, Sge, SrqQueue};

fn post(
    sq: &mut SendQueue,
    rq: &mut RecvQueue,
    srq: &mut SrqQueue,
    mine: &mut [u8],
) {
    let remote = RemoteBuf::new(0x1000, 7);
    let sge = Sge::from_slice(mine, 0x1100);
    sq.write(1, sge, remote, SendFlags::SIGNALED).unwrap();
    sq.read(2, &mut *mine, remote, SendFlags::SIGNALED).unwrap();
    rq.post(3, sge).unwrap();
    srq.post(4, sge).unwrap();
}

fn main() {}
