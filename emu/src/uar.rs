//! The kernel's BlueFlame-register (bfreg) and UAR bookkeeping of one user context, as the
//! mlx5 driver keeps it for a library that takes the static UAR scheme (the driver answers
//! `GET_CONTEXT` with a non-zero `tot_bfregs`; it predates UAR objects, `UAR_OBJ_ALLOC`).
//!
//! - **Static bfregs**: the library asks for `total_num_bfregs` (libmlx5: 16, or
//!   `MLX5_TOTAL_UUARS`) of which `num_low_latency_bfregs` (4, or `MLX5_NUM_LOW_LAT_UUARS`)
//!   are low latency; the kernel rounds the total up to whole system pages (two bfregs per
//!   4 KiB UAR, `uars_per_page` UARs per page) and the library maps those pages at context
//!   creation. bfreg 0 is never given BlueFlame; the *high* class (the last `low` bfregs) goes
//!   to one QP each, while one is free; the *medium* class (`1..total - low`) is shared, each
//!   QP getting the least used. libmlx5 knows the classes too (`need_uuar_lock`) and locks the
//!   medium ones.
//! - **Dynamic bfregs** (`num_dyn_bfregs`, reported in the context answer): system pages the
//!   library maps on demand (mmap command `MLX5_IB_MMAP_ALLOC_WC`, page index counted from 0
//!   after the static pages), each page once. libmlx5 takes them for thread domains: a QP of
//!   a parent domain with a thread domain names its dynamic bfreg in the create-QP command
//!   (`MLX5_QP_FLAG_BFREG_INDEX`), which the kernel checks refers to a mapped dynamic page.
//!
//! Numbers follow the kernel's: static bfreg `n` is UAR `n / 2`, BlueFlame register `n % 2`
//! of it, and the create-QP answer gives it as `n / 2 × 4 + n % 2` (libmlx5's four-per-UAR
//! numbering, of which it uses the first two).

use crate::abi::errno;

/// Bfregs with BlueFlame per UAR (`MLX5_NON_FP_BFREGS_PER_UAR`).
pub const BFREGS_PER_UAR: u32 = 2;
/// The BlueFlame registers' offset in a UAR (`MLX5_BF_OFFSET`).
pub const BF_OFFSET: usize = 0x800;
/// Bytes of one UAR (`MLX5_ADAPTER_PAGE_SIZE`).
pub const UAR_SIZE: usize = 4096;
/// `MLX5_IB_MMAP_CMD_SHIFT`.
const MMAP_CMD_SHIFT: u64 = 8;
/// mmap commands: `MLX5_IB_MMAP_REGULAR_PAGE`, `_WC_PAGE`, `_NC_PAGE`, `_ALLOC_WC`.
pub mod mmap_cmd {
    /// A static UAR page, write-combining where possible.
    pub const REGULAR_PAGE: u64 = 0;
    /// A static UAR page, write-combining.
    pub const WC_PAGE: u64 = 2;
    /// A static UAR page, not cached.
    pub const NC_PAGE: u64 = 3;
    /// A dynamic UAR page (legacy dynamic bfregs).
    pub const ALLOC_WC: u64 = 6;
}
/// `MLX5_IB_INVALID_BFREG`, answered for a QP on a dynamic bfreg.
pub const INVALID_BFREG: u32 = u32::MAX;

/// A QP's bfreg.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bfreg {
    /// Static bfreg `n` (kernel numbering).
    Static(u32),
    /// Dynamic bfreg `n` (libmlx5's `bfreg_dyn_index`: counted from the first dynamic page).
    Dynamic(u32),
}

/// What an mmap of the context's descriptor maps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mapping {
    /// Static UAR page `i`.
    Static(u32),
    /// Dynamic UAR page `i` (counted after the static ones).
    Dynamic(u32),
    /// Something this model does not track (another mmap command).
    Other,
    /// The clock-info page (`MLX5_IB_MMAP_CLOCK_INFO`, version 1): the caller fills it with
    /// the device clock's `struct ib_uverbs_clock_info`.
    ClockInfo,
}

