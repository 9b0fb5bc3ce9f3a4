//! The striding queue against literal bytes: the WQEs its constructor writes, the packets of
//! hand-written CQEs (plain, filler, malformed, error, a compressed session), and what it
//! refuses to be built from.

extern crate std;

use std::boxed::Box;
use std::vec::Vec;

use super::*;
use crate::prm::cqe::op;
use crate::state::{CqBinding, RqRef, SqRef};
use crate::testutil::{Block, Mem, Raw};

type NoBindings = &'static [CqBinding<SqRef<'static>, RqRef<'static>>];
type State = Box<StridingState<Box<[StrideSlot]>>>;

/// Four WQEs of 8 strides of 64 bytes; its ring, record and buffer; a CQ of 16 entries.
struct Fixture {
    ring: Raw<Block>,
    dbrec: Raw<u32>,
    buf: Raw<Block>,
    mem: Mem,
}

const CFG: StrideConfig = StrideConfig {
    log_num_strides: 3,
    log_stride_size: 6,
};
const LKEY: u32 = 0x77;

impl Fixture {
    fn new() -> Self {
        Self {
            ring: Raw::new(Block([0xee; 64]), 2),
            dbrec: Raw::new(0, 2),
            buf: Raw::new(Block([0; 64]), 4 * 8),
            mem: Mem::new(1, 0, 16, 0, 16),
        }
    }

    fn layout(&self) -> WqLayout {
        WqLayout {
            buf: self.ring.ptr().cast(),
            wqe_cnt: 4,
            stride: 32,
        }
    }

    fn buffer(&self) -> StrideBuffer {
        StrideBuffer {
            addr: self.buf.ptr().cast(),
            len: 4 * 512,
            lkey: LKEY,
        }
    }

    fn state() -> State {
        let slots: Box<[StrideSlot]> = (0..4).map(|_| StrideSlot::new()).collect();
        Box::new(StridingState::new(slots).unwrap())
    }

    fn queue(&self) -> StridingRq<State> {
        // SAFETY: the fixture's memory outlives the queue (dropped first by the tests).
        unsafe {
            StridingRq::new(
                &self.layout(),
                self.dbrec.ptr(),
                CFG,
                self.buffer(),
                Self::state(),
            )
        }
        .unwrap()
    }

    fn cq(&self) -> CompletionQueue<NoBindings> {
        // SAFETY: as above; the only poller.
        unsafe { CompletionQueue::new(&self.mem.cq_layout(), &[][..]) }.unwrap()
    }

    fn dbrec(&self) -> u32 {
        u32::from_be(
            self.dbrec.bytes()[..4]
                .try_into()
                .map(u32::from_ne_bytes)
                .unwrap(),
        )
    }
}

/// A striding receive CQE: WQE `wqe_id`, first stride `stride`, `byte_cnt` as given (owner 0).
fn cqe(wqe_id: u16, stride: u16, byte_cnt: u32) -> [u8; 64] {
    let mut c = [0u8; 64];
    c[2..4].copy_from_slice(&wqe_id.to_be_bytes());
    c[28] = CQE_L2_OK | CQE_L4_OK;
    c[32..36].copy_from_slice(&0x400u32.to_be_bytes());
    c[44..48].copy_from_slice(&byte_cnt.to_be_bytes());
    c[48..56].copy_from_slice(&0x1122_3344_5566_7788u64.to_be_bytes());
    c[56..60].copy_from_slice(&0xab_cdefu32.to_be_bytes());
    c[60..62].copy_from_slice(&stride.to_be_bytes());
    c[63] = op::RESP_SEND << 4;
    c
}

fn packet_bc(strides: u32, len: u32) -> u32 {
    strides << 16 | len
}

#[test]
fn the_constructor_writes_every_wqe_and_posts_them() {
    let f = Fixture::new();
    let rq = f.queue();
    let ring = f.ring.bytes();
    let base = f.buf.ptr().as_ptr() as u64;
    for i in 0..4usize {
        let w = &ring[i * 32..i * 32 + 32];
        assert_eq!(&w[..16], &[0; 16], "WQE {i}: the next segment, zero");
        let d = DataSeg::new_unchecked(&w[16..32]);
        assert_eq!(
            (d.byte_count(), d.lkey(), d.addr()),
            (512, LKEY, base + i as u64 * 512),
            "WQE {i}"
        );
    }
    assert_eq!((f.dbrec(), rq.head(), rq.entries()), (4, 4, 4));
    assert_eq!(rq.strides(), CFG);
    drop(rq);
}

