//! `chimectl` as a user meets it: help and version, synonyms, completions, and what it
//! says when the server is missing or is not chimed. Commands write to an injected writer.

use clap::{CommandFactory, Parser};

use super::{Cli, Command, JobCommand, RunCommand, Terminal, run_with};
use crate::cli::DlqCommand;

fn parse(argv: &[&str]) -> Cli {
    Cli::try_parse_from(["chimectl"].iter().chain(argv))
        .unwrap_or_else(|e| panic!("chimectl {argv:?}: {e}"))
}

/// Runs chimectl `argv` against nothing in particular: its output, or its error text.
async fn run(argv: &[&str]) -> Result<String, String> {
    let cli = Cli::try_parse_from(["chimectl"].iter().chain(argv)).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    let mut err = Vec::new();
    let mut input = std::io::empty();
    let mut input = std::io::BufReader::new(&mut input);
    let mut terminal = Terminal {
        err: &mut err,
        input: &mut input,
    };
    run_with(cli, &mut out, &mut terminal)
        .await
        .map_err(|e| format!("{e:#}"))?;
    Ok(String::from_utf8(out).expect("utf-8 output"))
}

#[test]
fn help_describes_chimectl_and_version_names_the_commit() {
    let help = Cli::command().render_help().to_string();
    assert!(
        help.starts_with("chimectl, the command-line client"),
        "{help}"
    );
    assert!(!help.contains("daemon (chimed) and CLI"), "{help}");
    assert_eq!(
        Cli::command().render_version().trim(),
        format!(
            "chimectl {} (commit {})",
            env!("CARGO_PKG_VERSION"),
            crate::GIT_COMMIT
        )
    );
}

#[test]
fn common_synonyms_are_aliases() {
    let job = |argv: &[&str]| match parse(argv).command {
        Command::Job(command) => command,
        other => panic!("{argv:?} parsed as {other:?}"),
    };
    assert!(matches!(
        job(&["job", "delete", "x"]),
        JobCommand::Rm { .. }
    ));
    assert!(matches!(
        job(&["job", "remove", "x"]),
        JobCommand::Rm { .. }
    ));
    assert!(matches!(job(&["job", "list"]), JobCommand::Ls { .. }));
    assert!(matches!(job(&["jobs", "ls"]), JobCommand::Ls { .. }));
    assert!(matches!(
        job(&["job", "ls", "--group", "g", "--mode", "zone", "--paused", "--search", "Close",
              "--sort", "-updated_at"]),
        JobCommand::Ls { group: Some(g), mode: Some(m), paused: Some(p), search: Some(q),
                         sort: Some(s), .. }
            if g == "g" && m == "zone" && p == "true" && q == "Close" && s == "-updated_at"
    ));
    assert!(matches!(
        job(&["job", "ls", "--paused", "false"]),
        JobCommand::Ls { paused: Some(p), .. } if p == "false"
    ));
    assert!(matches!(job(&["job", "show", "x"]), JobCommand::Get { .. }));
    assert!(matches!(
        job(&["job", "describe", "x"]),
        JobCommand::Get { .. }
    ));
    assert!(matches!(
        job(&["job", "update", "x", "--every", "1m"]),
        JobCommand::Edit(_)
    ));
    assert!(matches!(
        job(&[
            "job", "create", "--name", "n", "--every", "1m", "--group", "g"
        ]),
        JobCommand::Add(_)
    ));
    assert!(matches!(
        job(&["job", "fire", "x"]),
        JobCommand::Trigger { .. }
    ));
    assert!(matches!(
        parse(&["run", "show", "r"]).command,
        Command::Run(RunCommand::Get { .. })
    ));
    assert!(matches!(
        parse(&["dlq", "list"]).command,
        Command::Dlq(DlqCommand::Ls)
    ));
    assert!(matches!(
        parse(&["dlq", "retry", "q"]).command,
        Command::Dlq(DlqCommand::Replay { .. })
    ));
    // The main synonym shows in help, so a user finds it there too.
    let help = Cli::command()
        .find_subcommand_mut("job")
        .unwrap()
        .render_help()
        .to_string();
    assert!(help.contains("[alias: delete]"), "{help}");
}

