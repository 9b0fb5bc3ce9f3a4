//! Defensive parsing of send and receive WQEs.
//!
//! Ring contents are untrusted input: any bytes may be there. The parser reads only inside the
//! ring (every segment index is masked), never past the doorbell record's producer counter
//! (the control segment is read first, and the rest only once `ds` is known to fit the
//! published blocks), and turns every inconsistency into a vendor syndrome for a "local QP
//! operation" error CQE rather than a panic.

use core::ptr::NonNull;

use crate::mem::{Region, read16};
use crate::vendor;
use zverbs_mlx5dv::DC_AV_DS;
use zverbs_mlx5dv::prm::wqe::{AtomicSeg, CtrlSeg, DataSeg, RaddrSeg, SrqNextSeg, av};
use zverbs_mlx5dv::prm::{INLINE_SEG, INVALID_LKEY, SEGS_PER_BB, opcode};

/// The most segments a WQE can have (`ds` is 6 bits).
pub(crate) const MAX_SEGS: usize = 64;

/// A data segment as the device reads it: `len` is the byte count, 0 meaning 2 GiB.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct DataEntry {
    pub(crate) addr: u64,
    pub(crate) len: u64,
    pub(crate) lkey: u32,
}

impl DataEntry {
    pub(crate) fn from_seg(b: &[u8; 16]) -> Self {
        let d = DataSeg::new_unchecked(b);
        let bc = d.byte_count();
        Self {
            addr: d.addr(),
            // mlx5: a zero byte count means 2 GiB.
            len: if bc == 0 { 1 << 31 } else { u64::from(bc) },
            lkey: d.lkey(),
        }
    }
}

/// The payload of a WQE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Payload {
    /// Data segments (`n` of them in `Wqe::sges`), possibly none.
    Sges(usize),
    /// Inline data of `len` bytes whose header is at segment counter `seg`.
    Inline { seg: u32, len: u32 },
}

/// A parsed send WQE.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Wqe {
    pub(crate) opcode: u8,
    pub(crate) blocks: u32,
    pub(crate) fm_ce_se: u8,
    /// The immediate exactly as the control segment carries it (wire order).
    pub(crate) imm: [u8; 4],
    pub(crate) raddr: u64,
    pub(crate) rkey: u32,
    pub(crate) swap_add: u64,
    pub(crate) compare: u64,
    /// The datagram segment of a UD SEND (the address vector with the destination QPN and
    /// Q_Key), as the ring holds it; zero for other WQEs.
    pub(crate) av: [u8; av::LEN],
    pub(crate) payload: Payload,
    pub(crate) sges: [DataEntry; MAX_SEGS],
}

/// A WQE the device refuses: the vendor syndrome, the opcode byte found (for the CQE), and how
/// many basic blocks to step over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Bad {
    pub(crate) vendor: u8,
    pub(crate) opcode: u8,
    pub(crate) blocks: u32,
}

/// A send ring of `blocks` 64-byte basic blocks.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SqRing {
    pub(crate) region: Region,
    pub(crate) blocks: u32,
}

impl SqRing {
    fn seg_mask(&self) -> u32 {
        self.blocks * SEGS_PER_BB as u32 - 1
    }

    /// Address of segment `seg` (masked into the ring).
    pub(crate) fn seg_ptr(&self, seg: u32) -> NonNull<u8> {
        let off = (seg & self.seg_mask()) as usize * 16;
        debug_assert!(off + 16 <= self.region.len);
        // SAFETY: the masked offset is inside the ring (`blocks * 64` bytes).
        unsafe { self.region.ptr.add(off) }
    }

    /// Segment `seg` (masked into the ring).
    pub(crate) fn seg(&self, seg: u32) -> [u8; 16] {
        // SAFETY: the segment lies in the ring; the driver writes only unpublished segments,
        // and the device reads published ones.
        unsafe { read16(self.seg_ptr(seg)) }
    }

    /// The bytes of an inline payload of `len` bytes whose header is segment `seg`: at most two
    /// contiguous spans (the second when the data meets the ring end and continues at slot 0).
    pub(crate) fn inline_spans(&self, seg: u32, len: u32) -> [(u64, u64); 2] {
        let ring_bytes = u64::from(self.blocks) * 64;
        let off = u64::from(seg & self.seg_mask()) * 16 + 4;
        let len = u64::from(len);
        let first = len.min(ring_bytes - off);
        let base = self.region.ptr.as_ptr() as u64;
        [(base + off, first), (base, len - first)]
    }

    /// The opcode byte of the WQE starting at block `ci`.
    pub(crate) fn opcode_at(&self, ci: u32) -> u8 {
        self.seg(ci.wrapping_mul(SEGS_PER_BB as u32))[3]
    }

