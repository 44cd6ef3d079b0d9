//! Command-line arguments.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// sluice: a service-free, transactional artifact lake on Delta Lake.
#[derive(Debug, Parser)]
#[command(
    name = "sluice",
    version = concat!(
        env!("CARGO_PKG_VERSION"),
        " (",
        env!("SLUICE_GIT_REV"),
        ", ",
        env!("SLUICE_BUILD_PROFILE"),
        " build)"
    ),
    about,
    long_about = None
)]
pub struct Cli {
    /// The lake: a folder [default: ./lake] or an object-store URL
    /// (s3://bucket/prefix, az://container/prefix, abfss://…). The `ingest`
    /// commands take the lake their config names, and refuse a different
    /// one here.
    #[arg(long, global = true, env = "SLUICE_LAKE", value_parser = lake_root)]
    pub lake: Option<sluice::lake::LakeRoot>,

    /// More log output on stderr (-v, -vv). `SLUICE_LOG` overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,

    /// No progress bars and no warnings on stderr: results and errors only.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,

    /// Colour on stderr: `auto` (a terminal, and `NO_COLOR` unset),
    /// `always` or `never`.
    #[arg(long, global = true, value_enum, default_value_t = ColorChoice::Auto)]
    pub color: ColorChoice,

    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

/// When stderr gets colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ColorChoice {
    /// On a terminal, unless `NO_COLOR` is set.
    Auto,
    /// Always.
    Always,
    /// Never.
    Never,
}

/// Output formats of `sluice lineage` and `sluice graph`.
const GRAPH_FORMATS: [&str; 5] = ["text", "json", "dot", "mermaid", "html"];

/// Output formats of `sluice sql`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Format {
    /// Aligned text table.
    Table,
    /// CSV with a header.
    Csv,
    /// Newline-delimited JSON: one object per row, a stream (machine
    /// output of a whole document is `--json` on the other commands).
    #[value(alias = "json")]
    Ndjson,
}

/// Dispatch backends.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum BackendArg {
    /// Worker processes on this machine.
    Local,
    /// SLURM job arrays.
    Slurm,
}

