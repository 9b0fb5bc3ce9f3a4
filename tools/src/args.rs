//! Command-line parsing over [`lexopt`], with one wording for bad arguments in every program:
//! `-s needs a value`, `-s x: not a number`, `-s 0: use 1 to 2147483648`, `unknown option
//! --bogus`, `argument 2 is not UTF-8`. The programs exit with 2 on any of them.
//!
//! lexopt takes `-s 64`, `-s64`, `--size 64` and `--size=64`, and `--` ends the options.

use std::ffi::OsString;
use std::fmt::Display;
use std::process::ExitCode;
use std::str::FromStr;

pub use lexopt::{Arg, Parser};

/// How the user wrote the option `arg` (`-s`, `--size`), for messages; a positional argument as
/// itself.
pub fn flag(arg: &Arg<'_>) -> String {
    match arg {
        Arg::Short(c) => format!("-{c}"),
        Arg::Long(l) => format!("--{l}"),
        Arg::Value(v) => v.to_string_lossy().into_owned(),
    }
}

/// The message for a lexopt error, in the programs' wording.
pub fn explain(e: lexopt::Error) -> String {
    match e {
        lexopt::Error::MissingValue {
            option: Some(option),
        } => format!("{option} needs a value"),
        lexopt::Error::UnexpectedOption(option) => format!("unknown option {option}"),
        lexopt::Error::UnexpectedArgument(a) => {
            format!("unexpected argument `{}`", a.to_string_lossy())
        }
        lexopt::Error::NonUnicodeValue(v) => not_utf8(&v),
        other => other.to_string(),
    }
}

/// What a program's parser made of its command line (`Err` with an empty message: `--help`),
/// or the code to exit with: success after printing `usage` for `--help`, 2 after printing
/// `{program}: {error}` and `usage` to standard error.
///
/// # Errors
///
/// The exit code, when there is nothing to run.
pub fn or_usage<T>(parsed: Result<T, String>, program: &str, usage: &str) -> Result<T, ExitCode> {
    match parsed {
        Ok(a) => Ok(a),
        Err(e) if e.is_empty() => {
            println!("{usage}");
            Err(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("{program}: {e}\n{usage}");
            Err(ExitCode::from(2))
        }
    }
}

/// An option `arg` that this program does not take (or a positional argument too many).
pub fn unexpected(arg: Arg<'_>) -> String {
    explain(arg.unexpected())
}

/// A positional argument as a string.
///
/// # Errors
///
/// When it is not UTF-8.
pub fn string(v: OsString) -> Result<String, String> {
    v.into_string().map_err(|v| not_utf8(&v))
}

fn not_utf8(v: &std::ffi::OsStr) -> String {
    format!("argument `{}` is not UTF-8", v.to_string_lossy())
}

/// The value of option `flag`, as a string.
///
/// # Errors
///
/// `{flag} needs a value`, or the value is not UTF-8.
pub fn value(p: &mut Parser, flag: &str) -> Result<String, String> {
    let v = p.value().map_err(|_| format!("{flag} needs a value"))?;
    string(v)
}

/// The value of option `flag`, as a number.
///
/// # Errors
///
/// As [`value`], or `{flag} {v}: not a number` when it does not parse as a `T`.
pub fn number<T: FromStr>(p: &mut Parser, flag: &str) -> Result<T, String> {
    let v = value(p, flag)?;
    v.parse().map_err(|_| format!("{flag} {v}: not a number"))
}

/// The value of option `flag`, as a number from `min` to `max`.
///
/// # Errors
///
/// As [`number`], or `{flag} {n}: use {min} to {max}`. A number too large for `T` is out of
/// range too, not "not a number", when it is made of digits.
pub fn in_range<T>(p: &mut Parser, flag: &str, min: T, max: T) -> Result<T, String>
where
    T: FromStr + PartialOrd + Display + Copy,
{
    let v = value(p, flag)?;
    let out_of_range = || format!("{flag} {v}: use {min} to {max}");
    match v.parse::<T>() {
        Ok(n) if n >= min && n <= max => Ok(n),
        Ok(_) => Err(out_of_range()),
        Err(_) if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) => Err(out_of_range()),
        Err(_) => Err(format!("{flag} {v}: not a number")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parses `line` for the options `-n N` (1 to 10) and `-d NAME`.
    fn parse(line: &str) -> Result<(Option<u8>, Option<String>), String> {
        let mut p = Parser::from_args(line.split_whitespace());
        let (mut n, mut d) = (None, None);
        while let Some(arg) = p.next().map_err(explain)? {
            let f = flag(&arg);
            match arg {
                Arg::Short('n') | Arg::Long("iters") => n = Some(in_range(&mut p, &f, 1, 10)?),
                Arg::Short('d') => d = Some(value(&mut p, &f)?),
                _ => return Err(unexpected(arg)),
            }
        }
        Ok((n, d))
    }

    #[test]
    fn help_exits_0_and_a_bad_argument_2() {
        assert_eq!(or_usage(parse("-n 3"), "t", "usage"), Ok((Some(3), None)));
        assert_eq!(
            or_usage(Err::<(), _>(String::new()), "t", "usage"),
            Err(ExitCode::SUCCESS)
        );
        assert_eq!(
            or_usage(parse("-n 11"), "t", "usage"),
            Err(ExitCode::from(2))
        );
    }

    #[test]
    fn every_spelling_of_an_option_is_taken() {
        for line in ["-n 3", "-n3", "--iters 3", "--iters=3"] {
            assert_eq!(parse(line), Ok((Some(3), None)), "{line}");
        }
        assert_eq!(parse("-d x -n 1"), Ok((Some(1), Some("x".into()))));
    }

    #[test]
    fn bad_arguments_are_explained_with_the_flag_as_written() {
        assert_eq!(parse("-n 0").unwrap_err(), "-n 0: use 1 to 10");
        assert_eq!(parse("--iters 11").unwrap_err(), "--iters 11: use 1 to 10");
        // Too large for the type, but digits: out of range, not "not a number".
        assert_eq!(parse("-n 300").unwrap_err(), "-n 300: use 1 to 10");
        assert_eq!(parse("-n x").unwrap_err(), "-n x: not a number");
        assert_eq!(parse("-n -1").unwrap_err(), "-n -1: not a number");
        assert_eq!(parse("-d").unwrap_err(), "-d needs a value");
        assert_eq!(parse("--bogus").unwrap_err(), "unknown option --bogus");
        assert_eq!(parse("-x").unwrap_err(), "unknown option -x");
        assert_eq!(parse("extra").unwrap_err(), "unexpected argument `extra`");
    }

    #[test]
    fn arguments_that_are_not_utf8_are_refused() {
        use std::os::unix::ffi::OsStrExt;
        let bad = std::ffi::OsStr::from_bytes(b"a\xffb").to_os_string();
        let mut p = Parser::from_args([OsString::from("-d"), bad.clone()]);
        let _ = p.next();
        assert_eq!(
            value(&mut p, "-d").unwrap_err(),
            "argument `a\u{fffd}b` is not UTF-8"
        );
        assert!(string(bad).unwrap_err().contains("is not UTF-8"));
    }
}
