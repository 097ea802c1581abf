//! A headless Chromium driven over WebDriver, for the console's end-to-end tests.
//!
//! [`Browser::start`] runs Debian's `chromedriver` (package `chromium-driver`, with
//! `chromium`; `deploy/local/test.sh` installs both) on a free port and opens a session
//! in headless Chromium. The client is the W3C WebDriver protocol over `reqwest`: a few
//! dozen lines, no extra crate. Every wait polls a condition with a deadline and says
//! what it waited for when it gives up; nothing sleeps a fixed time.
//!
//! The browser's console is recorded (`goog:loggingPrefs`), so a test can assert that a
//! page logged no error and no request failed ([`Browser::console_errors`]).
//!
//! Env: `CHIME_CHROMEDRIVER` (default `chromedriver`), `CHIME_CHROMIUM` (default
//! `/usr/bin/chromium`).

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::{Duration, Instant},
};

use base64::Engine;
use serde_json::{Value, json};
use tokio::process::{Child, Command};

use crate::chimed::free_port;

/// The W3C key of an element reference.
const ELEMENT_KEY: &str = "element-6066-11e4-a52e-4f735466cecf";
/// How long a wait lasts unless told otherwise.
pub const WAIT: Duration = Duration::from_secs(30);

/// A headless browser session and the chromedriver serving it (killed on drop).
pub struct Browser {
    http: reqwest::Client,
    session: String,
    driver: String,
    _chromedriver: Child,
    /// Where [`Browser::screenshot`] writes.
    shots: PathBuf,
}

/// An element of the page.
#[derive(Debug, Clone)]
pub struct Element {
    id: String,
}

/// One browser console line.
#[derive(Debug, Clone)]
pub struct ConsoleLine {
    /// `SEVERE`, `WARNING`, `INFO`...
    pub level: String,
    /// The text (a failed request reads "Failed to load resource: ...").
    pub message: String,
}

