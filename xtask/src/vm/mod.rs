//! The rxe VM: a qemu guest running Debian 12's kernel, with Soft-RoCE devices, that runs one
//! command and reports its exit code.
//!
//! Host kernels without RDMA support (most CI machines) cannot create rxe devices; a guest
//! with Debian's kernel can. Under software emulation (TCG; KVM when `/dev/kvm` is usable)
//! it boots in about ten seconds. Host directories are shared over 9p and mounted in the guest
//! at the same absolute paths, so host-built programs and the workspace are where the host
//! has them; the command runs in the same working directory, as root, with locked memory
//! unlimited. The guest has no network card: the addresses of its rxe devices exist only
//! inside it.
//!
//! One boot runs one command. The host and the guest's `/init` (`vm/init.sh`) talk through a
//! control directory, shared over 9p and mounted on [`GUEST_CTL`]: the host writes `cmd` (a
//! shell script), `timeout`, `env` (the device topology) and `mounts`; the guest writes `rc`
//! (the exit code, [`TIMED_OUT`] when the command ran out of time) and `dmesg`. The console
//! (the serial port) shows the command's output between two marker lines.

pub mod cpio;
pub mod image;
pub mod kmod;
pub mod tar;
pub mod topology;

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub use image::Image;

use crate::util::{self, Result, anyhow, bail};
use topology::Topology;

/// The exit code when the guest command ran out of time (as `timeout(1)` reports it).
pub const TIMED_OUT: u8 = 124;
/// The exit code when the VM itself failed: no image, no qemu, no boot, no exit code back.
pub const VM_FAILED: u8 = 125;

/// Where the control directory is mounted in the guest.
pub const GUEST_CTL: &str = "/run/vm";

/// The guest's `/init`.
const INIT: &str = include_str!("../../../vm/init.sh");

/// Overrides the cache directory (default `.cache/rxevm` in the workspace).
pub const CACHE_ENV: &str = "ZVERBS_VM_CACHE";
/// `kvm` or `tcg` (default: KVM when `/dev/kvm` is usable, else TCG).
pub const ACCEL_ENV: &str = "ZVERBS_VM_ACCEL";
/// `1`: show the whole console, boot messages included.
pub const VERBOSE_ENV: &str = "ZVERBS_VM_VERBOSE";

/// Printed by `/init` right before the command starts, and after it ends.
const BEGIN: &str = "ZVERBS_VM_BEGIN";
const END: &str = "ZVERBS_VM_END";

/// Time allowed for booting and powering off, on top of the command's own timeout.
const BOOT_ALLOWANCE: Duration = Duration::from_secs(300);

/// Variables passed from the host's environment to the guest command when set.
const PASSED_ENV: &[&str] = &[
    "RUST_BACKTRACE",
    "RUST_LOG",
    "RUST_TEST_THREADS",
    "RUST_MIN_STACK",
    "NO_COLOR",
    "ZVERBS_BACKEND",
];

/// The cache: the image, the last console log and dmesg, the control directories of runs.
/// Outside `target/`, so `cargo clean` keeps it; ignored by git.
pub fn cache_dir() -> PathBuf {
    std::env::var_os(CACHE_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| util::root().join(".cache/rxevm"))
}

/// The image, built first when missing or outdated (or when `rebuild`).
pub fn image(rebuild: bool) -> Result<Image> {
    let dir = cache_dir();
    fs::create_dir_all(&dir)?;
    image::ensure(&dir, rebuild)
}

/// What one boot runs.
#[derive(Clone, Debug)]
pub struct Spec {
    /// Program and arguments.
    pub argv: Vec<String>,
    /// The working directory (inside one of `shares`, or `/`).
    pub cwd: PathBuf,
    /// Variables for the command, besides the topology's and [`PASSED_ENV`].
    pub env: Vec<(String, String)>,
    /// Host directories mounted in the guest at the same paths.
    pub shares: Vec<PathBuf>,
    /// How long the command may run.
    pub timeout: Duration,
    /// Host programs about to run in the guest: libraries they need that the image lacks
    /// are added for this boot.
    pub programs: Vec<PathBuf>,
    /// An interactive shell on the terminal instead of the command.
    pub shell: bool,
}

impl Spec {
    /// A command run in the workspace's directory, with the workspace shared, and cargo's
    /// target directory (what the host built) when it lies elsewhere.
    pub fn command(argv: Vec<String>, timeout: Duration) -> Self {
        let mut spec = Self {
            argv,
            cwd: util::root(),
            env: Vec::new(),
            shares: vec![util::root()],
            timeout,
            programs: Vec::new(),
            shell: false,
        };
        let target = util::target_dir();
        if std::fs::create_dir_all(&target).is_ok() {
            spec.share_dir_of(&target);
        }
        spec
    }

