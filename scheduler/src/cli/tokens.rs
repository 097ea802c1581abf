//! `chimectl token create|ls|revoke`, and which token chimectl itself sends: the file of
//! `--token-file`/`CHIME_TOKEN_FILE`, else `CHIME_TOKEN`, else `./chime-admin.token` when
//! it exists (the file `chimed` writes on first start, so the local demo needs nothing).
//! There is no `--token` flag: a secret on the command line is visible in `ps`.

use std::{io::Write, path::Path};

use anyhow::{Context, bail};
use clap::Subcommand;

use super::{client::Client, table::table, terminal::write_json};
use crate::api::dto::{ListResponse, TokenRequest, TokenResponse};

/// The file `chimed` writes its first admin token to, by default, in its directory.
pub const DEFAULT_TOKEN_FILE: &str = "chime-admin.token";

/// `chimectl token ...` (admin tokens only).
#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Create a token; its secret is printed once and cannot be shown again.
    #[command(visible_alias = "add")]
    Create {
        /// Unique name (1 to 64 of A-Z a-z 0-9 . _ -); it is the actor in logs.
        #[arg(long)]
        name: String,
        /// reader (read jobs, runs, DLQs), operator (also change and trigger jobs and
        /// replay their dead letters) or admin (everything, every app).
        #[arg(long)]
        role: String,
        /// An app the token acts on; repeat for several, '*' for every app.
        #[arg(long = "app")]
        apps: Vec<String>,
    },
    /// List tokens (never their secrets).
    #[command(visible_alias = "list")]
    Ls,
    /// Revoke a token: every node refuses it within a few seconds.
    #[command(visible_alias = "rm")]
    Revoke {
        /// The token's name.
        name: String,
    },
}

/// The token chimectl sends: from `token_file` if given, else `CHIME_TOKEN` (`env`),
/// else [`DEFAULT_TOKEN_FILE`] in the current directory if it exists.
pub fn resolve_token(
    token_file: Option<&Path>,
    env: Option<String>,
) -> anyhow::Result<Option<String>> {
    if let Some(path) = token_file {
        return read_token(path).map(Some);
    }
    if let Some(token) = env.map(|t| t.trim().to_string()).filter(|t| !t.is_empty()) {
        return Ok(Some(token));
    }
    let default = Path::new(DEFAULT_TOKEN_FILE);
    if default.exists() {
        return read_token(default).map(Some);
    }
    Ok(None)
}

fn read_token(path: &Path) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the token file {}", path.display()))?;
    let token = text.trim();
    if token.is_empty() {
        bail!("the token file {} is empty", path.display());
    }
    Ok(token.to_string())
}

/// Runs a `token` command.
pub async fn token(
    client: &Client,
    command: TokenCommand,
    json: bool,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    match command {
        TokenCommand::Create { name, role, apps } => {
            let body = serde_json::to_value(TokenRequest { name, role, apps })?;
            let created: TokenResponse = client.post("/v1/tokens", Some(&body)).await?;
            if json {
                return write_json(out, &created);
            }
            writeln!(
                out,
                "created token {} ({} on {}); its secret, shown only now:\n{}",
                created.name,
                created.role,
                created.apps.join(", "),
                created.token.as_deref().unwrap_or("")
            )
            .context("writing output")
        }
        TokenCommand::Ls => {
            let tokens: ListResponse<TokenResponse> = client.get("/v1/tokens").await?;
            if json {
                return write_json(out, &tokens);
            }
            let mut t = table(&["NAME", "ROLE", "APPS", "CREATED", "BY", "REVOKED"]);
            for token in &tokens.items {
                t.add_row(vec![
                    token.name.clone(),
                    token.role.clone(),
                    token.apps.join(","),
                    token.created_at.clone(),
                    token.created_by.clone(),
                    token.revoked_at.clone().unwrap_or_else(|| "-".into()),
                ]);
            }
            writeln!(out, "{t}").context("writing output")
        }
        TokenCommand::Revoke { name } => {
            client.delete(&format!("/v1/tokens/{name}")).await?;
            if json {
                write_json(out, &serde_json::json!({"revoked": name}))
            } else {
                writeln!(out, "revoked token {name}").context("writing output")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_file_wins_over_the_environment() {
        let dir = std::env::temp_dir().join(format!("chimectl-token-{}", uuid::Uuid::now_v7()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("t");
        std::fs::write(&file, "from-file\n").unwrap();
        assert_eq!(
            resolve_token(Some(&file), Some("from-env".into())).unwrap(),
            Some("from-file".into())
        );
        std::fs::write(&file, "\n").unwrap();
        assert!(resolve_token(Some(&file), None).is_err());
        assert!(resolve_token(Some(&dir.join("missing")), None).is_err());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
