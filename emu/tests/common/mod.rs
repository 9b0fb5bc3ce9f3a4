//! Running a test inside the emulator: the test re-executes its own binary (just that test)
//! with the fake sysfs tree and the shim preloaded, and checks that the child passed.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Set in the child.
const CHILD: &str = "ZVERBS_EMU_TEST_CHILD";

/// The shim: `ZVERBS_EMU_SO`, or `libzverbs_emu.so` in the profile directory above the test
/// binary (`target/<profile>/deps/<test>`).
pub fn shim() -> PathBuf {
    if let Some(p) = std::env::var_os("ZVERBS_EMU_SO") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target/<profile>/deps");
    profile.join("libzverbs_emu.so")
}

/// Whether this process is the child that runs the test body under the emulator. In the
/// parent, runs the child for `test` with `env` added, prints its output, and panics unless it
/// passed within `timeout`.
pub fn in_emulator(test: &str, env: &[(&str, &str)], timeout: Duration) -> bool {
    if std::env::var_os(CHILD).is_some() {
        return true;
    }
    let so = shim();
    assert!(
        so.exists(),
        "{} is missing: build the shim first (cargo build -p zverbs-emu)",
        so.display()
    );
    let dir = std::env::temp_dir().join(format!("zverbs-emu-test-{}-{test}", std::process::id()));
    zverbs_emu::sysfs::write_tree(&dir).expect("write the fake sysfs tree");
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        test,
        "--exact",
        "--include-ignored",
        "--nocapture",
        "--test-threads",
        "1",
    ])
    .env(CHILD, "1")
    .env("SYSFS_PATH", &dir)
    .env("LD_PRELOAD", &so)
    .env(
        "ZVERBS_EMU_NS",
        format!("test-{}-{test}", std::process::id()),
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("run the test under the emulator");
    let started = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if started.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = child.wait_with_output().unwrap();
    // The child's lines, marked (so that its own `test result:` line is not taken for one of
    // this binary's by whoever counts them).
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        println!("  | {line}");
    }
    for line in String::from_utf8_lossy(&out.stderr).lines() {
        eprintln!("  | {line}");
    }
    let _ = std::fs::remove_dir_all(&dir);
    match status {
        Some(s) => assert!(s.success(), "{test} failed under the emulator ({s})"),
        None => panic!("{test} timed out under the emulator after {timeout:?}"),
    }
    false
}

/// A small deterministic generator (xorshift64*), seeded.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// An environment variable as a number, or `default`.
pub fn env_u64(var: &str, default: u64) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
