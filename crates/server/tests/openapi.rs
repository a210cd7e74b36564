//! The native API's OpenAPI document (`GET /api/roamkv/v1/openapi.json`, crates/server/src/
//! routes/openapi.rs) against the router: the same operations as the `.route(...)` calls that build
//! `/api/roamkv/v1`, both ways, and every operation it documents answered by a running server
//! (none falls through to the router's "no route").

mod common;

use std::collections::BTreeSet;
use std::path::Path;

use common::Server;
use serde_json::Value;

const PREFIX: &str = "/api/roamkv/v1";
/// The files whose `routes()` build the native API (merged under PREFIX by routes/mod.rs).
const ROUTE_FILES: [&str; 5] = [
    "routes/native.rs",
    "routes/cloud.rs",
    "handoff/mod.rs",
    "routes/backup.rs",
    "routes/export.rs",
];

fn source(file: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// (METHOD, path) of every `.route("PATH", handlers)` call in `text`, under `prefix`.
fn routes_in(text: &str, prefix: &str) -> BTreeSet<(String, String)> {
    let mut routes = BTreeSet::new();
    for call in text.split(".route(").skip(1) {
        let path = call.split('"').nth(1).expect("a path literal");
        // The handlers: up to the call's closing parenthesis at depth 0.
        let rest = call.split_once(',').map_or("", |(_, h)| h);
        let mut depth = 0i32;
        let end = rest
            .char_indices()
            .find(|&(_, c)| {
                match c {
                    '(' => depth += 1,
                    ')' => depth -= 1,
                    _ => {}
                }
                depth < 0
            })
            .map_or(rest.len(), |(i, _)| i);
        let handlers = &rest[..end];
        for method in ["get", "post", "put", "delete"] {
            let called = handlers.trim_start().starts_with(&format!("{method}("))
                || handlers.contains(&format!(".{method}("))
                || handlers.contains(&format!("routing::{method}("));
            if called {
                routes.insert((method.to_ascii_uppercase(), format!("{prefix}{path}")));
            }
        }
    }
    routes
}

fn router_routes() -> BTreeSet<(String, String)> {
    let mut routes: BTreeSet<_> = ROUTE_FILES
        .iter()
        .flat_map(|f| routes_in(&source(f), PREFIX))
        .collect();
    // routes/mod.rs adds the document itself, outside the nested block.
    let router = source("routes/mod.rs");
    routes.extend(
        routes_in(&router, "")
            .into_iter()
            .filter(|(_, p)| p.starts_with(PREFIX)),
    );
    routes
}

fn documented(doc: &Value) -> BTreeSet<(String, String)> {
    let mut routes = BTreeSet::new();
    for (path, operations) in doc["paths"].as_object().expect("paths") {
        for method in operations.as_object().expect("operations").keys() {
            routes.insert((method.to_ascii_uppercase(), path.clone()));
        }
    }
    routes
}

#[test]
fn the_route_parser_reads_chained_methods() {
    let text =
        r#".route("/a/{x}", get(h::a).put(h::b).delete(c)) .route("/b", axum::routing::delete(d))"#;
    let found: Vec<_> = routes_in(text, "/p").into_iter().collect();
    let want = [
        ("DELETE", "/p/a/{x}"),
        ("DELETE", "/p/b"),
        ("GET", "/p/a/{x}"),
        ("PUT", "/p/a/{x}"),
    ];
    assert_eq!(
        found,
        want.map(|(m, p)| (m.to_string(), p.to_string())).to_vec()
    );
}

#[tokio::test]
async fn the_document_has_exactly_the_routers_operations_and_each_is_answered() {
    let server = Server::start(|_| {}).await;
    let (status, doc) = server.get("/api/roamkv/v1/openapi.json").await;
    assert_eq!(status, 200);
    assert!(
        doc["openapi"].as_str().is_some_and(|v| v.starts_with("3.")),
        "{doc}"
    );
    let documented = documented(&doc);
    let router = router_routes();
    assert!(router.len() >= 24, "the parser found {router:?}");
    let undocumented: Vec<_> = router.difference(&documented).collect();
    let unrouted: Vec<_> = documented.difference(&router).collect();
    assert!(
        undocumented.is_empty() && unrouted.is_empty(),
        "routes without a document entry: {undocumented:?}; documented without a route: {unrouted:?}"
    );
    // Each operation reaches its handler: whatever it answers to an empty request, it is not
    // the router's fallback.
    for (method, path) in &documented {
        let url = format!(
            "{}{}",
            server.base,
            path.replace("{device}", "probe-device")
                .replace("{id}", "probe")
                .replace("{n}", "0")
        );
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let answer = server
            .client
            .request(method.clone(), &url)
            .send()
            .await
            .expect("sent");
        let status = answer.status().as_u16();
        let body = answer.text().await.unwrap_or_default();
        assert!(
            !body.contains("no route"),
            "{method} {path}: {status} {body}"
        );
        for response in doc["paths"][path][method.as_str().to_ascii_lowercase()]["responses"]
            .as_object()
            .into_iter()
        {
            assert!(!response.is_empty(), "{method} {path} documents no answer");
        }
    }
    server.stop().await;
}
