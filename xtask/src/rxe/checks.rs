//! Checks against RDMA devices and the runner that executes them, one at a time, each with a
//! timeout: inside the rxe VM (the xtask binary itself runs there, as `xtask run-checks PLAN
//! RESULTS`) or directly on a host with real devices.
//!
//! Three kinds of check:
//! - [`Kind::Command`]: one command (`ibv_devinfo -d rxe0`); passes when it exits 0 and its
//!   output contains every expected string.
//! - [`Kind::Pair`]: a server started in the background, then, once it listens, a client
//!   (`ibv_rc_pingpong`, `ib_write_lat`, `rping`); passes when both exit 0.
//! - [`Kind::Tests`]: a libtest executable built on the host (`cargo test --no-run`); each of
//!   its tests runs as its own process (`--exact NAME`), serially, each with the check's
//!   timeout, so that one hung test costs one timeout and cannot hide the others' results.
//!
//! The host writes the list as a plan file (one check a line) and reads back a results file
//! (one line a check, written as each ends, so a guest that dies half-way still reports what
//! ran). Given a directory, the runner also keeps each check's commands and output there, one
//! file a check ([`log_name`]), to read or quote after the run.

use std::fmt::Write as _;
use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::cli::{Arg, Parser, usage};
use crate::libtest::{self, Counts};
use crate::util::{self, Result, anyhow, bail};

/// When a pair's server is ready for its client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ready {
    /// Once it listens on this TCP port (`/proc/net/tcp`): the socket exchange of
    /// `ibv_rc_pingpong` and perftest.
    Tcp(u16),
    /// Once an rdma_cm ID listens on this port (`rdma resource show cm_id`): `rping`.
    RdmaCm(u16),
    /// Once the server's output holds this text (no tab or newline): a multicast receiver
    /// that has joined its group, which nothing outside the process shows.
    Output(String),
}

/// What a check runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    /// One command; passes when it exits 0 and its output contains each of `expect`.
    Command {
        /// Program and arguments.
        argv: Vec<String>,
        /// Strings the output must contain.
        expect: Vec<String>,
    },
    /// A server, then a client once the server is ready; passes when both exit 0 and their
    /// output together contains each of `expect`.
    Pair {
        /// The server's program and arguments.
        server: Vec<String>,
        /// The client's.
        client: Vec<String>,
        /// When to start the client.
        ready: Ready,
        /// Strings the output must contain.
        expect: Vec<String>,
    },
    /// Every test of a libtest executable, one process each.
    Tests {
        /// The executable (an absolute path, valid where the checks run).
        exe: String,
    },
}

/// One check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    /// What it is called in reports (no tabs or newlines).
    pub name: String,
    /// The limit for the whole check, or for each test of a [`Kind::Tests`].
    pub timeout: Duration,
    /// What it runs.
    pub kind: Kind,
}

/// How a check ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// It passed.
    Pass,
    /// It failed (or timed out).
    Fail,
}

/// The result of one check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckResult {
    /// The check's name.
    pub name: String,
    /// How it ended.
    pub status: Status,
    /// How long it took.
    pub took: Duration,
    /// Tests counted: one for a command or pair, each test for an executable.
    pub counts: Counts,
    /// Why it failed, or a short note.
    pub detail: String,
}

// ---------------------------------------------------------------------------------------------
// The plan and results files

/// Separates fields of a line.
const FIELD: char = '\t';
/// Separates the words of a command line inside a field.
const WORD: char = '\u{1f}';

fn words(w: &[String]) -> String {
    w.join(&WORD.to_string())
}

fn unwords(s: &str) -> Vec<String> {
    if s.is_empty() {
        Vec::new()
    } else {
        s.split(WORD).map(str::to_string).collect()
    }
}

fn clean(s: &str) -> Result<&str> {
    if s.contains(['\t', '\n', '\r', WORD]) {
        bail!("{s:?}: tabs, newlines and U+001F cannot appear in a check");
    }
    Ok(s)
}

