//! Every shell block of README.md and docs/*.md runs as written.
//!
//! A file's ```` ```sh ```` blocks run in order, in one fresh folder, with
//! the built `sluice` first on PATH; what one block exports (`SLUICE_LAKE`)
//! and where it `cd`s carry over to the next, as in a reader's shell. A
//! block fails the test on any non-zero exit (`set -euo pipefail`), naming
//! its file and line. Two comments steer it, each on the line before a
//! block:
//!
//! - `<!-- docs-test: file NAME -->` writes the block below it (a pipeline,
//!   a config) to NAME before the file's shell blocks run;
//! - `<!-- docs-test: skip: REASON -->` skips a block that cannot run here
//!   (a release build, the test suite itself); the reason is printed.
//!
//! Blocks marked `text` are synopses (placeholders, alternatives) and are
//! not shell.

use std::path::{Path, PathBuf};
use std::process::Command;

const FILE_MARK: &str = "<!-- docs-test: file ";
const SKIP_MARK: &str = "<!-- docs-test: skip: ";

/// One fenced block of a Markdown file.
#[derive(Debug)]
struct Block {
    /// Line of its opening fence (1-based).
    line: usize,
    /// Its info string (`sh`, `toml`, …).
    lang: String,
    text: String,
    /// The `docs-test` comment right above it, if any.
    mark: Option<String>,
}

fn blocks(markdown: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let lines: Vec<&str> = markdown.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let Some(lang) = lines[i].strip_prefix("```") else {
            i += 1;
            continue;
        };
        let mark = lines[..i]
            .iter()
            .rev()
            .find(|l| !l.trim().is_empty())
            .filter(|l| l.starts_with("<!-- docs-test:"))
            .map(|l| l.to_string());
        let start = i;
        i += 1;
        let mut text = String::new();
        while i < lines.len() && !lines[i].starts_with("```") {
            text.push_str(lines[i]);
            text.push('\n');
            i += 1;
        }
        out.push(Block { line: start + 1, lang: lang.trim().to_owned(), text, mark });
        i += 1;
    }
    out
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

fn documents() -> Vec<PathBuf> {
    let root = workspace();
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    docs.insert(0, root.join("README.md"));
    docs
}

/// Run one file's shell blocks; returns how many ran.
fn run_document(path: &Path) -> usize {
    let name = path.strip_prefix(workspace()).unwrap().display().to_string();
    let markdown = std::fs::read_to_string(path).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join(".docs-test-state");
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let all = blocks(&markdown);
    for block in &all {
        if let Some(file) = block.mark.as_deref().and_then(|m| m.strip_prefix(FILE_MARK)) {
            let file = file.trim_end_matches("-->").trim();
            std::fs::write(work.join(file), &block.text).unwrap();
        }
    }
    let binary = Path::new(env!("CARGO_BIN_EXE_sluice")).parent().unwrap().to_path_buf();
    let path_var = format!("{}:{}", binary.display(), std::env::var("PATH").unwrap_or_default());
    let mut ran = 0;
    for block in all.iter().filter(|b| matches!(b.lang.as_str(), "sh" | "bash" | "shell")) {
        if let Some(reason) = block.mark.as_deref().and_then(|m| m.strip_prefix(SKIP_MARK)) {
            let reason = reason.trim_end_matches("-->").trim();
            assert!(!reason.is_empty(), "{name}:{}: a skipped block says why", block.line);
            eprintln!("docs test: skipped {name}:{}: {reason}", block.line);
            continue;
        }
        assert!(
            block.mark.is_none(),
            "{name}:{}: unknown docs-test comment {:?}",
            block.line,
            block.mark
        );
        // The state the previous block left (exports, folder), then the
        // block, then the state it leaves.
        let script = format!(
            "cd {work:?}\n[ -f {state:?} ] && . {state:?}\nset -euo pipefail\n{}\n\
             {{ export -p; printf 'cd %q\\n' \"$PWD\"; }} > {state:?}\n",
            block.text,
            work = work,
            state = state,
        );
        let out = Command::new("bash")
            .arg("-c")
            .arg(&script)
            .env("PATH", &path_var)
            .env_remove("SLUICE_LAKE")
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{name}:{}: the shell block fails as written ({}):\n--- block\n{}--- stdout (end)\n{}\n--- stderr\n{}",
            block.line,
            out.status,
            block.text,
            tail(&String::from_utf8_lossy(&out.stdout), 3000),
            tail(&String::from_utf8_lossy(&out.stderr), 3000),
        );
        ran += 1;
    }
    ran
}

fn tail(text: &str, n: usize) -> &str {
    let mut start = text.len().saturating_sub(n);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

#[test]
fn every_shell_block_in_the_readme_and_the_docs_runs_as_written() {
    let mut ran = Vec::new();
    for doc in documents() {
        ran.push((doc.file_name().unwrap().to_string_lossy().into_owned(), run_document(&doc)));
    }
    eprintln!("docs test: shell blocks run per file: {ran:?}");
    let count = |file: &str| ran.iter().find(|(f, _)| f == file).map_or(0, |(_, n)| *n);
    // The files whose examples a reader follows first have some to run.
    assert!(count("README.md") >= 4, "{ran:?}");
    assert!(count("pipelines.md") >= 1 && count("ingestion.md") >= 1, "{ran:?}");
}

#[test]
fn blocks_are_found_with_their_marks() {
    let text =
        "intro\n\n<!-- docs-test: skip: too slow -->\n```sh\nmake x\n```\n\n```toml\na = 1\n```\n";
    let found = blocks(text);
    assert_eq!(found.len(), 2);
    assert_eq!(found[0].lang, "sh");
    assert_eq!(found[0].line, 4);
    assert_eq!(found[0].text, "make x\n");
    assert_eq!(found[0].mark.as_deref(), Some("<!-- docs-test: skip: too slow -->"));
    assert_eq!((found[1].lang.as_str(), found[1].mark.as_deref()), ("toml", None));
}
