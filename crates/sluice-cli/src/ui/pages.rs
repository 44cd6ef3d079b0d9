//! The pages, rendered from the library's typed values (never SQL text,
//! never the command line's output).

use sluice::artifact::{Artifact, FieldValue};
use sluice::lake::TableInfo;
use sluice::lineage::Producer;
use sluice::pipeline::logs::UnitLog;
use sluice::pipeline::status::{RunState, StepState};
use sluice::pipeline::steps_log::StepStatus;

use super::html::{esc, page, table};

/// µs since the epoch as `2026-12-07 22:14:15Z`.
fn when(micros: i64) -> String {
    chrono::DateTime::from_timestamp_micros(micros)
        .map(|t| t.format("%Y-%m-%d %H:%M:%SZ").to_string())
        .unwrap_or_else(|| "-".into())
}

fn status(s: StepStatus) -> String {
    format!("<span class=\"{0}\">{0}</span>", esc(s.as_str()))
}

fn num<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "-".into(), |v| v.to_string())
}

fn run_link(run: &RunState) -> String {
    let id = esc(&run.pipeline_run_id);
    format!("<a href=\"/runs/{id}\"><code>{}</code></a>", &id[..id.len().min(12)])
}

/// Every run, newest first.
pub(crate) fn runs(runs: &[RunState]) -> String {
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|r| {
            let units: i64 = r.steps.iter().filter_map(|s| s.total).sum();
            let cached: i64 = r.steps.iter().filter_map(|s| s.cached).sum();
            let failed: i64 = r.steps.iter().filter_map(|s| s.failed).sum();
            vec![
                run_link(r),
                esc(&r.pipeline),
                status(r.status),
                when(r.started),
                format!("{:.1}s", (r.updated - r.started) as f64 / 1e6),
                units.to_string(),
                cached.to_string(),
                failed.to_string(),
            ]
        })
        .collect();
    let body = if rows.is_empty() {
        "<h1>Runs</h1><p class=\"muted\">No pipeline has run in this lake yet.</p>".to_owned()
    } else {
        format!(
            "<h1>Runs</h1>{}",
            table(
                "runs",
                &["run", "pipeline", "status", "started", "duration", "units", "cached", "failed"],
                &rows
            )
        )
    };
    let going = runs.iter().any(|r| r.status == StepStatus::Running);
    page("Runs", &body, going.then_some(5))
}

fn step_row(s: &StepState) -> Vec<String> {
    vec![
        format!("{}. {}", s.number, esc(&s.name)),
        esc(&s.operation),
        status(s.status),
        num(s.total),
        num(s.cached),
        num(s.succeeded),
        num(s.failed),
        s.seconds.map_or_else(|| "-".into(), |x| format!("{x:.2}")),
    ]
}

