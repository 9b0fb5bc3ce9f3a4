//! The crate's re-exports are the data path users program against: a request built with
//! `zverbs::SendWr` posts through `zverbs::mlx5::SendQueue`, and `zverbs::mlx5::prm` decodes it.

use std::ptr::NonNull;

use zverbs::mlx5::prm::wqe::CtrlSeg;
use zverbs::mlx5::{BfLayout, QpLayout, SendQueue, SqCaps, SqSlot, SqState, WqLayout};
use zverbs::{PostSend, RemoteBuf, SendWr, Sge};

#[repr(C, align(64))]
struct Block([u8; 64]);

#[test]
fn a_request_posts_through_the_reexported_backend() {
    let mut ring: Vec<Block> = (0..4).map(|_| Block([0; 64])).collect();
    let mut dbrec = [0u32; 2];
    // Two 256-byte BlueFlame buffers, aligned as a register is.
    let mut bf: Vec<Block> = (0..8).map(|_| Block([0; 64])).collect();
    let slots: Vec<SqSlot> = (0..4).map(|_| SqSlot::new()).collect();
    let state = SqState::new(&slots[..]).unwrap();
    let layout = QpLayout {
        qpn: 0x77,
        dbrec: NonNull::from(&mut dbrec[0]),
        sq: WqLayout {
            buf: NonNull::from(&mut ring[0]).cast(),
            wqe_cnt: 4,
            stride: 64,
        },
        rq: WqLayout {
            buf: NonNull::dangling(),
            wqe_cnt: 0,
            stride: 16,
        },
        bf: BfLayout {
            reg: NonNull::from(&mut bf[0]).cast(),
            size: 256,
        },
    };
    let caps = SqCaps {
        max_send_sge: 1,
        max_inline_data: 0,
        sig_all: false,
        max_signaled: 4,
        transport: zverbs::mlx5::Transport::Rc,
    };
    {
        // SAFETY: the memory outlives the queue (dropped at the end of the block) and only it
        // posts.
        let mut sq = unsafe { SendQueue::new(&layout, caps, &state, None) }.unwrap();
        let sgl = [Sge::new(0x1000, 32, 5)];
        // SAFETY: nothing executes the request.
        unsafe { sq.post(&SendWr::write(1, &sgl, RemoteBuf::new(0x2000, 6)).signaled()) }.unwrap();
    }
    let ctrl = CtrlSeg::new_unchecked(&ring[0].0[..16]);
    assert_eq!((ctrl.opcode(), ctrl.qpn(), ctrl.ds()), (0x08, 0x77, 3));
    assert_eq!(u32::from_be(dbrec[1]), 1);
}
