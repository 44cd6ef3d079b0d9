//! One function per command.

mod bench;
mod bench_ingest;
mod bench_load;
mod bench_python;
mod bench_results;
mod bench_scale;
mod bench_seed;
mod bench_size;
mod bench_slurm;
mod bench_store;
mod commit;
mod demo;
pub(crate) use bench_load::peak_rss_mib;
mod doctor;
mod ingest;
mod lineage;
mod maintenance;
mod pipeline;

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde_json::{Value, json};
use sluice::artifact::{CONFIG, DATA, FILE_REF, FieldValue, METRIC};
use sluice::lake::LakeRoot;
use sluice::lineage::Direction;
use sluice::query::{AsOf, OutputFormat};
use sluice::{Draft, Lake};

use crate::args::{Cli, Command, Format};
use crate::output::{print, text_table};

/// Run a parsed command line.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    let given = cli.lake.clone();
    let root = cli.lake.unwrap_or_else(|| LakeRoot::Local(PathBuf::from("./lake")));
    match cli.command {
        Command::Init => init(&root).await,
        Command::Sql { sql, format, as_of, memory_limit_mib } => {
            query(&root, &sql, format, as_of.as_deref(), memory_limit_mib).await
        }
        Command::Tables { json } => tables(&root, json).await,
        Command::Types { json } => types(&root, json).await,
        Command::Show { id, json, require_checks } => show(&root, &id, json, require_checks).await,
        Command::Get { id, output, require_checks } => {
            get(&root, &id, output.as_deref(), require_checks).await
        }
        Command::Logs { target, step, all, json } => {
            let request = sluice::pipeline::logs::LogsRequest { target, step, all };
            pipeline::logs(&root, &request, json).await
        }
        Command::Put { type_key, step, metadata, values } => {
            put(&root, &type_key, step, metadata.as_deref(), &values).await
        }
        Command::Commit { step, chunk, chunk_mib, memory_mib, wait, json } => {
            let options = commit::CommitOptions {
                step,
                chunk,
                chunk_mib,
                memory_mib,
                wait,
                ..Default::default()
            };
            commit::commit(&root, options, json).await
        }
        Command::Recover { memory_mib, requeue, wait, json } => {
            let options = commit::CommitOptions {
                memory_mib,
                wait,
                recover: true,
                requeue,
                ..Default::default()
            };
            commit::commit(&root, options, json).await
        }
        Command::Doctor { repair, json } => doctor::doctor(&root, repair, json).await,
        Command::Lineage { id, up, down, both: _, depth, artifact_type, step, format, output } => {
            let direction = match (up, down) {
                (true, _) => Direction::Up,
                (_, true) => Direction::Down,
                _ => Direction::Both,
            };
            let request = lineage::LineageRequest { id, direction, depth, artifact_type, step };
            lineage::lineage(&root, request, &format, output.as_deref()).await
        }
        Command::History { table, limit, json } => {
            maintenance::history(&root, table.as_deref(), limit, json).await
        }
        Command::Compact { table, step, zorder, target_size_mib, dry_run, json } => {
            let options = sluice::maintenance::CompactOptions {
                table,
                step,
                zorder: zorder
                    .map(|z| z.split(',').filter(|c| !c.is_empty()).map(str::to_owned).collect()),
                target_size: target_size_mib.map(|m| m << 20),
                dry_run,
                progress: Default::default(),
            };
            maintenance::compact(&root, options, json).await
        }
        Command::Vacuum { table, retention_hours, force, full, dry_run, json } => {
            let options = sluice::maintenance::VacuumOptions {
                table,
                retention: std::time::Duration::from_secs_f64(retention_hours.max(0.0) * 3600.0),
                force,
                full,
                dry_run,
                progress: Default::default(),
            };
            maintenance::vacuum(&root, options, json).await
        }
        Command::Checkpoint { table, json } => {
            maintenance::checkpoint(&root, table.as_deref(), json).await
        }
        Command::Restore { to, dry_run, force, json } => {
            maintenance::restore(&root, &to, dry_run, force, json).await
        }
        Command::Changes { table, since, format } => changes(&root, &table, &since, format).await,
        Command::Graph { run, format, output } => {
            lineage::graph(&root, run.as_deref(), &format, output.as_deref()).await
        }
        Command::Run { pipeline, backend, workers, json } => {
            pipeline::run(&root, &pipeline, backend, workers, json).await
        }
        Command::Check { pipeline } => pipeline::check(&root, &pipeline).await,
        Command::Ui { port, host, allow_remote } => ui(&root, host, port, allow_remote).await,
        Command::Reproduce { id, into, run, workers } => {
            pipeline::reproduce(&root, &id, &into, run, workers).await
        }
        Command::Checks { pipeline, name, json } => {
            pipeline::checks(&root, &pipeline, name.as_deref(), json).await
        }
        Command::Status { run, json } => pipeline::status(&root, run.as_deref(), json).await,
        Command::Runs { json, limit } => pipeline::runs(&root, json, limit).await,
        Command::Demo { dir, workers } => demo::demo(&dir, workers).await,
        Command::Completions { shell } => completions(shell),
        Command::Man { dir } => manual(dir.as_deref()),
        Command::Worker { units, task, per_task } => {
            pipeline::worker(&root, units.as_deref(), task, per_task).await
        }
        Command::Bench(bench) => Box::pin(bench::run(&root, bench)).await,
        Command::Ingest(command) => ingest::run(command, given.as_ref()).await,
        Command::StageWorker { workload, from, to } => {
            bench_load::stage_worker(&root, &workload, from, to).await
        }
    }
}