/// sluice's commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create the lake and every table of every registered type (idempotent).
    Init,

    /// Run a SQL statement over every table of the lake.
    ///
    /// Tables: index, metrics, configs, data, file_refs, custom types,
    /// artifact_edges, execution_edges, executions, steps.
    Sql {
        /// The statement.
        sql: String,
        /// Output format.
        #[arg(long, value_enum, default_value = "table")]
        format: Format,
        /// Read the lake as of a lake version (a commit sequence, e.g. 3), an
        /// RFC 3339 time, or explicit table versions (e.g. metrics@3,index@5).
        /// Without it, the latest consistent point.
        #[arg(long)]
        as_of: Option<String>,
        /// Hold at most this many MiB: sorts and aggregations spill to the
        /// temporary folder (`TMPDIR`) and joins run as sort-merge joins.
        /// For statements over tables too big for memory.
        #[arg(long, value_name = "MIB")]
        memory_limit_mib: Option<usize>,
    },

    /// List tables with version, rows, files, bytes and partition columns.
    Tables {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },

    /// List registered artifact types with their tables and columns.
    Types {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },

    /// Show one artifact: type, step, metadata and content.
    Show {
        /// The artifact id (32 hex characters), or a unique prefix of it.
        id: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Refuse an artifact whose latest `error` check failed.
        #[arg(long)]
        require_checks: bool,
    },

    /// What a pipeline's units printed: each failed unit's error, inputs and
    /// the end of its stdout and stderr (of the latest run by default).
    Logs {
        /// A run id or prefix (default: the latest run), or an execution id
        /// or prefix.
        target: Option<String>,
        /// Only this step (name or number).
        #[arg(long)]
        step: Option<String>,
        /// Every unit, not only the failed ones.
        #[arg(long)]
        all: bool,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },

    /// Write one artifact's content: a data artifact's bytes (CSV, Parquet,
    /// Arrow), a metric's or config's JSON, a file_ref's file (checked
    /// against its hash), a declared type's columns as JSON.
    Get {
        /// The artifact id (32 hex characters), or a unique prefix of it.
        id: String,
        /// Write to this file instead of standard output.
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Refuse an artifact whose latest `error` check failed.
        #[arg(long)]
        require_checks: bool,
    },

    /// Commit all sealed staging into the lake (finishing interrupted commits first).
    Commit {
        /// Only this step's staging.
        #[arg(long)]
        step: Option<i32>,
        /// Run directories per commit sequence (bounds memory).
        #[arg(long, default_value_t = sluice::commit::DEFAULT_CHUNK)]
        chunk: usize,
        /// Staged bytes per commit sequence, in MiB (bounds memory).
        #[arg(long, default_value_t = sluice::commit::DEFAULT_CHUNK_BYTES >> 20)]
        chunk_mib: u64,
        /// Decoded rows one commit sequence may hold in memory, in MiB: runs
        /// past it go to the next sequence (one larger run is a sequence of
        /// its own). Default: 1024, or an eighth of the job's memory limit
        /// (its cgroup's) when that is smaller.
        #[arg(long)]
        memory_mib: Option<u64>,
        /// Give up after waiting this many seconds for the writer lock.
        #[arg(long)]
        wait: Option<f64>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },

    /// Finish interrupted commits, close sequences nothing can finish, and
    /// commit every sealed leftover staging directory.
    Recover {
        /// Decoded rows one commit sequence may hold in memory, in MiB
        /// (default as for `commit`).
        #[arg(long)]
        memory_mib: Option<u64>,
        /// Move quarantined runs back into staging and try them again (after
        /// fixing their cause, or on a node with the memory a run too large
        /// for another process needs).
        #[arg(long)]
        requeue: bool,
        /// Give up after waiting this many seconds for the writer lock.
        #[arg(long)]
        wait: Option<f64>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },

    /// Where an artifact came from and what it fed: ancestors and/or
    /// descendants through the provenance edges, each with its type, step
    /// and the execution that made it.
    Lineage {
        /// The artifact id, or a unique prefix of it.
        id: String,
        /// Ancestors only.
        #[arg(long, conflicts_with_all = ["down", "both"])]
        up: bool,
        /// Descendants only.
        #[arg(long, conflicts_with_all = ["up", "both"])]
        down: bool,
        /// Both (the default).
        #[arg(long)]
        both: bool,
        /// Levels to walk each way.
        #[arg(long, default_value_t = 10)]
        depth: usize,
        /// Keep only nodes of this artifact type.
        #[arg(long = "type")]
        artifact_type: Option<String>,
        /// Keep only nodes of this step.
        #[arg(long)]
        step: Option<i32>,
        /// text, json, dot, mermaid or html (one self-contained page).
        #[arg(long, default_value = "text", value_parser = GRAPH_FORMATS)]
        format: String,
        /// Write to this file instead of stdout.
        #[arg(short = 'o', long)]
        output: Option<std::path::PathBuf>,
    },

    /// Lake versions (commit sequences: time, runs, rows added per table), or
    /// one table's Delta history.
    History {
        /// One table's Delta history instead of the lake's versions.
        #[arg(long)]
        table: Option<String>,
        /// At most this many, newest first.
        #[arg(long, default_value_t = 20)]
        limit: usize,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },

    /// Compact tables: Delta OPTIMIZE per partition, Z-ordered by the
    /// column each table is looked up by, zstd; key filters rewritten.
    Compact {
        /// One table (default: all).
        #[arg(long)]
        table: Option<String>,
        /// One step's partition.
        #[arg(long)]
        step: Option<i32>,
        /// Z-order columns, comma-separated ("" for plain bin-packing).
        #[arg(long)]
        zorder: Option<String>,
        /// Target file size in MiB.
        #[arg(long)]
        target_size_mib: Option<u64>,
        /// Only report files and bytes now.
        #[arg(long)]
        dry_run: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },

    /// Remove data files no version within the retention needs (Delta
    /// VACUUM), and sluice's own leftovers (kept files no `file_ref`
    /// references among them) older than the retention.
    Vacuum {
        /// One table (default: all).
        #[arg(long)]
        table: Option<String>,
        /// Retention in hours (default 168; shorter needs --force).
        #[arg(long, default_value_t = 168.0)]
        retention_hours: f64,
        /// Accept a retention shorter than 168 hours.
        #[arg(long)]
        force: bool,
        /// Also remove files no version ever referenced (crashed writers).
        #[arg(long)]
        full: bool,
        /// Only list what would be removed.
        #[arg(long)]
        dry_run: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },

    /// Write a checkpoint of every table (or one) and drop expired logs.
    Checkpoint {
        /// One table (default: all).
        #[arg(long)]
        table: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },

    /// Restore every table to one lake version or time, as one journaled
    /// operation (`sluice recover` finishes it if it is interrupted).
    Restore {
        /// A lake version (see `sluice history`) or an RFC 3339 time.
        #[arg(long)]
        to: String,
        /// Only list what would change.
        #[arg(long)]
        dry_run: bool,
        /// Restore even though staging holds runs waiting for a commit.
        #[arg(long)]
        force: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },

    /// Rows a table gained (or lost) since a lake version, a time, or one of
    /// its own versions (`metrics@5`): Delta's change data feed.
    Changes {
        /// The table.
        table: String,
        /// A lake version, an RFC 3339 time, or `TABLE@VERSION`.
        #[arg(long)]
        since: String,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },

    /// A pipeline run as a graph: steps, the artifact streams between them,
    /// status and timings.
    Graph {
        /// Run id or prefix (default: the latest run).
        run: Option<String>,
        /// text, json, dot, mermaid or html.
        #[arg(long, default_value = "text", value_parser = GRAPH_FORMATS)]
        format: String,
        /// Write to this file instead of stdout.
        #[arg(short = 'o', long)]
        output: Option<std::path::PathBuf>,
    },

    /// Report pending, unsealed and quarantined staging, unfinished commits
    /// and a journal that is behind the tables.
    Doctor {
        /// Rebuild the commit journal from the tables when it is missing or
        /// behind them.
        #[arg(long)]
        repair: bool,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },

    /// Run a pipeline file: every step, cached by content, through staging-commit.
    Run {
        /// The pipeline file (TOML).
        pipeline: PathBuf,
        /// Run every step on this backend (default: each step's own).
        #[arg(long, value_enum)]
        backend: Option<BackendArg>,
        /// Local worker processes (default: number of cores).
        #[arg(long)]
        workers: Option<usize>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },

    /// Check a pipeline file without running it.
    Check {
        /// The pipeline file (TOML).
        pipeline: PathBuf,
    },

    /// Write the smallest pipeline that makes an artifact again: the steps
    /// on its lineage from the pipeline file they ran from (refused if that
    /// file changed since); `--run` runs it into a scratch lake and compares.
    Reproduce {
        /// The artifact id (32 hex characters), or a unique prefix of it.
        id: String,
        /// The folder to write `pipeline.toml` in (and, with `--run`, the
        /// scratch lake `lake/`).
        #[arg(long)]
        into: PathBuf,
        /// Run it into `<into>/lake` and check it makes the same artifact id.
        #[arg(long)]
        run: bool,
        /// Workers of the run.
        #[arg(long)]
        workers: Option<usize>,
    },

    /// Serve a read-only web view of the lake (runs, steps, failures,
    /// checks, artifacts, tables) on this machine, until Ctrl-C.
    Ui {
        /// The port (0: any free one; the address is printed).
        #[arg(long, default_value_t = 8080)]
        port: u16,
        /// The address to listen on; anything but loopback needs
        /// `--allow-remote` (the view has no login).
        #[arg(long, default_value = "127.0.0.1")]
        host: std::net::IpAddr,
        /// Allow a non-loopback `--host`.
        #[arg(long)]
        allow_remote: bool,
    },

    /// Run a pipeline's `[[check]]`s again, alone, on what the latest run of
    /// each checked step left, and record the results (exit status 1 when
    /// an `error` check fails).
    Checks {
        /// The pipeline file (TOML).
        pipeline: PathBuf,
        /// Only the check of this name.
        #[arg(long)]
        name: Option<String>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },

    /// Show the steps of the latest pipeline run (or of one run).
    Status {
        /// A run id or id prefix (default: the latest run).
        run: Option<String>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },

    /// List pipeline runs, newest first.
    Runs {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// At most this many runs.
        #[arg(long, default_value_t = 20)]
        limit: usize,
    },

    /// Write a small example pipeline into DIR, run it, and show what to try next.
    Demo {
        /// Where to put the pipeline and its lake.
        #[arg(default_value = "sluice-demo")]
        dir: PathBuf,
        /// Local worker processes (default: number of cores).
        #[arg(long)]
        workers: Option<usize>,
    },

    /// Print a shell completion script (e.g. `sluice completions bash >
    /// ~/.local/share/bash-completion/completions/sluice`).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },

    /// Print sluice's manual page (roff; `sluice man | man -l -`), or write
    /// one page per command into DIR.
    Man {
        /// Write `sluice.1` and `sluice-<command>.1` into this folder.
        #[arg(long)]
        dir: Option<PathBuf>,
    },

    /// Internal: a pipeline worker process (units on stdin, or a SLURM task's slice).
    #[command(name = "__worker", hide = true)]
    Worker {
        /// A units file (SLURM array task mode).
        #[arg(long)]
        units: Option<PathBuf>,
        /// This array task's index.
        #[arg(long, default_value_t = 0)]
        task: usize,
        /// Units per array task.
        #[arg(long, default_value_t = 1)]
        per_task: usize,
    },

    /// Ingest files from a landing zone into declared tables, exactly once
    /// (see docs/ingestion.md).
    #[command(subcommand)]
    Ingest(IngestCommand),

    /// Benchmarks: load generators with real worker processes; each prints
    /// its workload, its figures and their ratio to a named baseline.
    Bench(BenchArgs),

    /// Internal: one staging worker process of `sluice bench`.
    #[command(name = "__stage-worker", hide = true)]
    StageWorker {
        #[command(flatten)]
        workload: Workload,
        /// First execution index (inclusive).
        #[arg(long)]
        from: u64,
        /// Last execution index (exclusive).
        #[arg(long)]
        to: u64,
    },

    /// Add artifacts to the lake and print their ids.
    ///
    /// metric/config: each VALUE is JSON text, @FILE to read it from a file,
    /// or - for standard input (one JSON document, or one per line).
    /// data: each VALUE is a .csv, .parquet or .arrow file.
    /// file_ref: each VALUE is a path to reference.
    /// custom types: each VALUE is a JSON object of the type's columns (or -,
    /// as for metric).
    Put {
        /// The artifact type key.
        #[arg(long = "type", short = 't')]
        type_key: String,
        /// The producing step number.
        #[arg(long, default_value_t = 0)]
        step: i32,
        /// JSON object of metadata for every artifact.
        #[arg(long)]
        metadata: Option<String>,
        /// The values (see above).
        #[arg(required = true)]
        values: Vec<String>,
    },
}

