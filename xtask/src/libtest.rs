//! Counting `cargo test` results per crate.
//!
//! `cargo test --message-format=json-render-diagnostics` writes one JSON line per built
//! artifact to stdout (with the test executable's path and its package), renders compiler
//! diagnostics on stderr as usual, and then runs each test binary, announcing it on stderr
//! (`Running unittests src/lib.rs (target/debug/deps/zverbs_core-0123abcd)`, `Doc-tests
//! zverbs_core`) before the binary prints its own `test result:` line. With both streams
//! merged in order, every result line belongs to the binary announced last, and the JSON says
//! which package that binary was built from.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

/// Results of the test binaries of one crate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Test binaries run (unit, integration and doc-test runs).
    pub binaries: u32,
    /// Tests passed.
    pub passed: u32,
    /// Tests failed (a binary that ended without a result line counts as one failure).
    pub failed: u32,
    /// Tests ignored.
    pub ignored: u32,
}

impl Counts {
    /// Adds `other` to these counts.
    pub fn add(&mut self, other: Counts) {
        self.binaries += other.binaries;
        self.passed += other.passed;
        self.failed += other.failed;
        self.ignored += other.ignored;
    }
}

/// Reads `cargo test` output line by line and counts results per crate.
#[derive(Debug, Default)]
pub struct Tally {
    /// Package of each test executable, by file name (`zverbs_core-0123abcd`).
    exe_package: HashMap<String, String>,
    /// Package of each library target, by target name (`zverbs_core`), for doc-tests.
    lib_package: HashMap<String, String>,
    /// Counts per package.
    pub crates: BTreeMap<String, Counts>,
    /// The binary announced last, and whether its result line was seen.
    current: Option<(String, bool)>,
    /// Binaries that ended without a result line.
    pub no_result: Vec<String>,
    /// Each binary run, in order: its package and what cargo announced (`unittests
    /// src/lib.rs`, `tests/wrap.rs`, `doc-tests`), and the wall-clock time from its
    /// announcement to its result line (under Miri, libtest's own `finished in` is Miri's
    /// virtual clock, not the time it took).
    pub times: Vec<(String, Duration)>,
    /// When the binary announced last was announced, and its name in [`Tally::times`].
    started: Option<(Instant, String)>,
}

impl Tally {
    /// Takes one line of output; returns whether it is for a person to read (JSON is not).
    pub fn line(&mut self, line: &str) -> bool {
        if line.starts_with("{\"reason\":") {
            if line.starts_with("{\"reason\":\"compiler-artifact\"") {
                self.artifact(line);
            }
            return false;
        }
        let trimmed = line.trim_start();
        if let Some(rest) = trimmed.strip_prefix("Running ") {
            // `Running <what> (<path to executable>)`
            let exe = rest
                .rsplit_once(" (")
                .and_then(|(_, p)| p.strip_suffix(')'))
                .unwrap_or(rest);
            let file = exe.rsplit('/').next().unwrap_or(exe).to_string();
            let package = self
                .exe_package
                .get(&file)
                .cloned()
                .unwrap_or_else(|| strip_hash(&file).replace('_', "-"));
            let what = rest.rsplit_once(" (").map_or(rest, |(w, _)| w);
            self.started = Some((Instant::now(), format!("{package} {what}")));
            self.start(package);
        } else if let Some(lib) = trimmed.strip_prefix("Doc-tests ") {
            let lib = lib.trim();
            let package = self
                .lib_package
                .get(lib)
                .cloned()
                .unwrap_or_else(|| lib.replace('_', "-"));
            self.started = Some((Instant::now(), format!("{package} doc-tests")));
            self.start(package);
        } else if let Some(rest) = trimmed.strip_prefix("test result: ") {
            let counts = result_counts(rest);
            if let Some((at, name)) = self.started.take() {
                self.times.push((name, at.elapsed()));
            }
            if let Some((package, seen)) = &mut self.current {
                *seen = true;
                self.crates.entry(package.clone()).or_default().add(counts);
            }
        }
        true
    }

    /// Ends the output: a binary announced last without a result is counted.
    pub fn finish(&mut self) {
        self.close();
    }

    /// The sum over all crates.
    pub fn total(&self) -> Counts {
        let mut t = Counts::default();
        for c in self.crates.values() {
            t.add(*c);
        }
        t
    }

    fn start(&mut self, package: String) {
        self.close();
        self.crates.entry(package.clone()).or_default().binaries += 1;
        self.current = Some((package, false));
    }

    fn close(&mut self) {
        if let Some((package, false)) = self.current.take() {
            self.crates.entry(package.clone()).or_default().failed += 1;
            self.no_result.push(package);
        }
    }

    fn artifact(&mut self, line: &str) {
        let Some(package_id) = json_str(line, "package_id") else {
            return;
        };
        let package = package_name(&package_id);
        if let Some(exe) = json_str(line, "executable") {
            let file = exe.rsplit('/').next().unwrap_or(&exe).to_string();
            self.exe_package.insert(file, package.clone());
        }
        let target = line.split_once("\"target\":{").map(|(_, t)| t);
        if let Some(target) = target
            && target.starts_with("\"kind\":[\"lib\"")
            && let Some(name) = json_str(target, "name")
        {
            self.lib_package.insert(name, package);
        }
    }
}

/// The counts of a libtest summary line, given what follows `test result: `
/// (`ok. 2 passed; 0 failed; 1 ignored; ...`).
pub fn result_counts(rest: &str) -> Counts {
    Counts {
        binaries: 0,
        passed: number_before(rest, " passed"),
        failed: number_before(rest, " failed"),
        ignored: number_before(rest, " ignored"),
    }
}

