//! Running a tool for one unit, with nothing left behind.
//!
//! A unit's program runs in a process group of its own. Its stdout and
//! stderr are drained by threads that keep only the tail, so a chatty tool
//! costs no memory. The unit ends when the program's main process exits or
//! its time limit passes; either way the whole group is then killed, so a
//! background child (`tool &`) neither keeps the unit open nor outlives it.
//! Groups alive in this process are registered, so a worker whose
//! orchestrator died kills them before it exits ([`watch_parent`]).

use std::collections::BTreeSet;
use std::io::Read;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// How a tool run ended.
#[derive(Debug)]
pub struct ToolRun {
    /// The main process's exit status (`None` when it was killed at the
    /// time limit).
    pub status: Option<ExitStatus>,
    /// Whether the time limit ended it.
    pub timed_out: bool,
    /// Whether it was killed for using more memory than its limit.
    pub out_of_memory: bool,
    /// Wall time.
    pub elapsed: Duration,
    /// The tail of stdout, then stderr.
    pub output: String,
}

fn live_groups() -> &'static Mutex<BTreeSet<u32>> {
    static GROUPS: OnceLock<Mutex<BTreeSet<u32>>> = OnceLock::new();
    GROUPS.get_or_init(|| Mutex::new(BTreeSet::new()))
}

/// Register a process group this process started, to be killed if the
/// orchestrator dies ([`watch_parent`]).
pub(crate) fn register_group(pgid: u32) {
    if let Ok(mut g) = live_groups().lock() {
        g.insert(pgid);
    }
}

/// Forget a group registered with [`register_group`], once reaped.
pub(crate) fn forget_group(pgid: u32) {
    if let Ok(mut g) = live_groups().lock() {
        g.remove(&pgid);
    }
}

/// Kill a process group (SIGKILL to `-pgid`). Best effort. Never signals
/// this process's own group.
pub fn kill_group(pgid: u32) {
    if pgid <= 1 || pgid == std::process::id() {
        return;
    }
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{pgid}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// Kill every tool group this process started and has not reaped.
pub fn kill_live_groups() {
    let groups: Vec<u32> =
        live_groups().lock().map(|g| g.iter().copied().collect()).unwrap_or_default();
    for pgid in groups {
        kill_group(pgid);
    }
}

fn drain(mut pipe: impl Read + Send + 'static, keep: usize) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut tail: Vec<u8> = Vec::new();
        let mut buf = [0u8; 8192];
        while let Ok(n) = pipe.read(&mut buf) {
            if n == 0 {
                break;
            }
            tail.extend_from_slice(&buf[..n]);
            if tail.len() > 2 * keep {
                tail.drain(..tail.len() - keep);
            }
        }
        tail
    })
}

/// What a tool may use: wall time, and resident memory over its whole
/// process group (checked every [`MEMORY_TICK`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct ToolLimits {
    /// Wall time.
    pub time: Option<Duration>,
    /// Bytes of resident memory.
    pub memory: Option<u64>,
}

/// How often a tool's memory is measured against its limit.
pub const MEMORY_TICK: Duration = Duration::from_millis(100);

/// Run `command` (stdin closed, stdout/stderr captured) in its own process
/// group, within `limits`, keeping `keep` bytes of each output stream.
pub fn run_tool(command: Command, limits: ToolLimits, keep: usize) -> Result<ToolRun> {
    run_tool_reading(command, Stdio::null(), limits, keep)
}

