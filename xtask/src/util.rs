//! What every command shares: the workspace root, running commands with their command line
//! shown, stage timing and plain-text tables.

use std::ffi::{OsStr, OsString};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub use anyhow::{Error, anyhow, bail};

/// The result of a command or stage: its error is the message the user sees (`anyhow`, as
/// nothing matches on it).
pub type Result<T = ()> = anyhow::Result<T>;

/// The workspace root: the parent of this crate's directory.
pub fn root() -> PathBuf {
    // `cargo run` sets CARGO_MANIFEST_DIR at run time too; prefer it, so a moved checkout
    // still finds itself.
    let dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    dir.parent().map(PathBuf::from).unwrap_or(dir)
}

/// Cargo's target directory, where the commands this xtask runs put what they build: as
/// `cargo metadata` reports it (so `CARGO_TARGET_DIR`, `build.target-dir` in a cargo config,
/// and a relative path, which those commands resolve in the workspace root, all count). Asked
/// once per run.
pub fn target_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let metadata = cargo(["metadata", "--format-version", "1", "--no-deps"])
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
        resolve_target_dir(
            metadata.as_deref(),
            std::env::var_os("CARGO_TARGET_DIR"),
            &root(),
        )
    })
    .clone()
}

/// The target directory: `target_directory` of `cargo metadata`'s output when there is one;
/// else `CARGO_TARGET_DIR` (relative to the workspace root, where this xtask runs cargo);
/// else the workspace's `target`.
pub fn resolve_target_dir(metadata: Option<&str>, env: Option<OsString>, root: &Path) -> PathBuf {
    if let Some(dir) = metadata.and_then(|m| crate::libtest::json_str(m, "target_directory")) {
        return PathBuf::from(dir);
    }
    match env.filter(|v| !v.is_empty()) {
        Some(v) => root.join(v),
        None => root.join("target"),
    }
}

/// A `cargo` command (the cargo that runs this xtask), in the workspace root.
pub fn cargo<I, S>(args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let program = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(program);
    cmd.args(args).current_dir(root());
    cmd
}

/// `rustup run <toolchain> cargo ARGS` in the workspace root, into the same target directory,
/// with the variables of the cargo that runs this xtask removed so that the toolchain's own
/// cargo, rustc and rustdoc are used.
pub fn rustup_cargo<I, S>(toolchain: &str, args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut cmd = Command::new("rustup");
    cmd.args(["run", toolchain, "cargo"])
        .args(args)
        .current_dir(root());
    for var in [
        "CARGO",
        "RUSTC",
        "RUSTDOC",
        "RUSTUP_TOOLCHAIN",
        "RUSTC_WRAPPER",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("CARGO_TARGET_DIR", target_dir());
    cmd
}

/// The command line as a shell would show it: environment assignments, then the program's
/// file name and the arguments.
pub fn show(cmd: &Command) -> String {
    let mut parts = Vec::new();
    for (k, v) in cmd.get_envs() {
        if let Some(v) = v {
            parts.push(format!(
                "{}={}",
                k.to_string_lossy(),
                quote(&v.to_string_lossy())
            ));
        }
    }
    let program = PathBuf::from(cmd.get_program());
    let program = program
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| program.to_string_lossy().into_owned());
    parts.push(program);
    parts.extend(cmd.get_args().map(|a| quote(&a.to_string_lossy())));
    parts.join(" ")
}

/// Quotes `s` for a shell when it needs it.
fn quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// Time spent building, in nanoseconds, since the process started: what [`run`] spent in a
/// cargo command that only builds, and what [`run_lines`] saw go by before cargo's `Finished`
/// line. A stage's build time is the difference across it ([`build_time`]).
static BUILD_NANOS: AtomicU64 = AtomicU64::new(0);

/// The cargo subcommands that only build (or check, or document).
const BUILD_SUBCOMMANDS: &[&str] = &["build", "check", "clippy", "doc", "publish", "rustc"];

/// Time spent building so far in this process ([`BUILD_NANOS`]).
pub fn build_time() -> Duration {
    Duration::from_nanos(BUILD_NANOS.load(Ordering::Relaxed))
}

fn add_build_time(d: Duration) {
    let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    BUILD_NANOS.fetch_add(nanos, Ordering::Relaxed);
}

