"""Custom pyinfra facts: what the deploy reads off a host. Parsers are pure functions, tested against
real tool outputs (tests/unit/fixtures/tool_outputs/)."""