/// The completion script of `shell` on standard output.
fn completions(shell: clap_complete::Shell) -> anyhow::Result<()> {
    let mut command = crate::help::with_topics(<Cli as clap::CommandFactory>::command());
    clap_complete::generate(shell, &mut command, "sluice", &mut std::io::stdout());
    Ok(())
}

/// The manual page on standard output, or one page per visible command
/// (`sluice-<command>.1`, nested commands joined by `-`) in `dir`.
fn manual(dir: Option<&Path>) -> anyhow::Result<()> {
    let command = crate::help::with_topics(<Cli as clap::CommandFactory>::command());
    let Some(dir) = dir else {
        clap_mangen::Man::new(command).render(&mut std::io::stdout())?;
        return Ok(());
    };
    std::fs::create_dir_all(dir).map_err(|e| anyhow::anyhow!("creating {}: {e}", dir.display()))?;
    clap_mangen::generate_to(command, dir)?;
    print(&format!("manual pages written to {}", dir.display()))
}

async fn init(root: &LakeRoot) -> anyhow::Result<()> {
    let (lake, report) = Lake::init(root).await?;
    let mut lines = vec![format!("lake {}", lake.root())];
    for name in &report.created {
        lines.push(format!("  created   {name}"));
    }
    for (name, columns) in &report.evolved {
        lines.push(format!("  evolved   {name} (+{})", columns.join(", +")));
    }
    for name in &report.unchanged {
        lines.push(format!("  exists    {name}"));
    }
    print(&lines.join("\n"))
}

async fn query(
    root: &LakeRoot,
    sql: &str,
    format: Format,
    as_of: Option<&str>,
    memory_limit_mib: Option<usize>,
) -> anyhow::Result<()> {
    let lake = Lake::open(root).await?;
    let as_of = as_of.map(str::parse::<AsOf>).transpose()?;
    let result = lake
        .sql(sql)
        .with_as_of(as_of)
        .with_memory_limit(memory_limit_mib.map(|mib| mib << 20))
        .execute()
        .await?;
    let text = sluice::query::format::render(&result.batches, output_format(format))?;
    if text.is_empty() {
        return Ok(());
    }
    print(&text)
}

async fn changes(root: &LakeRoot, table: &str, since: &str, format: Format) -> anyhow::Result<()> {
    let lake = Lake::open(root).await?;
    let since = AsOf::parse_for(since, "--since")?;
    let changes = sluice::query::changes(&lake, table, &since).await?;
    // No rows: the header (and `(0 rows)`) in table and CSV form, nothing
    // in NDJSON, as `sql` does.
    let text = sluice::query::format::render(&changes.batches, output_format(format))?;
    if text.is_empty() {
        return Ok(());
    }
    print(&text)
}

