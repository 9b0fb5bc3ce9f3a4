//! A WQE segment (16 bytes) held as one value while a post builds it, and stored with one
//! instruction: an SSE2 register on x86_64 (SSE2 is part of the x86_64 baseline), two
//! 64-bit words elsewhere and under loom.
//!
//! The prepared posts (`sq/prepared.rs`) build the segments made of one changing word and
//! one constant word (the control segment, the remote-address segment: prm's encoders'
//! values, `prm::wqe::words`) this way: one move
//! and one `or` with the prepared segment build it, one store writes it to the ring and one
//! to the BlueFlame buffer, where two 64-bit words take two of each and two general
//! registers. The bytes are the same; a 16-byte store lands in the BlueFlame buffer's
//! write-combining line as two 8-byte stores do, in program order (the BlueFlame copy is
//! ordered stores, never `memcpy`: `docs/architecture.md`, section 2.3, step 6a).

use zverbs_core::mmio::MmioRegion;

/// A segment's bytes as two 64-bit words in memory order, aligned as a segment in the ring,
/// so that a post reads it as one value (a prepared constant).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C, align(16))]
pub(crate) struct SegWords(pub(crate) [u64; 2]);

#[cfg(all(target_arch = "x86_64", not(zverbs_loom)))]
mod imp {
    use core::arch::x86_64::{__m128i, _mm_cvtsi128_si64, _mm_or_si128, _mm_set_epi64x};

    use super::SegWords;

    pub(crate) type Repr = __m128i;

    #[inline(always)]
    pub(crate) fn or(c: &SegWords, low: u64, high: u64) -> Repr {
        // SAFETY: `SegWords` is 16 bytes, 16-byte aligned, and every bit pattern is an
        // `__m128i`; SSE2 is in every x86_64 target's baseline.
        unsafe {
            let c = core::ptr::from_ref(c).cast::<__m128i>().read();
            _mm_or_si128(_mm_set_epi64x(high as i64, low as i64), c)
        }
    }

    #[inline(always)]
    pub(crate) fn low(r: Repr) -> u64 {
        // SAFETY: as above.
        unsafe { _mm_cvtsi128_si64(r) as u64 }
    }
}

#[cfg(not(all(target_arch = "x86_64", not(zverbs_loom))))]
mod imp {
    use super::SegWords;

    pub(crate) type Repr = [u64; 2];

    #[inline(always)]
    pub(crate) fn or(c: &SegWords, low: u64, high: u64) -> Repr {
        [c.0[0] | low, c.0[1] | high]
    }

    #[inline(always)]
    pub(crate) fn low(r: Repr) -> u64 {
        r[0]
    }

    #[cfg(zverbs_loom)]
    #[inline(always)]
    pub(crate) fn words(r: Repr) -> [u64; 2] {
        r
    }
}

/// A segment in a register (see the module).
#[derive(Clone, Copy)]
pub(crate) struct SegReg(imp::Repr);

impl SegReg {
    /// The prepared segment `c` with `low` or-ed into its first word and `high` into its
    /// second.
    #[inline(always)]
    pub(crate) fn or(c: &SegWords, low: u64, high: u64) -> Self {
        Self(imp::or(c, low, high))
    }

    /// The first word (bytes 0..8).
    #[inline(always)]
    pub(crate) fn low(self) -> u64 {
        imp::low(self.0)
    }

    /// The two words, in memory order.
    #[cfg(zverbs_loom)]
    #[inline(always)]
    pub(crate) fn words(self) -> [u64; 2] {
        imp::words(self.0)
    }

    /// Stores the segment at `dst` (ordinary memory).
    ///
    /// # Safety
    ///
    /// `dst` is valid for a 16-byte write and 16-byte aligned.
    #[cfg(not(zverbs_loom))]
    #[inline(always)]
    pub(crate) unsafe fn store(self, dst: *mut u8) {
        // SAFETY: (caller) valid and aligned.
        unsafe { dst.cast::<imp::Repr>().write(self.0) };
    }

