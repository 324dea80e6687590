"""Traffic for tests, benchmarks and `loadtest`: realistic events, signed and sent as providers send them."""
