//! How a step's units are laid out over array tasks, and the tasks over
//! arrays.
//!
//! A task is a job start on the cluster: a scheduler decision, a prolog, a
//! process and a lake opened. With one unit per task (the default) that is
//! paid per unit, which is right for units of minutes and ruinous for units
//! of milliseconds; `units_per_worker = "auto"` pays it once per CPU slot
//! instead. A cluster also caps an array's size (`MaxArraySize`, 1001 by
//! default), so a step of more tasks goes in several arrays; under a
//! `throttle` each waits for the one before (`--dependency=afterany`), so
//! that the throttle holds for the step, not per array.

use crate::pipeline::config::{StepConfig, UnitsPerTask};

/// SLURM's default `MaxArraySize`: indices 0..=1000.
const DEFAULT_MAX_ARRAY: usize = 1001;

/// Where a step's tasks go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Layout {
    /// Units per task (the last task may have fewer).
    pub per_task: usize,
    /// Tasks in all.
    pub tasks: usize,
    /// The arrays, as (first task, tasks in it).
    pub arrays: Vec<(usize, usize)>,
}

impl Layout {
    /// Lay `units` out: `setting` units per task, `slots` tasks at most when
    /// it is `Auto` (unknown slots: one unit per task), arrays of at most
    /// `max_array` tasks.
    pub(crate) fn plan(
        units: usize,
        setting: UnitsPerTask,
        slots: Option<usize>,
        max_array: usize,
    ) -> Layout {
        let per_task = match setting {
            UnitsPerTask::Fixed(n) => n.max(1),
            UnitsPerTask::Auto => units.div_ceil(slots.unwrap_or(units).max(1)).max(1),
        };
        let tasks = units.div_ceil(per_task);
        let max_array = max_array.max(1);
        let arrays = (0..tasks)
            .step_by(max_array)
            .map(|first| (first, max_array.min(tasks - first)))
            .collect();
        Layout { per_task, tasks, arrays }
    }

    /// The array holding `task`, and the task's index in it.
    pub(crate) fn locate(&self, task: usize) -> (usize, usize) {
        let array = self
            .arrays
            .iter()
            .position(|&(first, count)| task >= first && task < first + count)
            .unwrap_or(0);
        (array, task - self.arrays.get(array).map_or(0, |a| a.0))
    }
}

/// The CPU slots the step's tasks can use at once: its `throttle` when set,
/// else the partition's CPUs (not down or drained) over its `cpus` per task.
pub(crate) fn slots(step: &StepConfig) -> Option<usize> {
    if let Some(t) = step.resources.throttle {
        return Some(t as usize);
    }
    let text = super::command_output("sinfo", &["-h".into(), "-o".into(), "%P %C".into()]).ok()?;
    let cpus = partition_cpus(&text, step.resources.partition.as_deref())?;
    Some((cpus / step.resources.cpus.unwrap_or(1).max(1) as usize).max(1))
}

/// From `sinfo -o "%P %C"` lines ("debug* 0/2/0/2": allocated, idle,
/// other, total): the usable CPUs of `partition`, or of the default one
/// (marked `*`).
fn partition_cpus(text: &str, partition: Option<&str>) -> Option<usize> {
    let mut usable = None;
    for line in text.lines() {
        let Some((name, counts)) = line.trim().split_once(' ') else {
            continue;
        };
        let default = name.ends_with('*');
        let wanted = match partition {
            Some(p) => name.trim_end_matches('*') == p,
            None => default,
        };
        let numbers: Vec<usize> = counts.trim().split('/').filter_map(|n| n.parse().ok()).collect();
        if let (true, [_, _, other, total]) = (wanted, numbers.as_slice()) {
            *usable.get_or_insert(0) += total.saturating_sub(*other);
        }
    }
    usable
}

/// The cluster's `MaxArraySize` (from `scontrol show config`), or SLURM's
/// default.
pub(crate) fn max_array() -> usize {
    super::command_output("scontrol", &["show".into(), "config".into()])
        .ok()
        .and_then(|text| max_array_of(&text))
        .unwrap_or(DEFAULT_MAX_ARRAY)
}

fn max_array_of(config: &str) -> Option<usize> {
    config.lines().find_map(|line| {
        let (key, value) = line.split_once('=')?;
        (key.trim() == "MaxArraySize").then(|| value.trim().parse().ok())?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_sizes_fill_arrays_no_larger_than_the_cluster_allows() {
        let one = Layout::plan(2500, UnitsPerTask::Fixed(1), Some(2), 1001);
        assert_eq!(one.per_task, 1);
        assert_eq!(one.tasks, 2500);
        assert_eq!(one.arrays, vec![(0, 1001), (1001, 1001), (2002, 498)]);
        assert_eq!(one.locate(0), (0, 0));
        assert_eq!(one.locate(1001), (1, 0));
        assert_eq!(one.locate(2499), (2, 497));
        let four = Layout::plan(10, UnitsPerTask::Fixed(4), None, 1001);
        assert_eq!((four.per_task, four.tasks, four.arrays), (4, 3, vec![(0, 3)]));
    }

    #[test]
    fn auto_runs_one_task_per_slot_and_never_more_tasks_than_units() {
        let auto = Layout::plan(10_000, UnitsPerTask::Auto, Some(2), 1001);
        assert_eq!((auto.per_task, auto.tasks, auto.arrays), (5000, 2, vec![(0, 2)]));
        let few = Layout::plan(3, UnitsPerTask::Auto, Some(64), 1001);
        assert_eq!((few.per_task, few.tasks), (1, 3));
        let uneven = Layout::plan(10, UnitsPerTask::Auto, Some(4), 1001);
        assert_eq!((uneven.per_task, uneven.tasks), (3, 4));
        let unknown = Layout::plan(5, UnitsPerTask::Auto, None, 1001);
        assert_eq!((unknown.per_task, unknown.tasks), (1, 5), "no slots known: a unit a task");
        assert_eq!(Layout::plan(0, UnitsPerTask::Auto, Some(2), 1001).tasks, 0);
    }

    #[test]
    fn cluster_settings_are_read_from_slurms_own_words() {
        let sinfo = "debug* 0/2/0/2\nbig 10/20/4/34\n";
        assert_eq!(partition_cpus(sinfo, None), Some(2));
        assert_eq!(partition_cpus(sinfo, Some("big")), Some(30), "drained CPUs are not slots");
        assert_eq!(partition_cpus(sinfo, Some("gpu")), None);
        let config =
            "Configuration data as of …\nMaxArraySize            = 10001\nMaxJobCount = 10000\n";
        assert_eq!(max_array_of(config), Some(10001));
        assert_eq!(max_array_of("nothing"), None);
    }
}