/// The plan file's text for these checks.
pub fn encode_plan(checks: &[Check]) -> Result<String> {
    let mut out = String::new();
    for c in checks {
        let mut f = vec![clean(&c.name)?.to_string(), c.timeout.as_secs().to_string()];
        let all = |v: &[String]| -> Result<String> {
            for w in v {
                clean(w)?;
            }
            Ok(words(v))
        };
        match &c.kind {
            Kind::Command { argv, expect } => {
                f.extend(["command".into(), all(argv)?, all(expect)?]);
            }
            Kind::Pair {
                server,
                client,
                ready,
                expect,
            } => {
                let ready = match ready {
                    Ready::Tcp(p) => format!("tcp:{p}"),
                    Ready::RdmaCm(p) => format!("rdma_cm:{p}"),
                    Ready::Output(t) => format!("output:{}", clean(t)?),
                };
                f.extend([
                    "pair".into(),
                    all(server)?,
                    all(client)?,
                    ready,
                    all(expect)?,
                ]);
            }
            Kind::Tests { exe } => f.extend(["tests".into(), clean(exe)?.to_string()]),
        }
        out.push_str(&f.join(&FIELD.to_string()));
        out.push('\n');
    }
    Ok(out)
}

/// The checks of a plan file's text.
pub fn decode_plan(text: &str) -> Result<Vec<Check>> {
    let mut checks = Vec::new();
    for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.is_empty()) {
        let f: Vec<&str> = line.split(FIELD).collect();
        let bad = || anyhow!("plan line {}: malformed: {line:?}", n + 1);
        let (name, secs, kind) = match f.as_slice() {
            [name, secs, kind, ..] => (name, secs, *kind),
            _ => return Err(bad()),
        };
        let timeout = Duration::from_secs(secs.parse().map_err(|_| bad())?);
        let kind = match (kind, &f[3..]) {
            ("command", [argv, expect]) => Kind::Command {
                argv: unwords(argv),
                expect: unwords(expect),
            },
            ("pair", [server, client, ready, expect]) => {
                let ready = match ready.split_once(':') {
                    Some(("tcp", p)) => Ready::Tcp(p.parse().map_err(|_| bad())?),
                    Some(("rdma_cm", p)) => Ready::RdmaCm(p.parse().map_err(|_| bad())?),
                    Some(("output", t)) if !t.is_empty() => Ready::Output(t.to_string()),
                    _ => return Err(bad()),
                };
                Kind::Pair {
                    server: unwords(server),
                    client: unwords(client),
                    ready,
                    expect: unwords(expect),
                }
            }
            ("tests", [exe]) => Kind::Tests {
                exe: exe.to_string(),
            },
            _ => return Err(bad()),
        };
        checks.push(Check {
            name: name.to_string(),
            timeout,
            kind,
        });
    }
    Ok(checks)
}

impl CheckResult {
    /// The result's line in the results file.
    pub fn encode(&self) -> String {
        let status = match self.status {
            Status::Pass => "pass",
            Status::Fail => "fail",
        };
        let detail: String = self
            .detail
            .chars()
            .map(|c| if c == FIELD || c == '\n' { ' ' } else { c })
            .collect();
        let c = &self.counts;
        format!(
            "{}\t{status}\t{}\t{}\t{}\t{}\t{}\t{detail}",
            self.name,
            self.took.as_millis(),
            c.binaries,
            c.passed,
            c.failed,
            c.ignored
        )
    }

    /// A result from its line in the results file.
    pub fn decode(line: &str) -> Result<Self> {
        let f: Vec<&str> = line.splitn(8, FIELD).collect();
        let bad = || anyhow!("malformed result line {line:?}");
        let [name, status, ms, bin, pass, fail, ign, detail] = f.as_slice() else {
            return Err(bad());
        };
        let n = |s: &str| s.parse::<u32>().map_err(|_| bad());
        Ok(Self {
            name: name.to_string(),
            status: match *status {
                "pass" => Status::Pass,
                "fail" => Status::Fail,
                _ => return Err(bad()),
            },
            took: Duration::from_millis(ms.parse().map_err(|_| bad())?),
            counts: Counts {
                binaries: n(bin)?,
                passed: n(pass)?,
                failed: n(fail)?,
                ignored: n(ign)?,
            },
            detail: detail.to_string(),
        })
    }
}

