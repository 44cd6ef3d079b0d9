//! Worker-side staging: layout, sentinel-last, atomic files, scanning.

use std::path::Path;

use crate::common::{metrics, staged_batches, unit_files};
use sluice::records::{ArtifactEdge, Direction, ExecutionEdge, ExecutionRecord};
use sluice::registry::TypeRegistry;
use sluice::staging::{self, StagedExecution, StagingWriter, SyncPolicy};

fn execution(run_id: &str, success: bool) -> ExecutionRecord {
    ExecutionRecord {
        execution_run_id: run_id.into(),
        execution_spec_id: format!("spec-{run_id}"),
        step_run_id: "step-run-1".into(),
        origin_step_number: 1,
        operation_name: "score".into(),
        params: "{}".into(),
        timestamp_start: 1_700_000_000_000_000,
        timestamp_end: Some(1_700_000_000_500_000),
        worker_id: Some("w1".into()),
        compute_backend: Some("local".into()),
        success,
        error: (!success).then(|| "exit status 3".into()),
        tool_output: None,
        metadata: "{}".into(),
    }
}

/// The rows of each file of the unit staged in `dir`, in the unit's order.
fn staged_rows(dir: &Path) -> Vec<(String, usize)> {
    unit_files(dir)
        .iter()
        .map(|(name, bytes)| {
            (name.clone(), staged_batches(name, bytes).iter().map(|b| b.num_rows()).sum())
        })
        .collect()
}

#[test]
fn a_successful_execution_stages_every_table_sentinel_last() {
    let dir = tempfile::tempdir().unwrap();
    let registry = TypeRegistry::builtin();
    let root = dir.path().join("staging");
    let writer = StagingWriter::new(&root, registry.clone(), SyncPolicy::Always);
    assert!(writer.syncs());
    let outputs = {
        let tmp = tempfile::tempdir().unwrap();
        let rt = tokio::runtime::Runtime::new().unwrap();
        let lake = rt.block_on(sluice::Lake::init(tmp.path())).unwrap().0;
        metrics(&lake, 1, 3)
    };
    let run_id = "0a1b2c3d4e5f";
    let staged = StagedExecution {
        execution: execution(run_id, true),
        execution_edges: outputs
            .iter()
            .map(|a| ExecutionEdge {
                execution_run_id: run_id.into(),
                direction: Direction::Output,
                role: "scores".into(),
                artifact_id: a.id.to_hex(),
            })
            .collect(),
        artifact_edges: vec![ArtifactEdge {
            execution_run_id: run_id.into(),
            source_artifact_id: outputs[0].id.to_hex(),
            target_artifact_id: outputs[1].id.to_hex(),
            source_artifact_type: "metric".into(),
            target_artifact_type: "metric".into(),
            source_role: "scores".into(),
            target_role: "scores".into(),
            group_id: None,
            step_boundary: false,
        }],
        artifacts: outputs,
    };
    let unit = writer.write(&staged).unwrap();
    assert_eq!(unit, root.join("1_score/0a/0a1b2c3d4e5f.sluice"));
    // One file, the unit object, sealed by its rename; nothing else is left.
    let names: Vec<String> = std::fs::read_dir(unit.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, ["0a1b2c3d4e5f.sluice"]);
    // Inside, one small Arrow IPC stream per table touched, the sentinel last.
    assert_eq!(
        staged_rows(&unit),
        [
            ("metrics.arrow".to_owned(), 3),
            ("index.arrow".to_owned(), 3),
            ("artifact_edges.arrow".to_owned(), 1),
            ("execution_edges.arrow".to_owned(), 3),
            ("executions.arrow".to_owned(), 1),
        ]
    );
    // A run is staged once.
    let err = writer.write(&staged).unwrap_err().to_string();
    assert!(err.contains("already sealed"), "{err}");
}

#[test]
fn failed_executions_and_crashed_workers_are_told_apart() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("staging");
    let writer = StagingWriter::new(&root, TypeRegistry::builtin(), SyncPolicy::Detect);
    let failed = StagedExecution {
        execution: execution("ffff0001", false),
        artifacts: vec![],
        execution_edges: vec![ExecutionEdge {
            execution_run_id: "ffff0001".into(),
            direction: Direction::Input,
            role: "table".into(),
            artifact_id: "0".repeat(32),
        }],
        artifact_edges: vec![],
    };
    let failed_dir = writer.write(&failed).unwrap();
    let rows = staged_rows(&failed_dir);
    assert!(rows.contains(&("execution_edges.arrow".to_owned(), 1)), "{rows:?}");
    assert!(!rows.iter().any(|(name, _)| name.starts_with("metrics")), "{rows:?}");

    // A crashed worker: its unit under the hidden name, never renamed.
    writer
        .write_unsealed(&StagedExecution {
            execution: execution("cccc0002", true),
            ..failed.clone()
        })
        .unwrap();
    // Junk that does not fit the layout.
    std::fs::write(root.join("README"), "x").unwrap();
    std::fs::create_dir_all(root.join("1_score/zz/yy/aabb0003")).unwrap();
    std::fs::write(root.join("1_score/zz/aabb0004.sluice"), "not in its shard").unwrap();

    let found = staging::scan(&root, None).unwrap();
    assert_eq!(found.sealed.iter().map(|r| r.run_id.as_str()).collect::<Vec<_>>(), ["ffff0001"]);
    assert_eq!(found.unsealed.iter().map(|r| r.run_id.as_str()).collect::<Vec<_>>(), ["cccc0002"]);
    assert_eq!(found.foreign.len(), 3, "{:?}", found.foreign);
    assert!(staging::scan(&root, Some(2)).unwrap().sealed.is_empty());
}

#[test]
fn names_that_escape_the_staging_root_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let writer = StagingWriter::new(dir.path(), TypeRegistry::builtin(), SyncPolicy::Never);
    for (op, run) in
        [("../evil", "abcd1234"), ("ok", "../../etc/passwd"), ("a/b", "abcd1234"), ("ok", "ab\0cd")]
    {
        let mut e = execution(run, true);
        e.operation_name = op.into();
        let err = writer
            .write(&StagedExecution {
                execution: e,
                artifacts: vec![],
                execution_edges: vec![],
                artifact_edges: vec![],
            })
            .unwrap_err()
            .to_string();
        assert!(err.contains("rejected"), "{op}/{run}: {err}");
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "nothing was written");
}
