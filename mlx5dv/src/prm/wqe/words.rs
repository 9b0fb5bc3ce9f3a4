//! The send WQE's segments as values: each encoder returns a segment's bytes in memory order
//! as native 64-bit words ([`Seg`]: two words, 16 bytes), the form a post holds them in
//! registers and stores them with whole-word stores, to the ring and to the BlueFlame buffer.
//! This is the one encoding of the send segments: every send path (single posts, batches,
//! staged requests, inline data, the DC and UD headers, the Ethernet segment, prepared
//! requests and frames) builds its segments with these functions, and no code outside prm
//! knows a segment's byte layout. The views' setters ([`CtrlSeg::set`] and the others) store
//! what these return, except [`DataSeg::set`], which stores its three fields one by one: on
//! the paths that write a data segment through it (a prepared frame's payload, receive WQEs)
//! that is one instruction fewer than a first word built of two fields. A property test below
//! keeps every view equal to its encoder; `zverbs-crosscheck` compares both with `mlx5dv.h`.
//!
//! Every field is big-endian in memory, so the words are the same on any host: word `i`
//! holds bytes `8 i..8 i + 8` (`u64::from_ne_bytes` of them).
//!
//! A field left 0 adds nothing to its word, so the segments compose with `|` ([`or`]): a
//! path that fills a field per post keeps the segment encoded with that field 0 and ors in
//! the field alone, encoded by the same function (a prepared request caches
//! [`raddr`]`(0, rkey)` and ors in [`raddr`]`(addr, 0)`), or by the pieces of the control
//! segment: [`ctrl_qpn`], the queue's part; [`ctrl_index`], the WQE index; [`ctrl_imm`], the
//! immediate. [`ctrl`] is [`ctrl_op`] or-ed with [`ctrl_qpn`] (and the opcode modifier).
//!
//! [`CtrlSeg::set`]: super::CtrlSeg::set
//! [`DataSeg::set`]: super::DataSeg::set

use super::{av, eth};

/// A segment's 16 bytes as two 64-bit words in memory order.
pub type Seg = [u64; 2];

/// The 64-bit word holding `a` then `b`, big-endian, in memory order.
#[inline(always)]
fn word2(a: u32, b: u32) -> u64 {
    let mut w = [0u8; 8];
    w[..4].copy_from_slice(&a.to_be_bytes());
    w[4..].copy_from_slice(&b.to_be_bytes());
    u64::from_ne_bytes(w)
}

/// The 64-bit word holding `x` big-endian, in memory order.
#[inline(always)]
fn word64(x: u64) -> u64 {
    u64::from_ne_bytes(x.to_be_bytes())
}

/// The segments `a` and `b` or-ed word by word: two segments each with the other's fields 0
/// make one.
#[inline(always)]
pub fn or(a: Seg, b: Seg) -> Seg {
    [a[0] | b[0], a[1] | b[1]]
}

/// The segment's bytes.
#[inline(always)]
pub fn to_bytes(s: Seg) -> [u8; 16] {
    let mut b = [0u8; 16];
    put(&mut b, s);
    b
}

/// Stores segment `s` into `b`.
#[inline(always)]
pub fn put(b: &mut [u8; 16], s: Seg) {
    b[..8].copy_from_slice(&s[0].to_ne_bytes());
    b[8..].copy_from_slice(&s[1].to_ne_bytes());
}

/// The control segment (`struct mlx5_wqe_ctrl_seg`) as `mlx5dv_set_ctrl_seg` writes it:
/// `opmod_idx_opcode` = `opmod << 24 | wqe_index << 8 | opcode`, `qpn_ds` = `qpn << 8 | ds`,
/// `fm_ce_se`, `imm` (the host value of the big-endian wire immediate), with `signature` and
/// `dci_stream_channel_id` 0 (which that helper leaves as they were).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub fn ctrl(
    wqe_index: u16,
    opcode: u8,
    opmod: u8,
    qpn: u32,
    fm_ce_se: u8,
    ds: u8,
    imm: u32,
) -> Seg {
    or(
        ctrl_op(wqe_index, opcode, opmod, u32::from(ds), fm_ce_se, imm),
        ctrl_qpn(qpn),
    )
}

