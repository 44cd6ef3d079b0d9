//! Writing to stdout, treating a closed pipe (`sluice sql … | head`) as success.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether [`print`] writes to stderr (stdout then carries machine-readable
/// output only: `sluice bench --json`).
static ON_STDERR: AtomicBool = AtomicBool::new(false);

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
