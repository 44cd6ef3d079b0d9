//! The program a run starts as its workers.
//!
//! A worker is this same program started again with `__worker`: the
//! `sluice` binary, or, when sluice runs inside a Python interpreter (the
//! `sluice` command a `pip install` puts on PATH is a console script that
//! calls the library in process), that interpreter with `-m sluice`. The
//! running binary's path cannot say which: inside Python it is the
//! interpreter's own, resolved past the venv's symlink, so it would start a
//! Python without sluice and name the system's `python3` for Python steps.
//! A host that embeds sluice says so once, with [`set_host`]; everything
//! that starts "this program again" asks [`current`].

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::error::{Error, Result};

/// A program and the arguments that come before sluice's own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerProgram {
    program: PathBuf,
    leading: Vec<OsString>,
}

/// The host this process runs sluice in, when it is not the binary.
static HOST: OnceLock<WorkerProgram> = OnceLock::new();

impl WorkerProgram {
    /// A `sluice` binary.
    pub fn binary(path: impl Into<PathBuf>) -> Self {
        Self { program: path.into(), leading: Vec::new() }
    }

    /// An interpreter that runs sluice when given `leading` first (for
    /// Python: `python -m sluice`).
    pub fn hosted(
        interpreter: impl Into<PathBuf>,
        leading: impl IntoIterator<Item = impl Into<OsString>>,
    ) -> Self {
        Self { program: interpreter.into(), leading: leading.into_iter().map(Into::into).collect() }
    }

    /// The executable started.
    pub fn program(&self) -> &Path {
        &self.program
    }

    /// The arguments before sluice's own.
    pub fn leading(&self) -> &[OsString] {
        &self.leading
    }

    /// A command that starts this program, its leading arguments given.
    pub fn command(&self) -> std::process::Command {
        let mut command = std::process::Command::new(&self.program);
        command.args(&self.leading);
        command
    }

    /// The program and its leading arguments as words of a POSIX shell
    /// line, each quoted.
    pub fn shell_words(&self) -> String {
        std::iter::once(self.program.as_os_str())
            .chain(self.leading.iter().map(OsString::as_os_str))
            .map(|word| shell_quote(&word.to_string_lossy()))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

impl std::fmt::Display for WorkerProgram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.program.display())?;
        for word in &self.leading {
            write!(f, " {}", word.to_string_lossy())?;
        }
        Ok(())
    }
}

/// Say that this process runs sluice inside `host` (see the module docs).
/// The first call wins: a process has one host.
pub fn set_host(host: WorkerProgram) {
    let _ = HOST.set(host);
}

/// The host [`set_host`] named, if any.
pub fn host() -> Option<&'static WorkerProgram> {
    HOST.get()
}

/// This program, to start again: the host's, else the running binary.
pub fn current() -> Result<WorkerProgram> {
    if let Some(host) = HOST.get() {
        return Ok(host.clone());
    }
    let exe = std::env::current_exe()
        .map_err(|e| Error::io(Path::new("the running sluice binary"), e))?;
    Ok(WorkerProgram::binary(exe))
}

/// `text` single-quoted for a POSIX shell.
pub(crate) fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hosted_program_starts_its_interpreter_with_the_leading_arguments() {
        let program = WorkerProgram::hosted("/venv/bin/python", ["-m", "sluice"]);
        let command = program.command();
        assert_eq!(command.get_program(), "/venv/bin/python");
        let args: Vec<_> = command.get_args().collect();
        assert_eq!(args, ["-m", "sluice"]);
        assert_eq!(program.to_string(), "/venv/bin/python -m sluice");
    }

    #[test]
    fn shell_words_quote_every_word_so_a_shell_reads_them_back() {
        let program = WorkerProgram::hosted("/my venv/bin/py'thon", ["-m", "sluice"]);
        let line = format!("printf '%s\\n' {}", program.shell_words());
        let out = std::process::Command::new("sh").arg("-c").arg(&line).output().unwrap();
        assert_eq!(String::from_utf8(out.stdout).unwrap(), "/my venv/bin/py'thon\n-m\nsluice\n");
    }

    #[test]
    fn without_a_host_the_current_program_is_the_running_binary() {
        // Unit tests never set a host.
        let program = current().unwrap();
        assert_eq!(program.program(), std::env::current_exe().unwrap());
        assert!(program.leading().is_empty());
    }
}
