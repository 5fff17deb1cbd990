//! One measured figure beside its baseline, as a JSON line or a table row.

use serde::{Deserialize, Serialize};

/// A figure measured in the same run as its baseline.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// Suite (`ipc`).
    pub suite: String,
    /// What was measured, e.g. `srr_remote_32B`.
    pub name: String,
    /// The figure (median of rounds unless the name says otherwise).
    pub value: f64,
    /// Unit of `value` and `baseline_value` (`us`, `ms`, `MB/s`, `packets`, `exchanges/s`, `MB`).
    pub unit: String,
    /// What it is compared with, e.g. `udp_pingpong_32B`.
    pub baseline: String,
    /// The baseline's figure, measured in the same run.
    pub baseline_value: f64,
    /// `value / baseline_value`.
    pub ratio: f64,
}

impl Record {
    /// A record; the ratio is computed (0 if the baseline is 0).
    pub fn new(suite: &str, name: &str, value: f64, unit: &str, baseline: &str, baseline_value: f64) -> Record {
        let ratio = if baseline_value != 0.0 { value / baseline_value } else { 0.0 };
        Record {
            suite: suite.to_string(),
            name: name.to_string(),
            value,
            unit: unit.to_string(),
            baseline: baseline.to_string(),
            baseline_value,
            ratio,
        }
    }

    /// The record as one line of JSON (no trailing newline), keys in the documented order.
    pub fn to_json_line(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// Formats a figure with about four significant digits.
pub fn fmt_num(v: f64) -> String {
    let a = v.abs();
    if a >= 1000.0 {
        format!("{v:.0}")
    } else if a >= 100.0 {
        format!("{v:.1}")
    } else if a >= 10.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// Records as an aligned text table with a header line.
pub fn table(records: &[Record]) -> String {
    let head = ["name", "value", "unit", "baseline", "baseline value", "ratio"];
    let rows: Vec<[String; 6]> = records
        .iter()
        .map(|r| {
            [
                r.name.clone(),
                fmt_num(r.value),
                r.unit.clone(),
                r.baseline.clone(),
                fmt_num(r.baseline_value),
                format!("{:.3}", r.ratio),
            ]
        })
        .collect();
    let mut width = head.map(str::len);
    for row in &rows {
        for (w, c) in width.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: [&str; 6]| -> String {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            let pad = width[i].saturating_sub(c.chars().count());
            // Names left-aligned, numbers right-aligned.
            if matches!(i, 1 | 4 | 5) {
                s.push_str(&" ".repeat(pad));
                s.push_str(c);
            } else {
                s.push_str(c);
                s.push_str(&" ".repeat(pad));
            }
            s.push_str("  ");
        }
        s.trim_end().to_string() + "\n"
    };
    let mut out = line(head);
    for row in &rows {
        out.push_str(&line([&row[0], &row[1], &row[2], &row[3], &row[4], &row[5]]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_line_has_the_documented_keys_and_ratio() {
        let r = Record::new("ipc", "srr_remote_32B", 20.0, "us", "udp_pingpong_32B", 16.0);
        let line = r.to_json_line();
        assert!(!line.contains('\n'));
        assert!(line.starts_with(r#"{"suite":"ipc","name":"srr_remote_32B","value":20.0,"unit":"us","#), "{line}");
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        let mut want = vec!["suite", "name", "value", "unit", "baseline", "baseline_value", "ratio"];
        let mut got = keys.clone();
        want.sort_unstable();
        got.sort_unstable();
        assert_eq!(got, want);
        assert_eq!(v["ratio"].as_f64(), Some(1.25));
        let back: Record = serde_json::from_str(&line).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn zero_baseline_gives_zero_ratio_not_infinity() {
        let r = Record::new("ipc", "x", 1.0, "us", "y", 0.0);
        assert_eq!(r.ratio, 0.0);
        assert!(serde_json::from_str::<serde_json::Value>(&r.to_json_line()).is_ok());
    }

    #[test]
    fn table_aligns_columns() {
        let rs = vec![
            Record::new("ipc", "a", 1.5, "us", "base", 3.0),
            Record::new("ipc", "a_much_longer_name", 1234.5, "MB/s", "b", 617.25),
        ];
        let t = table(&rs);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3);
        let col = |l: &str, word: &str| l.find(word).unwrap();
        // The unit column starts at the same place on every line.
        assert_eq!(col(lines[1], " us"), col(lines[2], " MB/s"));
        assert!(lines[2].ends_with("2.000"));
        assert!(lines[1].ends_with("0.500"));
    }
}