    /// Shares the directory of `path` too, unless a share holds it already.
    pub fn share_dir_of(&mut self, path: &Path) {
        let dir = if path.is_dir() {
            path
        } else {
            path.parent().unwrap_or(path)
        };
        if !self.shares.iter().any(|s| dir.starts_with(s)) {
            self.shares.push(dir.to_path_buf());
        }
    }
}

/// How a boot ended.
#[derive(Debug)]
pub struct Outcome {
    /// The command's exit code ([`TIMED_OUT`] if it ran out of time); `None` when the VM
    /// failed (see `failure`).
    pub code: Option<i32>,
    /// From starting qemu to the command starting (boot and device set-up).
    pub boot: Option<Duration>,
    /// From starting qemu to its end.
    pub total: Duration,
    /// Why the VM failed, when it did.
    pub failure: Option<String>,
}

impl Outcome {
    /// The exit code to hand on: the command's, or [`VM_FAILED`].
    pub fn exit_code(&self) -> u8 {
        match self.code {
            Some(c) => u8::try_from(c).unwrap_or(VM_FAILED),
            None => VM_FAILED,
        }
    }
}

/// A control directory for one boot, removed when dropped.
#[derive(Debug)]
pub struct RunDir(PathBuf);

impl RunDir {
    /// A new, empty control directory under the cache. Directories left behind by runs whose
    /// process is gone (killed before it could clean up) are removed.
    pub fn new() -> Result<Self> {
        let runs = cache_dir().join("runs");
        if let Ok(entries) = fs::read_dir(&runs) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let pid = name.split('-').next().unwrap_or_default();
                if !pid.is_empty() && !Path::new("/proc").join(pid).exists() {
                    let _ = fs::remove_dir_all(e.path());
                }
            }
        }
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let dir = runs.join(format!("{}-{stamp}", std::process::id()));
        fs::create_dir_all(&dir)?;
        Ok(Self(dir))
    }

    /// Its path on the host.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Boots the VM and runs `spec` in it, with `ctl` as the control directory (where the caller
