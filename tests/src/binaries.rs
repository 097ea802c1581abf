//! Paths of the workspace's binaries, built once per test process so a test never runs a
//! stale `chimed` (cargo's test build does not build other packages' binaries).

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::OnceLock,
};

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ sits in the workspace")
        .to_path_buf()
}

/// The directory holding the binaries of the profile the tests were built with.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/<test>-<hash>, or target/<profile>/<bin> for the harness's
    // own binaries (chime-bench).
    let dir = exe.parent().expect("executable under target/<profile>");
    if dir.file_name().is_some_and(|name| name == "deps") {
        dir.parent().expect("target/<profile>/deps").to_path_buf()
    } else {
        dir.to_path_buf()
    }
}

fn ensure_built() -> &'static PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let dir = profile_dir();
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut command = Command::new(cargo);
        command.current_dir(workspace_root()).args([
            "build",
            "--quiet",
            "--workspace",
            "--bins",
            "--examples",
        ]);
        if dir.file_name().is_some_and(|name| name == "release") {
            command.arg("--release");
        }
        let status = command
            .status()
            .expect("run cargo build for the binaries under test");
        assert!(status.success(), "building the binaries under test failed");
        dir
    })
}

/// Path of binary `name` (`chimed`, `chimectl`, `chime-test-consumer`).
pub fn binary(name: &str) -> PathBuf {
    let path = ensure_built().join(name);
    assert!(
        path.exists(),
        "{} is missing after the build",
        path.display()
    );
    path
}

/// Path of example `name` (`demo_consumer`).
pub fn example(name: &str) -> PathBuf {
    let path = ensure_built().join("examples").join(name);
    assert!(
        path.exists(),
        "{} is missing after the build",
        path.display()
    );
    path
}

/// A fresh directory for a test's files (logs, SQLite files), kept after the run for
/// inspection when a test fails.
pub fn scratch_dir(label: &str) -> PathBuf {
    let dir = workspace_root()
        .join("target")
        .join("e2e")
        .join(format!("{label}-{}", uuid::Uuid::now_v7().simple()));
    std::fs::create_dir_all(&dir).expect("create a scratch directory");
    dir
}

/// A `chimectl` command aimed at `api`'s server, sending its token (as `CHIME_TOKEN`).
pub fn chimectl(api: &crate::api::Api) -> std::process::Command {
    let mut command = Command::new(binary("chimectl"));
    command.arg("--server").arg(api.base());
    command.env_remove("CHIME_TOKEN_FILE");
    match api.token() {
        Some(token) => command.env("CHIME_TOKEN", token),
        None => command.env_remove("CHIME_TOKEN"),
    };
    command
}
