//! loom models of the zverbs lock-free protocols.
