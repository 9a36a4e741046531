//! Turning results into what people read: aligned tables, CSV and JSON from
//! one list of records (each made from a typed row at the point of
//! output), an experiment's typed rows (`experiment`), and (in `plots`)
//! figures. Computes nothing.

pub mod experiment;
pub mod files;
pub mod plots;

use std::str::FromStr;

use serde_json::{Map, Value};

/// One row as rendered: ordered field names and values. Results travel as
/// typed rows; a record is made from one only to be written (`render`).
pub type Record = Map<String, Value>;

/// A typed row as a record: its fields in declaration order, `None` as null.
pub fn record_of(row: &impl serde::Serialize) -> Record {
    match serde_json::to_value(row) {
        Ok(Value::Object(record)) => record,
        other => unreachable!("a row serializes as a JSON object, not {other:?}"),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Table,
    Json,
    Csv,
}

impl FromStr for Format {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "table" => Ok(Format::Table),
            "json" => Ok(Format::Json),
            "csv" => Ok(Format::Csv),
            other => Err(format!("unknown format {other:?}: use table, json or csv")),
        }
    }
}

/// Renders `records` in `format`. JSON is `{"results": [...]}`, the shape
/// other tools rely on.
pub fn render(records: &[Record], format: Format) -> String {
    match format {
        Format::Json => {
            let document = serde_json::json!({ "results": records });
            serde_json::to_string_pretty(&document).expect("records are plain JSON") + "\n"
        }
        Format::Csv => csv(records),
        Format::Table => table(records),
    }
}

/// A typed result as one record: a nested object's fields named
/// `outer_inner`; lists left out (they are rows of their own).
pub fn flattened(result: &impl serde::Serialize) -> Record {
    fn into(record: &mut Record, prefix: &str, value: Value) {
        match value {
            Value::Object(fields) => {
                for (name, field) in fields {
                    let name = if prefix.is_empty() { name } else { format!("{prefix}_{name}") };
                    into(record, &name, field);
                }
            }
            Value::Array(_) => {}
            other => {
                record.insert(prefix.to_string(), other);
            }
        }
    }
    let mut record = Record::new();
    into(&mut record, "", serde_json::to_value(result).expect("results serialize to JSON"));
    record
}

fn columns(records: &[Record]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for record in records {
        for key in record.keys() {
            if !names.contains(key) {
                names.push(key.clone());
            }
        }
    }
    names
}

/// A cell as text: floats with a precision that suits their size.
pub fn cell(value: &Value) -> String {
    match value {
        Value::Null => "-".to_string(),
        Value::String(s) => s.clone(),
        Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
            (Some(u), _, _) => u.to_string(),
            (_, Some(i), _) => i.to_string(),
            (_, _, Some(f)) => float_cell(f),
            _ => n.to_string(),
        },
        other => other.to_string(),
    }
}

fn float_cell(f: f64) -> String {
    let magnitude = f.abs();
    if magnitude == 0.0 {
        "0".to_string()
    } else if magnitude >= 1000.0 {
        format!("{f:.0}")
    } else if magnitude >= 100.0 {
        format!("{f:.1}")
    } else if magnitude >= 1.0 {
        format!("{f:.2}")
    } else {
        format!("{f:.3}")
    }
}

fn csv(records: &[Record]) -> String {
    let names = columns(records);
    let quote = |text: String| if text.contains([',', '"', '\n']) { format!("\"{}\"", text.replace('"', "\"\"")) } else { text };
    let mut out = names.iter().cloned().map(quote).collect::<Vec<_>>().join(",") + "\n";
    for record in records {
        let row: Vec<String> = names
            .iter()
            .map(|name| match record.get(name) {
                Some(Value::Number(n)) => n.to_string(),
                Some(Value::Null) | None => String::new(),
                Some(value) => cell(value),
            })
            .map(quote)
            .collect();
        out += &(row.join(",") + "\n");
    }
    out
}

fn table(records: &[Record]) -> String {
    let names = columns(records);
    let rows: Vec<Vec<String>> = records.iter().map(|r| names.iter().map(|n| r.get(n).map_or("-".to_string(), cell)).collect()).collect();
    let numeric: Vec<bool> = names.iter().map(|n| records.iter().all(|r| matches!(r.get(n), Some(Value::Number(_)) | None))).collect();
    let widths: Vec<usize> =
        names.iter().enumerate().map(|(i, n)| rows.iter().map(|r| r[i].chars().count()).chain([n.len()]).max().unwrap_or(0)).collect();
    let line = |cells: &[String]| {
        cells
            .iter()
            .enumerate()
            .map(|(i, c)| if numeric[i] { format!("{c:>w$}", w = widths[i]) } else { format!("{c:<w$}", w = widths[i]) })
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_string()
    };
    let mut out = line(&names) + "\n";
    for row in &rows {
        out += &(line(row) + "\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_nested_result_flattens_to_prefixed_fields_without_its_lists() {
        let nested = json!({"model": "m", "ttft": {"p50_ms": 1.5, "p99_ms": 3}, "timeline": [1, 2], "cost": null});
        let record = flattened(&nested);
        assert_eq!(record.keys().collect::<Vec<_>>(), ["model", "ttft_p50_ms", "ttft_p99_ms", "cost"]);
        assert_eq!(record["ttft_p99_ms"], json!(3));
    }

    fn records() -> Vec<Record> {
        let mut a = Record::new();
        a.insert("bytes".into(), json!(1024));
        a.insert("time_us".into(), json!(12.3456));
        a.insert("link".into(), json!("GPU0 -> nvswitch, x18"));
        vec![a]
    }

    #[test]
    fn json_has_the_results_array() {
        let value: Value = serde_json::from_str(&render(&records(), Format::Json)).unwrap();
        assert_eq!(value["results"][0]["bytes"], json!(1024));
    }

    #[test]
    fn csv_quotes_commas_and_keeps_full_precision() {
        let text = render(&records(), Format::Csv);
        assert_eq!(text, "bytes,time_us,link\n1024,12.3456,\"GPU0 -> nvswitch, x18\"\n");
    }

    #[test]
    fn tables_align_numbers_right() {
        let text = render(&records(), Format::Table);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "bytes  time_us  link");
        assert_eq!(lines[1], " 1024    12.35  GPU0 -> nvswitch, x18");
    }
}