/// The results in a results file's text.
pub fn decode_results(text: &str) -> Result<Vec<CheckResult>> {
    text.lines()
        .filter(|l| !l.is_empty())
        .map(CheckResult::decode)
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Running

/// `xtask run-checks PLAN RESULTS [LOGS]`: runs the plan's checks, appending each result to
/// RESULTS as it ends, and keeping each check's output in the directory LOGS when given.
/// Exits 0 whether checks pass or fail (the results say); non-zero only when the plan cannot
/// be read or the results cannot be written.
pub fn main(mut p: Parser) -> Result {
    let mut paths = Vec::new();
    while let Some(arg) = p.next()? {
        match arg {
            Arg::Value(v) if paths.len() < 3 => paths.push(std::path::PathBuf::from(v)),
            arg => {
                return Err(usage!(
                    "{}: xtask run-checks PLAN RESULTS [LOGS]",
                    arg.unexpected()
                ));
            }
        }
    }
    let (plan, results, logs) = match paths.as_slice() {
        [plan, results] => (plan, results, None),
        [plan, results, logs] => (plan, results, Some(logs.as_path())),
        _ => return Err(usage!("usage: xtask run-checks PLAN RESULTS [LOGS]")),
    };
    let checks = decode_plan(&fs::read_to_string(plan)?)?;
    let mut out = fs::File::create(results)?;
    run_all(&checks, &[], logs, &mut |r| {
        writeln!(out, "{}", r.encode())?;
        out.sync_data()
    })?;
    Ok(())
}

/// The file name of check number `index` (from 0) in a logs directory: its number and its
/// name in lower case, with every run of other characters than letters and digits as one `-`
/// (`07-ibv_rc_pingpong-rxe0.log`; underscores are kept).
pub fn log_name(index: usize, name: &str) -> String {
    let mut slug = String::new();
    for c in name.chars() {
        if c.is_ascii_alphanumeric() || c == '_' {
            slug.push(c.to_ascii_lowercase());
        } else if !slug.ends_with('-') {
            slug.push('-');
        }
    }
    format!("{:02}-{}.log", index + 1, slug.trim_matches('-'))
}

/// Runs the checks one after the other, printing each one's progress and output, and hands
/// each result to `record` as it ends. `env` is added to every process's environment. With
/// `logs`, each check's commands and output are also written there ([`log_name`]).
pub fn run_all(
    checks: &[Check],
    env: &[(String, String)],
    logs: Option<&Path>,
    record: &mut dyn FnMut(&CheckResult) -> io::Result<()>,
) -> Result<Vec<CheckResult>> {
    if let Some(dir) = logs {
        fs::create_dir_all(dir)?;
    }
    let mut results = Vec::new();
    for (i, c) in checks.iter().enumerate() {
        println!("\n--- [{}/{}] {}", i + 1, checks.len(), c.name);
        let t = Instant::now();
        let Outcome {
            status,
            counts,
            detail,
            log,
        } = match &c.kind {
            Kind::Command { argv, expect } => one(argv, expect, c.timeout, env),
            Kind::Pair {
                server,
                client,
                ready,
                expect,
            } => pair(server, client, ready, expect, c.timeout, env),
            Kind::Tests { exe } => tests(exe, c.timeout, env),
        };
        let r = CheckResult {
            name: c.name.clone(),
            status,
            took: t.elapsed(),
            counts,
            detail,
        };
        if let Some(dir) = logs {
            let verdict = match r.status {
                Status::Pass => "passed".to_string(),
                Status::Fail => format!("FAILED: {}", r.detail),
            };
            fs::write(
                dir.join(log_name(i, &c.name)),
                format!(
                    "# {}\n{log}# {verdict} ({})\n",
                    c.name,
                    util::duration(r.took)
                ),
            )?;
        }
        match r.status {
            Status::Pass => println!("--- ok: {} ({})", r.name, util::duration(r.took)),
            Status::Fail => println!(
                "--- FAILED: {} ({}): {}",
                r.name,
                util::duration(r.took),
                r.detail
            ),
        }
        record(&r)?;
        results.push(r);
    }
    Ok(results)
}

/// How one check ended, with what it printed.
struct Outcome {
    status: Status,
    counts: Counts,
    detail: String,
    /// The commands (`$ ...` lines) and their output.
    log: String,
}

/// A command line as the log shows it.
fn shown(argv: &[String]) -> String {
    let Some((program, args)) = argv.split_first() else {
        return String::new();
    };
    format!("$ {}\n", util::show(Command::new(program).args(args)))
}

/// An output as the log shows it: each line prefixed with `who| `.
fn logged(who: &str, out: &str) -> String {
    let mut s = String::new();
    for line in out.trim_end().lines() {
        let _ = writeln!(s, "{who}| {line}");
    }
    s
}

/// One test counted as passed or failed.
fn single(ok: bool) -> Counts {
    Counts {
        binaries: 0,
        passed: ok.into(),
        failed: (!ok).into(),
        ignored: 0,
    }
}

fn one(argv: &[String], expect: &[String], timeout: Duration, env: &[(String, String)]) -> Outcome {
    let deadline = Instant::now() + timeout;
    let mut p = match Proc::spawn(argv, env) {
        Ok(p) => p,
        Err(e) => return fail(e, shown(argv)),
    };
    let status = Ended::from_wait(p.wait(deadline), timeout);
    let out = p.output();
    let name = std::path::Path::new(&argv[0])
        .file_name()
        .map_or_else(|| argv[0].clone(), |n| n.to_string_lossy().into_owned());
    print_output(&name, &out);
    let log = format!("{}{}", shown(argv), logged(&name, &out));
    finish(verdict(&[(&name, status)], expect, &out), log)
}

/// How one process of a check ended.
#[derive(Clone, Debug)]
enum Ended {
    /// It exited (or was killed by a signal of its own).
    Exited(ExitStatus),
    /// It was killed at the check's time limit.
    OutOfTime(Duration),
    /// It never ran, and why.
    NotStarted(String),
}

impl Ended {
    fn from_wait(status: Option<ExitStatus>, limit: Duration) -> Self {
        status.map_or(Ended::OutOfTime(limit), Ended::Exited)
    }
}

fn pair(
    server: &[String],
    client: &[String],
    ready: &Ready,
    expect: &[String],
    timeout: Duration,
    env: &[(String, String)],
) -> Outcome {
    let deadline = Instant::now() + timeout;
    let mut s = match Proc::spawn(server, env) {
        Ok(p) => p,
        Err(e) => return fail(e, shown(server)),
    };
    // Wait until the server listens (or ends, or time runs out).
    let mut listening = false;
    while Instant::now() < deadline && s.running() {
        if is_ready(ready, &s) {
            listening = true;
            break;
        }
        thread::sleep(Duration::from_millis(50));
    }
    let (c_status, c_out) = if listening {
        match Proc::spawn(client, env) {
            Ok(mut c) => {
                let st = Ended::from_wait(c.wait(deadline), timeout);
                (st, c.output())
            }
            Err(e) => (Ended::NotStarted(e.to_string()), String::new()),
        }
    } else if s.running() {
        let why = format!(
            "the server did not listen within {}",
            util::duration(timeout)
        );
        (Ended::NotStarted(why), String::new())
    } else {
        let why = "the server ended before it listened".to_string();
        (Ended::NotStarted(why), String::new())
    };
    let s_status = Ended::from_wait(s.wait(deadline), timeout);
    let s_out = s.output();
    print_output("server", &s_out);
    print_output("client", &c_out);
    let both = format!("{s_out}\n{c_out}");
    let log = format!(
        "{}{}{}{}",
        shown(server),
        logged("server", &s_out),
        shown(client),
        logged("client", &c_out)
    );
    finish(
        verdict(&[("server", s_status), ("client", c_status)], expect, &both),
        log,
    )
}

fn tests(exe: &str, timeout: Duration, env: &[(String, String)]) -> Outcome {
    let argv = |extra: &[&str]| -> Vec<String> {
        std::iter::once(exe)
            .chain(extra.iter().copied())
            .map(str::to_string)
            .collect()
    };
    // `--list --format terse` prints `name: test` per test.
    let list_argv = argv(&["--list", "--format", "terse"]);
    let mut log = shown(&list_argv);
    let mut lister = match Proc::spawn(&list_argv, env) {
        Ok(p) => p,
        Err(e) => return fail(e, log),
    };
    let listed = lister.wait(Instant::now() + timeout);
    let list = lister.output();
    log.push_str(&logged("--list", &list));
    if !listed.is_some_and(|s| s.success()) {
        print_output("--list", &list);
        return fail(
            format!("{exe} --list failed ({})", show_status(listed)),
            log,
        );
    }
    let names: Vec<&str> = list
        .lines()
        .filter_map(|l| l.strip_suffix(": test"))
        .collect();
    let mut counts = Counts {
        binaries: 1,
        ..Counts::default()
    };
    let mut failed = Vec::new();
    for name in &names {
        let t = Instant::now();
        let test_argv = argv(&["--exact", name, "--nocapture"]);
        log.push_str(&shown(&test_argv));
        let mut p = match Proc::spawn(&test_argv, env) {
            Ok(p) => p,
            Err(e) => return fail(e, log),
        };
        let st = p.wait(Instant::now() + timeout);
        let out = p.output();
        log.push_str(&logged(name, &out));
        let result = out
            .lines()
            .filter_map(|l| l.trim_start().strip_prefix("test result: "))
            .map(libtest::result_counts)
            .next_back();
        let took = util::duration(t.elapsed());
        match result {
            Some(r) if st.is_some_and(|s| s.success()) && r.passed == 1 => {
                counts.passed += 1;
                println!("    test {name} ... ok ({took})");
            }
            Some(r) if st.is_some_and(|s| s.success()) && r.ignored == 1 => {
                counts.ignored += 1;
                println!("    test {name} ... ignored");
            }
            _ => {
                counts.failed += 1;
                let why = match st {
                    None => format!("timed out after {}", util::duration(timeout)),
                    Some(s) => format!("{s}"),
                };
                println!("    test {name} ... FAILED ({why}, {took})");
                print_output(name, &out);
                failed.push(format!("{name} ({why})"));
            }
        }
    }
    let detail = if failed.is_empty() {
        format!("{} passed, {} ignored", counts.passed, counts.ignored)
    } else {
        format!("failed: {}", failed.join(", "))
    };
    let status = if failed.is_empty() {
        Status::Pass
    } else {
        Status::Fail
    };
    Outcome {
        status,
        counts,
        detail,
        log,
    }
}

fn fail(e: impl std::fmt::Display, log: String) -> Outcome {
    Outcome {
        status: Status::Fail,
        counts: single(false),
        detail: e.to_string(),
        log,
    }
}

fn finish(verdict: std::result::Result<(), String>, log: String) -> Outcome {
    match verdict {
        Ok(()) => Outcome {
            status: Status::Pass,
            counts: single(true),
            detail: String::new(),
            log,
        },
        Err(why) => Outcome {
            status: Status::Fail,
            counts: single(false),
            detail: why,
            log,
        },
    }
}

/// Ok when every process exited 0 and the output holds every expected string; else why not.
fn verdict(
    procs: &[(&str, Ended)],
    expect: &[String],
    out: &str,
) -> std::result::Result<(), String> {
    let mut why = Vec::new();
    for (name, st) in procs {
        match st {
            Ended::Exited(s) if s.success() => {}
            Ended::Exited(s) => why.push(format!("{name}: {s}")),
            Ended::OutOfTime(limit) => why.push(format!(
                "{name}: killed at the {} limit",
                util::duration(*limit)
            )),
            Ended::NotStarted(reason) => why.push(format!("{name}: not started: {reason}")),
        }
    }
    if !why.is_empty() {
        // What the output lacks says nothing more.
        return Err(why.join("; "));
    }
    for e in expect {
        if !out.contains(e.as_str()) {
            why.push(format!("output lacks {e:?}"));
        }
    }
    if why.is_empty() {
        Ok(())
    } else {
        Err(why.join("; "))
    }
}

fn show_status(s: Option<ExitStatus>) -> String {
    s.map_or_else(|| "timed out".into(), |s| s.to_string())
}

/// Prints a process's output, indented.
fn print_output(who: &str, out: &str) {
    let out = out.trim_end();
    if out.is_empty() {
        return;
    }
    let mut s = String::new();
    for line in out.lines() {
        let _ = writeln!(s, "    {who}| {line}");
    }
    print!("{s}");
    let _ = io::stdout().flush();
}

/// Whether the server of a pair is ready.
fn is_ready(ready: &Ready, server: &Proc) -> bool {
    match ready {
        Ready::Output(text) => server.output_so_far().contains(text.as_str()),
        Ready::Tcp(port) => ["/proc/net/tcp", "/proc/net/tcp6"]
            .iter()
            .any(|f| fs::read_to_string(f).is_ok_and(|t| tcp_listening(&t, *port))),
        Ready::RdmaCm(port) => Command::new("rdma")
            .args(["resource", "show", "cm_id"])
            .stderr(Stdio::null())
            .output()
            .is_ok_and(|o| cm_listening(&String::from_utf8_lossy(&o.stdout), *port)),
    }
}

/// Whether a `/proc/net/tcp` table shows a socket listening on `port` (state `0A`).
fn tcp_listening(table: &str, port: u16) -> bool {
    let want = format!(":{port:04X}");
    table.lines().skip(1).any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() > 3 && f[1].ends_with(&want) && f[3] == "0A"
    })
}

