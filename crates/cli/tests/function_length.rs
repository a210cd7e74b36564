//! No function longer than a screen without a written reason (docs/ARCHITECTURE.md's rule;
//! CONTRIBUTING.md, "short functions by default").
//!
//! Every non-test `.rs` file under `crates/<crate>/src/` of the workspace's crates is parsed with
//! `syn`. A function or method whose text, from its `fn` line to its closing brace, runs over
//! [`LINES_MAX`] lines fails the test unless a `// Long because: ...` comment (or a doc line
//! holding `Long because:`) sits immediately above it, among its doc comments and attributes.
//! Unit tests (`#[cfg(test)]` modules, `#[test]` functions) are not checked.

mod workspace;

use std::path::{Path, PathBuf};
use workspace::{workspace_crates, workspace_root};

use syn::spanned::Spanned;
use syn::visit::Visit;

/// The longest a function may be without a reason above it, in lines (`fn` line to `}`).
const LINES_MAX: usize = 80;

/// The marker that gives a long function its reason.
const REASON_MARKER: &str = "Long because:";

/// One function over the limit without a reason.
#[derive(Debug, Clone, PartialEq, Eq)]
struct LongFunction {
    file: String,
    line: usize,
    name: String,
    lines: usize,
}

impl std::fmt::Display for LongFunction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}: {} is {} lines (max {LINES_MAX})",
            self.file, self.line, self.name, self.lines
        )
    }
}

/// Walks a file's syntax tree, collecting every function over the limit without a reason.
struct Checker<'a> {
    file: &'a str,
    source_lines: Vec<&'a str>,
    /// The `Type` of the `impl Type` (or `impl Trait for Type`) being walked, if any.
    impl_type: Option<String>,
    found: Vec<LongFunction>,
}

/// True for `#[cfg(test)]` and `#[test]`: code that only a test build compiles.
fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|attr| {
        if attr.path().is_ident("test") {
            return true;
        }
        if !attr.path().is_ident("cfg") {
            return false;
        }
        let mut is_test = false;
        let _ = attr.parse_nested_meta(|meta| {
            is_test |= meta.path.is_ident("test");
            Ok(())
        });
        is_test
    })
}

impl<'a> Checker<'a> {
    fn new(file: &'a str, source: &'a str) -> Self {
        Checker {
            file,
            source_lines: source.lines().collect(),
            impl_type: None,
            found: Vec::new(),
        }
    }

    /// True when `Long because:` is written in the comments and attributes right above the
    /// function: the lines above `signature_line` (1-based, the line of its `fn`), upward while
    /// they are comments, doc comments or attributes.
    fn has_reason(&self, attrs: &[syn::Attribute], signature_line: usize) -> bool {
        let attr_lines = |line: usize| {
            attrs
                .iter()
                .any(|a| a.span().start().line <= line && line <= a.span().end().line)
        };
        let mut line = signature_line;
        while line > 1 {
            line -= 1;
            let text = self.source_lines.get(line - 1).map_or("", |l| l.trim());
            let is_comment = text.starts_with("//");
            if !is_comment && !attr_lines(line) && !text.starts_with("#[") {
                return false;
            }
            if text.contains(REASON_MARKER) {
                return true;
            }
        }
        false
    }

    fn check(&mut self, attrs: &[syn::Attribute], signature: &syn::Signature, body: &syn::Block) {
        let first = signature.fn_token.span.start().line;
        let last = body.brace_token.span.close().end().line;
        let lines = last + 1 - first;
        if lines <= LINES_MAX || self.has_reason(attrs, first) {
            return;
        }
        let name = match &self.impl_type {
            Some(ty) => format!("{ty}::{}", signature.ident),
            None => signature.ident.to_string(),
        };
        self.found.push(LongFunction {
            file: self.file.to_string(),
            line: first,
            name,
            lines,
        });
    }
}

impl<'ast> Visit<'ast> for Checker<'_> {
    fn visit_item_mod(&mut self, module: &'ast syn::ItemMod) {
        if !is_test_only(&module.attrs) {
            syn::visit::visit_item_mod(self, module);
        }
    }

    fn visit_item_impl(&mut self, item: &'ast syn::ItemImpl) {
        if is_test_only(&item.attrs) {
            return;
        }
        let type_name = match &*item.self_ty {
            syn::Type::Path(path) => path.path.segments.last().map(|s| s.ident.to_string()),
            _ => None,
        };
        let outer = std::mem::replace(&mut self.impl_type, type_name);
        syn::visit::visit_item_impl(self, item);
        self.impl_type = outer;
    }

    fn visit_item_trait(&mut self, item: &'ast syn::ItemTrait) {
        if is_test_only(&item.attrs) {
            return;
        }
        let outer = self.impl_type.replace(item.ident.to_string());
        syn::visit::visit_item_trait(self, item);
        self.impl_type = outer;
    }

    fn visit_item_fn(&mut self, item: &'ast syn::ItemFn) {
        if is_test_only(&item.attrs) {
            return;
        }
        // A function nested in a method is not the method's type's.
        let outer = self.impl_type.take();
        self.check(&item.attrs, &item.sig, &item.block);
        syn::visit::visit_item_fn(self, item);
        self.impl_type = outer;
    }

    fn visit_impl_item_fn(&mut self, item: &'ast syn::ImplItemFn) {
        if is_test_only(&item.attrs) {
            return;
        }
        self.check(&item.attrs, &item.sig, &item.block);
        let outer = self.impl_type.take();
        syn::visit::visit_impl_item_fn(self, item);
        self.impl_type = outer;
    }

    fn visit_trait_item_fn(&mut self, item: &'ast syn::TraitItemFn) {
        if is_test_only(&item.attrs) {
            return;
        }
        if let Some(body) = &item.default {
            self.check(&item.attrs, &item.sig, body);
        }
        let outer = self.impl_type.take();
        syn::visit::visit_trait_item_fn(self, item);
        self.impl_type = outer;
    }
}

