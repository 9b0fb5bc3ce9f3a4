//! The environment variables the library reads (`ZVERBS_DEVICE`, `ZVERBS_BACKEND`), each read
//! the same way: unset is `None`, and a value that is not UTF-8 is an error naming the
//! variable, never silently taken as unset.

use std::env::VarError;

use crate::error::{Error, Result};

/// The value of `name`, `None` when unset.
///
/// # Errors
///
/// [`Error::InvalidArgument`] when the value is not UTF-8.
pub(crate) fn var(name: &'static str) -> Result<Option<String>> {
    value(name, std::env::var(name))
}

/// [`var`] on an already read value.
pub(crate) fn value(
    name: &'static str,
    v: std::result::Result<String, VarError>,
) -> Result<Option<String>> {
    match v {
        Ok(s) => Ok(Some(s)),
        Err(VarError::NotPresent) => Ok(None),
        Err(VarError::NotUnicode(raw)) => Err(Error::InvalidArgument(format!(
            "{name}={}: not UTF-8",
            raw.to_string_lossy()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;
    use std::os::unix::ffi::OsStringExt;

    #[test]
    fn a_value_that_is_not_utf8_is_an_error_not_unset() {
        assert_eq!(value("X", Err(VarError::NotPresent)).unwrap(), None);
        assert_eq!(
            value("X", Ok("verbs".into())).unwrap().as_deref(),
            Some("verbs")
        );
        let raw = OsString::from_vec(b"dir\xffect".to_vec());
        let e = value("ZVERBS_BACKEND", Err(VarError::NotUnicode(raw))).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
        assert!(e.to_string().contains("ZVERBS_BACKEND="), "{e}");
        assert!(e.to_string().contains("not UTF-8"), "{e}");
    }
}