/// The control segment of [`ctrl`] with QP number 0: what a post sets per request, to be
/// or-ed with the queue's [`ctrl_qpn`]. `ds` is the WQE's size in 16-byte units (6 bits).
#[inline(always)]
pub fn ctrl_op(wqe_index: u16, opcode: u8, opmod: u8, ds: u32, fm_ce_se: u8, imm: u32) -> Seg {
    [
        word2(
            (u32::from(opmod) << 24) | (u32::from(wqe_index) << 8) | u32::from(opcode),
            ds,
        ),
        word2(u32::from(fm_ce_se), imm),
    ]
}

/// The control segment's QP number (`qpn_ds` with `ds` 0), every other field 0: a queue's
/// part of each of its control segments, encoded once.
#[inline(always)]
pub fn ctrl_qpn(qpn: u32) -> Seg {
    [word2(0, qpn << 8), 0]
}

/// The control segment's WQE index alone: or-ed per post into a control segment encoded
/// with index 0 (a prepared request's).
#[inline(always)]
pub fn ctrl_index(wqe_index: u16) -> Seg {
    [word2(u32::from(wqe_index) << 8, 0), 0]
}

/// The control segment's immediate alone (`imm`, the host value of the big-endian wire
/// immediate).
#[inline(always)]
pub fn ctrl_imm(imm: u32) -> Seg {
    [0, word2(0, imm)]
}

/// The remote address segment (`struct mlx5_wqe_raddr_seg`): `raddr`, `rkey`, the reserved
/// word 0.
#[inline(always)]
pub fn raddr(addr: u64, rkey: u32) -> Seg {
    [word64(addr), word2(rkey, 0)]
}

/// The data segment (`struct mlx5_wqe_data_seg`) as `mlx5dv_set_data_seg` writes it:
/// `byte_count`, `lkey`, `addr`.
#[inline(always)]
pub fn data(byte_count: u32, lkey: u32, addr: u64) -> Seg {
    [word2(byte_count, lkey), word64(addr)]
}

/// The atomic segment (`struct mlx5_wqe_atomic_seg`): `swap_add`, `compare` (0 for a
/// fetch-and-add).
#[inline(always)]
pub fn atomic(swap_add: u64, compare: u64) -> Seg {
    [word64(swap_add), word64(compare)]
}

/// The inline segment's header (`struct mlx5_wqe_inline_seg`): `byte_count` = `len` with
/// [`INLINE_SEG`](crate::prm::INLINE_SEG), its 4 bytes; the data follows it.
#[inline(always)]
pub fn inline_head(len: u32) -> [u8; 4] {
    super::inline_byte_count(len).to_be_bytes()
}

/// The first unit of an Ethernet segment (`struct mlx5_wqe_eth_seg`): `cs_flags`, `mss` 0,
/// `inline_hdr_sz` and the first two inlined frame bytes `start` (zeros when none are
/// inlined); the reserved bytes 0, as libmlx5's `memset`.
#[inline(always)]
pub fn eth(cs_flags: u8, inline_hdr_sz: u16, start: [u8; 2]) -> Seg {
    const _: () = assert!(eth::CS_FLAGS == 4 && eth::INLINE_HDR_SZ.start == 12);
    const _: () = assert!(eth::INLINE_HDR_START == 14);
    let sz = inline_hdr_sz.to_be_bytes();
    [
        // `rsvd0`, `cs_flags`, `rsvd1`, `mss`.
        word2(0, u32::from(cs_flags) << 24),
        // `rsvd2`, `inline_hdr_sz`, the first two bytes.
        u64::from_ne_bytes([0, 0, 0, 0, sz[0], sz[1], start[0], start[1]]),
    ]
}

/// An Ethernet segment inlining the frame's first 18 bytes `head`
/// ([`ETH_L2_INLINE_HEADER_SIZE`](crate::prm::ETH_L2_INLINE_HEADER_SIZE)): its two units,
/// [`eth()`] then the next 16 bytes.
#[inline(always)]
pub fn eth_l2(cs_flags: u8, head: &[u8; 18]) -> [u64; 4] {
    let h = head;
    let [e0, e1] = eth(
        cs_flags,
        crate::prm::ETH_L2_INLINE_HEADER_SIZE,
        [h[0], h[1]],
    );
    [
        e0,
        e1,
        u64::from_ne_bytes([h[2], h[3], h[4], h[5], h[6], h[7], h[8], h[9]]),
        u64::from_ne_bytes([h[10], h[11], h[12], h[13], h[14], h[15], h[16], h[17]]),
    ]
}