/// The functions of one source file over the limit without a reason; `file` names it in the
/// findings.
fn long_functions(file: &str, source: &str) -> Vec<LongFunction> {
    let tree = syn::parse_file(source).unwrap_or_else(|e| {
        let at = e.span().start();
        panic!("{file}:{}:{}: does not parse: {e}", at.line, at.column)
    });
    let mut checker = Checker::new(file, source);
    checker.visit_file(&tree);
    checker.found
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let entries =
            std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("listing {}: {e}", dir.display()));
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// Every function of the workspace's crates over the limit without a reason, in file order.
fn workspace_long_functions() -> Vec<LongFunction> {
    let root = workspace_root();
    let mut out = Vec::new();
    for krate in workspace_crates() {
        for path in rust_files(&root.join("crates").join(&krate).join("src")) {
            let source = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
            let relative = path.strip_prefix(&root).unwrap_or(&path);
            out.extend(long_functions(&relative.to_string_lossy(), &source));
        }
    }
    out
}

#[test]
fn no_function_is_over_80_lines_without_a_reason_above_it() {
    let unexplained: Vec<String> = workspace_long_functions()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert!(
        unexplained.is_empty(),
        "functions over {LINES_MAX} lines: split them into named steps, or write \
         `// {REASON_MARKER} ...` right above them:\n{}",
        unexplained.join("\n")
    );
}

/// A function body of `body_lines` statement lines, so that the whole function (signature and
/// closing brace included) is `body_lines + 2` lines long.
fn function_source(name: &str, body_lines: usize) -> String {
    let body: String = (0..body_lines)
        .map(|i| format!("    let x{i} = {i};\n"))
        .collect();
    format!("fn {name}() {{\n{body}}}\n")
}

#[test]
fn the_check_names_a_long_function_with_its_file_line_and_length() {
    let source = format!(
        "//! A module.\n\n{}\n{}",
        function_source("short", LINES_MAX - 2),
        function_source("long", LINES_MAX - 1)
    );
    let found = long_functions("src/x.rs", &source);
    let short_lines = LINES_MAX;
    let long_line = 3 + short_lines + 1;
    assert_eq!(
        found,
        vec![LongFunction {
            file: "src/x.rs".into(),
            line: long_line,
            name: "long".into(),
            lines: LINES_MAX + 1,
        }]
    );
    assert_eq!(
        found[0].to_string(),
        format!("src/x.rs:{long_line}: long is 81 lines (max 80)")
    );
}

#[test]
fn the_check_names_methods_by_their_type_and_finds_nested_functions() {
    let long_method = function_source("apply", LINES_MAX);
    let nested = function_source("inner", LINES_MAX);
    let source = format!(
        "struct Player;\nimpl Player {{\n{long_method}\n    fn outer() {{\n{nested}    }}\n}}\n"
    );
    let names: Vec<String> = long_functions("src/p.rs", &source)
        .into_iter()
        .map(|f| f.name)
        .collect();
    assert_eq!(names, ["Player::apply", "Player::outer", "inner"]);
}

#[test]
fn a_reason_above_the_function_lets_it_pass_and_one_further_up_does_not() {
    let long = function_source("table", LINES_MAX + 5);
    let with_comment = format!("// Long because: one flat table.\n#[inline]\n{long}");
    assert_eq!(long_functions("a.rs", &with_comment), vec![]);
    let with_doc = format!("/// What it does.\n///\n/// Long because: one match.\n{long}");
    assert_eq!(long_functions("b.rs", &with_doc), vec![]);
    let detached =
        format!("// Long because: this was about something else.\nconst X: u8 = 1;\n{long}");
    assert_eq!(long_functions("c.rs", &detached).len(), 1);
}

#[test]
fn unit_tests_are_not_checked() {
    let long = function_source("scenario", LINES_MAX + 5);
    let source = format!("#[cfg(test)]\nmod tests {{\n{long}}}\n#[test]\n{long}");
    assert_eq!(long_functions("t.rs", &source), vec![]);
}