#[tokio::test]
async fn completions_are_printed_for_bash_zsh_and_fish() {
    for shell in ["bash", "zsh", "fish"] {
        // A bad server address does not matter: completions never talk to chimed.
        let script = run(&["--server", "nonsense", "completions", shell])
            .await
            .unwrap();
        assert!(
            script.contains("chimectl") && script.contains("trigger") && script.contains("replay"),
            "{shell}: {script}"
        );
    }
    assert!(run(&["completions", "tcsh"]).await.is_err());
}

#[tokio::test]
async fn a_server_address_without_a_scheme_is_explained() {
    let error = run(&["--server", "127.0.0.1:8080", "job", "ls"])
        .await
        .unwrap_err();
    assert!(
        error.contains("has no scheme: write http://127.0.0.1:8080"),
        "{error}"
    );
}

#[tokio::test]
async fn nothing_listening_says_what_to_do() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let server = format!("http://127.0.0.1:{port}");
    let error = run(&["--server", &server, "job", "ls"]).await.unwrap_err();
    assert_eq!(
        error,
        format!("connection refused: is chimed running at {server}? set --server or CHIME_SERVER")
    );
}

#[tokio::test]
async fn a_server_that_is_not_chimed_is_named_as_such() {
    // Another HTTP server: HTML for every path.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = format!("http://{}", listener.local_addr().unwrap());
    let app = axum::Router::new().fallback(|| async {
        (
            axum::http::StatusCode::NOT_FOUND,
            axum::response::Html("<html>not here</html>"),
        )
    });
    let serving = tokio::spawn(async move { axum::serve(listener, app).await });
    let error = run(&["--server", &server, "job", "ls"]).await.unwrap_err();
    assert!(
        error.contains("which is not chimed's API") && error.contains("HTTP 404"),
        "{error}"
    );

    // A server that answers 200 with something else.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let other = format!("http://{}", listener.local_addr().unwrap());
    let app = axum::Router::new().fallback(|| async { "hello" });
    let also = tokio::spawn(async move { axum::serve(listener, app).await });
    let error = run(&["--server", &other, "cluster"]).await.unwrap_err();
    assert!(error.contains("which is not chimed's API"), "{error}");
    serving.abort();
    also.abort();
}

/// Runs chimectl `argv` with `stdin` as its standard input: its error text.
async fn run_reading(argv: &[&str], stdin: &str) -> String {
    let cli = Cli::try_parse_from(["chimectl"].iter().chain(argv)).expect("arguments parse");
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let mut input = std::io::Cursor::new(stdin.as_bytes().to_vec());
    let mut terminal = Terminal {
        err: &mut err,
        input: &mut input,
    };
    let result = run_with(cli, &mut out, &mut terminal).await;
    format!("{:#}", result.expect_err("no server answers"))
}

#[tokio::test]
async fn a_file_named_dash_is_read_from_the_terminals_input() {
    // Standard input is read through the terminal (which holds stdin's lock), so these
    // answer instead of waiting for the lock; nothing listens on port 1.
    let server = ["--server", "http://127.0.0.1:1"];
    let argv = |rest: &[&'static str]| [&server[..], rest].concat();
    let error = run_reading(&argv(&["job", "add", "-f", "-"]), "{not json").await;
    assert!(error.contains("- is not JSON"), "{error}");
    let error = run_reading(&argv(&["job", "import", "-"]), "\n\n").await;
    assert!(error.contains("- holds no jobs"), "{error}");
    let error = run_reading(&argv(&["job", "import", "-"]), "{\"name\": \"a\"}\n{oops\n").await;
    assert!(error.contains("line 2 is not JSON"), "{error}");
    let job = r#"{"name": "a", "schedule": {"every": "1h"}, "target": {"group": "g"}}"#;
    let error = run_reading(&argv(&["job", "import", "-"]), job).await;
    assert!(error.contains("connection refused"), "{error}");
}