    /// Parses the WQE at block counter `ci`, of which `avail` (≥ 1) blocks are published, for
    /// QP `qpn`, a UD QP if `ud` (whose SENDs carry a datagram segment after the control
    /// segment, and which has no other operation but NOP).
    pub(crate) fn parse(&self, ci: u32, avail: u32, qpn: u32, ud: bool) -> Result<Wqe, Bad> {
        self.parse_as(ci, avail, qpn, ud, false)
    }

    /// [`SqRing::parse`] for a DC initiator: an RC WQE with the datagram segment (the
    /// target's address vector, DCT number and access key, in [`Wqe::av`]) after the control
    /// segment.
    pub(crate) fn parse_dc(&self, ci: u32, avail: u32, qpn: u32) -> Result<Wqe, Bad> {
        self.parse_as(ci, avail, qpn, false, true)
    }

    /// The control segment of the WQE at block counter `ci` of QP `qpn` (`avail` blocks
    /// published), checked as the device checks every WQE (segments counted, all of them
    /// published, its WQE index and QP number): a [`Wqe`] with nothing after the control
    /// segment read yet, and the WQE's segment count.
    pub(crate) fn control(&self, ci: u32, avail: u32, qpn: u32) -> Result<(Wqe, u32), Bad> {
        let raw = self.seg(ci.wrapping_mul(SEGS_PER_BB as u32));
        let ctrl = CtrlSeg::new_unchecked(&raw);
        let op = ctrl.opcode();
        let ds = u32::from(ctrl.ds());
        let bad = |vendor, blocks| Bad {
            vendor,
            opcode: op,
            blocks,
        };
        if ds == 0 {
            return Err(bad(vendor::DS_ZERO, 1));
        }
        let blocks = ds.div_ceil(SEGS_PER_BB as u32);
        if blocks > avail {
            return Err(bad(vendor::PAST_PRODUCER, 1));
        }
        if ctrl.wqe_index() != ci as u16 {
            return Err(bad(vendor::WQE_INDEX, blocks));
        }
        if ctrl.qpn() != qpn {
            return Err(bad(vendor::QPN, blocks));
        }
        let mut imm = [0u8; 4];
        imm.copy_from_slice(&raw[12..16]);
        let w = Wqe {
            opcode: op,
            blocks,
            fm_ce_se: ctrl.fm_ce_se(),
            imm,
            raddr: 0,
            rkey: 0,
            swap_add: 0,
            compare: 0,
            av: [0; av::LEN],
            payload: Payload::Sges(0),
            sges: [DataEntry::default(); MAX_SEGS],
        };
        Ok((w, ds))
    }

    fn parse_as(&self, ci: u32, avail: u32, qpn: u32, ud: bool, dc: bool) -> Result<Wqe, Bad> {
        let start = ci.wrapping_mul(SEGS_PER_BB as u32);
        let (mut w, ds) = self.control(ci, avail, qpn)?;
        let (op, blocks) = (w.opcode, w.blocks);
        let bad = |vendor, blocks| Bad {
            vendor,
            opcode: op,
            blocks,
        };
        // A DCI's WQE: the datagram segment after the control segment, then the segments of an
        // RC WQE, read as an RC WQE whose segments start three further on.
        let (start, ds) = if dc && op != opcode::NOP {
            let header = 1 + DC_AV_DS;
            if ds < header {
                return Err(bad(vendor::NO_DATAGRAM, blocks));
            }
            for i in 1..header {
                let off = (i as usize - 1) * 16;
                w.av[off..off + 16].copy_from_slice(&self.seg(start.wrapping_add(i)));
            }
            (start.wrapping_add(DC_AV_DS), ds - DC_AV_DS)
        } else {
            (start, ds)
        };
        let seg = |i: u32| self.seg(start.wrapping_add(i));
        let first_payload = match op {
            opcode::NOP => return Ok(w),
            opcode::SEND | opcode::SEND_IMM if ud => {
                // Control, then the 48-byte datagram segment (three segments).
                let header = 1 + (av::LEN / 16) as u32;
                if ds < header {
                    return Err(bad(vendor::NO_DATAGRAM, blocks));
                }
                for i in 1..header {
                    let off = (i as usize - 1) * 16;
                    w.av[off..off + 16].copy_from_slice(&seg(i));
                }
                header
            }
            _ if ud => return Err(bad(vendor::OPCODE, blocks)),
            opcode::RDMA_WRITE | opcode::RDMA_WRITE_IMM | opcode::RDMA_READ => {
                if ds < 2 {
                    return Err(bad(vendor::LAYOUT, blocks));
                }
                let r = seg(1);
                let r = RaddrSeg::new_unchecked(&r);
                w.raddr = r.raddr();
                w.rkey = r.rkey();
                2
            }
            opcode::SEND | opcode::SEND_IMM => 1,
            opcode::ATOMIC_CS | opcode::ATOMIC_FA => {
                if ds != 4 {
                    return Err(bad(vendor::LAYOUT, blocks));
                }
                let r = seg(1);
                let r = RaddrSeg::new_unchecked(&r);
                w.raddr = r.raddr();
                w.rkey = r.rkey();
                let a = seg(2);
                let a = AtomicSeg::new_unchecked(&a);
                w.swap_add = a.swap_add();
                w.compare = a.compare();
                let d = seg(3);
                if DataSeg::new_unchecked(&d).byte_count() != 8 {
                    return Err(bad(vendor::LAYOUT, blocks));
                }
                w.sges[0] = DataEntry::from_seg(&d);
                w.payload = Payload::Sges(1);
                return Ok(w);
            }
            _ => return Err(bad(vendor::OPCODE, blocks)),
        };
        self.parse_payload(start, first_payload, ds, &mut w)
            .map_err(|v| bad(v, blocks))?;
        Ok(w)
    }

