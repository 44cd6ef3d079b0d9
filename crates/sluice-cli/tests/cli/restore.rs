//! `sluice restore` killed with SIGKILL at many moments: after `sluice
//! recover` the lake is either untouched (the kill came before the restore
//! was journaled) or exactly the lake an uninterrupted restore produces —
//! which is the lake as of the target version — never a mix.

use std::path::Path;
use std::time::{Duration, Instant};

use sluice::query::AsOf;

use crate::Lake;
use crate::crash::{
    TABLES, check_journal, copy_dir, dump, dump_at, fraction, kill_after, kill_child_after,
    kill_command_after, new_lake, spawn_quiet, stage_mixed,
};

fn trials() -> u64 {
    crate::depth("SLUICE_RESTORE_TRIALS", 30, 4)
}

/// A pause before each table's restore (a test hook of `sluice restore`),
/// so the kills below land between table commits, not only before or after.
const PAUSE: Duration = Duration::from_millis(300);

/// Whether the journal holds a completed restore.
fn restored(root: &std::path::Path) -> bool {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let journal = sluice::lake::journal::read(&root.into(), None).await.unwrap();
        journal
            .entries()
            .iter()
            .any(|e| e.is_restore() && e.phase() == sluice::lake::journal::Phase::Completed)
    })
}

/// `kill_after` with the pause hook set.
fn kill_after_env(lake: &Lake, args: &[&str], delay: Duration) -> bool {
    kill_command_after(restore_command(lake, args), delay)
}

fn restore_command(lake: &Lake, args: &[&str]) -> std::process::Command {
    let mut command = lake.command(args);
    command.env("SLUICE_RESTORE_PAUSE_MS", PAUSE.as_millis().to_string());
    command
}

/// How many versions the journal's log holds.
fn journal_versions(root: &Path) -> usize {
    let log = root.join("orchestration/commits/_delta_log");
    std::fs::read_dir(&log)
        .unwrap()
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name();
            let name = name.to_string_lossy();
            name.strip_suffix(".json").is_some_and(|v| v.parse::<u64>().is_ok())
        })
        .count()
}

/// Start a restore, wait until its `started` row is in the journal (a new
/// journal version: the restore is now under way), then SIGKILL it `delay`
/// later unless it finished. Returns whether the kill came while it ran.
///
/// Anchoring the kill on the journal instead of on a reference run's wall
/// time keeps the kill inside the restore however loaded the machine is.
fn kill_after_journaled(lake: &Lake, args: &[&str], delay: Duration) -> bool {
    let before = journal_versions(&lake.root);
    let mut child = spawn_quiet(&mut restore_command(lake, args));
    let deadline = Instant::now() + Duration::from_secs(120);
    while journal_versions(&lake.root) == before {
        assert!(child.try_wait().unwrap().is_none(), "the restore exited before journaling");
        assert!(Instant::now() < deadline, "the restore never journaled");
        std::thread::sleep(Duration::from_millis(2));
    }
    kill_child_after(child, delay)
}

#[test]
fn restore_killed_at_random_moments_then_recover_is_all_or_nothing() {
    // Four lake versions, every kind of artifact; the restore goes back to 2.
    let template = new_lake();
    let files = template.root.join("referenced-files");
    for (step, seed) in [(1, 42), (2, 43), (3, 44), (1, 45)] {
        stage_mixed(&template, &files, 120, 1, 0.0, seed, step, 1);
        template.ok(&["commit"]);
    }
    let before = dump(&template.root);
    let as_of_two = dump_at(&template.root, Some(AsOf::Lake(2)));
    assert_ne!(before.0, as_of_two.0);

    // The reference: an uninterrupted restore equals reading as of 2.
    let reference = Lake::new();
    copy_dir(&template.root, &reference.root);
    let plan = reference.ok(&["restore", "--to", "2", "--dry-run"]);
    assert!(plan.contains("metrics"), "{plan}");
    let planned: serde_json::Value =
        serde_json::from_str(&reference.ok(&["restore", "--to", "2", "--dry-run", "--json"]))
            .unwrap();
    let tables = planned["plan"]["tables"].as_array().unwrap().len();
    let started = Instant::now();
    let out = restore_command(&reference, &["restore", "--to", "2"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let full = started.elapsed();
    let after = dump(&reference.root);
    assert_eq!(after.1, 0);
    for (i, (table, _)) in TABLES.iter().enumerate() {
        assert!(after.0[i] == as_of_two.0[i], "`{table}` after restore differs from --as-of 2");
    }
    let history = reference.ok(&["history", "--json"]);
    assert!(history.contains("restore to lake version 2"), "{history}");

    assert!(tables >= 3, "the restore changes several tables: {plan}");

    // Four trials in five kill once the restore is journaled, somewhere in
    // its table commits (each preceded by a pause); recover must finish
    // every one of them. The fifth kills at a moment of the reference run's
    // wall time: before the journal row, between tables, or after the end.
    let n = trials();
    for trial in 0..n {
        let lake = Lake::new();
        copy_dir(&template.root, &lake.root);
        let random = trial % 5 == 4;
        let (killed, delay) = if random {
            let delay = full.mul_f64(fraction(trial + 5000));
            (kill_after_env(&lake, &["restore", "--to", "2"], delay), delay)
        } else {
            let delay = PAUSE.mul_f64(tables as f64 * 0.95 * fraction(trial + 5000));
            let killed = kill_after_journaled(&lake, &["restore", "--to", "2"], delay);
            assert!(killed, "trial {trial}: the restore outran {tables} pauses ({delay:?})");
            (killed, delay)
        };
        let was_restored = restored(&lake.root);
        if trial % 4 == 0 {
            kill_after(&lake, &["recover"], full.mul_f64(fraction(trial + 7000) * 0.5));
        }
        lake.ok(&["recover"]);
        let got = dump(&lake.root);
        assert_eq!(got.1, 0, "trial {trial}: duplicate keys");
        let expected = if restored(&lake.root) { &after } else { &before };
        for (i, (table, _)) in TABLES.iter().enumerate() {
            assert!(
                got.0[i] == expected.0[i],
                "trial {trial}: `{table}` is neither the restored nor the original lake (delay {delay:?})"
            );
        }
        check_journal(&lake.root, trial);
        assert!(
            random || (killed && !was_restored && restored(&lake.root)),
            "trial {trial}: killed {delay:?} after its journal row, the restore must be finished by recover"
        );
    }
}
