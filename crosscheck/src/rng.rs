//! A small seeded generator (splitmix64), for the tests that run one long sequence through a
//! stateful queue: whole send WQEs (`tests/wqe.rs`, `tests/ud_wqe.rs`) and receive WQEs
//! (`tests/recv_wqe.rs`) through one ring past the 16-bit index wrap, shared receives through
//! one SRQ (`tests/srq_queue.rs`), receive CQEs through one poller
//! (`tests/cqe.rs`, the GRH flag). A failure there is one request among tens of thousands that
//! depend on each other, which `proptest` could shrink only by rerunning the whole sequence
//! at every step; the comparisons of single values use [`prop`](crate::prop) instead.
//!
//! Each test starts from a fixed seed; `ZVERBS_CROSSCHECK_SEED` (decimal or `0x` hex) replaces
//! it to explore other sequences. Failures print the seed in use.

/// splitmix64 (Steele, Lea, Flood 2014; the seeding generator of xoshiro).
#[derive(Clone, Debug)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator starting at `seed`.
    pub const fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// A generator for one test: `ZVERBS_CROSSCHECK_SEED` if set, else `default_seed`, mixed
    /// with `stream` so that tests sharing the variable still draw different numbers.
    pub fn for_test(default_seed: u64, stream: u64) -> (Self, u64) {
        let seed = seed_from_env().unwrap_or(default_seed);
        (
            Self::new(seed ^ stream.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
            seed,
        )
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// 32 random bits.
    pub fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    /// A number in `0..n` (`n > 0`; the tiny modulo bias does not matter here).
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "below(0)");
        self.next_u64() % n
    }

    /// A number in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        assert!(lo <= hi, "empty range {lo}..={hi}");
        match (hi - lo).checked_add(1) {
            Some(n) => lo + self.below(n),
            None => self.next_u64(),
        }
    }

    /// True with probability `num / den`.
    pub fn chance(&mut self, num: u64, den: u64) -> bool {
        self.below(den) < num
    }

    /// An element of `items`.
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }

    /// Fills `buf` with random bytes.
    pub fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let v = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }

    /// A value that is, one time in four, an edge of the `bits`-wide range (0, 1, the
    /// maximum, one below it, the top bit alone, the top bit plus one), and otherwise random.
    pub fn edgy(&mut self, bits: u32) -> u64 {
        let max = if bits == 64 {
            u64::MAX
        } else {
            (1u64 << bits) - 1
        };
        if self.chance(1, 4) {
            let top = 1u64 << (bits - 1);
            self.pick(&[0, 1, max, max - 1, top, top | 1])
        } else {
            self.next_u64() & max
        }
    }

    /// [`edgy`](Self::edgy) over 8 bits.
    pub fn edgy_u8(&mut self) -> u8 {
        self.edgy(8) as u8
    }

    /// [`edgy`](Self::edgy) over 16 bits.
    pub fn edgy_u16(&mut self) -> u16 {
        self.edgy(16) as u16
    }

    /// [`edgy`](Self::edgy) over 32 bits.
    pub fn edgy_u32(&mut self) -> u32 {
        self.edgy(32) as u32
    }

    /// [`edgy`](Self::edgy) over 64 bits.
    pub fn edgy_u64(&mut self) -> u64 {
        self.edgy(64)
    }
}

fn seed_from_env() -> Option<u64> {
    let s = std::env::var("ZVERBS_CROSSCHECK_SEED").ok()?;
    let s = s.trim();
    let parsed = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => s.parse(),
    };
    Some(parsed.unwrap_or_else(|e| panic!("ZVERBS_CROSSCHECK_SEED={s:?}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix64_reference_values() {
        // The first outputs for seed 1234567, as in the reference implementation.
        let mut r = SplitMix64::new(1_234_567);
        assert_eq!(r.next_u64(), 6_457_827_717_110_365_317);
        assert_eq!(r.next_u64(), 3_203_168_211_198_807_973);
    }

    #[test]
    fn ranges_stay_in_bounds() {
        let mut r = SplitMix64::new(7);
        for _ in 0..1000 {
            assert!((3..=9).contains(&r.range(3, 9)));
            assert!(r.edgy(12) < 1 << 12);
        }
        // The full range must not overflow computing its width.
        let _ = r.range(0, u64::MAX);
    }
}
