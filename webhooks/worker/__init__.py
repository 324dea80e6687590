"""The outbox worker process: delivers the jobs the claims committed, and runs the stripe.fetch job."""
