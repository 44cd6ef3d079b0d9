//! The Python interpreters a worker keeps for `python` steps.
//!
//! Starting an interpreter and importing a step's module costs tens to
//! hundreds of milliseconds; a unit of a trivial function costs well under
//! one. So a worker keeps each interpreter it starts ("a slot") and sends it
//! one unit after another, one JSON line each way (`worker.py`, embedded
//! in the binary). A slot runs one unit at a time; a worker running units
//! in parallel starts as many slots. An interpreter that dies in a unit (a
//! segfault, `os._exit`, a kill) fails that unit alone: the slot is dropped
//! and the next unit starts a new one. One past the unit's time limit is
//! killed with its process group, as a `command` tool is.
//!
//! Interpreters run in process groups of their own, registered with
//! [`process`](crate::pipeline::process), so a worker whose orchestrator
//! dies kills them; and each watches its parent, so one whose worker was
//! killed exits.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde::Deserialize;

use crate::pipeline::process;

/// The Python side of the protocol.
const WORKER_PY: &str = include_str!("worker.py");

/// Bytes of an interpreter's stderr kept, to say why it died.
const STDERR_TAIL: usize = 4096;

/// The interpreter of a step: its `python`, else the interpreter that hosts
/// this sluice (the `sluice` command of a pip install runs inside Python,
/// see [`worker_program`](crate::pipeline::worker_program)), else the
/// `python3` beside the running binary (a venv it was installed into), else
/// `python3` on PATH.
pub(super) fn interpreter_for(configured: Option<&str>) -> PathBuf {
    if let Some(path) = configured {
        return PathBuf::from(path);
    }
    if let Some(host) = crate::pipeline::worker_program::host() {
        return host.program().to_path_buf();
    }
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join("python3")))
        .filter(|p| p.is_file());
    beside.unwrap_or_else(|| PathBuf::from("python3"))
}

/// One parameter of a step's function.
#[derive(Debug, Clone, Deserialize)]
pub(super) struct Parameter {
    pub(super) name: String,
    /// `inspect.Parameter.kind`'s name (`POSITIONAL_OR_KEYWORD`, `VAR_KEYWORD`, …).
    pub(super) kind: String,
    /// Whether it has a default.
    pub(super) default: bool,
}

/// What the interpreter says of a step's function before anything runs.
#[derive(Debug, Clone, Deserialize)]
pub(super) struct Described {
    /// The file of the module that defines it.
    pub(super) origin: Option<PathBuf>,
    /// The interpreter's `major.minor`.
    pub(super) python: String,
    /// Its parameters (`None` when Python cannot tell, e.g. a builtin).
    pub(super) parameters: Option<Vec<Parameter>>,
    /// Output role → type, as its `@sluice.op` declares.
    pub(super) outputs: Option<std::collections::BTreeMap<String, String>>,
}

#[derive(Deserialize)]
struct DescribeReply {
    #[serde(default)]
    error: Option<String>,
    #[serde(flatten)]
    described: Option<Described>,
}

/// Import `function` in `interpreter` and describe it; the message of
/// what went wrong otherwise (no interpreter, no module, no function, an
/// import that raised). Asked once per process for each pair.
pub(super) fn describe(interpreter: &Path, function: &str) -> Result<Described, String> {
    type Cache = Mutex<HashMap<(PathBuf, String), Result<Described, String>>>;
    static DESCRIBED: OnceLock<Cache> = OnceLock::new();
    let key = (interpreter.to_path_buf(), function.to_owned());
    let cache = DESCRIBED.get_or_init(Default::default);
    if let Some(known) = cache.lock().ok().and_then(|c| c.get(&key).cloned()) {
        return known;
    }
    let described = describe_now(interpreter, function);
    if let Ok(mut c) = cache.lock() {
        c.insert(key, described.clone());
    }
    described
}

fn describe_now(interpreter: &Path, function: &str) -> Result<Described, String> {
    let out = Command::new(interpreter)
        .args(["-c", WORKER_PY, "inspect", function])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot start the interpreter `{}`: {e}", interpreter.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    // The module may print when imported: the answer is the last line.
    let last = stdout.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or_default();
    match serde_json::from_str::<DescribeReply>(last) {
        Ok(DescribeReply { error: Some(e), .. }) => Err(e),
        Ok(DescribeReply { described: Some(d), .. }) => Ok(d),
        _ => Err(format!(
            "the interpreter `{}` could not describe it ({}): {}",
            interpreter.display(),
            out.status,
            process_tail(&String::from_utf8_lossy(&out.stderr))
        )),
    }
}

fn process_tail(text: &str) -> String {
    crate::pipeline::process::tail(text.trim(), 1500)
}

/// A reply to one unit.
#[derive(Debug, Deserialize)]
pub(super) struct Reply {
    pub(super) ok: bool,
    #[serde(default)]
    pub(super) outputs: Vec<Written>,
    #[serde(default)]
    pub(super) error: Option<String>,
    #[serde(default)]
    pub(super) traceback: Option<String>,
    /// What the function printed.
    #[serde(default)]
    pub(super) log: String,
}

