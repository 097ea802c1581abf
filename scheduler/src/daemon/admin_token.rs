//! The bootstrap admin token's file (`admin_token_file`): read it when it exists, or
//! write a new random token there (mode 0600, created exclusively) on first start, so a
//! fresh install has exactly one way in, readable only by the user chimed runs as.
//! `chimectl` run in the same directory (the local demo) picks the same file up.
//! Automation mounts its own secret at this path on every node instead.

use std::{
    io::Write,
    os::unix::fs::{OpenOptionsExt, PermissionsExt},
    path::Path,
};

use anyhow::{Context, bail};
use tracing::{info, warn};

use crate::app::tokens::{MIN_BOOTSTRAP_LEN, new_secret};

/// The bootstrap token from `path`, written there first if the file does not exist.
pub fn load_or_create(path: &Path) -> anyhow::Result<String> {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let secret = text.trim();
            if secret.len() < MIN_BOOTSTRAP_LEN || secret.chars().any(char::is_whitespace) {
                bail!(
                    "admin_token_file {} must hold one token of at least {MIN_BOOTSTRAP_LEN} \
                     characters without spaces (it holds {} characters); delete it to have \
                     chimed write a new one",
                    path.display(),
                    secret.len()
                );
            }
            let mode = std::fs::metadata(path)
                .map(|m| m.permissions().mode())
                .unwrap_or(0);
            if mode & 0o077 != 0 {
                warn!(
                    path = %path.display(),
                    mode = format!("{:o}", mode & 0o777),
                    "the admin token file is readable by other users; chmod 600 it"
                );
            }
            info!(path = %path.display(), "admin token read from file");
            Ok(secret.to_string())
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            let secret = new_secret();
            // Written whole to a file of our own, then linked into place: nodes started
            // together in one directory never read a half-written token, and the one
            // that links second reads the first one's.
            let staging = path.with_extension(format!("new-{:016x}", rand::random::<u64>()));
            let _ = std::fs::remove_file(&staging);
            let written = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&staging)
                .and_then(|mut file| {
                    file.write_all(format!("{secret}\n").as_bytes())?;
                    file.sync_all()
                });
            let linked = written.and_then(|()| std::fs::hard_link(&staging, path));
            let _ = std::fs::remove_file(&staging);
            match linked {
                Ok(()) => {
                    info!(
                        path = %path.display(),
                        "wrote a new admin token (mode 0600); chimectl reads it from there"
                    );
                    Ok(secret)
                }
                Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
                    load_or_create(path)
                }
                Err(error) => Err(error)
                    .with_context(|| format!("writing admin_token_file {}", path.display())),
            }
        }
        Err(error) => {
            Err(error).with_context(|| format!("reading admin_token_file {}", path.display()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_a_private_token_once_then_reads_it() {
        let dir = std::env::temp_dir().join(format!("chime-admin-{}", uuid::Uuid::now_v7()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("admin.token");
        let first = load_or_create(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(load_or_create(&path).unwrap(), first);
        // Nodes starting together in one directory agree on one token.
        let shared = dir.join("shared.token");
        let tokens: Vec<String> = std::thread::scope(|scope| {
            let starts: Vec<_> = (0..4)
                .map(|_| scope.spawn(|| load_or_create(&shared).unwrap()))
                .collect();
            starts.into_iter().map(|s| s.join().unwrap()).collect()
        });
        assert!(tokens.iter().all(|t| *t == tokens[0]), "{tokens:?}");
        std::fs::write(&path, "short\n").unwrap();
        let refused = load_or_create(&path).unwrap_err().to_string();
        assert!(refused.contains("at least 32"), "{refused}");
        assert!(!refused.contains("short"), "{refused}");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
