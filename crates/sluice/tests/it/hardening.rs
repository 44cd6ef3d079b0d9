//! Exactly-once under faults, at the library level: one test per way the
//! earlier commit path could lose, duplicate or hide data (named after the
//! item of the hardening issue it reproduces).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use serde_json::json;
use sluice::artifact::{ArtifactId, DataFormat, FieldValue};
use sluice::commit::manifest::{self, Manifest};
use sluice::error::Error;
use sluice::lake::append::Append;
use sluice::lake::delta::table;
use sluice::lake::journal::{self, JournalEntry, Phase};
use sluice::lake::layout::TableSpec;
use sluice::pipeline::{Operations, Pipeline, PipelineConfig, StepStatus};
use sluice::query::AsOf;
use sluice::staging;
use sluice::staging::synthetic::{self, SyntheticSpec};
use sluice::{Artifact, Draft, Lake};

use crate::commit::{scalar, table_counts, writer};
use crate::common::{edit_unit, file_mut, ipc_bytes, lake, metrics, staged_batches, unit_files};

fn spec(seed: u64) -> SyntheticSpec {
    SyntheticSpec { seed, duplicate_fraction: 0.2, ..SyntheticSpec::default() }
}

fn staging_root(lake: &Lake) -> std::path::PathBuf {
    staging::default_root(lake.root().local().unwrap())
}

/// One staged execution of `artifacts`, written as synthetic run `index`.
fn stage_with(lake: &Lake, seed: u64, artifacts: Vec<Artifact>) -> std::path::PathBuf {
    let (mut staged, _) = synthetic::execution(&spec(seed), lake.registry(), 0).unwrap();
    let run = staged.execution.execution_run_id.clone();
    staged.execution_edges = artifacts
        .iter()
        .map(|a| sluice::records::ExecutionEdge {
            execution_run_id: run.clone(),
            direction: sluice::records::Direction::Output,
            role: "out".into(),
            artifact_id: a.id.to_hex(),
        })
        .collect();
    staged.artifact_edges.clear();
    staged.artifacts = artifacts;
    writer(lake).write(&staged).unwrap()
}

#[tokio::test]
async fn item1_a_lost_journal_is_refused_and_rebuilt_not_reused() {
    let (_dir, lake) = lake().await;
    synthetic::stage_range(&writer(&lake), &spec(1), lake.registry(), 0..30).unwrap();
    lake.commit().with_chunk_size(10).execute().await.unwrap();
    let before = table_counts(&lake).await;

    // The journal disappears (or is restored from an old copy); numbering
    // would restart at 1 while every table carries sequence 3.
    std::fs::remove_dir_all(lake.root().local().unwrap().join("orchestration/commits")).unwrap();
    synthetic::stage_range(&writer(&lake), &spec(2), lake.registry(), 0..20).unwrap();
    let err = lake.commit().execute().await.unwrap_err();
    assert!(matches!(err, Error::JournalBehind { journal: 0, tables: 3 }), "{err}");
    assert!(err.to_string().contains("sluice doctor --repair"), "{err}");
    // Nothing was committed and nothing left staging.
    assert_eq!(table_counts(&lake).await, before);
    assert_eq!(staging::scan(&staging_root(&lake), None).unwrap().sealed.len(), 20);

    let repair = sluice::commit::doctor::repair_journal(&lake).await.unwrap();
    assert_eq!(repair.rebuilt_completed, vec![1, 2, 3]);
    let report = lake.commit().execute().await.unwrap();
    assert_eq!(report.sequences, vec![4], "numbering continues after the tables' last");
    assert_eq!(report.runs_committed, 20);
    let counts = table_counts(&lake).await;
    assert_eq!(counts["executions"].0, "50");
    for (table, (rows, distinct)) in &counts {
        assert_eq!(rows, distinct, "{table}: duplicate keys");
    }
}

#[tokio::test]
async fn item1_a_reused_number_never_makes_a_table_skip() {
    // Before: a table whose `sluice-commit` tag was >= the new number was
    // skipped and the runs removed anyway. Now a table is skipped only when
    // it holds a commit with this very sequence's token.
    let (_dir, lake) = lake().await;
    synthetic::stage_range(&writer(&lake), &spec(3), lake.registry(), 0..10).unwrap();
    lake.commit().execute().await.unwrap();
    // A rebuilt journal that knows less than the tables, repaired, then a
    // stale number handed to a new sequence would still not skip: prove it
    // by committing after a repair that rebuilt sequence 1.
    std::fs::remove_dir_all(lake.root().local().unwrap().join("orchestration/commits")).unwrap();
    sluice::commit::doctor::repair_journal(&lake).await.unwrap();
    synthetic::stage_range(&writer(&lake), &spec(4), lake.registry(), 0..10).unwrap();
    let report = lake.commit().execute().await.unwrap();
    assert_eq!(report.runs_committed, 10);
    assert_eq!(scalar(&lake, "SELECT count(*) FROM executions").await, "20");
    assert!(report.rows_added["metrics"] > 0, "{report:?}");
}