    /// The payload of the WQE whose control segment is at segment counter `start`, from its
    /// segment `first` to `ds` (exclusive), into `w` (whose opcode is set): one inline
    /// segment filling the rest exactly, or data segments only, or nothing. The vendor
    /// syndrome of a payload that does not fit.
    pub(crate) fn parse_payload(
        &self,
        start: u32,
        first_payload: u32,
        ds: u32,
        w: &mut Wqe,
    ) -> Result<(), u8> {
        let seg = |i: u32| self.seg(start.wrapping_add(i));
        if first_payload == ds {
            return Ok(());
        }
        let head = seg(first_payload);
        let bc = DataSeg::new_unchecked(&head).byte_count();
        if bc & INLINE_SEG != 0 {
            if w.opcode == opcode::RDMA_READ {
                return Err(vendor::LAYOUT);
            }
            let len = bc & !INLINE_SEG;
            let need = (u64::from(len) + 4).div_ceil(16);
            let have = u64::from(ds - first_payload);
            if need > have {
                return Err(vendor::INLINE_LEN);
            }
            if need < have {
                return Err(vendor::LAYOUT);
            }
            w.payload = Payload::Inline {
                seg: start.wrapping_add(first_payload),
                len,
            };
            return Ok(());
        }
        let mut n = 0;
        for i in first_payload..ds {
            let d = seg(i);
            if DataSeg::new_unchecked(&d).byte_count() & INLINE_SEG != 0 {
                return Err(vendor::LAYOUT);
            }
            w.sges[n] = DataEntry::from_seg(&d);
            n += 1;
        }
        w.payload = Payload::Sges(n);
        Ok(())
    }
}

/// A receive ring: `cnt` entries of `stride` bytes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RqRing {
    pub(crate) region: Region,
    pub(crate) cnt: u32,
    pub(crate) stride: u32,
}

impl RqRing {
    /// The scatter entries of receive `ci` (masked) into `out`; returns how many. The list
    /// ends at the first `MLX5_INVALID_LKEY` entry or at the end of the stride.
    pub(crate) fn entries(&self, ci: u32, out: &mut [DataEntry; MAX_SEGS]) -> usize {
        let slot = (ci & (self.cnt - 1)) as usize;
        let per = (self.stride / 16) as usize;
        let mut n = 0;
        for i in 0..per.min(MAX_SEGS) {
            let off = slot * self.stride as usize + i * 16;
            debug_assert!(off + 16 <= self.region.len);
            // SAFETY: `off + 16 <= cnt * stride`, the ring's length; the entry is published.
            let b = unsafe { read16(self.region.ptr.add(off)) };
            let e = DataEntry::from_seg(&b);
            if e.lkey == INVALID_LKEY {
                break;
            }
            out[n] = e;
            n += 1;
        }
        n
    }
}

/// A shared receive queue's ring: `cnt` WQEs of `stride` bytes, each a next segment (the free
/// list's link) and then scatter entries.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SrqRing {
    pub(crate) region: Region,
    pub(crate) cnt: u32,
    pub(crate) stride: u32,
}

impl SrqRing {
    /// The byte offset of WQE `index` (masked into the ring).
    fn offset(&self, index: u32) -> usize {
        (index & (self.cnt - 1)) as usize * self.stride as usize
    }

