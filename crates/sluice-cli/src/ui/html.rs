//! HTML text: escaping (everything taken from the lake goes through
//! [`esc`]), the page frame and a table.

use std::fmt::Write as _;

/// `text` with `&`, `<`, `>`, `"` and `'` escaped: safe in element text and
/// in quoted attribute values (the lineage page's escaping, shared).
pub(crate) fn esc(text: &str) -> String {
    sluice::lineage::html::escape(text)
}

/// A whole page: `title` (escaped here), navigation, `body` (HTML already).
/// `refresh`: reload every this many seconds (a run still going).
pub(crate) fn page(title: &str, body: &str, refresh: Option<u32>) -> String {
    let refresh = refresh
        .map(|s| format!("<meta http-equiv=\"refresh\" content=\"{s}\">"))
        .unwrap_or_default();
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">{refresh}\
         <title>{} · sluice</title><link rel=\"stylesheet\" href=\"/static/style.css\"></head>\
         <body><nav><a href=\"/\">Runs</a> <a href=\"/tables\">Tables</a></nav><main>{body}</main></body></html>\n",
        esc(title)
    )
}

/// A table: `header` cells and `rows` of cells that are HTML already.
pub(crate) fn table(class: &str, header: &[&str], rows: &[Vec<String>]) -> String {
    let mut out = format!("<table class=\"{}\"><thead><tr>", esc(class));
    for h in header {
        let _ = write!(out, "<th>{}</th>", esc(h));
    }
    out.push_str("</tr></thead><tbody>");
    for row in rows {
        out.push_str("<tr>");
        for cell in row {
            let _ = write!(out, "<td>{cell}</td>");
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table>");
    out
}

/// The stylesheet every page shares.
pub(crate) const STYLE: &str = "\
body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#1d2330;background:#f7f8fa}\
nav{background:#1d2330;padding:.6em 1.2em}nav a{color:#e8ecf3;margin-right:1.2em;text-decoration:none}\
main{padding:1em 1.6em;max-width:1200px}h1{font-size:1.35em}h2{font-size:1.1em;margin-top:1.6em}\
table{border-collapse:collapse;background:#fff;margin:.4em 0}th,td{border:1px solid #d9dde5;padding:.3em .6em;text-align:left;vertical-align:top}\
th{background:#eef1f6}td.num{text-align:right}pre{background:#fff;border:1px solid #d9dde5;padding:.6em;overflow:auto;max-height:30em;white-space:pre-wrap}\
.failed,.cancelled,.abandoned{color:#b3261e;font-weight:600}.completed{color:#1e7b34}.skipped,.not_reached{color:#6b7280}\
.running{color:#a15c00}code{font-size:.95em}.muted{color:#6b7280}";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn everything_that_could_open_a_tag_or_close_an_attribute_is_escaped() {
        assert_eq!(
            esc("<script>\"x\"&'y'</script>"),
            "&lt;script&gt;&quot;x&quot;&amp;&#39;y&#39;&lt;/script&gt;"
        );
        let p = page("<b>", "", Some(5));
        assert!(p.contains("<title>&lt;b&gt; · sluice</title>") && p.contains("refresh"));
    }
}
