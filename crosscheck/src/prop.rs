//! The property tests' configuration and the strategies they share (`proptest`).
//!
//! Each test draws its cases from a fixed seed, so every run compares the same inputs;
//! `PROPTEST_RNG_SEED=<decimal>` draws others and `PROPTEST_CASES` changes how many. A failing
//! case is shrunk to a small one (fields towards 0, edge values kept while they matter) and
//! reported; its seed is saved beside the test, in `<test>.proptest-regressions`, and replayed
//! first by every later run until the file is deleted.

use proptest::prelude::*;
use proptest::test_runner::{
    Config, FileFailurePersistence, RngAlgorithm, RngSeed, TestError, TestRunner,
};

/// The configuration of a property test in `source` (pass `file!()`): `cases` cases drawn
/// from `seed`, unless the `PROPTEST_*` variables say otherwise.
pub fn config(source: &'static str, cases: u32, seed: u64) -> Config {
    let set = |var: &str| std::env::var_os(var).is_some();
    let mut c = Config::default();
    if !set("PROPTEST_CASES") {
        c.cases = cases;
    }
    if !set("PROPTEST_RNG_SEED") {
        c.rng_seed = RngSeed::Fixed(seed);
    }
    if !set("PROPTEST_RNG_ALGORITHM") {
        // The fastest of proptest's generators: the comparisons run 100 000 cases each.
        c.rng_algorithm = RngAlgorithm::XorShift;
    }
    if !set("PROPTEST_MAX_SHRINK_ITERS") {
        c.max_shrink_iters = 20_000;
    }
    if !set("PROPTEST_DISABLE_FAILURE_PERSISTENCE") {
        c.failure_persistence = Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions",
        )));
    }
    c.source_file = Some(source);
    c
}

/// Runs `test` on the cases of `strategy` (see [`config`]); returns how many ran.
///
/// # Panics
///
/// When a case fails (an assertion in `test` panics): with the smallest failing value found.
pub fn check<S: Strategy>(
    source: &'static str,
    cases: u32,
    seed: u64,
    strategy: &S,
    test: impl Fn(S::Value),
) -> u32
where
    S::Value: std::fmt::Debug,
{
    let config = config(source, cases, seed);
    let cases = config.cases;
    let mut runner = TestRunner::new(config);
    match runner.run(strategy, |v| {
        test(v);
        Ok(())
    }) {
        Ok(()) => cases,
        Err(TestError::Fail(why, value)) => {
            panic!("{why}\nminimal failing input: {value:#?}")
        }
        Err(e) => panic!("{e}"),
    }
}

/// A value that is, one time in four, an edge of the `bits`-wide range (0, 1, the maximum,
/// one below it, the top bit alone, the top bit plus one), and otherwise any value.
pub fn edgy(bits: u32) -> impl Strategy<Value = u64> + Clone {
    let max = if bits == 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    };
    let top = 1u64 << (bits - 1);
    prop_oneof![
        3 => 0..=max,
        1 => proptest::sample::select(vec![0, 1, max, max - 1, top, top | 1]),
    ]
}

/// [`edgy`] over 8 bits.
pub fn edgy_u8() -> impl Strategy<Value = u8> + Clone {
    edgy(8).prop_map(|v| v as u8)
}

/// [`edgy`] over 16 bits.
pub fn edgy_u16() -> impl Strategy<Value = u16> + Clone {
    edgy(16).prop_map(|v| v as u16)
}

/// [`edgy`] over 32 bits.
pub fn edgy_u32() -> impl Strategy<Value = u32> + Clone {
    edgy(32).prop_map(|v| v as u32)
}

/// [`edgy`] over 64 bits.
pub fn edgy_u64() -> impl Strategy<Value = u64> + Clone {
    edgy(64)
}

/// 16 bytes of garbage: what a buffer holds before a setter writes it. (Drawn as one `u128`:
/// an array of 16 drawn bytes costs ten times as much, for shrinking that finds nothing more.)
pub fn garbage() -> impl Strategy<Value = [u8; 16]> + Clone {
    any::<u128>().prop_map(u128::to_ne_bytes)
}