/// The package name in a cargo package id: `path+file:///w/core#zverbs-core@0.1.0` or, when
/// the directory has the package's name, `path+file:///w/xtask#0.1.0`.
fn package_name(id: &str) -> String {
    let (source, rest) = id.split_once('#').unwrap_or(("", id));
    match rest.split_once('@') {
        Some((name, _)) => name.to_string(),
        None => source.rsplit('/').next().unwrap_or(rest).to_string(),
    }
}

/// The first string value of `"key":"…"` in a JSON text (unescaping `\\` and `\"`), or `None`
/// when absent or not a string.
pub fn json_str(json: &str, key: &str) -> Option<String> {
    let start = json.find(&format!("\"{key}\":\""))? + key.len() + 4;
    let mut out = String::new();
    let mut chars = json[start..].chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => return Some(out),
            '\\' => out.push(chars.next()?),
            c => out.push(c),
        }
    }
    None
}

/// `zverbs_core-0123abcd` → `zverbs_core`.
pub fn strip_hash(file: &str) -> &str {
    match file.rsplit_once('-') {
        Some((stem, hash)) if hash.chars().all(|c| c.is_ascii_hexdigit()) => stem,
        _ => file,
    }
}

/// The number just before `what` in `text` (`"3 passed; 0 failed"`, `" passed"` → 3).
fn number_before(text: &str, what: &str) -> u32 {
    text.find(what)
        .map(|end| {
            let digits: String = text[..end]
                .chars()
                .rev()
                .take_while(char::is_ascii_digit)
                .collect();
            digits
                .chars()
                .rev()
                .collect::<String>()
                .parse()
                .unwrap_or(0)
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ARTIFACT: &str = r#"{"reason":"compiler-artifact","package_id":"path+file:///w/core#zverbs-core@0.1.0","manifest_path":"/w/core/Cargo.toml","target":{"kind":["lib"],"crate_types":["lib"],"name":"zverbs_core","src_path":"/w/core/src/lib.rs","edition":"2024","doc":true,"doctest":true,"test":true},"profile":{},"features":[],"filenames":["/w/target/debug/deps/zverbs_core-1111.rmeta"],"executable":null,"fresh":true}"#;
    const TEST_EXE: &str = r#"{"reason":"compiler-artifact","package_id":"path+file:///w/crosscheck#zverbs-crosscheck@0.1.0","target":{"kind":["test"],"crate_types":["bin"],"name":"wqe","src_path":"/w/crosscheck/tests/wqe.rs"},"executable":"/w/target/debug/deps/wqe-2222abcd","fresh":false}"#;
    const XTASK_EXE: &str = r#"{"reason":"compiler-artifact","package_id":"path+file:///w/xtask#0.1.0","target":{"kind":["bin"],"crate_types":["bin"],"name":"xtask"},"executable":"/w/target/debug/deps/xtask-3333","fresh":true}"#;

    #[test]
    fn counts_per_package_from_cargo_output() {
        let mut t = Tally::default();
        for line in [ARTIFACT, TEST_EXE, XTASK_EXE] {
            assert!(!t.line(line), "JSON is not echoed");
        }
        let out = [
            "     Running unittests src/lib.rs (target/debug/deps/zverbs_core-1111)",
            "running 2 tests",
            "test result: ok. 2 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.00s",
            "     Running tests/wqe.rs (target/debug/deps/wqe-2222abcd)",
            "test result: FAILED. 40 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.01s",
            "     Running unittests src/main.rs (target/debug/deps/xtask-3333)",
            "test result: ok. 5 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s",
            "   Doc-tests zverbs_core",
            "test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s",
        ];
        for line in out {
            assert!(t.line(line));
        }
        t.finish();
        let core = Counts {
            binaries: 2,
            passed: 3,
            failed: 0,
            ignored: 1,
        };
        assert_eq!(t.crates["zverbs-core"], core);
        assert_eq!(t.crates["zverbs-crosscheck"].failed, 2);
        assert_eq!(t.crates["xtask"].passed, 5);
        assert_eq!(t.total().passed, 48);
        assert!(t.no_result.is_empty());
        let names: Vec<&str> = t.times.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "zverbs-core unittests src/lib.rs",
                "zverbs-crosscheck tests/wqe.rs",
                "xtask unittests src/main.rs",
                "zverbs-core doc-tests"
            ]
        );
    }

    #[test]
    fn a_binary_without_a_result_is_a_failure() {
        let mut t = Tally::default();
        t.line("     Running unittests src/lib.rs (target/debug/deps/zverbs_mlx5dv-abc)");
        t.line("error: test failed, to rerun pass `-p zverbs-mlx5dv --lib`");
        t.finish();
        assert_eq!(t.crates["zverbs-mlx5dv"].failed, 1);
        assert_eq!(t.no_result, ["zverbs-mlx5dv"]);
    }

    #[test]
    fn json_strings_and_package_ids() {
        assert_eq!(
            json_str(r#"{"a":"x\"y","b":1}"#, "a").as_deref(),
            Some("x\"y")
        );
        assert_eq!(json_str(r#"{"executable":null}"#, "executable"), None);
        assert_eq!(package_name("path+file:///w/xtask#0.1.0"), "xtask");
        assert_eq!(
            package_name("path+file:///w/std-shim#zverbs@0.1.0"),
            "zverbs"
        );
        assert_eq!(strip_hash("wqe-2222abcd"), "wqe");
        assert_eq!(number_before("ok. 12 passed; 3 failed", " failed"), 3);
    }
}
