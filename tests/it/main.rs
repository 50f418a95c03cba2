//! Integration tests against the local engines (one test binary, one module per concern).

mod engines;
