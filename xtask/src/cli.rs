//! Command-line parsing for every command, over [`lexopt`]: each command reads its options
//! from the [`Parser`] that `main` hands it after the command's name.
//!
//! Bad arguments are [`Usage`] errors (or lexopt's own): `main` prints them with the usage and
//! exits with 2, where a failed command exits with 1.

use std::ffi::OsString;
use std::fmt;
use std::str::FromStr;

pub use lexopt::{Arg, Parser};

use crate::util::{Error, Result};

/// Arguments a command does not take, with why.
#[derive(Debug)]
pub struct Usage(pub String);

impl fmt::Display for Usage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

/// A [`Usage`] error built like `format!`.
macro_rules! usage {
    ($($arg:tt)*) => {
        $crate::util::Error::new($crate::cli::Usage(format!($($arg)*)))
    };
}
pub(crate) use usage;

/// Whether `e` is about the arguments (exit code 2) rather than a failure of the command.
pub fn is_usage(e: &Error) -> bool {
    e.downcast_ref::<Usage>().is_some() || e.downcast_ref::<lexopt::Error>().is_some()
}

/// The value of the current option `flag`, parsed as a `T` (`--calls 100`).
///
/// # Errors
///
/// When it is missing or does not parse (saying which option and why).
pub fn value<T>(p: &mut Parser, flag: &str) -> Result<T>
where
    T: FromStr,
    T::Err: fmt::Display,
{
    let v = string(p.value()?)?;
    v.parse().map_err(|e| usage!("{flag} {v}: {e}"))
}

/// Every argument left, as they were given (for a command line run in turn: `-- CMD ARGS`).
///
/// # Errors
///
/// When one is not UTF-8.
pub fn rest(p: &mut Parser) -> Result<Vec<String>> {
    p.raw_args()?.map(string).collect()
}

/// `v` as a string.
///
/// # Errors
///
/// When it is not UTF-8.
pub fn string(v: OsString) -> Result<String> {
    v.into_string()
        .map_err(|v| usage!("argument {:?} is not UTF-8", v.to_string_lossy()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_arguments_are_usage_errors_and_failures_are_not() {
        let mut p = Parser::from_args(["--calls", "x"]);
        let _ = p.next();
        let e = value::<u64>(&mut p, "--calls").unwrap_err();
        assert!(is_usage(&e), "{e}");
        assert_eq!(e.to_string(), "--calls x: invalid digit found in string");
        // lexopt's own errors (a missing value) are about the arguments too.
        let mut p = Parser::from_args(["--calls"]);
        let _ = p.next();
        let e = value::<u64>(&mut p, "--calls").unwrap_err();
        assert!(is_usage(&e), "{e}");
        assert!(is_usage(&usage!("no stage {:?}", "x")));
        assert!(!is_usage(&crate::util::anyhow!("cargo failed")));
    }

    #[test]
    fn the_rest_is_taken_as_given() {
        let mut p = Parser::from_args(["--timeout", "5", "--", "ls", "-la", "--", "x"]);
        assert_eq!(p.next().unwrap(), Some(Arg::Long("timeout")));
        assert_eq!(value::<u64>(&mut p, "--timeout").unwrap(), 5);
        assert_eq!(p.next().unwrap(), Some(Arg::Value("ls".into())));
        assert_eq!(rest(&mut p).unwrap(), ["-la", "--", "x"]);
    }
}
