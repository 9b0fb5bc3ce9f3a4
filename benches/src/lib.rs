//! Benchmarks of the zverbs data path.