    /// The `next_wqe_index` of WQE `index`: the WQE the free list continues with.
    pub(crate) fn next(&self, index: u32) -> u16 {
        let off = self.offset(index);
        debug_assert!(off + 16 <= self.region.len);
        // SAFETY: the next segment of a WQE inside the ring (`off + 16 <= cnt * stride`);
        // the WQE is published.
        let b = unsafe { read16(self.region.ptr.add(off)) };
        SrqNextSeg::new_unchecked(&b).next_wqe_index()
    }

    /// The scatter entries of WQE `index` into `out`; returns how many. As on a receive ring,
    /// the list ends at the first `MLX5_INVALID_LKEY` entry or at the end of the stride.
    pub(crate) fn entries(&self, index: u32, out: &mut [DataEntry; MAX_SEGS]) -> usize {
        let base = self.offset(index);
        let per = (self.stride as usize / 16).saturating_sub(1);
        let mut n = 0;
        for i in 0..per.min(MAX_SEGS) {
            let off = base + 16 + i * 16;
            debug_assert!(off + 16 <= self.region.len);
            // SAFETY: inside WQE `index`, inside the ring; published.
            let b = unsafe { read16(self.region.ptr.add(off)) };
            let e = DataEntry::from_seg(&b);
            if e.lkey == INVALID_LKEY {
                break;
            }
            out[n] = e;
            n += 1;
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// libmlx5's RDMA_WRITE of 256 bytes, signaled, QPN 0x100, index 0 (the golden bytes of
    /// `prm::wqe`), in a one-block ring.
    const WRITE_WQE: [u8; 64] = [
        0x00, 0x00, 0x00, 0x08, 0x00, 0x01, 0x00, 0x03, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00,
        0x00, // ctrl
        0x00, 0x00, 0x7f, 0x00, 0x00, 0x00, 0x10, 0x00, 0xde, 0xad, 0xbe, 0xef, 0x00, 0x00, 0x00,
        0x00, // raddr
        0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x11, 0x00, 0x00, 0x00, 0x55, 0xa7, 0xb9, 0xcd, 0x50,
        0x00, // data
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ];

    fn ring(bytes: &mut [u8; 64]) -> SqRing {
        SqRing {
            region: Region {
                ptr: NonNull::new(bytes.as_mut_ptr()).unwrap(),
                len: 64,
            },
            blocks: 1,
        }
    }

    #[test]
    fn parses_libmlx5_write() {
        let mut b = WRITE_WQE;
        let w = ring(&mut b).parse(0, 1, 0x100, false).unwrap();
        assert_eq!(
            (w.opcode, w.blocks, w.fm_ce_se),
            (opcode::RDMA_WRITE, 1, 0x08)
        );
        assert_eq!((w.raddr, w.rkey), (0x7f00_0000_1000, 0xdead_beef));
        assert_eq!(w.payload, Payload::Sges(1));
        assert_eq!(
            w.sges[0],
            DataEntry {
                addr: 0x55a7_b9cd_5000,
                len: 0x100,
                lkey: 0x1100
            }
        );
    }

    #[test]
    fn refuses_inconsistent_wqes() {
        let bad = |patch: fn(&mut [u8; 64]), qpn: u32| {
            let mut b = WRITE_WQE;
            patch(&mut b);
            ring(&mut b).parse(0, 1, qpn, false).unwrap_err().vendor
        };
        assert_eq!(bad(|_| {}, 0x101), vendor::QPN);
        assert_eq!(bad(|b| b[7] = 0, 0x100), vendor::DS_ZERO);
        assert_eq!(bad(|b| b[7] = 5, 0x100), vendor::PAST_PRODUCER);
        assert_eq!(bad(|b| b[2] = 1, 0x100), vendor::WQE_INDEX);
        assert_eq!(bad(|b| b[3] = 0x01, 0x100), vendor::OPCODE);
        assert_eq!(bad(|b| b[7] = 1, 0x100), vendor::LAYOUT);
        // An inline header claiming 13 bytes in one segment (room for 12).
        assert_eq!(
            bad(|b| b[32..36].copy_from_slice(&[0x80, 0, 0, 13]), 0x100),
            vendor::INLINE_LEN
        );
    }

    #[test]
    fn inline_data_continues_at_the_ring_start() {
        let mut b = [0u8; 64];
        let r = ring(&mut b);
        let base = b.as_ptr() as u64;
        // Header in the last segment (48..64): data at 52..64, then from 0.
        assert_eq!(r.inline_spans(3, 20), [(base + 52, 12), (base, 8)]);
        assert_eq!(r.inline_spans(7, 4), [(base + 52, 4), (base, 0)]);
    }
}