/// One value returned for an output role: a file written (data, file_ref)
/// or the value itself (a dict: metric, config, declared types).
#[derive(Debug, Deserialize)]
pub(super) struct Written {
    pub(super) role: String,
    #[serde(rename = "type")]
    pub(super) type_key: String,
    #[serde(default)]
    pub(super) path: Option<PathBuf>,
    #[serde(default)]
    pub(super) value: Option<serde_json::Value>,
}

/// Why a unit got no reply.
#[derive(Debug)]
pub(super) enum Lost {
    /// The interpreter could not be started or written to.
    Start(String),
    /// It passed the time limit and was killed.
    TimedOut(Duration),
    /// It died in the unit (the exit, and the end of its stderr).
    Died(String),
}

impl std::fmt::Display for Lost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Lost::Start(why) => f.write_str(why),
            Lost::TimedOut(after) => {
                write!(f, "timed out after {:.1}s (the step's time limit)", after.as_secs_f64())
            }
            Lost::Died(why) => write!(f, "killed its interpreter: {why}"),
        }
    }
}

/// A running interpreter serving units.
struct Slot {
    interpreter: PathBuf,
    child: Child,
    stdin: ChildStdin,
    replies: Receiver<String>,
    stderr: Arc<Mutex<Vec<u8>>>,
}

fn idle() -> &'static Mutex<Vec<Slot>> {
    static IDLE: OnceLock<Mutex<Vec<Slot>>> = OnceLock::new();
    IDLE.get_or_init(|| Mutex::new(Vec::new()))
}

impl Slot {
    fn start(interpreter: &Path) -> Result<Slot, Lost> {
        use std::os::unix::process::CommandExt;
        let mut child = Command::new(interpreter)
            .args(["-u", "-c", WORKER_PY, "serve"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .map_err(|e| {
                Lost::Start(format!(
                    "cannot start the interpreter `{}`: {e}",
                    interpreter.display()
                ))
            })?;
        process::register_group(child.id());
        let (Some(stdin), Some(stdout), Some(mut stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            unreachable!("every stream of the interpreter is piped");
        };
        let (send, replies) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        let kept = Arc::new(Mutex::new(Vec::new()));
        let tail = kept.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stderr.read(&mut buf) {
                if n == 0 {
                    break;
                }
                if let Ok(mut t) = tail.lock() {
                    t.extend_from_slice(&buf[..n]);
                    if t.len() > 2 * STDERR_TAIL {
                        let cut = t.len() - STDERR_TAIL;
                        t.drain(..cut);
                    }
                }
            }
        });
        Ok(Slot { interpreter: interpreter.to_path_buf(), child, stdin, replies, stderr: kept })
    }

    /// Kill the interpreter's group and say how it ended.
    fn end(mut self) -> String {
        let pgid = self.child.id();
        process::kill_group(pgid);
        let status = self.child.wait().map(crate::pipeline::describe_exit);
        process::forget_group(pgid);
        let stderr = self.stderr.lock().map(|t| String::from_utf8_lossy(&t).into_owned());
        let stderr = stderr.unwrap_or_default();
        let status = status.unwrap_or_else(|e| format!("unknown ({e})"));
        if stderr.trim().is_empty() {
            status
        } else {
            format!("{status}; its stderr ended with:\n{}", process_tail(&stderr))
        }
    }
}

/// Run one unit's `request` in an interpreter of `interpreter`, at most
/// `limit`.
pub(super) fn call(
    interpreter: &Path,
    request: &serde_json::Value,
    limit: Option<Duration>,
) -> Result<Reply, Lost> {
    let kept = idle().lock().ok().and_then(|mut slots| {
        let at = slots.iter().position(|s| s.interpreter == interpreter)?;
        Some(slots.swap_remove(at))
    });
    let mut slot = match kept {
        Some(slot) => slot,
        None => Slot::start(interpreter)?,
    };
    let started = Instant::now();
    let mut line = request.to_string();
    line.push('\n');
    if let Err(e) = slot.stdin.write_all(line.as_bytes()).and_then(|()| slot.stdin.flush()) {
        return Err(Lost::Died(format!("{} (writing the unit to it: {e})", slot.end())));
    }
    // No limit: a unit may run for days; still, wake to see the interpreter.
    let wait = limit.unwrap_or(Duration::from_secs(365 * 24 * 3600));
    match slot.replies.recv_timeout(wait) {
        Ok(text) => match serde_json::from_str::<Reply>(&text) {
            Ok(reply) => {
                if let Ok(mut slots) = idle().lock() {
                    slots.push(slot);
                }
                Ok(reply)
            }
            Err(e) => {
                let answer = process_tail(&text);
                Err(Lost::Died(format!(
                    "it answered {answer:?}, not a reply ({e}); {}",
                    slot.end()
                )))
            }
        },
        Err(RecvTimeoutError::Timeout) => {
            slot.end();
            Err(Lost::TimedOut(started.elapsed()))
        }
        Err(RecvTimeoutError::Disconnected) => Err(Lost::Died(slot.end())),
    }
}
