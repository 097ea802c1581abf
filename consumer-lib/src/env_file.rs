//! A secret setting from the environment or from a file, the way container platforms
//! mount secrets: `CHIME_AMQP_URL` or `CHIME_AMQP_URL_FILE` (a path whose contents are the
//! URL), with the rules `chimed` applies to its own `*_FILE` settings: both set is an
//! error, an empty `*_FILE` counts as unset, and one trailing newline (`\n` or `\r\n`) of
//! the file is stripped. Errors name the variables and the file, never the value.
//!
//! ```no_run
//! # fn main() -> Result<(), chime_consumer::env_file::EnvFileError> {
//! let url = chime_consumer::env_file::var_or_file("CHIME_AMQP_URL", "CHIME_AMQP_URL_FILE")?
//!     .unwrap_or_else(|| "amqp://guest:guest@127.0.0.1:5672/%2f".into());
//! # let _ = url;
//! # Ok(())
//! # }
//! ```

use std::path::{Path, PathBuf};

/// Why a setting could not be read from the environment or its file.
#[derive(Debug, thiserror::Error)]
pub enum EnvFileError {
    /// Both the variable and its `*_FILE` variable are set.
    #[error("{var} and {file_var} are both set: set one of them")]
    Both {
        /// The variable holding the value itself.
        var: String,
        /// The variable naming the file.
        file_var: String,
    },
    /// The file named by the `*_FILE` variable cannot be read.
    #[error("cannot read {file_var} file {}: {source}", path.display())]
    Read {
        /// The variable naming the file.
        file_var: String,
        /// The file.
        path: PathBuf,
        /// What reading it said.
        source: std::io::Error,
    },
    /// The file is empty (or holds only a newline).
    #[error("{file_var} file {} is empty", path.display())]
    Empty {
        /// The variable naming the file.
        file_var: String,
        /// The file.
        path: PathBuf,
    },
    /// The variable or the file's contents are not UTF-8.
    #[error("{what} is not valid UTF-8")]
    NotUtf8 {
        /// The variable or file.
        what: String,
    },
}

/// The value of the environment variable `var`, or the contents of the file that
/// `file_var` names; `None` when neither is set (the caller's default applies).
pub fn var_or_file(var: &str, file_var: &str) -> Result<Option<String>, EnvFileError> {
    let get = |name: &str| match std::env::var(name) {
        Ok(value) => Ok(Some(value)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => Err(EnvFileError::NotUtf8 {
            what: name.to_string(),
        }),
    };
    resolve(var, get(var)?, file_var, get(file_var)?, |path| {
        std::fs::read(path)
    })
}

/// [`var_or_file`] over given values and a file reader, without touching the process.
pub fn resolve(
    var: &str,
    value: Option<String>,
    file_var: &str,
    file: Option<String>,
    read: impl FnOnce(&Path) -> std::io::Result<Vec<u8>>,
) -> Result<Option<String>, EnvFileError> {
    let path = file.as_deref().map(str::trim).filter(|p| !p.is_empty());
    let Some(path) = path else {
        return Ok(value);
    };
    if value.is_some() {
        return Err(EnvFileError::Both {
            var: var.to_string(),
            file_var: file_var.to_string(),
        });
    }
    let path = PathBuf::from(path);
    let bytes = read(&path).map_err(|source| EnvFileError::Read {
        file_var: file_var.to_string(),
        path: path.clone(),
        source,
    })?;
    let text = String::from_utf8(bytes).map_err(|_| EnvFileError::NotUtf8 {
        what: format!("{file_var} file {}", path.display()),
    })?;
    let text = text.strip_suffix('\n').unwrap_or(&text);
    let text = text.strip_suffix('\r').unwrap_or(text);
    if text.is_empty() {
        return Err(EnvFileError::Empty {
            file_var: file_var.to_string(),
            path,
        });
    }
    Ok(Some(text.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const URL: &str = "amqp://app:s3cret-pw@rabbit:5672/prod";

    fn run(
        value: Option<&str>,
        file: Option<&str>,
        contents: std::io::Result<&str>,
    ) -> Result<Option<String>, EnvFileError> {
        resolve(
            "CHIME_AMQP_URL",
            value.map(str::to_string),
            "CHIME_AMQP_URL_FILE",
            file.map(str::to_string),
            |path| {
                assert_eq!(path, Path::new("/run/secrets/amqp-url"));
                contents.map(|c| c.as_bytes().to_vec())
            },
        )
    }

    #[test]
    fn the_variable_the_file_or_neither() {
        let no_file = || Err(std::io::Error::other("not read"));
        assert_eq!(
            run(Some(URL), None, no_file()).unwrap().as_deref(),
            Some(URL)
        );
        assert_eq!(run(None, None, no_file()).unwrap(), None);
        // An empty *_FILE is unset.
        assert_eq!(
            run(Some(URL), Some(" "), no_file()).unwrap().as_deref(),
            Some(URL)
        );
        let file = Some("/run/secrets/amqp-url");
        for contents in [URL.to_string(), format!("{URL}\n"), format!("{URL}\r\n")] {
            assert_eq!(
                run(None, file, Ok(&contents)).unwrap().as_deref(),
                Some(URL),
                "{contents:?}"
            );
        }
        // Only one newline goes; anything else is the value as written.
        assert_eq!(
            run(None, file, Ok(&format!("{URL}\n\n")))
                .unwrap()
                .as_deref(),
            Some(format!("{URL}\n").as_str())
        );
    }

    #[test]
    fn errors_name_the_variables_and_file_never_the_value() {
        let file = Some("/run/secrets/amqp-url");
        let both = run(Some(URL), file, Ok(URL)).unwrap_err().to_string();
        assert_eq!(
            both,
            "CHIME_AMQP_URL and CHIME_AMQP_URL_FILE are both set: set one of them"
        );
        let missing = run(
            None,
            file,
            Err(std::io::Error::from(std::io::ErrorKind::NotFound)),
        )
        .unwrap_err()
        .to_string();
        assert!(
            missing.starts_with("cannot read CHIME_AMQP_URL_FILE file /run/secrets/amqp-url: "),
            "{missing}"
        );
        let empty = run(None, file, Ok("\n")).unwrap_err().to_string();
        assert_eq!(
            empty,
            "CHIME_AMQP_URL_FILE file /run/secrets/amqp-url is empty"
        );
        for error in [both, missing, empty] {
            assert!(!error.contains("s3cret-pw"), "{error}");
        }
    }

    #[test]
    fn reads_the_file_from_the_environment() {
        // The real file reader. The process environment is shared by every test thread
        // (and `set_var` is unsafe), so the variables' values are passed in.
        let dir = std::env::temp_dir().join(format!("chime-env-file-{}", uuid::Uuid::now_v7()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("amqp-url");
        std::fs::write(&path, format!("{URL}\n")).unwrap();
        let read = resolve(
            "CHIME_TEST_ENV_FILE_URL",
            None,
            "CHIME_TEST_ENV_FILE_URL_FILE",
            Some(path.display().to_string()),
            |p| std::fs::read(p),
        );
        assert_eq!(read.unwrap().as_deref(), Some(URL));
        std::fs::remove_dir_all(dir).unwrap();
        assert_eq!(
            var_or_file(
                "CHIME_TEST_ENV_FILE_UNSET",
                "CHIME_TEST_ENV_FILE_UNSET_FILE"
            )
            .unwrap(),
            None
        );
    }
}
