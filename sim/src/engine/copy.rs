//! How the device moves bytes: spans of memory it has checked, and the one copy loop.
//!
//! Contract: every byte the device moves goes through [`copy_spans`], from and to [`Span`]s
//! that lie in memory the device may access — a registered region checked for the right the
//! access needs ([`Span::of`]), or the device's own rings and buffers and a message's bytes
//! ([`Span::own`]). A span is accessed only through a [`SharedMem`] view of the whole memory it
//! lies in, so the device reads and writes a region's words atomically and a program that
//! uses views of the same region never races with it. Within a message, bytes land in address
//! order and the last byte is stored last, with `Release`. Nothing here allocates.

use core::ptr::NonNull;

use zverbs_core::shared::SharedMem;

use crate::config::Mr;
use crate::wqe::MAX_SEGS;

/// `len` bytes at `addr` that the device moves, and the memory they lie in, `(base, length)`:
/// the registered region they were checked against, or the span itself for the device's own
/// rings and a message's bytes. The device accesses them through a [`SharedMem`] of that
/// memory, which reads and writes the region's whole 8-byte words atomically (the rule of
/// `zverbs_core::shared`): a program that reads or writes a registered buffer through a view
/// of the same region (as `zverbs::MrBuf` does) while the device works never races with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Span {
    pub(super) addr: u64,
    pub(super) len: u64,
    mem: (u64, u64),
}

impl Span {
    const EMPTY: Self = Self::own(0, 0);

    /// Bytes of memory that is not registered: the device's rings, a local value, a message.
    pub(super) const fn own(addr: u64, len: u64) -> Self {
        Self {
            addr,
            len,
            mem: (addr, len),
        }
    }

    /// Bytes of the registered region `mr` (checked to lie in it).
    pub(super) const fn of(mr: &Mr, addr: u64, len: u64) -> Self {
        Self {
            addr,
            len,
            mem: (mr.addr, mr.len),
        }
    }

    /// The memory the span lies in, and the span's offset in it (`None` for memory at address
    /// 0, which no span has).
    ///
    /// # Safety
    ///
    /// The memory is valid for reads, and for writes if the view is written, while the view is
    /// used (the region's registration contract, or the device's own memory).
    unsafe fn view(&self) -> Option<(SharedMem<'static>, usize)> {
        let base = NonNull::new(core::ptr::with_exposed_provenance_mut::<u8>(
            self.mem.0 as usize,
        ))?;
        // SAFETY: (caller) valid; the device accesses registered memory only through views of
        // its region, the program through its own views (`Device::reg_mr`'s contract).
        let mem = unsafe { SharedMem::new(base, self.mem.1 as usize) };
        Some((mem, (self.addr - self.mem.0) as usize))
    }
}

/// A fixed-capacity list of spans (no allocation).
#[derive(Clone, Copy, Debug)]
pub(super) struct Spans {
    v: [Span; MAX_SEGS],
    n: usize,
}

impl Spans {
    pub(super) const fn new() -> Self {
        Self {
            v: [Span::EMPTY; MAX_SEGS],
            n: 0,
        }
    }

    /// Appends `s` (an empty span adds nothing; past [`MAX_SEGS`] spans, nothing either).
    pub(super) fn push(&mut self, s: Span) {
        if s.len != 0 && self.n < MAX_SEGS {
            self.v[self.n] = s;
            self.n += 1;
        }
    }

    pub(super) fn as_slice(&self) -> &[Span] {
        &self.v[..self.n]
    }
}