fn output_format(format: Format) -> OutputFormat {
    match format {
        Format::Table => OutputFormat::Table,
        Format::Csv => OutputFormat::Csv,
        Format::Ndjson => OutputFormat::Json,
    }
}

async fn tables(root: &LakeRoot, as_json: bool) -> anyhow::Result<()> {
    let lake = Lake::open(root).await?;
    let infos = lake.table_infos().await?;
    if as_json {
        return print(&serde_json::to_string_pretty(&infos)?);
    }
    let rows: Vec<Vec<String>> = infos
        .iter()
        .map(|t| {
            vec![
                t.name.clone(),
                t.path.clone(),
                t.version.to_string(),
                t.rows.to_string(),
                t.files.to_string(),
                t.bytes.to_string(),
                if t.partition_columns.is_empty() {
                    "-".into()
                } else {
                    t.partition_columns.join(",")
                },
            ]
        })
        .collect();
    print(&text_table(
        &["table", "path", "version", "rows", "files", "bytes", "partitioned by"],
        &rows,
    ))
}

async fn types(root: &LakeRoot, as_json: bool) -> anyhow::Result<()> {
    let lake = Lake::open(root).await?;
    let descriptors: Vec<_> = lake.registry().descriptors().collect();
    if as_json {
        let rows: Vec<Value> = descriptors
            .iter()
            .map(|d| {
                json!({
                    "key": d.key, "table": d.table_path, "origin": d.origin.to_string(),
                    "partition_by_step": d.partition_by_step,
                    "columns": d.columns.iter().map(|c| json!({
                        "name": c.name, "type": c.column_type.name(), "nullable": c.nullable,
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        return print(&serde_json::to_string_pretty(&rows)?);
    }
    let rows: Vec<Vec<String>> = descriptors
        .iter()
        .map(|d| {
            let columns: Vec<String> = d
                .columns
                .iter()
                .map(|c| {
                    format!("{}:{}{}", c.name, c.column_type, if c.nullable { "?" } else { "" })
                })
                .collect();
            vec![d.key.clone(), d.table_path.clone(), d.origin.to_string(), columns.join(" ")]
        })
        .collect();
    print(&text_table(&["type", "table", "from", "columns (? = nullable)"], &rows))
}

/// `sluice get` of a `file_ref`: the referenced file's bytes (read from the
/// lake's store when kept there), checked against the reference's hash
/// before any of them is written out.
async fn get_referenced_file(
    lake: &Lake,
    artifact: &sluice::Artifact,
    output: Option<&Path>,
) -> anyhow::Result<()> {
    let temp = match output {
        Some(path) => {
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
            path.with_file_name(format!(
                ".{}.sluice-get-{}",
                name.unwrap_or_default(),
                std::process::id()
            ))
        }
        None => {
            std::env::temp_dir().join(format!("sluice-get-{}-{}", artifact.id, std::process::id()))
        }
    };
    let copied = lake.copy_referenced_file(artifact, &temp).await;
    let written = copied.map_err(anyhow::Error::from).and_then(|()| match output {
        Some(path) => std::fs::rename(&temp, path).map_err(|e| sluice::Error::io(path, e).into()),
        None => {
            let mut file = std::fs::File::open(&temp).map_err(|e| sluice::Error::io(&temp, e))?;
            std::io::copy(&mut file, &mut std::io::stdout().lock())
                .map(drop)
                .map_err(|e| sluice::Error::io("<stdout>", e).into())
        }
    });
    let _ = std::fs::remove_file(&temp);
    written
}

/// Under `--require-checks`, an error naming the check `id` fails.
async fn refuse_failing(
    lake: &Lake,
    id: sluice::artifact::ArtifactId,
    require_checks: bool,
) -> anyhow::Result<()> {
    if !require_checks {
        return Ok(());
    }
    match sluice::pipeline::checks::refusal(lake, id).await? {
        Some(why) => anyhow::bail!("{why}. Help: without --require-checks it is read as it is"),
        None => Ok(()),
    }
}

/// `sluice ui`: a non-loopback address only when asked for, and said.
async fn ui(
    root: &LakeRoot,
    host: std::net::IpAddr,
    port: u16,
    allow_remote: bool,
) -> anyhow::Result<()> {
    if !host.is_loopback() {
        if !allow_remote {
            anyhow::bail!(
                "--host {host} would serve the lake to other machines, with no login: add --allow-remote to mean it (or reach 127.0.0.1 over `ssh -L`)"
            );
        }
        eprintln!("warning: serving on {host}: anyone who can reach it can read this lake");
    }
    crate::ui::serve(root, crate::ui::UiOptions { host, port }).await
}

/// `sluice get`: an artifact's content as a file of its own.
async fn get(
    root: &LakeRoot,
    id: &str,
    output: Option<&Path>,
    require_checks: bool,
) -> anyhow::Result<()> {
    use std::io::{IsTerminal, Write};
    let lake = Lake::open(root).await?;
    let id = lake.resolve(id).await?;
    refuse_failing(&lake, id, require_checks).await?;
    let artifact = lake.get(id).await?;
    if artifact.type_key == sluice::artifact::FILE_REF {
        return get_referenced_file(&lake, &artifact, output).await;
    }
    let imp = lake.registry().get(&artifact.type_key)?;
    let Some(path) = output else {
        let binary = matches!(artifact.field("format").as_str(), Some("parquet" | "arrow"));
        let stdout = std::io::stdout();
        if binary && stdout.is_terminal() {
            anyhow::bail!(
                "artifact {} is {} data, binary: write it to a file with `-o FILE`, or pipe it",
                artifact.id,
                artifact.field("format").as_str().unwrap_or_default()
            );
        }
        let mut out = std::io::BufWriter::new(stdout.lock());
        imp.export(&artifact, &mut out)?;
        return out.flush().map_err(|e| sluice::Error::io("<stdout>", e).into());
    };
    // Written beside the target and renamed: a failed export (a file_ref
    // whose file changed) leaves no half file behind.
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let temp = path.with_file_name(format!(".{name}.sluice-get-{}", std::process::id()));
    let written = (|| -> anyhow::Result<()> {
        let file = std::fs::File::create(&temp).map_err(|e| sluice::Error::io(&temp, e))?;
        let mut out = std::io::BufWriter::new(file);
        imp.export(&artifact, &mut out)?;
        out.flush().map_err(|e| sluice::Error::io(path, e))?;
        std::fs::rename(&temp, path).map_err(|e| sluice::Error::io(path, e))?;
        Ok(())
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written
}

async fn show(
    root: &LakeRoot,
    id: &str,
    as_json: bool,
    require_checks: bool,
) -> anyhow::Result<()> {
    let lake = Lake::open(root).await?;
    let id = lake.resolve(id).await?;
    refuse_failing(&lake, id, require_checks).await?;
    let artifact = lake.get(id).await?;
    let imp = lake.registry().get(&artifact.type_key)?;
    let content = imp.render(&artifact)?;
    let graph = lake
        .lineage(id)
        .with_direction(sluice::lineage::Direction::Up)
        .with_depth(0)
        .execute()
        .await?;
    let producer = graph.nodes.get(&id).and_then(|n| n.produced_by.clone());
    if as_json {
        let fields: serde_json::Map<String, Value> = artifact
            .fields
            .iter()
            .map(|(k, v)| {
                let value = match v {
                    FieldValue::Binary(b) => json!(format!("<{} bytes>", b.len())),
                    _ => v.to_json(),
                };
                (k.clone(), value)
            })
            .collect();
        let doc = json!({
            "artifact_id": artifact.id.to_hex(),
            "artifact_type": artifact.type_key,
            "origin_step_number": artifact.origin_step_number,
            "metadata": artifact.metadata,
            "external_path": artifact.external_path,
            "fields": fields,
            "produced_by": producer,
        });
        return print(&serde_json::to_string_pretty(&doc)?);
    }
    let mut text = format!(
        "artifact  {}\ntype      {}\nstep      {}\nmetadata  {}\n",
        artifact.id,
        artifact.type_key,
        artifact.origin_step_number,
        Value::Object(artifact.metadata.clone())
    );
    if let Some(path) = &artifact.external_path {
        text.push_str(&format!("external  {path}\n"));
    }
    if let Some(p) = &producer {
        text.push_str(&format!(
            "produced  by execution {} (step {} `{}`, {})\n",
            p.execution_run_id,
            p.step_number,
            p.step_name.as_deref().unwrap_or("-"),
            p.operation
        ));
        if let Some(provenance) = &p.provenance {
            text.push_str(&format!("          {provenance}\n"));
        }
    }
    text.push_str("content\n");
    for line in content.lines() {
        text.push_str("  ");
        text.push_str(line);
        text.push('\n');
    }
    print(&text)
}

fn read_json_arg(value: &str) -> anyhow::Result<(Value, Option<String>)> {
    if let Some(path) = value.strip_prefix('@') {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
        let parsed =
            serde_json::from_str(&text).with_context(|| format!("{path} is not valid JSON"))?;
        let name = Path::new(path).file_name().and_then(|n| n.to_str()).map(str::to_owned);
        return Ok((parsed, name));
    }
    let parsed = serde_json::from_str(value).with_context(|| {
        format!("`{value}` is not JSON (give a JSON object, @FILE for a JSON file, or - for standard input)")
    })?;
    Ok((parsed, None))
}

/// The values of `put`: each argument, with `-` standing for the JSON
/// documents on standard input (one, or one per line).
fn expand_stdin(values: &[String]) -> anyhow::Result<Vec<String>> {
    let mut out = Vec::with_capacity(values.len());
    for value in values {
        if value != "-" {
            out.push(value.clone());
            continue;
        }
        let text = std::io::read_to_string(std::io::stdin()).context("reading standard input")?;
        if serde_json::from_str::<Value>(&text).is_ok() {
            out.push(text);
        } else {
            out.extend(text.lines().filter(|l| !l.trim().is_empty()).map(str::to_owned));
        }
    }
    Ok(out)
}

async fn put(
    root: &LakeRoot,
    type_key: &str,
    step: i32,
    metadata: Option<&str>,
    values: &[String],
) -> anyhow::Result<()> {
    let lake = Lake::open(root).await?;
    let metadata = match metadata {
        Some(text) => match serde_json::from_str(text).context("--metadata is not valid JSON")? {
            Value::Object(map) => map,
            _ => bail!("--metadata must be a JSON object"),
        },
        None => serde_json::Map::new(),
    };
    let values = expand_stdin(values)?;
    let mut artifacts = Vec::with_capacity(values.len());
    for value in &values {
        let draft = match type_key {
            METRIC | CONFIG => {
                let (json, name) = read_json_arg(value)?;
                let draft =
                    if type_key == METRIC { Draft::metric(json)? } else { Draft::config(json)? };
                match name {
                    Some(n) => draft.with_original_name(&n),
                    None => draft,
                }
            }
            DATA => Draft::data_from_file(Path::new(value))?,
            FILE_REF => Draft::file_ref(Path::new(value))?,
            custom => {
                let (json, _) = read_json_arg(value)?;
                Draft::from_json_object(lake.registry(), custom, &json)?
            }
        };
        artifacts
            .push(draft.with_step(step).with_metadata(metadata.clone()).finalize(lake.registry())?);
    }
    let report = lake.put(&artifacts).await?;
    lake.settle().await;
    let ids: Vec<String> = artifacts.iter().map(|a| a.id.to_hex()).collect();
    print(&ids.join("\n"))?;
    if report.already_present + report.duplicates_in_call > 0 {
        eprintln!(
            "{} already in the lake, {} repeated in this call",
            report.already_present, report.duplicates_in_call
        );
    }
    Ok(())
}

/// The first value of a one-row, one-column query, as text.
pub(crate) async fn scalar(lake: &Lake, sql: &str) -> anyhow::Result<String> {
    let result = lake.sql(sql).execute().await?;
    let csv = sluice::query::format::render(&result.batches, OutputFormat::Csv)?;
    Ok(csv.lines().nth(1).unwrap_or_default().to_owned())
}