/// One run: its steps, what failed (error, inputs, the end of the tool's
/// output), its checks and retries.
pub(crate) fn run(run: &RunState, failed: &[UnitLog]) -> String {
    let mut body = format!(
        "<h1>Run <code>{}</code></h1><p>pipeline <b>{}</b> · {} · started {} · last update {}</p>",
        esc(&run.pipeline_run_id),
        esc(&run.pipeline),
        status(run.status),
        when(run.started),
        when(run.updated)
    );
    let rows: Vec<Vec<String>> = run.steps.iter().map(step_row).collect();
    body.push_str("<h2>Steps</h2>");
    body.push_str(&table(
        "steps",
        &["step", "operation", "status", "units", "cached", "succeeded", "failed", "seconds"],
        &rows,
    ));
    let errors: Vec<String> = run
        .steps
        .iter()
        .filter_map(|s| {
            s.error.as_ref().map(|e| format!("<li><b>{}</b>: {}</li>", esc(&s.name), esc(e)))
        })
        .collect();
    if !errors.is_empty() {
        body.push_str(&format!(
            "<h2>Step errors</h2><ul class=\"errors\">{}</ul>",
            errors.join("")
        ));
    }
    let failures: Vec<String> = failed
        .iter()
        .map(|u| {
            let inputs: Vec<String> = u
                .inputs
                .iter()
                .map(|(role, id)| {
                    let id = esc(id);
                    format!(
                        "{}=<a href=\"/artifacts/{id}\"><code>{}</code></a>",
                        esc(role),
                        &id[..id.len().min(12)]
                    )
                })
                .collect();
            format!(
                "<li><b>{}</b> execution <code>{}</code><pre class=\"error\">{}</pre>\
                 <p>inputs: {}</p><pre class=\"output\">{}</pre>\
                 <p class=\"muted\">run the pipeline again: only failed units run \
                 (<code>sluice logs {}</code> prints this)</p></li>",
                esc(&u.step),
                esc(&u.execution_run_id),
                esc(u.error.as_deref().unwrap_or("")),
                if inputs.is_empty() { "-".to_owned() } else { inputs.join(" ") },
                esc(u.output.as_deref().unwrap_or("(no output recorded)")),
                esc(&u.execution_run_id)
            )
        })
        .collect();
    if !failures.is_empty() {
        body.push_str(&format!(
            "<h2>Failed units</h2><ul class=\"failures\">{}</ul>",
            failures.join("")
        ));
    }
    let retries: Vec<Vec<String>> = run
        .steps
        .iter()
        .flat_map(|s| s.retries.iter().map(move |r| (s, r)))
        .map(|(s, r)| {
            let why: Vec<String> = r.reasons.iter().map(|(k, n)| format!("{k} ×{n}")).collect();
            vec![
                esc(&s.name),
                r.attempt.to_string(),
                r.units.to_string(),
                esc(&why.join(", ")),
                format!("{:.1}s", r.delay_seconds),
            ]
        })
        .collect();
    if !retries.is_empty() {
        body.push_str("<h2>Retries</h2>");
        body.push_str(&table("retries", &["step", "attempt", "units", "why", "after"], &retries));
    }
    let checks: Vec<Vec<String>> = run
        .checks
        .iter()
        .map(|c| {
            let r = &c.result;
            let verdict = if r.passed {
                "<span class=\"completed\">passed</span>"
            } else {
                "<span class=\"failed\">failed</span>"
            };
            let seen = r
                .error
                .clone()
                .or_else(|| r.observed.as_ref().map(|o| o.to_string()))
                .unwrap_or_default();
            vec![
                esc(&r.name),
                esc(&r.step),
                esc(r.severity.as_str()),
                verdict.to_owned(),
                r.rows_examined.to_string(),
                format!("<code>{}</code>", esc(&seen)),
            ]
        })
        .collect();
    if !checks.is_empty() {
        body.push_str("<h2>Checks</h2>");
        body.push_str(&table(
            "checks",
            &["check", "step", "severity", "verdict", "rows", "observed"],
            &checks,
        ));
    }
    let going = run.status == StepStatus::Running;
    page(&format!("Run {}", &run.pipeline_run_id), &body, going.then_some(3))
}

/// One artifact: its fields (content as text, bytes as a size), who made it.
pub(crate) fn artifact(artifact: &Artifact, rendered: &str, producer: Option<&Producer>) -> String {
    let mut body = format!(
        "<h1>Artifact <code>{}</code></h1><p>type <b>{}</b> · step {}</p>",
        esc(&artifact.id.to_string()),
        esc(&artifact.type_key),
        artifact.origin_step_number
    );
    let fields: Vec<Vec<String>> = artifact
        .fields
        .iter()
        .filter(|(k, _)| k.as_str() != "content")
        .map(|(k, v)| {
            let value = match v {
                FieldValue::Binary(b) => format!("{} bytes", b.len()),
                other => other.to_json().to_string(),
            };
            vec![esc(k), format!("<code>{}</code>", esc(&value))]
        })
        .collect();
    body.push_str(&table("fields", &["field", "value"], &fields));
    if let Some(p) = producer {
        body.push_str(&format!(
            "<h2>Produced by</h2><p>execution <code>{}</code> of step {} <b>{}</b> ({})</p>",
            esc(&p.execution_run_id),
            p.step_number,
            esc(p.step_name.as_deref().unwrap_or("-")),
            esc(&p.operation)
        ));
        if let Some(provenance) = &p.provenance {
            let text = serde_json::to_string_pretty(provenance).unwrap_or_default();
            body.push_str(&format!("<pre class=\"provenance\">{}</pre>", esc(&text)));
        }
    }
    body.push_str(&format!("<h2>Content</h2><pre class=\"content\">{}</pre>", esc(rendered)));
    page(&format!("Artifact {}", artifact.id), &body, None)
}

/// Every table: version, rows, files, bytes, partitions.
pub(crate) fn tables(infos: &[TableInfo]) -> String {
    let rows: Vec<Vec<String>> = infos
        .iter()
        .map(|t| {
            vec![
                esc(&t.name),
                format!("<code>{}</code>", esc(&t.path)),
                t.version.to_string(),
                t.rows.to_string(),
                t.files.to_string(),
                t.bytes.to_string(),
                esc(&t.partition_columns.join(", ")),
            ]
        })
        .collect();
    let body = format!(
        "<h1>Tables</h1>{}",
        table(
            "tables",
            &["table", "path", "version", "rows", "files", "bytes", "partitioned by"],
            &rows
        )
    );
    page("Tables", &body, None)
}

/// A page saying what went wrong (`text` escaped here).
pub(crate) fn problem(title: &str, text: &str) -> String {
    page(title, &format!("<h1>{}</h1><p>{}</p>", esc(title), esc(text)), None)
}
