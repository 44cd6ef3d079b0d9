//! `sluice lineage` and `sluice graph` end to end, and the HTML page in a
//! real headless browser (Debian's chromium, which `.ci/run` installs).

use std::path::{Path, PathBuf};
use std::process::Command;

use super::Lake;

const PIPELINE: &str = r#"name = "shown"
[[step]]
name = "gen"
operation = "generate_data"
params = { tables = 2, rows = 3 }

[[step]]
name = "hostile"
operation = "command"
command = ["sh", "-c", 'echo "{\"n\": 1}" > "outputs/m/<script>alert(1)<script>.json"; echo "{\"n\": 2}" > "outputs/m/<b onmouseover=x>.json"']
inputs = { t = "gen.data" }
outputs = { m = "metric" }
"#;

pub(crate) fn chromium() -> Option<PathBuf> {
    let found = ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists());
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run the browser check: install Debian's chromium (as .ci/run does)"
        );
        eprintln!("chromium is not installed here; skipping the browser check");
    }
    found
}

/// Load `page` (with a URL fragment) in headless chromium; returns the DOM
/// after its script ran, and what the browser logged.
fn load(browser: &Path, page: &Path, fragment: &str) -> (String, String) {
    load_url(browser, &format!("file://{}#{fragment}", page.display()))
}

/// Load `url` in headless chromium: the DOM after its script ran, and
/// what the browser logged.
pub(crate) fn load_url(browser: &Path, url: &str) -> (String, String) {
    let profile = tempfile::tempdir().unwrap();
    let out = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--enable-logging=stderr",
            "--v=0",
            "--virtual-time-budget=3000",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("--dump-dom")
        .arg(url)
        .output()
        .unwrap();
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn lineage_and_graph_in_every_format_and_the_page_in_a_browser() {
    let lake = Lake::new();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("p.toml");
    std::fs::write(&file, PIPELINE).unwrap();
    lake.ok(&["run", file.to_str().unwrap()]);
    let table = lake
        .ok(&[
            "sql",
            "--format",
            "csv",
            "SELECT artifact_id FROM data ORDER BY artifact_id LIMIT 1",
        ])
        .lines()
        .nth(1)
        .unwrap()
        .to_owned();
    let hostile = lake
        .ok(&[
            "sql",
            "--format",
            "csv",
            "SELECT artifact_id FROM metrics WHERE original_name LIKE '<script>%' LIMIT 1",
        ])
        .lines()
        .nth(1)
        .unwrap()
        .to_owned();

    let text = lake.ok(&["lineage", &table, "--down"]);
    assert!(text.contains(&hostile) && text.contains("command in step 2 (hostile)"), "{text}");
    let json: serde_json::Value =
        serde_json::from_str(&lake.ok(&["lineage", &table, "--format", "json"])).unwrap();
    assert_eq!(json["edges"].as_array().unwrap().len(), 2, "{json:#}");
    assert!(
        lake.ok(&["lineage", &hostile, "--up", "--format", "dot"])
            .contains(&format!("\"{table}\" -> \"{hostile}\""))
    );
    assert!(lake.ok(&["lineage", &table, "--format", "mermaid"]).starts_with("flowchart LR"));
    let graph = lake.ok(&["graph"]);
    assert!(graph.contains("gen.data ─2─▶ hostile"), "{graph}");
    assert!(lake.ok(&["graph", "--format", "dot"]).contains("\"gen\" -> \"hostile\""));

    let page = dir.path().join("lineage.html");
    lake.ok(&["lineage", &table, "--format", "html", "-o", page.to_str().unwrap()]);
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(!html.contains("<script>alert(1)"), "a hostile name is escaped");
    assert!(html.contains("&lt;script&gt;alert("), "and shown as text (labels are clipped)");
    for url in ["http://", "https://", "//cdn"] {
        assert!(html.matches(url).count() <= usize::from(url == "http://"), "no network: {url}");
    }
    let err = lake.fails(&["lineage", &"0".repeat(32)]);
    assert!(err.contains("not found"), "{err}");

    let Some(browser) = chromium() else { return };
    let (dom, log) = load(&browser, &page, &format!("search={}", &hostile[..12]));
    assert!(dom.contains("data-ready=\"1\""), "the page's script ran:\n{log}");
    assert!(dom.contains("data-found=\"1\""), "search found the artifact:\n{dom}");
    assert!(dom.contains("&lt;script&gt;alert("), "the hostile name is text in the DOM");
    for bad in ["Uncaught", "SyntaxError", "ERR_NAME_NOT_RESOLVED", "ERR_CONNECTION", "net::ERR"] {
        assert!(!log.contains(bad), "browser log has {bad}:\n{log}");
    }
}

/// `reproduce` writes the steps on an artifact's lineage (and the steps
/// their inputs come from, never the others) from the pipeline file they
/// ran from; `--run` makes the same artifact id in a scratch lake. A
/// pipeline file changed since, or an artifact no step made, is refused.
#[test]
fn reproduce_writes_the_lineage_s_steps_and_makes_the_same_id() {
    let lake = crate::Lake::new();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("p.toml");
    let text = r#"name = "repro"
[[step]]
name = "gen"
operation = "generate_data"
params = { tables = 3, rows = 20, seed = 5 }

[[step]]
name = "other"
operation = "generate_data"
params = { tables = 2, rows = 5, seed = 9 }

[[step]]
name = "count"
operation = "command"
command = ["sh", "-c", 'for f in inputs/t/*; do echo "{\"n\": $(wc -l < $f)}" > outputs/m/$(basename $f .csv).json; done']
inputs = { t = "gen.data" }
outputs = { m = "metric" }
"#;
    std::fs::write(&file, text).unwrap();
    lake.ok(&["run", file.to_str().unwrap()]);
    let id = lake.csv("SELECT artifact_id FROM metrics WHERE origin_step_number = 3 LIMIT 1");
    let id = id.lines().nth(1).unwrap().to_owned();
    let into = dir.path().join("again");
    let said = lake.ok(&["reproduce", &id, "--into", into.to_str().unwrap(), "--run"]);
    assert!(said.contains("steps gen, count of") && said.contains("made artifact"), "{said}");
    let written = std::fs::read_to_string(into.join("pipeline.toml")).unwrap();
    assert!(!written.contains("\"other\""), "{written}");
    let scratch = crate::Lake::at(into.join("lake"));
    let found =
        scratch.csv(&format!("SELECT count(*) AS n FROM metrics WHERE artifact_id = '{id}'"));
    assert_eq!(found, "n\n1\n");
    // The execution recorded what made it.
    let shown = lake.ok(&["show", &id]);
    assert!(shown.contains("produced  by execution") && shown.contains("\"blake3\""), "{shown}");

    std::fs::write(&file, text.replace("seed = 5", "seed = 6")).unwrap();
    let err = lake.fails(&["reproduce", &id, "--into", into.to_str().unwrap()]);
    assert!(err.contains("changed since it made artifact"), "{err}");
    let put = lake.ok(&["put", "--type", "metric", r#"{"x": 1}"#]);
    let err = lake.fails(&["reproduce", put.trim(), "--into", into.to_str().unwrap()]);
    assert!(err.contains("not made by a pipeline step"), "{err}");
}
