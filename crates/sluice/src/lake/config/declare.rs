//! Declaring an artifact type in `sluice.toml` from a program (the Python
//! package's `Lake.declare` turns a dataclass into one), as a person would
//! by adding an `[[artifact_type]]` entry.
//!
//! The file is edited, not rewritten: every other line, comment and entry
//! stays as written. A declaration the lake cannot take (a column whose
//! type changed under existing rows, a bad identity) is refused and the
//! file is left as it was, so a bad declaration never leaves the lake
//! unopenable. Declaring is a setting, made at human rate: two programs
//! declaring at the same instant may lose one edit (the last write wins),
//! never a row.

use toml_edit::{Array, ArrayOfTables, DocumentMut, InlineTable, Item, Table, value};

use super::{CONFIG_FILE, LakeConfig};
use crate::error::{Error, Result};
use crate::lake::Lake;
use crate::lake::io::location::LakeRoot;
use crate::registry::declared::{DeclaredType, DeclaredTypeSpec};

/// What [`declare_type`] did to `sluice.toml`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Declaration {
    /// A new `[[artifact_type]]` entry.
    Added,
    /// The same declaration was already there: nothing written.
    Unchanged,
    /// The entry with this key now says something else (new columns).
    Replaced,
}

impl Declaration {
    /// How messages and the Python package say it.
    pub fn as_str(self) -> &'static str {
        match self {
            Declaration::Added => "added",
            Declaration::Unchanged => "unchanged",
            Declaration::Replaced => "replaced",
        }
    }
}

/// Declare `spec` in the `sluice.toml` of the lake at `root` (adding its
/// entry or replacing the one with the same key), then open the lake so its
/// table is created or given its new columns. On any error the file is
/// restored and the error says why.
pub async fn declare_type(root: &LakeRoot, spec: &DeclaredTypeSpec) -> Result<Declaration> {
    DeclaredType::try_new(spec)?;
    let path = root.shown(CONFIG_FILE);
    let before = super::read_text(root).await?;
    let text = before.clone().unwrap_or_default();
    let config = LakeConfig::parse(&text, &path)?;
    let existing = config.artifact_types.iter().position(|t| t.key == spec.key);
    if existing.is_some_and(|i| &config.artifact_types[i] == spec) {
        return Ok(Declaration::Unchanged);
    }
    if let Some(other) =
        config.artifact_types.iter().find(|t| t.key != spec.key && t.table == spec.table)
    {
        return Err(Error::registry(
            &spec.key,
            format!("table `{}` already holds type `{}`", spec.table, other.key),
        ));
    }
    let mut document: DocumentMut = text.parse().map_err(|e: toml_edit::TomlError| {
        Error::Config { path: path.clone(), message: e.to_string() }
    })?;
    let entries = document
        .entry("artifact_type")
        .or_insert(Item::ArrayOfTables(ArrayOfTables::new()))
        .as_array_of_tables_mut()
        .ok_or_else(|| Error::Config {
            path: path.clone(),
            message: "`artifact_type` is not a list of [[artifact_type]] tables".into(),
        })?;
    let declaration = match existing {
        Some(i) => {
            *entries.get_mut(i).expect("the parsed config has this entry") = entry(spec);
            Declaration::Replaced
        }
        None => {
            entries.push(entry(spec));
            Declaration::Added
        }
    };
    root.write_file(CONFIG_FILE, document.to_string().into_bytes()).await?;
    if let Err(err) = Lake::open(root.clone()).await {
        match before {
            Some(text) => root.write_file(CONFIG_FILE, text.into_bytes()).await?,
            None => root.remove_file(CONFIG_FILE).await?,
        }
        return Err(err);
    }
    Ok(declaration)
}

