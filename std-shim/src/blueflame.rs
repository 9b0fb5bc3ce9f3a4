//! Which BlueFlame register each directly driven QP writes, and which QPs must take turns.
//!
//! A QP's register comes from the provider (`mlx5dv_init_obj`'s `bf.reg`). When the provider
//! gave it a register of its own (a thread domain's UAR, or the software device's per-QP
//! register) the send queue rings without any lock. Otherwise libmlx5 chose the register and
//! may give it to other QPs of this process, now or at any later QP creation: every such QP
//! joins the [`SharedBf`] of its register, found here by the register's address, and takes
//! its lock at each ring. One `SharedBf` per address for the whole process: QPs of different
//! contexts never share a mapping, and a register reused after its QPs are gone starts afresh.

use std::collections::HashMap;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, Weak};

use zverbs_mlx5dv::SharedBf;

use crate::error::{Error, Result};

/// The registers that QPs of this process may share, by address.
static REGISTERS: Mutex<Option<HashMap<usize, Weak<SharedRegister>>>> = Mutex::new(None);

fn registers() -> std::sync::MutexGuard<'static, Option<HashMap<usize, Weak<SharedRegister>>>> {
    REGISTERS.lock().unwrap_or_else(|p| p.into_inner())
}

/// One register that libmlx5 may give to several QPs: held by each of them (the count of
/// holders is the count of QPs on it), with the lock and toggle their send queues share.
#[derive(Debug)]
pub(crate) struct SharedRegister {
    addr: usize,
    bf: Arc<SharedBf>,
}

impl SharedRegister {
    /// The state the send queues of the QPs on this register share.
    pub(crate) fn bf(&self) -> &Arc<SharedBf> {
        &self.bf
    }
}

impl Drop for SharedRegister {
    fn drop(&mut self) {
        let mut map = registers();
        if let Some(m) = map.as_mut()
            && m.get(&self.addr).is_some_and(|w| w.strong_count() == 0)
        {
            m.remove(&self.addr);
        }
    }
}

/// Joins the QPs on the register at `reg` (buffers of `bf_size` bytes); returns the register
/// and how many other QPs of this process are on it now.
///
/// # Errors
///
/// [`Error::InvalidArgument`] when QPs on the same register report different buffer sizes
/// (libmlx5 gives every register of a context the same size; it would be a provider bug).
pub(crate) fn join(reg: NonNull<u8>, bf_size: u32) -> Result<(Arc<SharedRegister>, usize)> {
    let addr = reg.as_ptr() as usize;
    let mut map = registers();
    let m = map.get_or_insert_with(HashMap::new);
    let Some(r) = m.get(&addr).and_then(Weak::upgrade) else {
        let r = Arc::new(SharedRegister {
            addr,
            bf: Arc::new(SharedBf::new(bf_size)),
        });
        m.insert(addr, Arc::downgrade(&r));
        return Ok((r, 0));
    };
    let others = Arc::strong_count(&r) - 1;
    // Unlocked before `r` may be dropped below (its last holder's drop takes the lock).
    drop(map);
    if r.bf.bf_size() != bf_size {
        return Err(Error::InvalidArgument(format!(
            "BlueFlame register {addr:#x} reported with {bf_size}-byte buffers, earlier with {}",
            r.bf.bf_size()
        )));
    }
    Ok((r, others))
}

/// How many QPs of this process are on `r`, besides one.
pub(crate) fn others(r: &Arc<SharedRegister>) -> usize {
    // The registry's lock orders this count with joins and drops in progress.
    let _map = registers();
    Arc::strong_count(r) - 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qps_on_one_address_share_one_state() {
        let mut mem = [0u64; 64];
        let a = NonNull::new(mem.as_mut_ptr().cast::<u8>()).unwrap();
        // SAFETY: 256 bytes into a 512-byte array.
        let b = unsafe { a.add(256) };
        let (r1, n1) = join(a, 128).unwrap();
        let (r2, n2) = join(a, 128).unwrap();
        let (r3, n3) = join(b, 128).unwrap();
        assert_eq!((n1, n2, n3), (0, 1, 0));
        assert!(
            Arc::ptr_eq(r1.bf(), r2.bf()),
            "one lock and toggle per register"
        );
        assert!(!Arc::ptr_eq(r1.bf(), r3.bf()));
        assert_eq!((others(&r1), others(&r3)), (1, 0));
        assert!(matches!(join(a, 64), Err(Error::InvalidArgument(_))));
        drop(r2);
        assert_eq!(others(&r1), 0);
        drop((r1, r3));
        // Gone with its last QP: a register reused later starts afresh.
        assert!(
            registers()
                .as_ref()
                .unwrap()
                .get(&(a.as_ptr() as usize))
                .is_none()
        );
        let (r4, n4) = join(a, 64).unwrap();
        assert_eq!((n4, r4.bf().bf_size()), (0, 64));
    }
}
