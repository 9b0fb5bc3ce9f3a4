//! Compile-fail tests: programs the API must refuse, each with the compiler's error beside it
//! (`tests/compile_fail/*.rs` and their `.stderr`). They pin the guarantees that live in the
//! types, not in run-time checks: posting memory the library does not own needs `unsafe`, a
//! queue is used by one thread at a time, and borrowed bookkeeping outlives the queues that
//! use it.
//!
//! After a deliberate change of an error's wording, `TRYBUILD=overwrite cargo test -p zverbs
//! --test compile_fail` rewrites the `.stderr` files; read the diff before committing it.
//!
//! They run only with the software device (feature `sim`, which this crate's tests turn on): the compiler names a type by its shortest
//! unambiguous path, which depends on the crates in the build (without the software device,
//! `zverbs_mlx5dv::Datagram` is plain `Datagram`), so one set of `.stderr` files fits one
//! feature set.

#[cfg(feature = "sim")]
#[test]
fn compile_fail() {
    trybuild::TestCases::new().compile_fail("tests/compile_fail/*.rs");
}