/// `n` data artifacts whose content adds up to more than a 32-bit offset
/// holds, cheaply: Arrow IPC files of one binary column of zeros (each
/// distinct by its last byte).
fn huge_data(lake: &Lake, n: usize, bytes_each: usize) -> Vec<Artifact> {
    use deltalake::arrow::array::{ArrayRef, BinaryArray};
    use deltalake::arrow::ipc::writer::FileWriter;
    use deltalake::arrow::record_batch::RecordBatch;
    (0..n)
        .map(|i| {
            let mut payload = vec![0u8; bytes_each];
            if let Some(last) = payload.last_mut() {
                *last = i as u8 + 1;
            }
            let column: ArrayRef = Arc::new(BinaryArray::from_vec(vec![&payload[..]]));
            let batch = RecordBatch::try_from_iter([("blob", column)]).unwrap();
            let mut file = Vec::new();
            let mut w = FileWriter::try_new(&mut file, &batch.schema()).unwrap();
            w.write(&batch).unwrap();
            w.finish().unwrap();
            drop(w);
            Draft::data(file, DataFormat::Arrow).with_step(1).finalize(lake.registry()).unwrap()
        })
        .collect()
}

#[tokio::test]
async fn item2_more_than_2_gib_of_data_in_one_chunk_commits() {
    let (_dir, lake) = lake().await;
    // Three runs of 760 MB each: 2.2 GB of binary content in one sequence
    // (zeros: tiny on disk, full size once decoded).
    let big = huge_data(&lake, 3, 760 << 20);
    let ids: Vec<ArtifactId> = big.iter().map(|a| a.id).collect();
    for (i, artifact) in big.into_iter().enumerate() {
        stage_with(&lake, 100 + i as u64, vec![artifact]);
    }
    let report = lake.commit().execute().await.unwrap();
    assert!(report.quarantined.is_empty(), "{report:?}");
    assert_eq!(report.runs_committed, 3);
    assert_eq!(report.sequences.len(), 1, "one chunk: {report:?}");
    assert_eq!(scalar(&lake, "SELECT count(*) FROM data").await, "3");
    let got = lake.get(ids[2]).await.unwrap();
    assert_eq!(got.field("size_bytes").as_int().map(|s| s > 760 << 20), Some(true));
    // The lake is not wedged: the next commit works.
    synthetic::stage_range(&writer(&lake), &spec(5), lake.registry(), 0..5).unwrap();
    assert_eq!(lake.commit().execute().await.unwrap().runs_committed, 5);
}

/// Start a sequence whose index commit fails: its content is committed,
/// its started row and manifest stay.
async fn half_committed_sequence(lake: &Lake) -> i64 {
    synthetic::stage_range(&writer(lake), &spec(6), lake.registry(), 0..10).unwrap();
    let err =
        lake.commit().with_failpoint(Some("commit:index".into())).execute().await.unwrap_err();
    assert!(err.to_string().contains("table `index`"), "{err}");
    journal::read(lake.root(), None).await.unwrap().unfinished()[0].seq
}

#[tokio::test]
async fn item3_an_orphaned_started_row_does_not_pin_readers() {
    let (_dir, lake) = lake().await;
    lake.put(&metrics(&lake, 1, 3)).await.unwrap();
    let seq = half_committed_sequence(&lake).await;
    // While the manifest exists the sequence can be finished: readers stay
    // at the point before it.
    assert_eq!(scalar(&lake, "SELECT count(*) FROM index").await, "3");
    // Someone cleans staging by hand: the manifest is gone, and the started
    // row's owner is a process that no longer exists.
    std::fs::remove_dir_all(staging_root(&lake)).unwrap();
    let dead_owner = format!("{}:4194303:1", sluice::host::machine());
    rewrite_owner(&lake, seq, &dead_owner).await;
    // Readers are not pinned: a later put is visible at once.
    lake.put(&metrics(&lake, 2, 4)).await.unwrap();
    assert_eq!(scalar(&lake, "SELECT count(*) FROM index").await, "7");
    // `recover` records it as abandoned, with the reason.
    let report = lake.recover().execute().await.unwrap();
    assert_eq!(report.abandoned.len(), 1, "{report:?}");
    assert!(report.abandoned[0].1.contains("is gone"), "{report:?}");
    let journal = journal::read(lake.root(), None).await.unwrap();
    assert!(journal.unfinished().is_empty());
    assert_eq!(
        scalar(
            &lake,
            "SELECT count(*) FROM commits WHERE phase = 'abandoned' AND reason LIKE '%is gone%'"
        )
        .await,
        "1"
    );
}

