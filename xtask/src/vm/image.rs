//! The guest image: Debian 12's kernel and an initramfs with busybox, rdma-core (libibverbs
//! with the rxe provider, librdmacm), rdma-core's and perftest's tools, iproute2's `ip` and
//! `rdma`, and the kernel modules for rxe, rdma_cm, veth, dummy and 9p.
//!
//! Everything comes from Debian's package archive through the host's apt: `apt-get download`
//! fetches the packages into the cache and `dpkg -x` unpacks them there; nothing is installed
//! on the host. The host's own C library goes into the image (with the libraries the tools
//! need), so that programs built on the host (cargo test executables) run unchanged in the
//! guest. The image is built once and cached (see [`super::cache_dir`]); it is rebuilt when
//! its recipe below changes, or on `cargo xtask rxe --image --rebuild`. The guest's `/init`
//! (`vm/init.sh`) is not part of it: every boot appends it (see [`super::initramfs`]), so
//! editing the script needs no rebuild.

use std::collections::BTreeSet;
use std::fs;
use std::io::BufWriter;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::{cpio, kmod, tar};
use crate::util::{self, Result, anyhow, bail};

/// Bump when the recipe changes in a way the lists below do not show.
const RECIPE: u32 = 2;

/// The package whose dependency names the current kernel (`linux-image-6.1.0-NN-amd64`).
/// Not the `-cloud-amd64` flavour: it lacks rxe and 9p.
const KERNEL_META: &str = "linux-image-amd64";

/// Overrides the kernel package (`linux-image-6.1.0-28-amd64`, say).
pub const KERNEL_ENV: &str = "ZVERBS_VM_KERNEL";

/// Packages whose every program goes into the image.
const TOOL_PACKAGES: &[&str] = &["ibverbs-utils", "rdmacm-utils", "perftest"];

/// Single programs taken from a package: (package, program).
const PROGRAMS: &[(&str, &str)] = &[("iproute2", "ip"), ("iproute2", "rdma"), ("iproute2", "ss")];

/// Packages unpacked to provide the libraries the programs need (the rest comes from the
/// host, whose C library the guest uses). The dynamic `busybox`, not `busybox-static`: the
/// static one's shell prefers its own applets to the programs on `PATH`, so `ip` would not be
/// iproute2's.
const LIBRARY_PACKAGES: &[&str] = &[
    "busybox",
    "libibverbs1",
    "ibverbs-providers",
    "librdmacm1",
    "libibumad3",
    "libpci3",
    "libnl-3-200",
    "libnl-route-3-200",
    "libmnl0",
    "libbsd0",
    "libmd0",
    "libelf1",
    "libcap2",
    "libbpf1",
    "zlib1g",
    "libudev1",
];

/// Kernel modules loaded at boot, with their dependencies. `crc32_generic`: rxe asks the
/// crypto layer for "crc32" at run time, which no `depends=` names.
pub const MODULES: &[&str] = &[
    "crc32_generic",
    "rdma_rxe",
    "ib_uverbs",
    "ib_umad",
    "rdma_ucm",
    "veth",
    "dummy",
    "virtio_pci",
    "9pnet_virtio",
    "9p",
];

/// Module parameters: the guest creates its dummy interface itself.
const MODULE_PARAMS: &[(&str, &str)] = &[("dummy", "numdummies=0")];

/// The host's C runtime, copied so that programs built on the host run in the guest.
const HOST_LIBS: &[&str] = &[
    "libc.so.6",
    "libm.so.6",
    "libpthread.so.0",
    "libdl.so.2",
    "librt.so.1",
    "libresolv.so.2",
    "libutil.so.1",
    "libgcc_s.so.1",
    "libstdc++.so.6",
    "libnss_files.so.2",
    "libnss_dns.so.2",
];

/// Where libraries go in the guest.
pub const LIBDIR: &str = "usr/lib/x86_64-linux-gnu";

/// The host directories searched for libraries after the unpacked packages.
const HOST_LIBDIRS: &[&str] = &["/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu"];