/// One `[[artifact_type]]` table, written the way the docs show it: one
/// inline table per column.
fn entry(spec: &DeclaredTypeSpec) -> Table {
    let mut table = Table::new();
    table.insert("key", value(&spec.key));
    table.insert("table", value(&spec.table));
    if !spec.partition_by_step {
        table.insert("partition_by_step", value(false));
    }
    if let Some(identity) = &spec.identity {
        table.insert("identity", value(identity.iter().collect::<Array>()));
    }
    let mut columns = Array::new();
    for column in &spec.columns {
        let mut inline = InlineTable::new();
        inline.insert("name", column.name.as_str().into());
        inline.insert("type", column.column_type.as_str().into());
        if column.nullable {
            inline.insert("nullable", true.into());
        }
        columns.push(inline);
    }
    for item in columns.iter_mut() {
        item.decor_mut().set_prefix("\n  ");
    }
    columns.set_trailing("\n");
    columns.set_trailing_comma(true);
    table.insert("columns", value(columns));
    table
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::declared::DeclaredColumn;

    fn sample(columns: &[(&str, &str, bool)]) -> DeclaredTypeSpec {
        DeclaredTypeSpec {
            key: "sample".into(),
            table: "artifacts/samples".into(),
            partition_by_step: true,
            identity: None,
            columns: columns
                .iter()
                .map(|(name, t, nullable)| DeclaredColumn {
                    name: (*name).into(),
                    column_type: (*t).into(),
                    nullable: *nullable,
                })
                .collect(),
        }
    }

    #[tokio::test]
    async fn a_declaration_is_added_kept_and_replaced_and_the_rest_of_the_file_stays() {
        let dir = tempfile::tempdir().unwrap();
        let root = LakeRoot::from(dir.path());
        Lake::init(root.clone()).await.unwrap();
        let mine = "# tuned by hand\n[maintenance]\nsmall_files = 32 # keep\n";
        std::fs::write(dir.path().join(CONFIG_FILE), mine).unwrap();

        let v1 = sample(&[("name", "string", false)]);
        assert_eq!(declare_type(&root, &v1).await.unwrap(), Declaration::Added);
        assert_eq!(declare_type(&root, &v1).await.unwrap(), Declaration::Unchanged);
        let v2 = sample(&[("name", "string", false), ("weight", "float64", true)]);
        assert_eq!(declare_type(&root, &v2).await.unwrap(), Declaration::Replaced);

        let text = std::fs::read_to_string(dir.path().join(CONFIG_FILE)).unwrap();
        assert!(text.starts_with(mine), "{text}");
        let config = LakeConfig::parse(&text, dir.path()).unwrap();
        assert_eq!(config.artifact_types, vec![v2]);
        assert_eq!(config.maintenance.small_files, 32);
        let lake = Lake::open(root).await.unwrap();
        assert!(lake.registry().descriptor("sample").is_ok());
    }

    #[tokio::test]
    async fn a_declaration_the_lake_cannot_take_leaves_the_file_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let root = LakeRoot::from(dir.path());
        Lake::init(root.clone()).await.unwrap();
        declare_type(&root, &sample(&[("name", "string", false)])).await.unwrap();
        let lake = Lake::open(root.clone()).await.unwrap();
        let row = serde_json::json!({"name": "a"});
        let draft = crate::Draft::from_json_object(lake.registry(), "sample", &row).unwrap();
        lake.put(&[draft.finalize(lake.registry()).unwrap()]).await.unwrap();
        let before = std::fs::read_to_string(dir.path().join(CONFIG_FILE)).unwrap();

        let retyped = sample(&[("name", "int64", false)]);
        let err = declare_type(&root, &retyped).await.unwrap_err().to_string();
        assert!(err.contains("column `name`"), "{err}");
        let mut taken = sample(&[("x", "string", false)]);
        taken.key = "other".into();
        let err = declare_type(&root, &taken).await.unwrap_err().to_string();
        assert!(err.contains("already holds type `sample`"), "{err}");
        let unknown = sample(&[("name", "decimal", false)]);
        assert!(declare_type(&root, &unknown).await.is_err());

        assert_eq!(std::fs::read_to_string(dir.path().join(CONFIG_FILE)).unwrap(), before);
        Lake::open(root).await.unwrap();
    }
}