/// [`run_tool`] with `stdin` as the tool's standard input (a hook reads the
/// run's summary there).
pub fn run_tool_reading(
    mut command: Command,
    stdin: Stdio,
    limits: ToolLimits,
    keep: usize,
) -> Result<ToolRun> {
    use std::os::unix::process::CommandExt;
    let program = command.get_program().to_string_lossy().into_owned();
    let started = Instant::now();
    let mut child = command
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|e| Error::operation("command", format!("cannot start `{program}`: {e}")))?;
    let pgid = child.id();
    register_group(pgid);
    let out = child.stdout.take().map(|p| drain(p, keep));
    let err = child.stderr.take().map(|p| drain(p, keep));
    let deadline = limits.time.map(|l| started + l);
    let mut timed_out = false;
    let mut out_of_memory = false;
    let mut next_measure = started + MEMORY_TICK;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) => {}
            Err(e) => {
                kill_group(pgid);
                return Err(Error::operation("command", format!("waiting for `{program}`: {e}")));
            }
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            timed_out = true;
            kill_group(pgid);
            let _ = child.wait();
            break None;
        }
        if let Some(most) = limits.memory
            && Instant::now() >= next_measure
        {
            next_measure = Instant::now() + MEMORY_TICK;
            if crate::host::group_rss(pgid) > most {
                out_of_memory = true;
                kill_group(pgid);
                let _ = child.wait();
                break None;
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    // The main process is done: whatever it left running goes with it, so
    // the pipes close and the unit ends now.
    kill_group(pgid);
    forget_group(pgid);
    let text = |h: Option<std::thread::JoinHandle<Vec<u8>>>| {
        h.and_then(|h| h.join().ok())
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    };
    let mut output = text(out);
    let stderr = text(err);
    if !stderr.is_empty() {
        if !output.is_empty() && !output.ends_with('\n') {
            output.push('\n');
        }
        output.push_str(&stderr);
    }
    Ok(ToolRun { status, timed_out, out_of_memory, elapsed: started.elapsed(), output })
}

/// How a child process ended, for execution errors: `exit status N`, or
/// `killed by signal N` (naming SIGKILL, what an OOM killer or `kill -9` sends).
pub(crate) fn describe_exit(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (_, Some(9)) => "killed by signal 9 (SIGKILL)".into(),
        (_, Some(s)) => format!("killed by signal {s}"),
        (Some(c), _) => format!("exit status {c}"),
        _ => status.to_string(),
    }
}

/// Exit this process when its parent dies (it is re-parented): for worker
/// processes, whose orchestrator may be killed while they run a unit. Tool
/// groups still running are killed first. Polls the parent pid from a
/// thread; safe code only.
pub fn watch_parent() {
    let parent = std::os::unix::process::parent_id();
    std::thread::spawn(move || {
        loop {
            std::thread::sleep(Duration::from_millis(200));
            if std::os::unix::process::parent_id() != parent {
                kill_live_groups();
                tracing::warn!("the orchestrator is gone; this worker exits");
                std::process::exit(137);
            }
        }
    });
}

/// The last `max` bytes of `text`, cut at a character boundary.
pub(crate) fn tail(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &text[start..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_end_at_a_char_boundary() {
        assert_eq!(tail("abc", 10), "abc");
        assert_eq!(tail("abcdef", 3), "…def");
        let t = tail("ééé", 3);
        assert!(t.ends_with('é'), "{t}");
    }

    fn within(time: Duration) -> ToolLimits {
        ToolLimits { time: Some(time), memory: None }
    }

    #[test]
    fn a_group_past_its_memory_is_killed_as_out_of_memory() {
        // A child of the tool grows past the limit: the group's memory counts.
        let mut c = Command::new("sh");
        c.args(["-c", "python3 -c 'x = b\"x\" * (300 << 20); import time; time.sleep(30)' & wait"]);
        let limits = ToolLimits { time: Some(Duration::from_secs(20)), memory: Some(100 << 20) };
        let run = run_tool(c, limits, 4096).unwrap();
        assert!(run.out_of_memory && run.status.is_none(), "{run:?}");
        assert!(run.elapsed < Duration::from_secs(10), "{run:?}");
    }

    #[test]
    fn a_background_child_neither_holds_the_unit_nor_survives_it() {
        let mut c = Command::new("sh");
        c.args(["-c", "sleep 30 & echo started; echo oops >&2"]);
        let run = run_tool(c, within(Duration::from_secs(20)), 4096).unwrap();
        assert!(run.elapsed < Duration::from_secs(10), "{run:?}");
        assert!(run.status.is_some_and(|s| s.success()));
        assert!(run.output.contains("started") && run.output.contains("oops"), "{run:?}");
    }

    #[test]
    fn the_time_limit_kills_the_whole_group() {
        let marker = tempfile::tempdir().unwrap();
        let file = marker.path().join("late");
        let mut c = Command::new("sh");
        c.args(["-c", &format!("(sleep 2; touch {}) & sleep 30", file.display())]);
        let run = run_tool(c, within(Duration::from_millis(300)), 4096).unwrap();
        assert!(run.timed_out && run.status.is_none(), "{run:?}");
        std::thread::sleep(Duration::from_secs(3));
        assert!(!file.exists(), "the background child was killed with its group");
    }

    #[test]
    fn only_the_tail_is_kept() {
        let mut c = Command::new("sh");
        c.args(["-c", "i=0; while [ $i -lt 2000 ]; do echo line$i; i=$((i+1)); done"]);
        let run = run_tool(c, ToolLimits::default(), 100).unwrap();
        assert!(run.output.len() <= 200 && run.output.contains("line1999"), "{}", run.output);
    }
}
