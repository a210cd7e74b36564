//! Paper 000's table generator: field counts and record sizes, the duplicate bound, determinism.

use roamkv_lab::queries::schema::{self, ColumnKind, GenSpec, ITEMS, OWNERS};

fn spec(rows: usize, seed: u64) -> GenSpec {
    GenSpec {
        rows,
        foreign_rows: rows,
        duplicate_fraction: schema::DUPLICATE_FRACTION_DEFAULT,
        seed,
    }
}

#[test]
fn tables_have_paper_000s_field_counts_and_record_sizes() {
    assert_eq!(ITEMS.columns.len(), 10);
    assert_eq!(ITEMS.record_bytes(), 108);
    assert_eq!(OWNERS.columns.len(), 8);
    assert_eq!(OWNERS.record_bytes(), 87);
}

#[test]
fn text_values_have_their_declared_width() {
    let g = schema::generate(ITEMS, spec(500, 1)).expect("generate");
    for (c, col) in ITEMS.columns.iter().enumerate() {
        if let ColumnKind::Text(width) = col.kind {
            for r in 0..g.rows() {
                match g.value(r, c) {
                    rusqlite::types::Value::Text(t) => assert_eq!(t.len(), width, "{}", col.name),
                    other => panic!("{} is not text: {other:?}", col.name),
                }
            }
        }
    }
}

#[test]
fn non_key_columns_stay_within_the_duplicate_bound_and_have_some_duplicates() {
    let rows = 5_000;
    for table in [ITEMS, OWNERS] {
        let g = schema::generate(table, spec(rows, 9)).expect("generate");
        for (c, col) in table.columns.iter().enumerate().skip(1) {
            let dups = g.duplicate_rows(c);
            assert!(
                dups as f64 <= rows as f64 * schema::DUPLICATE_FRACTION_MAX,
                "{}.{}: {dups} duplicates",
                table.name,
                col.name
            );
            assert!(
                dups > 0,
                "{}.{} should repeat some values",
                table.name,
                col.name
            );
        }
        assert_eq!(g.duplicate_rows(0), 0, "keys are unique");
    }
}

#[test]
fn duplicate_fraction_above_twenty_percent_is_rejected() {
    let bad = GenSpec {
        duplicate_fraction: 0.25,
        ..spec(100, 1)
    };
    let err = schema::generate(ITEMS, bad)
        .err()
        .expect("0.25 exceeds the bound");
    assert!(err.to_string().contains("0.25"), "{err}");
    assert!(
        schema::generate(ITEMS, spec(0, 1)).is_err(),
        "empty table is an error"
    );
}

#[test]
fn same_seed_same_rows_other_seed_other_rows() {
    let a = schema::generate(ITEMS, spec(300, 5)).expect("a");
    let b = schema::generate(ITEMS, spec(300, 5)).expect("b");
    let c = schema::generate(ITEMS, spec(300, 6)).expect("c");
    let rows = |g: &schema::Generated| (0..g.rows()).map(|r| g.row(r)).collect::<Vec<_>>();
    assert_eq!(rows(&a), rows(&b));
    assert_ne!(rows(&a), rows(&c));
}

#[test]
fn foreign_keys_point_at_existing_owners() {
    let g = schema::generate(
        ITEMS,
        GenSpec {
            foreign_rows: 700,
            ..spec(1_000, 3)
        },
    )
    .expect("generate");
    let fk = ITEMS
        .columns
        .iter()
        .position(|c| c.kind == ColumnKind::ForeignKey)
        .expect("owner_id");
    for r in 0..g.rows() {
        match g.value(r, fk) {
            rusqlite::types::Value::Integer(id) => {
                assert!((1..=700).contains(&id), "owner_id {id}")
            }
            other => panic!("owner_id not an integer: {other:?}"),
        }
    }
}
