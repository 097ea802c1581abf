//! Build script: finds the git commit the binaries are built from, for `--version` and
//! chimed's start-up log line, as `CHIME_GIT_COMMIT`.
//!
//! In order: the `CHIME_GIT_COMMIT` environment variable (a Docker build, where `.git`
//! is not in the context, passes it as a build argument); `.cargo_vcs_info.json`, which
//! `cargo package` writes into a crate from crates.io; `git rev-parse` in a checkout;
//! else `unknown`.

use std::{path::Path, process::Command};

fn main() {
    println!("cargo:rerun-if-env-changed=CHIME_GIT_COMMIT");
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let manifest_dir = Path::new(&manifest_dir);
    let commit = from_env()
        .or_else(|| from_vcs_info(manifest_dir))
        .or_else(|| from_git(manifest_dir))
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=CHIME_GIT_COMMIT={commit}");
}

fn from_env() -> Option<String> {
    let commit = std::env::var("CHIME_GIT_COMMIT").ok()?;
    let commit = commit.trim();
    (!commit.is_empty()).then(|| short(commit))
}

/// `{"git": {"sha1": "..."}}`, read without a JSON parser: a build script's dependencies
/// would be built for every user.
fn from_vcs_info(manifest_dir: &Path) -> Option<String> {
    let path = manifest_dir.join(".cargo_vcs_info.json");
    let text = std::fs::read_to_string(&path).ok()?;
    watch(&path);
    let after = &text[text.find("\"sha1\"")? + "\"sha1\"".len()..];
    let start = after.find('"')? + 1;
    let end = start + after[start..].find('"')?;
    Some(short(&after[start..end]))
}

fn from_git(manifest_dir: &Path) -> Option<String> {
    let git = |args: &[&str]| {
        let output = Command::new("git")
            .args(args)
            .current_dir(manifest_dir)
            .output()
            .ok()?;
        output
            .status
            .success()
            .then(|| String::from_utf8_lossy(&output.stdout).trim().to_string())
    };
    let commit = git(&["rev-parse", "--short=12", "HEAD"])?;
    // Build again when HEAD moves: a commit or a checkout changes HEAD or the branch's ref.
    for path in ["HEAD", "packed-refs"] {
        if let Some(file) = git(&["rev-parse", "--git-path", path]) {
            watch(&manifest_dir.join(file));
        }
    }
    if let Some(reference) = git(&["symbolic-ref", "-q", "HEAD"])
        && let Some(file) = git(&["rev-parse", "--git-path", &reference])
    {
        watch(&manifest_dir.join(file));
    }
    Some(commit)
}

/// Reruns this script when `path` changes. Only for files that exist: Cargo reruns a
/// script on every build while a watched file is missing.
fn watch(path: &Path) {
    if path.exists() {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}

fn short(commit: &str) -> String {
    commit.chars().take(12).collect()
}
