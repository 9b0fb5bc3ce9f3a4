//! The no_std proof: `proofs/nostd` is a `#![no_std] #![no_main]` binary with `panic =
//! "abort"` and no global allocator that drives the mlx5 data path (send, receive and
//! completion queues over static memory). It is its own workspace, so nothing of the main
//! workspace's dev-dependencies or features leaks into it. If a data-path crate starts using
//! `std`, the build fails with E0152 (duplicate `panic_impl` lang item); if it allocates, with
//! "no global memory allocator found". Its panic handler calls a function defined nowhere, so
//! if any panic path (a bounds check, an `unwrap`, an overflow check) is reachable anywhere in
//! the linked data path, the link fails with "undefined symbol: zverbs_data_path_can_panic":
//! the data path provably cannot panic. The binary exits 0 when every check passes. Last, the
//! linked binary is inspected: it imports nothing from the C library but memory copies and
//! fills (and what the C start-up code alone calls) and holds no system-call instruction, so
//! nothing in the data path can make one. The `aarch64` stage makes the same proof for aarch64
//! ([`prove`] with its [`Target`]).

use std::process::Command;

use crate::run::Run;
use crate::util::{self, Result, anyhow, bail};

/// The proof's own target directory (`nostd` in cargo's), so that building it never waits on
/// the workspace's lock.
fn target_dir() -> std::path::PathBuf {
    util::target_dir().join("nostd")
}

/// The manifest of the proof, which is its own workspace.
pub const MANIFEST: &str = "proofs/nostd/Cargo.toml";

/// The binary the proof builds.
const BINARY: &str = "zverbs-nostd-proof";

/// How to build, run and inspect the proof for one target.
pub struct Target {
    /// The `--target` triple; `None` builds for the host.
    pub triple: Option<&'static str>,
    /// Environment for cargo (a cross linker).
    pub env: &'static [(&'static str, &'static str)],
    /// The program and arguments that run the binary (an emulator); empty runs it directly.
    pub runner: &'static [&'static str],
    /// `nm` for the target's binaries.
    pub nm: &'static str,
    /// `objdump` for the target's binaries.
    pub objdump: &'static str,
    /// Mnemonics of the instructions that make a system call.
    pub syscall: &'static [&'static str],
}

/// The host (x86_64): `syscall`, and `sysenter` of 32-bit code.
pub const HOST: Target = Target {
    triple: None,
    env: &[],
    runner: &[],
    nm: "nm",
    objdump: "objdump",
    syscall: &["syscall", "sysenter"],
};

/// Lints, builds in release and runs the proof for the host.
pub fn run(_: &mut Run) -> Result<Option<String>> {
    util::run(
        util::cargo(["clippy", "--release"])
            .args(common_args())
            .args(["--", "-D", "warnings"]),
    )?;
    prove(&HOST).map(Some)
}

/// The proof's manifest and target directory.
fn common_args() -> [std::ffi::OsString; 4] {
    [
        "--manifest-path".into(),
        MANIFEST.into(),
        "--target-dir".into(),
        target_dir().into(),
    ]
}

/// Builds the proof in release for `target` (so the link proves no panic path is reachable),
/// runs it and checks that it makes no system call. Returns a note for the summary.
pub fn prove(target: &Target) -> Result<String> {
    let mut build = util::cargo(["build", "--release"]);
    build.args(common_args());
    let mut exe = target_dir();
    if let Some(triple) = target.triple {
        build.args(["--target", triple]);
        exe.push(triple);
    }
    build.envs(target.env.iter().copied());
    util::run(&mut build)?;
    let exe = exe.join("release").join(BINARY);
    let mut cmd = match target.runner {
        [program, args @ ..] => {
            let mut cmd = Command::new(program);
            cmd.args(args).arg(&exe);
            cmd
        }
        [] => Command::new(&exe),
    };
    println!("$ {}", util::show(&cmd));
    let status = cmd
        .status()
        .map_err(|e| anyhow!("cannot run {}: {e}", util::show(&cmd)))?;
    match status.code() {
        Some(0) => {}
        Some(code) => {
            bail!("{BINARY} exited with {code}: check {code} of proofs/nostd/src/main.rs failed")
        }
        None => bail!("{BINARY} was killed ({status})"),
    }
    let imports = no_system_calls(target, &exe)?;
    let size = std::fs::metadata(&exe)?.len();
    Ok(format!(
        "built (no panic path linked), ran, exit 0; imports only {imports}, no {} \
         instruction ({} KiB)",
        target.syscall.join("/"),
        size / 1024
    ))
}

/// C library functions the data path may use: memory copies and fills, which make no system
/// call.
const ALLOWED_IMPORTS: &[&str] = &["memcpy", "memmove", "memset", "memcmp", "bcmp"];

/// C library functions the start-up code calls: they are not the data path's, and are allowed
/// only while nothing but [`START_UP_FUNCTIONS`] refers to them. glibc's aarch64 `_start`
/// calls `abort` should `__libc_start_main` ever return; x86_64's halts. On aarch64 an atomic
/// read-modify-write is an out-of-line helper of the compiler's runtime (`__aarch64_swp8_acq`,
/// ...) that chooses LSE or exclusive loads from a flag set once, before `main`, by a
/// constructor that asks `getauxval` for the CPU's features.
const START_UP_IMPORTS: &[&str] = &["__libc_start_main", "abort", "getauxval"];

/// The functions that run before `main` and may call [`START_UP_IMPORTS`]: the C start-up code
/// (`_start`, from `crt1.o`) and the compiler runtime's constructors (run from `.init_array`)
/// that read the CPU's features for the aarch64 atomics.
const START_UP_FUNCTIONS: &[&str] = &["_start", "init_have_lse_atomics", "__init_cpu_features"];

