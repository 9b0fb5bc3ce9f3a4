//! Memory regions: keys, bounds and access rights, checked for every byte the device moves.
//!
//! Keys name a slot of a table sized at device creation: `lkey = (slot + 1) << 8 | gen << 1`
//! and `rkey = lkey | 1`, where `gen` (1..=127) changes each time the slot is reused, so a key
//! of a deregistered region is refused even after its slot is taken again. No key equals
//! `MLX5_INVALID_LKEY` (0x100).

use crate::config::{Access, Mr, SimError};

/// The most regions a table holds: `slot + 1` must fit the key's 24 bits above the low byte.
pub(crate) const MAX_MRS: u32 = 0xff_ffff;

/// Why a key and span were refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MrFault {
    /// No live region has this key (or it is the wrong kind of key).
    Key,
    /// The span does not lie inside the region (or its end overflows).
    Bounds,
    /// The region lacks the right.
    Access,
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    mr: Mr,
    live: bool,
    generation: u8,
}

/// The device's memory regions.
#[derive(Debug)]
pub(crate) struct MrTable {
    entries: Vec<Entry>,
}

impl MrTable {
    /// A table of `max` regions, allocated now.
    pub(crate) fn new(max: u32) -> Result<Self, SimError> {
        let empty = Entry {
            mr: Mr {
                addr: 0,
                len: 0,
                lkey: 0,
                rkey: 0,
                access: Access::NONE,
            },
            live: false,
            generation: 0,
        };
        if max > MAX_MRS {
            return Err(SimError::InvalidConfig(
                "max_mrs above 2^24 - 1 (keys carry the region's slot in 24 bits)",
            ));
        }
        let mut entries = Vec::new();
        entries
            .try_reserve_exact(max as usize)
            .map_err(|_| SimError::OutOfMemory)?;
        entries.resize(max as usize, empty);
        Ok(Self { entries })
    }

    pub(crate) fn register(&mut self, addr: u64, len: u64, access: Access) -> Result<Mr, SimError> {
        if (access.contains(Access::REMOTE_WRITE) || access.contains(Access::REMOTE_ATOMIC))
            && !access.contains(Access::LOCAL_WRITE)
        {
            return Err(SimError::InvalidAccess);
        }
        if addr.checked_add(len).is_none() {
            return Err(SimError::InvalidConfig("region end overflows"));
        }
        let slot = self
            .entries
            .iter()
            .position(|e| !e.live)
            .ok_or(SimError::TooMany)?;
        if slot >= MAX_MRS as usize {
            // Unreachable: the table holds at most `MAX_MRS` entries.
            return Err(SimError::TooMany);
        }
        let e = &mut self.entries[slot];
        e.generation = e.generation % 127 + 1;
        let lkey = ((slot as u32 + 1) << 8) | (u32::from(e.generation) << 1);
        e.mr = Mr {
            addr,
            len,
            lkey,
            rkey: lkey | 1,
            access,
        };
        e.live = true;
        Ok(e.mr)
    }

    pub(crate) fn deregister(&mut self, lkey: u32) -> Result<(), SimError> {
        match self.find(lkey, false) {
            Some(slot) => {
                self.entries[slot].live = false;
                Ok(())
            }
            None => Err(SimError::NoSuchMr(lkey)),
        }
    }

    fn find(&self, key: u32, remote: bool) -> Option<usize> {
        if (key & 1 == 1) != remote {
            return None;
        }
        let slot = ((key >> 8) as usize).checked_sub(1)?;
        let e = self.entries.get(slot)?;
        let want = if remote { e.mr.rkey } else { e.mr.lkey };
        (e.live && want == key).then_some(slot)
    }

    /// Checks that `addr..addr+len` lies in the region with local key `lkey` with `need`; the
    /// region.
    pub(crate) fn check_local(
        &self,
        lkey: u32,
        addr: u64,
        len: u64,
        need: Access,
    ) -> Result<Mr, MrFault> {
        self.check(lkey, false, addr, len, need)
    }

    /// Checks that `addr..addr+len` lies in the region with remote key `rkey` with `need`; the
    /// region.
    pub(crate) fn check_remote(
        &self,
        rkey: u32,
        addr: u64,
        len: u64,
        need: Access,
    ) -> Result<Mr, MrFault> {
        self.check(rkey, true, addr, len, need)
    }

    fn check(
        &self,
        key: u32,
        remote: bool,
        addr: u64,
        len: u64,
        need: Access,
    ) -> Result<Mr, MrFault> {
        let slot = self.find(key, remote).ok_or(MrFault::Key)?;
        let mr = &self.entries[slot].mr;
        let end = addr.checked_add(len).ok_or(MrFault::Bounds)?;
        if addr < mr.addr || end > mr.addr + mr.len {
            return Err(MrFault::Bounds);
        }
        if !mr.access.contains(need) {
            return Err(MrFault::Access);
        }
        Ok(*mr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_bounds_and_rights() {
        let mut t = MrTable::new(2).unwrap();
        let a = t.register(0x1000, 0x100, Access::LOCAL_WRITE).unwrap();
        assert_ne!(a.lkey, 0x100);
        assert_ne!(a.lkey, a.rkey);
        assert_eq!(t.check_local(a.lkey, 0x1000, 0x100, Access::NONE), Ok(a));
        assert_eq!(
            t.check_local(a.lkey, 0x10ff, 2, Access::NONE),
            Err(MrFault::Bounds)
        );
        assert_eq!(
            t.check_local(a.lkey, 0xfff, 1, Access::NONE),
            Err(MrFault::Bounds)
        );
        assert_eq!(
            t.check_local(a.lkey, u64::MAX, 2, Access::NONE),
            Err(MrFault::Bounds)
        );
        assert_eq!(
            t.check_local(a.rkey, 0x1000, 1, Access::NONE),
            Err(MrFault::Key)
        );
        assert_eq!(
            t.check_remote(a.rkey, 0x1000, 1, Access::REMOTE_READ),
            Err(MrFault::Access)
        );
        assert_eq!(
            t.register(0, 1, Access::REMOTE_WRITE),
            Err(SimError::InvalidAccess)
        );
        t.register(0, 1, Access::NONE).unwrap();
        assert_eq!(t.register(0, 1, Access::NONE), Err(SimError::TooMany));
        t.deregister(a.lkey).unwrap();
        assert_eq!(
            t.check_local(a.lkey, 0x1000, 1, Access::NONE),
            Err(MrFault::Key)
        );
        let b = t.register(0x1000, 0x100, Access::ALL).unwrap();
        assert_ne!(a.lkey, b.lkey, "a reused slot gets new keys");
        assert_eq!(
            t.check_local(a.lkey, 0x1000, 1, Access::NONE),
            Err(MrFault::Key)
        );
    }
}
