"""modelplan's worker: the state in Redis and the queue's job functions."""
