"""Offline placement simulator behind `nri-topology simulate` (see docs/simulate.md).

`workload` reads workload files, `machine_spec` machine descriptions (`bundle` makes them from
sysfs dumps), `runner` drives the policy, `session` ties them to the command line, and
`render_text`, `render_json` and `render_svg` show the result.
"""