/// One user context's bfregs and UAR pages.
#[derive(Debug)]
pub struct Uctx {
    uars_per_page: u32,
    /// Static bfregs (rounded up to whole pages).
    total: u32,
    /// Low-latency (high class) bfregs among them.
    low: u32,
    /// Dynamic bfregs.
    num_dyn: u32,
    /// BlueFlame register size (both buffers); 0: no write-combining.
    bf_reg_size: u32,
    /// QPs on each static bfreg.
    count: Vec<u32>,
    /// Where each static page is mapped.
    static_pages: Vec<Option<usize>>,
    /// Where each dynamic page is mapped.
    dyn_pages: Vec<Option<usize>>,
}

impl Uctx {
    /// A context whose library asked for `req_total` bfregs, `req_low` of them low latency;
    /// `num_dyn` dynamic ones on top.
    ///
    /// # Errors
    ///
    /// `EINVAL` for more low-latency bfregs than the total allows, `ENOMEM` for a total over
    /// the kernel's maximum, as the kernel answers.
    pub fn new(
        req_total: u32,
        req_low: u32,
        uars_per_page: u32,
        num_dyn: u32,
        bf_reg_size: u32,
    ) -> Result<Self, i32> {
        let per_page = uars_per_page * BFREGS_PER_UAR;
        if req_total == 0 {
            return Err(errno::EINVAL);
        }
        if req_total > 512 * BFREGS_PER_UAR {
            return Err(errno::ENOMEM);
        }
        let total = req_total.div_ceil(per_page) * per_page;
        if req_low > total - 1 {
            return Err(errno::EINVAL);
        }
        let num_dyn = num_dyn.div_ceil(per_page) * per_page;
        Ok(Self {
            uars_per_page,
            total,
            low: req_low,
            num_dyn,
            bf_reg_size,
            count: vec![0; total as usize],
            static_pages: vec![None; (total / per_page) as usize],
            dyn_pages: vec![None; (num_dyn / per_page) as usize],
        })
    }

    /// `tot_bfregs` of the context answer.
    pub fn tot_bfregs(&self) -> u32 {
        self.total
    }

    /// `num_dyn_bfregs` of the context answer.
    pub fn num_dyn_bfregs(&self) -> u32 {
        self.num_dyn
    }

    fn per_page(&self) -> u32 {
        self.uars_per_page * BFREGS_PER_UAR
    }

    /// Decodes an mmap offset of `page` bytes per page into its command and page index.
    pub fn decode_offset(off: u64, page: u64) -> (u64, u32) {
        let pgoff = off / page.max(1);
        let cmd = (pgoff >> MMAP_CMD_SHIFT) & 0xff;
        let idx = (pgoff & 0xff) | (((pgoff >> 16) & 0xff) << 8);
        (cmd, idx as u32)
    }

    /// Checks an mmap of `len` bytes at offset `off` (system pages of `page` bytes) as the
    /// kernel does, and reserves what it maps; [`Uctx::mapped`] then records the address.
    ///
    /// # Errors
    ///
    /// `EINVAL` for a length that is not one page, a page index out of range or a dynamic page
    /// already mapped; `EPERM` for a write-combining page on a device without write-combining.
    pub fn mmap(&mut self, off: u64, len: u64, page: u64) -> Result<Mapping, i32> {
        let (cmd, idx) = Self::decode_offset(off, page);
        let wc = matches!(cmd, mmap_cmd::WC_PAGE | mmap_cmd::ALLOC_WC);
        match cmd {
            mmap_cmd::REGULAR_PAGE | mmap_cmd::WC_PAGE | mmap_cmd::NC_PAGE | mmap_cmd::ALLOC_WC => {
                if wc && self.bf_reg_size == 0 {
                    return Err(errno::EPERM);
                }
                if len != page {
                    return Err(errno::EINVAL);
                }
                if cmd != mmap_cmd::ALLOC_WC {
                    return match self.static_pages.get(idx as usize) {
                        Some(_) => Ok(Mapping::Static(idx)),
                        None => Err(errno::EINVAL),
                    };
                }
                match self.dyn_pages.get(idx as usize) {
                    Some(None) => Ok(Mapping::Dynamic(idx)),
                    // Each dynamic page is allocated once.
                    Some(Some(_)) | None => Err(errno::EINVAL),
                }
            }
            c if c == zverbs_mlx5dv::prm::clock::MLX5_IB_MMAP_CLOCK_INFO => {
                if len != page || u64::from(idx) != zverbs_mlx5dv::prm::clock::MLX5_IB_CLOCK_INFO_V1
                {
                    return Err(errno::EINVAL);
                }
                Ok(Mapping::ClockInfo)
            }
            _ => Ok(Mapping::Other),
        }
    }

