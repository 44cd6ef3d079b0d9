//! Writing to stdout, treating a closed pipe (`sluice sql … | head`) as success.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether [`print`] writes to stderr (stdout then carries machine-readable
/// output only: `sluice bench --json`).
static ON_STDERR: AtomicBool = AtomicBool::new(false);

/// Whether `-q` was given: no progress bars, no warnings.
static QUIET: AtomicBool = AtomicBool::new(false);

/// Record `-q`.
pub fn set_quiet(quiet: bool) {
    QUIET.store(quiet, Ordering::Relaxed);
}

/// Whether `-q` was given.
pub fn quiet() -> bool {
    QUIET.load(Ordering::Relaxed)
}

/// Every progress bar of the process, drawn together on stderr (indicatif
/// draws only on a terminal), nowhere under `-q`. Warnings are written
/// through it ([`Stderr`]), so a warning never lands inside a bar.
fn bars() -> &'static indicatif::MultiProgress {
    static BARS: std::sync::OnceLock<indicatif::MultiProgress> = std::sync::OnceLock::new();
    BARS.get_or_init(|| {
        let target = if quiet() {
            indicatif::ProgressDrawTarget::hidden()
        } else {
            indicatif::ProgressDrawTarget::stderr()
        };
        indicatif::MultiProgress::with_draw_target(target)
    })
}

/// A progress bar of `len` steps (a spinner for `None`), drawn with the
/// others.
pub fn bar(len: Option<u64>) -> indicatif::ProgressBar {
    bars().add(len.map_or_else(indicatif::ProgressBar::new_spinner, indicatif::ProgressBar::new))
}

/// Where log lines go: stderr, each event written with the bars cleared
/// and drawn again after it (the `tracing` writer).
pub struct Stderr(Vec<u8>);

impl Stderr {
    /// A writer for one log event.
    pub fn make() -> Self {
        Stderr(Vec::new())
    }
}

impl Write for Stderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if self.0.is_empty() {
            return Ok(());
        }
        let text = std::mem::take(&mut self.0);
        bars().suspend(|| {
            let mut err = std::io::stderr().lock();
            err.write_all(&text).and_then(|()| err.flush())
        })
    }
}

impl Drop for Stderr {
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

/// Send what [`print`] prints to stderr from now on.
pub fn print_on_stderr() {
    ON_STDERR.store(true, Ordering::Relaxed);
}

/// Print text to stdout (to stderr after [`print_on_stderr`]).
pub fn print(text: &str) -> anyhow::Result<()> {
    if ON_STDERR.load(Ordering::Relaxed) {
        write_line(&mut std::io::stderr().lock(), text)
    } else {
        write_line(&mut std::io::stdout().lock(), text)
    }
}

/// `text`, ended by a newline if it has none, written and flushed.
fn write_line(out: &mut impl Write, text: &str) -> anyhow::Result<()> {
    out.write_all(text.as_bytes())?;
    if !text.ends_with('\n') {
        out.write_all(b"\n")?;
    }
    out.flush()?;
    Ok(())
}

/// Whether an error is stdout's reader going away.
pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// `n` and the noun in the number it takes: `count(1, "file")` is
/// "1 file", `count(2, "file")` "2 files" (nouns whose plural is not an
/// added `s` give it after a `|`: `"index|indexes"`).
pub fn count(n: impl Into<u64>, noun: &str) -> String {
    let n = n.into();
    let (one, many) = match noun.split_once('|') {
        Some((one, many)) => (one.to_owned(), many.to_owned()),
        None => (noun.to_owned(), format!("{noun}s")),
    };
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Lay out rows as an aligned text table.
pub fn text_table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        cells
            .enumerate()
            .map(|(i, c)| format!("{c:<w$}", w = widths[i]))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_owned()
    };
    let mut out = line(&mut header.iter().copied());
    out.push('\n');
    for row in rows {
        out.push_str(&line(&mut row.iter().map(String::as_str)));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_take_the_noun_s_number() {
        assert_eq!(count(1u64, "file"), "1 file");
        assert_eq!(count(0u64, "file"), "0 files");
        assert_eq!(count(2usize as u64, "run dir"), "2 run dirs");
        assert_eq!(count(1u64, "index|indexes"), "1 index");
        assert_eq!(count(3u64, "index|indexes"), "3 indexes");
    }
}
