//! `zverbs-emu`, the emulator's tool, as a user runs it: arguments it does not take are refused
//! with its usage and exit code 2, never a panic; a fault for a process that is not there is an
//! error that says so.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::process::{Command, Output};

fn tool(args: &[OsString]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_zverbs-emu"))
        .args(args)
        .env_remove("SYSFS_PATH")
        .env("ZVERBS_EMU_NS", format!("cli-test-{}", std::process::id()))
        .output()
        .expect("run zverbs-emu")
}

fn words(a: &[&str]) -> Vec<OsString> {
    a.iter().map(OsString::from).collect()
}

#[test]
fn no_argument_makes_the_tool_panic() {
    let not_utf8 = OsString::from_vec(b"a\xffb".to_vec());
    let mut cases: Vec<(Vec<OsString>, i32)> = [
        (&[][..], 2),
        (&["abc"], 2),
        (&["sysfs"], 2),
        (&["sysfs", "a", "b"], 2),
        (&["inject"], 2),
        (&["inject", "1"], 2),
        (&["inject", "abc", "port-down"], 2),
        (&["inject", "-1", "port-down"], 2),
        (&["inject", "18446744073709551616", "port-down"], 2),
        (&["inject", "1", "bogus"], 2),
        (&["inject", "1", "qp-fatal", "x"], 2),
        (&["sysfs", "/proc/no-such-dir/tree"], 1),
    ]
    .iter()
    .map(|(a, code)| (words(a), *code))
    .collect();
    cases.push((vec![not_utf8.clone()], 2));
    cases.push((vec!["sysfs".into(), not_utf8.clone()], 2));
    cases.push((vec!["inject".into(), "1".into(), not_utf8], 2));
    for (args, code) in cases {
        let o = tool(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(code), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

#[test]
fn a_fault_for_a_process_without_an_emulator_says_so() {
    // This test's own process has no emulator (nor control socket).
    let pid = std::process::id().to_string();
    let o = tool(&words(&["inject", &pid, "port-down"]));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("cannot inject into process {pid}")),
        "{err}"
    );
}