/// The address vector `av` (48 bytes in device byte order) as words.
#[inline(always)]
fn av_words(av: &[u8; av::LEN]) -> [u64; 6] {
    let (w, _) = av.as_chunks::<8>();
    core::array::from_fn(|i| u64::from_ne_bytes(w[i]))
}

/// The datagram segment of a UD send (`struct mlx5_wqe_datagram_seg`, three units) as
/// libmlx5's `set_datagram_seg` writes it: the address vector `av` (as
/// `mlx5dv_init_obj(MLX5DV_OBJ_AH)` hands it out), with `dqp_dct` = `remote_qpn |
/// EXTENDED_UD_AV` and the Q_Key over it (`key.qkey.reserved` kept).
///
/// `remote_qpn` is taken as given, like libmlx5 does: a value above 24 bits spills into the
/// top byte. Checking it is the caller's business.
#[inline(always)]
pub fn datagram(av: &[u8; av::LEN], remote_qpn: u32, qkey: u32) -> [u64; 6] {
    const _: () = assert!(av::QKEY.start == 0 && av::DQP_DCT.start == 8);
    let mut w = av_words(av);
    // Bytes 0..4 (`key.qkey.qkey`) and 8..12 (`dqp_dct`) replaced; 4..8 and 12..16 kept.
    let keep = word2(0, !0);
    w[0] = (w[0] & keep) | word2(qkey, 0);
    w[1] = (w[1] & keep) | word2(remote_qpn | crate::prm::EXTENDED_UD_AV, 0);
    w
}