/// The synthetic workload of the load generators.
#[derive(Debug, Clone, clap::Args)]
pub struct Workload {
    /// Number of executions to stage.
    #[arg(long, default_value_t = 1000)]
    pub executions: u64,
    /// Output artifacts per successful execution.
    #[arg(long, default_value_t = 3)]
    pub artifacts_per_execution: usize,
    /// Fraction of artifacts whose content repeats across executions.
    #[arg(long, default_value_t = 0.0)]
    pub duplicate_fraction: f64,
    /// Fraction of executions that fail (staged with success = false).
    #[arg(long, default_value_t = 0.0)]
    pub fail_fraction: f64,
    /// Fraction of workers that die before writing the sentinel.
    #[arg(long, default_value_t = 0.0)]
    pub crash_fraction: f64,
    /// Seed of the synthetic content.
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// Step number of the staged executions.
    #[arg(long, default_value_t = 1)]
    pub step: i32,
    /// Mix artifact types (metric, config, data, file_ref, and the declared
    /// type `sample` if the lake has it); file_ref files are written here.
    #[arg(long)]
    pub mixed: Option<std::path::PathBuf>,
    /// Executions per sealed staging directory: 1 stages each in its own
    /// directory, more stage each worker's executions in batches this large.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    pub batch: u64,
}