/// Copies `len` bytes from the spans `src` to the spans `dst`, in order, as `memmove` would
/// where a source and a destination overlap, with atomic accesses only (see [`Span`]). The
/// last byte is stored last, with `Release`, so a program that polls the last byte of a
/// buffer (as `ib_write_lat` does) with an `Acquire` load sees the whole message once it sees
/// that byte.
///
/// # Safety
///
/// Every span lies in its memory, which is valid for the access (checked against registered
/// regions, or the device's own rings and buffers), and together each side covers at least
/// `len` bytes.
pub(super) unsafe fn copy_spans(src: &[Span], dst: &[Span], len: u64) {
    let (mut i, mut si) = (0usize, 0u64);
    let (mut j, mut dj) = (0usize, 0u64);
    let mut left = len;
    while left > 0 && i < src.len() && j < dst.len() {
        let n = (src[i].len - si).min(dst[j].len - dj).min(left);
        // SAFETY: (caller) both memories are valid for the access.
        let views = unsafe { (src[i].view(), dst[j].view()) };
        if let (Some((s, so)), Some((d, dof))) = views {
            let (so, dof, n) = (so + si as usize, dof + dj as usize, n as usize);
            let ok = if n as u64 == left {
                // The last byte, read before the rest can overwrite it, stored after it.
                let plain = n - 1;
                s.load_u8(so + plain).is_ok_and(|b| {
                    d.copy_from(dof, &s, so, plain).is_ok()
                        && d.store_u8_release(dof + plain, b).is_ok()
                })
            } else {
                d.copy_from(dof, &s, so, n).is_ok()
            };
            debug_assert!(ok, "a span outside its memory");
        }
        left -= n;
        si += n;
        dj += n;
        if si == src[i].len {
            i += 1;
            si = 0;
        }
        if dj == dst[j].len {
            j += 1;
            dj = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Access;

    /// 8-byte aligned memory, accessed only through views while the threads run.
    fn words(bytes: usize) -> Vec<u64> {
        std::vec![0; bytes / 8]
    }

    fn region(w: &mut [u64]) -> Mr {
        Mr {
            addr: w.as_mut_ptr() as u64,
            len: (w.len() * 8) as u64,
            lkey: 0,
            rkey: 0,
            access: Access::ALL,
        }
    }

    fn pattern(n: usize, seed: u8) -> Vec<u8> {
        (0..n)
            .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed))
            .collect()
    }

    /// The device copies messages into a registered region, partial words at both ends,
    /// while a program thread reads the region and writes bytes that share those words,
    /// through a view of the region (as `zverbs::MrBuf` does). Miri checks that no access
    /// pair races; afterwards both sides' bytes are there.
    #[test]
    fn device_copies_race_with_no_program_access() {
        let rounds = if cfg!(miri) { 3 } else { 500 };
        let mut dst = words(256);
        let mr = region(&mut dst);
        let src = pattern(61, 9);
        let base = NonNull::new(mr.addr as usize as *mut u8).unwrap();
        // SAFETY: the region is live for the scope, and accessed only through views of it.
        let prog = unsafe { SharedMem::new(base, 256) };
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut got = [0; 80];
                for r in 0..rounds {
                    prog.read(0, &mut got).unwrap();
                    prog.store_u8(3, r as u8).unwrap();
                    prog.write(66, &[r as u8; 5]).unwrap();
                    let _ = prog.load_u8_acquire(65).unwrap();
                }
            });
            for _ in 0..rounds {
                let d = [Span::of(&mr, mr.addr + 5, 61)];
                // SAFETY: the source is the local vector, the destination lies in the region.
                unsafe { copy_spans(&[Span::own(src.as_ptr() as u64, 61)], &d, 61) };
            }
        });
        let mut got = [0; 72];
        prog.read(0, &mut got).unwrap();
        assert_eq!(got[5..66], src[..]);
        assert_eq!(got[3], (rounds - 1) as u8);
        assert_eq!(got[66..71], [(rounds - 1) as u8; 5]);
    }

    /// A program that sees a message's last byte change with an `Acquire` load sees the whole
    /// message: the device stores the last byte last, with `Release`.
    #[test]
    fn the_last_byte_publishes_the_message() {
        let rounds = if cfg!(miri) { 2 } else { 200 };
        let mut dst = words(128);
        let mr = region(&mut dst);
        let base = NonNull::new(mr.addr as usize as *mut u8).unwrap();
        // SAFETY: as above.
        let prog = unsafe { SharedMem::new(base, 128) };
        for r in 1..=rounds {
            let mut msg = pattern(43, r as u8);
            msg[42] = r as u8;
            std::thread::scope(|s| {
                s.spawn(|| {
                    let d = [Span::of(&mr, mr.addr + 3, 43)];
                    // SAFETY: as above.
                    unsafe { copy_spans(&[Span::own(msg.as_ptr() as u64, 43)], &d, 43) };
                });
                while prog.load_u8_acquire(45).unwrap() != r as u8 {
                    std::hint::spin_loop();
                }
                let mut got = [0; 43];
                prog.read(3, &mut got).unwrap();
                assert_eq!(got[..], msg[..]);
            });
        }
    }

    /// Overlapping source and destination in one region copy as `memmove` does, including the
    /// last byte, which is read before the rest can overwrite it.
    #[test]
    fn overlapping_copies_are_memmove() {
        for (from, to) in [(0u64, 1u64), (1, 0), (3, 12), (12, 3)] {
            let mut mem = words(64);
            let mr = region(&mut mem);
            let init = pattern(64, 1);
            let base = NonNull::new(mr.addr as usize as *mut u8).unwrap();
            // SAFETY: as above.
            let view = unsafe { SharedMem::new(base, 64) };
            view.write(0, &init).unwrap();
            let s = [Span::of(&mr, mr.addr + from, 40)];
            let d = [Span::of(&mr, mr.addr + to, 40)];
            // SAFETY: both spans lie in the region.
            unsafe { copy_spans(&s, &d, 40) };
            let mut want = init.clone();
            want.copy_within(from as usize..from as usize + 40, to as usize);
            let mut got = [0; 64];
            view.read(0, &mut got).unwrap();
            assert_eq!(got[..], want[..], "{from} -> {to}");
        }
    }
}
