#!/usr/bin/env python3
"""EdgeX's core-data OpenAPI document (core-data.yaml, vendored unchanged) with the corrections
of DEVIATIONS.md applied: the document the schemathesis test (../edgex_schemathesis.rs) runs.

Each correction is one function named after its entry in DEVIATIONS.md (D1, D2, ...); the
evidence for each is there. Usage: effective_spec.py CORE_DATA_YAML MAX_RESULT_COUNT OUT_YAML
"""

import sys

import yaml

ERROR_REF = {"$ref": "#/components/schemas/ErrorResponse"}
NAME_SCHEMA = {
    "type": "string",
    "minLength": 1,
    "maxLength": 255,
    "pattern": "^[^\\x00\\x01][^\\x00]*$",
}
UUID_OR_EMPTY = (
    "^([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})?$"
)
GO_PARSE_BOOL = ["1", "t", "T", "TRUE", "true", "True", "0", "f", "F", "FALSE", "false", "False"]
METHODS = ("get", "post", "put", "delete", "patch")


def operations(doc):
    for path, item in doc["paths"].items():
        for method in METHODS:
            if method in item:
                yield path, item, item[method]


def d1_error_bodies_are_one_object(doc):
    for _, _, op in operations(doc):
        for response in op.get("responses", {}).values():
            media = response.get("content", {}).get("application/json", {})
            schema = media.get("schema", {})
            if schema.get("type") == "array" and schema.get("items") == ERROR_REF:
                media["schema"] = dict(ERROR_REF)


def d2_numeric_is_a_go_bool(doc):
    doc["components"]["parameters"]["numericParam"]["schema"] = {
        "type": "string",
        "enum": GO_PARSE_BOOL,
    }


def d3_correlation_id_is_a_uuid_or_empty(doc):
    header = doc["components"]["parameters"]["correlatedRequestHeader"]
    header["schema"] = {"type": "string", "pattern": UUID_OR_EMPTY}


def d4_every_operation_may_answer_400(doc):
    for _, _, op in operations(doc):
        op.setdefault("responses", {}).setdefault(
            "400",
            {
                "description": "X-Correlation-ID is not a UUID",
                "content": {"application/json": {"schema": dict(ERROR_REF)}},
            },
        )


def d5_limit_and_offset_have_maxima(doc, max_result_count):
    parameters = doc["components"]["parameters"]
    parameters["limitParam"]["schema"]["maximum"] = max_result_count
    parameters["offsetParam"]["schema"]["maximum"] = 2**31 - 1


def d6_names_follow_the_id_rule(doc):
    for _, item, op in operations(doc):
        for parameter in item.get("parameters", []) + op.get("parameters", []):
            if parameter.get("in") == "path" and "ame" in parameter.get("name", ""):
                parameter["schema"] = dict(NAME_SCHEMA)


def d7_values_may_be_numbers(doc):
    schemas = doc["components"]["schemas"]
    schemas["Reading"]["properties"]["value"] = {
        "oneOf": [{"type": "string"}, {"type": "number"}]
    }
    response = schemas["MultiReadingsResponse"]
    response["properties"]["aggregateFunc"] = {
        "type": "string",
        "enum": ["MIN", "MAX", "COUNT", "SUM", "AVG"],
    }


def d13_object_values_are_json_values(doc):
    reading = doc["components"]["schemas"]["Reading"]["properties"]
    reading["objectValue"] = {"description": reading["objectValue"]["description"]}


def main():
    source, max_result_count, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    with open(source, encoding="utf-8") as f:
        doc = yaml.safe_load(f)
    d1_error_bodies_are_one_object(doc)
    d2_numeric_is_a_go_bool(doc)
    d3_correlation_id_is_a_uuid_or_empty(doc)
    d4_every_operation_may_answer_400(doc)
    d5_limit_and_offset_have_maxima(doc, max_result_count)
    d6_names_follow_the_id_rule(doc)
    d7_values_may_be_numbers(doc)
    d13_object_values_are_json_values(doc)
    with open(out, "w", encoding="utf-8") as f:
        yaml.safe_dump(doc, f, sort_keys=False, allow_unicode=True)


if __name__ == "__main__":
    main()
