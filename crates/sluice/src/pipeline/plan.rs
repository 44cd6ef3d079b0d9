//! From a step's input streams to units of work, and their cache keys.
//!
//! A *stream* is the ordered list of artifacts a step produced under one
//! output role. A step's units are formed by:
//!
//! - source operations (no inputs): one input set per descriptor the
//!   operation lists (a table to generate, a file to ingest);
//! - `zip` pairing: the i-th artifact of every role (equal lengths required);
//! - `cross` pairing: every combination of one artifact per role;
//! - whole-stream operations (filter, merge): one unit with everything;
//!
//! then `artifacts_per_unit` consecutive input sets per unit.
//!
//! Every unit gets an `execution_spec_id`: a hash of the operation, its
//! version (or command), the canonical params, the source descriptors and
//! the input ids per role (sorted for a single role; in pairing order when
//! several roles are paired, since the pairing is part of the work). The step
//! gets a `step_spec_id` from its operation, params, upstream step specs and
//! its units' specs.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::config::{Pairing, StepConfig};
use super::operation::{Grouping, Operation};
use super::unit::Unit;
use crate::artifact::{ArtifactId, canonical_json};
use crate::error::{Error, Result};

fn hash_hex(domain: &str, value: &Value) -> Result<String> {
    let mut hasher = blake3::Hasher::new();
    hasher.update(domain.as_bytes());
    hasher.update(&[0]);
    hasher.update(&canonical_json::to_vec(value)?);
    Ok(crate::artifact::id::hex(&hasher.finalize().as_bytes()[..16]))
}

/// What identifies an operation's behaviour in a step: op, version,
/// command, declared outputs, params, the step's `version`, and the content
/// of the files the operation says its behaviour depends on (a `command`
/// step's scripts and `depends`). Keys absent from older lakes are left out
/// when empty, so their cache stays valid.
pub fn operation_identity(step: &StepConfig, op: &dyn Operation) -> Result<Value> {
    let mut identity = json!({
        "operation": op.name(),
        "version": op.version(),
        "command": step.command,
        "outputs": step.outputs,
        "params": Value::Object(step.params.clone()),
    });
    if let Some(version) = &step.version {
        identity["step_version"] = json!(version);
    }
    if let Some(behaviour) = op.identity(step)? {
        identity["behaviour"] = behaviour;
    }
    let files = op.depends_on(step)?;
    if !files.is_empty() {
        identity["files"] = json!(files);
    }
    Ok(identity)
}

/// A unit's `execution_spec_id`.
pub fn execution_spec_id(
    step: &StepConfig,
    op: &dyn Operation,
    inputs: &BTreeMap<String, Vec<ArtifactId>>,
    sources: &[Value],
) -> Result<String> {
    execution_spec_id_of(&operation_identity(step, op)?, inputs, sources)
}

/// [`execution_spec_id`] with the operation's identity computed once.
fn execution_spec_id_of(
    identity: &Value,
    inputs: &BTreeMap<String, Vec<ArtifactId>>,
    sources: &[Value],
) -> Result<String> {
    let ordered = inputs.len() > 1;
    let inputs: BTreeMap<&String, Vec<String>> = inputs
        .iter()
        .map(|(role, ids)| {
            let mut hex: Vec<String> = ids.iter().map(ArtifactId::to_hex).collect();
            if !ordered {
                hex.sort();
            }
            (role, hex)
        })
        .collect();
    hash_hex(
        "sluice.execution.v1",
        &json!({ "op": identity, "inputs": inputs, "sources": sources }),
    )
}

/// A step's `step_spec_id`.
pub fn step_spec_id(
    step: &StepConfig,
    op: &dyn Operation,
    upstream: &[String],
    units: &[Unit],
) -> Result<String> {
    let mut upstream = upstream.to_vec();
    upstream.sort();
    upstream.dedup();
    let specs: Vec<&str> = units.iter().map(|u| u.spec_id.as_str()).collect();
    hash_hex(
        "sluice.step.v1",
        &json!({
            "op": operation_identity(step, op)?,
            "pairing": step.pairing,
            "artifacts_per_unit": step.batch.artifacts_per_unit,
            "upstream": upstream,
            "units": specs,
        }),
    )
}

/// A fresh, unique run id (32 hex characters).
pub fn new_run_id() -> String {
    crate::host::unique_id()
}

/// Input sets: each maps role → the ids of that set.
type InputSet = BTreeMap<String, Vec<ArtifactId>>;

fn paired_sets(
    step: &StepConfig,
    streams: &BTreeMap<String, Vec<ArtifactId>>,
) -> Result<Vec<InputSet>> {
    let roles: Vec<&String> = streams.keys().collect();
    match step.pairing {
        Pairing::Zip => {
            let lengths: Vec<usize> = streams.values().map(Vec::len).collect();
            let n = lengths.first().copied().unwrap_or(0);
            if lengths.iter().any(|l| *l != n) {
                let shown: Vec<String> =
                    streams.iter().map(|(r, s)| format!("{r}: {}", s.len())).collect();
                return Err(Error::InvalidInput(format!(
                    "step `{}`: zip pairing needs inputs of equal length, got {} (use pairing = \"cross\" for every combination)",
                    step.name,
                    shown.join(", ")
                )));
            }
            Ok((0..n)
                .map(|i| roles.iter().map(|r| ((*r).clone(), vec![streams[*r][i]])).collect())
                .collect())
        }
        Pairing::Cross => {
            let mut sets: Vec<InputSet> = vec![InputSet::new()];
            for role in roles {
                let mut next = Vec::with_capacity(sets.len() * streams[role].len());
                for set in &sets {
                    for id in &streams[role] {
                        let mut s = set.clone();
                        s.insert(role.clone(), vec![*id]);
                        next.push(s);
                    }
                }
                sets = next;
            }
            Ok(sets)
        }
    }
}

