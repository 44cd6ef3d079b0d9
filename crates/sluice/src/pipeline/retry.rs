//! Retries: how a unit failed, and whether and when it runs again.
//!
//! A failed unit carries a [`FailureKind`] from whoever saw it fail: the
//! worker (the tool's exit code or signal, the step's time limit, an
//! error of the operation), the local backend (its worker process died),
//! or SLURM's accounting (a task preempted, its node lost, out of memory).
//! A step's [`RetryPolicy`] (`retries`, `retry_delay`, `backoff`,
//! `retry_on`, `no_retry_on`; per step or for the whole pipeline) says
//! which kinds run again and after how long.
//!
//! Retries go in rounds: after a dispatch round is committed, the units
//! whose failure the policy retries are dispatched again as one round (on
//! SLURM one array of just those units, under the step's throttle), each
//! with a new run id and the next attempt number. Every attempt keeps its
//! own execution row (`attempt`, `failure`, and on a retry `retry_of`); a
//! spec still succeeds at most once, which the executions table's commit
//! decides (see `lake::unique_success`), not this module.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Why a unit failed, as far as retries care.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FailureKind {
    /// Its tool exited with this code.
    Exit(i32),
    /// Its tool was killed by this signal.
    Signal(i32),
    /// It passed the step's time limit.
    Timeout,
    /// It ran out of memory.
    Oom,
    /// The scheduler preempted it.
    Preempted,
    /// Its node failed (or did not boot).
    NodeFail,
    /// Its worker or task died without a word about it, or was cancelled.
    Lost,
    /// The operation failed otherwise (bad input, an exception, bad output).
    Error,
}

impl fmt::Display for FailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FailureKind::Exit(code) => write!(f, "exit:{code}"),
            FailureKind::Signal(signal) => write!(f, "signal:{signal}"),
            FailureKind::Timeout => f.write_str("timeout"),
            FailureKind::Oom => f.write_str("oom"),
            FailureKind::Preempted => f.write_str("preempted"),
            FailureKind::NodeFail => f.write_str("node_fail"),
            FailureKind::Lost => f.write_str("lost"),
            FailureKind::Error => f.write_str("error"),
        }
    }
}

impl FailureKind {
    /// Parse what [`Display`](fmt::Display) writes.
    pub fn parse(text: &str) -> Option<Self> {
        if let Some(code) = text.strip_prefix("exit:") {
            return code.parse().ok().map(FailureKind::Exit);
        }
        if let Some(signal) = text.strip_prefix("signal:") {
            return signal.parse().ok().map(FailureKind::Signal);
        }
        Some(match text {
            "timeout" => FailureKind::Timeout,
            "oom" => FailureKind::Oom,
            "preempted" => FailureKind::Preempted,
            "node_fail" => FailureKind::NodeFail,
            "lost" => FailureKind::Lost,
            "error" => FailureKind::Error,
            _ => return None,
        })
    }

    /// How a tool's process ended, when it failed.
    pub fn of_exit(status: std::process::ExitStatus) -> Option<Self> {
        use std::os::unix::process::ExitStatusExt;
        match (status.code(), status.signal()) {
            (Some(0), _) => None,
            (Some(code), _) => Some(FailureKind::Exit(code)),
            (_, Some(signal)) => Some(FailureKind::Signal(signal)),
            _ => Some(FailureKind::Lost),
        }
    }

    /// The kind of a SLURM task's final state (`None`: a state that says
    /// nothing more than that the unit is missing).
    pub fn of_slurm_state(state: &str) -> Option<Self> {
        Some(match state {
            "TIMEOUT" | "DEADLINE" => FailureKind::Timeout,
            "OUT_OF_MEMORY" => FailureKind::Oom,
            "PREEMPTED" => FailureKind::Preempted,
            "NODE_FAIL" | "BOOT_FAIL" => FailureKind::NodeFail,
            _ => return None,
        })
    }
}

impl Serialize for FailureKind {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for FailureKind {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        FailureKind::parse(&text)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown failure kind `{text}`")))
    }
}

/// One entry of `retry_on` / `no_retry_on`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryCondition {
    /// Every failure.
    Any,
    /// This exact kind (an exit code, a signal, or a named kind).
    Kind(FailureKind),
}

impl RetryCondition {
    fn matches(&self, kind: FailureKind) -> bool {
        match self {
            RetryCondition::Any => true,
            RetryCondition::Kind(k) => *k == kind,
        }
    }