    /// Records where a page that [`Uctx::mmap`] allowed is mapped.
    pub fn mapped(&mut self, m: Mapping, addr: usize) {
        match m {
            Mapping::Static(i) => self.static_pages[i as usize] = Some(addr),
            Mapping::Dynamic(i) => self.dyn_pages[i as usize] = Some(addr),
            Mapping::Other | Mapping::ClockInfo => {}
        }
    }

    /// Forgets the pages mapped in `addr..addr + len` (unmapped by the library).
    pub fn unmapped(&mut self, addr: usize, len: usize) {
        for p in self
            .static_pages
            .iter_mut()
            .chain(self.dyn_pages.iter_mut())
        {
            if p.is_some_and(|a| a >= addr && a < addr.saturating_add(len)) {
                *p = None;
            }
        }
    }

    /// A bfreg for a new QP that names none, as the kernel's `alloc_bfreg` picks it: a free
    /// high-class one, else the least used medium-class one, else bfreg 0.
    pub fn alloc_bfreg(&mut self) -> u32 {
        let med = self.total.saturating_sub(self.low + 1);
        let first_hi = med + 1;
        let n = (first_hi..self.total)
            .find(|&i| self.count[i as usize] == 0)
            .or_else(|| (1..first_hi).min_by_key(|&i| self.count[i as usize]))
            .unwrap_or(0);
        self.count[n as usize] += 1;
        n
    }

    /// A QP on static bfreg `n` is gone.
    pub fn free_bfreg(&mut self, n: u32) {
        if let Some(c) = self.count.get_mut(n as usize) {
            *c = c.saturating_sub(1);
        }
    }

    /// Checks a dynamic bfreg a create-QP command names (`MLX5_QP_FLAG_BFREG_INDEX`): its page
    /// must be a mapped dynamic page.
    ///
    /// # Errors
    ///
    /// `EINVAL` otherwise.
    pub fn check_dyn_bfreg(&self, n: u32) -> Result<(), i32> {
        match self.dyn_pages.get((n / self.per_page()) as usize) {
            Some(Some(_)) if n < self.num_dyn => Ok(()),
            _ => Err(errno::EINVAL),
        }
    }

    /// The create-QP answer's `bfreg_index` for `b`.
    pub fn answer(b: Bfreg) -> u32 {
        match b {
            Bfreg::Static(n) => n / BFREGS_PER_UAR * 4 + n % BFREGS_PER_UAR,
            Bfreg::Dynamic(_) => INVALID_BFREG,
        }
    }

    /// Whether libmlx5 takes a lock around BlueFlame copies to `b` (a medium-class static
    /// bfreg: the kernel may give it to several QPs).
    pub fn shared_class(&self, b: Bfreg) -> bool {
        matches!(b, Bfreg::Static(n) if n != 0 && n < self.total - self.low)
    }

