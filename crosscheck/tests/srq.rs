//! Shared receive WQEs: a next segment and data segments laid out with zverbs' views are the
//! bytes libmlx5's `mlx5_post_srq_recv` writes, the free list linked with
//! `SrqNextSeg::set_next_wqe_index` is the one `set_srq_buf_ll` links, and the getters read
//! `struct mlx5_wqe_srq_next_seg` as C does.
//!
//! Property tests (`proptest`, see `zverbs_crosscheck::prop`): the rings start as random
//! bytes, the same on both sides, so a byte written on one side alone shows.

use proptest::prelude::*;
use zverbs_core::Sge;
use zverbs_crosscheck::probe;
use zverbs_crosscheck::prop::{check, edgy_u16, edgy_u32, edgy_u64};
use zverbs_mlx5dv::prm::INVALID_LKEY;
use zverbs_mlx5dv::prm::wqe::{DataSeg, SRQ_DATA, SrqNextSeg, data, srq_max_gs};

/// Randomized cases per comparison.
const CASES: u32 = 100_000;

/// A WQE stride libmlx5 may choose (a power of two of at least 32 bytes).
fn stride() -> impl Strategy<Value = u32> {
    proptest::sample::select(vec![32u32, 64, 128, 256, 512])
}

fn sge() -> impl Strategy<Value = Sge> {
    (edgy_u64(), edgy_u32(), edgy_u32()).prop_map(|(addr, length, lkey)| Sge { addr, length, lkey })
}

/// One shared receive WQE of `stride` bytes (random, its next segment included) and a list
/// of at most as many entries as it holds.
fn srq_case() -> impl Strategy<Value = (u32, Vec<u8>, Vec<Sge>)> {
    stride().prop_flat_map(|stride| {
        let max_gs = srq_max_gs(stride as usize);
        (
            Just(stride),
            proptest::collection::vec(any::<u8>(), stride as usize),
            proptest::collection::vec(sge(), 0..=max_gs),
        )
    })
}

#[test]
fn srq_wqe_matches_libmlx5_post_srq_recv() {
    let cases = check(
        file!(),
        CASES,
        0x5eed_54a0,
        &srq_case(),
        |(stride, start, sgl)| {
            let mut c = start.clone();
            let next = probe::post_srq_recv(&mut c, stride, 0, &sgl).expect("list fits");

            let mut ours = start;
            let max_gs = srq_max_gs(stride as usize);
            assert_eq!(
                SrqNextSeg::new_unchecked(&ours[..]).next_wqe_index(),
                next,
                "next_wqe_index"
            );
            let seg = |i: usize| SRQ_DATA + i * data::LEN..SRQ_DATA + (i + 1) * data::LEN;
            for (i, s) in sgl.iter().enumerate() {
                DataSeg::new_unchecked(&mut ours[seg(i)]).set(s.length, s.lkey, s.addr);
            }
            if sgl.len() < max_gs {
                DataSeg::new_unchecked(&mut ours[seg(sgl.len())]).set(0, INVALID_LKEY, 0);
            }
            assert_eq!(ours, c, "stride {stride}, {} entries", sgl.len());
        },
    );
    eprintln!("srq wqe: {cases} randomized receives vs libmlx5's mlx5_post_srq_recv");
}

#[test]
fn srq_list_matches_set_srq_buf_ll() {
    let inputs = stride().prop_flat_map(|stride| {
        (1usize..=64).prop_flat_map(move |n| {
            (
                Just(stride),
                proptest::collection::vec(any::<u8>(), n * stride as usize),
                0..=n as u32,
                0..=n as u32,
            )
        })
    });
    let cases = check(
        file!(),
        CASES / 10,
        0x5eed_111c,
        &inputs,
        |(stride, start, a, b)| {
            let (first, end) = (a.min(b), a.max(b));
            let mut c = start.clone();
            probe::srq_link(&mut c, stride, first, end);
            let mut ours = start;
            let s = stride as usize;
            for i in first..end {
                let at = i as usize * s;
                SrqNextSeg::new_unchecked(&mut ours[at..at + 16]).set_next_wqe_index(i as u16 + 1);
            }
            assert_eq!(ours, c, "stride {stride}, WQEs {first}..{end}");
            for wqe in c.chunks_exact(s) {
                let head: &[u8; 16] = wqe[..16].try_into().expect("16 bytes");
                let v = SrqNextSeg::new_unchecked(head);
                assert_eq!(
                    (v.next_wqe_index(), v.signature()),
                    probe::read_srq_next(head)
                );
            }
        },
    );
    eprintln!("srq list: {cases} randomized rings vs libmlx5's set_srq_buf_ll");
}

#[test]
fn srq_next_seg_setters_write_what_the_struct_reads() {
    let inputs = (edgy_u16(), any::<u8>(), any::<[u8; 16]>());
    let cases = check(
        file!(),
        CASES,
        0x5eed_5e9e,
        &inputs,
        |(next, sig, start)| {
            let mut b = start;
            let mut v = SrqNextSeg::new_unchecked(&mut b);
            v.set_next_wqe_index(next);
            v.set_signature(sig);
            assert_eq!(probe::read_srq_next(&b), (next, sig));
            let mut z = start;
            SrqNextSeg::new_unchecked(&mut z).set(next);
            assert_eq!(probe::read_srq_next(&z), (next, 0));
            assert!(
                z.iter()
                    .enumerate()
                    .all(|(i, &x)| x == 0 || (2..4).contains(&i))
            );
        },
    );
    eprintln!("srq next segment: {cases} randomized setters read back through the C struct");
}
