//! `sluice ui`: the read-only web view, over real HTTP and in a real
//! headless browser (Debian's chromium, which `.ci/run` installs).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Stdio};

use super::Lake;

/// A pipeline with a failed unit, a hostile metric name and a check.
const PIPELINE: &str = r#"name = "viewed"
[[step]]
name = "gen"
operation = "generate_data"
params = { tables = 3, rows = 4 }

[[step]]
name = "hostile"
operation = "command"
command = ["sh", "-c", 'case $(ls inputs/t) in *2.csv) echo "bad <b>input</b>" >&2; exit 3;; esac; echo "{\"<script>alert(1)</script>\": 1}" > outputs/m/x.json']
inputs = { t = "gen.data" }
outputs = { m = "metric" }

[[check]]
name = "some_rows"
step = "gen"
sql = "SELECT count(*) > 0 FROM new_rows"
"#;

/// The UI serving `lake`, and its base URL (`http://127.0.0.1:PORT`).
struct Served {
    child: Child,
    base: String,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(lake: &Lake) -> Served {
    let mut child = lake
        .command(&["ui", "--port", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let base = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .trim_end_matches('/')
        .to_owned();
    Served { child, base }
}

/// `method path` over HTTP/1.1: (status, headers, body).
fn request(base: &str, method: &str, path: &str) -> (u16, String, String) {
    let host = base.trim_start_matches("http://");
    let mut stream = TcpStream::connect(host).unwrap();
    write!(stream, "{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let code = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (code, head.to_ascii_lowercase(), body.to_owned())
}

/// Every page answers with what the lake holds, escaped, under a policy
/// that forbids loading anything from elsewhere; nothing but GET is
/// served, unknown paths and ids are 404s, and the JSON API says what the
/// pages say.
#[test]
fn the_pages_show_the_lake_escaped_and_read_only() {
    let lake = Lake::new();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("p.toml");
    std::fs::write(&file, PIPELINE).unwrap();
    let out = lake.run(&["run", file.to_str().unwrap()]);
    assert!(!out.status.success(), "a unit fails");
    let served = serve(&lake);
    let base = &served.base;

    let (code, head, runs) = request(base, "GET", "/");
    assert_eq!(code, 200);
    assert!(head.contains("content-security-policy: default-src 'none'"), "{head}");
    // One run of `viewed`, its one failed unit counted in the last column.
    assert!(runs.contains("viewed") && runs.contains("<td>1</td></tr>"), "{runs}");
    let api: serde_json::Value =
        serde_json::from_str(&request(base, "GET", "/api/runs").2).unwrap();
    let run_id = api[0]["pipeline_run_id"].as_str().unwrap().to_owned();

    let (code, _, run) = request(base, "GET", &format!("/runs/{run_id}"));
    assert_eq!(code, 200);
    for text in ["1. gen", "2. hostile", "some_rows", "bad &lt;b&gt;input&lt;/b&gt;"] {
        assert!(run.contains(text), "{text}: {run}");
    }
    assert!(!run.contains("<b>input</b>"), "tool output is escaped");

    let metric = lake.csv("SELECT artifact_id FROM metrics LIMIT 1");
    let metric = metric.lines().nth(1).unwrap();
    let (code, _, page) = request(base, "GET", &format!("/artifacts/{metric}"));
    assert_eq!(code, 200);
    assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"), "{page}");
    assert!(!page.contains("<script>"), "no script tag reaches the page");
    assert!(page.contains("Produced by") && page.contains("hostile"), "{page}");

    let (code, _, tables) = request(base, "GET", "/tables");
    assert!(code == 200 && tables.contains("orchestration/checks"), "{tables}");
    assert_eq!(request(base, "GET", "/artifacts/0123456789abcdef0123456789abcdef").0, 404);
    assert_eq!(request(base, "GET", "/runs/nosuchrun").0, 404);
    assert_eq!(request(base, "GET", "/../../etc/passwd").0, 404);
    assert_eq!(request(base, "POST", "/").0, 405, "read-only: only GET is served");

    // The view wrote nothing: the lake's version is what it was.
    let after = lake.ok(&["history", "--limit", "1"]);
    drop(served);
    assert_eq!(lake.ok(&["history", "--limit", "1"]), after);

    // In a real browser: the run page renders, loads nothing from
    // elsewhere and trips no policy.
    let Some(browser) = crate::lineage::chromium() else { return };
    let served = serve(&lake);
    let (dom, log) = crate::lineage::load_url(&browser, &format!("{}/runs/{run_id}", served.base));
    assert!(dom.contains("2. hostile") && dom.contains("some_rows"), "{dom}");
    assert!(!log.contains("Content Security Policy"), "{log}");
}

/// A non-loopback address needs `--allow-remote`.
#[test]
fn serving_beyond_this_machine_must_be_asked_for() {
    let lake = Lake::new();
    lake.ok(&["init"]);
    let err = lake.fails(&["ui", "--host", "0.0.0.0", "--port", "0"]);
    assert!(err.contains("--allow-remote"), "{err}");
}
