//! Kernel modules: the `.ko` files a set of modules needs, in an order `insmod` can load them.
//!
//! A module's dependencies are in its `.modinfo` section as the NUL-terminated string
//! `depends=a,b,c` (what `modinfo -F depends` prints); Debian's kernel package ships the
//! modules uncompressed, so the string can be read straight from the file. Module names use
//! `_` where file names may use `-` (`crc32-pclmul.ko` is module `crc32_pclmul`).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::util::{Result, anyhow, bail};

/// A module's name as the kernel knows it: `-` in file names becomes `_`.
pub fn normalize(name: &str) -> String {
    name.replace('-', "_")
}

/// The names in the `depends=` string of a module's `.modinfo` section.
pub fn depends(ko: &[u8]) -> Vec<String> {
    const KEY: &[u8] = b"\0depends=";
    let Some(at) = ko.windows(KEY.len()).position(|w| w == KEY) else {
        return Vec::new();
    };
    let rest = &ko[at + KEY.len()..];
    let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
    String::from_utf8_lossy(&rest[..end])
        .split(',')
        .filter(|s| !s.is_empty())
        .map(normalize)
        .collect()
}

/// Every `.ko` file under `moddir` (a `lib/modules/<version>` directory), by module name,
/// with its path relative to `moddir`.
pub fn index(moddir: &Path) -> io::Result<BTreeMap<String, PathBuf>> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<String, PathBuf>) -> io::Result<()> {
        for e in fs::read_dir(dir)? {
            let e = e?;
            let path = e.path();
            if e.file_type()?.is_dir() {
                walk(base, &path, out)?;
            } else if let Some(stem) = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(".ko"))
            {
                let rel = path.strip_prefix(base).unwrap_or(&path).to_path_buf();
                out.insert(normalize(stem), rel);
            }
        }
        Ok(())
    }
    let mut out = BTreeMap::new();
    walk(moddir, moddir, &mut out)?;
    Ok(out)
}

/// The modules built into the kernel image (`modules.builtin` lists them as paths).
pub fn builtin(moddir: &Path) -> BTreeSet<String> {
    builtin_names(&fs::read_to_string(moddir.join("modules.builtin")).unwrap_or_default())
}

/// The module names in the text of a `modules.builtin` file.
pub fn builtin_names(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| l.rsplit('/').next()?.strip_suffix(".ko"))
        .map(normalize)
        .collect()
}

/// The modules `wanted` and everything they depend on, each once, dependencies first, as
/// (name, path relative to `moddir`). `depends_of` gives a module file's dependencies (its
/// [`depends`]). Wanted modules
/// that are built into the kernel are left out; a module found nowhere is an error.
pub fn load_order(
    wanted: &[&str],
    index: &BTreeMap<String, PathBuf>,
    builtin: &BTreeSet<String>,
    mut depends_of: impl FnMut(&Path) -> io::Result<Vec<String>>,
) -> Result<Vec<(String, PathBuf)>> {
    fn visit(
        name: &str,
        index: &BTreeMap<String, PathBuf>,
        builtin: &BTreeSet<String>,
        read: &mut dyn FnMut(&Path) -> io::Result<Vec<String>>,
        visiting: &mut Vec<String>,
        out: &mut Vec<(String, PathBuf)>,
    ) -> Result {
        if out.iter().any(|(n, _)| n == name) {
            return Ok(());
        }
        if visiting.iter().any(|n| n == name) {
            bail!("kernel modules depend on each other in a cycle: {visiting:?}");
        }
        let Some(path) = index.get(name) else {
            if builtin.contains(name) {
                return Ok(());
            }
            bail!("kernel module {name} is neither a module file nor built in");
        };
        let deps = read(path).map_err(|e| anyhow!("{}: {e}", path.display()))?;
        visiting.push(name.to_string());
        for dep in deps {
            visit(&dep, index, builtin, read, visiting, out)?;
        }
        visiting.pop();
        out.push((name.to_string(), path.clone()));
        Ok(())
    }
    let mut out = Vec::new();
    for w in wanted {
        visit(
            &normalize(w),
            index,
            builtin,
            &mut depends_of,
            &mut Vec::new(),
            &mut out,
        )?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake module file: some bytes, then a `.modinfo`-like run of NUL-separated strings.
    fn ko(modinfo: &[&str]) -> Vec<u8> {
        let mut b = b"\x7fELF....depends= is not at a string start here".to_vec();
        for s in modinfo {
            b.push(0);
            b.extend_from_slice(s.as_bytes());
        }
        b.push(0);
        b
    }

    #[test]
    fn depends_reads_the_modinfo_string() {
        let m = ko(&[
            "license=GPL",
            "depends=ib_core,udp_tunnel,ip6-udp-tunnel",
            "vermagic=6.1",
        ]);
        assert_eq!(depends(&m), ["ib_core", "udp_tunnel", "ip6_udp_tunnel"]);
        assert!(depends(&ko(&["depends=", "name=dummy"])).is_empty());
        assert!(depends(&ko(&["name=x"])).is_empty());
    }

    #[test]
    fn load_order_puts_dependencies_first_once_and_skips_builtins() {
        let files: BTreeMap<&str, Vec<u8>> = BTreeMap::from([
            ("rxe.ko", ko(&["depends=ib_uverbs,ib_core,udp_tunnel"])),
            ("uverbs.ko", ko(&["depends=ib_core"])),
            ("core.ko", ko(&["depends="])),
            ("dummy.ko", ko(&[])),
        ]);
        let index = BTreeMap::from([
            ("rdma_rxe".to_string(), PathBuf::from("rxe.ko")),
            ("ib_uverbs".to_string(), PathBuf::from("uverbs.ko")),
            ("ib_core".to_string(), PathBuf::from("core.ko")),
            ("dummy".to_string(), PathBuf::from("dummy.ko")),
        ]);
        let builtin = BTreeSet::from(["udp_tunnel".to_string(), "virtio".to_string()]);
        let read = |p: &Path| Ok(depends(&files[p.to_str().unwrap()]));
        let order = load_order(&["rdma_rxe", "virtio", "dummy"], &index, &builtin, read).unwrap();
        let names: Vec<&str> = order.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["ib_core", "ib_uverbs", "rdma_rxe", "dummy"]);

        let err = load_order(&["nope"], &index, &builtin, |_| Ok(Vec::new())).unwrap_err();
        assert!(err.to_string().contains("nope"), "{err}");
    }
}