#[test]
fn what_the_queue_is_not_built_from() {
    let f = Fixture::new();
    let build = |layout: WqLayout, cfg: StrideConfig, buffer: StrideBuffer, state: State| {
        // SAFETY: refused before anything is written (the ring is checked below).
        unsafe { StridingRq::new(&layout, f.dbrec.ptr(), cfg, buffer, state) }.map(drop)
    };
    let l = f.layout();
    let b = f.buffer();
    assert_eq!(
        build(WqLayout { wqe_cnt: 3, ..l }, CFG, b, Fixture::state()),
        Err(LayoutError::NotPowerOfTwo { count: 3 })
    );
    assert_eq!(
        build(WqLayout { stride: 16, ..l }, CFG, b, Fixture::state()),
        Err(LayoutError::BadStride { stride: 16 })
    );
    let few: Box<[StrideSlot]> = (0..2).map(|_| StrideSlot::new()).collect();
    assert_eq!(
        build(l, CFG, b, Box::new(StridingState::new(few).unwrap())),
        Err(LayoutError::StorageLength {
            needed: 4,
            given: 2
        })
    );
    for (n, s) in [(2, 6), (17, 6), (3, 5), (3, 14)] {
        let cfg = StrideConfig {
            log_num_strides: n,
            log_stride_size: s,
        };
        assert_eq!(
            build(l, cfg, b, Fixture::state()),
            Err(LayoutError::Strides {
                log_num_strides: n,
                log_stride_size: s
            })
        );
    }
    assert_eq!(
        build(l, CFG, StrideBuffer { len: 2047, ..b }, Fixture::state()),
        Err(LayoutError::StrideBuffer {
            needed: 2048,
            given: 2047
        })
    );
    assert_eq!(f.ring.bytes(), std::vec![0xee; 128], "nothing written");
    assert_eq!(f.dbrec(), 0, "nothing posted");
}

#[test]
fn packets_fillers_and_posting_again() {
    let f = Fixture::new();
    let rq = f.queue();
    let mut cq = f.cq();
    // The device's bytes: WQE 0 stride 0 (100 bytes), stride 2 (200 bytes), then a filler.
    let one: Vec<u8> = (0..100u8).collect();
    let two: Vec<u8> = (0..200u8).map(|b| b ^ 0x5a).collect();
    f.buf.write_bytes(0, &one);
    f.buf.write_bytes(128, &two);
    f.mem.put_cqe(0, cqe(0, 0, packet_bc(2, 100)));
    f.mem.put_cqe(1, cqe(0, 2, packet_bc(4, 200)));
    f.mem.put_cqe(2, cqe(0, 6, mpwrq::FILLER | 2 << 16));
    let mut got = Vec::new();
    assert_eq!(rq.poll_packets(&mut cq, 8, |p| got.push(p)), 2);
    assert_eq!(f.mem.cq_dbrec(), 3, "the filler consumed too");
    assert_eq!(got[0].bytes(), &one[..]);
    assert_eq!(got[1].bytes(), &two[..]);
    let p = &got[1];
    assert_eq!((p.len(), p.strides(), p.wqe_index()), (200, 4, 0));
    assert_eq!(
        (p.timestamp(), p.flow_tag()),
        (0x1122_3344_5566_7788, 0xab_cdef)
    );
    assert!(p.l2_ok() && !p.l3_ok() && p.l4_ok() && !p.csum_ok() && !p.in_session());
    // The filler's 2 strides are back; the packets' 6 are not: WQE 0 stays out.
    drop(got.remove(0));
    assert_eq!(rq.head(), 4);
    got.pop().unwrap().release();
    assert_eq!((rq.head(), f.dbrec()), (5, 5), "WQE 0 posted again");
    assert_eq!(rq.poll_packets(&mut cq, 8, |_| {}), 0);
}