/// may have put input files, and finds the guest's output files after the boot). The
/// command's output is echoed to stdout. The guest's console is saved as `console.log` and
/// its kernel log as `dmesg.log` in the cache. Errors are the host's (no qemu, a share path
/// qemu cannot take); a guest that fails is an [`Outcome`] without code.
pub fn boot(image: &Image, spec: &Spec, ctl: &RunDir) -> Result<Outcome> {
    let dir = ctl.path();
    for f in ["rc", "dmesg", "timedout"] {
        let _ = fs::remove_file(dir.join(f));
    }
    // The command, as a script the guest's shell runs.
    let mut script = String::from("#!/bin/sh\n");
    let passed = PASSED_ENV
        .iter()
        .filter_map(|k| Some((k.to_string(), std::env::var(k).ok()?)));
    for (k, v) in passed.chain(spec.env.iter().cloned()) {
        script.push_str(&format!("export {k}={}\n", sh_quote(&v)));
    }
    script.push_str(&format!(
        "cd {} || exit {VM_FAILED}\nexec",
        sh_quote(&spec.cwd.to_string_lossy())
    ));
    for a in &spec.argv {
        script.push(' ');
        script.push_str(&sh_quote(a));
    }
    script.push('\n');
    fs::write(dir.join("cmd"), script)?;
    set_executable(&dir.join("cmd"))?;
    fs::write(dir.join("timeout"), format!("{}\n", spec.timeout.as_secs()))?;
    let mut env = String::new();
    for (k, v) in Topology::vm().env() {
        env.push_str(&format!("{k}={v}\n"));
    }
    fs::write(dir.join("env"), env)?;
    let mut mounts = String::new();
    for (i, s) in spec.shares.iter().enumerate() {
        let s = s.to_string_lossy();
        if s.contains(['\t', '\n']) {
            bail!("cannot share {s:?}: tabs and newlines in paths are not supported");
        }
        mounts.push_str(&format!("share{i}\t{s}\n"));
    }
    fs::write(dir.join("mounts"), mounts)?;
    fs::write(dir.join("cwd"), format!("{}\n", spec.cwd.display()))?;
    if spec.shell {
        fs::write(dir.join("shell"), "")?;
    } else {
        let _ = fs::remove_file(dir.join("shell"));
    }
    let initrd = dir.join("initrd");
    initramfs(image, &spec.programs, &initrd)?;

    let mut qemu = Command::new("qemu-system-x86_64");
    match accel() {
        Accel::Kvm => qemu.args(["-accel", "kvm", "-cpu", "host"]),
        Accel::Tcg => qemu.args(["-accel", "tcg,thread=multi", "-cpu", "max"]),
    };
    qemu.args([
        "-smp",
        "2",
        "-m",
        "2G",
        "-nographic",
        "-no-reboot",
        "-nic",
        "none",
    ])
    .arg("-kernel")
    .arg(&image.kernel)
    .arg("-initrd")
    .arg(&initrd)
    .args(["-append", "console=ttyS0 quiet panic=-1"]);
    qemu.arg("-virtfs").arg(virtfs(dir, "ctl")?);
    for (i, s) in spec.shares.iter().enumerate() {
        qemu.arg("-virtfs").arg(virtfs(s, &format!("share{i}"))?);
    }

    let started = Instant::now();
    if spec.shell {
        println!("$ {}", util::show(&qemu));
        println!("(the guest's shell; `exit` powers it off, Ctrl-A X stops qemu)");
        let status = qemu
            .status()
            .map_err(|e| anyhow!("cannot start qemu-system-x86_64: {e}"))?;
        return Ok(Outcome {
            code: status.code(),
            boot: None,
            total: started.elapsed(),
            failure: None,
        });
    }
    let deadline = spec.timeout + BOOT_ALLOWANCE;
    let log_path = cache_dir().join("console.log");
    let mut log = fs::File::create(&log_path)?;
    let verbose = std::env::var(VERBOSE_ENV).is_ok_and(|v| v == "1");
    let (reader, writer) = std::io::pipe()?;
    qemu.stdin(Stdio::null())
        .stdout(writer.try_clone()?)
        .stderr(writer);
    if verbose {
        println!("$ {}", util::show(&qemu));
    }
    let child = qemu.spawn();
    // Drop this process's copies of the pipe's write end (see `util::run_lines`).
    qemu.stdout(Stdio::null()).stderr(Stdio::null());
    let mut child = child.map_err(|e| anyhow!("cannot start qemu-system-x86_64: {e}"))?;
    let (tx, rx) = mpsc::channel::<String>();
    let reading = std::thread::spawn(move || {
        for line in BufReader::new(reader).split(b'\n') {
            let Ok(line) = line else { break };
            let line = String::from_utf8_lossy(&line).replace('\r', "");
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut boot = None;
    let mut console = Console {
        verbose,
        ..Console::default()
    };
    let mut overdue = false;
    loop {
        let left = deadline.saturating_sub(started.elapsed());
        match rx.recv_timeout(left.max(Duration::from_millis(1))) {
            Ok(line) => {
                let _ = writeln!(log, "{line}");
                for l in console.line(&line) {
                    println!("{l}");
                }
                if console.begun && boot.is_none() {
                    boot = Some(started.elapsed());
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                overdue = true;
                let _ = child.kill();
                break;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    let status = child.wait()?;
    let _ = reading.join();
    let total = started.elapsed();
    let dmesg = dir.join("dmesg");
    if dmesg.exists() {
        let _ = fs::copy(&dmesg, cache_dir().join("dmesg.log"));
    }
    let code = fs::read_to_string(dir.join("rc"))
        .ok()
        .and_then(|s| s.trim().parse::<i32>().ok());
    let failure = match (code, overdue) {
        (Some(_), _) => None,
        (None, true) => Some(format!(
            "the VM did not finish within {} (the command's {} and {} to boot); console: {}",
            util::duration(deadline),
            util::duration(spec.timeout),
            util::duration(BOOT_ALLOWANCE),
            log_path.display()
        )),
        (None, false) => Some(format!(
            "the guest gave no exit code (qemu: {status}); console: {}",
            log_path.display()
        )),
    };
    if let Some(f) = &failure {
        eprintln!("rxe VM: {f}");
        if !verbose {
            let text = fs::read_to_string(&log_path).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            eprintln!("last lines of the console:");
            for l in &lines[lines.len().saturating_sub(30)..] {
                eprintln!("    {l}");
            }
        }
    }
    Ok(Outcome {
        code,
        boot,
        total,
        failure,
    })
}

/// Picks the command's output out of the console: the lines between the marker lines that
/// `/init` prints (all lines when `verbose`).
#[derive(Debug, Default)]
struct Console {
    /// Show every line.
    verbose: bool,
    /// The command has started.
    begun: bool,
    /// Between the markers.
    echo: bool,
    /// An empty line held back: `/init` starts the end marker on a new line, which leaves an
    /// empty line when the output ended with a newline.
    blank: bool,
}

impl Console {
    /// Takes one console line; returns the lines to show.
    fn line(&mut self, line: &str) -> Vec<String> {
        let mut out = Vec::new();
        if line.trim_end() == BEGIN {
            self.begun = true;
            self.echo = true;
            if self.verbose {
                out.push(line.to_string());
            }
            return out;
        }
        if self.echo
            && let Some(at) = line.find(END)
        {
            self.echo = false;
            if at > 0 {
                if self.blank {
                    out.push(String::new());
                }
                out.push(line[..at].to_string());
            }
            self.blank = false;
            if self.verbose {
                out.push(line[at..].to_string());
            }
            return out;
        }
        if self.echo {
            if self.blank {
                out.push(String::new());
            }
            self.blank = line.is_empty();
            if !self.blank {
                out.push(line.to_string());
            }
        } else if self.verbose {
            out.push(line.to_string());
        }
        out
    }
}

/// The initramfs for one boot: the image, plus an archive with `/init` and the libraries
/// that `programs` need and the image lacks.
fn initramfs(image: &Image, programs: &[PathBuf], out: &Path) -> Result {
    fs::copy(&image.base, out)?;
    let mut extra = cpio::Archive::new(fs::OpenOptions::new().append(true).open(out)?);
    extra.file("init", 0o755, INIT.as_bytes())?;
    let elf: Vec<PathBuf> = programs
        .iter()
        .filter(|p| fs::read(p).is_ok_and(|b| b.starts_with(b"\x7fELF")))
        .cloned()
        .collect();
    if !elf.is_empty() {
        for (name, path) in image::needed_libs(&elf, &[])? {
            if !image.libs.contains(&name) {
                println!("adding {} for this boot", path.display());
                extra.file(
                    &format!("{}/{name}", image::LIBDIR),
                    0o755,
                    &fs::read(&path)?,
                )?;
            }
        }
    }
    extra.finish()?;
    Ok(())
}

enum Accel {
    Kvm,
    Tcg,
}

fn accel() -> Accel {
    match std::env::var(ACCEL_ENV).as_deref() {
        Ok("kvm") => return Accel::Kvm,
        Ok("tcg") => return Accel::Tcg,
        _ => {}
    }
    let kvm_usable = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_ok()
        && fs::read_to_string("/proc/cpuinfo").is_ok_and(|c| {
            c.lines()
                .filter(|l| l.starts_with("flags"))
                .any(|l| l.split_whitespace().any(|f| f == "vmx" || f == "svm"))
        });
    if kvm_usable { Accel::Kvm } else { Accel::Tcg }
}

/// A `-virtfs` option sharing `path` under `tag` (commas doubled, as qemu's option syntax
/// wants).
fn virtfs(path: &Path, tag: &str) -> Result<String> {
    let Some(p) = path.to_str() else {
        bail!("{}: not a UTF-8 path", path.display());
    };
    Ok(format!(
        "local,path={},mount_tag={tag},security_model=none,id={tag}",
        p.replace(',', ",,")
    ))
}

fn set_executable(path: &Path) -> Result {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(0o755))?;
    Ok(())
}

/// Quotes a word for the guest's shell.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_words_and_virtfs_options_are_quoted() {
        assert_eq!(sh_quote("it's"), r"'it'\''s'");
        assert_eq!(
            virtfs(Path::new("/w/a,b"), "share0").unwrap(),
            "local,path=/w/a,,b,mount_tag=share0,security_model=none,id=share0"
        );
    }

    #[test]
    fn a_failed_vm_has_its_own_exit_code() {
        let o = |code| Outcome {
            code,
            boot: None,
            total: Duration::ZERO,
            failure: None,
        };
        assert_eq!(o(Some(3)).exit_code(), 3);
        assert_eq!(o(Some(0)).exit_code(), 0);
        assert_eq!(o(None).exit_code(), VM_FAILED);
    }

    #[test]
    fn the_console_shows_what_the_command_printed() {
        let mut c = Console::default();
        let shown: Vec<String> = [
            "SeaBIOS (version 1.16.2)",
            "[rxevm 8.35] link rxe0/1 state ACTIVE",
            BEGIN,
            "one",
            "",
            "two",
            "",
            &format!("{END} 0"),
            "[    9.16] reboot: Power down",
        ]
        .iter()
        .flat_map(|l| c.line(l))
        .collect();
        assert_eq!(shown, ["one", "", "two"]);
        assert!(c.begun);

        // Output without a final newline: the marker follows on the same line.
        let mut c = Console::default();
        let shown: Vec<String> = [BEGIN, "a", &format!("partial{END} 3")]
            .iter()
            .flat_map(|l| c.line(l))
            .collect();
        assert_eq!(shown, ["a", "partial"]);

        let mut v = Console {
            verbose: true,
            ..Console::default()
        };
        assert_eq!(v.line("boot message"), ["boot message"]);
    }

    #[test]
    fn shares_cover_their_subdirectories() {
        let mut s = Spec::command(vec!["true".into()], Duration::from_secs(1));
        s.shares = vec![PathBuf::from("/w")];
        s.share_dir_of(Path::new("/w/target/debug/deps/x-123"));
        assert_eq!(s.shares, [PathBuf::from("/w")]);
        s.share_dir_of(Path::new("/elsewhere/target/debug/x"));
        assert_eq!(
            s.shares,
            [
                PathBuf::from("/w"),
                PathBuf::from("/elsewhere/target/debug")
            ]
        );
    }
}
