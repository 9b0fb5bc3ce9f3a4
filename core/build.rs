//! Hands `ZVERBS_MUTANT` to the compiler as `--cfg zverbs_mutant="<name>"`, in loom builds
//! only (`--cfg zverbs_loom`): the loom stage builds the models once per mutant, and a variable
//! read here rebuilds this crate and the ones above it, where a mutant in `RUSTFLAGS` would
//! rebuild every dependency (loom's included) as well. Outside a loom build the variable is
//! ignored, so it can weaken no ordering of an ordinary build.

fn main() {
    println!("cargo::rerun-if-env-changed=ZVERBS_MUTANT");
    if std::env::var_os("CARGO_CFG_ZVERBS_LOOM").is_none() {
        return;
    }
    if let Ok(mutant) = std::env::var("ZVERBS_MUTANT")
        && !mutant.is_empty()
    {
        println!("cargo::rustc-cfg=zverbs_mutant=\"{mutant}\"");
    }
}
