//! Hooks: what a pipeline file asks to be told when a run ends.
//!
//! ```toml
//! [hooks]
//! on_success = ["sh", "-c", "mail -s done me@example.org"]   # a command: the summary on its stdin
//! on_failure = { url = "https://hooks.example.org/sluice" }  # or a URL: the summary POSTed as JSON
//! on_check_failed = ["notify-send", "a check failed"]       # when any check (warn or error) failed
//! ```
//!
//! The summary is the run's report as `sluice run --json` prints it, with
//! `event` (`success`, `failure` or `check_failed`) added; a run that stopped on an error
//! before it could report sends `pipeline`, `event` and `error`. A hook is
//! told, never asked: one that fails, times out or cannot be reached is
//! logged and the run's own outcome stands. Commands run in the pipeline
//! file's folder and are killed after [`HOOK_TIME_LIMIT`].

use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::process::{ToolLimits, describe_exit, run_tool_reading, tail};

/// How long a hook may take.
pub const HOOK_TIME_LIMIT: Duration = Duration::from_secs(60);

/// One hook: a command, or a URL to POST to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Hook {
    /// Program and arguments; the summary arrives on stdin.
    Command(Vec<String>),
    /// An `http://` or `https://` URL; the summary is the request's body.
    Post {
        /// Where to POST.
        url: String,
    },
}

/// The hooks of a pipeline (`[hooks]`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hooks {
    /// Told when every step completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_success: Option<Hook>,
    /// Told when a step failed, the run was cancelled or it stopped on an
    /// error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_failure: Option<Hook>,
    /// Told when a check failed (of either severity; before `on_failure`,
    /// which an `error` check's failure also fires).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_check_failed: Option<Hook>,
}

impl Hooks {
    /// What is wrong with these hooks, if anything (for validation).
    pub fn problem(&self) -> Option<String> {
        let named = [
            ("on_success", &self.on_success),
            ("on_failure", &self.on_failure),
            ("on_check_failed", &self.on_check_failed),
        ];
        named.into_iter().find_map(|(name, hook)| match hook.as_ref()? {
            Hook::Command(argv) if argv.first().is_none_or(|p| p.trim().is_empty()) => {
                Some(format!("hooks.{name}: the command is empty"))
            }
            Hook::Post { url } if !(url.starts_with("http://") || url.starts_with("https://")) => {
                Some(format!("hooks.{name}: `{url}` is not an http:// or https:// URL"))
            }
            _ => None,
        })
    }

    /// Tell the hook of `event` (`"success"`, `"failure"` or
    /// `"check_failed"`), if there is one; a hook that fails is logged,
    /// never returned.
    pub(crate) async fn fire(&self, event: &str, summary: serde_json::Value, folder: &Path) {
        let hook = match event {
            "success" => &self.on_success,
            "check_failed" => &self.on_check_failed,
            _ => &self.on_failure,
        };
        if let Some(hook) = hook {
            hook.tell(event, summary, folder).await;
        }
    }
}

/// Ingestion's hooks (`[hooks]` of `lakehouse.toml`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IngestHooks {
    /// Told of each file dead-lettered after its failed attempts: its
    /// table, file, attempts and reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_dead_letter: Option<Hook>,
}

impl IngestHooks {
    /// What is wrong with these hooks, if anything (for validation).
    pub fn problem(&self) -> Option<String> {
        Hooks { on_failure: self.on_dead_letter.clone(), ..Hooks::default() }
            .problem()
            .map(|p| p.replace("hooks.on_failure", "hooks.on_dead_letter"))
    }
}

impl Hook {
    /// Tell this hook of `event` with `summary` (`event` added to it); a
    /// hook that fails is logged, never returned.
    pub(crate) async fn tell(&self, event: &str, summary: serde_json::Value, folder: &Path) {
        let mut body = summary;
        if let Some(object) = body.as_object_mut() {
            object.insert("event".into(), event.into());
        }
        let body = body.to_string();
        let told = match self {
            Hook::Command(argv) => run(argv, &body, folder).await,
            Hook::Post { url } => post(url, body).await,
        };
        match told {
            Ok(()) => tracing::info!(event, "hook on_{event} told"),
            Err(why) => {
                tracing::warn!(event, "hook on_{event} failed (what it tells of stands): {why}")
            }
        }
    }
}