/// Whether `rdma resource show cm_id` shows an ID listening on `port`.
fn cm_listening(out: &str, port: u16) -> bool {
    let want = format!(":{port}");
    out.lines().any(|l| {
        l.contains("state LISTEN")
            && l.split_whitespace()
                .skip_while(|w| *w != "src-addr")
                .nth(1)
                .is_some_and(|a| a.ends_with(&want))
    })
}

/// A child process in its own process group, its stdout and stderr read into one buffer.
struct Proc {
    child: Child,
    reader: Option<JoinHandle<()>>,
    /// What it wrote so far.
    seen: Arc<Mutex<Vec<u8>>>,
    status: Option<ExitStatus>,
}

impl Proc {
    fn spawn(argv: &[String], env: &[(String, String)]) -> io::Result<Self> {
        let Some((program, args)) = argv.split_first() else {
            return Err(io::Error::other("empty command line"));
        };
        println!("$ {}", util::show(Command::new(program).args(args)));
        let (mut reader, writer) = io::pipe()?;
        let mut cmd = Command::new(program);
        cmd.args(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(writer.try_clone()?)
            .stderr(writer)
            .process_group(0);
        let child = cmd
            .spawn()
            .map_err(|e| io::Error::other(format!("cannot start {program}: {e}")))?;
        // `cmd` holds the pipe's write ends until dropped, here: the reader then sees
        // end-of-file once the child and everything it started have exited.
        drop(cmd);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let into = seen.clone();
        let reader = thread::spawn(move || {
            let mut chunk = [0u8; 4096];
            while let Ok(n @ 1..) = reader.read(&mut chunk) {
                into.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .extend_from_slice(&chunk[..n]);
            }
        });
        Ok(Self {
            child,
            reader: Some(reader),
            seen,
            status: None,
        })
    }

    /// Whether it is still running.
    fn running(&mut self) -> bool {
        if self.status.is_none() {
            self.status = self.child.try_wait().ok().flatten();
        }
        self.status.is_none()
    }

    /// Waits until it exits or `deadline` passes; then kills its whole process group.
    /// `None`: it was killed at the deadline.
    fn wait(&mut self, deadline: Instant) -> Option<ExitStatus> {
        while self.running() {
            if Instant::now() >= deadline {
                self.kill();
                return None;
            }
            thread::sleep(Duration::from_millis(20));
        }
        // Whatever it left behind in its group goes too (the pipe closes with them).
        self.kill_group();
        self.status
    }

    fn kill_group(&self) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            // SAFETY: kill(2) with a negative pid signals a process group; it touches no
            // memory of ours. The group is the child's own (`process_group(0)`).
            unsafe {
                libc::kill(-pid, libc::SIGKILL);
            }
        }
    }

    fn kill(&mut self) {
        self.kill_group();
        let _ = self.child.kill();
        self.status = self.child.wait().ok();
    }

    /// Everything it wrote (after it ended).
    fn output(&mut self) -> String {
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        self.output_so_far()
    }

    /// What it has written up to now.
    fn output_so_far(&self) -> String {
        let bytes = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.status.is_none() {
            self.kill();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|w| w.to_string()).collect()
    }

    fn plan() -> Vec<Check> {
        vec![
            Check {
                name: "devinfo rxe0".into(),
                timeout: Duration::from_secs(60),
                kind: Kind::Command {
                    argv: s(&["ibv_devinfo", "-d", "rxe0"]),
                    expect: s(&["PORT_ACTIVE"]),
                },
            },
            Check {
                name: "rping".into(),
                timeout: Duration::from_secs(120),
                kind: Kind::Pair {
                    server: s(&["rping", "-s", "-a", "198.18.0.1"]),
                    client: s(&["rping", "-c", "-a", "198.18.0.1", "-C", "3"]),
                    ready: Ready::RdmaCm(7174),
                    expect: Vec::new(),
                },
            },
            Check {
                name: "pingpong".into(),
                timeout: Duration::from_secs(5),
                kind: Kind::Pair {
                    server: s(&["a"]),
                    client: s(&["b", "x y"]),
                    ready: Ready::Tcp(18515),
                    expect: s(&["ok", "fine"]),
                },
            },
            Check {
                name: "mcast".into(),
                timeout: Duration::from_secs(5),
                kind: Kind::Pair {
                    server: s(&["mcast", "--recv"]),
                    client: s(&["mckey", "-s"]),
                    ready: Ready::Output("mcast: joined group 239.1.2.1".into()),
                    expect: s(&["received"]),
                },
            },
            Check {
                name: "device tests".into(),
                timeout: Duration::from_secs(300),
                kind: Kind::Tests {
                    exe: "/w/target/debug/deps/rxe-0123abcd".into(),
                },
            },
        ]
    }

    #[test]
    fn plans_round_trip() {
        let p = plan();
        assert_eq!(decode_plan(&encode_plan(&p).unwrap()).unwrap(), p);
        let mut bad = p[..1].to_vec();
        bad[0].name = "a\tb".into();
        assert!(encode_plan(&bad).is_err());
        assert!(decode_plan("x\t1\tcommand\n").is_err());
    }

    #[test]
    fn results_round_trip() {
        let r = CheckResult {
            name: "device tests".into(),
            status: Status::Fail,
            took: Duration::from_millis(1234),
            counts: Counts {
                binaries: 1,
                passed: 3,
                failed: 1,
                ignored: 2,
            },
            detail: "failed: a (timed out)\tx\ny".into(),
        };
        let back = CheckResult::decode(&r.encode()).unwrap();
        assert_eq!(back.detail, "failed: a (timed out) x y");
        assert_eq!(
            CheckResult {
                detail: r.detail.clone(),
                ..back
            },
            r
        );
        assert!(decode_results("a\tmaybe\t1\t0\t0\t0\t0\t\n").is_err());
    }

    #[test]
    fn readiness_from_proc_net_tcp_and_rdma_tool_output() {
        let tcp = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:4853 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0000000000000000 100 0 0 10 0
   1: 0100007F:4854 0100007F:B0B2 01 00000000:00000000 00:00000000 00000000     0        0 2 1 0000000000000000 20 4 30 10 -1";
        assert!(tcp_listening(tcp, 0x4853));
        assert!(!tcp_listening(tcp, 0x4854), "established, not listening");
        assert!(!tcp_listening(tcp, 18600));

        let cm = "link rxe0/1 cm-idn 0 state LISTEN ps TCP pid 155 comm rping src-addr 198.18.0.1:7174 dst-addr 0.0.0.0:0
link rxe1/- cm-idn 0 state LISTEN ps TCP pid 160 comm ib_write_lat src-addr 0.0.0.0:18700 ";
        assert!(cm_listening(cm, 7174));
        assert!(cm_listening(cm, 18700));
        assert!(!cm_listening(cm, 174));
    }

    #[test]
    fn commands_pass_fail_and_time_out() {
        let env = [("ZVERBS_X".to_string(), "42".to_string())];
        let ok = one(
            &s(&["sh", "-c", "echo value=$ZVERBS_X"]),
            &s(&["value=42"]),
            Duration::from_secs(10),
            &env,
        );
        assert_eq!(ok.status, Status::Pass, "{}", ok.detail);
        assert!(
            ok.log.starts_with("$ sh -c") && ok.log.contains("sh| value=42"),
            "{}",
            ok.log
        );
        let missing = one(
            &s(&["sh", "-c", "echo other"]),
            &s(&["value"]),
            Duration::from_secs(10),
            &[],
        );
        assert_eq!(missing.status, Status::Fail);
        assert!(missing.detail.contains("lacks"), "{}", missing.detail);
        let t = Instant::now();
        // The background `sleep` holds the output pipe: killing the group must free it.
        let hung = one(
            &s(&["sh", "-c", "sleep 30 & sleep 30"]),
            &[],
            Duration::from_millis(300),
            &[],
        );
        assert_eq!(hung.status, Status::Fail);
        assert!(hung.detail.contains("killed at the"), "{}", hung.detail);
        assert!(t.elapsed() < Duration::from_secs(20));
        assert_eq!(
            one(&s(&["/nonexistent"]), &[], Duration::from_secs(1), &[]).status,
            Status::Fail
        );
    }

    #[test]
    fn log_files_are_named_by_number_and_check() {
        assert_eq!(
            log_name(6, "ibv_rc_pingpong rxe1<->rxe2"),
            "07-ibv_rc_pingpong-rxe1-rxe2.log"
        );
        assert_eq!(
            log_name(
                19,
                "pingpong --rc (zverbs) server, ibv_rc_pingpong client, rxe0, 16 KiB"
            ),
            "20-pingpong-rc-zverbs-server-ibv_rc_pingpong-client-rxe0-16-kib.log"
        );
    }
}
