//! The `sluice` command line.
//!
//! The binary is a thin layer: it parses arguments with clap, opens the lake
//! and calls the library. It is also a library so that a user's own binary
//! can link its artifact types (and, later, operations) and then hand control
//! to [`main_entry`]: their types are then known to every command.

mod allocator;
mod args;
mod commands;
mod help;
mod log_format;
mod output;
mod ui;

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};

pub use args::Cli;

/// The stack of each runtime thread (see `main_entry`).
const RUNTIME_STACK: usize = 16 << 20;

/// Run the `sluice` command line with the process's arguments.
pub fn main_entry() -> ExitCode {
    ExitCode::from(run_with_args(std::env::args_os()))
}

/// Run the `sluice` command line with these arguments (the first is the
/// program's name) and give its exit status: what a host that embeds sluice
/// calls (the Python module's `sluice` command, which names itself first
/// with `sluice::pipeline::worker_program::set_host`). As in the binary,
/// `--help`, `--version` and a usage error print and end the process.
pub fn run_with_args<I, T>(args: I) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let status = run_args(args);
    // A host's process does not end through Rust's `main`, which would
    // flush what is buffered.
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    status
}

fn run_args<I, T>(args: I) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    allocator::configure_malloc();
    sluice::pipeline::provenance::set_build(format!(
        "sluice {} ({}, {} build)",
        env!("CARGO_PKG_VERSION"),
        env!("SLUICE_GIT_REV"),
        env!("SLUICE_BUILD_PROFILE")
    ));
    let matches = help::with_topics(Cli::command()).get_matches_from(args);
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    output::set_quiet(cli.quiet);
    init_tracing(cli.verbose, cli.quiet, log_format::colour(cli.color));
    // delta-rs turns a long `IN (…)` filter into a chain of ORs and walks
    // it recursively (`to_kernel::flatten_junction_expr`): 2048 ids
    // overflowed the default 2 MiB stack of a dev build (a `filter` step
    // over 10,000 candidates). Stacks are reserved, not committed.
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .thread_stack_size(RUNTIME_STACK)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return 1;
        }
    };
    let outcome = runtime.block_on(commands::run(cli));
    if std::env::var_os("SLUICE_REPORT_PEAK_RSS").is_some() {
        // For `sluice bench lineage`, which runs this process as its probe.
        eprintln!("peak RSS MiB: {:.1}", commands::peak_rss_mib());
    }
    match outcome {
        Ok(()) => 0,
        Err(e) if output::is_broken_pipe(&e) => 0,
        Err(e) => {
            eprint!("{}", error_text(&e));
            1
        }
    }
}

/// An error and its causes, each said once: a sluice error's text already
/// says its causes, so the chain is walked only down to the first one (and
/// a cause an outer text already said is not repeated).
fn error_text(error: &anyhow::Error) -> String {
    let mut said = String::new();
    let mut out = String::new();
    for (depth, cause) in error.chain().enumerate() {
        let text = cause.to_string();
        if depth == 0 {
            out.push_str(&format!("error: {text}\n"));
        } else if !said.contains(&text) {
            out.push_str(&format!("  caused by: {text}\n"));
        }
        said.push_str(&text);
        if cause.downcast_ref::<sluice::Error>().is_some() {
            break;
        }
    }
    out
}

fn init_tracing(verbose: u8, quiet: bool, colour: bool) {
    let default = match verbose {
        _ if quiet => "error,buoyant_kernel=off,deltalake_core=off",
        // The Delta kernel logs expected conditions (probing a folder that is
        // not a table yet) at error level, and delta-rs's MERGE warns of a
        // metric it derives on every merge; keep them out of normal output.
        0 => "warn,buoyant_kernel=off,deltalake_core::operations::merge=error",
        1 => "info,buoyant_kernel=warn",
        2 => "info,sluice=debug",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("SLUICE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    // `SLUICE_LOG_SPANS=1`: a line as each span closes, with its busy and
    // idle time (a unit's `input_read`, `compute`, `staging` in a worker).
    let spans =
        match std::env::var_os("SLUICE_LOG_SPANS").is_some_and(|v| !v.is_empty() && v != "0") {
            true => tracing_subscriber::fmt::format::FmtSpan::CLOSE,
            false => tracing_subscriber::fmt::format::FmtSpan::NONE,
        };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(output::Stderr::make)
        .with_span_events(spans)
        .with_ansi(colour);
    let _ = match verbose {
        0 => builder.event_format(log_format::CargoStyle).try_init(),
        _ => builder.try_init(),
    };
}