/// Bytes of a failing hook's output kept for the log.
const OUTPUT_TAIL: usize = 500;

/// Run a command hook as a unit's tool runs (its own process group, killed
/// with whatever it started at the time limit), the summary on its stdin.
async fn run(argv: &[String], body: &str, folder: &Path) -> Result<(), String> {
    let (program, args) = argv.split_first().ok_or("the command is empty")?;
    // The summary goes through a file (removed once open), so a hook that
    // never reads its stdin cannot block on a full pipe.
    let input = summary_file(body).map_err(|e| format!("a file for the summary: {e}"))?;
    let mut command = std::process::Command::new(program);
    command.args(args).current_dir(folder);
    let ran = tokio::task::spawn_blocking(move || {
        let limits = ToolLimits { time: Some(HOOK_TIME_LIMIT), memory: None };
        run_tool_reading(command, input.into(), limits, OUTPUT_TAIL)
    })
    .await
    .map_err(|e| format!("running `{program}`: {e}"))?
    .map_err(|e| e.to_string())?;
    let output = tail(ran.output.trim(), OUTPUT_TAIL);
    match ran.status {
        Some(status) if status.success() => Ok(()),
        Some(status) => Err(format!("`{program}` exited with {}: {output}", describe_exit(status))),
        None => Err(format!("`{program}` took longer than {}s", HOOK_TIME_LIMIT.as_secs())),
    }
}

/// A file holding `body`, open for reading from its start, its name
/// already removed.
fn summary_file(body: &str) -> std::io::Result<std::fs::File> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let path =
        std::env::temp_dir().join(format!("sluice-hook-{}-{nanos}.json", std::process::id()));
    std::fs::write(&path, body)?;
    let file = std::fs::File::open(&path);
    let _ = std::fs::remove_file(&path);
    file
}

async fn post(url: &str, body: String) -> Result<(), String> {
    let client = reqwest::Client::builder()
        .timeout(HOOK_TIME_LIMIT)
        .build()
        .map_err(|e| format!("an HTTP client: {e}"))?;
    let response = client
        .post(url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body)
        .send()
        .await
        .map_err(|e| format!("POST {url}: {e}"))?;
    match response.status() {
        status if status.is_success() => Ok(()),
        status => Err(format!("POST {url}: HTTP {status}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hook_is_a_command_or_a_url_and_bad_ones_are_named() {
        let hooks: Hooks = toml::from_str(
            "on_success = [\"sh\", \"-c\", \"cat\"]\non_failure = { url = \"http://127.0.0.1:9/h\" }\n",
        )
        .unwrap();
        assert_eq!(
            hooks.on_success,
            Some(Hook::Command(vec!["sh".into(), "-c".into(), "cat".into()]))
        );
        assert_eq!(hooks.on_failure, Some(Hook::Post { url: "http://127.0.0.1:9/h".into() }));
        assert_eq!(hooks.problem(), None);
        let empty = Hooks { on_success: Some(Hook::Command(Vec::new())), ..Hooks::default() };
        assert!(empty.problem().unwrap().contains("hooks.on_success"));
        let ftp =
            Hooks { on_failure: Some(Hook::Post { url: "ftp://x".into() }), ..Hooks::default() };
        assert!(ftp.problem().unwrap().contains("not an http"));
    }

    #[tokio::test]
    async fn a_command_hook_reads_the_summary_and_a_failing_one_is_only_logged() {
        let dir = tempfile::tempdir().unwrap();
        let hooks = Hooks {
            on_success: Some(Hook::Command(vec![
                "sh".into(),
                "-c".into(),
                "cat > told.json".into(),
            ])),
            on_failure: Some(Hook::Command(vec!["sh".into(), "-c".into(), "exit 4".into()])),
            on_check_failed: None,
        };
        hooks.fire("success", serde_json::json!({"pipeline": "p"}), dir.path()).await;
        let told: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.path().join("told.json")).unwrap())
                .unwrap();
        assert_eq!(told, serde_json::json!({"pipeline": "p", "event": "success"}));
        // Returns (and logs) whatever the command does.
        hooks.fire("failure", serde_json::json!({}), dir.path()).await;
        assert_eq!(
            run(&["sh".into(), "-c".into(), "exit 4".into()], "", dir.path()).await.unwrap_err(),
            "`sh` exited with exit status 4: "
        );
    }
}