    /// Parse one entry as written in a pipeline file: an exit code (`3`),
    /// `"any"`, `"timeout"`, `"oom"`, `"preempted"`, `"node_fail"`,
    /// `"lost"`, `"error"`, `"exit:3"`, `"signal:9"` or a signal's name
    /// (`"SIGKILL"`, `"sigterm"`).
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.trim();
        if text == "any" {
            return Some(RetryCondition::Any);
        }
        if let Ok(code) = text.parse::<i32>() {
            return Some(RetryCondition::Kind(FailureKind::Exit(code)));
        }
        if let Some(signal) = signal_number(text) {
            return Some(RetryCondition::Kind(FailureKind::Signal(signal)));
        }
        FailureKind::parse(text).map(RetryCondition::Kind)
    }
}

/// The number of a signal written by name (`SIGKILL`, `term`).
fn signal_number(text: &str) -> Option<i32> {
    let upper = text.to_ascii_uppercase();
    let name = upper.strip_prefix("SIG").unwrap_or(&upper);
    Some(match name {
        "HUP" => 1,
        "INT" => 2,
        "QUIT" => 3,
        "ILL" => 4,
        "ABRT" => 6,
        "BUS" => 7,
        "FPE" => 8,
        "KILL" => 9,
        "SEGV" => 11,
        "PIPE" => 13,
        "ALRM" => 14,
        "TERM" => 15,
        "USR1" => 10,
        "USR2" => 12,
        _ => return None,
    })
}

impl fmt::Display for RetryCondition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RetryCondition::Any => f.write_str("any"),
            RetryCondition::Kind(kind) => kind.fmt(f),
        }
    }
}

/// A `retry_on` entry as TOML has it: an exit code or a word.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ConditionText {
    /// An exit code.
    Code(i64),
    /// A word (`"timeout"`, `"signal:9"`, `"any"`, …).
    Text(String),
}

impl ConditionText {
    /// The condition, or a message saying what is wrong.
    pub fn condition(&self) -> Result<RetryCondition, String> {
        let text = match self {
            ConditionText::Code(code) => code.to_string(),
            ConditionText::Text(text) => text.clone(),
        };
        RetryCondition::parse(&text).ok_or_else(|| {
            format!(
                "`{text}` is not a retry condition: an exit code (3), \"any\", \"timeout\", \"oom\", \
                 \"preempted\", \"node_fail\", \"lost\", \"error\", \"signal:9\" or a signal's name (\"SIGKILL\")"
            )
        })
    }
}

/// How the delay grows from one retry round to the next.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Backoff {
    /// The same delay before every round.
    #[default]
    Fixed,
    /// `retry_delay`, then twice it, four times it… up to `retry_delay_max`.
    Exponential,
}

/// What a step does with failed units.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Rounds of retries after the first attempt (0: none).
    pub retries: u32,
    /// Delay before the first retry round.
    pub delay: Duration,
    /// The longest delay exponential backoff reaches.
    pub max_delay: Duration,
    /// How the delay grows.
    pub backoff: Backoff,
    /// A share of each delay (0 to 1) drawn at random and added, so that
    /// the retries of many runs do not meet.
    pub jitter: f64,
    /// Failures that are retried (empty: any).
    pub retry_on: Vec<RetryCondition>,
    /// Failures that are never retried, whatever `retry_on` says.
    pub no_retry_on: Vec<RetryCondition>,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            retries: 0,
            delay: Duration::ZERO,
            max_delay: Duration::from_secs(600),
            backoff: Backoff::Fixed,
            jitter: 0.0,
            retry_on: Vec::new(),
            no_retry_on: Vec::new(),
        }
    }
}

impl RetryPolicy {
    /// Whether a unit that failed as `kind` in attempt `attempt` (1-based)
    /// runs again.
    pub fn retries(&self, kind: FailureKind, attempt: u32) -> bool {
        attempt <= self.retries
            && !self.no_retry_on.iter().any(|c| c.matches(kind))
            && (self.retry_on.is_empty() || self.retry_on.iter().any(|c| c.matches(kind)))
    }