/// Give a started row another owner (as if another process had claimed it).
async fn rewrite_owner(lake: &Lake, seq: i64, owner: &str) {
    let j = journal::read(lake.root(), None).await.unwrap();
    let started = j.unfinished().into_iter().find(|e| e.seq == seq).unwrap().clone();
    // Close the real row and claim a twin under the dead owner.
    journal::append(lake.root(), |_| {
        Ok(Some(JournalEntry {
            phase: Some(Phase::Abandoned),
            reason: Some("test: replaced by a twin".into()),
            ..started.clone()
        }))
    })
    .await
    .unwrap();
    journal::append(lake.root(), |_| {
        Ok(Some(JournalEntry {
            token: format!("{}-twin", started.token),
            owner: owner.to_owned(),
            ..started.clone()
        }))
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn item4_manifest_paths_cannot_reach_outside_staging() {
    let (_dir, lake) = lake().await;
    lake.put(&metrics(&lake, 1, 2)).await.unwrap();
    let root = staging_root(&lake);
    std::fs::create_dir_all(&root).unwrap();
    // A completed sequence whose manifest names a folder outside staging.
    let token = "forged-token".to_owned();
    journal::append(lake.root(), |j| {
        Ok(Some(JournalEntry {
            seq: j.max_seq() + 1,
            phase: Some(Phase::Completed),
            token: token.clone(),
            ..JournalEntry::default()
        }))
    })
    .await
    .unwrap();
    let seq = journal::read(lake.root(), None).await.unwrap().max_seq();
    let evil = Manifest {
        seq,
        token: token.clone(),
        runs: vec!["0_x/../../artifacts".into(), "../../artifacts/metrics".into(), "/tmp".into()],
    };
    manifest::write(&root, &evil, false).unwrap();
    lake.commit().execute().await.unwrap();
    assert!(
        lake.root().local().unwrap().join("artifacts/metrics/_delta_log").is_dir(),
        "nothing outside staging removed"
    );
    assert_eq!(scalar(&lake, "SELECT count(*) FROM metrics").await, "2");
    assert!(manifest::read_all(&root).unwrap().is_empty(), "the manifest was consumed");
}

#[tokio::test]
async fn item5_staged_content_is_rederived_not_trusted() {
    let (_dir, lake) = lake().await;
    let registry = lake.registry().clone();
    let forged = |type_key: &str, fields: BTreeMap<String, FieldValue>, identity: &[u8]| Artifact {
        id: ArtifactId::compute(type_key, identity),
        type_key: type_key.into(),
        origin_step_number: 1,
        metadata: Default::default(),
        external_path: None,
        fields,
    };
    let text = |t: &str| FieldValue::String(t.into());
    let content = |t: &str| BTreeMap::from([("content".to_owned(), text(t))]);
    // Non-canonical JSON stored under the hash of its own text: the same
    // value as a canonical metric, a second id.
    let loose = r#"{ "b": 1, "a": 2 }"#;
    let d1 = stage_with(&lake, 201, vec![forged("metric", content(loose), loose.as_bytes())]);
    // A metric that is not JSON at all.
    let d2 = stage_with(&lake, 202, vec![forged("metric", content("not json"), b"not json")]);
    // A data artifact whose extension would become a path in a sandbox.
    let mut data =
        Draft::data(b"x\n1\n".to_vec(), DataFormat::Csv).with_step(1).finalize(&registry).unwrap();
    data.fields.insert("extension".into(), text("../../x"));
    let d3 = stage_with(&lake, 203, vec![data]);
    // A data artifact whose derived row count was forged.
    let mut counted = Draft::data(b"x\n1\n2\n".to_vec(), DataFormat::Csv)
        .with_step(1)
        .finalize(&registry)
        .unwrap();
    counted.fields.insert("row_count".into(), FieldValue::Int(99));
    let d4 = stage_with(&lake, 204, vec![counted]);
    // An index row at another step than its content row.
    let good = metrics(&lake, 1, 1);
    let d5 = stage_with(&lake, 205, good.clone());
    edit_unit(&d5, |files| rewrite_index_step(file_mut(files, "index.arrow"), 7));
    // And one honest run.
    let honest = stage_with(&lake, 206, metrics(&lake, 1, 2)[1..].to_vec());

    let report = lake.commit().execute().await.unwrap();
    // A unit `{id}.sluice` is quarantined in a folder named `{id}`.
    let reason_of = |dir: &Path| {
        let name = dir.file_stem().unwrap();
        report
            .quarantined
            .iter()
            .find(|(p, _)| p.file_name() == Some(name))
            .map(|(_, r)| r.clone())
            .unwrap_or_else(|| panic!("{} not quarantined: {report:?}", dir.display()))
    };
    assert!(reason_of(&d1).contains("not what its type derives"), "{}", reason_of(&d1));
    assert!(reason_of(&d2).contains("not valid JSON"), "{}", reason_of(&d2));
    assert!(reason_of(&d3).contains("is not a file extension"), "{}", reason_of(&d3));
    assert!(reason_of(&d4).contains("row_count"), "{}", reason_of(&d4));
    assert!(reason_of(&d5).contains("indexed at step Some(7)"), "{}", reason_of(&d5));
    assert!(!honest.exists());
    assert_eq!(report.runs_committed, 1);
    assert_eq!(scalar(&lake, "SELECT count(*) FROM metrics").await, "1");
}

/// Rewrite a staged index file with every row at `step`.
fn rewrite_index_step(file: &mut Vec<u8>, step: i32) {
    use deltalake::arrow::array::{ArrayRef, Int32Array};
    use deltalake::arrow::record_batch::RecordBatch;
    let batches = staged_batches("index.arrow", file);
    let schema = batches[0].schema();
    let i = schema.index_of("origin_step_number").unwrap();
    let rewritten: Vec<RecordBatch> = batches
        .iter()
        .map(|b| {
            let mut columns = b.columns().to_vec();
            columns[i] = Arc::new(Int32Array::from(vec![step; b.num_rows()])) as ArrayRef;
            RecordBatch::try_new(schema.clone(), columns).unwrap()
        })
        .collect();
    *file = ipc_bytes(&rewritten);
}

#[tokio::test]
async fn item6_an_artifact_exists_when_index_and_content_do() {
    let (_dir, lake) = lake().await;
    let a = Draft::metric(json!({"half": "finished"}))
        .unwrap()
        .with_step(1)
        .finalize(lake.registry())
        .unwrap();
    // A put that died between its content and index commits.
    let spec = TableSpec::content(lake.registry().descriptor("metric").unwrap());
    let handle = table::open(lake.root(), &spec).await.unwrap();
    let schema = table::arrow_schema(&handle, &spec).unwrap();
    let rows = sluice::store::content_rows(&spec.name, &schema, &[&a]).unwrap();
    Append::new(lake.root(), &spec, vec![rows]).execute().await.unwrap();
    assert!(lake.get(a.id).await.is_err(), "content without index is not an artifact");

    // The same content staged again, at another step.
    let again = Draft::metric(json!({"half": "finished"}))
        .unwrap()
        .with_step(2)
        .finalize(lake.registry())
        .unwrap();
    assert_eq!(again.id, a.id);
    stage_with(&lake, 301, vec![again.clone()]);
    lake.commit().execute().await.unwrap();
    // The index points at the content that exists (step 1), so it is readable.
    let got = lake.get(a.id).await.unwrap();
    assert_eq!(got.origin_step_number, 1);
    assert_eq!(
        scalar(
            &lake,
            &format!("SELECT origin_step_number FROM index WHERE artifact_id = '{}'", a.id)
        )
        .await,
        "1"
    );
    // A put of it at a third step adds nothing and changes nothing.
    let third = Draft::metric(json!({"half": "finished"}))
        .unwrap()
        .with_step(3)
        .finalize(lake.registry())
        .unwrap();
    let put = lake.put(&[third]).await.unwrap();
    assert_eq!(put.rows_added["index"], 0);
    assert_eq!(lake.get(a.id).await.unwrap().origin_step_number, 1);
}

#[tokio::test]
async fn item6_a_put_completes_a_half_finished_put_at_the_contents_step() {
    let (_dir, lake) = lake().await;
    let a = Draft::metric(json!({"k": 1})).unwrap().with_step(4).finalize(lake.registry()).unwrap();
    let spec = TableSpec::content(lake.registry().descriptor("metric").unwrap());
    let handle = table::open(lake.root(), &spec).await.unwrap();
    let schema = table::arrow_schema(&handle, &spec).unwrap();
    let rows = sluice::store::content_rows(&spec.name, &schema, &[&a]).unwrap();
    Append::new(lake.root(), &spec, vec![rows]).execute().await.unwrap();
    let other_step =
        Draft::metric(json!({"k": 1})).unwrap().with_step(9).finalize(lake.registry()).unwrap();
    let put = lake.put(&[other_step]).await.unwrap();
    assert_eq!(put.rows_added["index"], 1, "the missing index row is added");
    assert_eq!(lake.get(a.id).await.unwrap().origin_step_number, 4);
}

#[tokio::test]
async fn item7_readers_never_see_half_a_sequence() {
    let (_dir, lake) = lake().await;
    synthetic::stage_range(&writer(&lake), &spec(7), lake.registry(), 0..10).unwrap();
    lake.commit().execute().await.unwrap();
    let done = lake.snapshot().await.unwrap();
    assert_eq!(done.sequence, Some(1));
    // A sequence that committed content but not index, edges or executions.
    half_committed_sequence(&lake).await;
    let point = lake.snapshot().await.unwrap();
    assert_eq!(point.versions, done.versions, "readers stay before the open sequence");
    // Every reader — SQL, get, list — reads at that point.
    assert_eq!(
        scalar(&lake, "SELECT count(*) FROM metrics").await,
        scalar_at(&lake, "SELECT count(*) FROM metrics", &done).await
    );
    let listed = lake.list("metric", &sluice::store::ListFilter::default()).await.unwrap();
    assert_eq!(listed.len().to_string(), scalar(&lake, "SELECT count(*) FROM index").await);
    // Finishing it makes all of it visible at once, as lake version 2.
    let report = lake.recover().execute().await.unwrap();
    assert_eq!(report.recovered, vec![2]);
    assert_eq!(lake.snapshot().await.unwrap().sequence, Some(2));
    // Lake-level time travel: version 1 is the state sequence 1 left.
    let v1 = lake
        .sql("SELECT count(*) AS n FROM executions")
        .with_as_of(Some(AsOf::Lake(1)))
        .execute()
        .await
        .unwrap();
    assert_eq!(
        sluice::query::format::render(&v1.batches, sluice::query::OutputFormat::Csv).unwrap(),
        "n\n10\n"
    );
    assert_eq!(scalar(&lake, "SELECT count(*) FROM executions").await, "20");
}

async fn scalar_at(
    lake: &Lake,
    sql: &str,
    point: &sluice::lake::journal::snapshot::LakeSnapshot,
) -> String {
    let as_of = AsOf::Tables(point.versions.clone());
    let r = lake.sql(sql).with_as_of(Some(as_of)).execute().await.unwrap();
    sluice::query::format::render(&r.batches, sluice::query::OutputFormat::Csv)
        .unwrap()
        .lines()
        .nth(1)
        .unwrap()
        .to_owned()
}

fn pipeline(text: &str, lake: &Lake) -> Pipeline {
    let config = PipelineConfig::parse(text, Path::new("p.toml")).unwrap();
    Pipeline::validate(config, &Operations::linked().unwrap(), lake.registry()).unwrap()
}

async fn dispatched(lake: &Lake, text: &str) -> usize {
    let report = lake
        .run(pipeline(text, lake), Operations::linked().unwrap())
        .with_workers(1)
        .execute()
        .await
        .unwrap();
    assert!(report.steps.iter().all(|s| s.status != StepStatus::Failed), "{report:?}");
    report.steps.iter().map(|s| s.dispatched).sum()
}

#[tokio::test]
async fn item10_editing_a_script_reruns_its_step() {
    let (dir, lake) = lake().await;
    let script = dir.path().join("tool.sh");
    std::fs::write(&script, "echo '{\"v\": 1}' > \"$SLUICE_OUTPUTS/m/out.json\"\n").unwrap();
    let text = format!(
        "name = \"p\"\n[[step]]\nname = \"gen\"\noperation = \"generate_data\"\nparams = {{ tables = 1, rows = 3 }}\n\
         [[step]]\nname = \"tool\"\noperation = \"command\"\ncommand = [\"sh\", \"{}\"]\ninputs = {{ t = \"gen.data\" }}\noutputs = {{ m = \"metric\" }}\n",
        script.display()
    );
    assert_eq!(dispatched(&lake, &text).await, 2);
    assert_eq!(dispatched(&lake, &text).await, 0, "unchanged: all cached");
    std::fs::write(&script, "echo '{\"v\": 2}' > \"$SLUICE_OUTPUTS/m/out.json\"\n").unwrap();
    assert_eq!(dispatched(&lake, &text).await, 1, "the edited script runs again");
    assert_eq!(scalar(&lake, "SELECT count(*) FROM metrics").await, "2");
}

#[tokio::test]
async fn item10_rewritten_files_are_ingested_again_despite_size_and_mtime() {
    let (dir, lake) = lake().await;
    let file = dir.path().join("in.txt");
    std::fs::write(&file, "aaaa").unwrap();
    let mtime = std::fs::metadata(&file).unwrap().modified().unwrap();
    let text = format!(
        "name = \"p\"\n[[step]]\nname = \"in\"\noperation = \"ingest_files\"\nparams = {{ paths = \"{}\" }}\n",
        file.display()
    );
    assert_eq!(dispatched(&lake, &text).await, 1);
    assert_eq!(dispatched(&lake, &text).await, 0);
    // Same size, same modification time, new bytes.
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::write(&file, "bbbb").unwrap();
    std::fs::File::options().write(true).open(&file).unwrap().set_modified(mtime).unwrap();
    assert_eq!(std::fs::metadata(&file).unwrap().modified().unwrap(), mtime);
    assert_eq!(dispatched(&lake, &text).await, 1, "the new content is read");
    assert_eq!(scalar(&lake, "SELECT count(*) FROM file_refs").await, "2");
}

#[tokio::test]
async fn item12_the_sandbox_protects_inputs_and_rejects_linked_outputs() {
    let (dir, lake) = lake().await;
    let original = dir.path().join("precious.txt");
    std::fs::write(&original, "keep me").unwrap();
    let text = format!(
        "name = \"p\"\n[[step]]\nname = \"in\"\noperation = \"ingest_files\"\nparams = {{ paths = \"{}\" }}\n\
         [[step]]\nname = \"vandal\"\noperation = \"command\"\ninputs = {{ f = \"in.files\" }}\noutputs = {{ m = \"metric\" }}\n\
         command = [\"sh\", \"-c\", \"for f in inputs/f/*; do echo overwritten > $f 2>/dev/null; chmod u+w $f; echo overwritten > $f; done; echo '{{\\\"ok\\\": 1}}' > $SLUICE_OUTPUTS/m/a.json\"]\n",
        original.display()
    );
    let report =
        lake.run(pipeline(&text, &lake), Operations::linked().unwrap()).execute().await.unwrap();
    assert_eq!(report.steps[1].succeeded, 1, "{report:?}");
    assert_eq!(std::fs::read_to_string(&original).unwrap(), "keep me", "the input was a copy");

    // An output that is a symbolic link is rejected, not followed.
    let text = format!(
        "name = \"q\"\n[[step]]\nname = \"in\"\noperation = \"ingest_files\"\nparams = {{ paths = \"{}\" }}\n\
         [[step]]\nname = \"leak\"\noperation = \"command\"\ninputs = {{ f = \"in.files\" }}\noutputs = {{ m = \"metric\" }}\n\
         command = [\"sh\", \"-c\", \"ln -s /etc/hostname $SLUICE_OUTPUTS/m/x.json\"]\n",
        original.display()
    );
    let report =
        lake.run(pipeline(&text, &lake), Operations::linked().unwrap()).execute().await.unwrap();
    assert_eq!(report.steps[1].failed, 1, "{report:?}");
    assert!(report.steps[1].failures[0].1.contains("symbolic link"), "{report:?}");
    // The sandbox was outside the lake.
    let errors =
        scalar(&lake, "SELECT count(*) FROM executions WHERE error LIKE '%symbolic link%'").await;
    assert_eq!(errors, "1");
}

#[tokio::test]
async fn sandboxes_live_outside_the_lake() {
    let (_dir, lake) = lake().await;
    let text = "name = \"w\"\n[[step]]\nname = \"gen\"\noperation = \"generate_data\"\n\
        [[step]]\nname = \"where\"\noperation = \"command\"\ninputs = { t = \"gen.data\" }\noutputs = { m = \"metric\" }\n\
        command = [\"sh\", \"-c\", \"printf '{\\\"dir\\\": \\\"%s\\\"}' \\\"$(pwd)\\\" > $SLUICE_OUTPUTS/m/w.json\"]\n";
    lake.run(pipeline(text, &lake), Operations::linked().unwrap()).execute().await.unwrap();
    let listed = lake.list("metric", &sluice::store::ListFilter::default()).await.unwrap();
    let dir = listed[0].json_content().unwrap()["dir"].as_str().unwrap().to_owned();
    assert!(
        !Path::new(&dir).starts_with(lake.root().local().unwrap()),
        "sandbox {dir} is inside the lake"
    );
    assert!(!lake.root().local().unwrap().join("_work").exists());
}

#[tokio::test]
async fn a_time_limit_ends_a_local_unit_and_its_children() {
    let (dir, lake) = lake().await;
    let marker = dir.path().join("survived");
    let text = format!(
        "name = \"t\"\n[[step]]\nname = \"gen\"\noperation = \"generate_data\"\n\
         [[step]]\nname = \"slow\"\noperation = \"command\"\ntimeout = \"1s\"\ninputs = {{ t = \"gen.data\" }}\noutputs = {{ m = \"metric\" }}\n\
         command = [\"sh\", \"-c\", \"(sleep 3; touch {}) & sleep 60\"]\n",
        marker.display()
    );
    let started = std::time::Instant::now();
    let report =
        lake.run(pipeline(&text, &lake), Operations::linked().unwrap()).execute().await.unwrap();
    assert!(started.elapsed() < std::time::Duration::from_secs(20), "{:?}", started.elapsed());
    assert_eq!(report.steps[1].failed, 1);
    assert!(report.steps[1].failures[0].1.contains("timed out"), "{report:?}");
    std::thread::sleep(std::time::Duration::from_secs(4));
    assert!(!marker.exists(), "the background child died with its unit");
}

#[tokio::test]
async fn direct_puts_race_without_the_lock_and_never_duplicate() {
    // Two lakes handles, many concurrent puts of overlapping artifacts, with
    // the de-duplicating append as the only guard (the lock is in-process
    // shared here, so bypass it by appending through `Append` directly).
    let (_dir, lake) = lake().await;
    let all = metrics(&lake, 1, 60);
    let spec = TableSpec::content(lake.registry().descriptor("metric").unwrap());
    let handle = table::open(lake.root(), &spec).await.unwrap();
    let schema = table::arrow_schema(&handle, &spec).unwrap();
    let mut tasks = tokio::task::JoinSet::new();
    for k in 0..6 {
        let part: Vec<Artifact> = all.iter().skip(k * 5).take(30).cloned().collect();
        let (root, spec, schema) = (lake.root().clone(), spec.clone(), schema.clone());
        tasks.spawn(async move {
            let refs: Vec<&Artifact> = part.iter().collect();
            let rows = sluice::store::content_rows(&spec.name, &schema, &refs).unwrap();
            Append::new(&root, &spec, vec![rows]).execute().await.unwrap()
        });
    }
    let mut added = 0;
    while let Some(done) = tasks.join_next().await {
        added += done.unwrap().rows_added;
    }
    assert_eq!(added, 55, "every id added once");
    let d = scalar(&lake, "SELECT count(*) - count(DISTINCT artifact_id) FROM metrics").await;
    assert_eq!(d, "0");
}

#[tokio::test]
async fn writers_on_tips_race_handles_and_each_other_and_never_duplicate() {
    // Writers that keep their own view of the table (a tip: live files and
    // key filters followed version by version, commits written straight to
    // the log) race each other and writers on delta-rs handles; put-if-absent
    // per version is the only guard.
    let (_dir, lake) = lake().await;
    let all = metrics(&lake, 2, 80);
    let spec = TableSpec::content(lake.registry().descriptor("metric").unwrap());
    let handle = table::open(lake.root(), &spec).await.unwrap();
    let schema = table::arrow_schema(&handle, &spec).unwrap();
    let mut tasks = tokio::task::JoinSet::new();
    for k in 0..8 {
        let (root, spec, schema) = (lake.root().clone(), spec.clone(), schema.clone());
        let all = all.clone();
        tasks.spawn(async move {
            let mut added = 0;
            let mut own = None;
            if k % 2 == 0 {
                own = Some(sluice::lake::delta::tip::Tip::open(&root, &spec).await.unwrap());
            }
            // Each writer appends overlapping slices, one small commit each.
            for start in (k * 3..k * 3 + 40).step_by(8) {
                let part: Vec<&Artifact> = all.iter().skip(start).take(10).collect();
                let rows = sluice::store::content_rows(&spec.name, &schema, &part).unwrap();
                let append = Append::new(&root, &spec, vec![rows]);
                added += match own.as_mut() {
                    Some(tip) => append.execute_on_tip(tip).await.unwrap().rows_added,
                    None => append.execute().await.unwrap().rows_added,
                };
            }
            added
        });
    }
    let mut added = 0;
    while let Some(done) = tasks.join_next().await {
        added += done.unwrap();
    }
    // Writer k covers ids k*3 .. k*3 + 42: together, ids 0 .. 63.
    assert_eq!(added, 63, "every id added once");
    let d = scalar(&lake, "SELECT count(*) - count(DISTINCT artifact_id) FROM metrics").await;
    assert_eq!(d, "0");
    let n = scalar(&lake, "SELECT count(*) FROM metrics").await;
    assert_eq!(n, added.to_string());
}

#[tokio::test]
async fn puts_on_a_kept_tip_see_other_writers_and_compaction() {
    // One lake object keeps its tips across puts; another writes the same
    // ids, and the table is compacted (files replaced, key filters
    // rewritten) between puts. A put of an id the table holds adds nothing.
    let (dir, lake) = lake().await;
    let other = Lake::open(dir.path()).await.unwrap();
    let all = metrics(&lake, 3, 30);
    for a in &all[..10] {
        lake.put(std::slice::from_ref(a)).await.unwrap();
    }
    other.put(&all[5..20]).await.unwrap();
    let again = lake.put(&all[..20]).await.unwrap();
    assert_eq!(again.already_present, 20, "{again:?}");
    let options = sluice::maintenance::compact::CompactOptions::default();
    sluice::maintenance::compact::compact(&lake, &options).await.unwrap();
    let again = lake.put(&all[..25]).await.unwrap();
    assert_eq!(again.already_present, 20, "{again:?}");
    assert_eq!(again.rows_added.get("metrics"), Some(&5));
    for table in ["metrics", "index"] {
        let sql = format!("SELECT count(*) - count(DISTINCT artifact_id) FROM {table}");
        assert_eq!(scalar(&lake, &sql).await, "0", "{table}");
    }
    assert_eq!(scalar(&lake, "SELECT count(*) FROM index").await, "25");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committers_on_kept_tips_follow_each_other_and_racing_puts() {
    // Two lake objects commit in turn, each keeping its tips and its journal
    // between commits, while a third puts the same artifacts one by one
    // (taking table versions from under the committers). Nothing may be
    // lost, duplicated or numbered twice, and the journal they kept must
    // read as the journal read whole.
    let (dir, a) = lake().await;
    let b = Lake::open(dir.path()).await.unwrap();
    let putter = Lake::open(dir.path()).await.unwrap();
    let spec = SyntheticSpec { seed: 77, duplicate_fraction: 0.3, ..SyntheticSpec::default() };
    let artifacts: Vec<Artifact> = (0..40)
        .flat_map(|i| synthetic::execution(&spec, putter.registry(), i).unwrap().0.artifacts)
        .collect();
    let puts = tokio::spawn(async move {
        for artifact in artifacts {
            putter.put(&[artifact]).await.unwrap();
        }
    });
    for round in 0..8u64 {
        let committer = if round % 2 == 0 { &a } else { &b };
        synthetic::stage_range(&writer(committer), &spec, a.registry(), round * 5..round * 5 + 5)
            .unwrap();
        let report = committer.commit().execute().await.unwrap();
        assert_eq!(report.sequences, vec![round as i64 + 1], "round {round}");
        assert_eq!(report.runs_committed, 5);
        if round == 4 {
            let options = sluice::maintenance::compact::CompactOptions::default();
            sluice::maintenance::compact::compact(&a, &options).await.unwrap();
        }
    }
    puts.await.unwrap();
    let counts = table_counts(&a).await;
    assert_eq!(counts["executions"].0, "40");
    for (table, (rows, distinct)) in &counts {
        assert_eq!(rows, distinct, "{table}: duplicate keys");
    }
    assert_eq!(counts["index"], counts["metrics"], "every artifact indexed once");
    let journal = journal::read(a.root(), None).await.unwrap();
    assert_eq!(journal.max_seq(), 8);
    assert!(journal.unfinished().is_empty());
    assert_eq!((1..=8).filter(|s| journal.completed(*s).is_some()).count(), 8);
    let tables = journal::highest_table_seq(a.root(), &a.table_specs()).await.unwrap();
    assert_eq!(tables.map(|(seq, _)| seq), Some(8));
    // A fresh committer (nothing kept) agrees there is nothing to do.
    let fresh = Lake::open(dir.path()).await.unwrap();
    let report = fresh.commit().execute().await.unwrap();
    assert!(report.sequences.is_empty() && report.recovered.is_empty(), "{report:?}");
}

/// Data files in a table's folder (committed or not).
fn parquet_files(dir: &Path) -> usize {
    let mut n = 0;
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() && !entry.file_name().to_string_lossy().starts_with('_') {
            n += parquet_files(&path);
        } else if path.extension().is_some_and(|e| e == "parquet") {
            n += 1;
        }
    }
    n
}

#[tokio::test]
async fn an_append_on_a_tip_that_loses_its_version_checks_again_before_committing() {
    // The gate runs between writing the files and committing them: another
    // writer commits there, so the tip's version is always lost.
    use sluice::lake::append::Gate;
    use sluice::lake::delta::tip::Tip;
    let (dir, lake) = lake().await;
    let other = Lake::open(dir.path()).await.unwrap();
    let all = metrics(&lake, 4, 12);
    let spec = TableSpec::content(lake.registry().descriptor("metric").unwrap());
    let table_dir = table::table_dir(lake.root().local().unwrap(), &spec);
    let mut tip = Tip::open(lake.root(), &spec).await.unwrap();
    let schema = table::arrow_schema(tip.table(), &spec).unwrap();
    let rows = |part: &[Artifact]| {
        let refs: Vec<&Artifact> = part.iter().collect();
        vec![sluice::store::content_rows(&spec.name, &schema, &refs).unwrap()]
    };
    let put_in_gate = |artifacts: Vec<Artifact>| {
        let other = other.clone();
        Gate::new(async move {
            other.put(&artifacts).await.unwrap();
            true
        })
    };

    // Others added other ids: the same files are committed on top.
    let since = tip.head();
    let appended = Append::new(lake.root(), &spec, rows(&all[..4]))
        .with_token("first", since)
        .with_gate(put_in_gate(all[8..10].to_vec()))
        .execute_on_tip(&mut tip)
        .await
        .unwrap();
    assert_eq!((appended.rows_added, appended.committed), (4, Some(since + 2)));
    // Others added two of ours: those are dropped, the files written again.
    let since = tip.head();
    let appended = Append::new(lake.root(), &spec, rows(&all[4..8]))
        .with_token("second", since)
        .with_gate(put_in_gate(all[6..8].to_vec()))
        .execute_on_tip(&mut tip)
        .await
        .unwrap();
    assert_eq!((appended.rows_added, appended.rows_skipped), (2, 2));
    assert_eq!(appended.present_keys.len(), 2);
    // A commit with our token got there first (a retry of ours): done.
    let since = tip.head();
    let (root, spec2, first) = (lake.root().clone(), spec.clone(), rows(&all[10..]));
    let ours_elsewhere = Gate::new(async move {
        Append::new(&root, &spec2, first).with_token("third", since).execute().await.unwrap();
        true
    });
    let appended = Append::new(lake.root(), &spec, rows(&all[10..]))
        .with_token("third", since)
        .with_gate(ours_elsewhere)
        .execute_on_tip(&mut tip)
        .await
        .unwrap();
    assert!(appended.already_committed, "{appended:?}");
    assert_eq!(appended.committed, Some(since + 1));

    assert_eq!(scalar(&lake, "SELECT count(*) FROM metrics").await, "12");
    let d = scalar(&lake, "SELECT count(*) - count(DISTINCT artifact_id) FROM metrics").await;
    assert_eq!(d, "0");
    // Every file given up was removed: the folder holds the live files only.
    let live = table::active_files(&table::open(lake.root(), &spec).await.unwrap(), &spec);
    assert_eq!(parquet_files(&table_dir), live.unwrap().len());
}

/// A unit's small tables travel as Arrow IPC and a large one as
/// compressed Parquet, in one object; the folders an older sluice staged
/// (loose Parquet files, or the unit object) still commit; and a unit
/// object holding a table twice is refused.
#[tokio::test]
async fn staged_units_of_each_form_commit_and_a_table_staged_twice_is_refused() {
    let (_dir, lake) = lake().await;
    let registry = lake.registry().clone();
    // A data artifact of 1 MiB of text: its table file is Parquet.
    let csv: String = (0..100_000).map(|i| format!("{i:09}\n")).collect();
    let big = Draft::data(format!("x\n{csv}").into_bytes(), DataFormat::Csv)
        .with_step(1)
        .finalize(&registry)
        .unwrap();
    let large = stage_with(&lake, 301, vec![big]);
    let files = unit_files(&large);
    let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "data.parquet",
            "index.arrow",
            "artifact_edges.arrow",
            "execution_edges.arrow",
            "executions.arrow"
        ]
    );
    let data = &files[0].1;
    assert!(data.len() < 300_000, "compressed: {} bytes for 1 MiB of rows", data.len());

    // An older sluice's folders: `{id[0:2]}/{id[2:4]}/{id}/` holding loose
    // Parquet files, or the unit object.
    let older_folder = |unit: &std::path::Path| {
        let id = unit.file_name().unwrap().to_str().unwrap().strip_suffix(".sluice").unwrap();
        let folder = unit.parent().unwrap().join(&id[2..4]).join(id);
        std::fs::create_dir_all(&folder).unwrap();
        folder
    };
    let unit = stage_with(&lake, 302, metrics(&lake, 1, 2));
    let loose = older_folder(&unit);
    for (name, bytes) in unit_files(&unit) {
        let batches = staged_batches(&name, &bytes);
        let table = name.strip_suffix(".arrow").unwrap();
        let file = std::fs::File::create(loose.join(format!("{table}.parquet"))).unwrap();
        let mut w =
            deltalake::parquet::arrow::ArrowWriter::try_new(file, batches[0].schema(), None)
                .unwrap();
        for b in &batches {
            w.write(b).unwrap();
        }
        w.close().unwrap();
    }
    std::fs::remove_file(&unit).unwrap();
    let unit = stage_with(&lake, 304, metrics(&lake, 1, 5)[4..].to_vec());
    let folder = older_folder(&unit);
    std::fs::rename(&unit, folder.join(sluice::staging::bundle::UNIT_OBJECT)).unwrap();

    // A unit object naming the metrics table twice.
    let twice = stage_with(&lake, 303, metrics(&lake, 1, 3)[2..].to_vec());
    edit_unit(&twice, |files| {
        let metrics = file_mut(files, "metrics.arrow").clone();
        files.insert(0, ("metrics.arrow".into(), metrics));
    });

    let report = lake.commit().execute().await.unwrap();
    assert_eq!(report.quarantined.len(), 1, "{report:?}");
    let (path, reason) = &report.quarantined[0];
    assert_eq!(path.file_name(), twice.file_stem(), "quarantined in a folder named by its id");
    assert!(reason.contains("metrics.arrow: twice in the unit"), "{reason}");
    assert_eq!(report.runs_committed, 3);
    assert!(!large.exists() && !loose.exists() && !folder.exists());
    assert_eq!(scalar(&lake, "SELECT count(*) FROM data").await, "1");
    assert_eq!(scalar(&lake, "SELECT count(*) FROM metrics").await, "3");
}