    /// Stores the segment as segment `seg` (bytes `16 * seg..16 * seg + 16`) of `reg`.
    ///
    /// # Safety
    ///
    /// The segment lies in `reg`, whose base is 16-byte aligned.
    #[inline(always)]
    pub(crate) unsafe fn store_mmio(self, reg: &MmioRegion, seg: usize) {
        // SAFETY: (caller) in the region and aligned; a volatile store, never a reference to
        // the device's memory (`MmioRegion`'s rule); elsewhere both words lie in the region.
        unsafe {
            #[cfg(all(target_arch = "x86_64", not(zverbs_loom)))]
            reg.base()
                .as_ptr()
                .cast::<imp::Repr>()
                .add(seg)
                .write_volatile(self.0);
            #[cfg(not(all(target_arch = "x86_64", not(zverbs_loom))))]
            {
                let [a, b] = self.0;
                reg.write_u64(2 * seg, a);
                reg.write_u64(2 * seg + 1, b);
            }
        }
    }
}

/// A one-block WQE as a prepared post holds it: the control segment, the remote-address
/// segment when the WQE has one, and the data segment as two words (the rest of the block
/// is zeros: the device reads the WQE's `ds` segments).
#[derive(Clone, Copy)]
pub(crate) struct BlockRegs {
    pub(crate) ctrl: SegReg,
    pub(crate) raddr: Option<SegReg>,
    pub(crate) data: [u64; 2],
}

impl BlockRegs {
    /// The block as eight 64-bit words in memory order, and how many the WQE fills.
    #[cfg(zverbs_loom)]
    #[inline(always)]
    pub(crate) fn words(&self) -> ([u64; 8], usize) {
        let [c0, c1] = self.ctrl.words();
        let [d0, d1] = self.data;
        match self.raddr {
            Some(r) => {
                let [r0, r1] = r.words();
                ([c0, c1, r0, r1, d0, d1, 0, 0], 6)
            }
            None => ([c0, c1, d0, d1, 0, 0, 0, 0], 4),
        }
    }
}

/// How a segment is held in a register ([`SegReg`]): read from memory as this type, 16-byte
/// aligned, it is one load.
pub(crate) type SegRepr = imp::Repr;

impl SegReg {
    /// The segment read as a [`SegRepr`].
    #[inline(always)]
    pub(crate) fn from_repr(r: SegRepr) -> Self {
        Self(r)
    }
}

#[cfg(all(test, not(zverbs_loom)))]
mod tests {
    use core::ptr::NonNull;

    use super::*;

    /// A control segment's bytes: opmod 0, WQE index 0x1234, opcode 8 (prepared), `qpn_ds`
    /// 0x000103 (prepared), `fm_ce_se` 8 (prepared), immediate 0xaabbccdd.
    const CTRL: [u8; 16] = [
        0, 0x12, 0x34, 8, 0, 0, 1, 3, 0, 0, 0, 8, 0xaa, 0xbb, 0xcc, 0xdd,
    ];

    fn ctrl() -> SegReg {
        use crate::prm::wqe::words;
        let prepared = SegWords(words::ctrl(0, 8, 0, 1, 8, 3, 0));
        SegReg::or(
            &prepared,
            words::ctrl_index(0x1234)[0],
            words::ctrl_imm(0xaabb_ccdd)[1],
        )
    }

    fn bytes(s: &SegWords) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&s.0[0].to_ne_bytes());
        b[8..].copy_from_slice(&s.0[1].to_ne_bytes());
        b
    }

    #[test]
    fn a_segment_in_a_register_is_stored_as_its_bytes() {
        let s = ctrl();
        assert_eq!(s.low().to_ne_bytes(), CTRL[..8]);
        let mut ring = [SegWords::default(); 2];
        // SAFETY: segment 1 of `ring`: 16 bytes, 16-byte aligned.
        unsafe { s.store(core::ptr::addr_of_mut!(ring[1]).cast()) };
        assert_eq!(bytes(&ring[0]), [0; 16]);
        assert_eq!(bytes(&ring[1]), CTRL);
    }

    #[test]
    fn a_segment_in_a_register_is_copied_to_its_place_in_the_register() {
        let mut page = [SegWords::default(); 4];
        {
            let base = NonNull::from(&mut page).cast::<u8>();
            // SAFETY: `page` is 64 bytes, 16-byte aligned, not accessed through a reference
            // while `reg` lives.
            let reg = unsafe { MmioRegion::new(base, 64) };
            // SAFETY: segment 2 lies in the region, whose base is 16-byte aligned.
            unsafe { ctrl().store_mmio(&reg, 2) };
        }
        assert_eq!(bytes(&page[2]), CTRL);
        for s in [0, 1, 3] {
            assert_eq!(bytes(&page[s]), [0; 16], "segment {s} untouched");
        }
    }
}