/// The datagram segment of a DC initiator's request, as libmlx5's `mlx5dv_wr_set_dc_addr`
/// writes it: the address vector `av` (as for [`datagram`]), the DCT number and
/// `EXTENDED_UD_AV` or-ed into its `dqp_dct`, and the access key over `key.dc_key` (all 8
/// bytes).
///
/// `dctn` is taken as given: a value above 24 bits spills into the top byte. Checking it is
/// the caller's business.
#[inline(always)]
pub fn dc_datagram(av: &[u8; av::LEN], dctn: u32, dc_key: u64) -> [u64; 6] {
    const _: () = assert!(av::DC_KEY.start == 0 && av::DC_KEY.end == 8);
    let mut w = av_words(av);
    w[0] = word64(dc_key);
    w[1] |= word2(dctn | crate::prm::EXTENDED_UD_AV, 0);
    w
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::super::{AtomicSeg, CtrlSeg, DataSeg, DatagramSeg, EthSeg, RaddrSeg};
    use super::*;

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: if cfg!(miri) { 2 } else { 64 },
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        /// The field views write the bytes the encoders return (each view is crosschecked
        /// with `mlx5dv.h` in `zverbs-crosscheck`).
        #[test]
        fn the_field_views_write_what_the_encoders_return(
            (idx, op, opmod, qpn, fm, ds, imm) in
                (any::<u16>(), any::<u8>(), any::<u8>(), 0u32..1 << 24, any::<u8>(), 0u8..64,
                    any::<u32>()),
            (a, b, k, l) in (any::<u64>(), any::<u64>(), any::<u32>(), any::<u32>()),
            (cs, sz, start) in (any::<u8>(), any::<u16>(), any::<[u8; 2]>()),
            av in any::<[u8; 48]>(),
        ) {
            let mut v = [0x5au8; 16];
            CtrlSeg::new_unchecked(&mut v).set(idx, op, opmod, qpn, fm, ds, imm);
            prop_assert_eq!(v, to_bytes(ctrl(idx, op, opmod, qpn, fm, ds, imm)));
            RaddrSeg::new_unchecked(&mut v).set(a, k);
            prop_assert_eq!(v, to_bytes(raddr(a, k)));
            DataSeg::new_unchecked(&mut v).set(k, l, a);
            prop_assert_eq!(v, to_bytes(data(k, l, a)));
            AtomicSeg::new_unchecked(&mut v).set(a, b);
            prop_assert_eq!(v, to_bytes(atomic(a, b)));
            EthSeg::new_unchecked(&mut v).set(cs, sz, start);
            prop_assert_eq!(v, to_bytes(eth(cs, sz, start)));
            let words48 = |w: [u64; 6]| -> [u8; 48] {
                let mut b = [0u8; 48];
                for (c, w) in b.chunks_exact_mut(8).zip(w) {
                    c.copy_from_slice(&w.to_ne_bytes());
                }
                b
            };
            let mut g = [0xa5u8; 48];
            DatagramSeg::new_unchecked(&mut g).set_from_av(&av, k, l);
            prop_assert_eq!(g, words48(datagram(&av, k, l)));
            DatagramSeg::new_unchecked(&mut g).set_dc_from_av(&av, k, a);
            prop_assert_eq!(g, words48(dc_datagram(&av, k, a)));
        }
    }

    #[test]
    fn ctrl_is_its_pieces_or_ed() {
        let whole = ctrl(0xbeef, 0x0b, 0x5a, 0x00ab_cdef, 0x80, 0x3f, 0xcafe_f00d);
        assert_eq!(
            to_bytes(whole),
            [
                0x5a, 0xbe, 0xef, 0x0b, 0xab, 0xcd, 0xef, 0x3f, 0, 0, 0, 0x80, 0xca, 0xfe, 0xf0,
                0x0d
            ]
        );
        let cached = or(ctrl_op(0, 0x0b, 0x5a, 0x3f, 0x80, 0), ctrl_qpn(0x00ab_cdef));
        assert_eq!(
            or(or(cached, ctrl_index(0xbeef)), ctrl_imm(0xcafe_f00d)),
            whole
        );
    }

    #[test]
    fn fields_left_zero_compose() {
        assert_eq!(
            or(raddr(0, 0xdead_beef), raddr(0x7f00_0000_1000, 0)),
            raddr(0x7f00_0000_1000, 0xdead_beef)
        );
        assert_eq!(
            to_bytes(raddr(0x7f00_0000_1000, 0xdead_beef)),
            [
                0, 0, 0x7f, 0, 0, 0, 0x10, 0, 0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 0
            ]
        );
        assert_eq!(
            or(data(0, 0x1100, 0), data(0x100, 0, 0x55a7_b9cd_5000)),
            data(0x100, 0x1100, 0x55a7_b9cd_5000)
        );
        assert_eq!(
            to_bytes(data(0x100, 0x1100, 0x55a7_b9cd_5000)),
            [
                0, 0, 1, 0, 0, 0, 0x11, 0, 0, 0, 0x55, 0xa7, 0xb9, 0xcd, 0x50, 0
            ]
        );
        assert_eq!(
            to_bytes(atomic(0x0102_0304_0506_0708, 0x1112_1314_1516_1718)),
            [
                1, 2, 3, 4, 5, 6, 7, 8, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18
            ]
        );
        assert_eq!(inline_head(20), [0x80, 0, 0, 0x14]);
    }

    #[test]
    fn eth_l2_starts_with_the_first_unit() {
        let head: [u8; 18] = core::array::from_fn(|i| 0x40 + i as u8);
        let w = eth_l2(0xc0, &head);
        assert_eq!(
            to_bytes([w[0], w[1]]),
            [0, 0, 0, 0, 0xc0, 0, 0, 0, 0, 0, 0, 0, 0, 18, 0x40, 0x41]
        );
        let mut rest = [0u8; 16];
        put(&mut rest, [w[2], w[3]]);
        assert_eq!(rest, head[2..]);
    }

    #[test]
    fn datagrams_keep_the_vector_around_their_fields() {
        let av: [u8; 48] = core::array::from_fn(|i| 0x80 | i as u8);
        let bytes = |w: [u64; 6]| -> [u8; 48] {
            let mut b = [0u8; 48];
            for (c, w) in b.chunks_exact_mut(8).zip(w) {
                c.copy_from_slice(&w.to_ne_bytes());
            }
            b
        };
        let mut want = av;
        want[0..4].copy_from_slice(&[0x11, 0x22, 0x33, 0x44]);
        want[8..12].copy_from_slice(&[0x80, 0x01, 0x02, 0x03]);
        assert_eq!(bytes(datagram(&av, 0x01_0203, 0x1122_3344)), want);
        let mut want = av;
        want[0..8].copy_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
        want[8..12].copy_from_slice(&[0x88, 0x89 | 0x05, 0x8a | 0x06, 0x8b | 0x07]);
        assert_eq!(
            bytes(dc_datagram(&av, 0x05_0607, 0x0102_0304_0506_0708)),
            want
        );
    }
}
