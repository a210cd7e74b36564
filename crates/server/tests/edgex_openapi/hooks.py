"""Schemathesis hooks of the core-data run (../edgex_schemathesis.rs), loaded through
SCHEMATHESIS_HOOKS.

D11 (DEVIATIONS.md): a time-range route answers 400 when end is before start, as core-data does
(edgex-go internal/pkg/utils/http.go, ParseTimeRangeOffsetLimit); OpenAPI cannot say that one
parameter bounds another, so generated windows are put in order (both integers: swapped).
Refusing a reversed window is tested by edgex_routes.rs.
"""

import schemathesis


@schemathesis.hook
def map_path_parameters(context, path_parameters):
    if path_parameters is None:
        return path_parameters
    start, end = path_parameters.get("start"), path_parameters.get("end")
    if isinstance(start, int) and isinstance(end, int) and end < start:
        path_parameters["start"], path_parameters["end"] = end, start
    return path_parameters