/// Whether `cmd` is a cargo command that only builds: `cargo SUB ...` or `rustup run
/// TOOLCHAIN cargo SUB ...` with SUB in [`BUILD_SUBCOMMANDS`].
fn only_builds(cmd: &Command) -> bool {
    let program = Path::new(cmd.get_program())
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let args: Vec<String> = cmd
        .get_args()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let sub = match program.as_str() {
        "cargo" => args.first(),
        "rustup" => args
            .iter()
            .position(|a| a == "cargo")
            .and_then(|i| args.get(i + 1)),
        _ => None,
    };
    sub.is_some_and(|s| BUILD_SUBCOMMANDS.contains(&s.as_str()))
}

/// Prints the command line, runs it with the terminal's stdio and fails unless it succeeds.
/// A cargo command that only builds counts toward [`build_time`].
pub fn run(cmd: &mut Command) -> Result {
    println!("$ {}", show(cmd));
    let started = Instant::now();
    let status = cmd
        .status()
        .map_err(|e| anyhow!("cannot start `{}`: {e}", show(cmd)))?;
    if only_builds(cmd) {
        add_build_time(started.elapsed());
    }
    check(cmd, status)
}

/// Whether `cmd` runs and exits successfully, with its output discarded.
pub fn succeeds(cmd: &mut Command) -> bool {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Prints the command line, runs it with its stdout and stderr merged into one stream (in the
/// order they were written), and hands every line to `on_line`, which says whether to echo it.
/// Returns the exit status; failing to start is an error. The time until cargo's first
/// `Finished` line (all of it, for a command that only builds) counts toward [`build_time`].
pub fn run_lines(cmd: &mut Command, mut on_line: impl FnMut(&str) -> bool) -> Result<ExitStatus> {
    println!("$ {}", show(cmd));
    let started = Instant::now();
    let mut built = only_builds(cmd);
    let (reader, writer) = std::io::pipe()?;
    cmd.stdin(Stdio::null())
        .stdout(writer.try_clone()?)
        .stderr(writer);
    let child = cmd.spawn();
    // `cmd` still holds this process's copies of the pipe's write end: replace them, so that
    // the reader sees end-of-file once the child and everything it started have exited.
    cmd.stdout(Stdio::null()).stderr(Stdio::null());
    let mut child = child.map_err(|e| anyhow!("cannot start `{}`: {e}", show(cmd)))?;
    let mut reader = BufReader::new(reader);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        if reader.read_until(b'\n', &mut buf)? == 0 {
            break;
        }
        let line = String::from_utf8_lossy(&buf);
        let line = line.trim_end_matches(['\n', '\r']);
        if !built && line.trim_start().starts_with("Finished `") {
            built = true;
            add_build_time(started.elapsed());
        }
        if on_line(line) {
            println!("{line}");
        }
    }
    let status = child.wait()?;
    if only_builds(cmd) {
        add_build_time(started.elapsed());
    }
    Ok(status)
}

/// Fails with the command line and its exit status unless `status` is success.
pub fn check(cmd: &Command, status: ExitStatus) -> Result {
    if status.success() {
        Ok(())
    } else {
        bail!("`{}` failed ({status})", show(cmd))
    }
}

/// A duration as seconds with one decimal, or minutes and seconds past a minute.
pub fn duration(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 60.0 {
        format!("{s:.1}s")
    } else {
        format!("{}m{:04.1}s", (s / 60.0) as u64, s % 60.0)
    }
}

/// A plain-text table with a header row. Columns are left-aligned, except those whose header
/// is given with a leading `>`, which are right-aligned (numbers).
#[derive(Debug, Default)]
pub struct Table {
    rows: Vec<Vec<String>>,
    right: Vec<bool>,
}

impl Table {
    /// A table with these column headers (`">passed"`: right-aligned column "passed").
    pub fn new(headers: &[&str]) -> Self {
        Self {
            rows: vec![
                headers
                    .iter()
                    .map(|h| h.trim_start_matches('>').to_string())
                    .collect(),
            ],
            right: headers.iter().map(|h| h.starts_with('>')).collect(),
        }
    }

    /// Appends a row.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The rows, the header's first, for tests to read.
    #[cfg(test)]
    pub fn rows_for_test(&self) -> &[Vec<String>] {
        &self.rows
    }

    /// Prints the table, with a rule under the header and before the last row when `total`.
    pub fn print(&self, total: bool) {
        let cols = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let width: Vec<usize> = (0..cols)
            .map(|c| {
                self.rows
                    .iter()
                    .filter_map(|r| r.get(c))
                    .map(|s| s.chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let rule = width
            .iter()
            .map(|w| "-".repeat(*w))
            .collect::<Vec<_>>()
            .join("  ");
        for (i, row) in self.rows.iter().enumerate() {
            if i == 1 || (total && i + 1 == self.rows.len() && i > 1) {
                println!("  {rule}");
            }
            let cells: Vec<String> = row
                .iter()
                .enumerate()
                .map(|(c, s)| {
                    if self.right.get(c).copied().unwrap_or(false) {
                        format!("{s:>w$}", w = width[c])
                    } else {
                        format!("{s:<w$}", w = width[c])
                    }
                })
                .collect();
            println!("  {}", cells.join("  ").trim_end());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn show_quotes_only_what_needs_it() {
        let mut cmd = Command::new("/usr/bin/cargo");
        cmd.args(["doc", "--workspace", "it's"])
            .env("RUSTDOCFLAGS", "-D warnings");
        assert_eq!(
            show(&cmd),
            r"RUSTDOCFLAGS='-D warnings' cargo doc --workspace 'it'\''s'"
        );
    }

    #[test]
    fn the_target_directory_is_cargo_s_own() {
        let root = Path::new("/w");
        // What cargo metadata reports wins (it knows the configs too).
        let meta =
            r#"{"packages":[],"target_directory":"/tmp/ztd","version":1,"workspace_root":"/w"}"#;
        assert_eq!(
            resolve_target_dir(Some(meta), Some("elsewhere".into()), root),
            Path::new("/tmp/ztd")
        );
        // Without it: CARGO_TARGET_DIR, a relative one in the workspace root.
        assert_eq!(
            resolve_target_dir(None, Some("/tmp/abs".into()), root),
            Path::new("/tmp/abs")
        );
        assert_eq!(
            resolve_target_dir(Some("not json"), Some("rel/t".into()), root),
            Path::new("/w/rel/t")
        );
        assert_eq!(resolve_target_dir(None, None, root), Path::new("/w/target"));
        assert_eq!(
            resolve_target_dir(None, Some("".into()), root),
            Path::new("/w/target")
        );
    }

    #[test]
    fn the_target_directory_follows_cargo_target_dir() {
        // The real cargo, with the variable set for it as a user would.
        let meta = cargo(["metadata", "--format-version", "1", "--no-deps"])
            .env("CARGO_TARGET_DIR", "some/relative/dir")
            .output()
            .unwrap();
        assert!(meta.status.success());
        let text = String::from_utf8_lossy(&meta.stdout);
        assert_eq!(
            resolve_target_dir(Some(&text), None, &root()),
            root().join("some/relative/dir")
        );
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(duration(Duration::from_millis(1234)), "1.2s");
        assert_eq!(duration(Duration::from_millis(83_400)), "1m23.4s");
    }

    #[test]
    fn build_commands_are_told_from_the_rest() {
        assert!(only_builds(&cargo(["clippy", "--workspace"])));
        assert!(only_builds(&cargo(["doc", "--no-deps"])));
        assert!(!only_builds(&cargo(["test", "--workspace"])));
        assert!(!only_builds(&cargo(["run", "-p", "x"])));
        assert!(only_builds(&rustup_cargo(
            "1.95.0",
            ["check", "-p", "zverbs"]
        )));
        assert!(!only_builds(&rustup_cargo("nightly", ["miri", "test"])));
        assert!(!only_builds(&Command::new("make")));
    }

    #[test]
    fn the_time_before_cargo_s_finished_line_is_build_time() {
        let before = build_time();
        let started = Instant::now();
        let mut cmd = Command::new("sh");
        cmd.args([
            "-c",
            "sleep 0.2; echo '    Finished `test` profile'; sleep 1",
        ]);
        run_lines(&mut cmd, |_| false).unwrap();
        let total = started.elapsed();
        // No other test of this binary builds through `run` or `run_lines`.
        let built = build_time() - before;
        assert!(built >= Duration::from_millis(200), "{built:?}");
        assert!(
            built + Duration::from_millis(900) <= total,
            "{built:?} of {total:?}"
        );
    }

    #[test]
    fn run_lines_merges_stdout_and_stderr() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo one; echo two >&2; echo three"]);
        let mut seen = Vec::new();
        let status = run_lines(&mut cmd, |l| {
            seen.push(l.to_string());
            false
        })
        .unwrap();
        assert!(status.success());
        assert_eq!(seen, ["one", "two", "three"]);
    }
}