/// `sluice bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Also append the figures as JSON lines to this file (default:
    /// `$SLUICE_BENCH_RESULTS` if set); `scripts/bench-report` makes
    /// docs/PERFORMANCE.md from it.
    #[arg(long, global = true, env = "SLUICE_BENCH_RESULTS")]
    pub results: Option<std::path::PathBuf>,
    /// Print the figures on stdout as JSON lines (the results file's
    /// format), and the report meant for people on stderr.
    #[arg(long, global = true)]
    pub json: bool,
    /// The bench.
    #[command(subcommand)]
    pub command: BenchCommand,
}

/// `sluice bench` subcommands.
#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Stage synthetic executions into the lake's staging root with W worker processes.
    Stage {
        #[command(flatten)]
        workload: Workload,
        /// Worker processes.
        #[arg(long, default_value_t = 2)]
        workers: u64,
    },
    /// Stage and commit a workload into an empty lake (the baseline), fill the
    /// lake with --existing artifacts, then stage and commit the workload again
    /// with new content; report both and their ratio.
    Commit {
        #[command(flatten)]
        workload: Workload,
        /// Worker processes.
        #[arg(long, default_value_t = 2)]
        workers: u64,
        /// Run directories per commit sequence.
        #[arg(long, default_value_t = sluice::commit::DEFAULT_CHUNK)]
        chunk: usize,
        /// Artifacts already in the lake before the measured commits (e.g.
        /// 100000 vs 1000000 shows how de-duplication scales).
        #[arg(long, default_value_t = 0)]
        existing: u64,
    },
    /// End-to-end pipeline overhead: N trivial executions in 2 steps on the
    /// local backend, then the same pipeline fully cached (needs an empty lake).
    Pipeline {
        /// Executions in all (half per step).
        #[arg(long, default_value_t = 1000)]
        executions: u64,
        /// Local worker processes.
        #[arg(long, default_value_t = 2)]
        workers: usize,
    },
    /// The seed system's bench pipeline as its users run it: `sluice run
    /// --workers W` of generate_data (N tables of 10 rows) -> compute_metrics
    /// -> filter, in a new process on a new lake (made beside this lake and
    /// removed after), --rounds times; wall time and each step's share,
    /// against goal 1.0 s and the seed's 101.3 s (issue 45's measurement).
    Seed {
        /// Tables generated (one unit each; as many compute_metrics units).
        #[arg(long, default_value_t = 1000)]
        tables: u64,
        /// Local worker processes.
        #[arg(long, default_value_t = 2)]
        workers: usize,
        /// Rounds, each a new lake and a new process (the median is reported).
        #[arg(long, default_value_t = 3)]
        rounds: usize,
    },
    /// Pipeline steps written as Python functions: a trivial Python
    /// metrics step against `compute_metrics` on the same --units 10-row
    /// tables (extra ms per unit), and the seed's bench shape with its
    /// metrics computed in Python (--tables tables -> metrics -> filter)
    /// end to end as a process, against the seed's 101.3 s. Each run a new
    /// process on a new lake beside this one.
    Python {
        /// Units of the per-unit comparison.
        #[arg(long, default_value_t = 2000)]
        units: u64,
        /// Tables of the seed-shaped pipeline.
        #[arg(long, default_value_t = 1000)]
        tables: u64,
        /// Local worker processes.
        #[arg(long, default_value_t = 2)]
        workers: usize,
        /// The interpreter of the Python steps (it needs polars); default
        /// as a step's: the python3 beside sluice, else on PATH.
        #[arg(long)]
        python: Option<std::path::PathBuf>,
    },
    /// Two steps of --units units each (generate_data of 10-row tables,
    /// then compute_metrics of each) run by `sluice run` in a new process
    /// on a new lake, once on the local backend with --workers workers and
    /// once on SLURM (`units_per_worker = "auto"`, or --units-per-task),
    /// each step's time on
    /// SLURM against the same step's on the local backend. Says so and
    /// measures nothing where SLURM is not running.
    Slurm {
        /// Units per step.
        #[arg(long, default_value_t = 10_000)]
        units: u64,
        /// Local worker processes (the local baseline).
        #[arg(long, default_value_t = 2)]
        workers: usize,
        /// The SLURM steps' `units_per_worker`: a number, or "auto".
        #[arg(long, default_value = "auto")]
        units_per_task: String,
    },
    /// Lineage cost at scale: a layered derivation graph of --edges edges
    /// (needs an empty lake), then lineage --up --depth 5 of --samples
    /// artifacts, each in a fresh process (time, peak RSS), against one SQL
    /// scan of the whole edge table.
    Lineage {
        /// Edges in all (artifact edges + execution edges).
        #[arg(long, default_value_t = 1_000_000)]
        edges: u64,
        /// Derivation layers (at least 6, so depth 5 is reachable).
        #[arg(long, default_value_t = 10)]
        layers: u64,
        /// Artifacts whose lineage is measured.
        #[arg(long, default_value_t = 5)]
        samples: u64,
    },
    /// Ingestion throughput: CSV files → raw table (claim, parse, cast,
    /// commit, ledger) against the limit of the same files rewritten as
    /// zstd Parquet by arrow alone, and the commit latency of small flushes.
    Ingest {
        /// Files to ingest.
        #[arg(long, default_value_t = 50)]
        files: u64,
        /// Rows per file.
        #[arg(long, default_value_t = 100_000)]
        rows_per_file: u64,
        /// Parse workers (and threads of the limit).
        #[arg(long, default_value_t = 2)]
        workers: usize,
        /// One-row files ingested one flush each, for the flush latency.
        #[arg(long, default_value_t = 1000)]
        flushes: u64,
        /// Work folder (must not exist; default: a new temp folder, kept).
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
    },
    /// Reading one artifact by id (what a worker does per input) in a lake
    /// filled with --artifacts metrics in commits of 100k: median and p99
    /// of --samples lookups, each through a freshly opened lake.
    Lookup {
        /// Artifacts in the lake (needs an empty lake, or one this bench filled).
        #[arg(long, default_value_t = 1_000_000)]
        artifacts: u64,
        /// Lookups measured.
        #[arg(long, default_value_t = 50)]
        samples: u64,
    },
    /// The execution cache: which of --specs unit specs (half of them in
    /// the lake) have a successful execution, in a lake of --executions
    /// executions written in commits of 100k.
    Cache {
        /// Executions in the lake (needs an empty lake, or one this bench filled).
        #[arg(long, default_value_t = 1_000_000)]
        executions: u64,
        /// Unit specs checked.
        #[arg(long, default_value_t = 100_000)]
        specs: u64,
    },
    /// Small commits: --count consecutive `put`s of one metric through the
    /// library API; median, p99 and whether the cost stays flat.
    Put {
        /// Puts measured.
        #[arg(long, default_value_t = 1000)]
        count: u64,
        /// Also write each put's latency (ms, one per line, in order) here,
        /// to see where the slow ones fall.
        #[arg(long)]
        latencies: Option<PathBuf>,
    },
    /// Small step commits: --count consecutive commits, each of one staged
    /// execution of --artifacts metrics, through the library's committer
    /// (what a pipeline step of one unit commits); median, p99, flatness.
    StepCommit {
        /// Commits measured.
        #[arg(long, default_value_t = 1000)]
        count: u64,
        /// Metrics per staged execution.
        #[arg(long, default_value_t = 1)]
        artifacts: usize,
        /// Also write each commit's latency (ms, one per line, in order) here.
        #[arg(long)]
        latencies: Option<PathBuf>,
    },
    /// A lake grown by a generator to --artifacts metrics (partitioned by
    /// step, with executions and provenance edges), measured at each size of
    /// --at: a step's commit (half its artifacts present) by a `sluice
    /// commit` process and its peak RSS, lookups by id, the execution-cache
    /// check, a one-step aggregate and lineage walks. A later run on the same
    /// lake grows it further.
    Scale(ScaleArgs),
    /// Commit and a partition-pruned query into a lake filled by many small
    /// commits, before and after `sluice compact`.
    Maintenance {
        #[command(flatten)]
        workload: Workload,
        /// Metrics in the lake before the measured commits.
        #[arg(long, default_value_t = 1_000_000)]
        existing: u64,
        /// Metrics per filling commit.
        #[arg(long, default_value_t = 5_000)]
        commit_size: u64,
        /// Staging worker processes.
        #[arg(long, default_value_t = 2)]
        workers: u64,
    },
}