/// A built image.
#[derive(Debug)]
pub struct Image {
    /// The kernel.
    pub kernel: PathBuf,
    /// The initramfs without `/init` (an uncompressed `newc` archive).
    pub base: PathBuf,
    /// The kernel's version (`6.1.0-28-amd64`).
    pub kernel_version: String,
    /// Libraries in the image, by file name (to add what host-built programs need).
    pub libs: BTreeSet<String>,
    /// How long building it took, when this call built it.
    pub built_in: Option<Duration>,
}

/// The recipe as text: an image built from another recipe is rebuilt.
fn manifest() -> String {
    format!(
        "recipe {RECIPE}\nkernel {}\ntools {TOOL_PACKAGES:?}\nprograms {PROGRAMS:?}\n\
         libraries {LIBRARY_PACKAGES:?}\nmodules {MODULES:?} {MODULE_PARAMS:?}\nhost {HOST_LIBS:?}\n",
        std::env::var(KERNEL_ENV).unwrap_or_else(|_| KERNEL_META.into())
    )
}

/// The image in `dir`, built first if missing, from another recipe, or when `rebuild`.
pub fn ensure(dir: &Path, rebuild: bool) -> Result<Image> {
    if !rebuild && let Some(image) = cached(dir) {
        return Ok(image);
    }
    let t = Instant::now();
    println!("building the VM image in {}", dir.display());
    build(dir)?;
    let mut image = cached(dir).ok_or_else(|| anyhow!("the image built is incomplete"))?;
    image.built_in = Some(t.elapsed());
    println!(
        "VM image built in {} (kernel {})",
        util::duration(t.elapsed()),
        image.kernel_version
    );
    Ok(image)
}

fn cached(dir: &Path) -> Option<Image> {
    if fs::read_to_string(dir.join("manifest")).ok()? != manifest() {
        return None;
    }
    let vmlinux = dir.join("vmlinux");
    let image = Image {
        kernel: if vmlinux.is_file() {
            vmlinux
        } else {
            dir.join("vmlinuz")
        },
        base: dir.join("base.cpio"),
        kernel_version: fs::read_to_string(dir.join("kernel-version"))
            .ok()?
            .trim()
            .to_string(),
        libs: fs::read_to_string(dir.join("libs"))
            .ok()?
            .lines()
            .map(str::to_string)
            .collect(),
        built_in: None,
    };
    (image.kernel.is_file() && image.base.is_file()).then_some(image)
}

