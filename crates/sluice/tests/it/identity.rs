//! Content identity: determinism, canonical JSON, domain separation.

use proptest::prelude::*;
use serde_json::{Map, Value, json};
use sluice::Draft;
use sluice::registry::TypeRegistry;

fn finalize_metric(v: Value) -> String {
    Draft::metric(v).unwrap().finalize(&TypeRegistry::builtin()).unwrap().id.to_hex()
}

fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        (-1e12f64..1e12).prop_map(|f| json!(f)),
        "[a-z\u{e9}\"\\\\ ]{0,8}".prop_map(Value::String),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    json_leaf().prop_recursive(3, 24, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z]{1,4}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Rebuild every object of a value with its keys inserted in reverse order.
fn reverse_keys(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut out = Map::new();
            for (k, x) in m.iter().rev() {
                out.insert(k.clone(), reverse_keys(x));
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(reverse_keys).collect()),
        other => other.clone(),
    }
}

proptest! {
    #[test]
    fn key_order_does_not_change_a_metric_id(
        entries in prop::collection::vec(("[a-z]{1,6}", json_value()), 1..8)
    ) {
        let mut forward = Map::new();
        for (k, v) in &entries {
            forward.insert(k.clone(), v.clone());
        }
        let forward = Value::Object(forward);
        let backward = reverse_keys(&forward);
        prop_assert_eq!(finalize_metric(forward.clone()), finalize_metric(backward.clone()));
        // And through text: re-parsing the canonical form is stable.
        let text = sluice::artifact::canonical_json::to_string(&backward).unwrap();
        prop_assert_eq!(sluice::artifact::canonical_json::canonicalize(&text).unwrap(), text);
    }

    #[test]
    fn metric_and_config_of_the_same_json_differ(v in json_value()) {
        let object = json!({"v": v});
        let r = TypeRegistry::builtin();
        let m = Draft::metric(object.clone()).unwrap().finalize(&r).unwrap();
        let c = Draft::config(object).unwrap().finalize(&r).unwrap();
        prop_assert_ne!(m.id, c.id);
    }
}

#[test]
fn equal_numbers_in_different_forms_give_one_id() {
    assert_eq!(finalize_metric(json!({"a": 1})), finalize_metric(json!({"a": 1.0})));
    assert_ne!(finalize_metric(json!({"a": 1})), finalize_metric(json!({"a": 1.5})));
}

#[test]
fn ids_are_stable_across_releases() {
    // A fixed vector: changing the hashing scheme must be a deliberate decision.
    let id = finalize_metric(json!({"b": 2, "a": 1}));
    let expected = blake3::hash(b"metric\0{\"a\":1,\"b\":2}").to_hex()[..32].to_owned();
    assert_eq!(id, expected);
}

#[test]
fn data_shape_is_derived_and_identity_is_the_bytes() {
    let r = TypeRegistry::builtin();
    let a = Draft::data(b"a,b\n1,2\n3,4\n".to_vec(), sluice::artifact::DataFormat::Csv)
        .finalize(&r)
        .unwrap();
    assert_eq!(a.field("row_count").as_int(), Some(2));
    assert_eq!(a.field("columns").as_str(), Some(r#"["a","b"]"#));
    assert_eq!(a.field("size_bytes").as_int(), Some(12));
    let err =
        Draft::data(b"".to_vec(), sluice::artifact::DataFormat::Csv).finalize(&r).unwrap_err();
    assert!(err.to_string().contains("not a valid csv table"), "{err}");
}
