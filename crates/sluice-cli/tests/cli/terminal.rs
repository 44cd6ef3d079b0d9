//! sluice on a terminal: run in a pseudo-terminal (util-linux `script`),
//! where progress bars are drawn, a warning is printed on a line of its
//! own above the bars, never inside one.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::Lake;

/// Ten units that each wait, the first leaving a marker when it starts.
fn slow_pipeline(marker: &Path) -> String {
    format!(
        r#"name = "slow"
[[step]]
name = "gen"
operation = "generate_data"
params = {{ tables = 10, rows = 2 }}

[[step]]
name = "work"
operation = "command"
command = ["sh", "-c", 'touch {}; sleep 0.3; cp inputs/t/* outputs/t/']
inputs = {{ t = "gen.data" }}
outputs = {{ t = "data" }}
"#,
        marker.display()
    )
}

/// `text` with ANSI control sequences (`ESC [ … letter`) removed.
fn without_escapes(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[test]
fn a_warning_is_printed_above_the_progress_bars_never_inside_one() {
    let lake = Lake::new();
    lake.ok(&["init"]);
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("started");
    let pipeline = dir.path().join("slow.toml");
    std::fs::write(&pipeline, slow_pipeline(&marker)).unwrap();
    let line = format!(
        "{} --lake {} --color never run {} --workers 2",
        env!("CARGO_BIN_EXE_sluice"),
        lake.root.display(),
        pipeline.display()
    );
    let script = Command::new("script")
        .args(["-q", "-e", "-c", &line, "/dev/null"])
        .env("TERM", "xterm")
        .env_remove("SLUICE_LAKE")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("util-linux `script` runs sluice in a pseudo-terminal");
    // Once the units run, hold the writer lock as another committer would,
    // so the step's commit waits for it and warns while its bar is drawn.
    let deadline = Instant::now() + Duration::from_secs(120);
    while !marker.exists() {
        assert!(Instant::now() < deadline, "the units never started");
        std::thread::sleep(Duration::from_millis(10));
    }
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(lake.root.join("_staging/.commit.lock"))
        .unwrap();
    lock.lock().unwrap();
    std::thread::sleep(Duration::from_secs(4));
    lock.unlock().unwrap();
    let out = script.wait_with_output().unwrap();
    let screen = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{screen}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(screen.contains("[===="), "no progress bar was drawn: {screen:?}");

    let warning = "warning: waiting for the lake's writer lock";
    let at = screen.find(warning).unwrap_or_else(|| panic!("no warning: {screen:?}"));
    // What the terminal shows before the warning on its line: the line
    // was cleared (a bar's text would stand before it otherwise).
    let line_start = screen[..at].rfind('\n').map_or(0, |i| i + 1);
    let before = without_escapes(&screen[line_start..at]);
    let shown_before = before.rsplit('\r').next().unwrap_or_default();
    assert!(shown_before.trim().is_empty(), "the warning follows {shown_before:?} on its line");
    // And the warning ends its own line before a bar is drawn again.
    let rest = &screen[at..];
    let end = rest.find('\n').unwrap_or(rest.len());
    let own_line = without_escapes(&rest[..end]);
    assert!(
        own_line.trim_end().ends_with("--wait <seconds> to give up after a while"),
        "the warning's line holds more: {own_line:?}"
    );
    assert_eq!(screen.matches(warning).count(), 1, "{screen:?}");
}