fn build(dir: &Path) -> Result {
    let work = dir.join("build");
    if work.exists() {
        fs::remove_dir_all(&work)?;
    }
    let _ = fs::remove_file(dir.join("manifest"));
    let debs = work.join("debs");
    let unpacked = work.join("unpacked");
    let root = work.join("root");
    fs::create_dir_all(&debs)?;

    // 1. Download.
    let kernel_pkg = kernel_package()?;
    println!("kernel package: {kernel_pkg}");
    let mut packages: Vec<&str> = vec![&kernel_pkg];
    packages.extend(TOOL_PACKAGES);
    packages.extend(PROGRAMS.iter().map(|(p, _)| *p));
    packages.extend(LIBRARY_PACKAGES);
    packages.sort_unstable();
    packages.dedup();
    let mut dl = apt("apt-get");
    dl.arg("download").args(&packages).current_dir(&debs);
    util::run(&mut dl)?;

    // 2. Unpack each package into its own directory.
    fs::create_dir_all(&unpacked)?;
    println!("unpacking them into {}", unpacked.display());
    for entry in fs::read_dir(&debs)? {
        let path = entry?.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let Some((package, _)) = name.split_once('_') else {
            continue;
        };
        if package == kernel_pkg {
            unpack_kernel(&path, &unpacked.join(package))?;
            continue;
        }
        let mut x = Command::new("dpkg");
        x.arg("-x").arg(&path).arg(unpacked.join(package));
        let status = x.status()?;
        util::check(&x, status)?;
    }
    let pkg = |p: &str| unpacked.join(p);

    // 3. The root: merged /usr, busybox and its applets, the programs.
    for d in [
        "usr/bin",
        "usr/sbin",
        LIBDIR,
        "usr/lib64",
        "etc/zverbs-vm",
        "proc",
        "sys",
        "dev",
        "tmp",
        "run",
        "root",
        "var/tmp",
    ] {
        fs::create_dir_all(root.join(d))?;
    }
    for (link, target) in [
        ("bin", "usr/bin"),
        ("sbin", "usr/sbin"),
        ("lib", "usr/lib"),
        ("lib64", "usr/lib64"),
    ] {
        symlink(target, root.join(link))?;
    }
    let busybox = pkg("busybox").join("bin/busybox");
    install(&busybox, &root.join("usr/bin/busybox"))?;
    let applets = Command::new(&busybox).arg("--list").output()?;
    if !applets.status.success() {
        bail!("`{} --list` failed", busybox.display());
    }
    for applet in String::from_utf8_lossy(&applets.stdout).split_whitespace() {
        if applet != "busybox" {
            symlink("busybox", root.join("usr/bin").join(applet))?;
        }
    }
    let mut programs = vec![root.join("usr/bin/busybox")];
    for p in TOOL_PACKAGES {
        let bin = pkg(p).join("usr/bin");
        let mut found = 0;
        for e in fs::read_dir(&bin).map_err(|e| anyhow!("{}: {e}", bin.display()))? {
            let path = e?.path();
            // ELF programs only (perftest also ships bash scripts).
            if fs::read(&path).is_ok_and(|b| b.starts_with(b"\x7fELF")) {
                programs.push(install_program(&path, &root)?);
                found += 1;
            }
        }
        if found == 0 {
            bail!("package {p} has no program in /usr/bin");
        }
    }
    for (p, name) in PROGRAMS {
        let path = ["usr/bin", "usr/sbin", "bin", "sbin"]
            .iter()
            .map(|d| pkg(p).join(d).join(name))
            .find(|f| f.is_file())
            .ok_or_else(|| anyhow!("package {p} has no program {name}"))?;
        programs.push(install_program(&path, &root)?);
    }

    // 4. libibverbs' rxe provider, and libmlx5 (present wherever rdma-core is installed).
    let prov = pkg("ibverbs-providers");
    let provdir = root.join(LIBDIR).join("libibverbs");
    fs::create_dir_all(&provdir)?;
    fs::create_dir_all(root.join("etc/libibverbs.d"))?;
    let src = prov.join(LIBDIR).join("libibverbs");
    for e in fs::read_dir(&src).map_err(|e| anyhow!("{}: {e}", src.display()))? {
        let path = e?.path();
        if path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("librxe-"))
        {
            let to = provdir.join(path.file_name().unwrap_or_default());
            install(&path, &to)?;
            programs.push(to);
        }
    }
    install(
        &prov.join("etc/libibverbs.d/rxe.driver"),
        &root.join("etc/libibverbs.d/rxe.driver"),
    )?;
    let mlx5 = root.join(LIBDIR).join("libmlx5.so.1");
    install(&prov.join(LIBDIR).join("libmlx5.so.1"), &mlx5)?;
    programs.push(mlx5);

    // 5. Libraries: what the programs need (unpacked packages first, then the host), and
    // the host's C runtime for host-built programs.
    let mut search: Vec<PathBuf> = Vec::new();
    for e in fs::read_dir(&unpacked)? {
        let d = e?.path();
        for sub in [LIBDIR, "lib/x86_64-linux-gnu"] {
            if d.join(sub).is_dir() {
                search.push(d.join(sub));
            }
        }
    }
    let mut libs = BTreeSet::new();
    for (name, path) in needed_libs(&programs, &search)? {
        install(&path, &root.join(LIBDIR).join(&name))?;
        libs.insert(name);
    }
    for name in HOST_LIBS {
        if let Some(path) = HOST_LIBDIRS
            .iter()
            .map(|d| Path::new(d).join(name))
            .find(|p| p.exists())
            && libs.insert(name.to_string())
        {
            install(&path, &root.join(LIBDIR).join(name))?;
        }
    }
    let ld = Path::new("/lib64/ld-linux-x86-64.so.2");
    install(ld, &root.join("usr/lib64/ld-linux-x86-64.so.2"))?;
    install(ld, &root.join(LIBDIR).join("ld-linux-x86-64.so.2"))?;
    for (link, target) in [
        ("libibverbs.so", "libibverbs.so.1"),
        ("librdmacm.so", "librdmacm.so.1"),
    ] {
        symlink(target, root.join(LIBDIR).join(link))?;
    }

    // 6. Kernel modules, in load order, and the list `/init` loads.
    let kernel = pkg(&kernel_pkg);
    let kernel_version = only_entry(&kernel.join("lib/modules"))?;
    let moddir = kernel.join("lib/modules").join(&kernel_version);
    let index = kmod::index(&moddir)?;
    let builtin = kmod::builtin(&moddir);
    let order = kmod::load_order(MODULES, &index, &builtin, |p| {
        fs::read(moddir.join(p)).map(|ko| kmod::depends(&ko))
    })?;
    let guest_moddir = Path::new("/usr/lib/modules").join(&kernel_version);
    let mut list = String::new();
    for (name, rel) in &order {
        install(
            &moddir.join(rel),
            &root
                .join(guest_moddir.strip_prefix("/").unwrap_or(&guest_moddir))
                .join(rel),
        )?;
        let params = MODULE_PARAMS
            .iter()
            .find(|(m, _)| *m == name)
            .map_or("", |(_, p)| p);
        list.push_str(&format!("{} {params}\n", guest_moddir.join(rel).display()));
    }
    fs::write(root.join("etc/zverbs-vm/modules"), list)?;

    // 7. A minimal /etc.
    for (file, text) in [
        ("etc/passwd", "root:x:0:0:root:/root:/bin/sh\n"),
        ("etc/group", "root:x:0:\n"),
        ("etc/nsswitch.conf", "hosts: files\n"),
        ("etc/hosts", "127.0.0.1 localhost\n::1 localhost\n"),
    ] {
        fs::write(root.join(file), text)?;
    }

    // 8. The kernel, also uncompressed when possible: qemu boots an ELF `vmlinux` through
    // its PVH entry point, skipping the firmware and the decompressor, which take seconds
    // under emulation. Then pack; the manifest last, so that a build cut short is not taken
    // for a good one.
    let vmlinuz = dir.join("vmlinuz");
    install(
        &kernel
            .join("boot")
            .join(format!("vmlinuz-{kernel_version}")),
        &vmlinuz,
    )?;
    let vmlinux = dir.join("vmlinux");
    let _ = fs::remove_file(&vmlinux);
    match decompress_kernel(&fs::read(&vmlinuz)?) {
        Ok(elf) => fs::write(&vmlinux, elf)?,
        Err(e) => println!("booting the compressed kernel ({e})"),
    }
    let tmp = dir.join("base.cpio.tmp");
    let mut archive = cpio::Archive::new(BufWriter::new(fs::File::create(&tmp)?));
    archive.tree(&root)?;
    archive.finish()?.into_inner().map_err(|e| anyhow!("{e}"))?;
    fs::rename(&tmp, dir.join("base.cpio"))?;
    fs::write(dir.join("kernel-version"), format!("{kernel_version}\n"))?;
    let mut names = String::new();
    for l in &libs {
        names.push_str(l);
        names.push('\n');
    }
    fs::write(dir.join("libs"), names)?;
    fs::write(dir.join("manifest"), manifest())?;
    fs::remove_dir_all(&work)?;
    Ok(())
}

