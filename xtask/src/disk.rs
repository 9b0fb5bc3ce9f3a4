//! Disk space during `cargo xtask test`.
//!
//! A full run builds the workspace several ways (tests, clippy, three feature sets, the
//! no_std proof, Miri, aarch64, one loom build per mutant) and then a VM image: together
//! several GiB in the target directory. On a machine short of disk, the run frees what a
//! finished stage built for itself alone (no later stage reads it) once the free space falls
//! under [`LOW_WATER`], and each stage's line says how much is left, so that a stage that runs
//! out of space is seen for what it is.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::util;

/// Free space under which a finished stage's own build directories are removed.
pub const LOW_WATER: u64 = 16 << 30;

/// Bytes available to an unprivileged writer on the file system holding `path` (the first
/// existing ancestor of it), or `None` when it cannot be told.
pub fn free(path: &Path) -> Option<u64> {
    let existing = path.ancestors().find(|p| p.exists())?;
    let c = CString::new(existing.as_os_str().as_bytes()).ok()?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c` is a NUL-terminated path that outlives the call, and `st` points to memory
    // large enough for a `statvfs`, which the call fills when it returns 0.
    if unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: statvfs returned 0, so it initialised every field of `st`.
    let st = unsafe { st.assume_init() };
    Some(st.f_bavail.saturating_mul(st.f_frsize))
}

/// `n` bytes in GiB with one decimal.
pub fn gib(n: u64) -> String {
    format!("{:.1} GiB", n as f64 / f64::from(1u32 << 30))
}

/// Free space in the target directory, for a stage's line.
pub fn report() -> String {
    free(&util::target_dir()).map_or_else(
        || "free space unknown".into(),
        |f| format!("{} free", gib(f)),
    )
}

/// Size of a directory tree in bytes (files only; symbolic links not followed).
pub fn size(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => size(&e.path()),
            Ok(t) if t.is_file() => e.metadata().map_or(0, |m| m.len()),
            _ => 0,
        })
        .sum()
}

/// The directories under the target directory named by `names`: a name ending in `*` stands
/// for every entry starting with what precedes it (`loom*`: `loom`, `loom-relaxed_cq_ci`, ...).
pub fn matching(target: &Path, names: &[&str]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for n in names {
        match n.strip_suffix('*') {
            Some(prefix) => {
                if let Ok(entries) = std::fs::read_dir(target) {
                    let mut found: Vec<PathBuf> = entries
                        .flatten()
                        .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
                        .map(|e| e.path())
                        .collect();
                    found.sort();
                    out.extend(found);
                }
            }
            None => out.push(target.join(n)),
        }
    }
    out.retain(|p| p.is_dir());
    out
}

/// After a stage passed: when the free space is under [`LOW_WATER`], removes the stage's own
/// build directories `scratch` (names under the target directory, see [`matching`]) and says
/// what it freed. They are rebuilt by the stage's next run.
pub fn free_scratch(stage: &str, scratch: &[&str]) {
    free_scratch_in(&util::target_dir(), stage, scratch, LOW_WATER);
}

/// [`free_scratch`] in the target directory `target`, under `low_water`; returns what it removed.
pub fn free_scratch_in(
    target: &Path,
    stage: &str,
    scratch: &[&str],
    low_water: u64,
) -> Vec<String> {
    let Some(before) = free(target) else {
        return Vec::new();
    };
    if before >= low_water || scratch.is_empty() {
        return Vec::new();
    }
    let mut freed = 0;
    let mut removed = Vec::new();
    for dir in matching(target, scratch) {
        let n = size(&dir);
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => {
                freed += n;
                removed.push(
                    dir.strip_prefix(target)
                        .unwrap_or(&dir)
                        .display()
                        .to_string(),
                );
            }
            Err(e) => println!("disk: could not remove {}: {e}", dir.display()),
        }
    }
    if !removed.is_empty() {
        println!(
            "disk: {} free, under {}: removed what {stage} built for itself ({}), {}",
            gib(before),
            gib(low_water),
            removed.join(", "),
            gib(freed)
        );
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch_tree(test: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("xtask-disk-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for d in ["loom", "loom-relaxed_cq_ci", "miri", "debug"] {
            std::fs::create_dir_all(dir.join(d).join("deps")).unwrap();
            std::fs::write(dir.join(d).join("deps/a"), [0u8; 100]).unwrap();
        }
        std::fs::write(dir.join("loom-file"), b"not a directory").unwrap();
        dir
    }

    #[test]
    fn names_with_a_star_match_every_directory_with_that_prefix() {
        let dir = scratch_tree("names");
        let found = matching(&dir, &["loom*", "miri", "absent"]);
        assert_eq!(
            found,
            [
                dir.join("loom"),
                dir.join("loom-relaxed_cq_ci"),
                dir.join("miri")
            ]
        );
        assert_eq!(size(&dir.join("loom")), 100);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn scratch_goes_only_when_the_disk_is_short() {
        let dir = scratch_tree("short");
        let kept = free_scratch_in(&dir, "loom", &["loom*"], 0);
        assert!(kept.is_empty());
        assert!(dir.join("loom").is_dir());
        let removed = free_scratch_in(&dir, "loom", &["loom*"], u64::MAX);
        assert_eq!(removed, ["loom", "loom-relaxed_cq_ci"]);
        assert!(!dir.join("loom").exists() && !dir.join("loom-relaxed_cq_ci").exists());
        assert!(dir.join("miri").is_dir() && dir.join("debug").is_dir());
        assert!(dir.join("loom-file").is_file());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn free_space_is_known_for_a_path_not_yet_made() {
        let f = free(Path::new("/tmp/surely/not/there/yet")).unwrap();
        assert!(f > 0);
        assert_eq!(gib(3 << 29), "1.5 GiB");
    }
}
