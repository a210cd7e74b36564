//! A self-contained HTML page built section by section, and the one HTML escaper of the rig.
use super::header::MachineHeader;
use crate::error::Error;
use std::fmt::Write as _;
use std::path::Path;

/// Text made safe for HTML element content and quoted attribute values: `& < > " '`.
pub fn escape(text: &str) -> String {
    html_escape::encode_quoted_attribute(text).into_owned()
}

/// A self-contained HTML page built section by section.
pub struct Html {
    body: String,
    title: String,
}

impl Html {
    pub fn new(title: &str, header: &MachineHeader) -> Html {
        let mut html = Html {
            body: String::new(),
            title: title.to_string(),
        };
        let _ = write!(html.body, "<h1>{}</h1>", escape(title));
        html.table(&["machine", ""], &header.rows());
        html
    }
    pub fn heading(&mut self, text: &str) {
        let _ = writeln!(self.body, "<h2>{}</h2>", escape(text));
    }
    pub fn paragraph(&mut self, text: &str) {
        let _ = writeln!(self.body, "<p>{}</p>", escape(text));
    }
    pub fn preformatted(&mut self, text: &str) {
        let _ = writeln!(self.body, "<pre>{}</pre>", escape(text));
    }
    pub fn table(&mut self, columns: &[&str], rows: &[Vec<String>]) {
        self.body.push_str("<table><tr>");
        for c in columns {
            let _ = write!(self.body, "<th>{}</th>", escape(c));
        }
        self.body.push_str("</tr>\n");
        for row in rows {
            self.body.push_str("<tr>");
            for cell in row {
                let _ = write!(self.body, "<td>{}</td>", escape(cell));
            }
            self.body.push_str("</tr>\n");
        }
        self.body.push_str("</table>\n");
    }
    /// Inline SVG (trusted: produced by this module's chart functions).
    pub fn svg(&mut self, svg: &str) {
        let _ = writeln!(self.body, "<div class=\"chart\">{svg}</div>");
    }
    pub fn write(&self, path: &Path) -> Result<(), Error> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        }
        let page = format!(
            "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>{}</title><style>\
             body{{font-family:sans-serif;margin:2em;max-width:1100px}} table{{border-collapse:collapse;margin:1em 0}}\
             td,th{{border:1px solid #ccc;padding:2px 8px;text-align:right}} th{{background:#eee}}\
             pre{{background:#f6f6f6;padding:1em;overflow-x:auto}}</style></head><body>\n{}</body></html>\n",
            escape(&self.title),
            self.body
        );
        std::fs::write(path, page).map_err(|e| Error::io(path, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_escapes_text() {
        let header = MachineHeader::collect();
        let mut html = Html::new("a<b", &header);
        html.paragraph("x & 'y'");
        assert!(html.body.contains("a&lt;b") && html.body.contains("x &amp; &#x27;y&#x27;"));
    }
}