/// `sluice ingest` subcommands.
#[derive(Debug, Subcommand)]
pub enum IngestCommand {
    /// Claim landed files, parse and cast them in parallel, commit them
    /// through one writer.
    Run {
        /// The lakehouse config (TOML).
        #[arg(long, default_value = "lakehouse.toml")]
        config: PathBuf,
        /// Ingest what has landed, then stop (the default).
        #[arg(long, conflicts_with = "watch")]
        once: bool,
        /// Keep watching the landing zone until interrupted (Ctrl-C).
        #[arg(long)]
        watch: bool,
        /// Parse workers (overrides the config).
        #[arg(long)]
        workers: Option<usize>,
        /// Print the summary as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Run the medallion transforms (aggregate appends, curated merges) on
    /// what their upstream tables gained since their last run. `run` does
    /// this after each commit; this runs them alone.
    Transform {
        /// The lakehouse config (TOML).
        #[arg(long, default_value = "lakehouse.toml")]
        config: PathBuf,
        /// Print the reports as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove exact duplicate rows (same value in every column) from an
    /// ingestion table, e.g. one written outside sluice; prints the counts
    /// before and after.
    Dedup {
        /// The table: `trips`, or `raw/trips`, `aggregate/x`, `curated/x`.
        table: String,
        /// The lakehouse config (TOML).
        #[arg(long, default_value = "lakehouse.toml")]
        config: PathBuf,
        /// Count the duplicates, change nothing.
        #[arg(long)]
        dry_run: bool,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Queue depth, in-flight files, per-table rows and files, dead letters.
    Status {
        /// The lakehouse config (TOML).
        #[arg(long, default_value = "lakehouse.toml")]
        config: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// A worked example: writes a lakehouse config, a trips schema and a few
    /// files of taxi-style trips (one of them bad), ingests them through raw →
    /// aggregate → curated and queries the result.
    Demo {
        /// Where to put it.
        #[arg(default_value = "sluice-ingest-demo")]
        dir: PathBuf,
    },
    /// Put dead-lettered files back into the landing zone.
    Retry {
        /// The lakehouse config (TOML).
        #[arg(long, default_value = "lakehouse.toml")]
        config: PathBuf,
        /// `table/file` keys to retry.
        files: Vec<String>,
        /// Retry every dead letter.
        #[arg(long, conflicts_with = "files")]
        all_dead: bool,
    },
}

/// What `sluice bench scale` is asked.
#[derive(Debug, Clone, clap::Args)]
pub struct ScaleArgs {
    /// Generated artifacts to grow the lake to.
    #[arg(long, default_value_t = 10_000_000)]
    pub artifacts: u64,
    /// Sizes to measure at, comma-separated (default: every power of
    /// ten from 1M below --artifacts, and --artifacts).
    #[arg(long, value_delimiter = ',')]
    pub at: Vec<u64>,
    /// Steps the generated metrics are partitioned over.
    #[arg(long, default_value_t = 50)]
    pub steps: u64,
    /// Generated artifacts per commit while growing.
    #[arg(long, default_value_t = 1_000_000)]
    pub commit_size: u64,
    /// Staged executions (3 metrics each, half already in the lake)
    /// committed at each size.
    #[arg(long, default_value_t = 10_000)]
    pub executions: u64,
    /// Unit specs (half cached) checked at each size.
    #[arg(long, default_value_t = 100_000)]
    pub specs: u64,
    /// Lookups and lineage walks at each size.
    #[arg(long, default_value_t = 20)]
    pub samples: u64,
    /// Compact every table before measuring at each size.
    #[arg(long)]
    pub compact: bool,
    /// Draw the committed metrics that are already in the lake from its
    /// newest N generated artifacts (a re-run of recent work), not from
    /// the whole lake (0: the whole lake).
    #[arg(long, default_value_t = 0)]
    pub recent: u64,
    /// Commits measured at each size, each of its own new executions; the
    /// figure is their median.
    #[arg(long, default_value_t = 1)]
    pub commits: u64,
}

/// `--lake`: a folder (a path or a `file://` URL) or an object-store URL
/// (`s3://`, `az://`, `abfss://`, …); any other URL is refused, never taken
/// for a folder name.
fn lake_root(text: &str) -> Result<sluice::lake::LakeRoot, String> {
    sluice::lake::LakeRoot::parse(text).map_err(|e| e.to_string())
}