/// Checks that nothing linked can make a system call: the binary imports no C library
/// function but memory copies and fills (so no `read`, `write`, `ioctl`, `futex`, `malloc`,
/// ...) and what the start-up code alone calls, and its code holds no system-call
/// instruction. Returns the imports, for the summary.
fn no_system_calls(target: &Target, exe: &std::path::Path) -> Result<String> {
    let nm = tool_output(target.nm, &["-D", "--undefined-only"], exe)?;
    let dis = tool_output(target.objdump, &["-d", "--no-show-raw-insn"], exe)?;
    if !dis.contains("<main>:") {
        bail!(
            "{} shows no code of `main` in {BINARY}: the instruction check would prove nothing",
            target.objdump
        );
    }
    let mut imports = Vec::new();
    for line in nm.lines() {
        let mut cols = line.split_whitespace();
        let (Some(kind), Some(sym)) = (cols.next(), cols.next()) else {
            continue;
        };
        if kind == "w" {
            continue; // weak references the start-up code leaves unresolved
        }
        let name = sym.split('@').next().unwrap_or(sym);
        if START_UP_IMPORTS.contains(&name) {
            if let Some(user) = caller_other_than_start(&dis, name) {
                bail!(
                    "{BINARY}'s `{user}` calls `{name}` from the C library: only the start-up \
                     code may"
                );
            }
        } else if !ALLOWED_IMPORTS.contains(&name) {
            bail!("{BINARY} imports `{name}` from the C library: the data path must not call it");
        }
        imports.push(name.to_string());
    }
    if let Some(l) = dis
        .lines()
        .find(|l| l.split_whitespace().any(|w| target.syscall.contains(&w)))
    {
        bail!("{BINARY} holds a system call instruction: {}", l.trim());
    }
    imports.sort();
    Ok(imports.join(", "))
}

/// Runs a binutils `tool` with `args` on `exe`; its standard output.
fn tool_output(tool: &str, args: &[&str], exe: &std::path::Path) -> Result<String> {
    let out = Command::new(tool)
        .args(args)
        .arg(exe)
        .output()
        .map_err(|e| anyhow!("cannot run {tool} (binutils): {e}"))?;
    if !out.status.success() {
        bail!(
            "{tool} failed on {BINARY}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The first function of an `objdump -d` listing, other than the start-up functions and the
/// import's own PLT stub, whose code refers to the import `name` (a call through the PLT, `<abort@plt>`, or
/// through the GOT, `<__libc_start_main@GLIBC_2.34>`).
fn caller_other_than_start(dis: &str, name: &str) -> Option<String> {
    let reference = format!("<{name}@");
    let stub = format!("{name}@plt");
    let mut function = "";
    for line in dis.lines() {
        // A function starts with `0000000000001140 <_start>:`.
        if let Some(label) = line
            .strip_suffix(">:")
            .and_then(|l| l.split_once(" <"))
            .map(|(_, f)| f)
        {
            function = label;
        } else if line.contains(&reference)
            && !START_UP_FUNCTIONS.contains(&function)
            && function != stub
        {
            return Some(function.to_string());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::caller_other_than_start;

    /// glibc's aarch64 `_start`, as `aarch64-linux-gnu-objdump -d --no-show-raw-insn` shows
    /// it, with the PLT stub of `abort`.
    const AARCH64: &str = "
0000000000000630 <abort@plt>:
     630:\tadrp\tx16, 1f000 <__FRAME_END__+0x1a47c>
     634:\tldr\tx17, [x16, #4040]
     63c:\tbr\tx17

0000000000001140 <_start>:
    116c:\tbl\t600 <__libc_start_main@plt>
    1170:\tbl\t630 <abort@plt>

0000000000001200 <init_have_lse_atomics>:
    1210:\tbl\t640 <getauxval@plt>

00000000000014f8 <main>:
    14f8:\tsub\tsp, sp, #0x1d0
";

    /// x86_64's `_start` calls `__libc_start_main` through the GOT.
    const X86_64: &str = "
0000000000001040 <_start>:
    1058:\tcall   *0x2f7a(%rip)        # 3fd8 <__libc_start_main@GLIBC_2.34>
    105e:\thlt

0000000000001140 <main>:
    1140:\tpush   %rbp
";

    #[test]
    fn start_up_imports_called_from_start_alone_pass() {
        assert_eq!(caller_other_than_start(AARCH64, "abort"), None);
        assert_eq!(caller_other_than_start(AARCH64, "getauxval"), None);
        assert_eq!(caller_other_than_start(AARCH64, "__libc_start_main"), None);
        assert_eq!(caller_other_than_start(X86_64, "__libc_start_main"), None);
    }

    #[test]
    fn a_start_up_import_called_elsewhere_is_named() {
        let dis = format!("{AARCH64}    1500:\tbl\t630 <abort@plt>\n");
        assert_eq!(
            caller_other_than_start(&dis, "abort").as_deref(),
            Some("main")
        );
        let dis = format!("{AARCH64}    1504:\tbl\t640 <getauxval@plt>\n");
        assert_eq!(
            caller_other_than_start(&dis, "getauxval").as_deref(),
            Some("main")
        );
        let dis = format!(
            "{X86_64}    1150:\tcall   *0x2e7a(%rip)  # 3fd8 <__libc_start_main@GLIBC_2.34>\n"
        );
        assert_eq!(
            caller_other_than_start(&dis, "__libc_start_main").as_deref(),
            Some("main")
        );
    }
}
