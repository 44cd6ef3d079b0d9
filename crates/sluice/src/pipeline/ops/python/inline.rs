//! Inputs handed to a Python unit inside its request, not as files.
//!
//! A trivial Python unit costs about a millisecond more than a built-in
//! one, and most of it was reading its input back: Polars' `read_csv` of a
//! ten-row file takes 0.6–0.95 ms, while `read_ipc_stream` of the same
//! table as Arrow IPC stream bytes takes about 0.01 ms. So a data input
//! whose bytes this crate can decode crosses the pipe as an Arrow IPC
//! stream (base64 in the JSON line), and a metric or config as the JSON
//! value itself; nothing is written to the sandbox for them. Anything else
//! (a file_ref, a declared type, data this crate cannot decode) is written
//! to the sandbox as before, so Polars still reads what it alone can.

use base64::Engine as _;
use serde_json::{Value, json};

use crate::artifact::value::FieldValue;
use crate::artifact::{Artifact, CONFIG, DATA, DataFormat, METRIC, data_format};

/// The request's entry for `artifact` when it travels inline; `None` when
/// it is written to the sandbox instead.
pub(super) fn inline(artifact: &Artifact) -> Option<Value> {
    match (artifact.type_key.as_str(), artifact.field("content")) {
        (METRIC | CONFIG, FieldValue::String(text)) => {
            let value: Value = serde_json::from_str(text).ok()?;
            Some(json!({ "type": artifact.type_key, "value": value }))
        }
        (DATA, FieldValue::Binary(bytes)) => {
            let format = DataFormat::from_name(artifact.field("format").as_str()?).ok()?;
            let batches = format.read_batches(bytes).ok()?;
            let ipc = data_format::ipc_stream_bytes(&batches.first()?.schema(), &batches).ok()?;
            let encoded = base64::engine::general_purpose::STANDARD.encode(ipc);
            Some(json!({ "type": DATA, "ipc": encoded }))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::TypeRegistry;

    #[test]
    fn data_travels_as_an_ipc_stream_and_json_as_itself_others_as_files() {
        let registry = TypeRegistry::linked().unwrap();
        let csv = b"x,name\n1.5,a\n2.5,b\n".to_vec();
        let data = crate::Draft::data(csv, DataFormat::Csv).finalize(&registry).unwrap();
        let entry = inline(&data).unwrap();
        let ipc = base64::engine::general_purpose::STANDARD
            .decode(entry["ipc"].as_str().unwrap())
            .unwrap();
        let batches = DataFormat::Arrow.read_batches(&ipc).unwrap();
        assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 2);
        assert_eq!(batches[0].schema().field(1).name(), "name");

        let metric = crate::Draft::metric(json!({"loss": 0.5})).unwrap();
        let metric = metric.finalize(&registry).unwrap();
        assert_eq!(inline(&metric).unwrap(), json!({"type": "metric", "value": {"loss": 0.5}}));

        let dir = tempfile::tempdir().unwrap();
        let kept = dir.path().join("model.bin");
        std::fs::write(&kept, b"weights").unwrap();
        let file_ref = crate::Draft::file_ref(&kept).unwrap().finalize(&registry).unwrap();
        assert!(inline(&file_ref).is_none(), "a file_ref is copied into the sandbox");
    }
}