/// An apt command with the options this build uses: as root, apt would hand downloads to its
/// sandbox user, which cannot write into the cache; wait for a lock others hold.
fn apt(program: &str) -> Command {
    let mut cmd = Command::new(program);
    cmd.args(["-o", "DPkg::Lock::Timeout=600"]);
    if crate::packages::is_root() {
        cmd.args(["-o", "APT::Sandbox::User=root"]);
    }
    cmd.env("DEBIAN_FRONTEND", "noninteractive");
    cmd
}

/// The kernel package `linux-image-amd64` depends on; the package lists are updated first
/// if apt knows no such package (and this runs as root).
fn kernel_package() -> Result<String> {
    if let Ok(p) = std::env::var(KERNEL_ENV) {
        return Ok(p);
    }
    let query = || -> Option<String> {
        let out = Command::new("apt-cache")
            .args(["depends", KERNEL_META])
            .output()
            .ok()?;
        String::from_utf8_lossy(&out.stdout).lines().find_map(|l| {
            let dep = l.trim().strip_prefix("Depends: ")?;
            (dep.starts_with("linux-image-") && dep.ends_with("-amd64")).then(|| dep.to_string())
        })
    };
    if let Some(p) = query() {
        return Ok(p);
    }
    if !crate::packages::is_root() {
        bail!(
            "apt knows no package {KERNEL_META}: its package lists need updating; as root run\n    \
             apt-get update\n(or set {KERNEL_ENV} to a kernel package name)"
        );
    }
    let mut update = apt("apt-get");
    update.arg("update");
    util::run(&mut update)?;
    query().ok_or_else(|| {
        anyhow!("apt knows no package {KERNEL_META} even after `apt-get update`; is this Debian?")
    })
}

