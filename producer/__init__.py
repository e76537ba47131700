"""modelplan's client side: what other services and node agents import or run."""