#[test]
fn malformed_and_error_cqes() {
    let f = Fixture::new();
    let rq = f.queue();
    let mut cq = f.cq();
    // Strides past the WQE's end, a length longer than its strides, none at all.
    f.mem.put_cqe(0, cqe(1, 6, packet_bc(3, 100)));
    f.mem.put_cqe(1, cqe(1, 0, packet_bc(1, 65)));
    f.mem.put_cqe(2, cqe(1, 1, packet_bc(0, 0)));
    let mut err = cqe(1, 0, 0);
    err[55] = 0x04;
    err[54] = 0x33;
    err[63] = op::RESP_ERR << 4;
    f.mem.put_cqe(3, err);
    f.mem.put_cqe(4, cqe(2, 0, packet_bc(1, 60)));
    assert_eq!(rq.poll_packets(&mut cq, 8, |_| panic!("no packet")), 0);
    assert_eq!(rq.malformed(), 3);
    assert_eq!(rq.error(), Some((WcStatus::LocProtErr, 0x33)));
    assert_eq!(f.mem.cq_dbrec(), 4, "the poll ends after the error CQE");
    assert_eq!(rq.poll_packets(&mut cq, 8, drop), 1);
}

#[test]
fn another_queues_cqe_ends_the_poll() {
    let f = Fixture::new();
    let mut rq = f.queue();
    rq.set_user_index(Some(0x400));
    let mut cq = f.cq();
    f.mem.put_cqe(0, cqe(0, 0, packet_bc(1, 60)));
    let mut other = cqe(0, 1, packet_bc(1, 60));
    other[32..36].copy_from_slice(&0x401u32.to_be_bytes());
    f.mem.put_cqe(1, other);
    assert_eq!(rq.poll_packets(&mut cq, 8, drop), 1);
    assert_eq!(f.mem.cq_dbrec(), 1, "the other queue's CQE is left");
}

#[test]
fn a_compressed_session_in_the_stride_index_format() {
    let f = Fixture::new();
    let rq = f.queue();
    let mut cq = f.cq();
    // Ten completions in WQE 1 (eight packets of one stride, then two): the title, the first
    // array after it, the second array at entry 8.
    let mut title = cqe(1, 0, 10);
    title[63] |= 0x0c;
    let mini = |stride: u16, bc: u32| {
        let mut m = [0u8; 8];
        m[2..4].copy_from_slice(&stride.to_be_bytes());
        m[4..8].copy_from_slice(&bc.to_be_bytes());
        m
    };
    let mut a0 = [0u8; 64];
    for k in 0..8u16 {
        let len = 56 + u32::from(k);
        a0[k as usize * 8..k as usize * 8 + 8].copy_from_slice(&mini(k, packet_bc(1, len)));
        f.buf.write_bytes(512 + k as usize * 64, &[k as u8; 64]);
    }
    let mut a1 = [0u8; 64];
    // Packet 8 would need more strides than are left: not here; the filler takes none.
    a1[..8].copy_from_slice(&mini(8, packet_bc(0, 0) | mpwrq::FILLER));
    a1[8..16].copy_from_slice(&mini(8, mpwrq::FILLER));
    f.mem.put_raw(1, a0);
    f.mem.put_raw(8, a1);
    f.mem.put_cqe(0, title);
    let mut lens = Vec::new();
    // Three at a time: polls end inside the session and resume it.
    for _ in 0..4 {
        let n = rq.poll_packets(&mut cq, 3, |p| {
            assert!(p.in_session());
            assert_eq!(p.bytes()[0] as usize, lens.len());
            assert_eq!(p.timestamp(), 0x1122_3344_5566_7788);
            lens.push(p.len());
        });
        assert!(n <= 3);
        // Between polls the entry at the consumer counter passes no ownership check (an
        // ordinary poll finds nothing there), and those consumed are handed back invalid.
        let ci = cq.consumer() as usize;
        for i in 0..=ci.min(f.mem.cq_entries() - 1) {
            assert_eq!(
                f.mem.op_own(i) >> 4,
                op::INVALID,
                "entry {i} at consumer {ci}"
            );
        }
    }
    assert_eq!(lens, (56..64).collect::<Vec<_>>());
    assert_eq!(rq.malformed(), 0);
    assert_eq!(f.mem.cq_dbrec(), 10);
    // WQE 1's 8 strides are back but WQE 0 is not: nothing posted yet.
    assert_eq!(rq.head(), 4);
}