/// The uncompressed kernel (ELF) inside a bzImage whose payload is xz-compressed, as Debian's
/// is: the payload starts at `payload_offset` (setup header, offset 0x248) past the setup
/// sectors (`setup_sects`, offset 0x1f1); `xz` decompresses its first stream.
fn decompress_kernel(bzimage: &[u8]) -> Result<Vec<u8>> {
    let start = xz_payload(bzimage).ok_or_else(|| anyhow!("no xz payload found"))?;
    let mut xz = Command::new("xz")
        .args(["--single-stream", "--decompress", "--stdout"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| anyhow!("cannot run xz: {e}"))?;
    let mut stdin = xz.stdin.take().ok_or_else(|| anyhow!("xz: no stdin"))?;
    let payload = bzimage[start..].to_vec();
    let feeder = std::thread::spawn(move || {
        use std::io::Write;
        // xz stops reading after the stream; the rest of the payload is not needed.
        let _ = stdin.write_all(&payload);
    });
    let out = xz.wait_with_output()?;
    let _ = feeder.join();
    if !out.status.success() || !out.stdout.starts_with(b"\x7fELF") {
        bail!("xz gave no ELF kernel ({})", out.status);
    }
    Ok(out.stdout)
}

/// Where a bzImage's xz-compressed payload starts, if it has one.
fn xz_payload(bzimage: &[u8]) -> Option<usize> {
    let setup_sects = match *bzimage.get(0x1f1)? {
        0 => 4,
        n => usize::from(n),
    };
    let offset = u32::from_le_bytes(bzimage.get(0x248..0x24c)?.try_into().ok()?);
    let start = (setup_sects + 1) * 512 + usize::try_from(offset).ok()?;
    bzimage
        .get(start..)?
        .starts_with(b"\xfd7zXZ\0")
        .then_some(start)
}

/// Copies a file (following symlinks), creating the destination's directory, keeping the
/// permission bits.
fn install(from: &Path, to: &Path) -> Result {
    if let Some(parent) = to.parent() {
        fs::create_dir_all(parent)?;
    }
    if to.symlink_metadata().is_ok() {
        fs::remove_file(to)?;
    }
    fs::copy(from, to).map_err(|e| anyhow!("copying {}: {e}", from.display()))?;
    Ok(())
}

/// Installs a program as `/usr/bin/<name>`, replacing a busybox applet of that name.
fn install_program(from: &Path, root: &Path) -> Result<PathBuf> {
    let to = root
        .join("usr/bin")
        .join(from.file_name().unwrap_or_default());
    install(from, &to)?;
    fs::set_permissions(&to, fs::Permissions::from_mode(0o755))?;
    Ok(to)
}

/// Unpacks from the kernel package `deb` into `into` only what the image takes: the kernel,
/// `modules.builtin` and the module files that [`MODULES`] need (a few MB of its 400), in two
/// passes over the package's file tree (`dpkg-deb --fsys-tarfile`): the first reads every
/// module's dependencies, the second writes the files needed.
fn unpack_kernel(deb: &Path, into: &Path) -> Result {
    let modules = |path: &str| -> Option<(String, String)> {
        // lib/modules/<version>/<rel>
        let rest = path.strip_prefix("lib/modules/")?;
        let (version, rel) = rest.split_once('/')?;
        Some((version.to_string(), rel.to_string()))
    };
    let mut index = std::collections::BTreeMap::new();
    let mut depends = std::collections::BTreeMap::new();
    let mut builtin = String::new();
    fsys_tar(deb, |entry, data| {
        let Some((_, rel)) = modules(entry.relative()).filter(|_| entry.is_file()) else {
            return Ok(());
        };
        if rel == "modules.builtin" {
            data.read_to_string(&mut builtin)?;
        } else if let Some(stem) = rel.rsplit('/').next().and_then(|n| n.strip_suffix(".ko")) {
            let mut ko = Vec::new();
            data.read_to_end(&mut ko)?;
            index.insert(kmod::normalize(stem), PathBuf::from(&rel));
            depends.insert(PathBuf::from(&rel), kmod::depends(&ko));
        }
        Ok(())
    })?;
    let builtin_names = kmod::builtin_names(&builtin);
    let order = kmod::load_order(MODULES, &index, &builtin_names, |p| {
        Ok(depends.get(p).cloned().unwrap_or_default())
    })?;
    let wanted: BTreeSet<PathBuf> = order.into_iter().map(|(_, rel)| rel).collect();
    let mut written = 0u64;
    fsys_tar(deb, |entry, data| {
        let path = entry.relative();
        let take = entry.is_file()
            && (path.starts_with("boot/vmlinuz-")
                || modules(path).is_some_and(|(_, rel)| {
                    rel == "modules.builtin" || wanted.contains(Path::new(&rel))
                }));
        if take {
            let out = into.join(path);
            if let Some(dir) = out.parent() {
                fs::create_dir_all(dir)?;
            }
            written += std::io::copy(data, &mut fs::File::create(&out)?)?;
        }
        Ok(())
    })?;
    println!(
        "  {}: the kernel, modules.builtin and {} module files ({} KiB)",
        deb.file_name().unwrap_or_default().to_string_lossy(),
        wanted.len(),
        written / 1024
    );
    Ok(())
}

/// Calls `f` with each entry of the file tree of the package `deb` (see [`tar::each`]).
fn fsys_tar(
    deb: &Path,
    f: impl FnMut(&tar::Entry, &mut dyn std::io::Read) -> std::io::Result<()>,
) -> Result {
    let mut cmd = Command::new("dpkg-deb");
    cmd.arg("--fsys-tarfile")
        .arg(deb)
        .stdout(std::process::Stdio::piped());
    let mut child = cmd
        .spawn()
        .map_err(|e| anyhow!("{}: {e}", util::show(&cmd)))?;
    let stdout = child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?;
    // Read to the end, then wait: a reading error comes first (dpkg-deb then dies of the
    // closed pipe, which says nothing more).
    let read = tar::each(std::io::BufReader::new(stdout), f);
    let status = child.wait()?;
    read.map_err(|e| anyhow!("{}: {e}", deb.display()))?;
    util::check(&cmd, status)
}

/// The one entry of a directory (the kernel's `lib/modules/<version>`).
fn only_entry(dir: &Path) -> Result<String> {
    let names: Vec<String> = fs::read_dir(dir)
        .map_err(|e| anyhow!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    match names.as_slice() {
        [one] => Ok(one.clone()),
        _ => bail!(
            "expected one kernel version in {}, found {names:?}",
            dir.display()
        ),
    }
}

/// The shared libraries `files` need, transitively, by file name, found first in `search`
/// and then on the host (as `ldd` resolves them with `LD_LIBRARY_PATH=search`). The dynamic
/// loader itself is left out. A library found nowhere is an error.
pub fn needed_libs(files: &[PathBuf], search: &[PathBuf]) -> Result<Vec<(String, PathBuf)>> {
    let path = std::env::join_paths(search).map_err(|e| anyhow!("{e}"))?;
    let out = Command::new("ldd")
        .args(files)
        .env("LD_LIBRARY_PATH", path)
        .output()
        .map_err(|e| anyhow!("cannot run ldd: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut libs: Vec<(String, PathBuf)> = Vec::new();
    let mut missing = BTreeSet::new();
    for (name, path) in parse_ldd(&text) {
        match path {
            Some(p) => {
                if !libs.iter().any(|(n, _)| *n == name) {
                    libs.push((name, p));
                }
            }
            None => {
                missing.insert(name);
            }
        }
    }
    if !missing.is_empty() {
        bail!(
            "shared libraries not found (add the Debian packages that provide them to \
             LIBRARY_PACKAGES in xtask/src/vm/image.rs): {missing:?}"
        );
    }
    Ok(libs)
}

/// `ldd` output as (file name, resolved path or `None` when not found); the loader and the
/// vDSO are left out.
fn parse_ldd(text: &str) -> Vec<(String, Option<PathBuf>)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        let Some((name, rest)) = line.split_once(" => ") else {
            continue;
        };
        let rest = rest.trim();
        if rest.starts_with("not found") {
            out.push((name.to_string(), None));
        } else if let Some(path) = rest
            .split_whitespace()
            .next()
            .filter(|p| p.starts_with('/'))
        {
            let file = Path::new(path)
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default();
            if !file.starts_with("ld-linux") {
                out.push((name.to_string(), Some(PathBuf::from(path))));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldd_output_is_parsed() {
        let text = "/x/usr/bin/ibv_devinfo:
\tlinux-vdso.so.1 (0x00007ffd)
\tlibibverbs.so.1 => /x/u/libibverbs.so.1 (0x00007f1)
\tlibnl-3.so.200 => not found
\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f2)
\t/lib64/ld-linux-x86-64.so.2 (0x00007f3)
/x/usr/bin/rping:
\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f2)
";
        let got = parse_ldd(text);
        assert_eq!(
            got,
            [
                (
                    "libibverbs.so.1".to_string(),
                    Some(PathBuf::from("/x/u/libibverbs.so.1"))
                ),
                ("libnl-3.so.200".to_string(), None),
                (
                    "libc.so.6".to_string(),
                    Some(PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"))
                ),
                (
                    "libc.so.6".to_string(),
                    Some(PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"))
                ),
            ]
        );
    }

    #[test]
    fn the_xz_payload_is_found_through_the_setup_header() {
        let mut image = vec![0u8; 3 * 512 + 16 + 8];
        image[0x1f1] = 2; // setup sectors: the payload area starts at 3 * 512
        image[0x248..0x24c].copy_from_slice(&16u32.to_le_bytes());
        image[3 * 512 + 16..][..6].copy_from_slice(b"\xfd7zXZ\0");
        assert_eq!(xz_payload(&image), Some(3 * 512 + 16));
        image[3 * 512 + 16] = 0x1f; // gzip, say
        assert_eq!(xz_payload(&image), None);
        assert_eq!(xz_payload(&image[..100]), None);
    }

    #[test]
    fn the_manifest_names_the_recipe() {
        let m = manifest();
        assert!(m.starts_with(&format!("recipe {RECIPE}\n")));
        assert!(m.contains("rdma_rxe") && m.contains("perftest"));
    }
}
