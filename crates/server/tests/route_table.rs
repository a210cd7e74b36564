//! docs/SERVER.md's route table is the truth about the EdgeX routes: the same routes as the
//! router's `/api/v3` routes (crates/server/src/routes/mod.rs), the same as EdgeX's own document
//! (edgex_openapi/core-data.yaml), each answered by a running server as the table says (501 or
//! not), each with a test that exercises it.

mod common;

use std::collections::BTreeSet;
use std::path::Path;

use common::Server;

const PREFIX: &str = "/api/v3";

/// One row: method, route (with its parameter names), whether it answers 501, the test file.
struct Row {
    method: String,
    route: String,
    not_implemented: bool,
    test: String,
}

fn repo_file(path: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// `/a/{x}/b/{y}` → `/a/{}/b/{}`: routes compared whatever their parameters are named.
fn shape(route: &str) -> String {
    let mut out = String::new();
    let mut in_name = false;
    for c in route.chars() {
        match c {
            '{' => {
                in_name = true;
                out.push_str("{}");
            }
            '}' => in_name = false,
            _ if !in_name => out.push(c),
            _ => {}
        }
    }
    out
}

fn table() -> Vec<Row> {
    let doc = repo_file("docs/SERVER.md");
    let section = doc
        .split("### Route table")
        .nth(1)
        .expect("docs/SERVER.md has a ### Route table");
    section
        .lines()
        .skip_while(|l| !l.starts_with("| method |"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            assert!(cells.len() >= 6, "a row of four cells: {line}");
            Row {
                method: cells[1].to_string(),
                route: cells[2].trim_matches('`').to_string(),
                not_implemented: cells[3].starts_with("**501**"),
                test: cells[4].to_string(),
            }
        })
        .collect()
}

/// (METHOD, shape) of every `.route(...)` in the v3 block of routes/mod.rs.
fn router_routes() -> BTreeSet<(String, String)> {
    let source = repo_file("crates/server/src/routes/mod.rs");
    let block = source
        .split("fn v3_routes() -> Router<Shared> {")
        .nth(1)
        .and_then(|rest| rest.split(".layer(").next())
        .expect("routes/mod.rs has fn v3_routes");
    let mut routes = BTreeSet::new();
    for call in block.split(".route(").skip(1) {
        let path = call.split('"').nth(1).expect("a path literal");
        let handlers = call.split_once(',').map_or("", |(_, h)| h);
        for method in ["get", "post", "put", "delete"] {
            let called = handlers.contains(&format!("{method}(v3::"))
                || handlers.contains(&format!(".{method}(v3::"));
            if called {
                routes.insert((
                    method.to_ascii_uppercase(),
                    shape(&format!("{PREFIX}{path}")),
                ));
            }
        }
    }
    routes
}

/// (METHOD, shape) of every operation of EdgeX's document.
fn openapi_routes() -> BTreeSet<(String, String)> {
    let yaml = repo_file("crates/server/tests/edgex_openapi/core-data.yaml");
    let mut routes = BTreeSet::new();
    let mut in_paths = false;
    let mut path = String::new();
    for line in yaml.lines() {
        if line == "paths:" {
            in_paths = true;
        } else if in_paths && !line.starts_with(' ') && !line.is_empty() {
            in_paths = false;
        } else if in_paths && line.starts_with("  /") {
            path = line.trim().trim_end_matches(':').to_string();
        } else if let Some(method) = line.strip_prefix("    ").map(|m| m.trim_end_matches(':'))
            && in_paths
            && ["get", "post", "put", "delete", "patch"].contains(&method)
        {
            routes.insert((
                method.to_ascii_uppercase(),
                shape(&format!("{PREFIX}{path}")),
            ));
        }
    }
    routes
}

#[test]
fn the_table_lists_exactly_the_routes_of_the_router_and_of_edgex_document() {
    let table: BTreeSet<(String, String)> = table()
        .iter()
        .map(|r| (r.method.clone(), shape(&r.route)))
        .collect();
    let router = router_routes();
    let openapi = openapi_routes();
    assert!(
        openapi.len() >= 24,
        "read {} operations of the document",
        openapi.len()
    );
    assert_eq!(
        table, router,
        "docs/SERVER.md's route table vs routes/mod.rs"
    );
    assert_eq!(
        table, openapi,
        "docs/SERVER.md's route table vs EdgeX's core-data.yaml"
    );
}

#[test]
fn each_route_names_a_test_that_exercises_it() {
    for row in table() {
        let text = repo_file(&format!("crates/server/tests/{}", row.test));
        // The route's fixed part up to its first parameter: what a test's request must contain.
        let fixed = row.route[PREFIX.len()..]
            .split('{')
            .next()
            .expect("a route");
        assert!(
            text.contains(fixed),
            "{} {}: {} does not request {fixed}",
            row.method,
            row.route,
            row.test
        );
    }
}

/// A concrete path of a route: names, a UUID, times.
fn concrete(route: &str) -> String {
    route
        .replace("{start}", "1")
        .replace("{end}", "2")
        .replace("{age}", "0")
        .replace("{id}", "14a42ea6-c394-41c3-8bcd-a29b9f5e6835")
        .split('/')
        .map(|segment| {
            if segment.starts_with('{') {
                "x"
            } else {
                segment
            }
        })
        .collect::<Vec<_>>()
        .join("/")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_route_answers_as_the_table_says() {
    let server = Server::start(|_| {}).await;
    let client = reqwest::Client::new();
    for row in table() {
        let url = format!("{}{}", server.base, concrete(&row.route));
        let method = row.method.parse().expect("a method");
        let answer = client
            .request(method, &url)
            .header("content-type", "application/json")
            .body("{}")
            .send()
            .await
            .expect("sent");
        let status = answer.status().as_u16();
        let body = answer.text().await.expect("body");
        assert!(
            !body.contains("no route") && status != 405,
            "{} {}: the router does not take it ({status} {body})",
            row.method,
            row.route
        );
        assert_eq!(
            status == 501,
            row.not_implemented,
            "{} {}: answered {status}, the table says {}: {body}",
            row.method,
            row.route,
            if row.not_implemented {
                "501"
            } else {
                "not 501"
            }
        );
    }
    server.stop().await;
}
