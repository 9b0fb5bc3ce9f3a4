//! # zverbs-crosscheck
//!
//! Checks zverbs' mlx5 layouts and bytes against rdma-core's own `<infiniband/mlx5dv.h>` (and
//! `<infiniband/verbs.h>`), Debian package `libibverbs-dev`.
//!
//! The build script compiles a C probe (`c/probe.c`) against the installed headers; without
//! them the build fails and names the package, so the checks never silently skip. The probe
//! writes WQE segments with the header's own helpers (`mlx5dv_set_ctrl_seg`,
//! `mlx5dv_set_data_seg`) and structs, reads CQEs through `struct mlx5_cqe64` /
//! `struct mlx5_err_cqe` and the `mlx5dv_get_cqe_*` helpers, builds whole send (RC and UD)
//! and receive WQEs the way libmlx5's `_mlx5_post_send` and `mlx5_post_recv` lay them out,
//! keeps a shared receive queue as libmlx5's `mlx5_post_srq_recv` and `mlx5_free_srq_wqe`
//! do, and exports a
//! table of every `sizeof`, `offsetof` and constant the Rust side copies. The integration
//! tests in `tests/` feed the same seeded random inputs to both sides and compare the bytes:
//!
//! | test file | what it compares |
//! |---|---|
//! | `segments.rs` | control, data, remote-address, atomic and datagram (address vector) segments, setters and getters |
//! | `cqe.rs` | every `Cqe64` accessor (the UD and SRQ receive fields included), CQE opcodes, syndromes and their statuses, the GRH flag of receive completions |
//! | `layout.rs` | sizes, offsets and constants, and the `repr(C)` mirrors of `prm::dv` (QP, CQ, SRQ, AH) |
//! | `wqe.rs` | whole WQEs from `SendQueue`, the doorbell record and BlueFlame (the harness is [`send_run`], shared with `ud_wqe.rs`) |
//! | `ud_wqe.rs` | whole UD WQEs from `SendQueue::new_ud` (datagram segment, data, inline), the doorbell record, BlueFlame, and the requests both sides refuse |
//! | `recv_wqe.rs` | receive WQEs from `RecvQueue` and their doorbell record |
//! | `srq.rs` | shared receive WQEs (next segment and data segments) and their free list, as libmlx5 writes and links them |
//! | `srq_queue.rs` | receives through `SharedRecvQueue` and out-of-order frees through the CQ poller, against libmlx5's SRQ post and free: WQEs used, bytes, doorbell record, refusals |
//!
//! Run them with `cargo test -p zverbs-crosscheck -- --nocapture` to see how many randomized
//! cases each compared. The comparisons of single values (segments, CQEs) are property tests
//! ([`prop`], on `proptest`): their cases come from fixed seeds (`PROPTEST_RNG_SEED` draws
//! others, `PROPTEST_CASES` sets how many), and a failing case is shrunk and saved in
//! `tests/<file>.proptest-regressions`, replayed first by later runs. The comparisons of
//! sequences (whole send and receive WQEs through one ring past the 16-bit index wrap, shared
//! receives through one SRQ, the GRH flag through one poller) carry state from one request to the next and draw from
//! [`SplitMix64`]; `ZVERBS_CROSSCHECK_SEED` replays or varies them.
//!
//! This crate is a test harness: it is not published and nothing depends on it.
#![deny(
    unsafe_op_in_unsafe_fn,
    missing_docs,
    clippy::undocumented_unsafe_blocks,
    clippy::missing_safety_doc
)]

pub mod ffi;
pub mod mem;
pub mod probe;
pub mod prop;
pub mod rng;
pub mod send_run;

pub use mem::DeviceMem;
pub use rng::SplitMix64;
