//! The constants of the EdgeX core-data v3 contract, in a leaf module that imports nothing of the
//! server (as EdgeX keeps them in go-mod-core-contracts' `common/constants.go`): the DTOs, the
//! validation and the error bodies all read them from here, and nothing here reads them back.

/// The API version every v3 request names and every v3 response carries.
pub const API_VERSION: &str = "v3";

/// valueType values EdgeX v3 defines, and `ObjectArray`, which go-mod-core-contracts v4 added
/// (`common.ValueTypeObjectArray`). The order is on disk (a compact stored reading keeps a
/// type as its place here: compact.rs, docs/FORMAT.md): append only.
pub const VALUE_TYPES: [&str; 27] = [
    "Bool",
    "String",
    "Uint8",
    "Uint16",
    "Uint32",
    "Uint64",
    "Int8",
    "Int16",
    "Int32",
    "Int64",
    "Float32",
    "Float64",
    "Binary",
    "BoolArray",
    "StringArray",
    "Uint8Array",
    "Uint16Array",
    "Uint32Array",
    "Uint64Array",
    "Int8Array",
    "Int16Array",
    "Int32Array",
    "Int64Array",
    "Float32Array",
    "Float64Array",
    "Object",
    "ObjectArray",
];
