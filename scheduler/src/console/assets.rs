//! The console's files, embedded at build time from `src/console/assets/`. A test walks
//! that directory, so a file added there and not listed here (or listed and gone) fails
//! the build's tests rather than a browser.

use std::sync::OnceLock;

/// One embedded file.
#[derive(Debug)]
pub struct Asset {
    /// Its path below `assets/`, with `/` separators.
    pub path: &'static str,
    /// Its `Content-Type`.
    pub content_type: &'static str,
    /// Its bytes.
    pub body: &'static [u8],
}

impl Asset {
    /// A strong validator for the body: its SHA-256, shortened.
    pub fn etag(&self) -> String {
        use sha2::{Digest, Sha256};
        let digest = Sha256::digest(self.body);
        let hex: String = digest[..12].iter().map(|b| format!("{b:02x}")).collect();
        format!("\"{hex}\"")
    }
}

macro_rules! asset {
    ($path:literal, $type:expr) => {
        Asset {
            path: $path,
            content_type: $type,
            body: include_bytes!(concat!("assets/", $path)),
        }
    };
}

const HTML: &str = "text/html; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";
const SVG: &str = "image/svg+xml";

/// Every file of the console.
pub static ASSETS: &[Asset] = &[
    asset!("index.html", HTML),
    asset!("console.css", CSS),
    asset!("icon.svg", SVG),
    asset!("js/app.js", JS),
    asset!("js/api.js", JS),
    asset!("js/ui.js", JS),
    asset!("js/pages/signin.js", JS),
    asset!("js/pages/overview.js", JS),
    asset!("js/pages/jobs.js", JS),
    asset!("js/pages/job_detail.js", JS),
    asset!("js/pages/job_form.js", JS),
    asset!("js/pages/runs.js", JS),
    asset!("js/pages/run_detail.js", JS),
    asset!("js/pages/dlq.js", JS),
    asset!("js/pages/cluster.js", JS),
    asset!("js/pages/consumers.js", JS),
    asset!("js/pages/audit.js", JS),
    asset!("js/pages/tokens.js", JS),
];

/// The file at `path`, if the console has one.
pub fn find(path: &str) -> Option<&'static Asset> {
    static INDEX: OnceLock<std::collections::HashMap<&'static str, &'static Asset>> =
        OnceLock::new();
    INDEX
        .get_or_init(|| ASSETS.iter().map(|asset| (asset.path, asset)).collect())
        .get(path)
        .copied()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn files_below(dir: &Path, prefix: &str, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name().into_string().unwrap();
            let path = format!("{prefix}{name}");
            if entry.file_type().unwrap().is_dir() {
                files_below(&entry.path(), &format!("{path}/"), out);
            } else {
                out.push(path);
            }
        }
    }

    #[test]
    fn every_file_of_the_assets_directory_is_embedded_and_no_other() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/console/assets");
        let mut on_disk = Vec::new();
        files_below(&dir, "", &mut on_disk);
        on_disk.sort();
        let mut listed: Vec<String> = ASSETS.iter().map(|a| a.path.to_string()).collect();
        listed.sort();
        assert_eq!(listed, on_disk);
    }

    #[test]
    fn scripts_load_nothing_from_another_origin() {
        for asset in ASSETS {
            let text = String::from_utf8_lossy(asset.body);
            for needle in ["http://", "https://", "//cdn", "fonts.googleapis"] {
                let offending = text
                    .lines()
                    .filter(|line| line.contains(needle))
                    // The SVG namespace is an identifier, not a request.
                    .filter(|line| !line.contains("http://www.w3.org/2000/svg"))
                    .collect::<Vec<_>>();
                assert!(
                    offending.is_empty(),
                    "{} names another origin: {offending:?}",
                    asset.path
                );
            }
        }
    }
}
