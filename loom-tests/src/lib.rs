//! Models of zverbs' lock-free protocols, run by loom with a loom thread playing the NIC.
//!
//! The models drive the library's own code: `zverbs-mlx5dv`'s `SendQueue`, `RecvQueue` and
//! `CompletionQueue` over memory made of loom cells. Built with `--cfg zverbs_loom` the
//! library's atomics, fences and cells are loom's (through `zverbs_core::sync`), and loom
//! explores every interleaving (up to `LOOM_MAX_PREEMPTIONS`) and every value its weak-memory
//! model lets a load return. A read of WQE or CQE bytes that is not ordered after their write
//! is reported by loom as a causality violation.
//!
//! Built without the cfg, the same scenarios run on ordinary threads as a stress test.
//!
//! Each protocol has a mutant: building with `--cfg zverbs_mutant="<name>"` (or, in a loom
//! build, `ZVERBS_MUTANT=<name>`, which `zverbs-core`'s build script turns into that cfg for
//! the library alone) weakens exactly one ordering in the library (all of them named in `zverbs_core::sync`, the one file where the
//! mutants live), and the model's test then asserts that loom rejects it. See
//! `docs/ordering.md` and `cargo xtask loom`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering as StdOrdering};

/// Threads: loom's under `cfg(zverbs_loom)`, the standard library's otherwise.
pub mod thread {
    #[cfg(zverbs_loom)]
    pub use loom::thread::{JoinHandle, spawn, yield_now};
    #[cfg(not(zverbs_loom))]
    pub use std::thread::{JoinHandle, spawn, yield_now};
}

pub mod mem;

/// Runs `f` under loom (every interleaving, preemptions bounded by `LOOM_MAX_PREEMPTIONS`,
/// default 2), or 200 times on real threads without loom. Returns the executions run.
pub fn model<F>(f: F) -> usize
where
    F: Fn() + Sync + Send + 'static,
{
    let executions = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&executions);
    let counted = move || {
        counter.fetch_add(1, StdOrdering::Relaxed);
        f();
    };
    #[cfg(zverbs_loom)]
    {
        let mut builder = loom::model::Builder::new();
        if builder.preemption_bound.is_none() {
            builder.preemption_bound = Some(2);
        }
        builder.check(counted);
    }
    #[cfg(not(zverbs_loom))]
    for _ in 0..200 {
        counted();
    }
    executions.load(StdOrdering::Relaxed)
}

/// The mutant this build was compiled with, if any (the library's: `zverbs_core::sync`).
pub fn mutant() -> Option<&'static str> {
    zverbs_core::sync::mutant::ACTIVE
}

/// Runs `body` as a model and checks the outcome against the build: it must pass, unless this
/// build carries one of `catches` (the mutants of the orderings the model depends on), in
/// which case loom must reject it. Prints the executions explored and the time taken, or the
/// rejection message.
pub fn check(name: &str, catches: &[&str], body: fn()) {
    let caught = match mutant() {
        Some(m) if cfg!(zverbs_loom) && catches.contains(&m) => Some(m),
        _ => None,
    };
    // The rejection is the expected outcome: keep the default hook from printing it as a
    // failure (the message is printed below). Loom unwinds the threads of an abandoned
    // execution with a non-string payload; those are not failures either and are not printed.
    let expected = caught.is_some();
    let previous = std::sync::Arc::new(std::panic::take_hook());
    let inner = std::sync::Arc::clone(&previous);
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let is_message = payload.is::<&str>() || payload.is::<String>();
        if is_message && !expected {
            inner(info);
        }
    }));
    let start = std::time::Instant::now();
    let result = std::panic::catch_unwind(|| model(body));
    let secs = start.elapsed().as_secs_f64();
    let _ = std::panic::take_hook();
    if let Ok(previous) = std::sync::Arc::try_unwrap(previous) {
        std::panic::set_hook(previous);
    }
    match (result, caught) {
        (Ok(n), None) => println!("model {name}: {n} executions explored in {secs:.2} s"),
        (Err(e), Some(m)) => {
            let msg = e
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| e.downcast_ref::<&str>().copied())
                .unwrap_or("(non-string panic)");
            println!("model {name}: mutant {m} rejected in {secs:.2} s: {msg}");
        }
        (Ok(n), Some(m)) => {
            panic!("model {name}: mutant {m} NOT caught ({n} executions explored)")
        }
        (Err(e), None) => std::panic::resume_unwind(e),
    }
}

#[cfg(all(test, not(zverbs_loom)))]
mod tests {
    use std::path::{Path, PathBuf};

    /// The workspace's root.
    fn root() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("the crate is in the workspace")
            .to_path_buf()
    }

    /// Every mutant the library defines (the list the loom stage runs) is described in
    /// `docs/ordering.md` and caught by a model.
    #[test]
    fn every_mutant_is_run_documented_and_caught() {
        let names: Vec<String> = zverbs_core::sync::mutant::ALL
            .iter()
            .map(|(name, _)| (*name).to_owned())
            .collect();
        let ordering = std::fs::read_to_string(root().join("docs/ordering.md")).unwrap();
        let models = std::fs::read_to_string(root().join("loom-tests/tests/models.rs")).unwrap();
        for name in &names {
            assert!(
                ordering.contains(&format!("`{name}`")),
                "docs/ordering.md does not name mutant {name}"
            );
            assert!(
                models.contains(&format!("\"{name}\"")),
                "no model catches mutant {name}"
            );
        }
    }
}