    /// Where `b`'s BlueFlame register is mapped in the process, and its buffer size
    /// (`bf_reg_size / 2`); `None` without BlueFlame (bfreg 0, no write-combining) or before
    /// its page is mapped.
    pub fn register(&self, b: Bfreg) -> Option<(usize, u32)> {
        if self.bf_reg_size == 0 {
            return None;
        }
        let (page, n) = match b {
            Bfreg::Static(0) => return None,
            Bfreg::Static(n) => (self.static_pages.get((n / self.per_page()) as usize)?, n),
            Bfreg::Dynamic(n) => (self.dyn_pages.get((n / self.per_page()) as usize)?, n),
        };
        let in_page = n % self.per_page();
        let uar = (in_page / BFREGS_PER_UAR) as usize;
        let k = (in_page % BFREGS_PER_UAR) as usize;
        let at = (*page)? + uar * UAR_SIZE + BF_OFFSET + k * self.bf_reg_size as usize;
        Some((at, self.bf_reg_size / 2))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: u64 = 4096;

    fn off(cmd: u64, idx: u64) -> u64 {
        (((idx >> 8) << 16) | (cmd << 8) | (idx & 0xff)) * PAGE
    }

    #[test]
    fn high_class_first_then_the_least_used_medium() {
        // libmlx5's default request: 16 bfregs, 4 of them low latency.
        let mut u = Uctx::new(16, 4, 1, 0, 512).unwrap();
        let first: Vec<u32> = (0..6).map(|_| u.alloc_bfreg()).collect();
        assert_eq!(first, [12, 13, 14, 15, 1, 2]);
        assert!(!u.shared_class(Bfreg::Static(12)) && u.shared_class(Bfreg::Static(1)));
        assert!(!u.shared_class(Bfreg::Static(0)));
        // A freed high-class bfreg is given again before any medium one.
        u.free_bfreg(13);
        assert_eq!(u.alloc_bfreg(), 13);
        // 4 bfregs, none low latency: 1..=3 shared by everyone, round and round.
        let mut u = Uctx::new(4, 0, 1, 0, 512).unwrap();
        let all: Vec<u32> = (0..7).map(|_| u.alloc_bfreg()).collect();
        assert_eq!(all, [1, 2, 3, 1, 2, 3, 1]);
        assert_eq!(Uctx::new(4, 4, 1, 0, 512).unwrap_err(), errno::EINVAL);
    }

    #[test]
    fn answers_in_libmlx5_numbering() {
        assert_eq!(
            [1, 2, 3, 12, 15].map(|n| Uctx::answer(Bfreg::Static(n))),
            [1, 4, 5, 24, 29]
        );
        assert_eq!(Uctx::answer(Bfreg::Dynamic(3)), INVALID_BFREG);
    }

    #[test]
    fn registers_are_found_in_their_pages() {
        let mut u = Uctx::new(4, 0, 1, 4, 512).unwrap();
        assert_eq!((u.tot_bfregs(), u.num_dyn_bfregs()), (4, 4));
        for i in 0..2 {
            let m = u.mmap(off(mmap_cmd::REGULAR_PAGE, i), PAGE, PAGE).unwrap();
            assert_eq!(m, Mapping::Static(i as u32));
            u.mapped(m, 0x10_0000 + i as usize * 0x1000);
        }
        assert_eq!(u.register(Bfreg::Static(3)), Some((0x10_1a00, 256)));
        assert_eq!(
            u.register(Bfreg::Static(0)),
            None,
            "bfreg 0 has no BlueFlame"
        );
        assert_eq!(
            u.mmap(off(mmap_cmd::REGULAR_PAGE, 2), PAGE, PAGE),
            Err(errno::EINVAL),
            "past the static pages"
        );
        // Dynamic pages: each once, within num_dyn_bfregs; a QP may name a mapped one only.
        assert_eq!(u.check_dyn_bfreg(0), Err(errno::EINVAL));
        let m = u.mmap(off(mmap_cmd::ALLOC_WC, 1), PAGE, PAGE).unwrap();
        assert_eq!(m, Mapping::Dynamic(1));
        u.mapped(m, 0x20_0000);
        assert_eq!(
            u.mmap(off(mmap_cmd::ALLOC_WC, 1), PAGE, PAGE),
            Err(errno::EINVAL)
        );
        assert_eq!(
            u.mmap(off(mmap_cmd::ALLOC_WC, 2), PAGE, PAGE),
            Err(errno::EINVAL)
        );
        assert_eq!(u.check_dyn_bfreg(3), Ok(()));
        assert_eq!(
            u.check_dyn_bfreg(1),
            Err(errno::EINVAL),
            "page 0 not mapped"
        );
        assert_eq!(u.register(Bfreg::Dynamic(3)), Some((0x20_0a00, 256)));
        u.unmapped(0x20_0000, 0x1000);
        assert_eq!(u.check_dyn_bfreg(3), Err(errno::EINVAL));
        // No dynamic bfregs: a thread domain's page is refused.
        let mut u = Uctx::new(16, 4, 1, 0, 512).unwrap();
        assert_eq!(
            u.mmap(off(mmap_cmd::ALLOC_WC, 0), PAGE, PAGE),
            Err(errno::EINVAL)
        );
        // No write-combining: no WC page, no BlueFlame registers.
        let mut u = Uctx::new(16, 4, 1, 8, 0).unwrap();
        assert_eq!(
            u.mmap(off(mmap_cmd::ALLOC_WC, 0), PAGE, PAGE),
            Err(errno::EPERM)
        );
        assert_eq!(u.register(Bfreg::Static(5)), None);
    }
}
