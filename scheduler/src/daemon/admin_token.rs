//! The bootstrap admin token's file (`admin_token_file`): read it when it exists, or
//! write a new random token there (mode 0600, created exclusively) on first start, so a
//! fresh install has exactly one way in, readable only by the user chimed runs as.
//! `chimectl` run in the same directory (the local demo) picks the same file up.
//! Automation mounts its own secret at this path on every node instead.
//!
//! A file other users can read draws a WARN. Group read access is not "other users" when
//! the file's group is one chimed itself runs with (its effective group or a
//! supplementary one): that is how Kubernetes mounts a Secret for a non-root process
//! (owner root, `fsGroup`, mode 0440), and it cannot be made 0600 there. Anything that
//! lets others write the file, or read it through the world bits or a foreign group,
//! still warns.

use std::{
    io::Write,
    os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt},
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
            if let Ok(meta) = std::fs::metadata(path) {
                let mode = meta.permissions().mode();
                if let Some(problem) = mode_problem(mode, meta.gid(), &own_groups()) {
                    warn!(
                        path = %path.display(),
                        mode = format!("{:o}", mode & 0o777),
                        group = meta.gid(),
                        "the admin token file is {problem}; chmod 600 it"
                    );
                }
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

/// What is wrong with a token file of `mode` owned by group `file_gid`, read by a
/// process whose groups are `own_groups`; `None` when only its owner and the process's
/// own groups can read it and nobody else can write it.
fn mode_problem(mode: u32, file_gid: u32, own_groups: &[u32]) -> Option<&'static str> {
    if mode & 0o007 != 0 {
        Some("open to every user of this machine")
    } else if mode & 0o020 != 0 {
        Some("writable by its group")
    } else if mode & 0o050 != 0 && !own_groups.contains(&file_gid) {
        Some("readable by a group chimed does not run with")
    } else {
        None
    }
}

/// The process's effective group and supplementary groups (Linux `/proc/self/status`);
/// empty where that cannot be read, so a group-readable file warns as before.
fn own_groups() -> Vec<u32> {
    std::fs::read_to_string("/proc/self/status")
        .map(|status| groups_of_status(&status))
        .unwrap_or_default()
}

/// The effective gid (second field of `Gid:`) and the `Groups:` of a
/// `/proc/<pid>/status` text.
fn groups_of_status(status: &str) -> Vec<u32> {
    let mut groups = Vec::new();
    for line in status.lines() {
        if let Some(gids) = line.strip_prefix("Gid:") {
            groups.extend(
                gids.split_whitespace()
                    .nth(1)
                    .and_then(|g| g.parse::<u32>().ok()),
            );
        } else if let Some(list) = line.strip_prefix("Groups:") {
            groups.extend(
                list.split_whitespace()
                    .filter_map(|g| g.parse::<u32>().ok()),
            );
        }
    }
    groups
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

    #[test]
    fn group_read_access_is_fine_only_for_a_group_chimed_runs_with() {
        let ours = [1000, 10001];
        // Kubernetes: owner root, fsGroup 10001, defaultMode 0440.
        assert_eq!(mode_problem(0o100440, 10001, &ours), None);
        assert_eq!(mode_problem(0o600, 0, &ours), None);
        assert_eq!(mode_problem(0o640, 1000, &ours), None);
        assert_eq!(mode_problem(0o400, 5, &ours), None);
        assert_eq!(
            mode_problem(0o640, 5, &ours),
            Some("readable by a group chimed does not run with")
        );
        assert_eq!(
            mode_problem(0o440, 10001, &[]),
            Some("readable by a group chimed does not run with")
        );
        assert_eq!(
            mode_problem(0o660, 10001, &ours),
            Some("writable by its group")
        );
        for mode in [0o644, 0o604, 0o602, 0o444] {
            assert_eq!(
                mode_problem(mode, 10001, &ours),
                Some("open to every user of this machine"),
                "{mode:o}"
            );
        }
    }

    #[test]
    fn reads_the_effective_and_supplementary_groups() {
        let status = "Name:\tchimed\nUid:\t10001\t10001\t10001\t10001\n\
                      Gid:\t10002\t10001\t10001\t10001\nFDSize:\t64\n\
                      Groups:\t10001 20 \nNStgid:\t1\n";
        assert_eq!(groups_of_status(status), [10001, 10001, 20]);
        assert_eq!(groups_of_status("Gid:\t0\t0\t0\t0\nGroups:\t\n"), [0]);
        // This process: its own effective group is among them.
        let meta = std::fs::metadata("/proc/self/status").unwrap();
        assert!(own_groups().contains(&meta.gid()), "{:?}", own_groups());
    }
}
