//! # zverbs-abi
//!
//! Checks zverbs' hand-written rdma-core binding (crate `zverbs-ffi`, re-exported as
//! `zverbs::ffi`) against the system's headers, with the types of other crates that zverbs
//! hands to rdma-core: `zverbs_core::Sge` (a run of them is a verbs `sg_list`) and the
//! `mlx5dv_init_obj` out-structs of `zverbs_mlx5dv::prm::dv`. The build script compiles a C
//! probe against `<infiniband/verbs.h>`, `<infiniband/mlx5dv.h>` and `<rdma/rdma_cma.h>` that
//! records the size and alignment of every struct, the offset of every field, the size of the
//! enums the declarations assume to be 4 bytes, and the value of every constant; the Rust side
//! computes the same list from the declarations. [`compare`] pairs them up.
//!
//! Needs the `libibverbs-dev` and `librdmacm-dev` packages at build time (the build fails
//! naming them otherwise); nothing of rdma-core is linked or loaded.

use std::ffi::CStr;
use std::os::raw::c_char;

#[repr(C)]
struct Entry {
    name: *const c_char,
    value: u64,
}

unsafe extern "C" {
    static zverbs_abi_entries: [Entry; 0];
    static zverbs_abi_count: u64;
}

// Generated casts are uniform `as u64`, also where the value already is one.
#[allow(clippy::unnecessary_cast)]
mod generated {
    include!(concat!(env!("OUT_DIR"), "/rust_table.rs"));
}

/// What the C compiler computed: `(name, value)` for every checked item.
pub fn c_table() -> Vec<(String, u64)> {
    // SAFETY: the probe defines the array with `zverbs_abi_count` entries, each with a
    // NUL-terminated string literal.
    unsafe {
        let n = zverbs_abi_count as usize;
        let base = core::ptr::addr_of!(zverbs_abi_entries).cast::<Entry>();
        (0..n)
            .map(|i| {
                let e = &*base.add(i);
                (
                    CStr::from_ptr(e.name).to_string_lossy().into_owned(),
                    e.value,
                )
            })
            .collect()
    }
}

/// What the Rust declarations give, in the same order.
pub fn rust_table() -> &'static [(&'static str, u64)] {
    generated::RUST
}

/// One item whose C and Rust values differ.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// `struct.field`, `struct size`, `sizeof(enum …)` or a constant's name.
    pub name: String,
    /// The header's value.
    pub c: u64,
    /// The declaration's value.
    pub rust: u64,
}

/// Compares both tables; returns the number of items checked and the mismatches.
pub fn compare() -> (usize, Vec<Mismatch>) {
    let c = c_table();
    let r = rust_table();
    assert_eq!(
        c.len(),
        r.len(),
        "the C and Rust tables have different lengths"
    );
    let mut bad = Vec::new();
    for ((cn, cv), (rn, rv)) in c.iter().zip(r) {
        assert_eq!(cn, rn, "the C and Rust tables are out of step");
        if cv != rv {
            bad.push(Mismatch {
                name: cn.clone(),
                c: *cv,
                rust: *rv,
            });
        }
    }
    (c.len(), bad)
}
