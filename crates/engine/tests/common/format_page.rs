//! docs/FORMAT.md's worked examples, parsed from the page (format_doc.rs checks them).

use std::collections::BTreeMap;
use std::path::Path;

pub fn format_md() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/FORMAT.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// Every `<!-- example: NAME -->` block of the page: NAME -> its bytes. Inside the fenced block
/// after the marker, each line is hex bytes separated by spaces; `#` starts a comment. Anything
/// else is an error, so a typo in the page fails here rather than decoding as something else.
pub fn examples(doc: &str) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut lines = doc.lines().enumerate();
    while let Some((_, line)) = lines.next() {
        let Some(name) = line
            .trim()
            .strip_prefix("<!-- example:")
            .and_then(|rest| rest.strip_suffix("-->"))
        else {
            continue;
        };
        let name = name.trim().to_string();
        let fence = lines.next().map(|(_, l)| l.trim());
        assert!(
            fence.is_some_and(|f| f.starts_with("```")),
            "FORMAT.md: example {name} is not followed by a fenced block"
        );
        let mut bytes = Vec::new();
        for (number, line) in lines.by_ref() {
            if line.trim().starts_with("```") {
                break;
            }
            let data = line.split('#').next().unwrap_or("");
            for token in data.split_whitespace() {
                let byte = (token.len() == 2)
                    .then(|| u8::from_str_radix(token, 16).ok())
                    .flatten()
                    .unwrap_or_else(|| {
                        panic!(
                            "FORMAT.md line {}: {token:?} in example {name} is not a hex byte",
                            number + 1
                        )
                    });
                bytes.push(byte);
            }
        }
        assert!(!bytes.is_empty(), "FORMAT.md: example {name} has no bytes");
        assert!(
            out.insert(name.clone(), bytes).is_none(),
            "FORMAT.md: two examples are named {name}"
        );
    }
    out
}

pub fn example(name: &str) -> Vec<u8> {
    examples(&format_md())
        .remove(name)
        .unwrap_or_else(|| panic!("FORMAT.md has no example named {name}"))
}
