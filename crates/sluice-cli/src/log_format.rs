//! How sluice's warnings read on a terminal: as cargo's do
//! (`warning: message key=value`), not as log lines with times, levels and
//! module paths. `-v` and above keep the full tracing format, for people
//! reading what happened inside.

use std::fmt;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

/// `warning: …` / `error: …`, one line per event.
pub(crate) struct CargoStyle;

impl<S, N> FormatEvent<S, N> for CargoStyle
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let label = match *event.metadata().level() {
            Level::ERROR => "error",
            Level::WARN => "warning",
            Level::INFO => "info",
            _ => "debug",
        };
        write!(writer, "{label}: ")?;
        // Inside spans (a worker's unit and its phases): say which, as
        // `unit{run=…}:compute: close time.busy=…` under SLUICE_LOG_SPANS.
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                write!(writer, "{}", span.name())?;
                let extensions = span.extensions();
                if let Some(fields) = extensions.get::<FormattedFields<N>>()
                    && !fields.is_empty()
                {
                    write!(writer, "{{{fields}}}")?;
                }
                write!(writer, ": ")?;
            }
        }
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

/// Whether stderr gets colours: as `--color` says, and for `auto` a
/// terminal with `NO_COLOR` unset.
pub(crate) fn colour(choice: crate::args::ColorChoice) -> bool {
    use crate::args::ColorChoice;
    use std::io::IsTerminal;
    match choice {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => {
            std::io::stderr().is_terminal()
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
        }
    }
}