/// The units of a step given its input streams.
pub fn plan_units(
    step: &StepConfig,
    op: &dyn Operation,
    streams: &BTreeMap<String, Vec<ArtifactId>>,
) -> Result<Vec<Unit>> {
    let per_unit = step.batch.artifacts_per_unit.max(1);
    let mut raw: Vec<(InputSet, Vec<Value>)> = Vec::new();
    if streams.is_empty() {
        let sources = op.source_units(step)?.unwrap_or_default();
        for chunk in sources.chunks(per_unit) {
            raw.push((InputSet::new(), chunk.to_vec()));
        }
    } else if op.grouping() == Grouping::WholeStream {
        if streams.values().any(|s| !s.is_empty()) {
            raw.push((streams.clone(), Vec::new()));
        }
    } else {
        let sets = paired_sets(step, streams)?;
        for chunk in sets.chunks(per_unit) {
            let mut inputs = InputSet::new();
            for set in chunk {
                for (role, ids) in set {
                    inputs.entry(role.clone()).or_default().extend(ids);
                }
            }
            raw.push((inputs, Vec::new()));
        }
    }
    let identity = operation_identity(step, op)?;
    raw.into_iter()
        .enumerate()
        .map(|(index, (inputs, sources))| {
            let spec_id = execution_spec_id_of(&identity, &inputs, &sources)?;
            Ok(Unit { index, spec_id, inputs, sources })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::ops::{CommandOp, MergeOp};

    fn id(n: u8) -> ArtifactId {
        ArtifactId::compute("metric", &[n])
    }

    fn step(pairing: Pairing, per_unit: usize) -> StepConfig {
        let mut s: StepConfig =
            toml::from_str("name = \"s\"\noperation = \"command\"\ncommand = [\"true\"]").unwrap();
        s.pairing = pairing;
        s.batch.artifacts_per_unit = per_unit;
        s
    }

    #[test]
    fn zip_pairs_positions_and_rejects_unequal_lengths() {
        let streams = BTreeMap::from([
            ("a".to_owned(), vec![id(1), id(2)]),
            ("b".to_owned(), vec![id(3), id(4)]),
        ]);
        let units = plan_units(&step(Pairing::Zip, 1), &CommandOp, &streams).unwrap();
        assert_eq!(units.len(), 2);
        assert_eq!(units[1].inputs["a"], vec![id(2)]);
        assert_eq!(units[1].inputs["b"], vec![id(4)]);
        let uneven =
            BTreeMap::from([("a".to_owned(), vec![id(1)]), ("b".to_owned(), vec![id(3), id(4)])]);
        let err = plan_units(&step(Pairing::Zip, 1), &CommandOp, &uneven).unwrap_err().to_string();
        assert!(err.contains("a: 1, b: 2"), "{err}");
    }

    #[test]
    fn cross_takes_every_combination_and_batches() {
        let streams = BTreeMap::from([
            ("a".to_owned(), vec![id(1), id(2), id(3)]),
            ("b".to_owned(), vec![id(4), id(5)]),
        ]);
        let units = plan_units(&step(Pairing::Cross, 1), &CommandOp, &streams).unwrap();
        assert_eq!(units.len(), 6);
        let specs: std::collections::BTreeSet<_> =
            units.iter().map(|u| u.spec_id.clone()).collect();
        assert_eq!(specs.len(), 6, "every combination is its own work");
        let batched = plan_units(&step(Pairing::Cross, 4), &CommandOp, &streams).unwrap();
        assert_eq!(batched.len(), 2);
        assert_eq!(batched[0].inputs["a"].len(), 4);
        assert_eq!(batched[1].inputs["b"].len(), 2);
    }

    #[test]
    fn spec_ids_depend_on_inputs_and_params_not_on_order_of_one_role() {
        let s = step(Pairing::Zip, 1);
        let one = BTreeMap::from([("a".to_owned(), vec![id(1), id(2)])]);
        let swapped = BTreeMap::from([("a".to_owned(), vec![id(2), id(1)])]);
        let a = execution_spec_id(&s, &CommandOp, &one, &[]).unwrap();
        assert_eq!(a, execution_spec_id(&s, &CommandOp, &swapped, &[]).unwrap());
        let mut changed = s.clone();
        changed.params.insert("k".into(), json!(1));
        assert_ne!(a, execution_spec_id(&changed, &CommandOp, &one, &[]).unwrap());
        let mut other_command = s.clone();
        other_command.command = Some(vec!["false".into()]);
        assert_ne!(a, execution_spec_id(&other_command, &CommandOp, &one, &[]).unwrap());
        assert_eq!(a.len(), 32);
    }

    #[test]
    fn whole_stream_is_one_unit_and_empty_inputs_are_none() {
        let s = step(Pairing::Zip, 1);
        let streams =
            BTreeMap::from([("a".to_owned(), vec![id(1)]), ("b".to_owned(), vec![id(2), id(3)])]);
        assert_eq!(plan_units(&s, &MergeOp, &streams).unwrap().len(), 1);
        let empty = BTreeMap::from([("a".to_owned(), vec![])]);
        assert!(plan_units(&s, &MergeOp, &empty).unwrap().is_empty());
    }

    #[test]
    fn run_ids_are_unique() {
        let ids: std::collections::BTreeSet<String> = (0..1000).map(|_| new_run_id()).collect();
        assert_eq!(ids.len(), 1000);
    }
}