    /// The delay before retry round `round` (1 for the first retry), with
    /// `unit` in `[0, 1)` as the random share of the jitter.
    pub fn delay_before(&self, round: u32, unit: f64) -> Duration {
        let base = match self.backoff {
            Backoff::Fixed => self.delay,
            Backoff::Exponential => {
                let factor = 2f64.powi(i32::try_from(round.saturating_sub(1)).unwrap_or(i32::MAX));
                let scaled = self.delay.as_secs_f64() * factor;
                Duration::from_secs_f64(scaled.min(self.max_delay.as_secs_f64()))
            }
        };
        base + base.mul_f64(self.jitter.clamp(0.0, 1.0) * unit.clamp(0.0, 1.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_print_and_parse_back() {
        for kind in [
            FailureKind::Exit(3),
            FailureKind::Signal(9),
            FailureKind::Timeout,
            FailureKind::Oom,
            FailureKind::Preempted,
            FailureKind::NodeFail,
            FailureKind::Lost,
            FailureKind::Error,
        ] {
            assert_eq!(FailureKind::parse(&kind.to_string()), Some(kind));
            let json = serde_json::to_string(&kind).unwrap();
            assert_eq!(serde_json::from_str::<FailureKind>(&json).unwrap(), kind);
        }
        assert_eq!(FailureKind::parse("exit:x"), None);
        assert_eq!(FailureKind::of_slurm_state("BOOT_FAIL"), Some(FailureKind::NodeFail));
        assert_eq!(FailureKind::of_slurm_state("FAILED"), None);
    }

    #[test]
    fn conditions_are_codes_kinds_and_signal_names() {
        let parse = |t: &str| RetryCondition::parse(t).unwrap();
        assert_eq!(parse("3"), RetryCondition::Kind(FailureKind::Exit(3)));
        assert_eq!(parse("SIGKILL"), RetryCondition::Kind(FailureKind::Signal(9)));
        assert_eq!(parse("term"), RetryCondition::Kind(FailureKind::Signal(15)));
        assert_eq!(parse("signal:9"), RetryCondition::Kind(FailureKind::Signal(9)));
        assert_eq!(parse("preempted"), RetryCondition::Kind(FailureKind::Preempted));
        assert_eq!(parse("any"), RetryCondition::Any);
        assert!(RetryCondition::parse("sometimes").is_none());
        assert!(ConditionText::Text("nope".into()).condition().unwrap_err().contains("`nope`"));
    }

    #[test]
    fn retry_on_and_no_retry_on_decide_with_the_attempt_count() {
        let policy = RetryPolicy {
            retries: 2,
            retry_on: vec![RetryCondition::Any],
            no_retry_on: vec![RetryCondition::Kind(FailureKind::Exit(2))],
            ..RetryPolicy::default()
        };
        assert!(policy.retries(FailureKind::Exit(1), 1));
        assert!(policy.retries(FailureKind::Timeout, 2));
        assert!(!policy.retries(FailureKind::Exit(1), 3), "two retries, three attempts");
        assert!(!policy.retries(FailureKind::Exit(2), 1), "no_retry_on wins");
        let only_timeouts = RetryPolicy {
            retries: 1,
            retry_on: vec![RetryCondition::Kind(FailureKind::Timeout)],
            ..RetryPolicy::default()
        };
        assert!(only_timeouts.retries(FailureKind::Timeout, 1));
        assert!(!only_timeouts.retries(FailureKind::Exit(1), 1));
        assert!(!RetryPolicy::default().retries(FailureKind::Lost, 1));
    }

    #[test]
    fn exponential_backoff_doubles_up_to_its_cap_and_jitter_stays_in_bounds() {
        let policy = RetryPolicy {
            retries: 10,
            delay: Duration::from_secs(2),
            max_delay: Duration::from_secs(10),
            backoff: Backoff::Exponential,
            jitter: 0.5,
            ..RetryPolicy::default()
        };
        assert_eq!(policy.delay_before(1, 0.0), Duration::from_secs(2));
        assert_eq!(policy.delay_before(2, 0.0), Duration::from_secs(4));
        assert_eq!(policy.delay_before(3, 0.0), Duration::from_secs(8));
        assert_eq!(policy.delay_before(4, 0.0), Duration::from_secs(10));
        assert_eq!(policy.delay_before(40, 0.0), Duration::from_secs(10));
        assert_eq!(policy.delay_before(1, 1.0), Duration::from_secs(3));
        let fixed = RetryPolicy { backoff: Backoff::Fixed, ..policy };
        assert_eq!(fixed.delay_before(5, 0.0), Duration::from_secs(2));
    }
}
