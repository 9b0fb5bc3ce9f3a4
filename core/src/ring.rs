//! Index arithmetic for power-of-two rings driven by free-running counters.
//!
//! Producer and consumer indices are free-running `u32` counters that wrap at 2^32; a slot is
//! the counter masked by the ring size, and the pass over the ring (the mlx5 owner bit) is the
//! next bit up. Because the ring size divides 2^32 (and 2^16, 2^24 for the narrower counters
//! the device sees), wrapping needs no special case anywhere.

/// A ring of `2^log2` slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ring {
    mask: u32,
    log2: u32,
}

impl Ring {
    /// The largest ring: 2^31 slots, so that `used` and `free` fit in a `u32` unambiguously.
    pub const MAX: u32 = 1 << 31;

    /// A ring of `size` slots, or `None` unless `size` is a power of two in `1..=2^31`.
    #[inline]
    pub const fn new(size: u32) -> Option<Self> {
        if size == 0 || !size.is_power_of_two() || size > Self::MAX {
            return None;
        }
        Some(Self {
            mask: size - 1,
            log2: size.trailing_zeros(),
        })
    }

    /// Number of slots.
    #[inline]
    pub const fn size(self) -> u32 {
        self.mask + 1
    }

    /// `size() - 1`.
    #[inline]
    pub const fn mask(self) -> u32 {
        self.mask
    }

    /// `log2(size())`.
    #[inline]
    pub const fn log2(self) -> u32 {
        self.log2
    }

    /// The slot a counter points at.
    #[inline]
    pub const fn slot(self, counter: u32) -> u32 {
        counter & self.mask
    }

    /// The parity of the pass over the ring that `counter` is in: the value the mlx5 owner bit
    /// of a CQE must have for that CQE to belong to software at consumer index `counter`.
    #[inline]
    pub const fn pass_parity(self, counter: u32) -> u32 {
        (counter >> self.log2) & 1
    }

    /// Entries between consumer `ci` and producer `pi`.
    #[inline]
    pub const fn used(self, pi: u32, ci: u32) -> u32 {
        pi.wrapping_sub(ci)
    }

    /// Free slots between producer `pi` and consumer `ci`; 0 if the counters are inconsistent
    /// (`pi` more than a ring ahead of `ci`).
    #[inline]
    pub const fn free(self, pi: u32, ci: u32) -> u32 {
        self.size().saturating_sub(self.used(pi, ci))
    }

    /// Slots from `counter`'s slot to the end of the ring (at least 1).
    #[inline]
    pub const fn until_end(self, counter: u32) -> u32 {
        self.size() - self.slot(counter)
    }
}

/// The full counter whose low 16 bits are `low` and which lies in `base..base + 2^15`,
/// `base - 2^15..base` choosing the nearest: recovers a free-running counter from the 16-bit
/// value a device reports (an mlx5 CQE's `wqe_counter`), given a counter known to be within
/// 2^15 of it.
#[inline]
pub const fn extend_u16(base: u32, low: u16) -> u32 {
    let delta = low.wrapping_sub(base as u16) as i16;
    base.wrapping_add(delta as i32 as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_non_powers_of_two() {
        assert!(Ring::new(0).is_none());
        assert!(Ring::new(3).is_none());
        assert!(Ring::new(1 << 31).is_some());
        assert_eq!(Ring::new(1).unwrap().log2(), 0);
    }

    #[test]
    fn size_mask_and_log2_of_a_ring() {
        let r = Ring::new(8).unwrap();
        assert_eq!((r.size(), r.mask(), r.log2()), (8, 7, 3));
        let r = Ring::new(1 << 31).unwrap();
        assert_eq!((r.size(), r.mask(), r.log2()), (1 << 31, (1 << 31) - 1, 31));
    }

    #[test]
    fn slots_wrap_at_every_counter_boundary() {
        let r = Ring::new(4).unwrap();
        assert_eq!(r.slot(5), 1);
        assert_eq!(r.slot(u32::MAX), 3);
        assert_eq!(r.pass_parity(3), 0);
        assert_eq!(r.pass_parity(4), 1);
        assert_eq!(r.pass_parity(8), 0);
        assert_eq!(r.until_end(6), 2);
        assert_eq!(r.until_end(4), 4);
    }

    #[test]
    fn used_and_free_across_u32_wrap() {
        let r = Ring::new(8).unwrap();
        let ci = u32::MAX - 2;
        let pi = ci.wrapping_add(5);
        assert_eq!(r.used(pi, ci), 5);
        assert_eq!(r.free(pi, ci), 3);
        assert_eq!(r.free(ci.wrapping_add(20), ci), 0);
    }

    #[test]
    fn extend_u16_finds_nearest() {
        assert_eq!(extend_u16(0x1_fff0, 0x0005), 0x2_0005);
        assert_eq!(extend_u16(0x2_0005, 0xfff0), 0x1_fff0);
        assert_eq!(extend_u16(10, 10), 10);
        assert_eq!(extend_u16(3, 0xffff), u32::MAX);
    }
}
