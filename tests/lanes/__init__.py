"""The full test run (`bin/test --all`) in lanes: the unit tier on every core, then every other test module
in one of four lanes that run side by side, each with a sandbox of its own (its own slot, its own copy of the
checkout). Modules wait in one queue, longest first, and a lane that is free takes the next one; a new test
module joins the queue by being a `tests/**/test_*.py` outside `tests/unit`. docs/testing.md says more."""