impl Browser {
    /// Starts chromedriver and a headless Chromium with a laptop-sized window.
    /// Screenshots go to `target/console-screenshots/`.
    pub async fn start() -> Self {
        let chromedriver =
            std::env::var("CHIME_CHROMEDRIVER").unwrap_or_else(|_| "chromedriver".into());
        let chromium =
            std::env::var("CHIME_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
        assert!(
            Path::new(&chromium).exists(),
            "{chromium} is missing: the console tests need Debian's chromium and \
             chromium-driver (deploy/local/test.sh installs them)"
        );
        let port = free_port();
        let child = Command::new(&chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot run {chromedriver} ({e}): install chromium-driver (deploy/local/test.sh does)")
            });
        let http = reqwest::Client::new();
        let driver = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + WAIT;
        loop {
            let ready = http.get(format!("{driver}/status")).send().await;
            if let Ok(answer) = ready
                && let Ok(body) = answer.json::<Value>().await
                && body["value"]["ready"] == json!(true)
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "chromedriver did not become ready"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let profile = crate::binaries::scratch_dir("chromium-profile");
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:loggingPrefs": {"browser": "ALL"},
            "goog:chromeOptions": {
                "binary": chromium,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1280,900",
                         "--no-first-run", "--disable-extensions",
                         format!("--user-data-dir={}", profile.display())],
            },
        }}});
        let answer: Value = http
            .post(format!("{driver}/session"))
            .json(&capabilities)
            .send()
            .await
            .expect("chromedriver answers")
            .json()
            .await
            .expect("a JSON session");
        let session = answer["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no browser session: {answer}"))
            .to_string();
        let shots = crate::binaries::workspace_root().join("target/console-screenshots");
        std::fs::create_dir_all(&shots).expect("screenshot directory");
        Self {
            http,
            session,
            driver,
            _chromedriver: child,
            shots,
        }
    }

    async fn command(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let url = format!("{}/session/{}{path}", self.driver, self.session);
        let mut request = self.http.request(method, url);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let answer: Value = request
            .send()
            .await
            .expect("chromedriver answers")
            .json()
            .await
            .expect("JSON from chromedriver");
        answer["value"].clone()
    }

    async fn try_command(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, String> {
        let value = self.command(method, path, body).await;
        match value.get("error") {
            Some(error) => Err(format!("{error}: {}", value["message"])),
            None => Ok(value),
        }
    }

    /// Opens `url` (and waits for the document to load).
    pub async fn open(&self, url: &str) {
        self.try_command(reqwest::Method::POST, "/url", Some(json!({"url": url})))
            .await
            .unwrap_or_else(|e| panic!("cannot open {url}: {e}"));
    }

    /// Resizes the window (a phone is 390 x 844).
    pub async fn resize(&self, width: u32, height: u32) {
        self.try_command(
            reqwest::Method::POST,
            "/window/rect",
            Some(json!({"width": width, "height": height})),
        )
        .await
        .expect("window resized");
    }

    /// Runs `script` (a function body; `arguments[i]` are `args`) and returns its value.
    pub async fn eval(&self, script: &str, args: Vec<Value>) -> Value {
        self.try_command(
            reqwest::Method::POST,
            "/execute/sync",
            Some(json!({"script": script, "args": args})),
        )
        .await
        .unwrap_or_else(|e| panic!("script failed: {e}\n{script}"))
    }

    /// Every element matching `css` now (maybe none).
    pub async fn all(&self, css: &str) -> Vec<Element> {
        let value = self
            .try_command(
                reqwest::Method::POST,
                "/elements",
                Some(json!({"using": "css selector", "value": css})),
            )
            .await
            .unwrap_or_default();
        value
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .filter_map(|item| item[ELEMENT_KEY].as_str())
                    .map(|id| Element { id: id.to_string() })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Waits for an element matching `css` that is displayed, and returns it.
    pub async fn find(&self, css: &str) -> Element {
        self.find_within(css, WAIT).await
    }

    /// [`Browser::find`] with its own deadline.
    pub async fn find_within(&self, css: &str, timeout: Duration) -> Element {
        let deadline = Instant::now() + timeout;
        loop {
            for element in self.all(css).await {
                if self.displayed(&element).await {
                    return element;
                }
            }
            if Instant::now() > deadline {
                let url = self.url().await;
                panic!("no visible element matches {css:?} after {timeout:?} on {url}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until no element matching `css` is displayed.
    pub async fn wait_gone(&self, css: &str) {
        let deadline = Instant::now() + WAIT;
        loop {
            let mut shown = false;
            for element in self.all(css).await {
                shown |= self.displayed(&element).await;
            }
            if !shown {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{css:?} still shown after {WAIT:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until the first visible `css` element's text satisfies `check`; returns it.
    pub async fn wait_text(&self, css: &str, what: &str, check: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + WAIT;
        let mut last = String::new();
        loop {
            for element in self.all(css).await {
                if self.displayed(&element).await {
                    last = self.text(&element).await;
                    if check(&last) {
                        return last;
                    }
                }
            }
            assert!(
                Instant::now() < deadline,
                "{css:?} never showed {what} (last text {last:?})"
            );
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
    }

    /// Waits for the current page to have rendered (`[data-page=NAME][data-ready]`).
    pub async fn wait_page(&self, name: &str) {
        self.find(&format!("[data-page=\"{name}\"][data-ready=\"true\"]"))
            .await;
    }

    async fn displayed(&self, element: &Element) -> bool {
        self.try_command(
            reqwest::Method::GET,
            &format!("/element/{}/displayed", element.id),
            None,
        )
        .await
        .ok()
        .and_then(|v| v.as_bool())
        .unwrap_or(false)
    }

    /// The element's visible text.
    pub async fn text(&self, element: &Element) -> String {
        self.try_command(
            reqwest::Method::GET,
            &format!("/element/{}/text", element.id),
            None,
        )
        .await
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
    }

    /// An attribute of the element, or None.
    pub async fn attribute(&self, element: &Element, name: &str) -> Option<String> {
        self.try_command(
            reqwest::Method::GET,
            &format!("/element/{}/attribute/{name}", element.id),
            None,
        )
        .await
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
    }

    /// Clicks the first visible `css` element (waiting for it).
    pub async fn click(&self, css: &str) {
        let deadline = Instant::now() + WAIT;
        loop {
            let element = self.find(css).await;
            match self
                .try_command(
                    reqwest::Method::POST,
                    &format!("/element/{}/click", element.id),
                    Some(json!({})),
                )
                .await
            {
                Ok(_) => return,
                // Re-rendered under us, or covered for a moment: find it again.
                Err(error) if Instant::now() < deadline => {
                    tracing::debug!(%error, css, "click retried");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(error) => panic!("cannot click {css:?}: {error}"),
            }
        }
    }

    /// Replaces the text of the `css` input with `text`.
    pub async fn fill(&self, css: &str, text: &str) {
        let element = self.find(css).await;
        self.try_command(
            reqwest::Method::POST,
            &format!("/element/{}/clear", element.id),
            Some(json!({})),
        )
        .await
        .unwrap_or_else(|e| panic!("cannot clear {css:?}: {e}"));
        self.try_command(
            reqwest::Method::POST,
            &format!("/element/{}/value", element.id),
            Some(json!({"text": text})),
        )
        .await
        .unwrap_or_else(|e| panic!("cannot type into {css:?}: {e}"));
    }

    /// Picks the option with `value` of the `css` select (and fires its change event).
    pub async fn select(&self, css: &str, value: &str) {
        self.find(css).await;
        let found = self
            .eval(
                "const s = document.querySelector(arguments[0]); \
                 if (![...s.options].some(o => o.value === arguments[1])) return false; \
                 s.value = arguments[1]; \
                 s.dispatchEvent(new Event('input', {bubbles: true})); \
                 s.dispatchEvent(new Event('change', {bubbles: true})); return true;",
                vec![json!(css), json!(value)],
            )
            .await;
        assert_eq!(found, json!(true), "{css:?} has no option {value:?}");
    }

    /// The page's address.
    pub async fn url(&self) -> String {
        self.command(reqwest::Method::GET, "/url", None)
            .await
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// Saves a PNG of the window as `target/console-screenshots/<name>.png`; returns its path.
    pub async fn screenshot(&self, name: &str) -> PathBuf {
        let value = self
            .try_command(reqwest::Method::GET, "/screenshot", None)
            .await
            .expect("a screenshot");
        let png = base64::engine::general_purpose::STANDARD
            .decode(value.as_str().unwrap_or_default())
            .expect("base64 PNG");
        assert!(png.starts_with(b"\x89PNG"), "a PNG");
        let path = self.shots.join(format!("{name}.png"));
        std::fs::write(&path, png).expect("screenshot written");
        path
    }

    /// The browser console's lines since the last call (chromedriver's log).
    pub async fn console(&self) -> Vec<ConsoleLine> {
        let value = self
            .try_command(
                reqwest::Method::POST,
                "/se/log",
                Some(json!({"type": "browser"})),
            )
            .await
            .expect("the browser log");
        value
            .as_array()
            .map(|lines| {
                lines
                    .iter()
                    .map(|line| ConsoleLine {
                        level: line["level"].as_str().unwrap_or_default().to_string(),
                        message: line["message"].as_str().unwrap_or_default().to_string(),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The console's errors since the last read: script errors, `console.error` and
    /// failed requests (Chromium logs each as SEVERE).
    pub async fn console_errors(&self) -> Vec<String> {
        self.console()
            .await
            .into_iter()
            .filter(|line| line.level == "SEVERE")
            .map(|line| line.message)
            .collect()
    }

    /// Opens a new tab and switches to it; returns (old handle, new handle).
    pub async fn new_tab(&self) -> (String, String) {
        let old = self
            .command(reqwest::Method::GET, "/window", None)
            .await
            .as_str()
            .unwrap_or_default()
            .to_string();
        let created = self
            .try_command(
                reqwest::Method::POST,
                "/window/new",
                Some(json!({"type": "tab"})),
            )
            .await
            .expect("a new tab");
        let handle = created["handle"].as_str().unwrap_or_default().to_string();
        self.switch_to(&handle).await;
        (old, handle)
    }

    /// Makes the tab `handle` the one commands go to.
    pub async fn switch_to(&self, handle: &str) {
        self.try_command(
            reqwest::Method::POST,
            "/window",
            Some(json!({"handle": handle})),
        )
        .await
        .expect("tab switched");
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Close the session so Chromium exits; chromedriver is killed with its handle.
        let url = format!("{}/session/{}", self.driver, self.session);
        let http = self.http.clone();
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let _ = std::thread::spawn(move || {
                handle.block_on(async move {
                    let _ =
                        tokio::time::timeout(Duration::from_secs(5), http.delete(url).send()).await;
                })
            })
            .join();
        }
    }
}
